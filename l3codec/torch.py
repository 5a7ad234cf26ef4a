"""PyTorch interop: decode L3 images straight to CHW tensors, like ``torchvision.io.decode_jpeg``.

    images = l3codec.torch.decode([data0, data1], device="cuda")   # list of CHW tensors
    batch = l3codec.torch.decode([data0, data1], device="cuda")    # NCHW when shapes agree

On CUDA the batch decodes in one launch per mode on torch's current stream,
straight into tensors that torch allocated (the kernels see them through the CUDA
array interface, so nothing is copied). On the CPU the Numba decoder writes into
the tensors' memory. The core package never imports this module: torch stays optional.
"""

from __future__ import annotations

import numpy as np
import torch

from . import codec, gpu
from .batch import output_shape
from .format import L3Error


def _chw(array: torch.Tensor) -> torch.Tensor:
    """HW or HWC -> CHW (N... leading dims kept), as a view."""
    if array.ndim == 2:
        return array.unsqueeze(0)
    return array.movedim(-1, -3)


def decode(items, /, *, device="cuda", regions=None, backend: str = "cupy", verify: bool = True):
    """Decode one item or a list into CHW uint8/uint16 tensors on device.

    A list whose results share shape and dtype comes back as one NCHW tensor, decoded
    straight into it; otherwise a list of CHW tensors. regions as for gpu.decode_batch.
    """
    device = torch.device(device)
    single = not isinstance(items, (list, tuple))
    item_list = [items] if single else list(items)
    region_list = [regions] if single else (list(regions) if regions is not None else [None] * len(item_list))
    if len(region_list) != len(item_list):
        raise L3Error(f"{len(region_list)} regions for {len(item_list)} items")
    if device.type not in ("cuda", "cpu"):
        raise L3Error(f"device must be cuda or cpu, not {device}")
    layouts = {_output_layout(item, region) for item, region in zip(item_list, region_list)}
    if len(layouts) == 1 and not single:
        shape, dtype = layouts.pop()
        stacked = torch.empty((len(item_list), *shape), dtype=_TORCH_DTYPES[dtype], device=device)
        _decode_into(item_list, region_list, stacked, device, backend, verify)
        return _chw(stacked)
    results = []
    for item, region in zip(item_list, region_list):
        shape, dtype = _output_layout(item, region)
        target = torch.empty((1, *shape), dtype=_TORCH_DTYPES[dtype], device=device)
        _decode_into([item], [region], target, device, backend, verify)
        results.append(_chw(target[0]))
    return results[0] if single else results


_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}


def _output_layout(item, region) -> tuple:
    """(shape, numpy dtype) that decoding item at region produces; validates the header."""
    info = codec.info(item)
    full = (0, 0, info.height, info.width)
    return output_shape(info, full if region is None else codec.check_region(info, region)), info.dtype


def _decode_into(items, regions, target, device, backend, verify):
    """Decode items into target, an (N, *shape) tensor on device."""
    if device.type == "cpu":
        array = target.numpy()
        for i, (item, region) in enumerate(zip(items, regions)):
            codec.decode(item, region=region, out=array[i], verify=verify)
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch_stream = torch.cuda.current_stream(index)
    with torch.cuda.device(index):
        if backend == "cupy":
            import cupy

            with cupy.cuda.Device(index):
                stream = cupy.cuda.ExternalStream(torch_stream.cuda_stream)
                gpu.decode_batch(items, backend="cupy", regions=regions, out=target, stream=stream, verify=verify)
        elif backend == "numba":
            from numba import cuda

            stream = cuda.external_stream(torch_stream.cuda_stream)
            gpu.decode_batch(items, backend="numba", regions=regions, out=target, stream=stream, verify=verify)
        else:
            raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {backend!r}")


def to_numpy_hwc(tensor: torch.Tensor) -> np.ndarray:
    """CHW tensor -> HWC (HW for one channel) numpy array: the inverse layout, for checks."""
    array = tensor.detach().cpu().movedim(-3, -1)
    if array.shape[-1] == 1:
        array = array[..., 0]
    return array.numpy()
