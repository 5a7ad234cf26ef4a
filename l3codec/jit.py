"""Single-source device functions: one plain-Python body, compiled for the CPU or the GPU.

Mode modules mark their pixel and row logic with :func:`device`. The functions stay
plain Python (the readable reference, also what runs under ``NUMBA_DISABLE_JIT=1``).
:func:`compile_device_functions` rebuilds them in a fresh namespace where every
marked function is replaced by its compiled twin, so calls between them resolve to
compiled code under ``numba.njit`` and ``numba.cuda.jit(device=True)`` alike.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import pathlib
import sys
import types

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher


def device(func=None, /, *, cpu_inline=False):
    """Mark a plain function as shared pixel/row logic: ``@device`` or ``@device(cpu_inline=True)``.

    cpu_inline: the CPU build inlines it where it is called (the GPU build inlines everything).
    Marked so are the per-sample and per-row functions, and helpers called from one place: a call
    that passes arrays increfs and decrefs each, atomically, every time (as calls, the per-sample
    functions cost the compact decoder 2.5x; fast's row decoders 21.5 -> 19.8 ms per hires2048
    frame). The rest compile once and are called: inlined everywhere, the first use would compile
    twice as long."""

    def mark(function):
        function.l3_device = True
        function.l3_cpu_inline = cpu_inline
        return function

    return mark if func is None else mark(func)


def compile_device_functions(modules, decorator, replacements=None) -> types.SimpleNamespace:
    """Compile every marked function of modules with decorator, in one namespace holding the
    modules' globals. A name that means different things in two modules is refused: one
    would silently replace the other inside the compiled functions. replacements maps names
    of marked functions to a target's own compiled version of them (one instruction where
    the plain Python loops, say), which the tests hold to the plain one."""
    replacements = replacements or {}
    namespace = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if name in namespace and not _same(namespace[name], value):
                raise RuntimeError(f"{name} means different things in {module.__name__} and an earlier module")
            namespace[name] = value
    marked = [value for value in namespace.values() if getattr(value, "l3_device", False)]
    compiled = {}
    for func in marked:
        if func.__name__ in replacements:
            compiled[func.__name__] = replacements[func.__name__]
            continue
        clone = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__)
        clone.__module__ = func.__module__
        clone.__dict__.update(func.__dict__)
        compiled[func.__name__] = decorator(clone)
    namespace.update(compiled)
    return types.SimpleNamespace(**compiled)


def _same(a, b) -> bool:
    return a is b or (isinstance(a, (int, float, str)) and type(a) is type(b) and a == b)


# ---------------------------------------------------------------- an on-disk cache keyed on what it compiles


def _package_of(name: str) -> str:
    return name.partition(".")[0]


def _compiled_here(module) -> bool:
    """Whether module defines a function that compiles: a device function or a Numba dispatcher."""
    return any(_compiled_module_name(value) == module.__name__ for value in vars(module).values())


def _compiled_module_name(value):
    """The module a device function or Numba dispatcher was written in, else None."""
    if getattr(value, "l3_device", False):
        return value.__module__
    py_func = getattr(value, "py_func", None)
    if isinstance(value, Dispatcher) and py_func is not None:
        return py_func.__module__
    return None


def compiled_modules(modules) -> list:
    """modules and, transitively, the modules of their own package whose functions they compile or
    inline (device functions, dispatchers, modules defining either): every source whose text can
    change what compiles. A module they merely import (first_use, format's functions) is not one."""
    found = {module.__name__: module for module in modules}
    pending = list(modules)
    while pending:
        module = pending.pop()
        package = _package_of(module.__name__)
        for value in vars(module).values():
            if isinstance(value, types.ModuleType):
                name = value.__name__ if _compiled_here(value) else None
            else:
                name = _compiled_module_name(value)
            if name is None or name in found or _package_of(name) != package or name not in sys.modules:
                continue
            found[name] = sys.modules[name]
            pending.append(found[name])
    return [found[name] for name in sorted(found)]


def code_text(path) -> str:
    """The code of a source file without its comments, docstrings and line numbers (ast.dump)."""
    return _parsed(str(path))[0]


def _parsed(path: str) -> tuple:
    """(code_text, {(name, attribute) read as name.attribute}) of a file, parsed once per version."""
    stat = os.stat(path)
    return _parsed_version(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _parsed_version(path: str, mtime_ns: int, size: int) -> tuple:
    tree = ast.parse(pathlib.Path(path).read_bytes())
    reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            reads.add((node.value.id, node.attr))
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree), frozenset(reads)


def _constant_text(value):
    """A value as Numba would freeze it, as text; None for what compiled code cannot read as a constant."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, np.ndarray):
        return f"ndarray:{value.dtype.str}:{value.shape}:{hashlib.sha256(value.tobytes()).hexdigest()}"
    if isinstance(value, (np.generic, np.dtype)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [_constant_text(item) for item in value]
        if None in items:
            return None
        if isinstance(value, (set, frozenset)):
            items.sort()
        return f"{type(value).__name__}:({','.join(items)})"
    return None


def constants_text(modules) -> str:
    """The values of the module-level constants of modules, and of those they read from other modules of
    their package as module.NAME (fmt.STATUS_OK): Numba freezes a global's value into what it compiles."""
    lines = []
    for module in modules:
        package = _package_of(module.__name__)
        lines += [f"{module.__name__}.{name}={text}" for name, value in sorted(vars(module).items())
                  if not name.startswith("__") and (text := _constant_text(value)) is not None]
        for name, attribute in _parsed(module.__file__)[1]:
            other = vars(module).get(name)
            if isinstance(other, types.ModuleType) and _package_of(other.__name__) == package:
                text = _constant_text(getattr(other, attribute, None))
                if text is not None:
                    lines.append(f"{other.__name__}.{attribute}={text}")
    return "\n".join(sorted(set(lines)))


def compile_key(modules) -> str:
    """SHA-256 over the code (code_text) of compiled_modules(modules) and of this module, which compiles
    them, and over the constants they read (constants_text)."""
    compiled = compiled_modules(modules)
    hasher = hashlib.sha256()
    for module in [*compiled, sys.modules[__name__]]:
        hasher.update(f"{module.__name__}\0{code_text(module.__file__)}\0".encode())
    hasher.update(constants_text(compiled).encode())
    return hasher.hexdigest()


_noticed = set()


def cached_njit(modules, notice=None, on_miss=None, **options):
    """numba.njit with an on-disk cache whose key includes compile_key(modules); notice is
    printed to stderr, once per process, before the first compilation the cache cannot spare;
    on_miss(cache folder) is called before each.

    Numba keys its cache on the decorated function's own file and bytecode, so code it
    compiles in from other files (the device functions) would be loaded stale after an edit.
    """
    from numba.core.caching import FunctionCache

    digest = compile_key(modules)

    class SourceKeyedCache(FunctionCache):
        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), digest)

        def load_overload(self, sig, target_context):
            result = super().load_overload(sig, target_context)
            if result is None and notice and notice not in _noticed:
                _noticed.add(notice)
                print(notice, file=sys.stderr, flush=True)
            if result is None and on_miss:
                on_miss(self.cache_path)
            return result

    def decorate(func):
        dispatcher = numba.njit(**options)(func)
        if not numba.config.DISABLE_JIT:  # else njit returns func itself
            dispatcher._cache = SourceKeyedCache(dispatcher.py_func)
        return dispatcher

    return decorate
