"""The GPU path's decode steps: the kernels on a CUDA stream, or the CPU decoder honouring the same tables."""

from __future__ import annotations

import torch

from .. import batch as batching
from .. import codec, gpu
from .. import format as fmt
from ..format import STATUS_CORRUPT, L3Error
from ..torch import on_torch_stream
from .finish import region_view


def gpu_decode_step(backend: str = "cupy"):
    """The decode step of a CUDA device: launch_packed through CuPy or Numba on the loader's decode stream."""
    if backend not in gpu.BACKENDS:
        raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {backend!r}")

    def decode(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
        with on_torch_stream(stream, backend) as (backend_stream, as_array):
            arrays = [as_array(t) for t in (buffer, out, status)]
            gpu.launch_packed(staged.batch, staged.packed, *arrays, backend=backend, stream=backend_stream)

    return decode


def host_decode_step(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
    """A decode step on the host with the CPU decoder, honouring the launch tables' output layout:
    for running the GPU path's logic where there is no GPU (and as a reference in tests)."""
    flat = out.numpy()
    # the items' own stream tables: the CPU decoder expands LZ streams itself (no LZ stage)
    data, starts, ends = batching.packed_streams(staged.packed, buffer.numpy())
    order = gpu.status_order(staged.batch)
    position = {int(item): entry for entry, item in enumerate(order)}
    for launch in staged.batch.launches:
        for record, item in zip(launch.items, launch.item_index):
            info = staged.batch.infos[item]
            y, x, h, w = (int(record[name]) for name in ("region_y", "region_x", "region_h", "region_w"))
            target = region_view(flat, int(record["out_offset"]), int(record["out_row_pitch"]), h, w,
                                 info.channels, info.dtype)
            # the item's streams as staged (only those of its tiles), found through the launch tables
            streams = slice(int(record["stream_base"]), int(record["stream_base"]) + info.tiles_x * info.tiles_y
                            * info.channels)
            parsed = fmt.Parsed(info, None, starts[streams], ends[streams], 0)
            try:
                codec.decode_parsed(data, parsed, region=(y, x, h, w),
                                    out=target if info.channels > 1 else target[:, :, 0])
            except L3Error:
                status.numpy()[position[int(item)]] = STATUS_CORRUPT
