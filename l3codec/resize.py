"""Batched resizing and flipping of decoded canvases on their device (torch), for the loader.

Every item of an (N, H, W, C) canvas holds its crop in its top-left corner; these functions
resize or mirror all items in a few batched calls instead of one call per item.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

def bilinear_weights(lengths: torch.Tensor, out_length: int, canvas_length: int) -> torch.Tensor:
    """(N, out_length, canvas_length) float32 resampling matrices: torch's antialiased bilinear
    (interpolate(..., antialias=True, align_corners=False)), which equals plain bilinear when enlarging."""
    scale = lengths.to(torch.float32)[:, None, None] / out_length  # (N, 1, 1)
    support = torch.clamp(scale, min=1.0)
    centres = (torch.arange(out_length, device=lengths.device, dtype=torch.float32)[None, :, None] + 0.5) * scale
    source = torch.arange(canvas_length, device=lengths.device, dtype=torch.float32)[None, None, :] + 0.5
    weights = torch.clamp(1.0 - torch.abs(source - centres) / support, min=0.0)
    weights = weights * (source < lengths[:, None, None] + 0.5)  # nothing from the canvas past the region
    return weights / weights.sum(dim=2, keepdim=True)


RESIZE_CHUNK_BYTES = 256 << 20  # float32 working copy of the canvas per chunk of items, not per batch


def bilinear(canvas: torch.Tensor, regions: torch.Tensor, size: tuple) -> torch.Tensor:
    """Resize each (h_i, w_i) corner region of an (N, H, W, C) canvas to size: (N, out_h, out_w, C) float32,
    in two batched matrix products per chunk of items (a float32 copy of a whole batch of
    Cityscapes frames would be 1.6 GB at batch 64)."""
    out_h, out_w = size
    n, height, width, channels = canvas.shape
    rows = bilinear_weights(regions[:, 0], out_h, height)  # (N, out_h, H)
    cols = bilinear_weights(regions[:, 1], out_w, width)  # (N, out_w, W)
    out = torch.empty((n, out_h, out_w, channels), dtype=torch.float32, device=canvas.device)
    chunk = max(1, RESIZE_CHUNK_BYTES // (4 * height * width * channels))
    for first in range(0, n, chunk):
        items = slice(first, first + chunk)
        pixels = canvas[items].to(torch.float32)
        m = pixels.shape[0]
        across = torch.bmm(cols[items], pixels.permute(0, 2, 1, 3).reshape(m, width, height * channels))
        across = across.reshape(m, out_w, height, channels).permute(0, 2, 1, 3).reshape(m, height, out_w * channels)
        out[items] = torch.bmm(rows[items], across).reshape(m, out_h, out_w, channels)
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


def interpolate(image: torch.Tensor, size) -> torch.Tensor:
    """One HWC region resized by torch's own antialiased bilinear interpolation: HWC float32."""
    chw = image.permute(2, 0, 1)[None].to(torch.float32)
    return F.interpolate(chw, size=tuple(size), mode="bilinear", align_corners=False, antialias=True)[0].permute(1, 2, 0)


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
