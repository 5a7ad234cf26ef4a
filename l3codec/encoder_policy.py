"""Encoder policy: the choices docs/FORMAT.md leaves to the encoder (colour transform, tile shape),
each rule beside the measurements that set it (bench/results/codecs-vs-source.md). Any choice
here decodes the same way; only the file's size and a GPU's cost per sample depend on it."""

from __future__ import annotations

import functools

import numpy as np

from . import format as fmt

# A colour image takes its mode's default transform (rg-mean) unless another one costs TRANSFORM_MARGIN
# fewer bits in an estimate: the mode's predictor on every TRANSFORM_SAMPLE_STEP-th row (with the row above),
# each plane's residuals in the one Rice parameter that suits them best. Against rg-mean: a rendered colour
# wheel 0.76x (compact) and 0.73x (fast) with none (it was 1.16x and 1.32x its PNG file), a logo 0.88x and
# 0.79x; screens of code 0.98-0.99x, and a photograph 0.93x in fast, with subtract-green. The margin is there
# because on photographs the estimate is within 2% of the real ratio: a smaller one picked transforms 0.5-1%
# worse. Below TRANSFORM_MIN_SAMPLES sampled samples a plane (counted as compact's: columns 1 on) it is
# noise (an 8 x 8 gradient took none, 5% larger). About 5 ms on 2048 x 1024 RGB, 3% of a photograph's
# one-thread compact encode.
TRANSFORM_SAMPLE_STEP = 8
TRANSFORM_MARGIN = 0.02
TRANSFORM_MIN_SAMPLES = 4096

# fmt.FLAT_TILE_HEIGHT is tried where palette, member and LZ streams (a palette's index LZ stream
# counted with its palette) hold this share of the payload: rendered graphics and text hold 0.9 or
# more (taller tiles: 0.6-0.9x the file), a logo 0.27 (0.84x); photographs with a sky 0.14-0.26
# (0.99-1.04x), which would pay a second coding for 1% at best
FLAT_SHARE = 0.25
NARROW_SHARE = 0.02  # ... and a colour image's 256 x 64 tiles where they hold this share,
NARROW_GAIN = 0.01  # kept where 1% smaller
# compact's coder for coded tiles (cpu.COMPACT_CODERS): "ans" (kind 10, version 10), "rice" (kind 1, the
# coder of versions 1-9), or "smaller": each tile both ways, the smaller kept (0.01% smaller on the corpus
# for a third of the encode speed: bench/results/compact-v2.md)
COMPACT_CODER = "ans"
_FLAT_KINDS = (fmt.KIND_LZ, fmt.KIND_PIXEL_LZ, fmt.KIND_LZ_CODED, fmt.KIND_PIXEL_LZ_CODED, fmt.KIND_PALETTE,
               fmt.KIND_PALETTE_MEMBER)


def chosen_transform(image, bits: int, mode_id: int) -> int:
    """The colour transform for a 3- or 4-channel HWC image (the rule above)."""
    from . import cpu

    height, width = image.shape[:2]
    default = fmt.DEFAULT_COLOUR_TRANSFORM[mode_id]
    rows = np.arange(1, height, TRANSFORM_SAMPLE_STEP)
    if rows.size * (width - 1) < TRANSFORM_MIN_SAMPLES:
        return default
    cost = _rice_bits(cpu.transform_residual_counts(fmt.readonly(image), rows, bits, mode_id), bits)
    best = int(np.argmin(cost))
    return best if cost[best] < (1 - TRANSFORM_MARGIN) * cost[default] else default


def _rice_bits(counts, bits: int) -> np.ndarray:
    """Per transform, the bits of its planes' residuals (counts[transform, plane, residual mod 2**bits]) in
    compact's code (docs/FORMAT.md §6.3: zigzag, unary quotient up to UNARY_LIMIT or an escape), each plane
    in the one Rice parameter that codes it in the fewest bits. (Order-0 entropy instead saturated on
    16-bit samples, too few of each value, and kept rg-mean where subtract-green made a file 0.76x.)"""
    per_k = counts.reshape(-1, 1 << bits).astype(np.float64) @ _rice_lengths(bits)  # [transform * plane, k]
    return per_k.min(axis=1).reshape(counts.shape[:2]).sum(axis=1)


@functools.lru_cache(maxsize=None)
def _rice_lengths(bits: int) -> np.ndarray:
    """lengths[v, k]: the bits of compact's code word for residual v (mod 2**bits) at Rice parameter k."""
    from .compact import UNARY_LIMIT, zigzag

    mapped = np.array([zigzag(residual, bits) for residual in range(1 << bits)])
    quotients = mapped[:, None] >> np.arange(bits)
    return np.where(quotients < UNARY_LIMIT, quotients + 1 + np.arange(bits), UNARY_LIMIT + bits)


def smallest_tiling(planes, header: dict, tile_height: int, *, chosen_width: bool,
                    chosen_height: bool) -> bytes:
    """The file of planes in header's tile width and tile_height, or in a taller or narrower tiling
    where that is smaller (the rule below); chosen_width / chosen_height: the caller fixed that size.

    Flat content: taller tiles hold more of the glyphs and widgets a tile's LZ block can copy and
    spread a palette's table and an LZ stream's code tables over more pixels; photographs gain
    nothing, and a crop then decodes whole 256-row tiles. Colour takes 256-wide tiles there, one
    channel (pages of text, label maps) the default 512: screens of coloured text 0.52x their PNG
    files at 256 wide, 0.53x at 512; grey pages of text 1.02x at 256, 0.83x at 512. A colour image
    with some palette or LZ tiles also tries 256 x 64 (a wallpaper 0.80x at 512, 0.75x at 256;
    photographs without them are 0.1-0.2% smaller at 512). Each kept only where smaller, narrower
    tiles by 1%. compact's default tiles are already 256 tall (1024 x 256 since format 10: kind 10's
    per-stream tables pay over the most samples), so for it only a colour image's 256 x 256 tiles are
    a second coding (format 9, 512-wide: coloured screens 0.76x -> 0.52x their PNG files)."""
    channels, height, width = planes.shape
    tile_width, mode_id = header["tile_width"], header["mode"]
    data, kind_bytes = encode_planes(planes, header, tile_height)
    share = sum(kind_bytes[kind] for kind in _FLAT_KINDS) / kind_bytes.sum()
    candidates = []
    if (mode_id == fmt.MODE_FAST and channels > 1 and not chosen_width and share >= NARROW_SHARE
            and width > fmt.FLAT_COLOUR_TILE_WIDTH):
        candidates.append((fmt.FLAT_COLOUR_TILE_WIDTH, tile_height))
    if share >= FLAT_SHARE and not chosen_height and height > tile_height:
        flat_width = tile_width if chosen_width or channels == 1 else fmt.FLAT_COLOUR_TILE_WIDTH
        candidates.append((flat_width, fmt.FLAT_TILE_HEIGHT))
    for candidate_width, candidate_height in candidates:
        other, _ = encode_planes(planes, dict(header, tile_width=candidate_width), candidate_height)
        # narrower tiles cost a GPU more per sample (docs/gpu.md): they must save NARROW_GAIN
        needed = len(data) * (1 - NARROW_GAIN) if candidate_width < tile_width else len(data)
        if len(other) < needed:
            data = other
    return data


def encode_planes(planes, header: dict, tile_height: int) -> tuple:
    """(the file, its payload bytes by stream kind: an array indexed by kind) of planes in tiles of
    header's width and tile_height."""
    from . import cpu

    channels, height, width = planes.shape
    tile_width, bits = header["tile_width"], header["bits"]
    tiles_x, tiles_y = fmt.tile_grid(width, height, tile_width, tile_height)
    stream_count = tiles_x * tiles_y * channels
    slot_bytes = cpu.stream_slot_bytes(tile_width, tile_height, bits)
    scratch = np.empty(stream_count * slot_bytes, np.uint8)
    sizes = np.zeros(stream_count, np.int64)
    cpu.encode_streams(planes, header["mode"], tile_width, tile_height, bits, scratch, slot_bytes, sizes,
                       COMPACT_CODER)
    ends = np.cumsum(sizes)
    payload = np.empty(int(ends[-1]), np.uint8)
    cpu.gather_streams(scratch, slot_bytes, sizes, payload)
    kinds = scratch[np.arange(stream_count) * slot_bytes]
    data = fmt.pack(**header, tile_height=tile_height, stream_ends=ends, payload=payload)
    return data, np.bincount(kinds, weights=sizes, minlength=256)
