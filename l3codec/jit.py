"""Single-source device functions: one plain-Python body, compiled for the CPU or the GPU.

Mode modules mark their pixel and row logic with :func:`device`. The functions stay
plain Python (the readable reference, also what runs under ``NUMBA_DISABLE_JIT=1``).
:func:`compile_device_functions` rebuilds them in a fresh namespace where every
marked function is replaced by its compiled twin, so calls between them resolve to
compiled code under ``numba.njit`` and ``numba.cuda.jit(device=True)`` alike.
"""

from __future__ import annotations

import types


def device(func):
    """Mark a plain function as shared pixel/row logic."""
    func.l3_device = True
    return func


def compile_device_functions(modules, decorator) -> types.SimpleNamespace:
    """Compile every marked function of modules with decorator, in one namespace holding the
    modules' globals. A name that means different things in two modules is refused: one
    would silently replace the other inside the compiled functions."""
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
        clone = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__)
        clone.__module__ = func.__module__
        compiled[func.__name__] = decorator(clone)
    namespace.update(compiled)
    return types.SimpleNamespace(**compiled)


def _same(a, b) -> bool:
    return a is b or (isinstance(a, (int, float, str)) and type(a) is type(b) and a == b)
