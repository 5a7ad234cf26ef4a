"""`fast` mode: row-parallel prediction and group bit-packing.

Row 0 of a tile is delta-coded along the row. Every later row is predicted from
the row above only, in two phases, so all samples of a row decode in parallel:
even columns from N; odd columns as MED((L+R)/2, N, (NW+NE)/2), where L and R are
the even neighbours just decoded. Mapped residuals are packed in groups of 16
samples, each group at its own bit width; a sample's bit offset follows from the
group widths alone.
"""

import numpy as np

from .bitio import (
    PEEK_BITS, W_POS, WRITER_STATE_SIZE, bit_length, peek_bits, put_bits, read_bits, writer_flush,
    writer_init,
)
from .compact import med, unzigzag, zigzag
from .format import KIND_CODED, STATUS_BAD_HEADER, STATUS_BAD_SIZE, STATUS_OK
from .jit import device
from .streams import constant_value, encode_uncoded

GROUP_SIZE = 16


@device
def width_field_bits(bits):
    """Bits of one group-width field: widths run 0..bits."""
    return 4 if bits == 8 else 5


@device
def groups_per_row(width):
    return (width + GROUP_SIZE - 1) // GROUP_SIZE


@device
def fast_stream_layout(start, end, height, width, bits):
    """Locate a coded fast stream's parts: (status, bit position of the width fields,
    width-field bits per row, bit position of the packed residuals)."""
    row_fields = groups_per_row(width) * width_field_bits(bits)
    data_pos = (start + 1 + (height * row_fields + 7) // 8) * 8
    if data_pos > end * 8:
        return STATUS_BAD_SIZE, 0, 0, 0
    return STATUS_OK, (start + 1) * 8, row_fields, data_pos


@device
def predict_odd(left, right, up, upleft, upright):
    return med((left + right) >> 1, up, (upleft + upright) >> 1)


@device
def predict(tile, row, col, width, bits):
    """Prediction of tile[row, col]: needs row-1 and, for odd columns, the even samples of row."""
    if row == 0:
        if col == 0:
            return np.int64(1) << (bits - 1)
        return np.int64(tile[row, col - 1])
    up = np.int64(tile[row - 1, col])
    if col % 2 == 0:
        return up
    left = np.int64(tile[row, col - 1])
    upleft = np.int64(tile[row - 1, col - 1])
    if col + 1 < width:
        return predict_odd(left, np.int64(tile[row, col + 1]), up, upleft, np.int64(tile[row - 1, col + 1]))
    return predict_odd(left, left, up, upleft, upleft)


@device
def decode_fast_row(buf, field_pos, data_pos, tile, row, width, bits):
    """Decode one row in place; returns the data bit position after it, or -1 for a bad width."""
    mask = (np.int64(1) << bits) - 1
    field_bits = width_field_bits(bits)
    for group in range(groups_per_row(width)):
        group_bits = read_bits(buf, field_pos + group * field_bits, field_bits)
        if group_bits > bits:
            return -1
        group_mask = (np.int64(1) << group_bits) - 1
        # unpack as many samples as one peek holds, with no test per sample
        per_peek = PEEK_BITS // max(group_bits, 1)
        col = group * GROUP_SIZE
        group_end = min(width, col + GROUP_SIZE)
        while col < group_end:
            window = peek_bits(buf, data_pos)
            stop = min(group_end, col + per_peek)
            for c in range(col, stop):
                tile[row, c] = window & group_mask
                window >>= group_bits
            data_pos += (stop - col) * group_bits
            col = stop
    # predict()'s cases, each in a loop of its own: no per-sample branches
    if row == 0:
        value = np.int64(1) << (bits - 1)
        for col in range(width):
            value = (value + unzigzag(np.int64(tile[0, col]))) & mask
            tile[0, col] = value
        return data_pos
    for col in range(0, width, 2):
        tile[row, col] = (np.int64(tile[row - 1, col]) + unzigzag(np.int64(tile[row, col]))) & mask
    above = tile[row - 1]
    for col in range(1, width - 1, 2):  # odd columns with a right neighbour
        prediction = predict_odd(np.int64(tile[row, col - 1]), np.int64(tile[row, col + 1]),
                                 np.int64(above[col]), np.int64(above[col - 1]), np.int64(above[col + 1]))
        tile[row, col] = (prediction + unzigzag(np.int64(tile[row, col]))) & mask
    if width % 2 == 0:  # the last column is odd and has none
        col = width - 1
        tile[row, col] = (predict(tile, row, col, width, bits) + unzigzag(np.int64(tile[row, col]))) & mask
    return data_pos


@device
def encode_fast_row(tile, row, width, bits, out, writer, field_writer, mapped):
    """Write row's group widths (at field_writer) and packed residuals (at writer)."""
    for col in range(width):
        mapped[col] = zigzag(np.int64(tile[row, col]) - predict(tile, row, col, width, bits), bits)
    for group in range(groups_per_row(width)):
        first = group * GROUP_SIZE
        last = min(width, first + GROUP_SIZE)
        widest = 0
        for col in range(first, last):
            widest = max(widest, bit_length(mapped[col]))
        put_bits(out, field_writer, widest, width_field_bits(bits))
        for col in range(first, last):
            put_bits(out, writer, mapped[col], widest)


@device
def encode_fast_stream(tile, bits, out, start):
    """Encode one tile-channel (2-D view) at out[start:]; returns the stream size (at most the raw
    stream's)."""
    height, width = tile.shape
    raw_size = 1 + (bits // 8) * height * width
    constant = constant_value(tile)
    if constant >= 0:
        return encode_uncoded(tile, bits, out, start, constant)
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
        if writer[W_POS] >= limit:
            return encode_uncoded(tile, bits, out, start, -1)
    writer_flush(out, fields)
    data_end = writer_flush(out, writer)
    if data_end >= limit:
        return encode_uncoded(tile, bits, out, start, -1)
    out[start] = KIND_CODED
    return data_end - start


@device
def decode_fast_stream(buf, start, end, tile, bits):
    """Decode a coded fast stream (its kind and size checked) into tile; returns its status."""
    height, width = tile.shape
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
