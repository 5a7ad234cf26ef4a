"""Ways to damage an L3 file, shared by the corruption tests and the fuzz-corpus generator."""

import zlib

import numpy as np

from l3codec import cpu
from l3codec import fast as fast_codec
from l3codec import format as fmt
from l3codec import huffman


def reseal(data: bytes) -> bytes:
    """Recompute both checksums, so damage reaches the validators and stream decoders behind them."""
    buf = np.frombuffer(bytearray(data), np.uint8).copy()
    header = buf[: fmt.HEADER_SIZE].view(fmt.HEADER_DTYPE)
    count = int(header["stream_count"][0])
    payload_offset = fmt.HEADER_SIZE + 4 * count
    if buf.size >= payload_offset:
        header["payload_crc"] = zlib.crc32(buf[payload_offset:])
        header["header_crc"] = fmt.header_crc(buf[: fmt.HEADER_SIZE], buf[fmt.HEADER_SIZE:payload_offset])
    return buf.tobytes()


def with_header_fields(data: bytes, **fields) -> bytes:
    """Set header fields and reseal the header checksum."""
    buf = np.frombuffer(bytearray(data), np.uint8).copy()
    for field, value in fields.items():
        buf[: fmt.HEADER_SIZE].view(fmt.HEADER_DTYPE)[field] = value
    header = buf[: fmt.HEADER_SIZE].view(fmt.HEADER_DTYPE)
    count = min(int(header["stream_count"][0]), (buf.size - fmt.HEADER_SIZE) // 4)
    table = buf[fmt.HEADER_SIZE: fmt.HEADER_SIZE + 4 * count]
    header["header_crc"] = fmt.header_crc(buf[: fmt.HEADER_SIZE], table)
    return buf.tobytes()


def structural_boundaries(data: bytes) -> list:
    """Every offset where a header field, the table, a stream or the file starts or ends."""
    parsed = fmt.parse(data)
    offsets = {0, len(data) - 1}
    offsets.update(offset for _, offset, *_ in fmt.HEADER_DTYPE.fields.values())
    offsets.update((fmt.HEADER_SIZE, parsed.payload_offset))
    offsets.update(int(v) for v in parsed.stream_starts)
    offsets.update(int(v) - 1 for v in parsed.stream_ends)
    offsets.update(int(v) + 1 for v in parsed.stream_starts)
    return sorted(o for o in offsets if 0 <= o < len(data))


def flip_bits(data: bytes, rng: np.random.Generator, count: int) -> bytes:
    buf = bytearray(data)
    for _ in range(count):
        bit = int(rng.integers(0, len(buf) * 8))
        buf[bit // 8] ^= 1 << (bit % 8)
    return bytes(buf)


def mutate_payload(data: bytes, rng: np.random.Generator) -> bytes:
    """Random damage to the payload only, checksums resealed."""
    parsed = fmt.parse(data)
    buf = bytearray(data)
    start = parsed.payload_offset
    for _ in range(int(rng.integers(1, 4))):
        pos = int(rng.integers(start, len(buf)))
        choice = rng.integers(0, 3)
        if choice == 0:
            buf[pos] ^= 1 << int(rng.integers(0, 8))
        elif choice == 1:
            buf[pos] = int(rng.integers(0, 256))
        else:
            buf[pos] = 0xFF
    return reseal(bytes(buf))


# ---------------------------------------------------------------- hand-made streams with known faults
#
# Single-stream files (one 1-channel tile: compact 8-bit, 16 columns; fast 80 columns), so an item's status is its one
# stream's status and every decoder must give exactly the code listed. Compact rows with run
# index 31 (RUN_ORDER 15): the one bit "1" is a run to the end of the row, a whole valid row.

WIDTH = 16
VALID_ROW = [1]
# a "0" bit, a 100-sample run in 15 bits, the interruption sample m = 0 ("1" with k = 0): the run
# ends past the 16-sample row, and the row's 17 bits still match its table entry
RUN_PAST_THE_ROW_END = [0] + [(100 >> i) & 1 for i in range(15)] + [1]
# an empty run, the interruption sample, then a run to the end of the row: 18 bits
ZERO_RUN_ROW = [0] * 16 + [1, 1]


def pack_bits(bits) -> bytes:
    """LSB-first bit list -> bytes, zero padded to a byte."""
    bits = list(bits) + [0] * (-len(bits) % 8)
    return bytes(sum(bits[i * 8 + j] << j for j in range(8)) for i in range(len(bits) // 8))


def single_stream_file(stream, mode: int, height: int, *, width: int = WIDTH, bits: int = 8) -> bytes:
    """A valid file (checksums and all) around one stream of a 1-channel tile of width x height, or
    around a tuple of streams, one per channel of the tile (compact: a tile of as many bands as height needs)."""
    streams = stream if isinstance(stream, tuple) else (stream,)
    band = fmt.COMPACT_BAND_ROWS
    return fmt.pack(width=width, height=height, channels=len(streams), bits=bits, mode=mode,
                    transform=fmt.TRANSFORM_NONE, tile_width=width,
                    tile_height=max(band, -(-height // band) * band) if mode == fmt.MODE_COMPACT else max(8, height),
                    stream_ends=np.cumsum([len(s) for s in streams]), payload=b"".join(streams))


def palette_stream(colours, index_stream: bytes, channels: int = 1, *, table_bytes=None) -> bytes:
    """A palette stream (docs/FORMAT.md §5.1): colours (count) entries of value 10 * i + channel, then
    index_stream; table_bytes cuts or pads the table."""
    table = bytes((10 * i + c) & 255 for i in range(colours) for c in range(channels))
    if table_bytes is not None:
        table = (table + bytes(table_bytes))[:table_bytes]
    return bytes([fmt.KIND_PALETTE, colours - 1]) + table + index_stream


MEMBER = bytes([fmt.KIND_PALETTE_MEMBER])


def compact_stream(rows, *, lengths=None, run_index=31, k_nibbles=0, length_bits=None, tail=b"") -> bytes:
    """A coded compact stream from per-row bit lists ([] is a copied row). lengths overrides the
    row-length table, length_bits its width; tail is appended after the padded rows."""
    lengths = [len(row) for row in rows] if lengths is None else lengths
    if length_bits is None:
        length_bits = max(max(lengths).bit_length(), 1)
    header = bytes([fmt.KIND_CODED, run_index, *k_nibbles.to_bytes(5, "little"), length_bits])
    table = pack_bits([(length >> i) & 1 for length in lengths for i in range(length_bits)])
    return header + table + pack_bits([bit for row in rows for bit in row]) + tail


# Fast (docs/FORMAT.md §7): rows of FAST_WIDTH = 80 samples, so two groups, of 64 and 16.
FAST_WIDTH = 80


def field(value: int, count: int) -> list:
    """value as count LSB-first bits."""
    return [(value >> i) & 1 for i in range(count)]


def packed_group(values, width, bits=8):
    """(code, qsum, data bits) of a packed group."""
    return width, 0, [bit for value in values for bit in field(value, width)]


def rice_group(values, k, bits=8, *, qsum=None):
    """(code, qsum, data bits) of a Rice group; qsum overrides the header's quotient sum."""
    remainders = [bit for value in values for bit in field(value & ((1 << k) - 1), k)]
    unary = [bit for value in values for bit in [0] * (value >> k) + [1]]
    return bits + 1 + k, sum(value >> k for value in values) if qsum is None else qsum, remainders + unary


def sparse_group(positions, values, bits=8, *, size=None):
    """(code, qsum, data bits) of a sparse group; size overrides the header's sample count."""
    data = [bit for position in positions for bit in field(position, 6)]
    data += [bit for value in values for bit in field(value, bits)]
    return 0, len(positions) if size is None else size, data


def extended(group, form, width, bits=8):
    """A group of the helpers above with its code from the extended table (kind 5), as (form, width)."""
    return fast_codec.extended_code(form, width, bits), group[1], group[2]


def narrow_sparse_group(positions, values, width, bits=8):
    """(extended code, qsum, data bits) of a sparse group whose values take width bits."""
    return extended(sparse_group(positions, values, width), fast_codec.FORM_SPARSE, width, bits)


def bitmap_group(values, width, bits=8, *, size=None):
    """(extended code, qsum, data bits) of a bitmap group over values (zeros unlisted); size
    overrides the header's listed count."""
    listed = [value for value in values if value]
    data = [int(value != 0) for value in values] + [bit for value in listed for bit in field(value, width)]
    return fast_codec.extended_code(fast_codec.FORM_BITMAP, width, bits), len(listed) if size is None else size, data


def fast_row(groups, bits=8, *, extended_codes=False) -> list:
    """The bits of one row: groups holds, per group, None (not flagged) or (code, qsum, data bits)."""
    flagged = [group for group in groups if group is not None]
    if not flagged:
        return [0]
    code_bits = fast_codec.code_bits(bits, extended_codes)
    row = [1] + [int(group is not None) for group in groups]
    for code, qsum, _ in flagged:
        row += field(code, code_bits) + field(qsum, 7)
    for _, _, data in flagged:
        row += data
    return row


def fast_stream(rows, *, cut_bits=None, tail=b"", kind=fmt.KIND_CODED) -> bytes:
    """A coded fast stream from row bit lists; cut_bits keeps only that many bits (padded)."""
    bits = [bit for row in rows for bit in row]
    return bytes([kind]) + pack_bits(bits[:cut_bits]) + tail


def extended_stream(rows, **options) -> bytes:
    """fast_stream of rows whose groups take the extended codes (kind 5)."""
    return fast_stream([fast_row(groups, extended_codes=True) for groups in rows], kind=fmt.KIND_CODED_EXTENDED,
                       **options)


SMALL = [3, 0, 1, 2] * 16  # 64 values, packed width 2
NOISY = [0, 1, 2, 40] * 4  # 16 values: Rice k = 1 beats packing at width 6
ZERO_ROW = fast_row([None, None])
VALID_FAST_ROWS = [fast_row([packed_group(SMALL, 2), None]), ZERO_ROW, fast_row([None, rice_group(NOISY, 1)])]
# a Rice group (k = 6, code 15) whose sample 0 is (4 << 6) | 0 = 256: no 8-bit value
VALUE_TOO_LARGE = fast_row([None, rice_group([256] + [0] * 15, 6)])
# the header's qsum says 21 zero bits, the unary part holds 20 before its 16th one bit
UNARY_SHORT = fast_row([None, rice_group(NOISY, 1, qsum=sum(v >> 1 for v in NOISY) + 1)])
# the header's qsum says 19: the last code's one bit lies past the unary part
UNARY_LONG = fast_row([None, rice_group(NOISY, 1, qsum=sum(v >> 1 for v in NOISY) - 1)])
PACKED_WITH_QSUM = fast_row([(2, 5, packed_group(SMALL, 2)[2]), None])
# label edges: a few large residuals in otherwise zero groups (the second group holds 16 samples)
SPARSE = fast_row([sparse_group([0, 5, 63], [200, 1, 255]), sparse_group([15], [9])])
SPARSE_TOO_MANY = fast_row([None, sparse_group(list(range(16)), [1] * 16, size=17)])
SPARSE_REPEATED = fast_row([sparse_group([4, 4], [1, 2]), None])
SPARSE_FALLING = fast_row([sparse_group([9, 3], [1, 2]), None])
SPARSE_PAST_A_SHORT_GROUP = fast_row([None, sparse_group([16], [1])])
# rows of extended groups (docs/FORMAT.md §7.1, version 5): every form, narrow values
EDGES = [0, 0, 2, 0, 0, 0, 1, 0] * 8  # 64 values of width 2, a quarter of them listed
EXTENDED_ROWS = [
    [extended(packed_group(SMALL, 2), fast_codec.FORM_PACKED, 2), None],
    [],
    [bitmap_group(EDGES, 2), extended(rice_group(NOISY, 1), fast_codec.FORM_RICE, 1)],
    [narrow_sparse_group([0, 5, 63], [3, 1, 2], 2), bitmap_group([0, 7] * 8, 3)],
    [extended(sparse_group([1, 9], [200, 255]), fast_codec.FORM_SPARSE, 8), narrow_sparse_group([15], [1], 1)],
]


def lz_length_bytes(extra: int) -> bytes:
    """An LZ4 length's bytes after its token nibble of 15: 255s, then the rest."""
    return b"\xff" * (extra // 255) + bytes([extra % 255])


def lz_sequence(literals: bytes, offset=None, match: int = 4) -> bytes:
    """One LZ4 sequence (docs/FORMAT.md §5.2): literals, then unless offset is None a match."""
    token = min(len(literals), 15) << 4
    tail = b""
    if offset is not None:
        token |= min(match - 4, 15)
        tail = offset.to_bytes(2, "little") + (lz_length_bytes(match - 19) if match - 4 >= 15 else b"")
    return bytes([token]) + (lz_length_bytes(len(literals) - 15) if len(literals) >= 15 else b"") + literals + tail


def lz_stream(*sequences) -> bytes:
    return bytes([fmt.KIND_LZ]) + b"".join(sequences)


def pixel_lz_stream(*sequences) -> bytes:
    """A pixel LZ stream (docs/FORMAT.md §5.3): a tile's channels interleaved, as one LZ4 block."""
    return bytes([fmt.KIND_PIXEL_LZ]) + b"".join(sequences)


def coded_lz(stream: bytes) -> bytes:
    """A plain LZ stream (kind 6 or 7) in its Huffman-coded form (kind 8 or 9, docs/FORMAT.md §5.4),
    written by the encoder's own functions, uncompiled."""
    block = np.frombuffer(b"\0" + stream[1:], np.uint8)  # the block at 1.., as the encoder holds it
    counts = np.zeros((huffman.TABLES, huffman.SYMBOLS), np.int64)
    lengths = np.zeros_like(counts)
    huffman.coded_size(block, 1, len(block), counts, lengths)
    out = np.zeros(2 * len(block) + huffman.TABLES * 200, np.uint8)
    kind = fmt.KIND_LZ_CODED if stream[0] == fmt.KIND_LZ else fmt.KIND_PIXEL_LZ_CODED
    return bytes(out[:huffman.write_coded_lz(block, 1, len(block), lengths, kind, out, 0)])


def with_byte(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + bytes([value]) + data[at + 1:]


# A pixel LZ stream for a 4 x 16 compact tile of 3 channels (192 bytes): a row of 16 pixels, then
# matches of it
VALID_PIXEL_LZ = pixel_lz_stream(lz_sequence(bytes(range(48)), 48, 140), lz_sequence(bytes(4)))

# LZ streams for a 4 x 16 compact tile (64 bytes): a row of literals, a match of the row above
# (offset 16) for rows 1-2 and an overlapping run (offset 1) for row 3, then a last literal
LZ_ROW = bytes(range(100, 116))
VALID_LZ = lz_stream(lz_sequence(LZ_ROW, 16, 32), lz_sequence(b"\x07", 1, 14), lz_sequence(b"\x09"))
# a coded LZ stream of 64 zero literals for a 4 x 16 compact tile (its last byte: the last literal's bit)
LITERALS_64 = coded_lz(lz_stream(lz_sequence(bytes(64))))


def status_cases() -> dict:
    """{name: (file, the status every decoder must report)}: every status code in both modes,
    and streams with several faults, where the first failing row decides (docs/FORMAT.md §8)."""
    compact, fast = fmt.MODE_COMPACT, fmt.MODE_FAST
    ok, kind, size, header, corrupt = (fmt.STATUS_OK, fmt.STATUS_BAD_KIND, fmt.STATUS_BAD_SIZE,
                                       fmt.STATUS_BAD_HEADER, fmt.STATUS_CORRUPT)
    valid4 = [VALID_ROW] * 4
    cases = {
        "compact valid": (compact_stream(valid4), 4, ok),
        "compact copied rows": (compact_stream([VALID_ROW, [], [], VALID_ROW]), 4, ok),
        "compact constant": (bytes([fmt.KIND_CONSTANT, 7]), 4, ok),
        "compact kind 5": (bytes([5]) + compact_stream(valid4)[1:], 4, kind),
        # palettes: VALID_ROW is a run of half (128), so indices of 128 (past the last colour: the last)
        "compact palette, coded indices": (palette_stream(129, compact_stream(valid4)), 4, ok),
        "compact palette, an index past its colours": (palette_stream(128, compact_stream(valid4)), 4, ok),
        "compact palette, index stream bad": (
            palette_stream(100, compact_stream(valid4, run_index=32)), 4, header),
        "compact palette, constant indices": (palette_stream(3, bytes([fmt.KIND_CONSTANT, 2])), 4, ok),
        "compact palette, constant index past its colours": (
            palette_stream(2, bytes([fmt.KIND_CONSTANT, 2])), 4, ok),
        "compact palette, raw indices": (palette_stream(4, bytes([fmt.KIND_RAW]) + bytes(range(4)) * 8), 2, ok),
        "compact palette, a raw index past its colours": (
            palette_stream(4, bytes([fmt.KIND_RAW]) + bytes(range(4)) * 7 + bytes([1, 2, 4, 3])), 2, ok),
        "compact palette, index stream a palette": (palette_stream(2, palette_stream(2, bytes([0, 0]))), 4, kind),
        "compact palette, index stream a member": (palette_stream(2, MEMBER), 4, kind),
        "compact palette, index stream of fast's extended kind": (
            palette_stream(2, bytes([fmt.KIND_CODED_EXTENDED]) + compact_stream(valid4)[1:]), 4, kind),
        "compact palette, kind byte alone": (bytes([fmt.KIND_PALETTE]), 4, size),
        "compact palette, table past the end": (palette_stream(9, b"", table_bytes=8), 4, size),
        "compact palette, no index stream": (palette_stream(9, b""), 4, size),
        "compact palette of 3 channels and members": (
            (palette_stream(200, compact_stream(valid4), 3), MEMBER, MEMBER), 4, ok),
        "compact palette of 2 channels, an index past its colours": (
            (palette_stream(100, compact_stream(valid4), 2), MEMBER), 4, ok),
        "compact member of 2 bytes": ((palette_stream(200, compact_stream(valid4), 2), MEMBER + b"\0"), 4, size),
        "compact member in channel 0": ((MEMBER, bytes([fmt.KIND_CONSTANT, 7])), 4, kind),
        "compact member beside no palette": ((bytes([fmt.KIND_CONSTANT, 7]), MEMBER), 4, kind),
        "compact constant beside a palette": (
            (palette_stream(200, compact_stream(valid4), 2), bytes([fmt.KIND_CONSTANT, 7])), 4, kind),
        "compact coded beside a palette, then a member": (
            (palette_stream(200, compact_stream(valid4), 3), compact_stream(valid4), MEMBER), 4, kind),
        "compact palette in channel 1": (
            (bytes([fmt.KIND_CONSTANT, 7]), palette_stream(2, bytes([fmt.KIND_CONSTANT, 1]), 2)), 4, kind),
        "compact LZ": (VALID_LZ, 4, ok),
        "compact LZ, literals only, with length bytes": (lz_stream(lz_sequence(bytes(range(64)))), 4, ok),
        "compact LZ, a long match with length bytes": (lz_stream(lz_sequence(b"\x05", 1, 62), lz_sequence(b"\x06")), 4, ok),
        "compact LZ, kind byte alone": (lz_stream(), 4, corrupt),
        "compact LZ, a byte short": (lz_stream(lz_sequence(LZ_ROW, 16, 32), lz_sequence(b"\x07", 1, 14)), 4, corrupt),
        "compact LZ, a byte too many": (VALID_LZ + bytes([0x10, 1]), 4, corrupt),
        "compact LZ, match past the tile": (lz_stream(lz_sequence(LZ_ROW, 16, 64)), 4, corrupt),
        "compact LZ, offset 0": (lz_stream(lz_sequence(LZ_ROW, 0, 47), lz_sequence(b"\x09")), 4, corrupt),
        "compact LZ, offset before the start": (lz_stream(lz_sequence(LZ_ROW, 17, 47), lz_sequence(b"\x09")), 4, corrupt),
        "compact LZ, ends inside an offset": (lz_stream(lz_sequence(LZ_ROW, 16, 47))[:-1], 4, corrupt),
        "compact LZ, ends inside a length": (lz_stream(bytes([0xF0])), 4, corrupt),
        "compact LZ, literals past its end": (lz_stream(lz_sequence(LZ_ROW))[:-3], 4, corrupt),
        "compact palette, LZ indices": (palette_stream(120, VALID_LZ), 4, ok),
        "compact palette, LZ indices corrupt": (palette_stream(120, lz_stream(lz_sequence(LZ_ROW, 99, 48))), 4, corrupt),
        "compact LZ beside a palette": ((palette_stream(200, compact_stream(valid4), 2), VALID_LZ), 4, kind),
        # a member turned LZ, whose block would not expand either: the palette tile's rule comes first
        "compact a broken LZ stream beside a palette": (
            (palette_stream(200, compact_stream(valid4), 2), lz_stream(bytes([0x0F, 1, 0]))), 4, kind),
        "compact LZ of 3 channels": ((VALID_LZ, lz_stream(lz_sequence(bytes(64))), VALID_LZ), 4, ok),
        "compact pixel LZ of 3 channels and members": ((VALID_PIXEL_LZ, MEMBER, MEMBER), 4, ok),
        "compact pixel LZ of 1 channel": (bytes([fmt.KIND_PIXEL_LZ]) + VALID_LZ[1:], 4, ok),
        "compact pixel LZ of 2 channels, literals only": (
            (pixel_lz_stream(lz_sequence(bytes(range(128)))), MEMBER), 4, ok),
        "compact pixel LZ, a pixel short": (
            (pixel_lz_stream(lz_sequence(bytes(range(48)), 48, 137), lz_sequence(bytes(4))), MEMBER, MEMBER), 4, corrupt),
        "compact pixel LZ, kind byte alone": ((pixel_lz_stream(), MEMBER, MEMBER), 4, corrupt),
        "compact pixel LZ, one plane's bytes": ((pixel_lz_stream(VALID_LZ[1:]), MEMBER, MEMBER), 4, corrupt),
        "compact pixel LZ, a member of 2 bytes": ((VALID_PIXEL_LZ, MEMBER, MEMBER + b"\0"), 4, size),
        "compact pixel LZ, a constant member": ((VALID_PIXEL_LZ, bytes([fmt.KIND_CONSTANT, 7]), MEMBER), 4, kind),
        "compact pixel LZ, an LZ member": ((VALID_PIXEL_LZ, MEMBER, VALID_LZ), 4, kind),
        "compact pixel LZ, a palette member": (
            (VALID_PIXEL_LZ, palette_stream(2, bytes([fmt.KIND_CONSTANT, 1]), 3), MEMBER), 4, kind),
        "compact pixel LZ, a pixel LZ member": ((VALID_PIXEL_LZ, VALID_PIXEL_LZ, MEMBER), 4, kind),
        "compact pixel LZ in channel 1": ((bytes([fmt.KIND_CONSTANT, 7]), VALID_PIXEL_LZ[:1] + VALID_LZ[1:]), 4, kind),
        "compact pixel LZ beside a palette": (
            (palette_stream(200, compact_stream(valid4), 2), VALID_PIXEL_LZ[:1] + VALID_LZ[1:]), 4, kind),
        "compact palette, pixel LZ indices": (palette_stream(120, VALID_PIXEL_LZ[:1] + VALID_LZ[1:]), 4, kind),
        "compact coded LZ": (coded_lz(VALID_LZ), 4, ok),
        "compact coded LZ, literals only": (coded_lz(lz_stream(lz_sequence(bytes(range(64))))), 4, ok),
        "compact coded LZ of 3 channels": ((coded_lz(VALID_LZ), VALID_LZ, coded_lz(VALID_LZ)), 4, ok),
        "compact coded pixel LZ of 3 channels and members": ((coded_lz(VALID_PIXEL_LZ), MEMBER, MEMBER), 4, ok),
        "compact palette, coded LZ indices": (palette_stream(120, coded_lz(VALID_LZ)), 4, ok),
        "compact coded LZ, kind byte alone": (bytes([fmt.KIND_LZ_CODED]), 4, corrupt),
        "compact coded LZ, tables cut short": (coded_lz(VALID_LZ)[:40], 4, corrupt),
        # the literal table's first length (byte 33: after the kind byte and its bitmap)
        "compact coded LZ, a code of length 0": (with_byte(coded_lz(VALID_LZ), 33, 0), 4, corrupt),
        "compact coded LZ, lengths over-subscribed": (with_byte(coded_lz(VALID_LZ), 33, 0x11), 4, corrupt),
        "compact coded LZ, a byte short": (coded_lz(VALID_LZ)[:-1], 4, corrupt),
        "compact coded LZ, a byte too many": (coded_lz(VALID_LZ) + b"\0", 4, corrupt),
        "compact coded LZ, match past the tile": (coded_lz(lz_stream(lz_sequence(LZ_ROW, 16, 64))), 4, corrupt),
        "compact coded LZ, offset before the start": (
            coded_lz(lz_stream(lz_sequence(LZ_ROW, 17, 47), lz_sequence(b"\x09"))), 4, corrupt),
        # 64 zero literals: one token and one literal symbol, a bit each; the last literal's bit set
        # matches no code
        "compact coded LZ, bits of no code": (
            with_byte(LITERALS_64, len(LITERALS_64) - 1, LITERALS_64[-1] | 1), 4, corrupt),
        # plain LZ4 ignores the last token's match nibble; a coded stream's must be 0
        "compact coded LZ, a match nibble in the last token": (
            coded_lz(bytes([fmt.KIND_LZ, 0xF1, 64 - 15]) + bytes(64)), 4, corrupt),
        # LITERALS_64's bits: its token's (1), the literal count's length byte (8), 64 literals' (1 each)
        "compact coded LZ, a length byte cut by the end": (LITERALS_64[:-9], 4, corrupt),
        "compact coded pixel LZ in channel 1": ((bytes([fmt.KIND_CONSTANT, 7]), coded_lz(VALID_PIXEL_LZ)), 4, kind),
        "compact coded LZ beside a pixel LZ tile": ((coded_lz(VALID_PIXEL_LZ), MEMBER, coded_lz(VALID_LZ)), 4, kind),
        "compact kind 11 (past the last)": (bytes([fmt.KIND_CODED_ANS + 1]) + compact_stream(valid4)[1:], 4, kind),
        "compact constant too long": (bytes([fmt.KIND_CONSTANT, 7, 7]), 4, size),
        "compact raw too short": (bytes([fmt.KIND_RAW]) + bytes(4 * WIDTH - 1), 4, size),
        "compact header cut short": (compact_stream(valid4)[:7], 4, size),
        "compact run index 32": (compact_stream(valid4, run_index=32), 4, header),
        "compact row-length bits 32": (compact_stream(valid4, length_bits=32), 4, header),
        "compact k nibble 9 set": (compact_stream(valid4, k_nibbles=1 << 36), 4, header),
        "compact table past the end": (compact_stream(valid4, length_bits=31)[:9], 4, size),
        "compact row past the end": (compact_stream(valid4, lengths=[1, 1, 200, 1]), 4, size),
        "compact row 0 copied": (compact_stream([[], VALID_ROW, VALID_ROW, VALID_ROW]), 4, corrupt),
        "compact row longer than its table entry": (compact_stream([ZERO_RUN_ROW], lengths=[17]), 1, corrupt),
        "compact row shorter than its table entry": (
            compact_stream([VALID_ROW, [1, 0], VALID_ROW]), 3, corrupt),
        "compact run past the row end": (compact_stream([RUN_PAST_THE_ROW_END]), 1, corrupt),
        "compact run past the row end, row 2": (
            compact_stream([VALID_ROW, VALID_ROW, RUN_PAST_THE_ROW_END, VALID_ROW]), 4, corrupt),
        "compact bytes after the last row": (compact_stream(valid4, tail=b"\0"), 4, size),
        # several faults: the first failing row wins, the end-of-stream check comes last
        "compact last row corrupt, bytes after it": (
            compact_stream([VALID_ROW, VALID_ROW, RUN_PAST_THE_ROW_END], tail=b"\0"), 3, corrupt),
        "compact row 1 corrupt, row 3 past the end": (
            compact_stream([VALID_ROW, RUN_PAST_THE_ROW_END, VALID_ROW, VALID_ROW],
                           lengths=[1, len(RUN_PAST_THE_ROW_END), 1, 500]), 4, corrupt),
        "compact row 1 past the end, row 0 corrupt": (
            compact_stream([RUN_PAST_THE_ROW_END, VALID_ROW], lengths=[17, 900]), 2, corrupt),
        "compact row 0 past the end, row 1 copied": (
            compact_stream([VALID_ROW, []], lengths=[90, 0]), 2, size),
        # a tile of two bands (version 9): the second's first row has no row above, so it cannot copy one;
        # its rows start where the first band's end; the end-of-stream check falls to the last band
        "compact two bands": (compact_stream([VALID_ROW] * 34), 34, ok),
        "compact two bands, copied rows": (compact_stream([VALID_ROW] + [[]] * 31 + [VALID_ROW, []]), 34, ok),
        "compact second band's first row copied": (compact_stream([VALID_ROW] * 32 + [[], VALID_ROW]), 34, corrupt),
        "compact second band's run past the row end": (
            compact_stream([VALID_ROW] * 33 + [RUN_PAST_THE_ROW_END]), 34, corrupt),
        "compact second band's row past the end": (
            compact_stream([VALID_ROW] * 34, lengths=[1] * 33 + [300]), 34, size),
        "compact two bands, bytes after the last row": (compact_stream([VALID_ROW] * 34, tail=b"\0"), 34, size),
        "compact raw of two bands": (bytes([fmt.KIND_RAW]) + bytes(i & 255 for i in range(34 * WIDTH)), 34, ok),
        "compact raw of two bands, a sample short": (bytes([fmt.KIND_RAW]) + bytes(34 * WIDTH - 1), 34, size),
        # several failing streams or bands: the first in stream order, then band order, decides (a GPU runs
        # them in any order; the band after a failing one may fail too, as here)
        "compact first band corrupt, second band's row past the end": (
            compact_stream([VALID_ROW, RUN_PAST_THE_ROW_END] + [VALID_ROW] * 32,
                           lengths=[1, len(RUN_PAST_THE_ROW_END)] + [1] * 31 + [300]), 34, corrupt),
        "compact channel 0 header bad, channel 1 kind bad": (
            (compact_stream(valid4, run_index=32), bytes([5]) + compact_stream(valid4)[1:]), 4, header),
        "compact channel 0 kind bad, channel 1 header bad": (
            (bytes([5]) + compact_stream(valid4)[1:], compact_stream(valid4, run_index=32)), 4, kind),
        "fast valid": (fast_stream(VALID_FAST_ROWS), 3, ok),
        "fast every code": (fast_stream([fast_row([rice_group(SMALL, 6), packed_group(NOISY, 8)]),
                                         fast_row([packed_group([0] * 64, 0), rice_group([1, 0, 2, 1] * 4, 0)])]), 2, ok),
        "fast raw": (bytes([fmt.KIND_RAW]) + bytes(range(3 * FAST_WIDTH)), 3, ok),
        "fast kind 255": (bytes([255]) + fast_stream(VALID_FAST_ROWS)[1:], 3, kind),
        "fast palette, coded indices": (palette_stream(256, fast_stream(VALID_FAST_ROWS)), 3, ok),
        "fast palette, an index past its colours": (palette_stream(30, fast_stream(VALID_FAST_ROWS)), 3, ok),
        "fast palette, index stream bad": (
            palette_stream(30, fast_stream([PACKED_WITH_QSUM, ZERO_ROW])), 2, header),
        "fast palette, constant indices": (palette_stream(3, bytes([fmt.KIND_CONSTANT, 2])), 3, ok),
        "fast palette, raw index past its colours": (
            palette_stream(200, bytes([fmt.KIND_RAW]) + bytes(range(3 * FAST_WIDTH))), 3, ok),
        "fast palette, table past the end": (palette_stream(9, b"", table_bytes=3), 3, size),
        "fast palette of 4 channels and members": (
            (palette_stream(256, fast_stream(VALID_FAST_ROWS), 4), MEMBER, MEMBER, MEMBER), 3, ok),
        "fast member beside no palette": ((fast_stream(VALID_FAST_ROWS), MEMBER), 3, kind),
        "fast raw beside a palette": (
            (palette_stream(256, fast_stream(VALID_FAST_ROWS), 2), bytes([fmt.KIND_RAW]) + bytes(3 * FAST_WIDTH)),
            3, kind),
        "fast palette in channel 1": ((palette_stream(2, bytes([0, 1]), 2), palette_stream(2, bytes([0, 1]), 2)), 3, kind),
        "fast raw too long": (bytes([fmt.KIND_RAW]) + bytes(3 * FAST_WIDTH + 1), 3, size),
        "fast no bits": (bytes([fmt.KIND_CODED]), 3, size),
        "fast headers past the end": (fast_stream(VALID_FAST_ROWS, cut_bits=8), 3, size),
        "fast packed group with a qsum": (fast_stream([PACKED_WITH_QSUM, ZERO_ROW]), 2, header),
        "fast data past the end": (fast_stream(VALID_FAST_ROWS, cut_bits=len(VALID_FAST_ROWS[0]) - 9), 3, size),
        "fast rice value over 8 bits": (fast_stream([VALUE_TOO_LARGE]), 1, corrupt),
        "fast sparse groups": (fast_stream([ZERO_ROW, SPARSE, VALID_FAST_ROWS[0]]), 3, ok),
        "fast sparse group larger than its group": (fast_stream([SPARSE_TOO_MANY]), 1, header),
        "fast sparse position repeated": (fast_stream([SPARSE, SPARSE_REPEATED]), 2, corrupt),
        "fast sparse positions falling": (fast_stream([SPARSE_FALLING, ZERO_ROW]), 2, corrupt),
        "fast sparse position past a short group": (fast_stream([SPARSE_PAST_A_SHORT_GROUP]), 1, corrupt),
        "fast sparse row 0 falling, row 1 past the end": (
            fast_stream([SPARSE_FALLING, SPARSE], cut_bits=len(SPARSE_FALLING) + 20), 2, corrupt),
        "fast unary part with a bit to spare": (fast_stream([ZERO_ROW, UNARY_SHORT]), 2, corrupt),
        "fast unary part a bit short": (fast_stream([ZERO_ROW, UNARY_LONG]), 2, corrupt),
        "fast bytes after the last row": (fast_stream(VALID_FAST_ROWS, tail=b"\0"), 3, size),
        "fast extended, every form": (extended_stream(EXTENDED_ROWS), 5, ok),
        "fast extended, a Rice parameter past the largest": (
            extended_stream([[(2 ** fast_codec.code_bits(8, True) - 1, 0, []), None]]), 1, header),
        "fast extended, bitmap with a set bit too many": (
            extended_stream([[], [bitmap_group(EDGES, 2, size=15), None]]), 2, corrupt),
        "fast extended, bitmap with a set bit too few": (
            extended_stream([[bitmap_group(EDGES, 2, size=17), None], EXTENDED_ROWS[0]]), 2, corrupt),
        "fast extended, bitmap listing more than its group": (
            extended_stream([[None, bitmap_group([1] * 16, 1, size=17)]]), 1, header),
        "fast extended, narrow sparse position past a short group": (
            extended_stream([[None, narrow_sparse_group([16], [1], 1)]]), 1, corrupt),
        "fast extended, packed group with a qsum": (
            extended_stream([[(fast_codec.extended_code(fast_codec.FORM_PACKED, 2, 8), 5, packed_group(SMALL, 2)[2]), None]]),
            1, header),
        "fast extended, data past the end": (
            extended_stream(EXTENDED_ROWS, cut_bits=len(fast_row(EXTENDED_ROWS[0], extended_codes=True)) - 9), 5, size),
        "fast extended, palette indices": (palette_stream(256, extended_stream(EXTENDED_ROWS)), 5, ok),
        "fast extended, a short-table row read as extended": (
            fast_stream(VALID_FAST_ROWS, kind=fmt.KIND_CODED_EXTENDED), 3, size),
        # several faults: the first failing row wins; within a row, §7.2's order
        "fast row 1 corrupt, row 2 past the end": (
            fast_stream([ZERO_ROW, VALUE_TOO_LARGE, VALID_FAST_ROWS[0]], cut_bits=1 + len(VALUE_TOO_LARGE) + 30),
            3, corrupt),
        "fast row 0 qsum in a packed group, data past the end": (
            fast_stream([PACKED_WITH_QSUM], cut_bits=60), 1, header),
        "fast row 0 unary short, data past the end": (
            fast_stream([UNARY_SHORT], cut_bits=len(UNARY_SHORT) - 9), 1, size),
        "fast last row corrupt, bytes after it": (fast_stream([ZERO_ROW, VALUE_TOO_LARGE], tail=b"\0"), 2, corrupt),
        "fast channel 0 kind bad, channel 1 corrupt": (
            (bytes([255]) + fast_stream(VALID_FAST_ROWS)[1:], fast_stream([ZERO_ROW, VALUE_TOO_LARGE, ZERO_ROW])),
            3, kind),
        "fast channel 0 corrupt, channel 1 kind bad": (
            (fast_stream([ZERO_ROW, VALUE_TOO_LARGE, ZERO_ROW]), bytes([255]) + fast_stream(VALID_FAST_ROWS)[1:]),
            3, corrupt),
    }
    # fast: 3 rows of 80 samples, 16-bit: 480 bytes, a row and then matches of it
    lz16_row = bytes(range(0, 160))
    cases["fast 16-bit LZ"] = (lz_stream(lz_sequence(lz16_row, 160, 315), lz_sequence(b"\x01\x02\x03\x04\x05")),
                               3, ok, 16)
    cases["fast 16-bit LZ, a sample short"] = (lz_stream(lz_sequence(lz16_row, 160, 315), lz_sequence(b"\x01\x02\x03")),
                                               3, corrupt, 16)
    cases["fast LZ indices of a palette"] = (
        palette_stream(200, lz_stream(lz_sequence(bytes(range(80)), 80, 155), lz_sequence(bytes(5)))), 3, ok)
    # a 3 x 80 fast tile of 2 channels, 16-bit: 960 bytes, a row of pixels and then matches of it
    cases["fast 16-bit pixel LZ of 2 channels"] = (
        (pixel_lz_stream(lz_sequence(bytes(range(160)) * 2, 320, 635), lz_sequence(bytes(5))), MEMBER), 3, ok, 16)
    cases["fast 16-bit pixel LZ, a sample short"] = (
        (pixel_lz_stream(lz_sequence(bytes(range(160)) * 2, 320, 635), lz_sequence(bytes(3))), MEMBER), 3, corrupt, 16)
    cases["fast LZ ending in a match"] = (lz_stream(lz_sequence(bytes(range(80)), 80, 160)), 3, corrupt)
    # an LZ stream fails in the expansion launch, before the decode launch: the first failing stream decides
    lz_ending_in_a_match = lz_stream(lz_sequence(bytes(range(80)), 80, 160))
    bad_kind = bytes([255]) + fast_stream(VALID_FAST_ROWS)[1:]
    cases["fast channel 0 kind bad, channel 1 LZ corrupt"] = ((bad_kind, lz_ending_in_a_match), 3, kind)
    cases["fast channel 0 LZ corrupt, channel 1 kind bad"] = ((lz_ending_in_a_match, bad_kind), 3, corrupt)
    cases["fast LZ, an empty last sequence"] = (lz_stream(lz_sequence(bytes(range(80)), 80, 160), lz_sequence(b"")), 3, ok)
    cases["fast 16-bit rice k 14"] = (
        fast_stream([fast_row([rice_group([(1 << 16) - 1] + [1 << 14] * 63, 14, 16), None], 16)]), 1, ok, 16)
    cases["fast 16-bit sparse group"] = (
        fast_stream([fast_row([sparse_group([1, 62], [(1 << 16) - 1, 40000], 16), None], 16)]), 1, ok, 16)
    cases["fast 16-bit rice value over 16 bits"] = (
        fast_stream([fast_row([rice_group([1 << 16] + [0] * 63, 14, 16), None], 16)]), 1, corrupt, 16)
    wide_values = [(1 << 16) - 1, 40000, 3] * 4  # 12 of a bitmap's 64 samples, 16 bits wide
    cases["fast 16-bit extended, bitmap and narrow sparse groups"] = (
        fast_stream([fast_row([bitmap_group(wide_values + [0] * 52, 16, bits=16),
                               narrow_sparse_group([2, 9], [5, 1], 3, bits=16)], 16, extended_codes=True)],
                    kind=fmt.KIND_CODED_EXTENDED), 1, ok, 16)
    cases["fast 16-bit extended, a Rice parameter past the largest"] = (
        fast_stream([fast_row([(2 ** fast_codec.code_bits(16, True) - 1, 0, []), None], 16, extended_codes=True)],
                    kind=fmt.KIND_CODED_EXTENDED), 1, header, 16)
    files = {}
    for name, (stream, height, code, *bits) in cases.items():
        if name.startswith("compact"):
            files[name] = single_stream_file(stream, compact, height), code
        else:
            files[name] = single_stream_file(stream, fast, height, width=FAST_WIDTH, bits=(bits or [8])[0]), code
    return files


def cpu_stream_statuses(data: bytes) -> np.ndarray:
    """The CPU decoder's status of each stream of a file (0: decoded), the reference the kernels
    must report."""
    parsed = fmt.parse(data)
    info = parsed.info
    streams = np.arange(len(parsed.stream_starts), dtype=np.int64)
    planes = np.empty((info.channels, info.height, info.width), info.dtype)
    status = np.zeros(streams.size, np.int64)
    cpu.decode_streams(np.frombuffer(data, np.uint8), parsed, streams, planes, status)
    return status


def first_cpu_status(data: bytes) -> int:
    """The CPU decoder's status of the file's first failing stream, or 0."""
    return ([c for c in cpu_stream_statuses(data).tolist() if c] or [0])[0]
