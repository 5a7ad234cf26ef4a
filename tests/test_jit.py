"""l3codec.jit: shared device functions compile in one namespace, and names may not clash."""

import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

from l3codec.jit import compile_device_functions, device


def _module(name, scale):
    module = types.ModuleType(name)
    module.SCALE = scale

    @device
    def scaled(x):
        return x * SCALE  # noqa: F821 - resolved in the compiled namespace

    module.scaled = scaled
    return module


def test_device_functions_see_the_shared_namespace():
    compiled = compile_device_functions([_module("a", 3)], lambda f: f)
    assert compiled.scaled(2) == 6


def test_the_cpu_build_inlines_exactly_the_functions_marked_so():
    import numba

    from l3codec import compact, cpu

    if numba.config.DISABLE_JIT:
        pytest.skip("nothing compiles under NUMBA_DISABLE_JIT")
    marked = {name: value.l3_cpu_inline for name, value in vars(compact).items()
              if getattr(value, "l3_device", False)}
    assert any(marked.values()) and not all(marked.values())
    for name, cpu_inline in marked.items():
        if name in cpu._REPLACEMENTS:
            continue
        options = getattr(cpu._dev, name).targetoptions
        assert (options.get("inline") == "always") == cpu_inline, name


def test_a_name_with_two_meanings_is_refused():
    with pytest.raises(RuntimeError, match="SCALE means different things"):
        compile_device_functions([_module("a", 3), _module("b", 4)], lambda f: f)


MAIN = """
import sys
import numba
from l3codec.jit import cached_njit, compile_device_functions
from . import dep

shifted = compile_device_functions([dep], numba.njit).shifted


@cached_njit([sys.modules[__name__]], notice="compiling")
def run(x):
    return shifted(x)
"""
DEP = """
from l3codec.jit import device

OFFSET = {offset}


@device
def shifted(x):
    return x + OFFSET
"""
RUN = "import json, cachepkg.main as m; print(json.dumps([m.run(1), sum(m.run.stats.cache_hits.values())]))"


@pytest.mark.compile
def test_cache_follows_an_edit_of_a_compiled_module_it_imports(tmp_path):
    """Numba alone keys the cache on main.py: after an edit of dep.py it would load the old code."""
    package = tmp_path / "cachepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(MAIN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))

    def run(offset):
        (package / "dep.py").write_text(DEP.format(offset=offset))
        done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True,
                              timeout=300, check=True)
        return json.loads(done.stdout), "compiling" in done.stderr

    assert run(1) == ([2, 0], True)  # compiled, and said so
    assert run(1) == ([2, 1], False)  # loaded from the cache, silently
    assert run(5) == ([6, 0], True)  # dep.py changed: compiled again


def test_the_compile_notice_names_what_compiles():
    from l3codec import first_use

    assert "compact encoder for 8-bit images of 3 channels" in first_use.notice(("encode", "compact", 8, 3))
    assert "fast decoder for 16-bit images of 1 channel " in first_use.notice(("decode", "fast", 16, 1))
    assert first_use.notice(None).startswith("l3codec: compiling the CPU codec (first use")


def test_the_key_covers_the_modules_compiled_not_those_merely_imported():
    from l3codec import cpu, jit

    names = {module.__name__ for module in jit.compiled_modules([cpu])}
    assert {"l3codec.cpu", "l3codec.compact", "l3codec.fast", "l3codec.bitio", "l3codec.palette"} <= names
    assert not names & {"l3codec.first_use", "l3codec.format", "l3codec.codec", "l3codec.jit"}


def test_code_text_ignores_comments_and_docstrings_not_code(tmp_path):
    from l3codec.jit import code_text

    source = '"""Module."""\nLIMIT = 3\n\n\ndef f(x):\n    """Doc."""\n    return x + LIMIT  # why\n'
    variants = {
        "same": source.replace("Module.", "Another module.").replace("# why", "").replace("Doc.", "\n\n"),
        "other": source.replace("x + LIMIT", "x - LIMIT"),
    }
    texts = {}
    for name, text in [("source", source), *variants.items()]:
        (tmp_path / f"{name}.py").write_text(text)
        texts[name] = code_text(tmp_path / f"{name}.py")
    assert texts["same"] == texts["source"] != texts["other"]


def test_a_constant_the_codec_reads_changes_the_key(monkeypatch):
    """Numba freezes globals into what it compiles: a constant read from format.py (fmt.STATUS_OK in
    cpu.py) or a compiled module's own changes the key; one of a module the code does not read does not."""
    from l3codec import compact, cpu, first_use, jit
    from l3codec import format as fmt

    key = jit.compile_key([cpu])
    monkeypatch.setattr(first_use, "WARMUP_WAIT_S", first_use.WARMUP_WAIT_S + 1)
    monkeypatch.setattr(fmt, "VERSION", fmt.VERSION + 1)  # not read by cpu.py's compiled modules
    assert jit.compile_key([cpu]) == key
    with monkeypatch.context() as patch:
        patch.setattr(fmt, "STATUS_OK", fmt.STATUS_OK + 10)
        assert jit.compile_key([cpu]) != key
    with monkeypatch.context() as patch:
        patch.setattr(compact, "MAX_PREFIX_BYTES", compact.MAX_PREFIX_BYTES + 1)
        assert jit.compile_key([cpu]) != key
    assert jit.compile_key([cpu]) == key


KEY_PROGRAM = "from l3codec import cpu, jit; print(jit.compile_key([cpu]))"


@pytest.mark.processes
def test_edits_of_a_package_copy_keep_or_change_the_key(tmp_path):
    """On a copy of the package: a comment and a function changed in first_use.py, a docstring of
    format.py, a comment in compact.py keep the compile cache; a format constant the codec reads does not."""
    import shutil

    import l3codec

    copy = tmp_path / "l3codec"
    source = pathlib.Path(l3codec.__file__).parent
    shutil.copytree(source, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def key():
        done = subprocess.run([sys.executable, "-c", KEY_PROGRAM], env=env, capture_output=True, text=True,
                              timeout=300, check=True, cwd=tmp_path)
        return done.stdout.strip()

    def edit(name, old, new):
        path = copy / name
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))

    original = key()
    edit("first_use.py", "def writable(folder: str) -> bool:\n",
         "def writable(folder: str) -> bool:  # edited\n    folder = str(folder)\n")
    edit("format.py", '"""The L3 on-disk layout, defined once', '"""The L3 layout on disk, defined once')
    edit("compact.py", "\nimport numpy as np\n", "\nimport numpy as np  # a comment\n")
    assert key() == original
    edit("format.py", "\nSTATUS_CORRUPT = 4\n", "\nSTATUS_CORRUPT = 14\n")
    assert key() != original
