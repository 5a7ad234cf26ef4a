"""Stream-level layout shared by every decoder: kinds, sizes, sample bytes.

A stream is one tile-channel. These device functions check a stream's kind and
size and locate its parts; the CPU drivers and both GPU flavours call them, so
every decoder accepts and rejects exactly the same streams.
"""

import numpy as np

from .format import KIND_CODED, KIND_CONSTANT, KIND_RAW, STATUS_BAD_KIND, STATUS_BAD_SIZE, STATUS_OK
from .jit import device


@device
def read_sample(buf, pos, bytes_per_sample):
    """A little-endian sample of 1 or 2 bytes at byte pos."""
    value = np.int64(buf[pos])
    if bytes_per_sample == 2:
        value |= np.int64(buf[pos + 1]) << 8
    return value


@device
def uncoded_stream_status(kind, size, bytes_per_sample, samples):
    """Status of a constant or raw stream of `size` bytes for a tile of `samples` samples."""
    if kind == KIND_CONSTANT:
        return STATUS_OK if size == 1 + bytes_per_sample else STATUS_BAD_SIZE
    if kind == KIND_RAW:
        return STATUS_OK if size == 1 + bytes_per_sample * samples else STATUS_BAD_SIZE
    if kind == KIND_CODED:
        return STATUS_OK
    return STATUS_BAD_KIND


@device
def uncoded_sample(buf, start, kind, index, bytes_per_sample):
    """Sample `index` (row-major in the tile) of a constant or raw stream."""
    if kind == KIND_CONSTANT:
        return read_sample(buf, start + 1, bytes_per_sample)
    return read_sample(buf, start + 1 + index * bytes_per_sample, bytes_per_sample)


# ---------------------------------------------------------------- whole streams on the CPU


@device
def constant_value(tile):
    """The value of every sample of a tile plane (2-D view), or -1 if they differ."""
    first = tile[0, 0]
    for row in range(tile.shape[0]):
        for col in range(tile.shape[1]):
            if tile[row, col] != first:
                return np.int64(-1)
    return np.int64(first)


@device
def write_sample(out, pos, value, bytes_per_sample):
    out[pos] = value & 255
    if bytes_per_sample == 2:
        out[pos + 1] = (value >> 8) & 255


@device
def encode_uncoded(tile, bits, out, start, constant):
    """Write a constant stream if constant >= 0, else a raw one, at out[start:]; returns its size.
    Every mode falls back to these when coding would not pay."""
    bytes_per_sample = bits // 8
    if constant >= 0:
        out[start] = KIND_CONSTANT
        write_sample(out, start + 1, constant, bytes_per_sample)
        return 1 + bytes_per_sample
    out[start] = KIND_RAW
    pos = start + 1
    for row in range(tile.shape[0]):
        for col in range(tile.shape[1]):
            write_sample(out, pos, np.int64(tile[row, col]), bytes_per_sample)
            pos += bytes_per_sample
    return pos - start


@device
def decode_uncoded(buf, start, end, tile, bits):
    """Check a stream's kind and size and fill tile if it is constant or raw: (status, coded),
    where coded says the mode's own decoder must take it."""
    height, width = tile.shape
    kind = buf[start]
    status = uncoded_stream_status(kind, end - start, bits // 8, height * width)
    if status != STATUS_OK or kind == KIND_CODED:
        return status, status == STATUS_OK
    for row in range(height):
        for col in range(width):
            tile[row, col] = uncoded_sample(buf, start, kind, row * width + col, bits // 8)
    return status, False
