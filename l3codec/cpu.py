"""Numba CPU drivers: colour transform, per-stream encode and decode, parallel over streams.

The per-sample and per-row logic lives in the mode modules; here it is compiled
with ``numba.njit(inline="always")`` and driven over tiles with ``prange``.
"""

from __future__ import annotations

import numba
import numpy as np

from . import bitio, colour, compact, fast, streams
from . import format as fmt
from .jit import compile_device_functions

_dev = compile_device_functions([bitio, colour, streams, compact, fast], numba.njit(inline="always"))
read_bits = _dev.read_bits
writer_init = _dev.writer_init
writer_flush = _dev.writer_flush
put_bits = _dev.put_bits
bit_length = _dev.bit_length
subtract_green = _dev.subtract_green
add_green = _dev.add_green
neighbours = _dev.neighbours
row_state_init = _dev.row_state_init
decode_sample = _dev.decode_sample
encode_compact_row = _dev.encode_compact_row
best_run_index = _dev.best_run_index
initial_k_nibbles = _dev.initial_k_nibbles
decode_fast_row = _dev.decode_fast_row
uncoded_stream_status = _dev.uncoded_stream_status
uncoded_sample = _dev.uncoded_sample
compact_stream_layout = _dev.compact_stream_layout
compact_row_length = _dev.compact_row_length
fast_stream_layout = _dev.fast_stream_layout
encode_fast_row = _dev.encode_fast_row
width_field_bits = _dev.width_field_bits
groups_per_row = _dev.groups_per_row

KIND_CONSTANT = fmt.KIND_CONSTANT
KIND_CODED = fmt.KIND_CODED
KIND_RAW = fmt.KIND_RAW
MODE_COMPACT = fmt.MODE_COMPACT
STATUS_OK = fmt.STATUS_OK
STATUS_BAD_SIZE = fmt.STATUS_BAD_SIZE
STATUS_BAD_HEADER = fmt.STATUS_BAD_HEADER
STATUS_CORRUPT = fmt.STATUS_CORRUPT
COMPACT_HEADER_BYTES = compact.HEADER_BYTES
COMPACT_MAX_PREFIX = compact.MAX_PREFIX_BYTES
CONTEXTS = compact.CONTEXTS
STATE_SIZE = compact.STATE_SIZE
S_POS = compact.S_POS
S_MAPPED = compact.S_MAPPED
S_ERROR = compact.S_ERROR
K_NIBBLE_BYTES = compact.K_NIBBLE_BYTES
WRITER_STATE_SIZE = bitio.WRITER_STATE_SIZE

_njit = numba.njit(cache=True, nogil=True)
_njit_parallel = numba.njit(cache=True, nogil=True, parallel=True)


def stream_slot_bytes(tile_width, tile_height, bits):
    """Scratch bytes one stream may use while encoding: the raw fallback plus the largest prefix."""
    return COMPACT_MAX_PREFIX + 1 + (bits // 8) * tile_width * tile_height + 8


# ---------------------------------------------------------------- colour and layout


@_njit_parallel
def image_to_planes(image, planes, transform, bits):
    """HWC image -> CHW planes, applying the forward colour transform."""
    height, width, channels = image.shape
    for y in numba.prange(height):
        for x in range(width):
            if transform == 1:
                r, g, b = subtract_green(np.int64(image[y, x, 0]), np.int64(image[y, x, 1]),
                                         np.int64(image[y, x, 2]), bits)
                planes[0, y, x] = r
                planes[1, y, x] = g
                planes[2, y, x] = b
                if channels == 4:
                    planes[3, y, x] = image[y, x, 3]
            else:
                for c in range(channels):
                    planes[c, y, x] = image[y, x, c]


@_njit_parallel
def planes_to_image(planes, origin_y, origin_x, out, transform, bits):
    """CHW planes (covering the region from origin) -> HWC out, undoing the colour transform."""
    height, width, channels = out.shape
    for y in numba.prange(height):
        for x in range(width):
            py = y + origin_y
            px = x + origin_x
            if transform == 1:
                r, g, b = add_green(np.int64(planes[0, py, px]), np.int64(planes[1, py, px]),
                                    np.int64(planes[2, py, px]), bits)
                out[y, x, 0] = r
                out[y, x, 1] = g
                out[y, x, 2] = b
                if channels == 4:
                    out[y, x, 3] = planes[3, py, px]
            else:
                for c in range(channels):
                    out[y, x, c] = planes[c, py, px]


# ---------------------------------------------------------------- stream encoders


@_njit
def _constant_value(tile):
    first = tile[0, 0]
    for row in range(tile.shape[0]):
        for col in range(tile.shape[1]):
            if tile[row, col] != first:
                return -1
    return np.int64(first)


@_njit
def _write_samples(out, pos, value, bytes_per_sample):
    out[pos] = value & 255
    if bytes_per_sample == 2:
        out[pos + 1] = (value >> 8) & 255


@_njit
def _encode_constant_or_raw(tile, bits, out, start, constant):
    """Write a KIND_CONSTANT stream if constant >= 0, else KIND_RAW; return its size."""
    bytes_per_sample = bits // 8
    if constant >= 0:
        out[start] = KIND_CONSTANT
        _write_samples(out, start + 1, constant, bytes_per_sample)
        return 1 + bytes_per_sample
    out[start] = KIND_RAW
    pos = start + 1
    for row in range(tile.shape[0]):
        for col in range(tile.shape[1]):
            _write_samples(out, pos, np.int64(tile[row, col]), bytes_per_sample)
            pos += bytes_per_sample
    return pos - start


@_njit
def _repeats_row_above(tile, row):
    if row == 0:
        return False
    for col in range(tile.shape[1]):
        if tile[row, col] != tile[row - 1, col]:
            return False
    return True


@_njit
def encode_compact_stream(tile, bits, out, start):
    """Encode one tile-channel in compact mode at out[start:]; returns the stream size."""
    height, width = tile.shape
    raw_size = 1 + (bits // 8) * height * width
    constant = _constant_value(tile)
    if constant >= 0:
        return _encode_constant_or_raw(tile, bits, out, start, constant)
    state = np.empty(STATE_SIZE, np.int64)
    writer = np.empty(WRITER_STATE_SIZE, np.int64)
    stats = np.zeros(2 * CONTEXTS, np.int64)
    runs = np.empty(height * width + 1, np.int64)
    mapped_rows = np.zeros((2, width), np.int64)
    row_run_starts = np.zeros(height + 1, np.int64)
    # Pass 1 only measures: a writer with limit 0 drops every byte.
    writer_init(writer, 0, 0)
    run_count = 0
    default_k = 0x222222222
    for row in range(height):
        if _repeats_row_above(tile, row):
            mapped_rows[row % 2, :] = 0
        else:
            row_state_init(state, 0, default_k, 0)
            run_count = encode_compact_row(tile, row, width, bits, out, writer, state, stats, runs, run_count,
                                           mapped_rows)
        row_run_starts[row + 1] = run_count
    k_nibbles = initial_k_nibbles(stats, bits)
    run_index = best_run_index(runs, row_run_starts, height)
    # Pass 2 writes the rows after room for the largest prefix, then moves them down.
    data_start = start + COMPACT_MAX_PREFIX
    limit = start + COMPACT_MAX_PREFIX + raw_size
    writer_init(writer, data_start, limit)
    row_ends = np.empty(height + 1, np.int64)
    row_ends[0] = data_start * 8
    longest = 0
    for row in range(height):
        if _repeats_row_above(tile, row):  # a zero row length says "copy the row above"
            mapped_rows[row % 2, :] = 0
        else:
            row_state_init(state, 0, k_nibbles, run_index)
            encode_compact_row(tile, row, width, bits, out, writer, state, stats, runs, 0, mapped_rows)
        row_ends[row + 1] = writer[0] * 8 + writer[2]
        longest = max(longest, row_ends[row + 1] - row_ends[row])
        if writer[0] >= limit:
            return _encode_constant_or_raw(tile, bits, out, start, -1)
    data_end = writer_flush(out, writer)
    length_bits = bit_length(longest)
    prefix = COMPACT_HEADER_BYTES + (height * length_bits + 7) // 8
    size = prefix + data_end - data_start
    if data_end > limit or size >= raw_size:
        return _encode_constant_or_raw(tile, bits, out, start, -1)
    for i in range(data_end - data_start):
        out[start + prefix + i] = out[data_start + i]
    out[start] = KIND_CODED
    out[start + 1] = run_index
    for i in range(K_NIBBLE_BYTES):
        out[start + 2 + i] = (k_nibbles >> (8 * i)) & 255
    out[start + 2 + K_NIBBLE_BYTES] = length_bits
    writer_init(writer, start + COMPACT_HEADER_BYTES, start + prefix)
    for row in range(height):
        put_bits(out, writer, row_ends[row + 1] - row_ends[row], length_bits)
    writer_flush(out, writer)
    return size


@_njit
def encode_fast_stream(tile, bits, out, start):
    """Encode one tile-channel in fast mode at out[start:]; returns the stream size."""
    height, width = tile.shape
    raw_size = 1 + (bits // 8) * height * width
    constant = _constant_value(tile)
    if constant >= 0:
        return _encode_constant_or_raw(tile, bits, out, start, constant)
    field_bytes = (height * groups_per_row(width) * width_field_bits(bits) + 7) // 8
    data_start = start + 1 + field_bytes
    limit = start + raw_size
    fields = np.empty(WRITER_STATE_SIZE, np.int64)
    writer = np.empty(WRITER_STATE_SIZE, np.int64)
    writer_init(fields, start + 1, data_start)
    writer_init(writer, data_start, limit)
    mapped = np.empty(width, np.int64)
    for row in range(height):
        encode_fast_row(tile, row, width, bits, out, writer, fields, mapped)
        if writer[0] >= limit:
            return _encode_constant_or_raw(tile, bits, out, start, -1)
    writer_flush(out, fields)
    data_end = writer_flush(out, writer)
    if data_end >= limit:
        return _encode_constant_or_raw(tile, bits, out, start, -1)
    out[start] = KIND_CODED
    return data_end - start


@_njit_parallel
def encode_streams(planes, mode, tile_width, tile_height, bits, out, slot_bytes, sizes):
    channels, height, width = planes.shape
    tiles_x = (width + tile_width - 1) // tile_width
    for stream in numba.prange(sizes.shape[0]):
        tile_index = stream // channels
        channel = stream % channels
        y0 = (tile_index // tiles_x) * tile_height
        x0 = (tile_index % tiles_x) * tile_width
        tile = planes[channel, y0:min(y0 + tile_height, height), x0:min(x0 + tile_width, width)]
        start = stream * slot_bytes
        if mode == MODE_COMPACT:
            sizes[stream] = encode_compact_stream(tile, bits, out, start)
        else:
            sizes[stream] = encode_fast_stream(tile, bits, out, start)


@_njit
def gather_streams(out, slot_bytes, sizes, payload):
    pos = 0
    for stream in range(sizes.shape[0]):
        start = stream * slot_bytes
        payload[pos:pos + sizes[stream]] = out[start:start + sizes[stream]]
        pos += sizes[stream]


# ---------------------------------------------------------------- stream decoders


@_njit
def _decode_uncoded(buf, start, kind, tile, bits):
    """Fill tile from a constant or raw stream whose size has been checked."""
    height, width = tile.shape
    for row in range(height):
        for col in range(width):
            tile[row, col] = uncoded_sample(buf, start, kind, row * width + col, bits // 8)


@_njit
def decode_compact_stream(buf, start, end, tile, bits):
    height, width = tile.shape
    kind = buf[start]
    status = uncoded_stream_status(kind, end - start, bits // 8, height * width)
    if status != STATUS_OK or kind != KIND_CODED:
        if status == STATUS_OK:
            _decode_uncoded(buf, start, kind, tile, bits)
        return status
    status, run_index, k_nibbles, length_bits, table_pos, pos = compact_stream_layout(buf, start, end, height)
    if status != STATUS_OK:
        return status
    half = np.int64(1) << (bits - 1)
    state = np.empty(STATE_SIZE, np.int64)
    mapped_rows = np.zeros((2, width), np.int64)
    for row in range(height):
        mapped_here = mapped_rows[row % 2]
        mapped_above = mapped_rows[(row + 1) % 2]
        row_end = pos + compact_row_length(buf, table_pos, length_bits, row)
        if row_end > end * 8:
            return STATUS_BAD_SIZE
        if row_end == pos:  # a coded row takes at least one bit: zero means "copy the row above"
            if row == 0:
                return STATUS_CORRUPT
            tile[row, :] = tile[row - 1, :]
            mapped_here[:] = 0
            continue
        row_state_init(state, pos, k_nibbles, run_index)
        for col in range(width):
            left = np.int64(tile[row, col - 1]) if col > 0 else half
            left2 = np.int64(tile[row, col - 2]) if col > 1 else half
            up = np.int64(tile[row - 1, col]) if row > 0 else half
            upleft = np.int64(tile[row - 1, col - 1]) if row > 0 and col > 0 else half
            w, n, nw = neighbours(row, col, left, left2, up, upleft, half)
            tile[row, col] = decode_sample(buf, state, w, n, nw, mapped_above[col] if row > 0 else 0,
                                           width - col, bits)
            mapped_here[col] = state[S_MAPPED]
        if state[S_POS] != row_end or state[S_ERROR]:
            return STATUS_CORRUPT
        pos = row_end
    if (pos + 7) // 8 != end:
        return STATUS_BAD_SIZE
    return STATUS_OK


@_njit
def decode_fast_stream(buf, start, end, tile, bits):
    height, width = tile.shape
    kind = buf[start]
    status = uncoded_stream_status(kind, end - start, bits // 8, height * width)
    if status != STATUS_OK or kind != KIND_CODED:
        if status == STATUS_OK:
            _decode_uncoded(buf, start, kind, tile, bits)
        return status
    status, field_pos, row_fields, data_pos = fast_stream_layout(start, end, height, width, bits)
    if status != STATUS_OK:
        return status
    for row in range(height):
        data_pos = decode_fast_row(buf, field_pos + row * row_fields, data_pos, tile, row, width, bits)
        if data_pos < 0:
            return STATUS_BAD_HEADER
        if data_pos > end * 8:
            return STATUS_BAD_SIZE
    if (data_pos + 7) // 8 != end:
        return STATUS_BAD_SIZE
    return STATUS_OK


@_njit_parallel
def decode_streams(buf, starts, ends, stream_ids, planes, origin_y, origin_x,
                   tiles_x, tile_width, tile_height, height, width, mode, bits, status):
    """Decode the listed streams into planes, whose pixel (0, 0) is image pixel (origin_y, origin_x)."""
    channels = planes.shape[0]
    for i in numba.prange(stream_ids.shape[0]):
        stream = stream_ids[i]
        tile_index = stream // channels
        channel = stream % channels
        y0 = (tile_index // tiles_x) * tile_height
        x0 = (tile_index % tiles_x) * tile_width
        y1 = min(y0 + tile_height, height)
        x1 = min(x0 + tile_width, width)
        tile = planes[channel, y0 - origin_y:y1 - origin_y, x0 - origin_x:x1 - origin_x]
        if mode == MODE_COMPACT:
            status[i] = decode_compact_stream(buf, starts[stream], ends[stream], tile, bits)
        else:
            status[i] = decode_fast_stream(buf, starts[stream], ends[stream], tile, bits)
