"""A stand-in for the part of CuPy that l3codec.gpu, kernels/cuda_c.py and bench/gpu_check's GPU steps
use, over numpy and the host emulation of the CUDA C kernels (kernels/emulation.py): arrays are
numpy arrays with .get()/.set()/.data.ptr, a RawModule's kernels run in the emulator, events read
the wall clock, and the device is an sm_90 with H100-like limits. It lets a machine without a GPU
run the CuPy code paths line by line (their figures are the emulator's); install it with
install(monkeypatch), which also empties cuda_c's module cache before and after."""

from __future__ import annotations

import time
import types

import numpy as np

SM90_ATTRIBUTES = {
    "MultiProcessorCount": 132, "ClockRate": 1_755_000, "MaxThreadsPerMultiProcessor": 2048,
    "MaxRegistersPerMultiprocessor": 65536, "MaxSharedMemoryPerMultiprocessor": 233472,
    "MaxSharedMemoryPerBlockOptin": 232448, "MaxBlocksPerMultiprocessor": 32,
    "ReservedSharedMemoryPerBlock": 1024,
}
REGISTERS = 64  # what funcGetAttribute reports for every kernel
BLOCKS_PER_SM = 5  # what the occupancy call reports: the check must pass on the driver's figure as given


class ndarray(np.ndarray):  # noqa: N801 - CuPy's name
    """A numpy array posing as a device array."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def get(self, stream=None):
        return np.array(self)

    def set(self, array, stream=None):
        self[...] = array


def asarray(array, dtype=None):
    return np.array(array, dtype=dtype).view(ndarray)


def empty(shape, dtype=np.float64):
    return np.zeros(shape, dtype).view(ndarray)  # zeroed: runs must not depend on what was there


def zeros(shape, dtype=np.float64):
    return np.zeros(shape, dtype).view(ndarray)


def asnumpy(array):
    return np.array(array)


class RawKernel:
    def __init__(self, name: str):
        self.name, self.num_regs, self.max_dynamic_shared_size_bytes = name, REGISTERS, 48 * 1024
        self.kernel = types.SimpleNamespace(ptr=id(self))

    def __call__(self, grid, block, args, shared_mem=0):
        from l3codec.kernels import cuda_c, emulation

        if shared_mem > max(self.max_dynamic_shared_size_bytes, 48 * 1024):
            raise RuntimeError(f"{self.name}: {shared_mem} bytes of shared memory without the opt-in")
        library = emulation.kernel_library()
        order, seed = emulation.ORDERS["forward"], 0
        if self.name == cuda_c.EXPAND_KERNEL:
            data, expansions, count, status = args
            result = library.l3emu_expand(grid[0], block[0], shared_mem, order, seed, data.ctypes.data,
                                          expansions.ctypes.data, int(count), status.ctypes.data)
        elif self.name == cuda_c.ANS_KERNEL:  # the kind-10 table stage
            data, size, tables, count = args
            result = library.l3emu_ans_tables(grid[0], block[0], order, seed, data.ctypes.data, int(size),
                                              tables.ctypes.data, int(count))
        else:
            mode = next(key for key, kernel in cuda_c.KERNELS.items() if kernel.kernel == self.name)
            data, size, starts, ends, items, tasks, count, out, status = args
            block = tuple(block) + (1,) * (3 - len(block))
            result = library.l3emu_launch(emulation.KERNEL_INDEX[mode], grid[0], *block, shared_mem, order,
                                          seed, data.ctypes.data, int(size), starts.ctypes.data,
                                          ends.ctypes.data, items.ctypes.data, tasks.ctypes.data, int(count),
                                          out.ctypes.data, status.ctypes.data)
        if result != 0:
            raise RuntimeError(f"{self.name}: {library.l3emu_last_error().decode()}")


class RawModule:
    def __init__(self, code: str, options=()):
        self.code, self.kernels = code, {}

    def get_function(self, name: str) -> RawKernel:
        if name not in self.code:
            raise RuntimeError(f"no kernel {name} in this module")
        return self.kernels.setdefault(name, RawKernel(name))


class _Context:
    """A context manager with nothing to wait for: the emulator runs each launch to its end."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


class Stream(_Context):
    pass


class Device(_Context):
    id, compute_capability, attributes = 0, "90", SM90_ATTRIBUTES
    mem_info = (140 * 2**30, 141 * 2**30)

    def __init__(self, device=None):
        pass


class Event:
    seconds = 0.0

    def record(self, stream=None):
        self.seconds = time.perf_counter()

    def synchronize(self):
        pass


def get_elapsed_time(start: Event, end: Event) -> float:
    return (end.seconds - start.seconds) * 1e3


def occupancy(pointer, threads, shared):
    return BLOCKS_PER_SM


cuda = types.SimpleNamespace(
    Device=Device, Stream=Stream, Event=Event, get_elapsed_time=get_elapsed_time,
    get_current_stream=Stream, alloc_pinned_memory=bytearray,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 13000,
                                  driverGetVersion=lambda: 13000,
                                  getDeviceProperties=lambda device: {"name": b"Emulated sm_90 (fake CuPy)"}),
    driver=types.SimpleNamespace(CU_FUNC_ATTRIBUTE_NUM_REGS=4,
                                 funcGetAttribute=lambda attribute, pointer: REGISTERS,
                                 occupancyMaxActiveBlocksPerMultiprocessor=occupancy),
    nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)),
)
__version__ = "fake (numpy and the kernel emulator)"


def install(monkeypatch) -> types.ModuleType:
    """This module as `cupy` for the test, with cuda_c's cache of built modules emptied."""
    import sys

    from l3codec.kernels import cuda_c

    module = sys.modules[__name__]
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setattr(cuda_c, "_modules", {})
    return module
