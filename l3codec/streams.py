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
