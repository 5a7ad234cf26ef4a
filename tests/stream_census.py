"""What a file's streams hold, read with the codec's own field helpers: for tests that must know
their data reaches a path (stream kinds, palettes, compact copied rows, fast group codes)."""

import numpy as np

from l3codec import compact, fast, streams
from l3codec.streams import plane_streams  # noqa: F401 - the tests import it from here
from l3codec import format as fmt


KIND_NAMES = {fmt.KIND_CONSTANT: "constant", fmt.KIND_CODED: "coded", fmt.KIND_CODED_EXTENDED: "coded", fmt.KIND_RAW: "raw",
              fmt.KIND_PALETTE: "palette", fmt.KIND_PALETTE_MEMBER: "member", fmt.KIND_LZ: "lz", fmt.KIND_PIXEL_LZ: "pixel_lz",
              fmt.KIND_LZ_CODED: "lz", fmt.KIND_PIXEL_LZ_CODED: "pixel_lz", fmt.KIND_CODED_ANS: "coded"}  # coded LZ streams counted again as "huffman"


def stream_census(data) -> dict:
    """Counts of stream kinds (a palette's index stream counted by its own kind too), compact copy rows
    (zero row lengths) in a file."""
    parsed = fmt.parse(data)
    info = parsed.info
    buf = np.frombuffer(data, np.uint8)
    census = {"constant": 0, "coded": 0, "raw": 0, "lz": 0, "pixel_lz": 0, "palette": 0, "member": 0, "copy_rows": 0,
              "index_constant": 0, "index_coded": 0, "index_raw": 0, "index_lz": 0, "huffman": 0}
    census["member"] = sum(int(buf[start] == fmt.KIND_PALETTE_MEMBER) for start in parsed.stream_starts)
    for stream, start, end in plane_streams(data):
        kind = int(buf[start])
        census[KIND_NAMES[kind]] += 1
        census["huffman"] += kind in (fmt.KIND_LZ_CODED, fmt.KIND_PIXEL_LZ_CODED)
        if buf[parsed.stream_starts[stream]] == fmt.KIND_PALETTE:
            census["palette"] += 1
            census["index_" + KIND_NAMES[kind]] += 1
        if kind == fmt.KIND_CODED and info.mode == "compact":
            tile = stream // info.channels
            h = int(info.tile_rows(tile // info.tiles_x))
            status, _, _, length_bits, table_pos, _ = compact.compact_stream_layout(buf, int(start), int(end), h)
            assert status == fmt.STATUS_OK, status
            lengths = [compact.compact_row_length(buf, table_pos, length_bits, r) for r in range(h)]
            census["copy_rows"] += sum(1 for r in range(1, h) if lengths[r] == 0)
    return census


def fast_census(data) -> dict:
    """Counts of what the rows of a file's coded fast streams hold: zero rows (A = 0), unflagged,
    sparse, packed, Rice and bitmap groups (docs/FORMAT.md §7), and the most data bits of a group, read with
    fast.py's field helpers."""
    parsed = fmt.parse(data)
    info = parsed.info
    buf = np.frombuffer(data, np.uint8)
    census = {"zero_rows": 0, "unflagged": 0, "sparse": 0, "packed": 0, "rice": 0, "bitmap": 0, "group_bits": 0}
    assert info.mode == "fast", info.mode  # compact streams are no fast rows
    form_names = {fast.FORM_SPARSE: "sparse", fast.FORM_PACKED: "packed", fast.FORM_RICE: "rice",
                  fast.FORM_BITMAP: "bitmap"}
    for stream, start, end in plane_streams(data):
        if not streams.is_coded(buf[start]):
            continue
        extended = buf[start] == fmt.KIND_CODED_EXTENDED
        size_of_header = fast.header_bits(info.bits, extended)
        code_bits = fast.code_bits(info.bits, extended)
        tile = stream // info.channels
        h, w = int(info.tile_rows(tile // info.tiles_x)), int(info.tile_columns(tile % info.tiles_x))
        pos = (int(start) + 1) * 8
        for _ in range(h):
            if not fast.read_bits(buf, pos, 1):
                census["zero_rows"] += 1
                pos += 1
                continue
            groups = fast.groups_per_row(w)
            flags = [int(fast.read_bits(buf, pos + 1 + g, 1)) for g in range(groups)]
            header = pos + 1 + groups
            pos = header + sum(flags) * size_of_header
            for g, flag in enumerate(flags):
                if not flag:
                    census["unflagged"] += 1
                    continue
                fields = int(fast.read_bits(buf, header, size_of_header))
                header += size_of_header
                form, width = fast.group_form(fields & ((1 << code_bits) - 1), info.bits, extended)
                qsum = fields >> code_bits
                census[form_names[form]] += 1
                count = min(fast.GROUP_SIZE, w - g * fast.GROUP_SIZE)
                bits = int(fast.group_data_bits(form, width, qsum, count))
                census["group_bits"] = max(census["group_bits"], bits)
                pos += bits
    return census


PLANE_KINDS = (fmt.KIND_CONSTANT, fmt.KIND_CODED, fmt.KIND_RAW, fmt.KIND_CODED_EXTENDED, fmt.KIND_LZ,
               fmt.KIND_LZ_CODED, fmt.KIND_CODED_ANS)  # kinds that hold one plane of a tile alone


def assert_within_encoder_bound(data) -> None:
    """docs/FORMAT.md §5's encoder bound, stream by stream: no one-plane stream larger than its raw form
    (1 + bps*h*w bytes), and no tile's streams together larger than its channels' raw forms."""
    parsed = fmt.parse(data)
    info = parsed.info
    buf = np.frombuffer(data, np.uint8)
    sizes = parsed.stream_ends - parsed.stream_starts
    for tile in range(info.tiles_x * info.tiles_y):
        tile_y, tile_x = divmod(tile, info.tiles_x)
        raw = 1 + info.bits // 8 * int(info.tile_rows(tile_y)) * int(info.tile_columns(tile_x))
        streams_of_tile = range(tile * info.channels, (tile + 1) * info.channels)
        for stream in streams_of_tile:
            kind = int(buf[parsed.stream_starts[stream]])
            if kind in PLANE_KINDS:
                assert sizes[stream] <= raw, (tile, stream, kind, int(sizes[stream]), raw)
        assert sizes[streams_of_tile.start:streams_of_tile.stop].sum() <= info.channels * raw, tile
