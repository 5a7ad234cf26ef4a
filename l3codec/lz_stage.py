"""The LZ expansion stage of a GPU batch: stream tables in, stream tables out.

The LZ streams (kinds 6 to 9, docs/FORMAT.md §5.2) of the tiles a batch decodes are expanded on the
device, before the decode launches, by a kernel of their own (kernels/lz.cu, numba_kernels.expand_streams)
into raw streams in a scratch area after the packed batch; the stage's stream tables point there, so
the decode kernels read them as any raw stream. A batch without LZ streams has no stage (plan returns
None), and a decoder that reads LZ streams itself (the CPU's) keeps the batch's own tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .regions import region_streams

# One record per LZ stream to expand (a warp each): its LZ stream (from its kind byte) at
# [source, source_end), the prefix_bytes before it at prefix_start that the stream keeps (a palette's
# header and colour table: an LZ index plane), and where the raw streams go, from target: for each
# of `channels` planes (1 for kind 6 or 8; a pixel LZ stream's tile's channels, kind 7 or 9) the prefix,
# KIND_RAW, then the plane's plane_bytes, each plane plane_span(record) bytes after the last; for
# more than one, the block's interleaved output after them (samples of sample_bytes). status_index:
# the entry of the status array its item reports in; member_status: a status the host found in the
# tile's members (kind 7 or 9: STATUS_BAD_KIND or STATUS_BAD_SIZE, as streams.open_stream), which the
# expansion reports too; status_rank: the rank both report with (the stream's, see status_key: a pixel LZ
# tile's members follow its channel-0 stream, and the expansion reports the stream's own status first).
EXPANSION_DTYPE = np.dtype(
    [
        ("source", "<i8"),
        ("source_end", "<i8"),
        ("prefix_start", "<i8"),
        ("prefix_bytes", "<i8"),
        ("target", "<i8"),
        ("plane_bytes", "<i8"),
        ("status_index", "<i8"),
        ("channels", "<i8"),
        ("sample_bytes", "<i8"),
        ("member_status", "<i8"),
        ("status_rank", "<i8"),
    ]
)
assert EXPANSION_DTYPE.itemsize == 11 * 8


def plane_span(records) -> np.ndarray:
    """Bytes from one expanded plane of an EXPANSION_DTYPE record to the next (8-byte aligned)."""
    return (records["prefix_bytes"] + 1 + records["plane_bytes"] + 7) // 8 * 8


def table_bytes(streams, expansions):
    """Bytes the stage adds to a packed batch of `streams` streams: its records and, when there are any,
    the stream tables it returns (two int64 per stream)."""
    expansions = np.asarray(expansions)
    return np.where(expansions > 0, EXPANSION_DTYPE.itemsize * expansions + 2 * 8 * np.asarray(streams), 0)


@dataclass(frozen=True)
class LzExpansion:
    """A batch's LZ streams to expand: the records (targets relative to the scratch area, status_index the
    batch item), the streams then read from the scratch area (a pixel LZ tile's members too) and their
    bytes there, the scratch area's size, and the samples written there (they count against max_pixels)."""

    records: np.ndarray  # EXPANSION_DTYPE
    streams: np.ndarray  # int64 indices into the batch's stream tables
    starts: np.ndarray  # int64, relative to the scratch area
    ends: np.ndarray
    scratch_size: int
    samples: int

    def stream_tables(self, stream_starts, stream_ends, scratch: int) -> tuple:
        """(stream_starts, stream_ends) for a scratch area at byte `scratch` of the kernels' data: the
        given tables, each expanded stream read where its expansion puts it."""
        starts, ends = np.array(stream_starts, np.int64), np.array(stream_ends, np.int64)
        starts[self.streams], ends[self.streams] = scratch + self.starts, scratch + self.ends
        return starts, ends

    def kernel_records(self, scratch: int, status_index=None) -> np.ndarray:
        """The records as the expansion kernel reads them: targets at byte `scratch`, and status_index
        mapping a batch item to its entry of the status array (default: the item itself)."""
        records = self.records.copy()
        records["target"] += scratch
        if status_index is not None:
            records["status_index"] = np.asarray(status_index, np.int64)[records["status_index"]]
        return records


_LZ_KINDS = (fmt.KIND_LZ, fmt.KIND_LZ_CODED)
_PIXEL_LZ_KINDS = (fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED)


def plan(plans, data, stream_base, stream_starts, stream_ends, *, band_bits: int) -> LzExpansion | None:
    """The LZ streams of the tiles each item's region needs (batch.ItemPlan per item, its streams at
    stream_base in the batch's tables), or None when there are none: streams of kind 6 or 8, palette
    streams whose index plane is one, and pixel LZ streams (kind 7 or 9), whose tile's members then read
    their planes from the scratch area too. Only kinds, members' sizes and the palette's count byte are
    read; the expansion kernel checks the rest, and a stream it cannot expand reports STATUS_CORRUPT, as
    the CPU decoder does. A record's status_rank is its stream's rank, index << band_bits
    (batch.status_key)."""
    records, streams = [], []
    for item, item_plan in enumerate(plans):
        info = item_plan.info
        used, _, _ = region_streams(info, item_plan.region)
        index = stream_base[item] + used
        starts, ends = stream_starts[index], stream_ends[index]
        present = ends > starts
        kinds = np.full(used.size, -1, np.int64)
        kinds[present] = data[starts[present]]
        sample_bytes = info.bits // 8
        plane = starts.copy()
        channel = used % info.channels
        # streams.open_stream's rules, vectorised: an LZ plane is a stream of kind 6 or 8 outside a
        # palette or pixel LZ tile, the index plane of a palette stream (channel 0 of kind 3), or a
        # pixel LZ stream (kind 7 or 9) in channel 0
        tile_kinds = np.full(used.size, -1, np.int64)  # the kind of the tile's channel-0 stream
        first = stream_starts[index - channel]
        tile_present = stream_ends[index - channel] > first
        tile_kinds[tile_present] = data[first[tile_present]]
        palette = present & (kinds == fmt.KIND_PALETTE) & (channel == 0) & (ends - starts >= 2)
        colours = data[starts[palette] + 1].astype(np.int64) + 1
        plane[palette] = starts[palette] + fmt.PALETTE_HEADER_BYTES + colours * info.channels * sample_bytes
        palette &= plane < ends
        plane_kinds = kinds.copy()
        plane_kinds[palette] = data[plane[palette]]
        member_tile = (tile_kinds == fmt.KIND_PALETTE) | np.isin(tile_kinds, _PIXEL_LZ_KINDS)
        in_member_tile = (channel != 0) & member_tile
        pixels = present & np.isin(kinds, _PIXEL_LZ_KINDS) & (channel == 0)
        own_lz = np.isin(kinds, _LZ_KINDS) & ~in_member_tile
        lz = pixels | (present & np.isin(plane_kinds, _LZ_KINDS) & (own_lz | palette))
        if not lz.any():
            continue
        tiles = used[lz] // info.channels
        heights, widths = info.tile_rows(tiles // info.tiles_x), info.tile_columns(tiles % info.tiles_x)
        record = np.zeros(int(lz.sum()), EXPANSION_DTYPE)
        record["source"], record["source_end"] = plane[lz], ends[lz]
        record["prefix_start"], record["prefix_bytes"] = starts[lz], plane[lz] - starts[lz]
        record["plane_bytes"] = heights * widths * sample_bytes
        record["status_index"] = item
        record["status_rank"] = used[lz] << band_bits
        record["channels"] = np.where(pixels[lz], info.channels, 1)
        record["sample_bytes"] = sample_bytes
        # a pixel LZ tile's members, checked as open_stream does (the GPU reads their planes instead)
        tile_streams = index[lz][pixels[lz]]
        member_status = np.zeros(tile_streams.size, np.int64)
        for member in range(info.channels - 1, 0, -1):  # the first bad member's status stays
            at = tile_streams + member
            sizes = stream_ends[at] - stream_starts[at]
            member_kinds = np.full(at.size, -1, np.int64)  # (a tile's streams are never empty: parse checks)
            member_kinds[sizes > 0] = data[stream_starts[at][sizes > 0]]
            member_status = np.where(member_kinds != fmt.KIND_PALETTE_MEMBER, fmt.STATUS_BAD_KIND,
                                     np.where(sizes != 1, fmt.STATUS_BAD_SIZE, member_status))
        record["member_status"][pixels[lz]] = member_status
        records.append(record)
        streams.append(index[lz])
    if not records:
        return None
    records, first_streams = np.concatenate(records), np.concatenate(streams)
    planes = records["channels"]
    interleaved = np.where(planes > 1, (planes * records["plane_bytes"] + 7) // 8 * 8, 0)
    spans = plane_span(records) * planes + interleaved
    records["target"] = np.concatenate([[0], np.cumsum(spans)[:-1]])
    # the streams read from the scratch area: each record's channel-0 stream, and its tile's members
    owner = np.repeat(np.arange(len(records)), planes)
    member = np.arange(owner.size) - np.repeat(np.cumsum(planes) - planes, planes)
    starts = records["target"][owner] + member * plane_span(records)[owner]
    ends = starts + records["prefix_bytes"][owner] + 1 + records["plane_bytes"][owner]
    written = planes * records["plane_bytes"] // records["sample_bytes"]
    samples = int((written * np.where(planes > 1, 2, 1)).sum())  # a pixel LZ block's output, then its planes
    return LzExpansion(records, first_streams[owner] + member, starts, ends, int(spans.sum()), samples)
