"""Ways to damage an L3 file, shared by the corruption tests and the fuzz-corpus generator."""

import zlib

import numpy as np

from l3codec import format as fmt


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
# Single-stream files (one 1-channel 8-bit tile, 16 columns), so an item's status is its one
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


def single_stream_file(stream: bytes, mode: int, height: int) -> bytes:
    """A valid file (checksums and all) around one stream of a 1-channel 8-bit 16-wide tile."""
    return fmt.pack(width=WIDTH, height=height, channels=1, bits=8, mode=mode, transform=fmt.TRANSFORM_NONE,
                    tile_width=WIDTH, tile_height=32 if mode == fmt.MODE_COMPACT else max(8, height),
                    stream_ends=[len(stream)], payload=stream)


def compact_stream(rows, *, lengths=None, run_index=31, k_nibbles=0, length_bits=None, tail=b"") -> bytes:
    """A coded compact stream from per-row bit lists ([] is a copied row). lengths overrides the
    row-length table, length_bits its width; tail is appended after the padded rows."""
    lengths = [len(row) for row in rows] if lengths is None else lengths
    if length_bits is None:
        length_bits = max(max(lengths).bit_length(), 1)
    header = bytes([fmt.KIND_CODED, run_index, *k_nibbles.to_bytes(5, "little"), length_bits])
    table = pack_bits([(length >> i) & 1 for length in lengths for i in range(length_bits)])
    return header + table + pack_bits([bit for row in rows for bit in row]) + tail


def fast_stream(widths, *, data_bits=None, tail=b"") -> bytes:
    """A coded fast stream of a 16-wide tile (one group per row, 4-bit width fields) whose
    residuals are all zero: data_bits of them (default: what the widths need)."""
    fields = pack_bits([(width >> i) & 1 for width in widths for i in range(4)])
    data_bits = WIDTH * sum(widths) if data_bits is None else data_bits
    return bytes([fmt.KIND_CODED]) + fields + pack_bits([0] * data_bits) + tail


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
        "compact kind 3": (bytes([3]) + compact_stream(valid4)[1:], 4, kind),
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
        "fast valid": (fast_stream([3, 0, 8]), 3, ok),
        "fast raw": (bytes([fmt.KIND_RAW]) + bytes(range(3 * WIDTH)), 3, ok),
        "fast kind 255": (bytes([255]) + fast_stream([3, 0, 8])[1:], 3, kind),
        "fast raw too long": (bytes([fmt.KIND_RAW]) + bytes(3 * WIDTH + 1), 3, size),
        "fast fields past the end": (bytes([fmt.KIND_CODED]), 3, size),
        "fast width 9": (fast_stream([3, 9, 0]), 3, header),
        "fast residuals past the end": (fast_stream([3, 0, 8], data_bits=WIDTH * 10), 3, size),
        "fast bytes after the residuals": (fast_stream([3, 0, 8], tail=b"\0"), 3, size),
        # several faults: the first failing row wins
        "fast width 9 after residuals past the end": (fast_stream([8, 9, 0], data_bits=WIDTH * 4), 3, size),
        "fast residuals past the end after width 9": (fast_stream([3, 9, 8], data_bits=WIDTH * 3), 3, header),
    }
    return {name: (single_stream_file(stream, compact if name.startswith("compact") else fast, height), code)
            for name, (stream, height, code) in cases.items()}
