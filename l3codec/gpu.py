"""Batched GPU decoding: host validation, one host-to-device copy, one launch per mode.

    images = l3codec.gpu.decode_batch([data0, data1, ...], backend="cupy")

Backends: "cupy" runs the CUDA C kernels in kernels/*.cu through CuPy; "numba"
runs the Numba CUDA kernels, which share their pixel logic with the CPU decoder
(and also run under NUMBA_ENABLE_CUDASIM=1). Both take the launch tables that
l3codec.batch builds and validates on the host, so the kernels never see an
unchecked offset. Results are HWC (HW for one channel) uint8/uint16 device arrays.
"""

from __future__ import annotations

import numpy as np

from . import batch as batching
from . import format as fmt
from .format import L3Error

BACKENDS = ("cupy", "numba")


def _host_bytes(item):
    """Compressed bytes on the host. Device items are copied back for validation; their
    payload checksum is not checked then (headers, tables and sizes still are)."""
    if hasattr(item, "__cuda_array_interface__"):
        if hasattr(item, "get"):
            return item.get(), False
        from numba import cuda

        return cuda.as_cuda_array(item).copy_to_host(), False
    return item, True


def decode_batch(items, /, *, backend: str = "cupy", regions=None, out=None, stream=None, verify: bool = True):
    """Decode one item or a list of items (bytes, numpy buffers or device buffers) on the GPU.

    regions: None, or one (y, x, h, w) or None per item; only the tiles a region touches
    are decoded and only the region is written.
    out: a device uint8 buffer of at least the batch's output size, or, when every item
    has the same shape and dtype, a device array of shape (N, *shape) to fill.
    Returns a list of device arrays (one array for a single item). A bad item raises
    L3Error naming its index; nothing is launched before every item has been validated.
    """
    if backend not in BACKENDS:
        raise L3Error(f"backend must be one of {BACKENDS}, not {backend!r}")
    single = not isinstance(items, (list, tuple))
    item_list = [items] if single else list(items)
    if single and regions is not None:
        regions = [regions]
    host = [_host_bytes(item) for item in item_list]
    prepared = batching.prepare([data for data, _ in host], regions, verify=[verify and v for _, v in host])
    run = _run_numba if backend == "numba" else _run_cupy
    out_bytes, status = run(prepared, out, stream)
    bad = np.flatnonzero(status)
    if bad.size:
        details = "; ".join(
            f"item {i}: {fmt.STATUS_MESSAGES.get(int(status[i]), f'status {int(status[i])}')}" for i in bad[:5]
        )
        raise L3Error(f"{bad.size} corrupt batch item(s): {details}")
    images = batching.split_output(prepared, out_bytes)
    return images[0] if single else images


def _check_out(prepared, out, nbytes_of):
    """The flat uint8 view of a caller's out buffer, after checking it fits."""
    if len(set(zip(prepared.shapes, prepared.dtypes))) == 1:
        stacked = (len(prepared.shapes), *prepared.shapes[0])
        if tuple(out.shape) == stacked and out.dtype == prepared.dtypes[0]:
            return out.reshape(-1).view(np.uint8)
    if out.dtype == np.uint8 and out.ndim == 1 and nbytes_of(out) >= prepared.out_size:
        return out
    raise L3Error(
        f"out must be a uint8 buffer of {prepared.out_size} bytes, or (N, *shape) for same-shape items"
    )


def _run_numba(prepared, out, stream):
    from numba import cuda

    from .kernels import numba_kernels

    stream = stream if stream is not None else cuda.default_stream()
    pinned = cuda.pinned_array(prepared.data.shape, np.uint8)
    pinned[:] = prepared.data
    data = cuda.to_device(pinned, stream=stream)
    starts = cuda.to_device(prepared.stream_starts, stream=stream)
    ends = cuda.to_device(prepared.stream_ends, stream=stream)
    if out is None:
        out_bytes = cuda.device_array(max(prepared.out_size, 1), np.uint8, stream=stream)
    else:
        out_bytes = _check_out(prepared, cuda.as_cuda_array(out), lambda a: a.size)
    status = np.zeros(len(prepared.infos), np.int32)
    for launch in prepared.launches:
        grid, block, shared, rows, stride = numba_kernels.launch_geometry(launch)
        items = cuda.to_device(launch.items.view(np.int64).reshape(len(launch.items), -1), stream=stream)
        tasks = cuda.to_device(launch.tasks.view(np.int64).reshape(len(launch.tasks), -1), stream=stream)
        launch_status = cuda.to_device(np.zeros(len(launch.items), np.int32), stream=stream)
        kernel = numba_kernels.kernel_for(launch.mode)
        kernel[grid, block, stream, shared](data, starts, ends, items, tasks, rows, stride, out_bytes, launch_status)
        status[launch.item_index] = launch_status.copy_to_host(stream=stream)
    stream.synchronize()
    return out_bytes, status


def _run_cupy(prepared, out, stream):
    try:
        import cupy
    except ImportError as error:
        raise L3Error("backend 'cupy' needs CuPy: pip install 'l3codec[gpu]'") from error
    from .kernels import cuda_c

    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    with stream:
        pinned = cupy.cuda.alloc_pinned_memory(prepared.data.nbytes)
        staging = np.frombuffer(pinned, np.uint8, prepared.data.size)
        staging[:] = prepared.data
        data = cupy.empty(prepared.data.size, np.uint8)
        data.set(staging, stream=stream)
        starts = cupy.asarray(prepared.stream_starts)
        ends = cupy.asarray(prepared.stream_ends)
        if out is None:
            out_bytes = cupy.empty(max(prepared.out_size, 1), np.uint8)
        else:
            out_bytes = _check_out(prepared, cupy.asarray(out), lambda a: a.size)
        status = np.zeros(len(prepared.infos), np.int32)
        for launch in prepared.launches:
            launch_status = cupy.zeros(len(launch.items), np.int32)
            cuda_c.launch(launch, data, starts, ends, out_bytes, launch_status, stream=stream)
            status[launch.item_index] = launch_status.get()
    return out_bytes, status
