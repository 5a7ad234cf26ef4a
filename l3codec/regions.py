"""Regions (y, x, h, w) of an image: checking them, the streams they need, and decoder statuses.

Shared by the CPU decoder (codec.py) and the GPU batch preparation (batch.py), so that
both accept the same regions and name a corrupt stream the same way.
"""

from __future__ import annotations

import numpy as np

from . import format as fmt
from .format import L3Error


def integer(value, name: str) -> int:
    """value as an int, or L3Error (bools and floats are refused, numpy integers accepted)."""
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
    y, x, h, w = (integer(v, "region") for v in values)
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
    """L3Error naming the first stream (tile and channel) whose decode status is not 0."""
    bad = np.flatnonzero(status)
    if bad.size:
        i = bad[0]
        tile, channel = divmod(int(streams[i]), channels)
        message = fmt.STATUS_MESSAGES.get(int(status[i]), f"status {int(status[i])}")
        raise L3Error(f"{prefix}corrupt stream (tile {tile}, channel {channel}): {message}")
