"""The public verbs: encode, decode, info, check, imread, imwrite."""

from __future__ import annotations

import os

import numpy as np

from . import encoder_policy, first_use
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
    format.DEFAULT_COLOUR_TRANSFORM, or another where a sample of rows predicts a smaller file
    (encoder_policy.chosen_transform).
    tile_width: the mode's format.DEFAULT_TILE_WIDTH (compact 1024, fast 512).
    tile_height: the mode's format.DEFAULT_TILE_HEIGHT (compact 256, fast 64), or format.FLAT_TILE_HEIGHT where
    that makes a smaller file of flat content, colour then in format.FLAT_COLOUR_TILE_WIDTH
    (encoder_policy.smallest_tiling).
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
    if transform is None:
        transform_id = encoder_policy.chosen_transform(image, bits, mode_id)
    else:
        transform_id = fmt.TRANSFORMS[transform]
    if channels == 1 and image.flags.c_contiguous:
        planes = image.reshape(1, height, width)  # already one plane: no copy
    else:
        planes = np.empty((channels, height, width), image.dtype)
        cpu.image_to_planes(fmt.readonly(image), planes, transform_id, bits)
    planes = fmt.readonly(planes)
    header = dict(width=width, height=height, channels=channels, bits=bits, mode=mode_id, transform=transform_id,
                  tile_width=tile_width)
    return encoder_policy.smallest_tiling(planes, header, tile_height, chosen_width=chosen_width,
                                          chosen_height=chosen_height)


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
