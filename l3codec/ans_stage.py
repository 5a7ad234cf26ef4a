"""The rANS table stage of a GPU batch (format 10, stream kind 10): stream tables in, stream tables out.

A kind-10 stream (compact v2, docs/FORMAT.md §6.5) carries its own table set. Before the decode
launches, a kernel of its own (kernels/ans.cu, a warp per stream) reads each such stream's header, bias
table, table set and row-length table, checks them in the CPU decoder's order, and writes a *table
block* into a scratch area after the packed batch (after the LZ stage's, when there is one). The stage's
stream tables point the stream there, so the compact band kernel finds, where the stream's kind byte
was, a block holding what it needs: where the row streams are, the stage's status, the bias values and
the slot tables (FORMAT.md §6.6). The row streams themselves stay where they are in the batch's data.

Block layout (little-endian, at an 8-byte aligned `target`; a palette's header and colour table, the
`prefix`, are copied just before it, as lz_stage does, so that open_stream finds the block as the
palette's index plane):

    offset  size           field
    0       1              kind = KIND_CODED_ANS (copied)
    1       1              flags (copied)
    2       1              P, the table precision (copied)
    3       1              L, the row-length bit width (copied)
    4       4   int32      status: STATUS_OK, or the status the stream fails with before its rows
                           (header, bias and table set, row-length table): the stage's checks
    8       8   int64      first row stream's byte in the data (absolute)
    16      8   int64      row-length table's byte in the data (absolute)
    24      8   int64      the stream's end in the data (absolute)
    32      4   int32      end status: STATUS_OK, or STATUS_BAD_SIZE when the row lengths do not add up
                           to the stream's size (the check after the rows)
    36      4              zero
    40      164 int32[41]  bias values, 0 when the stream has no bias table
    204     15  uint8[15]  per context, its alphabet size (the stage's own use)
    219     5              zero
    224     3840 uint32[15][64]  per context and token: f | cum << 16 (0 for tokens not coded,
                           ans.NO_TOKEN's column included)
    4064    15 << P        per context, the slot table: 1 byte a slot, the token (ans.NO_TOKEN for a
                           context that codes none); absent (slot_bytes 0) when P is out of range

A batch without kind-10 streams has no stage (plan returns None). Only the kind byte, P (to size the
slot tables, so scratch never depends on an unchecked value: P outside 6..12 gets no slot room and the
stage reports it) and, as lz_stage.plan, palette counts are read on the host; the stage kernel checks
the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ans, ans_stream
from . import format as fmt
from .regions import region_streams

KIND_CODED_ANS = fmt.KIND_CODED_ANS
ANS_HEADER_BYTES = ans_stream.ANS_HEADER_BYTES  # kind, flags, P, L
# The statuses a kind-10 stream fails with (docs/FORMAT.md §8; the CPU decoder's, every backend reports the
# same, ans_stream.py): a stream too short for its header; a bias table or table set refused or cut short;
# a row whose bytes lie past the stream; a row that does not decode to exactly its bytes (ans.ANS_BAD_STATE,
# ANS_BAD_TOKEN in a row, ANS_ENDS_EARLY, ANS_ENDS_LATE).
ANS_SHORT_STATUS = fmt.STATUS_BAD_SIZE
ANS_TABLE_STATUS = fmt.ANS_TABLE_FAULT_STATUS
ANS_ROW_SIZE_STATUS = fmt.STATUS_BAD_SIZE
ANS_ROW_STATUS = fmt.ANS_ROW_FAULT_STATUS
ANS_TOKEN_COLUMNS = ans.NO_TOKEN + 1  # token_info's columns: every token a slot byte can name
BLOCK_STATUS = 4
BLOCK_ROWS = 8
BLOCK_LENGTHS = 16
BLOCK_END = 24
BLOCK_END_STATUS = 32
BLOCK_BIAS = 40
BLOCK_ALPHABETS = BLOCK_BIAS + 4 * ans.GRADIENT_CONTEXTS
BLOCK_TOKEN_INFO = 224
BLOCK_SLOTS = BLOCK_TOKEN_INFO + 4 * ans.ANS_CONTEXTS * ANS_TOKEN_COLUMNS
assert BLOCK_ALPHABETS + ans.ANS_CONTEXTS <= BLOCK_TOKEN_INFO and BLOCK_SLOTS % 8 == 0

# One record per kind-10 stream the batch decodes (a warp each): the stream at [source, source_end) (its kind
# byte at source), the prefix_bytes before it at prefix_start to copy before the block (a palette's header
# and colour table), the block at target (8-byte aligned), slot_bytes of slot tables in it (15 << P, or 0
# when P is out of range), the item's sample bits and the tile's rows (the row-length table's entries).
TABLE_STAGE_DTYPE = np.dtype(
    [
        ("source", "<i8"),
        ("source_end", "<i8"),
        ("prefix_start", "<i8"),
        ("prefix_bytes", "<i8"),
        ("target", "<i8"),
        ("slot_bytes", "<i8"),
        ("bits", "<i8"),
        ("rows", "<i8"),
    ]
)
assert TABLE_STAGE_DTYPE.itemsize == 8 * 8


def slot_bytes(precision) -> np.ndarray:
    """Slot-table bytes of a block for header byte P: 15 << P, or 0 for a P the format refuses."""
    precision = np.asarray(precision, np.int64)
    valid = (precision >= ans.ANS_MIN_PRECISION) & (precision <= ans.ANS_MAX_PRECISION)
    return np.where(valid, ans.ANS_CONTEXTS << np.where(valid, precision, 0), 0)


def block_span(records) -> np.ndarray:
    """Bytes from one record's prefix to the next's: the prefix and the block, each 8-byte aligned."""
    return (records["prefix_bytes"] + 7) // 8 * 8 + BLOCK_SLOTS + (records["slot_bytes"] + 7) // 8 * 8


def table_bytes(streams, tables):
    """Bytes the stage's records add to a packed batch of `streams` streams (the stream tables it returns
    are counted by batch.table_bytes, once for both stages)."""
    return TABLE_STAGE_DTYPE.itemsize * np.asarray(tables)


@dataclass(frozen=True)
class AnsTables:
    """A batch's kind-10 streams: the records (targets relative to the stage's scratch area), the streams
    then read from there, their (start, end) there (the prefix's start and the block's end), and the area's
    size."""

    records: np.ndarray  # TABLE_STAGE_DTYPE
    streams: np.ndarray  # int64 indices into the batch's stream tables
    starts: np.ndarray  # int64, relative to the scratch area
    ends: np.ndarray
    scratch_size: int

    def stream_tables(self, stream_starts, stream_ends, scratch: int) -> tuple:
        """(stream_starts, stream_ends) for the stage's scratch area at byte `scratch` of the kernels' data:
        the given tables (the LZ stage's, if any), each kind-10 stream read at its block."""
        starts, ends = np.array(stream_starts, np.int64), np.array(stream_ends, np.int64)
        starts[self.streams], ends[self.streams] = scratch + self.starts, scratch + self.ends
        return starts, ends

    def kernel_records(self, scratch: int) -> np.ndarray:
        """The records as the stage kernel reads them: targets at byte `scratch`."""
        records = self.records.copy()
        records["target"] += scratch
        return records


def plan(plans, data, stream_base, stream_starts, stream_ends) -> AnsTables | None:
    """The kind-10 streams of the compact tiles each item's region needs (batch.ItemPlan per item, its
    streams at stream_base in the batch's tables), or None when there are none: streams of kind 10 that
    code their own plane, and palette streams whose index plane is one (streams.open_stream's rules, as
    lz_stage.plan applies them). Fast-mode items are left out: kind 10 there is STATUS_BAD_KIND."""
    records, streams = [], []
    for item, item_plan in enumerate(plans):
        info = item_plan.info
        if fmt.MODES[info.mode] != fmt.MODE_COMPACT:
            continue
        used, _, _ = region_streams(info, item_plan.region)
        index = stream_base[item] + used
        starts, ends = stream_starts[index], stream_ends[index]
        present = ends > starts
        kinds = np.full(used.size, -1, np.int64)
        kinds[present] = data[starts[present]]
        channel = used % info.channels
        first = stream_starts[index - channel]
        tile_kinds = np.full(used.size, -1, np.int64)
        tile_present = stream_ends[index - channel] > first
        tile_kinds[tile_present] = data[first[tile_present]]
        pixel_lz = np.isin(tile_kinds, (fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED))
        member_tile = (tile_kinds == fmt.KIND_PALETTE) | pixel_lz
        own = present & (kinds == KIND_CODED_ANS) & ~((channel != 0) & member_tile)
        plane = starts.copy()
        palette = present & (kinds == fmt.KIND_PALETTE) & (channel == 0)
        palette &= ends - starts >= fmt.PALETTE_HEADER_BYTES
        colours = data[starts[palette] + 1].astype(np.int64) + 1
        table = colours * info.channels * (info.bits // 8)
        plane[palette] = starts[palette] + fmt.PALETTE_HEADER_BYTES + table
        palette &= plane < ends
        palette[palette] = data[plane[palette]] == KIND_CODED_ANS
        chosen = own | palette
        if not chosen.any():
            continue
        source, source_end = plane[chosen], ends[chosen]
        precision = np.full(source.size, -1, np.int64)
        has_header = source_end - source >= ANS_HEADER_BYTES
        precision[has_header] = data[source[has_header] + 2]
        tiles = used[chosen] // info.channels
        record = np.zeros(source.size, TABLE_STAGE_DTYPE)
        record["source"], record["source_end"] = source, source_end
        record["prefix_start"], record["prefix_bytes"] = starts[chosen], source - starts[chosen]
        record["slot_bytes"] = slot_bytes(precision)
        record["bits"] = info.bits
        record["rows"] = info.tile_rows(tiles // info.tiles_x)
        records.append(record)
        streams.append(index[chosen])
    if not records:
        return None
    records, chosen_streams = np.concatenate(records), np.concatenate(streams)
    spans = block_span(records)
    place = np.concatenate([[0], np.cumsum(spans)[:-1]]).astype(np.int64)
    records["target"] = place + (records["prefix_bytes"] + 7) // 8 * 8
    starts = records["target"] - records["prefix_bytes"]
    ends = records["target"] + BLOCK_SLOTS + records["slot_bytes"]
    return AnsTables(records, chosen_streams, starts, ends, int(spans.sum()))

