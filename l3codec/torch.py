"""PyTorch interop: decode L3 images straight to CHW tensors, like ``torchvision.io.decode_jpeg``.

    image = l3codec.torch.decode(data)                                     # CHW, on the CPU
    images = l3codec.torch.decode([data0, data1], device="cuda")            # list of CHW tensors
    batch = l3codec.torch.decode([data0, data1], device="cuda", stack=True)  # one NCHW tensor

Items are bytes-like or uint8 tensors (``torchvision.io.read_file``'s result). On CUDA the
batch decodes in one launch per mode and channel count on torch's current stream, straight into memory that
torch allocated: the CuPy backend sees it through DLPack, the Numba one through the CUDA
array interface, and nothing is copied. On the CPU the Numba decoder writes into the
tensors' memory. The core package never imports this module: torch stays optional.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from . import batch as batching
from . import codec, gpu
from .format import MAX_PIXELS, L3Error

TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}  # uint16: torch >= 2.3


def decode(
    items, /, *, device="cpu", regions=None, stack: bool = False, backend: str = "cupy", verify: bool = True,
    max_pixels: int = MAX_PIXELS,
):
    """Decode one item or a list into CHW uint8/uint16 tensors on device: "cpu" (the default, as
    in torchvision.io.decode_jpeg), "cuda" or "cuda:1".

    An item is bytes-like or a uint8 tensor on any device (read_file's 1-D tensor; a CUDA one is
    copied back, on torch's current stream, for validation). One item gives a CHW tensor; a list
    gives a list of CHW tensors, whatever their shapes, or with stack=True one NCHW tensor decoded
    straight into place (L3Error unless every result has the same shape and dtype).
    regions as for gpu.decode_batch. Every item is validated (headers, tables, checksums,
    max_pixels for the whole batch) before anything is allocated on the device or decoded;
    a bad item raises L3Error naming it (a TypeError too when it is not bytes at all).
    """
    device = torch.device(device)
    if device.type not in ("cuda", "cpu"):
        raise L3Error(f"device must be cuda or cpu, not {device}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device (or is a CPU build): decode with device='cpu'")
    if backend not in gpu.BACKENDS:
        raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {backend!r}")
    single = not isinstance(items, (list, tuple))
    item_list = [items] if single else list(items)
    if not item_list:  # as torchvision.io.decode_jpeg([]): nothing to decode, nothing to stack
        if stack:
            raise L3Error("stack=True needs at least one item: an empty batch has no shape")
        return []
    region_list = [regions] if single else (list(regions) if regions is not None else [None] * len(item_list))
    host_items = [_host_bytes(index, item) for index, item in enumerate(item_list)]
    prepared = batching.prepare(host_items, region_list, verify=verify, max_pixels=max_pixels)
    if stack and not prepared.same_shape:
        shapes = sorted({f"{shape} {dtype}" for shape, dtype in zip(prepared.shapes, prepared.dtypes)})
        raise L3Error(f"stack=True needs results of one shape and dtype, not {', '.join(shapes)}")
    flat = torch.empty(max(prepared.out_size, 1), dtype=torch.uint8, device=device)
    images = batching.split_output(prepared, flat, TORCH_DTYPES.__getitem__)  # HWC (HW) views of flat
    if device.type == "cpu":
        for index, (item, region, image) in enumerate(zip(host_items, prepared.regions, images)):
            try:  # already verified: each item's checksum is not computed twice
                codec.decode(item, region=region, out=image.numpy(), verify=False)
            except L3Error as error:  # corrupt past its checksum, or verify=False
                raise L3Error(f"batch item {index}: {error}") from None
    else:
        _decode_on_cuda(prepared, flat, device, backend)
    if stack:
        # same-shape items lie back to back: the whole buffer is one (N, H, W[, C]) tensor
        stacked = flat[: prepared.out_size].view(TORCH_DTYPES[prepared.dtypes[0]])
        return chw_view(stacked.reshape(len(item_list), *prepared.shapes[0]), batched=True)
    if single:
        return chw_view(images[0])
    return [chw_view(image) for image in images]


def _host_bytes(index: int, item):
    """An item's compressed bytes on the host, where they are validated; NotABufferError (a
    TypeError and an L3Error, as codec.decode raises) for anything else."""
    if isinstance(item, torch.Tensor):
        if item.dtype != torch.uint8:
            message = f"batch item {index}: a tensor item must hold uint8 bytes, not {item.dtype}"
            raise codec.NotABufferError(message)
        return item.detach().reshape(-1).cpu().numpy()  # a CUDA tensor: copied in torch's stream order
    item = gpu.host_bytes(item)
    try:
        codec.require_buffer(item)
    except codec.NotABufferError as error:
        raise codec.NotABufferError(f"batch item {index}: {error}") from None
    return item


def chw_view(array: torch.Tensor, batched: bool = False) -> torch.Tensor:
    """HW or HWC (NHW or NHWC when batched) -> CHW (NCHW), as a view."""
    if array.ndim == (3 if batched else 2):
        return array.unsqueeze(-3)
    return array.movedim(-1, -3)


def _decode_on_cuda(prepared, flat: torch.Tensor, device: torch.device, backend: str) -> None:
    """Decode into flat on torch's current stream of device, without copying it."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with on_torch_stream(torch.cuda.current_stream(index), backend) as (stream, as_array):
        gpu.decode_prepared(prepared, backend=backend, out=as_array(flat), stream=stream)


@contextlib.contextmanager
def on_torch_stream(torch_stream, backend: str):
    """In torch_stream's device context, yield (stream, as_array): the backend's handle of
    torch_stream and a zero-copy view of torch tensors as the backend's device arrays.

    CuPy: the views are made inside `with stream`, so the DLPack exchange asks torch for this
    stream and orders nothing; made outside, CuPy names the legacy default stream, and torch makes
    it wait on the tensors' stream, which puts the training stream behind every launch.
    Numba: as_cuda_array(sync=False): the default synchronises the host with the stream per array.
    """
    index = torch_stream.device.index
    with torch.cuda.device(index):
        if backend == "cupy":
            import cupy

            with cupy.cuda.Device(index):
                stream = cupy.cuda.ExternalStream(torch_stream.cuda_stream, index)
                with stream:
                    yield stream, cupy.from_dlpack
        else:
            from numba import cuda

            with cuda.gpus[index]:
                yield cuda.external_stream(torch_stream.cuda_stream), _numba_view


def _numba_view(tensor: torch.Tensor):
    from numba import cuda

    return cuda.as_cuda_array(tensor, sync=False)


def to_numpy_hwc(tensor: torch.Tensor) -> np.ndarray:
    """CHW tensor -> HWC (HW for one channel) numpy array: the inverse layout, for checks."""
    array = tensor.detach().cpu().movedim(-3, -1)
    if array.shape[-1] == 1:
        array = array[..., 0]
    return array.numpy()
