"""Host-side batch preparation for the GPU decoders: validation and launch tables.

Everything a kernel trusts is built here from validated headers and stream tables
(format.parse), with O(items + tiles) numpy work and no per-pixel or per-row loop.
The tables are little-endian numpy record arrays whose layout the CUDA C kernels
mirror as structs (kernels/l3_batch.cuh) and the Numba kernels index by field.
This module imports neither cupy nor numba.

A launch decodes the items of one mode (8- and 16-bit alike): one block per task,
a task being one tile of one item that intersects the item's region.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .regions import check_region, region_streams
from .format import L3Error

# One record per item. All int64, so C structs need no padding rules.
ITEM_DTYPE = np.dtype(
    [
        ("width", "<i8"),
        ("height", "<i8"),
        ("channels", "<i8"),
        ("bits", "<i8"),
        ("transform", "<i8"),
        ("tile_width", "<i8"),
        ("tile_height", "<i8"),
        ("tiles_x", "<i8"),
        ("stream_base", "<i8"),  # index of the item's first stream in the stream arrays
        ("region_y", "<i8"),
        ("region_x", "<i8"),
        ("region_h", "<i8"),
        ("region_w", "<i8"),
        ("out_offset", "<i8"),  # byte offset of the region's pixel (0, 0) in the output buffer
        ("out_row_pitch", "<i8"),  # bytes between output rows
    ]
)
assert ITEM_DTYPE.itemsize == 15 * 8

# One record per block: a tile of an item.
TASK_DTYPE = np.dtype([("item", "<i8"), ("tile_y", "<i8"), ("tile_x", "<i8")])
assert TASK_DTYPE.itemsize == 3 * 8

MODE_COMPACT = fmt.MODE_COMPACT
MODE_FAST = fmt.MODE_FAST


@dataclass
class Launch:
    """The tables for one kernel launch: the items of one mode."""

    mode: int
    items: np.ndarray  # ITEM_DTYPE, one per item in this launch
    item_index: np.ndarray  # int64: position of each record's item in the batch
    tasks: np.ndarray  # TASK_DTYPE
    max_channels: int
    max_tile_width: int
    max_tile_height: int


@dataclass
class Batch:
    """A validated batch: concatenated input bytes, stream tables, outputs and launches."""

    data: np.ndarray  # uint8: all items' files back to back
    stream_starts: np.ndarray  # int64, absolute offsets into data
    stream_ends: np.ndarray  # int64
    infos: list
    regions: list  # (y, x, h, w) per item
    shapes: list  # output shape per item (HW or HWC)
    dtypes: list
    out_offsets: np.ndarray  # int64 byte offset of each item's output
    out_size: int  # bytes of the whole output buffer
    launches: list

    @property
    def same_shape(self) -> bool:
        """Every item has the same output shape and dtype: the output is one (N, *shape) array."""
        return _same_shape(self.shapes, self.dtypes)


def _same_shape(shapes, dtypes) -> bool:
    return len(set(zip(shapes, dtypes))) == 1


def output_shape(info: fmt.Info, region) -> tuple:
    _, _, h, w = region
    return (h, w) if info.channels == 1 else (h, w, info.channels)


def prepare(items, regions=None, *, verify=True, max_pixels: int = fmt.MAX_PIXELS) -> Batch:
    """Validate every item and build the launch tables. A bad item raises L3Error naming its index.

    verify: check payload checksums; a bool, or one bool per item.
    """
    items = list(items)
    if not items:
        raise L3Error("empty batch")
    if regions is None:
        regions = [None] * len(items)
    regions = list(regions)
    if len(regions) != len(items):
        raise L3Error(f"{len(regions)} regions for {len(items)} items")
    verify = [verify] * len(items) if isinstance(verify, bool) else list(verify)
    if len(verify) != len(items):
        raise L3Error(f"{len(verify)} verify flags for {len(items)} items")
    views, parsed_items, checked_regions = [], [], []
    for index, (item, region, check_payload) in enumerate(zip(items, regions, verify)):
        try:
            view = fmt.as_bytes_view(item)
            parsed = fmt.parse(view, verify=check_payload)
            info = parsed.info
            full = (0, 0, info.height, info.width)
            checked_regions.append(full if region is None else check_region(info, region))
        except L3Error as error:
            raise L3Error(f"batch item {index}: {error}") from None
        views.append(view)
        parsed_items.append(parsed)
    total_pixels = sum(h * w for _, _, h, w in checked_regions)
    if total_pixels > max_pixels:
        raise L3Error(f"batch decodes {total_pixels} pixels, more than max_pixels={max_pixels}")

    sizes = np.array([view.size for view in views], np.int64)
    data_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    data = np.empty(int(sizes.sum()), np.uint8)
    for view, offset in zip(views, data_offsets):
        data[offset:offset + view.size] = view
    stream_counts = [len(p.stream_starts) for p in parsed_items]
    stream_base = np.concatenate([[0], np.cumsum(stream_counts)[:-1]]).astype(np.int64)
    stream_starts = np.concatenate([p.stream_starts + o for p, o in zip(parsed_items, data_offsets)])
    stream_ends = np.concatenate([p.stream_ends + o for p, o in zip(parsed_items, data_offsets)])

    infos = [p.info for p in parsed_items]
    shapes = [output_shape(info, region) for info, region in zip(infos, checked_regions)]
    dtypes = [info.dtype for info in infos]
    item_bytes = np.array([int(np.prod(s)) * d.itemsize for s, d in zip(shapes, dtypes)], np.int64)
    if _same_shape(shapes, dtypes):
        padded = item_bytes  # same-shape items lie back to back: one (N, H, W, C) buffer
    else:
        padded = (item_bytes + 15) // 16 * 16  # aligned, so each item views with its own dtype
    out_offsets = np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64)

    records = np.zeros(len(items), ITEM_DTYPE)
    for i, (info, region) in enumerate(zip(infos, checked_regions)):
        records[i] = (
            info.width, info.height, info.channels, info.bits,
            fmt.TRANSFORM_SUBTRACT_GREEN if info.transform == "subtract-green" else fmt.TRANSFORM_NONE,
            info.tile_width, info.tile_height, info.tiles_x, stream_base[i],
            *region, out_offsets[i], region[3] * info.channels * (info.bits // 8),
        )

    launches = []
    modes = np.array([fmt.MODES[info.mode] for info in infos])
    for mode in (MODE_COMPACT, MODE_FAST):
        chosen = np.flatnonzero(modes == mode)
        if chosen.size == 0:
            continue
        task_lists = []
        for local, i in enumerate(chosen):
            tiles = _region_tiles(infos[i], checked_regions[i])
            task = np.empty(len(tiles), TASK_DTYPE)
            task["item"] = local
            task["tile_y"], task["tile_x"] = tiles[:, 0], tiles[:, 1]
            task_lists.append(task)
        sub = records[chosen]
        launches.append(
            Launch(
                mode=mode,
                items=sub,
                item_index=chosen.astype(np.int64),
                tasks=np.concatenate(task_lists),
                max_channels=int(sub["channels"].max()),
                max_tile_width=int(sub["tile_width"].max()),
                max_tile_height=int(sub["tile_height"].max()),
            )
        )
    return Batch(
        data=data,
        stream_starts=stream_starts.astype(np.int64),
        stream_ends=stream_ends.astype(np.int64),
        infos=infos,
        regions=checked_regions,
        shapes=shapes,
        dtypes=dtypes,
        out_offsets=out_offsets,
        out_size=int(padded.sum()),
        launches=launches,
    )


def _region_tiles(info: fmt.Info, region) -> np.ndarray:
    """(tile_y, tile_x) pairs of the tiles intersecting region, as an (n, 2) int64 array."""
    streams, _, _ = region_streams(info, region)
    tiles = streams[:: info.channels] // info.channels
    return np.stack([tiles // info.tiles_x, tiles % info.tiles_x], axis=1)


def split_output(batch: Batch, output, view_dtype=None) -> list:
    """Per-item views of the flat uint8 output buffer (numpy, cupy or, with view_dtype mapping
    numpy dtypes to the array library's own, torch), shaped and typed."""
    views = []
    for offset, shape, dtype in zip(batch.out_offsets, batch.shapes, batch.dtypes):
        count = int(np.prod(shape)) * dtype.itemsize
        typed = output[int(offset):int(offset) + count].view(dtype if view_dtype is None else view_dtype(dtype))
        views.append(typed.reshape(shape))
    return views
