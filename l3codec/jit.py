"""Single-source device functions: one plain-Python body, compiled for the CPU or the GPU.

Mode modules mark their pixel and row logic with :func:`device`. The functions stay
plain Python (the readable reference, also what runs under ``NUMBA_DISABLE_JIT=1``).
:func:`compile_device_functions` rebuilds them in a fresh namespace where every
marked function is replaced by its compiled twin, so calls between them resolve to
compiled code under ``numba.njit`` and ``numba.cuda.jit(device=True)`` alike.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import pathlib
import sys
import types

import numba


def device(func):
    """Mark a plain function as shared pixel/row logic."""
    func.l3_device = True
    return func


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
        compiled[func.__name__] = decorator(clone)
    namespace.update(compiled)
    return types.SimpleNamespace(**compiled)


def _same(a, b) -> bool:
    return a is b or (isinstance(a, (int, float, str)) and type(a) is type(b) and a == b)


# ---------------------------------------------------------------- an on-disk cache keyed on all it compiles


def source_files(modules) -> list:
    """Files of modules and, transitively, of the modules of their own package they import
    (``from . import x``, ``from .x import y``): everything whose text can change what compiles."""
    files = {}
    pending = [module.__name__ for module in modules]
    while pending:
        name = pending.pop()
        module = sys.modules.get(name) or importlib.import_module(name)
        path = getattr(module, "__file__", None)
        if path is None or path in files:
            continue
        files[path] = name
        package = module.__package__ or ""
        for node in ast.walk(ast.parse(pathlib.Path(path).read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                if node.module is None:  # `from . import x`: x is a submodule of the package
                    pending += [f"{base}.{alias.name}" for alias in node.names
                                if importlib.util.find_spec(f"{base}.{alias.name}") is not None]
                else:
                    pending.append(base)
    return sorted(files)


def source_digest(modules) -> str:
    """SHA-256 over the contents of source_files(modules)."""
    hasher = hashlib.sha256()
    for path in source_files(modules):
        hasher.update(pathlib.Path(path).name.encode() + b"\0")
        hasher.update(pathlib.Path(path).read_bytes())
    return hasher.hexdigest()


_noticed = set()


def cached_njit(modules, notice=None, on_miss=None, **options):
    """numba.njit with an on-disk cache whose key includes source_digest(modules); notice is
    printed to stderr, once per process, before the first compilation the cache cannot spare;
    on_miss(cache folder) is called before each.

    Numba keys its cache on the decorated function's own file and bytecode, so code it
    compiles in from other files (the device functions) would be loaded stale after an edit.
    """
    from numba.core.caching import FunctionCache

    digest = source_digest(modules)

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
