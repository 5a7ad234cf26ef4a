"""The GPU path's decode steps: the kernels on a CUDA stream, or the CPU decoder honouring the same tables."""

from __future__ import annotations

import numpy as np
import torch

from .. import codec, gpu
from ..format import STATUS_CORRUPT, L3Error


def gpu_decode_step(backend: str = "cupy"):
    """The decode step of a CUDA device: launch_packed through CuPy or Numba on torch's side stream."""
    if backend not in gpu.BACKENDS:
        raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {backend!r}")

    def decode(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
        if backend == "cupy":
            import cupy

            with cupy.cuda.Device(buffer.device.index):
                cupy_stream = cupy.cuda.ExternalStream(stream.cuda_stream)
                arrays = [cupy.from_dlpack(t) for t in (buffer, out, status)]
                gpu.launch_packed(staged.batch, staged.packed, *arrays, backend="cupy", stream=cupy_stream)
        else:
            from numba import cuda

            arrays = [cuda.as_cuda_array(t) for t in (buffer, out, status)]
            gpu.launch_packed(staged.batch, staged.packed, *arrays, backend="numba",
                              stream=cuda.external_stream(stream.cuda_stream))

    return decode


def host_decode_step(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
    """A decode step on the host with the CPU decoder, honouring the launch tables' output layout:
    for running the GPU path's logic where there is no GPU (and as a reference in tests)."""
    flat, packed = out.numpy(), staged.packed
    data = buffer.numpy()[:packed.data_size]
    order = gpu.status_order(staged.batch)
    position = {int(item): entry for entry, item in enumerate(order)}
    starts = staged.batch.data_offsets
    for launch in staged.batch.launches:
        for record, item in zip(launch.items, launch.item_index):
            info = staged.batch.infos[item]
            y, x, h, w = (int(record[name]) for name in ("region_y", "region_x", "region_h", "region_w"))
            row = w * info.channels * info.dtype.itemsize
            pitch, offset = int(record["out_row_pitch"]), int(record["out_offset"])
            rows = np.lib.stride_tricks.as_strided(
                flat[offset:], shape=(h, row), strides=(pitch, 1), writeable=True
            )
            target = rows.view(info.dtype).reshape(h, w, info.channels)
            try:
                codec.decode(data[starts[item]:starts[item] + info.file_size], region=(y, x, h, w),
                             out=target if info.channels > 1 else target[:, :, 0], verify=False)
            except L3Error:
                status.numpy()[position[int(item)]] = STATUS_CORRUPT
