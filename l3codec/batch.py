"""Host-side batch preparation for the GPU decoders: validation and launch tables.

Everything a kernel trusts is built here from validated headers and stream tables
(format.parse), with O(items + tiles) numpy work and no per-pixel or per-row loop.
The tables are little-endian numpy record arrays: the CUDA C kernels get them as structs generated
from these dtypes (kernels/cuda_c.py, records_header) and the Numba kernels index them by field.
This module imports neither cupy nor numba.

A launch decodes the items of one mode (8- and 16-bit alike): one block per task,
a task being one tile of one item that intersects the item's region (in compact mode, one band
of 32 rows of such a tile). A batch with LZ streams in those tiles has an LZ expansion stage
(lz_stage.py) that runs before the launches and gives the decode kernels their stream tables; one with
kind-10 (rANS) streams has a table stage (ans_stage.py) after it, which does the same for those.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from . import format as fmt
from . import ans_stage, lz_stage
from .ans_stage import TABLE_STAGE_DTYPE
from .lz_stage import EXPANSION_DTYPE
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
        ("data_end", "<i8"),  # byte after the item's own bytes in data: reads stop there (fast)
    ]
)
assert ITEM_DTYPE.itemsize == 16 * 8

# Each item's entry of a launch's int32 status array (zeroed by the host) ends as 0, or as the status of
# the item's first failing stream in stream order, a tall compact tile's bands in band order: the one the
# CPU decoder names (docs/FORMAT.md §8), though the GPU's tiles and bands fail in any order. A failing
# stream reports status_key(code, rank), rank = its index among the item's streams << STATUS_BAND_BITS,
# plus its band; the kernels keep the largest key (an atomic max), which is the lowest rank's, and 0 stays
# "no failure". status_codes() takes the codes back.
STATUS_CODE_BITS = 3  # codes 0 .. 4
STATUS_BAND_BITS = 3  # bands 0 .. 7: fmt.COMPACT_MAX_TILE_HEIGHT // fmt.COMPACT_BAND_ROWS
STATUS_RANK_LIMIT = 1 << 28  # keys stay below 2**31
assert fmt.COMPACT_MAX_TILE_HEIGHT // fmt.COMPACT_BAND_ROWS <= 1 << STATUS_BAND_BITS
assert max(fmt.STATUS_MESSAGES) < 1 << STATUS_CODE_BITS
# the most streams an image may have (the smallest tiles, partial ones along both edges) have ranks below it
assert 4 * (fmt.MAX_PIXELS // (fmt.MIN_TILE_WIDTH * fmt.FAST_MIN_TILE_HEIGHT) + fmt.MAX_DIM // fmt.MIN_TILE_WIDTH
            + fmt.MAX_DIM // fmt.FAST_MIN_TILE_HEIGHT + 1) << STATUS_BAND_BITS < STATUS_RANK_LIMIT


def status_key(code, rank):
    """What a stream of rank `rank` that fails with `code` reports (the kernels' report_status)."""
    return ((STATUS_RANK_LIMIT - 1 - rank) << STATUS_CODE_BITS) | code


def status_codes(entries) -> np.ndarray:
    """The status codes (format.STATUS_*) of a status array's entries."""
    return np.asarray(entries) & ((1 << STATUS_CODE_BITS) - 1)


# One record per block: a tile of an item (item: its index in the launch's items); in compact mode a band
# of a tile (band_y: the band's first tile row), the bands of one tile decoded by blocks of their own
# (fast: band_y 0, the whole tile).
TASK_DTYPE = np.dtype([("item", "<i8"), ("tile_y", "<i8"), ("tile_x", "<i8"), ("band_y", "<i8")])
assert TASK_DTYPE.itemsize == 4 * 8



@dataclass
class Launch:
    """The tables for one kernel launch: the items of one mode and one channel count (a launch
    mixing 1-channel label maps with 3-channel images would run the label tiles with idle warps
    and the images' shared memory)."""

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
    data_offsets: np.ndarray | None = None  # int64 byte offset of each item's file in data
    lz: lz_stage.LzExpansion | None = None  # the LZ streams expanded before the launches, if any
    ans: ans_stage.AnsTables | None = None  # the kind-10 streams whose tables are built before the launches

    @property
    def same_shape(self) -> bool:
        """Every item has the same output shape and dtype: the output is one (N, *shape) array."""
        return _same_shape(self.shapes, self.dtypes)


def _same_shape(shapes, dtypes) -> bool:
    return len(set(zip(shapes, dtypes))) == 1


def output_shape(info: fmt.Info, region) -> tuple:
    _, _, h, w = region
    return (h, w) if info.channels == 1 else (h, w, info.channels)


@dataclass(frozen=True)
class ItemPlan:
    """One validated item, ready to join a batch: the per-item work, which a DataLoader worker can do."""

    info: fmt.Info
    region: tuple  # checked (y, x, h, w)
    stream_starts: np.ndarray  # int64 offsets into the item's own bytes
    stream_ends: np.ndarray
    tiles: np.ndarray  # (n, 2) int64: (tile_y, tile_x) of the tiles the region touches
    staged_size: int | None = None  # set by stage_streams: the item is only the streams its tiles use

    @property
    def size(self) -> int:
        """Bytes of the item in the batch's data: the file, or what stage_streams kept of it."""
        return self.info.file_size if self.staged_size is None else self.staged_size

    @property
    def shape(self) -> tuple:
        return output_shape(self.info, self.region)

    @property
    def row_bytes(self) -> int:
        return self.region[3] * self.info.channels * (self.info.bits // 8)


def plan_item(data, region=None, /, *, verify: bool = True) -> ItemPlan:
    """Validate one item (header, stream table, with verify its payload checksum, its region)."""
    parsed = fmt.parse(fmt.as_bytes_view(data), verify=verify)
    info = parsed.info
    region = (0, 0, info.height, info.width) if region is None else check_region(info, region)
    return ItemPlan(info, region, parsed.stream_starts, parsed.stream_ends, _region_tiles(info, region))


def stage_streams(plan: ItemPlan, data: np.ndarray, out: np.ndarray, /) -> ItemPlan:
    """Copy the streams of plan's tiles from data (the item's validated file) to the start of out,
    back to back, and return the plan of those bytes: its tiles' streams at their new offsets, the
    others empty at the end. A decode of the region needs these bytes and no more: a crop of a
    large image stages (and sends to the device) a fraction of it, and a whole image all but its
    header. Streams are contiguous in the file, so consecutive ones go in one copy."""
    used, _, _ = region_streams(plan.info, plan.region)  # ascending: tiles row by row, then channels
    sizes = plan.stream_ends[used] - plan.stream_starts[used]
    placed = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(placed[-1])
    if total > out.size:
        raise L3Error(f"staging buffer of {out.size} bytes left is too small for {total}")
    breaks = np.flatnonzero(np.diff(used) != 1) + 1  # runs of consecutive streams
    for first, stop in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [used.size]])):
        source = int(plan.stream_starts[used[first]])
        length = int(placed[stop] - placed[first])
        out[placed[first]:placed[first] + length] = data[source:source + length]
    starts = np.full(plan.stream_starts.size, total, np.int64)
    ends = starts.copy()
    starts[used], ends[used] = placed[:-1], placed[1:]
    return dataclasses.replace(plan, stream_starts=starts, stream_ends=ends, staged_size=total)


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
    views, plans = [], []
    for index, (item, region, check_payload) in enumerate(zip(items, regions, verify)):
        try:
            view = fmt.as_bytes_view(item)
            plans.append(plan_item(view, region, verify=check_payload))
        except L3Error as error:
            raise L3Error(f"batch item {index}: {error}") from None
        views.append(view)
    check_pixels(plans, max_pixels)
    return assemble(plans, np.concatenate(views), max_pixels=max_pixels)


def check_pixels(plans, max_pixels: int = fmt.MAX_PIXELS, *, expanded_samples: int = 0,
                 table_bytes: int = 0) -> None:
    """Refuse a batch whose regions hold more than max_pixels pixels, or, with the samples of the LZ
    planes it expands on the device, more than that in all; and one whose kind-10 table blocks
    (assemble) take more than max_pixels bytes. A block is up to 65 KB whatever its stream's size, so
    a small file of many tiny kind-10 streams must not ask for a large scratch area; the tables have a
    budget of their own, so that the largest legal image (about 35 KB of tables per 1024 x 256
    tile-channel, 13% of its samples) is not refused for them."""
    total_pixels = sum(plan.region[2] * plan.region[3] for plan in plans)
    if total_pixels + expanded_samples > max_pixels:
        expanding = f" and expands {expanded_samples} samples of LZ streams" if expanded_samples else ""
        raise L3Error(f"batch decodes {total_pixels} pixels{expanding}, more than max_pixels={max_pixels}")
    if table_bytes > max_pixels:
        raise L3Error(f"batch builds {table_bytes} bytes of rANS tables, more than max_pixels={max_pixels} "
                      f"(the tables' budget, in bytes)")


def default_layout(plans) -> tuple:
    """(out_offsets, out_row_pitches, out_size): same-shape items back to back as one (N, *shape)
    array, others each at a 16-byte aligned offset, so that each views with its own dtype."""
    shapes = [plan.shape for plan in plans]
    dtypes = [plan.info.dtype for plan in plans]
    item_bytes = np.array([plan.region[2] * plan.row_bytes for plan in plans], np.int64)
    padded = item_bytes if _same_shape(shapes, dtypes) else (item_bytes + 15) // 16 * 16
    offsets = np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64)
    return offsets, np.array([plan.row_bytes for plan in plans], np.int64), int(padded.sum())


def assemble(plans, data: np.ndarray, /, *, layout=None, data_offsets=None, max_pixels: int = fmt.MAX_PIXELS) -> Batch:
    """The batch of validated items whose bytes lie in data: back to back in order, or at data_offsets.

    layout: (out_offsets, out_row_pitches, out_size) placing each item's output (row pitch in
    bytes, at least its row); default_layout(plans) when None. O(items + tiles) numpy work.
    max_pixels: the budget of check_pixels, which the samples of the LZ planes to expand count
    against too (a 1x1 crop of a wide LZ tile expands the whole tile).
    """
    plans = list(plans)
    sizes = np.array([plan.size for plan in plans], np.int64)
    if data_offsets is None:
        data_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    data_offsets = np.asarray(data_offsets, np.int64)
    if np.any(data_offsets < 0) or np.any(data_offsets + sizes > data.size):
        raise L3Error(f"batch items lie outside its {data.size} bytes of data")
    out_offsets, pitches, out_size = default_layout(plans) if layout is None else layout
    if np.any(np.asarray(pitches) < [plan.row_bytes for plan in plans]):
        raise L3Error("an output row pitch is shorter than its item's row")
    stream_counts = [len(plan.stream_starts) for plan in plans]
    stream_base = np.concatenate([[0], np.cumsum(stream_counts)[:-1]]).astype(np.int64)
    stream_starts = np.concatenate([plan.stream_starts + o for plan, o in zip(plans, data_offsets)])
    stream_ends = np.concatenate([plan.stream_ends + o for plan, o in zip(plans, data_offsets)])

    infos = [plan.info for plan in plans]
    records = np.zeros(len(plans), ITEM_DTYPE)
    for i, plan in enumerate(plans):
        info = plan.info
        records[i] = (
            info.width, info.height, info.channels, info.bits,
            fmt.TRANSFORMS[info.transform],
            info.tile_width, info.tile_height, info.tiles_x, stream_base[i],
            *plan.region, out_offsets[i], pitches[i], data_offsets[i] + sizes[i],
        )

    lz = lz_stage.plan(plans, data, stream_base, stream_starts, stream_ends, band_bits=STATUS_BAND_BITS)
    ans = ans_stage.plan(plans, data, stream_base, stream_starts, stream_ends)
    check_pixels(plans, max_pixels, expanded_samples=0 if lz is None else lz.samples,
                 table_bytes=0 if ans is None else ans.scratch_size)

    launches = []
    modes = np.array([fmt.MODES[info.mode] for info in infos])
    channels = np.array([info.channels for info in infos])
    for mode, count in ((mode, count) for mode in fmt.MODE_SPECS for count in range(1, 5)):
        chosen = np.flatnonzero((modes == mode) & (channels == count))
        if chosen.size == 0:
            continue
        task_lists = []
        for local, i in enumerate(chosen):
            task_lists.append(_tasks(plans[i], local, mode))
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
        regions=[plan.region for plan in plans],
        shapes=[plan.shape for plan in plans],
        dtypes=[info.dtype for info in infos],
        out_offsets=np.asarray(out_offsets, np.int64),
        out_size=int(out_size),
        launches=launches,
        data_offsets=data_offsets,
        lz=lz,
        ans=ans,
    )


@dataclass(frozen=True)
class PackedLayout:
    """Where a batch's bytes and tables lie in one buffer, so that a single copy takes all of it to
    the device: byte offsets, each 8-byte aligned; per launch, its item and task tables; with an LZ
    stage, its records, with an ANS table stage its records, and with either the stream tables they give
    the kernels. The scratch area follows at `size` on the device (it is not copied): the expanded
    streams, then the table blocks (at size + lz_scratch_size); a device buffer holds device_size
    bytes, of which the kernels see all as data."""

    data_size: int
    stream_starts: int
    stream_ends: int
    stream_count: int
    items: tuple
    tasks: tuple
    expansions: int
    expansion_count: int
    size: int
    scratch_size: int = 0
    expanded_starts: int = 0  # the stages' stream tables (with expansion_count or ans_count)
    expanded_ends: int = 0
    ans_tables: int = 0  # the ANS table stage's records
    ans_count: int = 0
    lz_scratch_size: int = 0  # the LZ stage's part of the scratch area, before the table blocks

    @property
    def device_size(self) -> int:
        return self.size + self.scratch_size

    @property
    def staged(self) -> bool:
        """A stage runs before the launches: the kernels read the stages' stream tables."""
        return bool(self.expansion_count or self.ans_count)


def packed_layout(batch: Batch) -> PackedLayout:
    def align(offset: int) -> int:
        return (offset + 7) // 8 * 8

    count = len(batch.stream_starts)
    starts = align(int(batch.data.size))
    ends = starts + 8 * count
    offset = ends + 8 * count
    items, tasks = [], []
    for launch in batch.launches:
        items.append(offset)
        offset += launch.items.nbytes
        tasks.append(offset)
        offset += launch.tasks.nbytes
    if batch.lz is None and batch.ans is None:
        return PackedLayout(int(batch.data.size), starts, ends, count, tuple(items), tuple(tasks), offset, 0,
                            offset)
    lz_records = np.zeros(0, EXPANSION_DTYPE) if batch.lz is None else batch.lz.records
    ans_records = np.zeros(0, TABLE_STAGE_DTYPE) if batch.ans is None else batch.ans.records
    lz_scratch, ans_scratch = stage_scratch_sizes(batch)
    expansions = offset
    ans_tables = expansions + lz_records.nbytes
    expanded_starts = ans_tables + ans_records.nbytes
    expanded_ends = expanded_starts + 8 * count
    return PackedLayout(int(batch.data.size), starts, ends, count, tuple(items), tuple(tasks), expansions,
                        len(lz_records), expanded_ends + 8 * count, lz_scratch + ans_scratch,
                        expanded_starts, expanded_ends, ans_tables, len(ans_records), lz_scratch)


def stage_scratch_sizes(batch: Batch) -> tuple:
    """(LZ stage's, ANS table stage's) bytes of the scratch area: the expanded streams, then the blocks."""
    lz = 0 if batch.lz is None else batch.lz.scratch_size
    return lz, 0 if batch.ans is None else batch.ans.scratch_size


def expanded_tables(batch: Batch, scratch: int, status_index=None) -> tuple:
    """(stream_starts, stream_ends, expansion records) that the kernels read, for a scratch area at byte
    `scratch` of their data (lz_stage.LzExpansion: stream_tables, kernel_records; the ANS table stage's
    blocks after the expanded streams, ans_stage.AnsTables.stream_tables); a batch without stages keeps
    its own tables and has no records. ans_records gives the table stage's."""
    starts, ends = batch.stream_starts.copy(), batch.stream_ends.copy()
    records = np.zeros(0, EXPANSION_DTYPE)
    if batch.lz is not None:
        starts, ends = batch.lz.stream_tables(starts, ends, scratch)
        records = batch.lz.kernel_records(scratch, status_index)
    if batch.ans is not None:
        starts, ends = batch.ans.stream_tables(starts, ends, scratch + stage_scratch_sizes(batch)[0])
    return starts, ends, records


def ans_records(batch: Batch, scratch: int) -> np.ndarray:
    """The ANS table stage's records as its kernel reads them, for a scratch area at byte `scratch` of the
    kernels' data (the blocks after the LZ stage's expanded streams); none without kind-10 streams."""
    if batch.ans is None:
        return np.zeros(0, TABLE_STAGE_DTYPE)
    return batch.ans.kernel_records(scratch + stage_scratch_sizes(batch)[0])


def status_order(batch: Batch) -> np.ndarray:
    """The batch item of each entry of a launch's status array (items grouped by launch)."""
    return np.concatenate([launch.item_index for launch in batch.launches])


def write_packed(batch: Batch, layout: PackedLayout, buffer: np.ndarray, /) -> None:
    """Write the batch's data (unless it already lies at the start of buffer) and tables into buffer."""
    if buffer.size < layout.size:
        raise L3Error(f"a {buffer.size}-byte buffer cannot hold a packed batch of {layout.size} bytes")
    if batch.data.size and batch.data.ctypes.data != buffer.ctypes.data:
        buffer[:layout.data_size] = batch.data
    def int64(start: int, values) -> None:
        buffer[start:start + 8 * len(values)].view(np.int64)[:] = values

    int64(layout.stream_starts, batch.stream_starts)
    int64(layout.stream_ends, batch.stream_ends)
    for launch, items, tasks in zip(batch.launches, layout.items, layout.tasks):
        buffer[items:items + launch.items.nbytes] = launch.items.view(np.uint8)
        buffer[tasks:tasks + launch.tasks.nbytes] = launch.tasks.view(np.uint8)
    if layout.staged:  # the stages: their records and the stream tables they give the kernels
        order = status_order(batch)
        position = np.empty(len(batch.infos), np.int64)
        position[order] = np.arange(order.size)
        starts, ends, records = expanded_tables(batch, layout.size, position)
        buffer[layout.expansions:layout.expansions + records.nbytes] = records.view(np.uint8)
        tables = ans_records(batch, layout.size)
        buffer[layout.ans_tables:layout.ans_tables + tables.nbytes] = tables.view(np.uint8)
        int64(layout.expanded_starts, starts)
        int64(layout.expanded_ends, ends)


def packed_views(layout: PackedLayout, launches, buffer, /, int64_type=np.int64) -> tuple:
    """(data, stream_starts, stream_ends, [(items, tasks) per launch], expansions) as the kernels read
    them, views of a flat uint8 packed buffer of any array library with slicing, .view(dtype) and
    .reshape (numpy, CuPy, Numba device arrays; torch with int64_type=torch.int64): int64 tables,
    items (n, 16), tasks (n, 4), expansions (n, 11). With a stage (LZ or ANS tables), data is the whole
    buffer (the expanded streams and table blocks lie in its scratch area) and the stream tables are the
    stages'; else data is the batch's bytes and the tables its own (packed_streams). packed_ans_records
    gives the ANS table stage's records."""
    def int64(start: int, count: int, columns: int | None = None):
        view = buffer[start:start + 8 * count].view(int64_type)
        return view if columns is None else view.reshape(count // columns, columns)

    if layout.staged:
        data = buffer[:layout.device_size]
        starts = int64(layout.expanded_starts, layout.stream_count)
        ends = int64(layout.expanded_ends, layout.stream_count)
    else:
        data, starts, ends = packed_streams(layout, buffer, int64_type)
    tables = []
    for launch, items, tasks in zip(launches, layout.items, layout.tasks):
        item_columns, task_columns = len(ITEM_DTYPE.names), len(TASK_DTYPE.names)
        tables.append((
            int64(items, len(launch.items) * item_columns, item_columns),
            int64(tasks, len(launch.tasks) * task_columns, task_columns),
        ))
    columns = len(EXPANSION_DTYPE.names)
    expansions = int64(layout.expansions, layout.expansion_count * columns, columns)
    return data, starts, ends, tables, expansions


def packed_ans_records(layout: PackedLayout, buffer, /, int64_type=np.int64):
    """The ANS table stage's records in a packed buffer, as an (n, 8) int64 view
    (ans_stage.TABLE_STAGE_DTYPE)."""
    columns = len(TABLE_STAGE_DTYPE.names)
    view = buffer[layout.ans_tables:layout.ans_tables + 8 * columns * layout.ans_count].view(int64_type)
    return view.reshape(layout.ans_count, columns)


def packed_streams(layout: PackedLayout, buffer, /, int64_type=np.int64) -> tuple:
    """(data, stream_starts, stream_ends) of a packed buffer as the batch's items hold them, LZ streams
    where they lie: for a decoder that expands LZ streams itself (the CPU's)."""
    def int64(start: int):
        return buffer[start:start + 8 * layout.stream_count].view(int64_type)

    return buffer[:layout.data_size], int64(layout.stream_starts), int64(layout.stream_ends)


# ---------------------------------------------------------------- sizing rules (staging's buffers too)

def tile_tasks(mode: int, tile_rows) -> np.ndarray:
    """Tasks (GPU blocks) of tiles of tile_rows rows: one per tile; in compact mode one per band of
    fmt.COMPACT_BAND_ROWS rows, each decoded by a block of its own."""
    tile_rows = np.asarray(tile_rows, np.int64)
    if mode == fmt.MODE_COMPACT:
        return -(-tile_rows // fmt.COMPACT_BAND_ROWS)
    return np.ones_like(tile_rows)


def table_bytes(items, streams, tasks, expansions, ans_tables=0):
    """Bytes of the launch tables write_packed puts after a batch's data: two int64 per stream
    (starts, ends), a record per item and per task, the LZ stage's (lz_stage.table_bytes: its records and
    the stages' stream tables) and the ANS table stage's records (their stream tables are the same ones:
    two int64 per stream when either stage runs)."""
    ans_only = (np.asarray(expansions) == 0) & (np.asarray(ans_tables) > 0)
    staged_only = np.where(ans_only, 2 * 8 * np.asarray(streams), 0)
    return (2 * 8 * np.asarray(streams) + ITEM_DTYPE.itemsize * np.asarray(items)
            + TASK_DTYPE.itemsize * np.asarray(tasks) + lz_stage.table_bytes(streams, expansions)
            + ans_stage.table_bytes(streams, ans_tables) + staged_only)


def most_streams(file_size, height, width, channels) -> np.ndarray:
    """The most streams a file of this size and shape can hold, whatever its mode and tiles: each
    stream has a byte at least beside its table entry, and a tile is at least MIN_TILE_WIDTH wide
    and as tall as the lowest tile height of any mode."""
    lowest = min(mode.tile_heights.start for mode in fmt.MODE_SPECS.values())
    tiles = -(-np.asarray(height, np.int64) // lowest) * -(-np.asarray(width, np.int64) // fmt.MIN_TILE_WIDTH)
    return np.minimum(np.asarray(file_size, np.int64) // (1 + fmt.STREAM_END_DTYPE.itemsize),
                      tiles * np.asarray(channels, np.int64))


def most_tasks(height, width, streams) -> np.ndarray:
    """The most tasks (tile_tasks) of an item of this shape and stream count in any mode: fast one per
    tile (at most one per stream); compact one per band, so per column of tiles one per COMPACT_BAND_ROWS
    rows and at most COMPACT_MAX_TILE_HEIGHT // COMPACT_BAND_ROWS per tile."""
    streams = np.asarray(streams, np.int64)
    bands_per_tile = fmt.COMPACT_MAX_TILE_HEIGHT // fmt.COMPACT_BAND_ROWS
    band_rows = -(-np.asarray(height, np.int64) // fmt.COMPACT_BAND_ROWS)
    tiles_x = -(-np.asarray(width, np.int64) // fmt.MIN_TILE_WIDTH)
    bands = np.minimum(bands_per_tile * streams, band_rows * tiles_x)
    return np.maximum(streams, bands)


def most_table_bytes(file_size, height, width, channels) -> np.ndarray:
    """The most launch-table bytes (table_bytes) one item of this file size and shape adds to a packed
    batch: at most an LZ expansion per stream (a stream that is not LZ may have an ANS table stage record
    instead, a smaller one: kind 10 and LZ kinds exclude each other)."""
    assert TABLE_STAGE_DTYPE.itemsize <= EXPANSION_DTYPE.itemsize
    streams = most_streams(file_size, height, width, channels)
    return table_bytes(1, streams, most_tasks(height, width, streams), streams)


def _tasks(plan: ItemPlan, local: int, mode: int) -> np.ndarray:
    """TASK_DTYPE records of the plan's tiles: one per tile, or in compact mode one per band of
    fmt.COMPACT_BAND_ROWS rows (every band of a tile the region touches: the CPU decodes whole tiles too)."""
    tile_y, tile_x = plan.tiles[:, 0], plan.tiles[:, 1]
    bands = tile_tasks(mode, plan.info.tile_rows(tile_y))
    tasks = np.zeros(int(bands.sum()), TASK_DTYPE)
    tasks["item"] = local
    tasks["tile_y"], tasks["tile_x"] = np.repeat(tile_y, bands), np.repeat(tile_x, bands)
    first = np.repeat(np.cumsum(bands) - bands, bands)
    tasks["band_y"] = (np.arange(len(tasks)) - first) * fmt.COMPACT_BAND_ROWS
    return tasks


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
