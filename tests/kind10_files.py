"""Kind-10 (compact v2, rANS) streams for kernel tests, framed as issue #39's stream layout from
ans_cpu.encode_plane's parts, and compact files in which chosen tile-channels are kind 10."""

import numpy as np

import l3codec
from l3codec import ans, ans_cpu
from l3codec.bitio import read_bits
from l3codec import format as fmt

KIND_CODED_ANS = 10


def kind10_stream(plane: np.ndarray, precision: int = 11, bias: str = "choose") -> bytes:
    """One tile-channel's plane (at most 256 rows: one table set) as a kind-10 stream: kind, flags, P, L,
    the bias table, the table set, the row-length table (L bits a row, LSB-first), the row streams."""
    coded = ans_cpu.encode_plane(plane, tile_width=plane.shape[1], precision=precision, bias=bias)
    assert len(coded.table_ends) == 1
    lengths = [int(length) for length in coded.row_lengths[:, 0]]
    length_bits = max(lengths).bit_length()
    packed = sum(length << (row * length_bits) for row, length in enumerate(lengths))
    length_table = packed.to_bytes((len(lengths) * length_bits + 7) // 8, "little")
    bias_table = b""
    if coded.biased:
        bias_table = np.asarray(coded.bias, "<i1" if coded.bits == 8 else "<i2").tobytes()
    header = bytes([KIND_CODED_ANS, int(coded.biased), precision, length_bits])
    return header + bias_table + coded.tables + length_table + coded.streams


def kind10_layout(stream: bytes, bits: int, rows: int) -> dict:
    """Where a sound kind-10 stream's parts begin (bytes): tables, lengths (the row-length table), rows (row 0's
    stream); and each row stream's length."""
    buf = np.frombuffer(stream, np.uint8)
    tables = 4 + (ans.GRADIENT_CONTEXTS * bits // 8 if stream[1] & 1 else 0)
    freq = np.zeros((ans.ANS_CONTEXTS, ans.token_count(16)), np.int64)
    status, end_bit = ans.read_tables(buf, tables * 8, len(stream) * 8, bits, stream[2], freq,
                                      np.zeros(ans.ANS_CONTEXTS, np.int64))
    assert status == ans.ANS_OK
    lengths = (end_bit + 7) // 8
    length_bits = stream[3]
    row_lengths = [int(read_bits(buf, lengths * 8 + row * length_bits, length_bits)) for row in range(rows)]
    return dict(tables=tables, lengths=lengths, rows=lengths + (rows * length_bits + 7) // 8,
                row_lengths=row_lengths)


def palette_indices(stream: bytes, tile: np.ndarray) -> np.ndarray:
    """The index plane of a palette stream (kind 3) of the tile's pixels (rows, columns, channels): each
    pixel's position in the stream's colour table."""
    colours = stream[1] + 1
    rows, columns, channels = tile.shape
    table = np.frombuffer(stream, tile.dtype, colours * channels, fmt.PALETTE_HEADER_BYTES).reshape(colours, channels)
    matches = np.all(tile[:, :, None, :] == table[None, None], axis=3)
    assert np.all(matches.any(axis=2))
    return np.ascontiguousarray(matches.argmax(axis=2).astype(tile.dtype))


def with_kind10_streams(image: np.ndarray, tile_width: int, tile_height: int, chosen, *, damage=None,
                        mode: str = "compact", **stream_options) -> bytes:
    """A file of image (compact unless mode says, colour transform none) whose streams `chosen(index, kind)` says are recoded
    as kind 10 (the others as the encoder wrote them, kind 1 or any other; a chosen palette stream keeps its
    colour table, its index plane recoded); damage(index, stream, rows), when given, returns what each
    kind-10 stream (its plane's) becomes."""
    data = l3codec.encode(image, mode=mode, tile_width=tile_width, tile_height=tile_height, transform="none")
    parsed = fmt.parse(np.frombuffer(data, np.uint8))
    info = parsed.info
    planes = image.reshape(image.shape[0], image.shape[1], -1)
    streams = []
    for index, (start, end) in enumerate(zip(parsed.stream_starts, parsed.stream_ends)):
        stream = data[start:end]
        if chosen(index, stream[0]):
            tile, channel = divmod(index, info.channels)
            y0, x0 = (tile // info.tiles_x) * tile_height, (tile % info.tiles_x) * tile_width
            pixels = planes[y0:y0 + tile_height, x0:x0 + tile_width]
            prefix = b""
            if stream[0] == fmt.KIND_PALETTE:
                plane = palette_indices(stream, pixels)
                prefix = stream[:fmt.PALETTE_HEADER_BYTES + (stream[1] + 1) * info.channels * plane.itemsize]
            else:
                plane = np.ascontiguousarray(pixels[:, :, channel])
            coded = kind10_stream(plane, **stream_options)
            if damage is not None:
                coded = damage(index, coded, plane.shape[0])
            stream = prefix + coded
        streams.append(stream)
    header = parsed.header
    return fmt.pack(width=info.width, height=info.height, channels=info.channels, bits=info.bits,
                    mode=int(header["mode"]), transform=int(header["transform"]), tile_width=tile_width,
                    tile_height=tile_height, stream_ends=np.cumsum([len(s) for s in streams]),
                    payload=b"".join(streams))
