"""Batched GPU decoding: host validation, one host-to-device copy, one launch per mode and channel count.

    images = l3codec.gpu.decode_batch([data0, data1, ...], backend="cupy")

Backends: "cupy" runs the CUDA C kernels in kernels/*.cu through CuPy; "numba"
runs the Numba CUDA kernels, which share their pixel logic with the CPU decoder
(and also run under NUMBA_ENABLE_CUDASIM=1). Both take the launch tables that
l3codec.batch builds and validates on the host, so the kernels never see an
unchecked offset. Results are HWC (HW for one channel) uint8/uint16 device arrays.
"""

from __future__ import annotations

import threading

import numpy as np

from . import batch as batching
from . import format as fmt
from .format import L3Error

BACKENDS = ("cupy", "numba")


def host_bytes(item):
    """Compressed bytes on the host, where they are validated: device items are copied back."""
    if hasattr(item, "__cuda_array_interface__") and hasattr(item, "get"):  # a CuPy array
        return item.get()
    if hasattr(item, "copy_to_host") or hasattr(item, "__cuda_array_interface__"):
        return _numba_device_array(item).copy_to_host()
    return item


def _numba_device_array(obj):
    """obj as a Numba device array, without copying; L3Error for anything not on the device."""
    from numba import cuda

    if hasattr(obj, "copy_to_host"):  # already one (the simulator's too, which has no array interface)
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        return cuda.as_cuda_array(obj)
    raise _not_on_device(obj)


def _cupy_device_array(obj):
    """obj as a CuPy array, without copying; L3Error for anything not on the device."""
    import cupy

    if isinstance(obj, cupy.ndarray):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        # zero-copy; DLPack where offered (torch), which also orders the tensor's stream before ours
        return cupy.from_dlpack(obj) if hasattr(obj, "__dlpack__") else cupy.asarray(obj)
    raise _not_on_device(obj)


def _not_on_device(obj) -> L3Error:
    # a host out would be copied to the device and the results lost with the copy
    return L3Error(f"out must be a device array (CuPy, Numba or a CUDA torch tensor), not {type(obj).__name__}")


def decode_batch(
    items, /, *, backend: str = "cupy", regions=None, out=None, stream=None, verify: bool = True,
    max_pixels: int = fmt.MAX_PIXELS,
):
    """Decode one item or a list of items (bytes, numpy buffers or device buffers) on the GPU.

    regions: None, or one (y, x, h, w) or None per item; only the tiles a region touches
    are decoded and only the region is written.
    out: a C-contiguous device array: uint8 of at least the batch's output size, or, when
    every item has the same shape and dtype, of shape (N, *shape) and that dtype.
    verify: check every item's payload checksum (device items included) before launching.
    max_pixels: the most pixels the whole batch may decode.
    Returns a list of device arrays (one array for a single item). A bad item raises
    L3Error naming its index; nothing is launched before every item has been validated.
    """
    single = not isinstance(items, (list, tuple))
    item_list = [items] if single else list(items)
    if single and regions is not None:
        regions = [regions]
    prepared = prepare(item_list, regions, verify=verify, max_pixels=max_pixels)
    output = decode_prepared(prepared, backend=backend, out=out, stream=stream)
    images = batching.split_output(prepared, output)
    return images[0] if single else images


def prepare(items, regions=None, /, *, verify: bool = True, max_pixels: int = fmt.MAX_PIXELS) -> batching.Batch:
    """Validate a list of items on the host and build their launch tables (batch.prepare);
    device items are copied back for it."""
    return batching.prepare([host_bytes(item) for item in items], regions, verify=verify, max_pixels=max_pixels)


def decode_prepared(prepared: batching.Batch, /, *, backend: str = "cupy", out=None, stream=None):
    """Decode a prepared batch into out (or a new device buffer) and return the flat uint8 output;
    batch.split_output gives the per-item arrays. A corrupt item raises L3Error naming it."""
    if backend not in BACKENDS:
        raise L3Error(f"backend must be one of {BACKENDS}, not {backend!r}")
    run = _run_numba if backend == "numba" else _run_cupy
    output, entries = run(prepared, out, stream)
    status = batching.status_codes(entries)
    bad = np.flatnonzero(status)
    if bad.size:
        details = "; ".join(
            f"item {i}: {fmt.STATUS_MESSAGES.get(int(status[i]), f'status {int(status[i])}')}" for i in bad[:5]
        )
        raise L3Error(f"{bad.size} corrupt batch item(s): {details}")
    return output


def _flat_out(prepared, array, c_contiguous: bool):
    """The flat uint8 view of a caller's device out array, after checking that it fits."""
    if not c_contiguous:
        raise L3Error("out must be C-contiguous")
    if prepared.same_shape:
        stacked = (len(prepared.shapes), *prepared.shapes[0])
        if tuple(array.shape) == stacked and array.dtype == prepared.dtypes[0]:
            return array.reshape(-1).view(np.uint8)
    if array.dtype == np.uint8 and array.ndim == 1 and array.size >= prepared.out_size:
        return array
    raise L3Error(
        f"out must be a uint8 buffer of {prepared.out_size} bytes, or (N, *shape) for same-shape items"
    )


status_order = batching.status_order  # the batch item of each entry of launch_packed's status array


def launch_packed(prepared: batching.Batch, layout: batching.PackedLayout, buffer, out, status, /, *,
                  backend: str = "cupy", stream=None) -> None:
    """Launch every mode's kernel for a batch whose packed buffer (batch.write_packed) is on the device.

    buffer, out: flat uint8 device arrays of the backend (CuPy or Numba), buffer of layout.device_size
    bytes (the packed bytes, then room for the expanded LZ streams and the kind-10 table blocks); status:
    a zeroed int32 device array, one entry per item, in status_order(prepared), left 0 or the
    batch.status_key of the item's first failing stream (batch.status_codes gives the codes). Nothing is
    copied or synchronised here: the caller copies the packed bytes in before and reads status after, once
    per batch. The stages run first, in order: the LZ expansion, then the kind-10 table blocks (the Numba
    backend's numba_kernels.build_ans_tables, the CUDA C one's cuda_c.launch_ans_tables).
    """
    data, starts, ends, tables, expansions = batching.packed_views(layout, prepared.launches, buffer)
    ans_tables = batching.packed_ans_records(layout, buffer)
    first = 0
    if backend == "numba":
        from .kernels import numba_kernels

        geometries = [numba_kernels.launch_geometry(launch) for launch in prepared.launches]  # may refuse
        if layout.expansion_count:  # the LZ streams, expanded into the scratch area first (same stream)
            numba_kernels.expand_lz_streams(data, expansions, status, stream)
        if layout.ans_count:  # then the kind-10 streams' table blocks (ans_stage.py), before any decode
            numba_kernels.build_ans_tables(data, ans_tables, stream)
        for launch, (items, tasks), (kernel, grid, block, shared, extra) in zip(prepared.launches, tables, geometries):
            launch_status = status[first:first + len(launch.items)]
            kernel[grid, block, stream, shared](data, starts, ends, items, tasks, *extra, out, launch_status)
            first += len(launch.items)
        return
    from .kernels import cuda_c

    if layout.expansion_count:
        cuda_c.launch_expand(data, expansions, status, stream=stream)
    if layout.ans_count:
        cuda_c.launch_ans_tables(data, ans_tables, stream=stream)
    for launch, (items, tasks) in zip(prepared.launches, tables):
        launch_status = status[first:first + len(launch.items)]
        cuda_c.launch(launch, data, starts, ends, out, launch_status, stream=stream, items=items, tasks=tasks)
        first += len(launch.items)


def _run_numba(prepared, out, stream):
    from numba import cuda

    if not cuda.is_available():
        raise RuntimeError(
            "backend 'numba' found no CUDA GPU (NUMBA_ENABLE_CUDASIM=1 runs the kernels in numba's simulator)"
        )
    from .kernels import numba_kernels

    for launch in prepared.launches:
        numba_kernels.launch_geometry(launch)  # refuses tiles it cannot stage before anything is allocated
    stream = stream if stream is not None else cuda.default_stream()
    if out is None:
        output = cuda.device_array(max(prepared.out_size, 1), np.uint8, stream=stream)
    else:
        out = _numba_device_array(out)
        output = _flat_out(prepared, out, out.is_c_contiguous())
    layout = batching.packed_layout(prepared)
    staging = numba_staging(layout.size)
    batching.write_packed(prepared, layout, staging)
    buffer = cuda.device_array(max(layout.device_size, 1), np.uint8, stream=stream)
    buffer[:max(layout.size, 1)].copy_to_device(staging, stream=stream)  # one copy: data and tables
    status_device = cuda.to_device(np.zeros(len(prepared.infos), np.int32), stream=stream)
    launch_packed(prepared, layout, buffer, output, status_device, backend="numba", stream=stream)
    status = np.zeros(len(prepared.infos), np.int32)
    status[status_order(prepared)] = status_device.copy_to_host(stream=stream)
    stream.synchronize()  # the asynchronous copy above is valid from here on
    return output, status


_numba_pinned = threading.local()


def numba_staging(size: int) -> np.ndarray:
    """This thread's pinned staging buffer, grown to at least `size` bytes and reused by later
    batches (page-locking per call cost more than the copy): safe because _run_numba synchronizes
    its stream before it returns, so no copy from the buffer is still in flight."""
    from numba import cuda

    buffer = getattr(_numba_pinned, "buffer", None)
    if buffer is None or buffer.size < max(size, 1):
        buffer = _numba_pinned.buffer = cuda.pinned_array(max(size, 1), np.uint8)
    return buffer[:max(size, 1)]


def _run_cupy(prepared, out, stream):
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError("backend 'cupy' needs CuPy: pip install 'l3codec[gpu]'") from error

    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    with stream:
        if out is None:
            output = cupy.empty(max(prepared.out_size, 1), np.uint8)
        else:
            out = _cupy_device_array(out)
            output = _flat_out(prepared, out, out.flags.c_contiguous)
        layout = batching.packed_layout(prepared)
        pinned = cupy.cuda.alloc_pinned_memory(max(layout.size, 1))
        staging = np.frombuffer(pinned, np.uint8, layout.size)
        batching.write_packed(prepared, layout, staging)
        buffer = cupy.empty(max(layout.device_size, 1), np.uint8)
        buffer[:layout.size].set(staging, stream=stream)  # one copy: data and tables
        status_device = cupy.zeros(len(prepared.infos), np.int32)
        launch_packed(prepared, layout, buffer, output, status_device, backend="cupy", stream=stream)
        status = np.zeros(len(prepared.infos), np.int32)
        status[status_order(prepared)] = status_device.get(stream=stream)  # synchronises the stream
    return output, status
