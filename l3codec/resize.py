"""Batched resizing and flipping of decoded canvases on their device (torch), for the loader.

Every item of an (N, H, W, C) canvas holds its crop in its top-left corner; these functions
resize or mirror all items in a few batched calls instead of one call per item.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

def bilinear(canvas: torch.Tensor, regions: torch.Tensor, size: tuple, *, rounded: bool = False) -> torch.Tensor:
    """Resize each (h_i, w_i) corner region of an (N, H, W, C) canvas to size: (N, out_h, out_w, C).

    torch's antialiased bilinear (interpolate(..., antialias=True, align_corners=False)), one
    call per item: a separable filter whose taps per output pixel are the few source pixels
    its support reaches, so the cost follows the output and the scale, not the canvas (a dense
    resampling matrix would cost 5-10 GFLOP per frame under RandomResizedCrop(512)), and it
    uses no matrix product, so TF32 settings do not change it. Returns float32; with
    rounded=True, uint8 items on the CPU go through torch's uint8 kernel (several times
    faster) and come back uint8, each value within 1 of the rounded float32 result.
    """
    out_h, out_w = size
    n, _, _, channels = canvas.shape
    fast_uint8 = rounded and canvas.dtype == torch.uint8 and canvas.device.type == "cpu"
    out = torch.empty((n, out_h, out_w, channels), dtype=torch.uint8 if fast_uint8 else torch.float32,
                      device=canvas.device)
    for item, (h, w) in enumerate(regions.tolist()):
        chw = canvas[item, :h, :w].permute(2, 0, 1)[None]  # a channels_last view: no copy
        if not fast_uint8:
            chw = chw.to(torch.float32)
        resized = F.interpolate(chw, size=(out_h, out_w), mode="bilinear", align_corners=False, antialias=True)
        out[item] = resized[0].permute(1, 2, 0)
    return out


def nearest(canvas: torch.Tensor, regions: torch.Tensor, size: tuple) -> torch.Tensor:
    """Nearest neighbour (torch's "nearest-exact": the source pixel under each output centre), any dtype."""
    def indices(lengths, out_length):
        centres = (torch.arange(out_length, device=lengths.device, dtype=torch.float64)[None, :] + 0.5)
        index = torch.floor(centres * lengths.to(torch.float64)[:, None] / out_length).to(torch.int64)
        return torch.minimum(index, lengths[:, None] - 1)

    rows, cols = indices(regions[:, 0], size[0]), indices(regions[:, 1], size[1])
    batch = torch.arange(canvas.shape[0], device=canvas.device)[:, None, None]
    return as_int_bits(canvas)[batch, rows[:, :, None], cols[:, None, :]].view(canvas.dtype)


def as_int_bits(images: torch.Tensor) -> torch.Tensor:
    """uint16 as int16, the same bits: torch moves and indexes uint16 with few kernels (no flip, no gather)."""
    return images.view(torch.int16) if images.dtype == torch.uint16 else images


def flip_where(images: torch.Tensor, crops) -> torch.Tensor:
    """Mirror the items (N, H, W, C) whose crop says so, in place. The choice is made on the host
    (no device-to-host sync, so the decode keeps overlapping the caller's step)."""
    chosen = [i for i, crop in enumerate(crops) if crop.flip]
    if chosen:
        bits, index = as_int_bits(images), torch.tensor(chosen, device=images.device)
        bits[index] = bits[index].flip(2)
    return images
