"""LSB-first bit reading and writing over uint8 buffers, shared by both modes.

Reads never leave the buffer: bytes past its end read as zero, so a corrupt
stream can decode garbage (caught by the checksum or the row-length check) but
can never read out of bounds.
"""

import numpy as np

from .jit import device

# Writer state: an int64 array [byte position, accumulator, bits in accumulator, byte limit].
W_POS = 0
W_ACC = 1
W_NACC = 2
W_LIMIT = 3
WRITER_STATE_SIZE = 4

PEEK_BITS = 49  # bits a peek_bits result always holds: 56 loaded, at most 7 shifted out


@device(cpu_inline=True)
def load56(buf, byte_pos):
    """Seven little-endian bytes starting at byte_pos, as a non-negative int64."""
    size = buf.shape[0]
    value = np.int64(0)
    if byte_pos + 7 <= size:
        value = (
            np.int64(buf[byte_pos])
            | (np.int64(buf[byte_pos + 1]) << 8)
            | (np.int64(buf[byte_pos + 2]) << 16)
            | (np.int64(buf[byte_pos + 3]) << 24)
            | (np.int64(buf[byte_pos + 4]) << 32)
            | (np.int64(buf[byte_pos + 5]) << 40)
            | (np.int64(buf[byte_pos + 6]) << 48)
        )
    else:
        for i in range(7):
            if byte_pos + i < size:
                value |= np.int64(buf[byte_pos + i]) << (8 * i)
    return value


@device(cpu_inline=True)
def peek_bits(buf, bit_pos):
    """At least PEEK_BITS bits starting at bit_pos (LSB first)."""
    return load56(buf, bit_pos >> 3) >> (bit_pos & 7)


@device
def peek_window(buf, bit_pos):
    """peek_bits without a branch: the same bits (load56's seven bytes from bit_pos >> 3, zero past
    the end, shifted by bit_pos & 7), from one 8-byte read clamped to the buffer's last 8 bytes.
    buf must hold at least 8 bytes. The decoders read every code word with it; the unsigned index
    lets the eight byte reads become one load. The CPU build replaces it with one unaligned load
    away from the buffer's end (cpu._peek_window), which shortens the chain from one code word's
    position to the next."""
    byte_pos = bit_pos >> 3
    start = min(byte_pos, buf.shape[0] - 8)
    word = np.uint64(0)
    for i in range(8):
        word |= np.uint64(buf[np.uint64(start) + np.uint64(i)]) << np.uint64(8 * i)
    # drop the bytes before byte_pos (all 8 when byte_pos is past the end) in two shifts: one of
    # 64 bits would be undefined
    skip = np.uint64(4 * min(byte_pos - start, 8))
    return np.int64(((word >> skip) >> skip) & np.uint64((1 << 56) - 1)) >> (bit_pos & 7)


@device(cpu_inline=True)
def read_bits(buf, bit_pos, count):
    """count (0..32) bits at bit_pos as an integer."""
    return peek_bits(buf, bit_pos) & ((np.int64(1) << count) - 1)


@device(cpu_inline=True)
def trailing_zeros(value, limit):
    """Zero bits below the lowest set bit of value, at most limit (the CPU build counts them
    with one instruction)."""
    count = 0
    while count < limit and ((value >> count) & 1) == 0:
        count += 1
    return count


@device
def writer_init(state, byte_pos, byte_limit):
    state[W_POS] = byte_pos
    state[W_ACC] = 0
    state[W_NACC] = 0
    state[W_LIMIT] = byte_limit


@device(cpu_inline=True)
def appended(out, pos, acc, nacc, limit, value, count):
    """A writer's (byte position, accumulator, bits in it) after count (0..48) more bits; whole
    bytes go to out, those at or past limit are dropped and show as overflow."""
    acc |= np.int64(value) << nacc
    nacc += count
    while nacc >= 8:
        if pos < limit:
            out[pos] = acc & 255
        pos += 1
        acc >>= 8
        nacc -= 8
    return pos, acc, nacc


@device
def put_bits(out, state, value, count):
    """Append count (0..48) bits to the writer whose state is an array (writer_init)."""
    state[W_POS], state[W_ACC], state[W_NACC] = appended(
        out, state[W_POS], state[W_ACC], state[W_NACC], state[W_LIMIT], value, count)


@device
def writer_flush(out, state):
    """Pad to a byte boundary; returns the end byte position (past the limit on overflow)."""
    if state[W_NACC] > 0:
        put_bits(out, state, 0, 8 - state[W_NACC])
    return state[W_POS]


@device
def bit_length(value):
    n = 0
    while value > 0:
        n += 1
        value >>= 1
    return n
