"""`compact` mode: MED prediction, adaptive Golomb-Rice with gradient contexts, run mode.

Every row of a tile-channel is its own bitstream with its own adaptive state, reset at
the row start from values the encoder stores in the stream header. So a row needs only
the row above (N, NW) and its own left neighbour (W): a GPU warp decodes a band of 32
rows as a wavefront, lane r at pixel (r, c) on step r + c. A taller tile is decoded band
after band, each band's first row coded as a tile's first row is (no row above), so a
warp never needs the rows of the band before.

A GPU lane decodes with decode_sample, a per-sample step function over a small int64
state array; the CPU decodes a whole row with decode_compact_row, the same steps with
the state in local variables. Both are built from the same pieces (contexts, code words,
runs, adaptation), and the tests hold the two to the same pixels and statuses.
"""

import numpy as np

from .bitio import (
    PEEK_BITS, W_ACC, W_LIMIT, W_NACC, W_POS, WRITER_STATE_SIZE, appended, bit_length, peek_window, put_bits, read_bits,
    trailing_zeros, writer_flush, writer_init,
)
from .format import (
    COMPACT_BAND_ROWS, COMPACT_MAX_TILE_HEIGHT, KIND_CODED, STATUS_BAD_HEADER, STATUS_BAD_KIND, STATUS_BAD_SIZE,
    STATUS_CORRUPT, STATUS_OK,
)
from .jit import device
from .streams import constant_value, encode_uncoded

# Regular contexts quantise local activity: the gradients |W-NW| + |N-NW| plus the mean
# mapped residual of W and N (lane r-1 hands N's residual over with N's value).
ACTIVITY_THRESHOLDS = np.array([1, 3, 6, 10, 16, 26, 44], dtype=np.int64)  # 8-bit; scaled by 2**(bits-8)
REGULAR_CONTEXTS = len(ACTIVITY_THRESHOLDS) + 1
# the thresholds below each (shifted) activity, so a context is one table read
CONTEXT_OF_ACTIVITY = np.array([np.sum(ACTIVITY_THRESHOLDS < v) for v in range(ACTIVITY_THRESHOLDS[-1] + 2)],
                               dtype=np.int64)
INTERRUPT_CONTEXT = REGULAR_CONTEXTS  # the sample that ends a run has its own adaptive state
CONTEXTS = REGULAR_CONTEXTS + 1
UNARY_LIMIT = 12  # a quotient this large is an escape: the mapped residual follows raw
RESET_COUNT = 64  # halve the adaptive sums when the count reaches 64 (counts start at 1)
ADAPT_CAP_SHIFT = 4
INITIAL_COUNT = 1
MAX_K = 15  # initial k is stored in a nibble
RUN_INDEX_MAX = 31
# JPEG-LS run-length order table (ITU-T T.87, A.7.1.2)
RUN_ORDER = np.array(
    [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    dtype=np.int64,
)

# Stream header of a coded compact stream, after the kind byte.
K_NIBBLE_BYTES = (CONTEXTS + 1) // 2
HEADER_BYTES = 3 + K_NIBBLE_BYTES  # kind, run index, initial k per context in nibbles, row-length bit width
MAX_LENGTH_TABLE_BYTES = (COMPACT_MAX_TILE_HEIGHT * 31 + 7) // 8
MAX_PREFIX_BYTES = HEADER_BYTES + MAX_LENGTH_TABLE_BYTES

# Decoder state: an int64 array.
S_POS = 0  # bit position in the file
S_RUN_LEFT = 1  # samples still to emit from the current run
S_RUN_VALUE = 2
S_INTERRUPT = 3  # the sample after the run is an interruption sample
S_RUN_INDEX = 4
S_MAPPED = 5  # mapped residual of the last sample (0 in runs): W's residual for the next one
S_ERROR = 6  # set when the row's bits are impossible; the row is then reported corrupt
S_A = 7  # adaptive sums of mapped residuals, one per context
S_N = S_A + CONTEXTS  # adaptive counts, one per context
STATE_SIZE = S_N + CONTEXTS


@device(cpu_inline=True)
def med(w, n, nw):
    """LOCO-I median edge detector: min(w, n) if nw >= max(w, n), max(w, n) if nw <= min(w, n),
    else w + n - nw. As a clamp it has no branches, which noisy images would mispredict."""
    return min(max(w + n - nw, min(w, n)), max(w, n))


@device(cpu_inline=True)
def neighbours(row, col, left, left2, up, upleft, half):
    """(W, N, NW) of a tile sample, with the edge rules of docs/FORMAT.md.

    row 0 has no row above: N = W and NW = WW (pixel two to the left; W at column 1);
    column 0 takes its W and NW from N; the first sample sees all three as half.
    """
    if row == 0:
        if col == 0:
            return half, half, half
        if col == 1:
            return left, left, left
        return left, left, left2
    if col == 0:
        return up, up, up
    return left, up, upleft


@device(cpu_inline=True)
def tile_neighbours(tile, row, col, half):
    """(W, N, NW) of tile[row, col], read from the tile plane itself (a GPU lane reads them from its ring)."""
    left = np.int64(tile[row, col - 1]) if col > 0 else half
    left2 = np.int64(tile[row, col - 2]) if col > 1 else half
    up = np.int64(tile[row - 1, col]) if row > 0 else half
    upleft = np.int64(tile[row - 1, col - 1]) if row > 0 and col > 0 else half
    return neighbours(row, col, left, left2, up, upleft, half)


@device(cpu_inline=True)
def activity_context(w, n, nw, mapped_n, mapped_w, bits):
    activity = ((abs(w - nw) + abs(n - nw)) >> 1) + mapped_n + mapped_w
    # activity > t << shift exactly when ((activity - 1) >> shift) + 1 > t
    return CONTEXT_OF_ACTIVITY[np.uint64(min(((activity - 1) >> (bits - 8)) + 1, CONTEXT_OF_ACTIVITY.shape[0] - 1))]


@device(cpu_inline=True)
def zigzag(residual, bits):
    """Wrap residual into the signed range of `bits` and map it to 0, -1, 1, -2, ..."""
    half = np.int64(1) << (bits - 1)
    e = ((residual + half) & ((np.int64(1) << bits) - 1)) - half
    if e >= 0:
        return 2 * e
    return -2 * e - 1


@device(cpu_inline=True)
def unzigzag(mapped):
    """0, 1, 2, 3, ... -> 0, -1, 1, -2, ... (without a branch on the sign)."""
    return (mapped >> 1) ^ -(mapped & 1)


@device(cpu_inline=True)
def rice_parameter(a, n, bits):
    k = 0
    while k < bits and (n << (k + 1)) < a:
        k += 1
    return k


@device(cpu_inline=True)
def adapted(a, n, mapped, k):
    """A context's sum and count after one more mapped residual; one outlier (an edge in a label
    map) counts as at most 2**(k+4)."""
    a += min(mapped, np.int64(1) << (k + ADAPT_CAP_SHIFT))
    n += 1
    if n == RESET_COUNT:
        a >>= 1
        n >>= 1
    return a, n


@device(cpu_inline=True)
def adapt(state, ctx, mapped, k):
    state[S_A + ctx], state[S_N + ctx] = adapted(state[S_A + ctx], state[S_N + ctx], mapped, k)


@device(cpu_inline=True)
def initial_sum(k_nibbles, ctx):
    """A mean mapped residual of 1.5 * 2**k, mid-range for the context's k, weighted as INITIAL_COUNT
    samples."""
    return (3 * INITIAL_COUNT << ((k_nibbles >> (4 * ctx)) & 15)) >> 1


@device
def row_state_init(state, bit_pos, k_nibbles, run_index):
    state[S_POS] = bit_pos
    state[S_RUN_LEFT] = 0
    state[S_RUN_VALUE] = 0
    state[S_INTERRUPT] = 0
    state[S_RUN_INDEX] = run_index
    state[S_MAPPED] = 0
    state[S_ERROR] = 0
    for ctx in range(CONTEXTS):
        state[S_A + ctx] = initial_sum(k_nibbles, ctx)
        state[S_N + ctx] = INITIAL_COUNT


@device(cpu_inline=True)
def decode_code(buf, pos, k, bits):
    """One Golomb-Rice (or escaped) code word at bit pos: (mapped residual, bit position after it)."""
    window = peek_window(buf, pos)
    q = trailing_zeros(window, UNARY_LIMIT)
    # the whole code word fits the 49-bit window: q + 1 + k <= 29, UNARY_LIMIT + bits <= 28
    if q < UNARY_LIMIT:
        return (np.int64(q) << k) | ((window >> (q + 1)) & ((np.int64(1) << k) - 1)), pos + q + 1 + k
    return (window >> UNARY_LIMIT) & ((np.int64(1) << bits) - 1), pos + UNARY_LIMIT + bits


@device
def decode_mapped(buf, state, ctx, bits):
    """One mapped residual in context ctx, then adapt the context."""
    k = rice_parameter(state[S_A + ctx], state[S_N + ctx], bits)
    mapped, state[S_POS] = decode_code(buf, state[S_POS], k, bits)
    adapt(state, ctx, mapped, k)
    state[S_MAPPED] = mapped
    return mapped


@device(cpu_inline=True)
def decode_run(buf, pos, index, remaining):
    """A run starting at a sample with `remaining` samples left in its row: (length, bit position
    after it, run index after it, error). A length of `remaining` ends the row; a shorter run is
    followed by its interruption sample. A run past the row end is an error (cut to remaining - 1).
    The run's bits are read from one window, peeked again only when it runs short."""
    run = 0
    window = peek_window(buf, pos)
    used = 0  # bits of window consumed: it holds at least PEEK_BITS - used more
    while True:
        order = RUN_ORDER[index]
        if used + 1 + order > PEEK_BITS:
            window = peek_window(buf, pos)
            used = 0
        if window & 1:
            window >>= 1
            used += 1
            pos += 1
            chunk = np.int64(1) << order
            if chunk >= remaining - run:
                if chunk == remaining - run and index < RUN_INDEX_MAX:
                    index += 1
                return remaining, pos, index, 0
            run += chunk
            if index < RUN_INDEX_MAX:
                index += 1
        else:
            run += (window >> 1) & ((np.int64(1) << order) - 1)
            pos += 1 + order
            error = 0
            if run > remaining - 1:
                run = remaining - 1
                error = 1
            if index > 0:
                index -= 1
            return run, pos, index, error


@device
def decode_run_length(buf, state, remaining):
    """Length of a run starting at this sample; `remaining` samples are left in the row."""
    run, pos, state[S_RUN_INDEX], error = decode_run(buf, state[S_POS], state[S_RUN_INDEX], remaining)
    state[S_POS] = pos
    if error:
        state[S_ERROR] = 1
    if run < remaining:
        state[S_INTERRUPT] = 1
    return run


@device
def decode_interruption(buf, state, w, n, bits):
    """The sample that ends a run: predicted from N, or from W when N == W (then it cannot equal W)."""
    mapped = decode_mapped(buf, state, INTERRUPT_CONTEXT, bits)
    if n == w:
        mapped += 1
    return (n + unzigzag(mapped)) & ((np.int64(1) << bits) - 1)


@device
def decode_sample(buf, state, w, n, nw, mapped_n, remaining, bits):
    """Decode the next sample of a row, given its neighbours, N's mapped residual and the
    samples left in the row. Afterwards state[S_MAPPED] holds this sample's mapped residual."""
    if state[S_RUN_LEFT] > 0:
        state[S_RUN_LEFT] -= 1
        state[S_MAPPED] = 0
        return state[S_RUN_VALUE]
    if state[S_INTERRUPT]:
        state[S_INTERRUPT] = 0
        return decode_interruption(buf, state, w, n, bits)
    if w == n and n == nw:
        run = decode_run_length(buf, state, remaining)
        if run > 0:
            state[S_RUN_VALUE] = w
            state[S_RUN_LEFT] = run - 1
            state[S_MAPPED] = 0
            return w
        state[S_INTERRUPT] = 0
        return decode_interruption(buf, state, w, n, bits)
    ctx = activity_context(w, n, nw, mapped_n, state[S_MAPPED], bits)
    mapped = decode_mapped(buf, state, ctx, bits)
    return (med(w, n, nw) + unzigzag(mapped)) & ((np.int64(1) << bits) - 1)


@device
def decode_compact_row(buf, pos, tile, row, width, bits, k_nibbles, run_index, sums, counts, mapped_rows):
    """Decode one coded row of a tile plane (2-D view) from bit pos: the CPU's form of decode_sample,
    which a GPU lane steps through one sample at a time, with the state in local variables (sums and
    counts: scratch for the contexts' adaptive state) and W and WW carried along the row rather than
    read back. mapped_rows as for compact_row_events.
    Returns (bit position after the row, error); a row with an error is corrupt whatever follows."""
    half = np.int64(1) << (bits - 1)
    mask = (np.int64(1) << bits) - 1
    here = tile[row]
    above = tile[row - 1] if row > 0 else here  # read only when row > 0
    mapped_here = mapped_rows[row % 2]
    mapped_above = mapped_rows[(row + 1) % 2]
    for ctx in range(CONTEXTS):
        sums[ctx] = initial_sum(k_nibbles, ctx)
        counts[ctx] = INITIAL_COUNT
    left = half  # here[col - 1] once col > 0
    left2 = half  # here[col - 2] once col > 1
    mapped_w = np.int64(0)
    interrupt = False
    col = 0
    while col < width:
        up = np.int64(above[np.uint64(col)]) if row > 0 else half
        upleft = np.int64(above[np.uint64(col - 1)]) if row > 0 and col > 0 else half
        w, n, nw = neighbours(row, col, left, left2, up, upleft, half)
        if not interrupt and w == n and n == nw:
            run, pos, run_index, error = decode_run(buf, pos, run_index, width - col)
            if error:
                return pos, 1
            for i in range(col, col + run):
                here[np.uint64(i)] = w
                mapped_here[np.uint64(i)] = 0
            col += run
            mapped_w = 0
            interrupt = True
            # a run starts where W (if any) already equals its value, so W and WW are the run's
            left = w
            left2 = w
            if run > 0:
                continue  # the interruption sample sees the run in its neighbours
        ctx = INTERRUPT_CONTEXT if interrupt else activity_context(
            w, n, nw, mapped_above[np.uint64(col)] if row > 0 else 0, mapped_w, bits)
        context = np.uint64(ctx)  # unsigned indices: no negative-index wrap (as every one below)
        k = rice_parameter(sums[context], counts[context], bits)
        mapped, pos = decode_code(buf, pos, k, bits)
        sums[context], counts[context] = adapted(sums[context], counts[context], mapped, k)
        if interrupt:
            value = n + unzigzag(mapped + (1 if n == w else 0))
        else:
            value = med(w, n, nw) + unzigzag(mapped)
        interrupt = False
        value &= mask
        here[np.uint64(col)] = value
        mapped_here[np.uint64(col)] = mapped
        mapped_w = mapped
        left2 = left
        left = value
        col += 1
    return pos, 0


@device
def compact_stream_layout(buf, start, end, height):
    """Parse a coded compact stream's header: (status, run index, k nibbles, row-length bits,
    bit position of the row-length table, bit position of row 0)."""
    if end - start < HEADER_BYTES:
        return STATUS_BAD_SIZE, 0, 0, 0, 0, 0
    run_index = np.int64(buf[start + 1])
    k_nibbles = np.int64(0)
    for i in range(K_NIBBLE_BYTES):
        k_nibbles |= np.int64(buf[start + 2 + i]) << (8 * i)
    length_bits = np.int64(buf[start + 2 + K_NIBBLE_BYTES])
    if run_index > RUN_INDEX_MAX or length_bits > 31 or k_nibbles >> (4 * CONTEXTS) != 0:
        return STATUS_BAD_HEADER, 0, 0, 0, 0, 0
    table_pos = (start + HEADER_BYTES) * 8
    data_pos = (start + HEADER_BYTES + (height * length_bits + 7) // 8) * 8
    if data_pos > end * 8:
        return STATUS_BAD_SIZE, 0, 0, 0, 0, 0
    return STATUS_OK, run_index, k_nibbles, length_bits, table_pos, data_pos


@device
def compact_row_length(buf, table_pos, length_bits, row):
    """Bits of row `row`; zero means the row repeats the row above."""
    return read_bits(buf, table_pos + row * length_bits, length_bits)


# ---------------------------------------------------------------- encoder (CPU only)


@device(cpu_inline=True)
def appended_code(out, pos, acc, nacc, limit, mapped, k, bits):
    """The writer after one Golomb-Rice code word (decode_code's): the quotient in unary, a one,
    k remainder bits; or, for a quotient of UNARY_LIMIT or more, UNARY_LIMIT zeros and the mapped
    residual raw. At most 28 bits, so one append."""
    q = mapped >> k
    if q < UNARY_LIMIT:
        return appended(out, pos, acc, nacc, limit, (np.int64(1) << q) | ((mapped & ((np.int64(1) << k) - 1)) << (q + 1)),
                        q + 1 + k)
    return appended(out, pos, acc, nacc, limit, mapped << UNARY_LIMIT, UNARY_LIMIT + bits)


@device(cpu_inline=True)
def appended_run(out, pos, acc, nacc, limit, run, end_of_row, index):
    """The writer and run index after a run (decode_run's bits): a one per whole chunk of
    2**RUN_ORDER[index], then a one if a run to the row's end has samples left, or a zero and the
    rest in RUN_ORDER[index] bits."""
    while run >= (np.int64(1) << RUN_ORDER[index]):
        pos, acc, nacc = appended(out, pos, acc, nacc, limit, 1, 1)
        run -= np.int64(1) << RUN_ORDER[index]
        if index < RUN_INDEX_MAX:
            index += 1
    if end_of_row:
        if run > 0:
            pos, acc, nacc = appended(out, pos, acc, nacc, limit, 1, 1)
    else:
        pos, acc, nacc = appended(out, pos, acc, nacc, limit, run << 1, 1 + RUN_ORDER[index])
        if index > 0:
            index -= 1
    return pos, acc, nacc, index


@device
def run_length_cost(run, end_of_row, index):
    """Bits appended_run would write, and the run index after; for choosing the initial index."""
    cost = 0
    while run >= (np.int64(1) << RUN_ORDER[index]):
        cost += 1
        run -= np.int64(1) << RUN_ORDER[index]
        if index < RUN_INDEX_MAX:
            index += 1
    if end_of_row:
        if run > 0:
            cost += 1
    else:
        cost += 1 + RUN_ORDER[index]
        if index > 0:
            index -= 1
    return cost, index


RUN_EVENT = -1  # in a row's events, the context of a run (its value: 2 * length + ends the row)


@device
def compact_row_events(tile, row, width, bits, mapped_rows, contexts, values, count):
    """One row of a tile plane (2-D view) as the encoder's events, walked as decode_compact_row
    walks it, appended at contexts/values[count:] (at most 2 * width + 1 of them); returns the new
    count. A coded sample is (its context, its mapped residual); a run is (RUN_EVENT, 2 * length +
    1 if it ends the row). mapped_rows[row % 2] receives the row's mapped residuals,
    mapped_rows[(row + 1) % 2] holds the row above's. The events depend on the pixels alone: the
    encoder measures them, then writes them."""
    half = np.int64(1) << (bits - 1)
    here = tile[row]
    above = tile[row - 1] if row > 0 else here  # read only when row > 0
    mapped_here = mapped_rows[row % 2]
    mapped_above = mapped_rows[(row + 1) % 2]
    left = half  # here[col - 1] once col > 0
    left2 = half  # here[col - 2] once col > 1
    mapped_w = np.int64(0)
    interrupt = False
    col = 0
    while col < width:
        up = np.int64(above[np.uint64(col)]) if row > 0 else half
        upleft = np.int64(above[np.uint64(col - 1)]) if row > 0 and col > 0 else half
        w, n, nw = neighbours(row, col, left, left2, up, upleft, half)
        if not interrupt and w == n and n == nw:
            run = 0
            while col + run < width and here[np.uint64(col + run)] == w:
                run += 1
            end_of_row = col + run == width
            contexts[count] = RUN_EVENT
            values[count] = 2 * run + (1 if end_of_row else 0)
            count += 1
            for i in range(col, col + run):
                mapped_here[np.uint64(i)] = 0
            col += run
            if end_of_row:
                break
            mapped_w = 0
            interrupt = True
            left = w  # as in decode_compact_row: the run's value is W and WW of what follows
            left2 = w
            if run > 0:
                continue  # the interruption sample sees the run in its neighbours
        x = np.int64(here[np.uint64(col)])
        if interrupt:
            ctx = INTERRUPT_CONTEXT
            mapped = zigzag(x - n, bits) - (1 if n == w else 0)
        else:
            ctx = activity_context(w, n, nw, mapped_above[np.uint64(col)] if row > 0 else 0, mapped_w, bits)
            mapped = zigzag(x - med(w, n, nw), bits)
        interrupt = False
        contexts[count] = ctx
        values[count] = mapped
        count += 1
        mapped_here[np.uint64(col)] = mapped
        mapped_w = mapped
        left2 = left
        left = x
        col += 1
    return count


@device
def measure_events(contexts, values, first, stop, stats, runs, run_count):
    """Events [first, stop): each context's sum and count into stats[ctx] and stats[CONTEXTS + ctx]
    (for the initial k), each run's value into runs[run_count:] (for the run index); returns the
    new run_count."""
    for i in range(first, stop):
        ctx = contexts[i]
        if ctx == RUN_EVENT:
            runs[run_count] = values[i]
            run_count += 1
        else:
            stats[ctx] += values[i]
            stats[CONTEXTS + ctx] += 1
    return run_count


@device
def write_row_events(contexts, values, first, stop, bits, out, writer, k_nibbles, run_index, sums, counts):
    """One row's events [first, stop) as code words appended to the writer, in decode_compact_row's
    form: the contexts start from k_nibbles and the run index from run_index, as every row's do
    (sums and counts: scratch)."""
    for ctx in range(CONTEXTS):
        sums[ctx] = initial_sum(k_nibbles, ctx)
        counts[ctx] = INITIAL_COUNT
    pos, acc, nacc, limit = writer[W_POS], writer[W_ACC], writer[W_NACC], writer[W_LIMIT]
    for i in range(first, stop):
        ctx = contexts[i]
        if ctx == RUN_EVENT:
            pos, acc, nacc, run_index = appended_run(out, pos, acc, nacc, limit, values[i] >> 1, values[i] & 1,
                                                     run_index)
        else:
            context = np.uint64(ctx)
            k = rice_parameter(sums[context], counts[context], bits)
            pos, acc, nacc = appended_code(out, pos, acc, nacc, limit, values[i], k, bits)
            sums[context], counts[context] = adapted(sums[context], counts[context], values[i], k)
    writer[W_POS], writer[W_ACC], writer[W_NACC] = pos, acc, nacc


@device
def best_run_index(runs, row_run_starts, rows):
    """The initial run index that codes this tile's runs in the fewest bits (the smallest such index).
    Each row starts from it afresh. Within a row, the trajectories from all start indices are
    followed until they meet (every run that stops short of its chunk lowers the index by one, down
    to 0, so they often do); from there on one trajectory serves all."""
    costs = np.zeros(RUN_INDEX_MAX + 1, np.int64)
    indices = np.empty(RUN_INDEX_MAX + 1, np.int64)
    for row in range(rows):
        i, stop = row_run_starts[row], row_run_starts[row + 1]
        for start in range(RUN_INDEX_MAX + 1):
            indices[start] = start
        met = False
        while i < stop and not met:
            met = True
            for start in range(RUN_INDEX_MAX + 1):
                bits_used, indices[start] = run_length_cost(runs[i] >> 1, runs[i] & 1, indices[start])
                costs[start] += bits_used
                met &= indices[start] == indices[0]
            i += 1
        index = indices[0]
        shared = 0
        for j in range(i, stop):
            bits_used, index = run_length_cost(runs[j] >> 1, runs[j] & 1, index)
            shared += bits_used
        for start in range(RUN_INDEX_MAX + 1):
            costs[start] += shared
    best_index = 0
    for start in range(RUN_INDEX_MAX + 1):
        if costs[start] < costs[best_index]:
            best_index = start
    return best_index


@device
def initial_k_nibbles(stats, bits):
    nibbles = 0
    for ctx in range(CONTEXTS):
        k = 0
        if stats[CONTEXTS + ctx] > 0:
            k = min(rice_parameter(stats[ctx], stats[CONTEXTS + ctx], bits), MAX_K)
        nibbles |= k << (4 * ctx)
    return nibbles



@device
def repeats_row_above(tile, row):
    if row == 0:
        return False
    for col in range(tile.shape[1]):
        if tile[row, col] != tile[row - 1, col]:
            return False
    return True


@device
def encode_compact_stream(tile, bits, out, start):
    """Encode one tile-channel (2-D view) at out[start:]; returns the stream size. Needs
    MAX_PREFIX_BYTES + the raw stream's size of room: the rows are written after room for the
    largest prefix, then moved down."""
    height, width = tile.shape
    raw_size = 1 + (bits // 8) * height * width
    constant = constant_value(tile)
    if constant >= 0:
        return encode_uncoded(tile, bits, out, start, constant)
    sums = np.empty(CONTEXTS, np.int64)
    counts = np.empty(CONTEXTS, np.int64)
    writer = np.empty(WRITER_STATE_SIZE, np.int64)
    stats = np.zeros(2 * CONTEXTS, np.int64)
    runs = np.empty(height * width + 1, np.int64)
    mapped_rows = np.zeros((2, width), np.int64)
    # The tile's events, row by row (a row that repeats the one above has none), walked once.
    contexts = np.empty(height * (2 * width + 1), np.int64)
    values = np.empty(height * (2 * width + 1), np.int64)
    row_events = np.zeros(height + 1, np.int64)
    repeats = np.zeros(height, np.bool_)
    for row in range(height):
        band_row = row % COMPACT_BAND_ROWS  # rows from the band's start: its first has no row above
        band = tile[row - band_row:]
        repeats[row] = repeats_row_above(band, band_row)
        if repeats[row]:
            mapped_rows[band_row % 2, :] = 0
            row_events[row + 1] = row_events[row]
        else:
            row_events[row + 1] = compact_row_events(band, band_row, width, bits, mapped_rows, contexts, values,
                                                     row_events[row])
    # Measured: the initial k of each context and the run index.
    row_run_starts = np.zeros(height + 1, np.int64)
    for row in range(height):
        row_run_starts[row + 1] = measure_events(contexts, values, row_events[row], row_events[row + 1], stats,
                                                 runs, row_run_starts[row])
    k_nibbles = initial_k_nibbles(stats, bits)
    run_index = best_run_index(runs, row_run_starts, height)
    # Written: the rows after room for the largest prefix, then moved down.
    data_start = start + MAX_PREFIX_BYTES
    limit = start + MAX_PREFIX_BYTES + raw_size
    writer_init(writer, data_start, limit)
    row_ends = np.empty(height + 1, np.int64)
    row_ends[0] = data_start * 8
    longest = 0
    for row in range(height):
        if not repeats[row]:  # a zero row length says "copy the row above"
            write_row_events(contexts, values, row_events[row], row_events[row + 1], bits, out, writer, k_nibbles,
                             run_index, sums, counts)
        row_ends[row + 1] = writer[W_POS] * 8 + writer[W_NACC]
        longest = max(longest, row_ends[row + 1] - row_ends[row])
        if writer[W_POS] >= limit:
            return encode_uncoded(tile, bits, out, start, -1)
    data_end = writer_flush(out, writer)
    length_bits = bit_length(longest)
    prefix = HEADER_BYTES + (height * length_bits + 7) // 8
    size = prefix + data_end - data_start
    if data_end > limit or size >= raw_size:
        return encode_uncoded(tile, bits, out, start, -1)
    for i in range(data_end - data_start):
        out[start + prefix + i] = out[data_start + i]
    out[start] = KIND_CODED
    out[start + 1] = run_index
    for i in range(K_NIBBLE_BYTES):
        out[start + 2 + i] = (k_nibbles >> (8 * i)) & 255
    out[start + 2 + K_NIBBLE_BYTES] = length_bits
    writer_init(writer, start + HEADER_BYTES, start + prefix)
    for row in range(height):
        put_bits(out, writer, row_ends[row + 1] - row_ends[row], length_bits)
    writer_flush(out, writer)
    return size


@device
def decode_compact_stream(buf, start, end, tile, bits):
    """Decode a coded compact stream (its kind and size checked) into tile, row by row; returns its status."""
    height, width = tile.shape
    if buf[start] != KIND_CODED:  # fast mode's extended kind
        return STATUS_BAD_KIND
    status, run_index, k_nibbles, length_bits, table_pos, pos = compact_stream_layout(buf, start, end, height)
    if status != STATUS_OK:
        return status
    sums = np.empty(CONTEXTS, np.int64)
    counts = np.empty(CONTEXTS, np.int64)
    mapped_rows = np.zeros((2, width), np.int64)
    for row in range(height):
        row_end = pos + compact_row_length(buf, table_pos, length_bits, row)
        if row_end > end * 8:
            return STATUS_BAD_SIZE
        band_row = row % COMPACT_BAND_ROWS  # rows from the band's start: its first has no row above
        if row_end == pos:  # a coded row takes at least one bit: zero means "copy the row above"
            if band_row == 0:
                return STATUS_CORRUPT
            for col in range(width):
                tile[row, col] = tile[row - 1, col]
                mapped_rows[band_row % 2, col] = 0
            continue
        pos, error = decode_compact_row(buf, pos, tile[row - band_row:], band_row, width, bits, k_nibbles, run_index,
                                        sums, counts, mapped_rows)
        if pos != row_end or error:
            return STATUS_CORRUPT
    if (pos + 7) // 8 != end:
        return STATUS_BAD_SIZE
    return STATUS_OK
