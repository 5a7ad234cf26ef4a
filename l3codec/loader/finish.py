"""Turning decoded canvases into the yielded tensors: resize, flip, layout, normalise."""

from __future__ import annotations

import numpy as np
import torch

from .. import resize
from ..torch import TORCH_DTYPES


class Finish:
    """Turns decoded canvases into the yielded tensors: resize, flip, layout, normalise.

    Runs on the device (GPU path) or in a worker (CPU path) with the same geometry rules.
    fields: {name: l3codec.fields.Field}, which says how each is resampled and presented."""

    def __init__(self, fields: dict, normalize=None, channels_last: bool = True):
        self.fields, self.normalize, self.channels_last = dict(fields), normalize, channels_last

    def field(self, name: str, flat: torch.Tensor, layout, crops) -> object:
        """One field's output: a batched tensor when the field has one canvas and one output size, else a list."""
        n = len(crops)
        sizes = {tuple(crop.size) for crop in crops}
        if layout.canvas is None or len(sizes) != 1:
            return [self._one(name, flat, layout, crop, i) for i, crop in enumerate(crops)]
        size = sizes.pop()
        dtype = TORCH_DTYPES[np.dtype(layout.dtypes[0])]
        height, width = layout.canvas
        canvas = flat[layout.offset:layout.offset + layout.size].view(dtype).view(n, height, width, layout.channels[0])
        regions_hw = [tuple(crop.region[2:]) for crop in crops]
        if all(hw == size for hw in regions_hw):
            images = canvas
        else:
            images = self._resized(name, canvas, torch.tensor(regions_hw, dtype=torch.int64, device=flat.device), size)
        return self._present(name, resize.flip_where(images, crops), batched=True)

    def _resized(self, name, canvas, regions, size):
        if self.fields[name].resampling == "nearest":
            return resize.nearest(canvas, regions, size)
        return resize.bilinear(canvas, regions, size, rounded=self.normalize is None)

    def _one(self, name, flat, layout, crop, i) -> torch.Tensor:
        """Item i of a field whose items differ in channels, dtype or output size."""
        h, w = crop.region[2:]
        channels, dtype = layout.channels[i], np.dtype(layout.dtypes[i])
        pitch, start = layout.pitches[i], layout.offsets[i]
        rows = flat[start:start + (h - 1) * pitch + w * channels * dtype.itemsize]
        pixels = rows.view(TORCH_DTYPES[dtype])
        image = torch.as_strided(pixels, (h, w, channels), (pitch // dtype.itemsize, channels, 1))
        if tuple(crop.size) != (h, w):
            image = self._resized(name, image[None], torch.tensor([[h, w]], device=flat.device), crop.size)[0]
        else:
            image = resize.as_int_bits(image).clone().view(image.dtype)  # the buffer is reused; list items get their own memory
        if crop.flip:
            image = resize.as_int_bits(image).flip(1).view(image.dtype)
        return self._present(name, image, batched=False)

    def _present(self, name, images: torch.Tensor, batched: bool) -> torch.Tensor:
        """HWC (NHWC) -> CHW (NCHW) for images, HW (NHW) for one-channel label maps; normalised images."""
        if self.fields[name].is_label:
            return images[..., 0] if images.shape[-1] == 1 else images.movedim(-1, -3)
        if self.normalize is not None:
            mean, std = (torch.tensor(v, dtype=torch.float32, device=images.device) for v in self.normalize)
            images = (images.to(torch.float32) / 255.0 - mean) / std
        elif images.dtype.is_floating_point:
            images = images.round_().clamp_(0, 255).to(torch.uint8)
        chw = images.movedim(-1, -3)  # a channels_last view of NHWC memory
        return chw if self.channels_last or not batched else chw.contiguous()


def region_view(flat: np.ndarray, offset: int, pitch: int, height: int, width: int, channels: int,
                dtype) -> np.ndarray:
    """The (height, width, channels) pixels whose first row starts at byte offset of a flat uint8
    output, rows pitch bytes apart: a writable numpy view."""
    dtype = np.dtype(dtype)
    rows = flat[offset:offset + (height - 1) * pitch + width * channels * dtype.itemsize]
    return np.lib.stride_tricks.as_strided(
        rows.view(dtype), (height, width, channels), (pitch, channels * dtype.itemsize, dtype.itemsize),
        writeable=True,
    )


def replace_bad_samples(staged, images: dict, bad: dict) -> None:
    """Replace the samples at the positions of `bad` ({position: reason}) by the batch's first good
    one: its pixels in every field (tensor rows or list items), key, index, label and crop; each
    replaced sample is listed in staged.skipped with its reason. On CUDA, call it on the stream
    that consumes the batch, after it has waited for the decode."""
    good = next(s for s in range(len(staged.keys)) if s not in bad)
    for value in images.values():
        for s in bad:
            value[s] = value[good]
    for s, reason in bad.items():
        staged.skipped.append((staged.keys[s], reason))
        staged.keys[s], staged.crops[s] = staged.keys[good], staged.crops[good]
        staged.indices[s], staged.labels[s] = staged.indices[good], staged.labels[good]
