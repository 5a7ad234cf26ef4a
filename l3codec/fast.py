"""`fast` mode (format version 5): row-parallel prediction, per-group packed, Rice, sparse or bitmap residuals.

Row 0 of a tile is delta-coded along the row. Every later row is predicted in PHASES phases
from the row above and from samples of its own row decoded in earlier phases, so all samples
of a phase decode in parallel. A row's mapped residuals are cut into groups of GROUP_SIZE:
the row starts with one bit (any residual non-zero?), then one flag per group (non-zero?),
then a header per flagged group (a code: the group's form and width; and a count: the group's
listed samples if sparse or bitmap, else the sum of its Rice quotients), then the flagged
groups' data. Every group's bit offset follows from the headers alone, by a prefix sum.
A coded stream of kind KIND_CODED takes the short code table (versions 2-5), one of kind
KIND_CODED_EXTENDED the extended one (version 5); the encoder writes each stream in the one that
takes fewer bits. docs/FORMAT.md §7 is the specification.
"""

import numpy as np

from .bitio import PEEK_BITS, WRITER_STATE_SIZE, bit_length, peek_window, put_bits, read_bits, \
    trailing_zeros, writer_flush, writer_init
from .compact import med, unzigzag, zigzag
from .format import KIND_CODED, KIND_CODED_EXTENDED, STATUS_BAD_HEADER, STATUS_BAD_SIZE, STATUS_CORRUPT, STATUS_OK
from .jit import device
from .streams import constant_value, encode_uncoded

# ---- Frozen constants (docs/FORMAT.md §7.4). Changing one changes the format.
GROUP_SIZE = 64  # samples per group; the last group of a row may hold fewer
QSUM_BITS = 7  # bits of a header's count: a Rice group's quotient sum (at most 127), a sparse or bitmap group's size
POSITION_BITS = 6  # a sparse sample's column within its group: GROUP_SIZE == 2**POSITION_BITS
PHASES = 4  # prediction phases of rows >= 1
PERIOD = 1 << (PHASES - 1)  # phase 0 takes every PERIOD-th column from the row above

# A flagged group's form: how its data holds its samples (its width: a field's or value's bits, or k).
# In the extended table, a code's form is its quotient by bits (sparse, packed, bitmap, Rice) and
# its width follows from the remainder.
FORM_SPARSE = 0  # count positions of POSITION_BITS, then count values of width bits
FORM_PACKED = 1  # one field of width bits per sample
FORM_BITMAP = 2  # one bit per sample (1: listed), then count values of width bits (extended codes only)
FORM_RICE = 3  # one remainder of k = width bits per sample, then the unary part (count + qsum bits)
SPARSE_CODE = 0  # the short table's sparse code (version 3; version 2 allowed it only with qsum 0)
SHORT_TABLE = 0  # the encoder's index of each code table (kind 1, kind 5)
EXTENDED_TABLE = 1


@device
def code_bits(bits, extended):
    """Bits of a group's code. Short table: sparse (0), packed widths 1..bits, then Rice parameters
    0..max_rice_k(bits); extended: sparse and bitmap groups also take a value width (group_form)."""
    if extended:
        return 5 if bits == 8 else 6
    return 4 if bits == 8 else 5


@device
def max_rice_k(bits):
    """The largest Rice parameter: every short code up to 2**code_bits - 1 is legal."""
    return bits - 2


@device
def header_bits(bits, extended):
    return code_bits(bits, extended) + QSUM_BITS


@device
def group_form(code, bits, extended):
    """(form, width) of a group code. Extended: sparse, packed and bitmap widths 1..bits, then Rice
    k = 0..bits-1, of which the last is no parameter (group_header_sound)."""
    if not extended:
        if code == SPARSE_CODE:
            return FORM_SPARSE, bits
        if code <= bits:
            return FORM_PACKED, code
        return FORM_RICE, code - bits - 1
    form = code >> (3 + (bits >> 4))  # code // bits, bits 8 or 16
    return form, (code & (bits - 1)) + (form != FORM_RICE)


@device
def extended_code(form, width, bits):
    """The extended table's code of (form, width): group_form's inverse."""
    return form * bits + width - (form != FORM_RICE)


@device(cpu_inline=True)
def groups_per_row(width):
    return (width + GROUP_SIZE - 1) // GROUP_SIZE


@device
def group_data_bits(form, width, qsum, count):
    """Data bits of a flagged group of count samples: sparse qsum positions and values, packed
    count * width, Rice count remainders of k = width bits plus count + qsum unary bits, or bitmap
    count bits plus qsum values."""
    if form == FORM_SPARSE:
        return qsum * (POSITION_BITS + width)
    if form == FORM_PACKED:
        return count * width
    if form == FORM_RICE:
        return count * (width + 1) + qsum
    return count + qsum * width


# ---------------------------------------------------------------- prediction


@device(cpu_inline=True)
def predict_between(left, right, up, upleft, upright):
    return med((left + right) >> 1, up, (upleft + upright) >> 1)


@device(cpu_inline=True)
def predict(tile, row, col, width, bits):
    """Prediction of tile[row, col] from the row above and the columns of earlier phases."""
    if row == 0:
        if col == 0:
            return np.int64(1) << (bits - 1)
        return np.int64(tile[row, col - 1])
    up = np.int64(tile[row - 1, col])
    if col % PERIOD == 0:
        return up
    distance = col & -col  # the phase of col: its lowest set bit
    left = np.int64(tile[row, col - distance])
    upleft = np.int64(tile[row - 1, col - distance])
    if col + distance < width:
        return predict_between(left, np.int64(tile[row, col + distance]), up, upleft,
                               np.int64(tile[row - 1, col + distance]))
    return predict_between(left, left, up, upleft, upleft)


@device(cpu_inline=True)
def unpredicted(left, right, up, upleft, upright, residual, mask):
    """The sample whose prediction from these neighbours is off by the mapped residual."""
    return (predict_between(np.int64(left), np.int64(right), np.int64(up), np.int64(upleft), np.int64(upright))
            + unzigzag(np.int64(residual))) & mask


@device(cpu_inline=True)
def slot(col):
    """Where unpredict_row keeps column col of a row: [col % PERIOD, col // PERIOD]."""
    return col & (PERIOD - 1), col >> (PHASES - 1)


@device(cpu_inline=True)
def unpredict_row(residuals, current, above, row, width, bits):
    """The samples of a row (into current) from its mapped residuals, phase by phase; above holds
    the samples of the row before. Both hold a row transposed, column col at slot(col), so that a
    phase's loop over the periods of the row reads and writes consecutive samples (LLVM vectorizes
    it; with the contiguous rows, 10.5 -> 7.2 ms per 2048x1024 RGB frame against the tile view)."""
    mask = (np.int64(1) << bits) - 1
    if row == 0:
        value = np.int64(1) << (bits - 1)
        for col in range(width):
            value = (value + unzigzag(np.int64(residuals[col]))) & mask
            current[slot(col)] = value
        return
    for j in range(current.shape[1]):  # phase 0: every PERIOD-th column, from the row above
        current[0, j] = (np.int64(above[0, j]) + unzigzag(np.int64(residuals[j * PERIOD]))) & mask
    periods = (width - 1) // PERIOD  # the periods whose right phase-0 column is in the row
    distance = PERIOD >> 1
    while distance >= 1:
        for phase_col in range(distance, PERIOD, 2 * distance):
            left = phase_col - distance
            right = (phase_col + distance) & (PERIOD - 1)
            step = (phase_col + distance) >> (PHASES - 1)  # 1 where the right neighbour is the next period's
            for j in range(periods):
                current[phase_col, j] = unpredicted(
                    current[left, j], current[right, j + step], above[phase_col, j], above[left, j],
                    above[right, j + step], residuals[j * PERIOD + phase_col], mask)
        distance >>= 1
    last = periods * PERIOD  # the last period, maybe cut short by the row's end
    distance = PERIOD >> 1
    while distance >= 1:
        for col in range(last + distance, width, 2 * distance):
            left, upleft = current[slot(col - distance)], above[slot(col - distance)]
            right, upright = left, upleft  # no column col + distance: the left ones stand in
            if col + distance < width:
                right, upright = current[slot(col + distance)], above[slot(col + distance)]
            current[slot(col)] = unpredicted(left, right, above[slot(col)], upleft, upright, residuals[col], mask)
        distance >>= 1


# ---------------------------------------------------------------- decoding


@device(cpu_inline=True)
def unpack_samples(buf, pos, values, col, count, width_bits):
    """values[col:col+count] = count fields of width_bits at bit pos."""
    field_mask = (np.int64(1) << width_bits) - 1
    per_peek = PEEK_BITS // max(width_bits, 1)  # fields one peek holds: no test per sample
    stop_all = col + count
    while col < stop_all:
        window = peek_window(buf, pos)
        stop = min(stop_all, col + per_peek)
        for c in range(col, stop):
            values[np.uint64(c)] = window & field_mask  # unsigned: no negative-index wrap
            window >>= width_bits
        pos += (stop - col) * width_bits
        col = stop


UNARY_CHUNK = 48  # bits of a Rice group's unary part decode_rice_group takes per window (<= PEEK_BITS)


@device(cpu_inline=True)
def decode_rice_group(buf, pos, values, col, count, k, qsum, bits):
    """Decode a Rice group at pos (count remainders of k bits, then the unary part) into values.
    False unless its unary part holds exactly count ones in count + qsum bits, the last bit one,
    and every value is below 2**bits. The unary part is walked a set bit at a time, UNARY_CHUNK
    bits per window: a quotient is the gap between two ones, each one cleared once found rather
    than the window shifted by a measured length; the remainders come from their own window."""
    remainder_mask = (np.int64(1) << k) - 1
    per_window = PEEK_BITS // max(k, 1)  # remainders a window holds
    remainders = peek_window(buf, pos)
    remainders_left = per_window
    remainder_pos = pos
    pos += count * k
    end = pos + count + qsum
    stop = col + count
    c = col
    after_one = pos  # the bit after the last one seen: where the next quotient's zeros start
    largest = np.int64(0)
    for chunk in range(pos, end, UNARY_CHUNK):
        word = peek_window(buf, chunk) & ((np.int64(1) << min(UNARY_CHUNK, end - chunk)) - 1)
        while word != 0:
            if c == stop:  # more ones than samples
                return False
            if remainders_left == 0:
                remainder_pos += per_window * k
                remainders = peek_window(buf, remainder_pos)
                remainders_left = per_window
            one = chunk + trailing_zeros(word, UNARY_CHUNK)
            value = ((one - after_one) << k) | (remainders & remainder_mask)
            remainders >>= k
            remainders_left -= 1
            values[np.uint64(c)] = value
            largest |= value
            after_one = one + 1
            word &= word - 1
            c += 1
    return c == stop and after_one == end and largest >> bits == 0


@device
def group_header_sound(form, width, qsum, count, bits):
    """False for a header no stream may hold (docs/FORMAT.md §7.2 check 3): a packed group with
    quotients, a sparse or bitmap group listing more samples than its count, or the extended table's
    last code (a Rice k past max_rice_k)."""
    if form == FORM_RICE:
        return width <= max_rice_k(bits)
    if form == FORM_PACKED:
        return qsum == 0
    return qsum <= count


@device
def sparse_entry(buf, pos, size, index, count, width):
    """(position, value, sound) of entry index of the sparse group at pos with size entries of width-bit
    values and count samples: sound unless its position is not above the entry before's or not below count."""
    position = read_bits(buf, pos + index * POSITION_BITS, POSITION_BITS)
    previous = np.int64(-1)
    if index > 0:
        previous = read_bits(buf, pos + (index - 1) * POSITION_BITS, POSITION_BITS)
    value = read_bits(buf, pos + size * POSITION_BITS + index * width, width)
    return position, value, previous < position and position < count


@device(cpu_inline=True)
def decode_sparse_group(buf, pos, values, col, count, size, width):
    """Decode a sparse group at pos (size positions, then size values of width bits) into
    values[col:col+count]. False unless its positions rise strictly and lie below count."""
    for c in range(col, col + count):
        values[c] = 0
    for index in range(size):
        position, value, sound = sparse_entry(buf, pos, size, index, count, width)
        if not sound:
            return False
        values[col + position] = value
    return True


BITMAP_CHUNK = 48  # bitmap bits decode_bitmap_group takes per window (<= PEEK_BITS)


@device(cpu_inline=True)
def decode_bitmap_group(buf, pos, values, col, count, size, width):
    """Decode a bitmap group at pos (count bits, then size values of width bits, one per set bit in
    column order) into values[col:col+count]. False unless exactly size bits are set."""
    listed = 0
    values_pos = pos + count
    for chunk in range(0, count, BITMAP_CHUNK):
        word = peek_window(buf, pos + chunk) & ((np.int64(1) << min(BITMAP_CHUNK, count - chunk)) - 1)
        for c in range(col + chunk, col + min(count, chunk + BITMAP_CHUNK)):
            values[c] = 0
        while word != 0:
            if listed == size:  # more set bits than listed values
                return False
            values[col + chunk + trailing_zeros(word, BITMAP_CHUNK)] = read_bits(buf, values_pos + listed * width,
                                                                                  width)
            listed += 1
            word &= word - 1
    return listed == size


@device(cpu_inline=True)
def decode_fast_row_residuals(buf, pos, end_bit, values, width, bits, extended):
    """Decode the mapped residuals of the row at bit pos into values, its group codes from the
    extended table or not; returns (status, bit position after the row)."""
    if pos + 1 > end_bit:
        return STATUS_BAD_SIZE, pos
    if read_bits(buf, pos, 1) == 0:  # every residual 0
        for col in range(width):
            values[col] = 0
        return STATUS_OK, pos + 1
    flag_pos = pos + 1
    groups = groups_per_row(width)
    flagged = 0
    for group in range(groups):
        flagged += read_bits(buf, flag_pos + group, 1)
    header_pos = flag_pos + groups
    size_of_header = header_bits(bits, extended)
    field_mask = (np.int64(1) << code_bits(bits, extended)) - 1
    data_pos = header_pos + flagged * size_of_header
    if data_pos > end_bit:
        return STATUS_BAD_SIZE, pos
    row_end = data_pos
    header = header_pos
    for group in range(groups):
        if read_bits(buf, flag_pos + group, 1) != 0:
            fields = read_bits(buf, header, size_of_header)
            form, group_width = group_form(fields & field_mask, bits, extended)
            qsum = fields >> code_bits(bits, extended)
            count = min(GROUP_SIZE, width - group * GROUP_SIZE)
            if not group_header_sound(form, group_width, qsum, count, bits):
                return STATUS_BAD_HEADER, pos
            row_end += group_data_bits(form, group_width, qsum, count)
            header += size_of_header
    if row_end > end_bit:
        return STATUS_BAD_SIZE, pos
    header = header_pos
    for group in range(groups):
        col = group * GROUP_SIZE
        count = min(GROUP_SIZE, width - col)
        if read_bits(buf, flag_pos + group, 1) == 0:
            for c in range(col, col + count):
                values[c] = 0
            continue
        fields = read_bits(buf, header, size_of_header)
        header += size_of_header
        form, group_width = group_form(fields & field_mask, bits, extended)
        qsum = fields >> code_bits(bits, extended)
        if form == FORM_SPARSE:
            if not decode_sparse_group(buf, data_pos, values, col, count, qsum, group_width):
                return STATUS_CORRUPT, pos
        elif form == FORM_PACKED:
            unpack_samples(buf, data_pos, values, col, count, group_width)
        elif form == FORM_RICE:
            if not decode_rice_group(buf, data_pos, values, col, count, group_width, qsum, bits):
                return STATUS_CORRUPT, pos
        elif not decode_bitmap_group(buf, data_pos, values, col, count, qsum, group_width):
            return STATUS_CORRUPT, pos
        data_pos += group_data_bits(form, group_width, qsum, count)
    return STATUS_OK, row_end


@device
def decode_fast_stream(buf, start, end, tile, bits):
    """Decode a coded fast stream (its kind and size checked) into tile; returns its status."""
    height, width = tile.shape
    residuals = np.zeros(width, np.int64)
    rows = np.zeros((2, PERIOD, (width + PERIOD - 1) // PERIOD), np.int64)  # this row and the one above
    extended = buf[start] == KIND_CODED_EXTENDED
    pos = (start + 1) * 8
    for row in range(height):
        status, pos = decode_fast_row_residuals(buf, pos, end * 8, residuals, width, bits, extended)
        if status != STATUS_OK:
            return status
        current = rows[row & 1]
        unpredict_row(residuals, current, rows[(row & 1) ^ 1], row, width, bits)
        for col in range(width):
            tile[row, col] = current[slot(col)]
    if (pos + 7) // 8 != end:
        return STATUS_BAD_SIZE
    return STATUS_OK


# ---------------------------------------------------------------- encoding


@device
def table_code(form, width, bits, extended):
    """The code of (form, width) in the extended table or the short one (whose sparse values take
    all `bits`, and which has no bitmap code: table_choice never asks it for one)."""
    if extended:
        return extended_code(form, width, bits)
    if form == FORM_SPARSE:
        return SPARSE_CODE
    if form == FORM_PACKED:
        return width
    return bits + 1 + width


@device
def packed_or_rice(mapped, first, count, bits):
    """The cheaper of packing the non-zero group mapped[first:first+count] at the width of its
    largest value and the Rice k whose qsum fits QSUM_BITS (ties to packing, then to the smaller
    k): (form, width, data bits, qsum, the largest value's width, non-zero samples)."""
    largest = 0
    nonzero = 0
    for col in range(first, first + count):
        largest = max(largest, mapped[col])
        nonzero += mapped[col] != 0
    width = bit_length(largest)
    best_form, best_width, best_cost, best_qsum = FORM_PACKED, width, count * width, 0
    for k in range(min(max_rice_k(bits), width - 1) + 1):  # from k = width on, packing is cheaper
        qsum = 0
        for col in range(first, first + count):
            qsum += mapped[col] >> k
        cost = count * (k + 1) + qsum
        if qsum < (1 << QSUM_BITS) and cost < best_cost:
            best_form, best_width, best_cost, best_qsum = FORM_RICE, k, cost, qsum
    return best_form, best_width, best_cost, best_qsum, width, nonzero


@device
def table_choice(form, width, cost, qsum, value_width, nonzero, count, bits, extended):
    """(code, qsum, data bits) in one code table, given packed_or_rice's choice: sparse if cheaper,
    then (extended only) bitmap if cheaper still. Short-table sparse values take all `bits`."""
    if not extended:
        value_width = bits
    if nonzero * (POSITION_BITS + value_width) < cost:
        form, width, cost, qsum = FORM_SPARSE, value_width, nonzero * (POSITION_BITS + value_width), nonzero
    if extended and count + nonzero * value_width < cost:
        form, width, cost, qsum = FORM_BITMAP, value_width, count + nonzero * value_width, nonzero
    return table_code(form, width, bits, extended), qsum, cost


@device
def put_unary(out, writer, quotient):
    """quotient zero bits, then a one bit."""
    while quotient >= 32:
        put_bits(out, writer, 0, 32)
        quotient -= 32
    put_bits(out, writer, np.int64(1) << quotient, quotient + 1)


@device
def fast_row_residuals(tile, row, width, bits, mapped):
    """The row's mapped residuals (prediction as decode_fast_stream's) into mapped."""
    for col in range(width):
        mapped[col] = zigzag(np.int64(tile[row, col]) - predict(tile, row, col, width, bits), bits)


@device
def choose_row_codes(mapped, width, bits, codes, qsums):
    """Each group's code (-1: all zero, no flag) and qsum in both tables (codes[SHORT_TABLE],
    codes[EXTENDED_TABLE], and qsums alike), each the cheapest of its table: packed, Rice, sparse or
    (extended only) bitmap, ties going to packing, then to the smaller k, then to sparse, then to
    bitmap (docs/FORMAT.md §7.5). Returns the row's bits in each table."""
    flagged = 0
    short_data = 0
    extended_data = 0
    groups = groups_per_row(width)
    for group in range(groups):
        first = group * GROUP_SIZE
        count = min(GROUP_SIZE, width - first)
        codes[SHORT_TABLE, group] = -1
        codes[EXTENDED_TABLE, group] = -1
        for col in range(first, first + count):
            if mapped[col] != 0:
                form, group_width, cost, qsum, value_width, nonzero = packed_or_rice(mapped, first, count, bits)
                codes[SHORT_TABLE, group], qsums[SHORT_TABLE, group], data = table_choice(
                    form, group_width, cost, qsum, value_width, nonzero, count, bits, False)
                short_data += data
                codes[EXTENDED_TABLE, group], qsums[EXTENDED_TABLE, group], data = table_choice(
                    form, group_width, cost, qsum, value_width, nonzero, count, bits, True)
                extended_data += data
                flagged += 1
                break
    if flagged == 0:
        return 1, 1
    return (1 + groups + flagged * header_bits(bits, False) + short_data,
            1 + groups + flagged * header_bits(bits, True) + extended_data)


@device
def write_fast_row(mapped, width, bits, out, writer, codes, qsums, extended):
    """Append a row's bits: the any bit, group flags, headers, then each flagged group's data."""
    groups = groups_per_row(width)
    flagged = 0
    for group in range(groups):
        flagged += codes[group] >= 0
    if flagged == 0:
        put_bits(out, writer, 0, 1)
        return
    put_bits(out, writer, 1, 1)
    for group in range(groups):
        put_bits(out, writer, 1 if codes[group] >= 0 else 0, 1)
    for group in range(groups):
        if codes[group] >= 0:
            put_bits(out, writer, codes[group] | (qsums[group] << code_bits(bits, extended)),
                     header_bits(bits, extended))
    for group in range(groups):
        if codes[group] < 0:
            continue
        form, group_width = group_form(codes[group], bits, extended)
        first = group * GROUP_SIZE
        last = min(width, first + GROUP_SIZE)
        if form == FORM_SPARSE or form == FORM_BITMAP:
            for col in range(first, last):
                if form == FORM_BITMAP:
                    put_bits(out, writer, 1 if mapped[col] != 0 else 0, 1)
                elif mapped[col] != 0:
                    put_bits(out, writer, col - first, POSITION_BITS)
            for col in range(first, last):
                if mapped[col] != 0:
                    put_bits(out, writer, mapped[col], group_width)
        elif form == FORM_PACKED:
            for col in range(first, last):
                put_bits(out, writer, mapped[col], group_width)
        else:
            for col in range(first, last):
                put_bits(out, writer, mapped[col] & ((np.int64(1) << group_width) - 1), group_width)
            for col in range(first, last):
                put_unary(out, writer, mapped[col] >> group_width)


@device
def encode_fast_stream(tile, bits, out, start):
    """Encode one tile-channel (2-D view) at out[start:] in the code table that takes fewer bits
    (the extended one, KIND_CODED_EXTENDED, on a tie; else KIND_CODED); returns the stream size (at
    most the raw stream's)."""
    height, width = tile.shape
    raw_size = 1 + (bits // 8) * height * width
    constant = constant_value(tile)
    if constant >= 0:
        return encode_uncoded(tile, bits, out, start, constant)
    groups = groups_per_row(width)
    mapped = np.empty((height, width), np.int64)
    codes = np.empty((height, 2, groups), np.int64)  # [row, SHORT_TABLE or EXTENDED_TABLE, group]
    qsums = np.empty((height, 2, groups), np.int64)
    short_bits = 0
    extended_bits = 0
    for row in range(height):
        fast_row_residuals(tile, row, width, bits, mapped[row])
        row_short, row_extended = choose_row_codes(mapped[row], width, bits, codes[row], qsums[row])
        short_bits += row_short
        extended_bits += row_extended
    table = EXTENDED_TABLE if extended_bits <= short_bits else SHORT_TABLE
    limit = start + raw_size
    if start + 1 + (min(short_bits, extended_bits) + 7) // 8 >= limit:
        return encode_uncoded(tile, bits, out, start, -1)
    writer = np.empty(WRITER_STATE_SIZE, np.int64)
    writer_init(writer, start + 1, limit)
    for row in range(height):
        write_fast_row(mapped[row], width, bits, out, writer, codes[row, table], qsums[row, table],
                       table == EXTENDED_TABLE)
    end = writer_flush(out, writer)
    if end >= limit:
        return encode_uncoded(tile, bits, out, start, -1)
    out[start] = KIND_CODED_EXTENDED if table == EXTENDED_TABLE else KIND_CODED
    return end - start
