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
    namespace = {}
    marked = {}
    for module in modules:
        namespace.update(vars(module))
        for name, value in vars(module).items():
            if getattr(value, "l3_device", False):
                if marked.get(name, value) is not value:
                    raise RuntimeError(f"two device functions are named {name}")
                marked[name] = value
    marked = list(marked.values())
    compiled = {}
    for func in marked:
        clone = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__)
        clone.__module__ = func.__module__
        compiled[func.__name__] = decorator(clone)
    namespace.update(compiled)
    return types.SimpleNamespace(**compiled)
