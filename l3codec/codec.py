"""The public verbs: encode, decode, info, check, imread, imwrite."""

from __future__ import annotations

import os

import numpy as np

from . import format as fmt
from .format import L3Error


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

    mode: "compact" (smallest, wavefront GPU decode) or "fast" (row-parallel).
    transform: "subtract-green" (default for 3-4 channels) or "none".
    """
    from . import cpu

    image, bits = _image_layout(array)
    height, width, channels = image.shape
    if mode not in fmt.MODES:
        raise L3Error(f"mode must be one of {sorted(fmt.MODES)}, not {mode!r}")
    mode_id = fmt.MODES[mode]
    tile_width = fmt.DEFAULT_TILE_WIDTH[mode_id] if tile_width is None else _integer(tile_width, "tile_width")
    tile_height = (
        fmt.DEFAULT_TILE_HEIGHT[mode_id] if tile_height is None else _integer(tile_height, "tile_height")
    )
    fmt.check_geometry(width, height, channels, bits, mode_id, tile_width, tile_height)
    if transform is None:
        transform = "subtract-green" if channels >= 3 else "none"
    transform_ids = {name: value for value, name in fmt.TRANSFORM_NAMES.items()}
    if transform not in transform_ids:
        raise L3Error(f"transform must be one of {sorted(transform_ids)}, not {transform!r}")
    transform_id = transform_ids[transform]
    if transform_id == fmt.TRANSFORM_SUBTRACT_GREEN and channels < 3:
        raise L3Error("subtract-green needs 3 or 4 channels")

    planes = np.empty((channels, height, width), image.dtype)
    cpu.image_to_planes(image, planes, transform_id, bits)
    tiles_x, tiles_y = fmt.tile_grid(width, height, tile_width, tile_height)
    stream_count = tiles_x * tiles_y * channels
    slot_bytes = cpu.stream_slot_bytes(tile_width, tile_height, bits)
    scratch = np.empty(stream_count * slot_bytes, np.uint8)
    sizes = np.zeros(stream_count, np.int64)
    cpu.encode_streams(planes, mode_id, tile_width, tile_height, bits, scratch, slot_bytes, sizes)
    ends = np.cumsum(sizes)
    payload = np.empty(int(ends[-1]), np.uint8)
    cpu.gather_streams(scratch, slot_bytes, sizes, payload)
    return fmt.pack(
        width=width,
        height=height,
        channels=channels,
        bits=bits,
        mode=mode_id,
        transform=transform_id,
        tile_width=tile_width,
        tile_height=tile_height,
        stream_ends=ends,
        payload=payload,
    )


def info(data, /) -> fmt.Info:
    """Validated header facts (shape, dtype, mode, tiles) without decoding; checks header CRC only."""
    return fmt.parse(data, verify=False).info


def check(data, /) -> bool:
    """True if data is a valid L3 image that decodes cleanly."""
    try:
        decode(data)
    except L3Error:
        return False
    return True


def _integer(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise L3Error(f"{name} must be an integer, not {value!r}")
    return int(value)


def check_region(info: fmt.Info, region) -> tuple:
    """region as four ints (y, x, h, w) inside the image, or L3Error."""
    try:
        values = tuple(region)
    except TypeError:
        values = ()
    if len(values) != 4:
        raise L3Error(f"region must be (y, x, h, w), not {region!r}")
    y, x, h, w = (_integer(v, "region") for v in values)
    if h < 1 or w < 1:
        raise L3Error(f"region {values} is empty")
    if y < 0 or x < 0 or y + h > info.height or x + w > info.width:
        raise L3Error(f"region {values} is not inside the {info.height}x{info.width} image")
    return y, x, h, w


def region_streams(info: fmt.Info, region) -> tuple:
    """(stream ids, tile-aligned origin, tile-aligned size) covering a checked region (y, x, h, w)."""
    y, x, h, w = region
    th, tw = info.tile_height, info.tile_width
    ty0, ty1 = y // th, (y + h - 1) // th + 1
    tx0, tx1 = x // tw, (x + w - 1) // tw + 1
    tiles = (np.arange(ty0, ty1)[:, None] * info.tiles_x + np.arange(tx0, tx1)[None, :]).reshape(-1)
    streams = (tiles[:, None] * info.channels + np.arange(info.channels)[None, :]).reshape(-1)
    origin = (ty0 * th, tx0 * tw)
    size = (min(ty1 * th, info.height) - origin[0], min(tx1 * tw, info.width) - origin[1])
    return streams.astype(np.int64), origin, size


def raise_for_status(status: np.ndarray, streams: np.ndarray, channels: int, prefix: str = "") -> None:
    bad = np.flatnonzero(status)
    if bad.size:
        i = bad[0]
        tile, channel = divmod(int(streams[i]), channels)
        message = fmt.STATUS_MESSAGES.get(int(status[i]), f"status {int(status[i])}")
        raise L3Error(f"{prefix}corrupt stream (tile {tile}, channel {channel}): {message}")


def decode(data, /, *, region=None, out=None, verify: bool = True) -> np.ndarray:
    """Decode an L3 image to HWC (HW for one channel) uint8/uint16.

    region=(y, x, h, w) decodes only the tiles that intersect it and returns that window.
    out receives the pixels when given (same shape and dtype as the result).
    verify=False skips the payload checksum (headers and sizes are always checked).
    """
    from . import cpu

    parsed = fmt.parse(data, verify=verify)
    info = parsed.info
    if region is None:
        region = (0, 0, info.height, info.width)
    region = check_region(info, region)
    streams, origin, size = region_streams(info, region)
    y, x, h, w = region
    shape = (h, w) if info.channels == 1 else (h, w, info.channels)
    if out is None:
        out = np.empty(shape, info.dtype)
    elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != info.dtype:
        raise L3Error(f"out must be a {info.dtype} array of shape {shape}")
    buf = fmt.as_bytes_view(data)
    planes = np.empty((info.channels, size[0], size[1]), info.dtype)
    status = np.zeros(streams.size, np.int64)
    cpu.decode_streams(
        buf, parsed.stream_starts, parsed.stream_ends, streams, planes, origin[0], origin[1],
        info.tiles_x, info.tile_width, info.tile_height, info.height, info.width,
        fmt.MODES[info.mode], info.bits, status,
    )
    raise_for_status(status, streams, info.channels)
    target = out if out.ndim == 3 else out[:, :, None]
    transform = fmt.TRANSFORM_SUBTRACT_GREEN if info.transform == "subtract-green" else fmt.TRANSFORM_NONE
    cpu.planes_to_image(planes, y - origin[0], x - origin[1], target, transform, info.bits)
    return out


def imread(path: str | os.PathLike, /, **options) -> np.ndarray:
    """Read and decode an .l3 file."""
    with open(path, "rb") as file:
        return decode(file.read(), **options)


def imwrite(path: str | os.PathLike, array, /, **options) -> None:
    """Encode array and write it to path (options as for encode)."""
    data = encode(array, **options)
    with open(path, "wb") as file:
        file.write(data)
