"""The LZ4 block's rules that its plain (lz.py) and Huffman-coded (huffman.py) forms share: a
token nibble's length and its extension bytes, and the match copy with its checks
(docs/FORMAT.md §5.2 step 3 and its checks)."""

import numpy as np

from .jit import device

MIN_MATCH = 4  # a token's match nibble counts from here


@device(cpu_inline=True)
def lz_length(buf, pos, end, length):
    """A token nibble's length with its extension bytes (a nibble of 15 adds bytes until one is not
    255): (length, position after it), the position -1 when the block ends inside it."""
    if length == 15:
        while True:
            if pos >= end:
                return np.int64(0), np.int64(-1)
            byte = np.int64(buf[pos])
            pos += 1
            length += byte
            if byte != 255:
                break
    return np.int64(length), np.int64(pos)


@device(cpu_inline=True)
def copy_match(out, first, produced, offset, match, size):
    """Append `match` bytes to out[first:first + produced], each the byte `offset` before it: whether
    the match is sound (an offset within the output so far, not 0; the match within `size` bytes)."""
    if offset == 0 or offset > produced or match > size - produced:
        return False
    for i in range(match):  # byte by byte: a match may overlap its own output
        out[first + produced + i] = out[first + produced - offset + i]
    return True
