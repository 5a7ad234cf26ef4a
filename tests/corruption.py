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
