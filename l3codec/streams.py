"""Stream-level layout shared by every decoder: kinds, sizes, sample bytes, palettes.

A stream is one tile-channel. These device functions check a stream's kind and
size and locate its parts; the CPU drivers and both GPU flavours call them, so
every decoder accepts and rejects exactly the same streams.
"""

import numpy as np

from .format import (KIND_CODED, KIND_CODED_ANS, KIND_CODED_EXTENDED, KIND_CONSTANT, KIND_PALETTE, KIND_PALETTE_MEMBER, KIND_RAW,
                     PALETTE_HEADER_BYTES, STATUS_BAD_KIND, STATUS_BAD_SIZE, STATUS_OK, L3Error, parse)
from .huffman import TABLE_SIZE, TABLES
from .jit import device
from .lz import expand_lz_stream, is_coded_lz, is_lz, is_pixel_lz, pixel_offset

PLANE_OWN = 0  # open_stream's colours for a stream that codes its own plane (kinds 0-2, 5, 6, 8)
PLANE_MEMBER = -1  # ... for a member (kind 4): the tile's channel-0 stream writes its plane
PLANE_PIXELS = -2  # ... for a pixel LZ stream (kind 7 or 9): it writes every plane of its tile


@device
def holds_tile(kind):
    """A channel-0 stream kind that codes every channel of its tile, whose other channels are members."""
    return kind == KIND_PALETTE or is_pixel_lz(kind)


@device(cpu_inline=True)
def open_stream(buf, start, end, channel, tile_start, channels, bytes_per_sample):
    """Where a tile-channel's plane stream begins: (status, plane start, colours). tile_start is the
    start of the tile's channel-0 stream. colours is PLANE_OWN for kinds 0-2, 5, 6 and 8 (the plane stream is the
    stream); for a palette stream (kind 3, channel 0 only) the palette's colour count, its table at
    start + PALETTE_HEADER_BYTES and its index plane's stream after the table; PLANE_PIXELS for a pixel
    LZ stream (kind 7 or 9, channel 0 only); PLANE_MEMBER for a member (kind 4: channels 1.. of a palette or
    pixel LZ tile, one byte, nothing of its own to decode)."""
    kind = buf[start]
    in_member_tile = channel != 0 and holds_tile(buf[tile_start])
    if kind == KIND_PALETTE_MEMBER:
        if not in_member_tile:
            return STATUS_BAD_KIND, start, PLANE_MEMBER
        return (STATUS_OK if end - start == 1 else STATUS_BAD_SIZE), start, PLANE_MEMBER
    if in_member_tile:  # such a tile's other channels are members, nothing else
        return STATUS_BAD_KIND, start, PLANE_OWN
    if is_pixel_lz(kind):
        return (STATUS_BAD_KIND if channel != 0 else STATUS_OK), start, PLANE_PIXELS
    if kind != KIND_PALETTE:
        return STATUS_OK, start, PLANE_OWN  # kinds 0-2, 5, 6 and 8, or a bad kind that uncoded_stream_status reports
    if channel != 0:
        return STATUS_BAD_KIND, start, PLANE_OWN
    if end - start < PALETTE_HEADER_BYTES:
        return STATUS_BAD_SIZE, start, PLANE_OWN
    colours = np.int64(buf[start + 1]) + 1
    plane_start = start + PALETTE_HEADER_BYTES + colours * channels * bytes_per_sample
    if plane_start >= end:  # the index plane's stream needs at least its kind byte
        return STATUS_BAD_SIZE, start, PLANE_OWN
    return STATUS_OK, plane_start, colours


@device
def plane_stream_status(buf, start, end, channel, tile_start, channels, bytes_per_sample, samples):
    """open_stream, then the plane stream's own kind and size (uncoded_stream_status, samples in the
    tile): (status, plane start, colours), for decoders that read the plane stream themselves."""
    status, plane_start, colours = open_stream(buf, start, end, channel, tile_start, channels, bytes_per_sample)
    if status == STATUS_OK and colours != PLANE_MEMBER:
        status = uncoded_stream_status(buf[plane_start], end - plane_start, bytes_per_sample, samples)
    return status, plane_start, colours


@device(cpu_inline=True)
def palette_sample(buf, start, colours, index, channel, channels, bytes_per_sample):
    """Channel `channel` of colour `index` of the palette stream at start, which holds `colours`
    colours. An index past the last colour selects the last (the encoder never writes one): every
    index plane decodes to colours, with nothing to check sample by sample."""
    colour = min(index, colours - 1)
    return read_sample(buf, start + PALETTE_HEADER_BYTES + (colour * channels + channel) * bytes_per_sample,
                       bytes_per_sample)


@device(cpu_inline=True)
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
    if is_coded(kind):
        return STATUS_OK
    return STATUS_BAD_KIND


@device
def is_coded(kind):
    """A stream its mode's own decoder reads: every mode's coded kind, fast mode's extended one and
    compact's kind 10 (each mode's decoder refuses the other's itself)."""
    return kind == KIND_CODED or kind == KIND_CODED_EXTENDED or kind == KIND_CODED_ANS


@device(cpu_inline=True)
def uncoded_sample(buf, start, kind, index, bytes_per_sample):
    """Sample `index` (row-major in the tile) of a constant or raw stream."""
    if kind == KIND_CONSTANT:
        return read_sample(buf, start + 1, bytes_per_sample)
    return read_sample(buf, start + 1 + index * bytes_per_sample, bytes_per_sample)


def plane_streams(data):
    """(stream, plane stream start, end) of each stream of a file that codes a plane, read on the host
    by open_stream: a palette's index plane's stream in place of the palette stream, a pixel LZ stream
    (which codes every plane of its tile), members left out. For tools and tests that look inside
    files; a stream open_stream refuses raises L3Error."""
    parsed = parse(data)
    info = parsed.info
    buf = np.frombuffer(data, np.uint8)
    starts, ends = parsed.stream_starts, parsed.stream_ends
    for stream, (start, end) in enumerate(zip(starts, ends)):
        channel = stream % info.channels
        status, plane_start, colours = open_stream(buf, int(start), int(end), channel, int(starts[stream - channel]),
                                                   info.channels, info.bits // 8)
        if status != STATUS_OK:
            raise L3Error(f"stream {stream} does not open (status {status})")
        if colours != PLANE_MEMBER:
            yield stream, int(plane_start), int(end)


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
def expanded_lz(buf, start, end, size):
    """The LZ stream buf[start:end] (kinds 6-9) expanded into a new array of `size` bytes: (status, the
    array); the code tables' scratch only for a coded stream."""
    raw = np.empty(size, np.uint8)
    tables = np.empty((TABLES, TABLE_SIZE) if is_coded_lz(buf[start]) else (1, 1), np.int32)
    return expand_lz_stream(buf, start, end, tables, raw, 0, size), raw


@device
def decode_uncoded(buf, start, end, tile, bits):
    """Check a stream's kind and size and fill tile if it is constant, raw or LZ: (status, coded),
    where coded says the mode's own decoder must take it."""
    height, width = tile.shape
    kind = buf[start]
    if is_lz(kind):  # expanded to the raw stream's bytes, then read as those
        status, raw = expanded_lz(buf, start, end, height * width * (bits // 8))
        if status == STATUS_OK:
            for row in range(height):
                for col in range(width):
                    tile[row, col] = read_sample(raw, (row * width + col) * (bits // 8), bits // 8)
        return status, False
    status = uncoded_stream_status(kind, end - start, bits // 8, height * width)
    if status != STATUS_OK or is_coded(kind):
        return status, status == STATUS_OK
    for row in range(height):
        for col in range(width):
            tile[row, col] = uncoded_sample(buf, start, kind, row * width + col, bits // 8)
    return status, False


@device
def decode_pixel_lz(buf, start, end, pixels, bits):
    """Expand the pixel LZ stream buf[start:end] (kind 7 or 9) into a tile's planes (3-D view: channel, row,
    column): its status (STATUS_CORRUPT when the block does not make exactly the tile's samples)."""
    channels, height, width = pixels.shape
    bytes_per_sample = bits // 8
    status, raw = expanded_lz(buf, start, end, channels * height * width * bytes_per_sample)
    if status == STATUS_OK:
        for channel in range(channels):
            for row in range(height):
                for col in range(width):
                    pixels[channel, row, col] = read_sample(
                        raw, pixel_offset(row * width + col, channel, channels, bytes_per_sample), bytes_per_sample)
    return status
