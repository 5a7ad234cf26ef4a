"""l3codec.jit: shared device functions compile in one namespace, and names may not clash."""

import json
import os
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
