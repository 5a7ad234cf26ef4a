"""The public verbs: encode, decode, info, check, imread, imwrite."""

from __future__ import annotations

import functools
import os

import numpy as np

from . import first_use
from . import format as fmt
from .format import L3Error
from .regions import check_region, integer, raise_for_status, region_streams

SUFFIX = ".l3"


def _image_layout(array) -> tuple:
    """(HWC view, bits) of an image array, or L3Error."""
    image = np.asarray(array)
    if image.dtype == np.uint8:
        bits = 8
    elif image.dtype == np.uint16:
        bits = 16
    else:
        raise L3Error(f"image dtype must be uint8 or uint16, not {image.dtype}")
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3:
        raise L3Error(f"image must be HW or HWC, got shape {image.shape}")
    return image, bits


def encode(
    array,
    /,
    *,
    mode: str = "compact",
    tile_width: int | None = None,
    tile_height: int | None = None,
    transform: str | None = None,
) -> bytes:
    """Encode an HW or HWC uint8/uint16 array (1-4 channels) as an L3 image.

    mode: "compact" (wavefront GPU decode; the smallest files of photographs and label maps) or "fast"
    (row-parallel; the smaller files of rendered graphics and text).
    transform: "subtract-green", "rg-mean" or "none"; default for 3-4 channels: the mode's
    format.DEFAULT_COLOUR_TRANSFORM, or another where a sample of rows predicts a smaller file (see below).
    tile_width: the mode's format.DEFAULT_TILE_WIDTH (512).
    tile_height: the mode's format.DEFAULT_TILE_HEIGHT (compact 32, fast 64), or format.FLAT_TILE_HEIGHT where
    that makes a smaller file of flat content, colour then in format.FLAT_COLOUR_TILE_WIDTH (see below).
    """
    from . import cpu

    image, bits = _image_layout(array)
    height, width, channels = image.shape
    if mode not in fmt.MODES:
        raise L3Error(f"mode must be one of {sorted(fmt.MODES)}, not {mode!r}")
    mode_id = fmt.MODES[mode]
    chosen_width = tile_width is not None
    tile_width = fmt.DEFAULT_TILE_WIDTH[mode_id] if tile_width is None else integer(tile_width, "tile_width")
    chosen_height = tile_height is not None
    tile_height = fmt.DEFAULT_TILE_HEIGHT[mode_id] if tile_height is None else integer(tile_height, "tile_height")
    fmt.check_geometry(width, height, channels, bits, mode_id, tile_width, tile_height)
    if transform is None and channels < 3:
        transform = "none"
    if transform is not None and transform not in fmt.TRANSFORMS:
        raise L3Error(f"transform must be one of {sorted(fmt.TRANSFORMS)}, not {transform!r}")
    if transform not in (None, "none") and channels < 3:
        raise L3Error(f"{transform} needs 3 or 4 channels")

    first_use.coordinator.starting("encode", mode, bits, channels, cpu.cache_path)
    transform_id = fmt.TRANSFORMS[transform] if transform is not None else _chosen_transform(image, bits, mode_id)
    if channels == 1 and image.flags.c_contiguous:
        planes = image.reshape(1, height, width)  # already one plane: no copy
    else:
        planes = np.empty((channels, height, width), image.dtype)
        cpu.image_to_planes(fmt.readonly(image), planes, transform_id, bits)
    planes = fmt.readonly(planes)
    header = dict(width=width, height=height, channels=channels, bits=bits, mode=mode_id, transform=transform_id,
                  tile_width=tile_width)
    data, kind_bytes = _encode_planes(planes, header, tile_height)
    # Flat content: taller tiles hold more of the glyphs and widgets a tile's LZ block can
    # copy and spread a palette's table and an LZ stream's code tables over more pixels; photographs
    # gain nothing, and a crop then decodes whole 256-row tiles. Colour takes 256-wide tiles there,
    # one channel (pages of text, label maps) the default 512: screens of coloured text 0.52x their
    # PNG files at 256 wide, 0.53x at 512; grey pages of text 1.02x at 256, 0.83x at 512. A colour
    # image with some palette or LZ tiles also tries 256 x 64 (a wallpaper 0.80x at 512, 0.75x at 256;
    # photographs without them are 0.1-0.2% smaller at 512). Each kept only where smaller, narrower
    # tiles by 1% (bench/results/codecs-vs-source.md). compact (whose tall tiles are bands of 32 rows,
    # FORMAT.md §6) takes the tall tiles alike: grey pages of text 1.49x -> 0.85x their PNG files, coloured
    # screens 0.76x -> 0.52x, generated flat graphics 0.62x -> 0.43x, label maps 0.99x -> 0.96x; its
    # 256 x 32 tiles won on no image of the corpus, so compact does not try them (a second coding).
    share = sum(kind_bytes[kind] for kind in _FLAT_KINDS) / kind_bytes.sum()
    candidates = []
    if (mode_id == fmt.MODE_FAST and channels > 1 and not chosen_width and share >= NARROW_SHARE
            and width > fmt.FLAT_COLOUR_TILE_WIDTH):
        candidates.append((fmt.FLAT_COLOUR_TILE_WIDTH, tile_height))
    if share >= FLAT_SHARE and not chosen_height and height > tile_height:
        flat_width = tile_width if chosen_width or channels == 1 else fmt.FLAT_COLOUR_TILE_WIDTH
        candidates.append((flat_width, fmt.FLAT_TILE_HEIGHT))
    for candidate_width, candidate_height in candidates:
        other, _ = _encode_planes(planes, dict(header, tile_width=candidate_width), candidate_height)
        # narrower tiles cost a GPU more per sample (docs/gpu.md): they must save NARROW_GAIN
        needed = len(data) * (1 - NARROW_GAIN) if candidate_width < tile_width else len(data)
        if len(other) < needed:
            data = other
    return data


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


def _chosen_transform(image, bits: int, mode_id: int) -> int:
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


# fmt.FLAT_TILE_HEIGHT is tried where palette, member and LZ streams (a palette's index LZ stream
# counted with its palette) hold this share of the payload: rendered graphics and text hold 0.9 or
# more (taller tiles: 0.6-0.9x the file), a logo 0.27 (0.84x); photographs with a sky 0.14-0.26
# (0.99-1.04x), which would pay a second coding for 1% at best
FLAT_SHARE = 0.25
NARROW_SHARE = 0.02  # ... and a colour image's 256 x 64 tiles where they hold this share,
NARROW_GAIN = 0.01  # kept where 1% smaller
_FLAT_KINDS = (fmt.KIND_LZ, fmt.KIND_PIXEL_LZ, fmt.KIND_LZ_CODED, fmt.KIND_PIXEL_LZ_CODED, fmt.KIND_PALETTE,
               fmt.KIND_PALETTE_MEMBER)


def _encode_planes(planes, header: dict, tile_height: int) -> tuple:
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
    cpu.encode_streams(planes, header["mode"], tile_width, tile_height, bits, scratch, slot_bytes, sizes)
    ends = np.cumsum(sizes)
    payload = np.empty(int(ends[-1]), np.uint8)
    cpu.gather_streams(scratch, slot_bytes, sizes, payload)
    kinds = scratch[np.arange(stream_count) * slot_bytes]
    data = fmt.pack(**header, tile_height=tile_height, stream_ends=ends, payload=payload)
    return data, np.bincount(kinds, weights=sizes, minlength=256)


def info(data, /) -> fmt.Info:
    """Validated header facts (shape, dtype, mode, tiles) without decoding; checks header CRC only."""
    require_buffer(data)
    return fmt.parse(data, verify=False).info


def check(data, /, *, max_pixels: int = fmt.DEFAULT_MAX_PIXELS) -> bool:
    """True if data is a valid L3 image that decodes cleanly; TypeError if data is not a buffer."""
    require_buffer(data)
    try:
        decode(data, max_pixels=max_pixels)
    except L3Error:
        return False
    return True


class NotABufferError(L3Error, TypeError):
    """data is not bytes-like at all: a TypeError, as numpy.frombuffer and imagecodecs raise,
    and an L3Error, as every other bad input to the verbs."""


def require_buffer(data) -> None:
    """NotABufferError unless data is bytes-like: a path or None is a mistake in the call, not an
    L3 image that fails to decode (check() raises it rather than return False)."""
    if isinstance(data, np.ndarray):
        return
    try:
        memoryview(data)
    except TypeError:
        hint = " (l3codec.imread reads a file)" if isinstance(data, (str, os.PathLike)) else ""
        raise NotABufferError(
            f"L3 data must be bytes-like (bytes, bytearray, memoryview or a numpy array), "
            f"not {type(data).__name__}{hint}"
        ) from None


def _check_out(out, shape: tuple, dtype: np.dtype) -> None:
    """L3Error unless out can receive the decoded pixels as they are written."""
    if not isinstance(out, np.ndarray):
        raise L3Error(f"out must be a numpy array, not {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise L3Error(f"out must be a {dtype} array of shape {shape}, not {out.dtype} of shape {out.shape}")
    if not out.flags.writeable:
        raise L3Error("out must be writeable, not a read-only array")


def decode(data, /, *, region=None, out=None, verify: bool = True,
           max_pixels: int = fmt.DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode an L3 image to HWC (HW for one channel) uint8/uint16.

    region=(y, x, h, w) decodes only the tiles that intersect it and returns that window.
    out receives the pixels when given: a writeable numpy array of the result's shape and dtype,
    any strides (a view into a larger buffer works), checked before decoding. data that is not
    bytes-like raises TypeError.
    verify=False skips the payload checksum (headers and sizes are always checked).
    max_pixels: a larger image (or region) is refused from its header, before anything is
    allocated: a few kilobytes of L3 can describe gigabytes of pixels. The default,
    DEFAULT_MAX_PIXELS (8192 x 8192), is raised knowingly, up to MAX_PIXELS (16384 x 16384).
    """
    require_buffer(data)
    parsed = fmt.parse(data, verify=verify)
    return decode_parsed(fmt.as_bytes_view(data), parsed, region=region, out=out, max_pixels=max_pixels)


def decode_parsed(buf: np.ndarray, parsed: fmt.Parsed, /, *, region=None, out=None,
                  max_pixels: int = fmt.MAX_PIXELS) -> np.ndarray:
    """decode() of a file already parsed and validated: its streams at parsed's offsets in buf
    (a uint8 array), which need hold only the streams the region's tiles use, as a staged batch
    does."""
    from . import cpu

    info = parsed.info
    if region is None:
        region = (0, 0, info.height, info.width)
    region = check_region(info, region)
    if region[2] * region[3] > max_pixels:
        raise L3Error(f"{region[2]}x{region[3]} pixels exceed max_pixels={max_pixels} (raise it, up to "
                      f"{fmt.MAX_PIXELS}, for an image you trust)")
    streams, origin, size = region_streams(info, region)
    y, x, h, w = region
    shape = (h, w) if info.channels == 1 else (h, w, info.channels)
    # one channel, whole tiles, no caller's out (which a corrupt stream must leave as it was):
    # decoded straight into out; else into planes, then copied
    direct = out is None and info.channels == 1 and (y, x, h, w) == (*origin, *size)
    if out is None:
        out = np.empty(shape, info.dtype)
    else:
        _check_out(out, shape, info.dtype)
    first_use.coordinator.starting("decode", info.mode, info.bits, info.channels, cpu.cache_path)
    planes = out.reshape(1, h, w) if direct else np.empty((info.channels, size[0], size[1]), info.dtype)
    status = np.zeros(streams.size, np.int64)
    cpu.decode_streams(fmt.readonly(buf), parsed, streams, planes, status, origin=origin)
    raise_for_status(status, streams, info.channels)
    if direct:
        return out
    target = out if out.ndim == 3 else out[:, :, None]
    transform = fmt.TRANSFORMS[info.transform]
    cpu.planes_to_image(planes, y - origin[0], x - origin[1], target, transform, info.bits)
    return out


def imread(path: str | os.PathLike, /, **options) -> np.ndarray:
    """Read and decode an .l3 file."""
    with open(path, "rb") as file:
        return decode(file.read(), **options)


def imwrite(path: str | os.PathLike, array, /, **options) -> None:
    """Encode array and write it to path, which must end in .l3 (options as for encode).

    Other suffixes are refused, as the l3 tool refuses them: imagecodecs.imwrite and Pillow
    choose the format from the suffix, so "x.png" holding L3 bytes would mislead every reader.
    encode() returns the bytes, to be stored under any name.
    """
    if os.path.splitext(os.fsdecode(path))[1].lower() != SUFFIX:
        raise L3Error(f"imwrite writes L3 images: {os.fsdecode(path)!r} must end in {SUFFIX}")
    data = encode(array, **options)
    with open(path, "wb") as file:
        file.write(data)
