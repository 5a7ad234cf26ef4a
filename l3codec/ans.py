"""compact v2 (issue #39, format 10's stream kind 10): a static-table rANS coder for compact's MED residuals.

Single-source row functions, as compact.py's: plain Python (the reference, and what runs under
NUMBA_DISABLE_JIT=1) compiled by ans_cpu.py with numba.njit and, later, numba.cuda.jit(device=True).
docs/FORMAT.md §6.5-§6.10 is the bitstream (ans_stream.py frames it); bench/results/compact-v2-model.md the
measurements behind it.

- A sample's residual (compact's MED prediction and neighbour rules, optionally less a static bias per
  gradient context) is zigzagged to m and split the JPEG XL way into a token and raw low bits
  (hybrid_token): tokens below 2^SPLIT_EXPONENT are m itself, larger m send their bit length and
  MANTISSA_BITS bits below the top bit as the token, the rest raw.
- Each token is coded with a static table chosen by the sample's activity |W-NW| + |N-NW| in
  ANS_CONTEXTS bins. Tables are quantised to 2^precision (every used token >= 1).
- One rANS state per row stream: 32-bit state, 16-bit words, L = 2^16. The encoder walks the row backwards
  from state 0 and writes backwards; its final state leads the stream in the fewest bytes that hold it
  (the decoder takes the count from the stream's length: <= 2 bytes all state, else odd 3, even 4), then
  the words in the order the decoder reads them. The decoder reads a word whenever its state is below L
  and words remain, and must end on state 0 with no word left. Starting at 0 lets the first ~16 bits of
  the row ride in the state instead of in words, and the short flush saves most of what is left of the
  4-byte final state (bench/compact_v2_model.py --study flush: -1.7% of the file at 512-wide tiles).
"""

import numpy as np

from .bitio import bit_length, put_bits, read_bits
from .compact import med, neighbours, unzigzag, zigzag
from .format import COMPACT_BAND_ROWS
from .jit import device

ANS_LOW = 1 << 16  # L: the decoder's state is at least L while words remain
ANS_WORD_BITS = 16
ANS_MAX_PRECISION = 12  # slot entries pack a frequency of up to 2^12 in 13 bits and an offset in 12
ANS_MIN_PRECISION = 6  # room for every token of a 16-bit plane (40) at frequency >= 1
SPLIT_EXPONENT = 4  # hybrid tokens: m < 2^4 is its own token
MANTISSA_BITS = 1  # bits below m's top bit carried in its token
NO_TOKEN = 63  # a slot entry of a context that codes no token
ACTIVITY_EDGES = (1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 60, 90, 140, 220)  # 8-bit
ANS_CONTEXTS = len(ACTIVITY_EDGES) + 1
# the table context of each activity(): the number of edges at or below it
ANS_CONTEXT_OF_ACTIVITY = np.array(
    [np.sum(np.array(ACTIVITY_EDGES) <= a) for a in range(ACTIVITY_EDGES[-1] + 1)], dtype=np.int32
)
GRADIENT_CONTEXTS = 41  # sign-folded q9(N-NW) * 9 + q9(NW-W), as JPEG-LS
GRADIENT_EDGES = (3, 7, 21)  # 8-bit; scaled by 2^(bits-8)
TABLE_GROUP_ROWS = 256  # rows of a plane that share one set of tables
SIGNED_BIAS_ENTRIES = 2 * GRADIENT_CONTEXTS - 1  # the CPU decoder's bias by signed gradient context -40..40

ANS_OK = 0
ANS_BAD_STATE = 1
ANS_BAD_TABLE = 2
ANS_BAD_TOKEN = 3
ANS_ENDS_EARLY = 4
ANS_ENDS_LATE = 5
ANS_MESSAGES = {
    ANS_BAD_STATE: "rANS final state not in the fewest bytes that hold it (a state out of range)",
    ANS_BAD_TABLE: "rANS table does not sum to its precision, or is cut short",
    ANS_BAD_TOKEN: "a token past the table's alphabet (or in a context that codes none)",
    ANS_ENDS_EARLY: "row stream ran out of words before its state returned to 0",
    ANS_ENDS_LATE: "row stream has words left after its last sample",
}


@device
def token_count(bits):
    """Tokens a plane of `bits`-bit samples can use: 24 for 8 bits, 40 for 16."""
    return (1 << SPLIT_EXPONENT) + ((bits - SPLIT_EXPONENT) << MANTISSA_BITS)


@device
def hybrid_token(m):
    """(token, raw bit count, raw bits) of a zigzagged residual m."""
    if m < (1 << SPLIT_EXPONENT):
        return m, 0, 0
    top = bit_length(m) - 1
    raw_bits = top - MANTISSA_BITS
    token = (
        (1 << SPLIT_EXPONENT)
        + ((top - SPLIT_EXPONENT) << MANTISSA_BITS)
        + ((m >> raw_bits) & ((1 << MANTISSA_BITS) - 1))
    )
    return token, raw_bits, m & ((np.int64(1) << raw_bits) - 1)


@device
def token_raw_bits(token):
    if token < (1 << SPLIT_EXPONENT):
        return 0
    return ((token - (1 << SPLIT_EXPONENT)) >> MANTISSA_BITS) + SPLIT_EXPONENT - MANTISSA_BITS


@device
def hybrid_value(token, raw):
    """m from its token and raw bits (hybrid_token's inverse)."""
    if token < (1 << SPLIT_EXPONENT):
        return np.int64(token)
    mantissa = (1 << MANTISSA_BITS) | ((token - (1 << SPLIT_EXPONENT)) & ((1 << MANTISSA_BITS) - 1))
    return (np.int64(mantissa) << token_raw_bits(token)) | raw


@device
def at(i):
    """i (never negative) as an array index that numba's CPU code does not test for < 0 (the wraparound of
    a signed index: 3-6 instructions)."""
    return np.uint64(i)


@device
def activity(w, n, nw, bits):
    """|W-NW| + |N-NW| scaled to 8 bits and capped at the last edge: an index into ANS_CONTEXT_OF_ACTIVITY,
    which the encoder's row_symbols takes as an argument (a helper reading a global array costs numba's CPU
    code reference counts per sample, see coded_residual)."""
    return min((abs(w - nw) + abs(n - nw)) >> (bits - 8), ACTIVITY_EDGES[-1])


# ANS_CONTEXT_OF_ACTIVITY of every activity before its cap (0..511 at 8 and 16 bits)
CONTEXT_OF_UNCAPPED_ACTIVITY = ANS_CONTEXT_OF_ACTIVITY[np.minimum(np.arange(512), ACTIVITY_EDGES[-1])]


@device
def decoder_context(w, n, nw, bits):
    """ANS_CONTEXT_OF_ACTIVITY[activity()] in one lookup: the cap's compare and move are off the chain from
    W to the slot load (the CPU decoder 7% faster). Reads a global array, as only the decoder calls it,
    compiled without numba's runtime."""
    return CONTEXT_OF_UNCAPPED_ACTIVITY[at((abs(w - nw) + abs(n - nw)) >> (bits - 8))]


@device
def gradient_step(g, bits):
    """JPEG-LS's 9-level quantiser of a gradient: -4..4. Without branches (gradients are unpredictable) and
    with GRADIENT_EDGES a tuple: a global array read in an inlined helper costs reference counts."""
    a = abs(g)
    shift = bits - 8
    q = (
        np.int64(a > 0)
        + np.int64(a >= (GRADIENT_EDGES[0] << shift))
        + np.int64(a >= (GRADIENT_EDGES[1] << shift))
        + np.int64(a >= (GRADIENT_EDGES[2] << shift))
    )
    negative = g >> 63  # -1 or 0
    return (q ^ negative) - negative


@device
def gradient_context(w, n, nw, bits):
    """Signed gradient context -40..40; its magnitude picks the bias, its sign flips it."""
    return gradient_step(n - nw, bits) * 9 + gradient_step(nw - w, bits)


# signed_gradient_index's two halves at 8 bits, for every difference -255..255 (at d + 255): gradient_step * 9
# + GRADIENT_CONTEXTS - 1 of N - NW and gradient_step of NW - W
ROW_GRADIENT_INDEX_8 = np.array(
    [gradient_step(np.int64(d), 8) * 9 + GRADIENT_CONTEXTS - 1 for d in range(-255, 256)], np.int64
)
COLUMN_GRADIENT_INDEX_8 = np.array([gradient_step(np.int64(d), 8) for d in range(-255, 256)], np.int64)


@device
def signed_gradient_index(w, n, nw, bits):
    """gradient_context + GRADIENT_CONTEXTS - 1 (0..80): where a sample's bias is in a signed bias table
    (signed_bias_table). At 8 bits one lookup per gradient, in tables of every difference: a sixth of
    gradient_context's instructions, which are a large part of a biased sample's decoding (the CPU decoder
    10% faster than with the differences clamped to +-GRADIENT_EDGES[-1] in a 43-entry table)."""
    if bits == 8:
        return ROW_GRADIENT_INDEX_8[at(n - nw + 255)] + COLUMN_GRADIENT_INDEX_8[at(nw - w + 255)]
    return gradient_context(w, n, nw, bits) + GRADIENT_CONTEXTS - 1


@device
def signed_bias_table(bias):
    """Expand bias[0 .. GRADIENT_CONTEXTS - 1] in place (bias holds SIGNED_BIAS_ENTRIES) into the bias of each
    signed gradient context g: bias[g + GRADIENT_CONTEXTS - 1] = sign(g) * bias[|g|], as bias_context
    gives it."""
    middle = GRADIENT_CONTEXTS - 1
    for i in range(middle, -1, -1):
        bias[middle + i] = bias[i]
    for i in range(1, GRADIENT_CONTEXTS):
        bias[middle - i] = -bias[middle + i]


@device
def bias_context(w, n, nw, bits):
    """(index into the bias table, sign): the bias of a sample is sign * bias[index]."""
    g = gradient_context(w, n, nw, bits)
    return abs(g), -1 if g < 0 else 1


@device
def coded_residual(residual, bias_value, sign, bits):
    """The zigzagged residual a stream codes: less its gradient context's bias, sign-folded (0 when the plane
    has none): zigzag((residual * sign - bias) * sign), which is zigzag(residual - sign * bias) as sign is
    +-1. Per-sample helpers the encoder uses take scalars only: one given an array costs numba's CPU code
    two atomic reference count updates a call, even inlined (the decoder's drivers are compiled without
    numba's runtime, so decode_step may take arrays)."""
    return zigzag(residual - sign * bias_value, bits)


@device
def predicted(w, n, nw, bias_value, sign):
    """MED's prediction plus the sign-folded bias: the part of a decoded sample known before its token, so
    computed beside the table lookups, off the chain of dependent steps (the Numba kernel's; the CPU's
    decode_step adds the same bias from its signed table)."""
    return med(w, n, nw) + sign * bias_value


@device
def sample_of(m, prediction, bits):
    """The sample whose coded_residual is m, given predicted() (coded_residual's inverse)."""
    return (prediction + unzigzag(m)) & ((np.int64(1) << bits) - 1)


# ---------------------------------------------------------------- tables


@device
def quantise_counts(counts, precision, freq):
    """freq[t]: counts[t] scaled to sum to 2^precision, every counted token >= 1 (the rest 0); all 0 when no
    token is counted. The largest count takes a shortfall, the largest frequencies give up an excess.
    Returns the alphabet size (last counted token + 1)."""
    total = np.int64(0)
    for t in range(counts.shape[0]):
        total += counts[t]
        freq[t] = 0
    if total == 0:
        return 0
    scale = np.int64(1) << precision
    alphabet = 0
    biggest = 0
    fsum = np.int64(0)
    for t in range(counts.shape[0]):
        if counts[t] > 0:
            f = max((np.int64(counts[t]) * scale + total // 2) // total, 1)
            freq[t] = f
            fsum += f
            alphabet = t + 1
            if counts[t] > counts[biggest]:
                biggest = t
    if fsum < scale:
        freq[biggest] += scale - fsum
        fsum = scale
    while fsum > scale:
        largest = 0
        for t in range(alphabet):
            if freq[t] > freq[largest]:
                largest = t
        take = min(freq[largest] - 1, fsum - scale)
        freq[largest] -= take
        fsum -= take
    return alphabet


@device
def write_tables(freq, alphabets, out, writer):
    """Each context's table: its alphabet size in 8 bits, then per token the bit length of its frequency
    in 4 bits and the frequency's bits below its top bit."""
    for ctx in range(ANS_CONTEXTS):
        put_bits(out, writer, alphabets[ctx], 8)
        for t in range(alphabets[ctx]):
            length = bit_length(freq[ctx, t])
            put_bits(out, writer, length, 4)
            if length > 1:
                put_bits(out, writer, freq[ctx, t] - (np.int64(1) << (length - 1)), length - 1)


@device
def read_tables(buf, bit_pos, end_bit, bits, precision, freq, alphabets):
    """write_tables' inverse, reading no bit at or past end_bit: (status, bit position after the tables)."""
    scale = np.int64(1) << precision
    for ctx in range(ANS_CONTEXTS):
        if bit_pos + 8 > end_bit:
            return ANS_BAD_TABLE, bit_pos
        alphabet = read_bits(buf, bit_pos, 8)
        bit_pos += 8
        if alphabet > token_count(bits):
            return ANS_BAD_TOKEN, bit_pos
        alphabets[ctx] = alphabet
        total = np.int64(0)
        for t in range(freq.shape[1]):
            freq[ctx, t] = 0
        for t in range(alphabet):
            if bit_pos + 4 > end_bit:
                return ANS_BAD_TABLE, bit_pos
            length = read_bits(buf, bit_pos, 4)
            bit_pos += 4
            if length > precision + 1 or bit_pos + max(length - 1, 0) > end_bit:
                return ANS_BAD_TABLE, bit_pos
            f = np.int64(0)
            if length > 0:
                f = (np.int64(1) << (length - 1)) | read_bits(buf, bit_pos, length - 1)
                bit_pos += length - 1
            freq[ctx, t] = f
            total += f
        if alphabet > 0 and total != scale:
            return ANS_BAD_TABLE, bit_pos
    return ANS_OK, bit_pos


@device
def cumulative_table(freq, alphabets, cum):
    """cum[ctx, t]: the encoder's slot start of each token."""
    for ctx in range(ANS_CONTEXTS):
        start = np.int64(0)
        for t in range(alphabets[ctx]):
            cum[ctx, t] = start
            start += freq[ctx, t]


@device
def build_slot_table(freq, alphabets, precision, bits, slots, token_info):
    """The decoder's tables: slots[ctx, s] (1 byte) the token whose slots hold s, and token_info[ctx, t] =
    f | cum << 16 of each token. A byte a slot: a set is 15 x 2 KB at precision 11 (30 KB of a GPU block's
    shared memory, not 120 KB as with f and s - cum packed in every slot; on the CPU the two decode at the
    same speed). A context with no tokens is all NO_TOKEN; token_info has room for NO_TOKEN (64 columns).
    Returns a status."""
    scale = np.int64(1) << precision
    for ctx in range(ANS_CONTEXTS):
        for t in range(token_info.shape[1]):
            token_info[ctx, t] = 0
        alphabet = alphabets[ctx]
        if alphabet > token_count(bits):
            return ANS_BAD_TOKEN
        if alphabet == 0:
            for s in range(scale):
                slots[ctx, s] = NO_TOKEN
            continue
        start = np.int64(0)
        for t in range(alphabet):
            f = freq[ctx, t]
            if f < 0 or start + f > scale:
                return ANS_BAD_TABLE
            token_info[ctx, t] = f | (start << 16)
            for j in range(f):
                slots[ctx, start + j] = t
            start += f
        if start != scale:
            return ANS_BAD_TABLE
    return ANS_OK


# ---------------------------------------------------------------- row streams


@device
def encode_row_stream(tokens, raw_bits, raw_values, contexts, first, count, freq, cum, precision, out, end):
    """Code symbols first .. first + count - 1 (in the order the decoder reads them) backwards into out,
    ending at end. Returns the stream's start, or -1 when out has no room."""
    x = np.int64(0)
    pos = end
    token_max = (ANS_LOW >> precision) << ANS_WORD_BITS
    for i in range(first + count - 1, first - 1, -1):
        b = raw_bits[i]
        if b > 0:  # raw bits go in first: the decoder reads them after the token
            if x >= ((ANS_LOW >> b) << ANS_WORD_BITS):
                if pos < 2:
                    return -1
                pos -= 2
                out[pos] = x & 255
                out[pos + 1] = (x >> 8) & 255
                x >>= ANS_WORD_BITS
            x = (x << b) | raw_values[i]
        ctx = contexts[i]
        t = tokens[i]
        f = freq[ctx, t]
        if x >= token_max * f:  # one word always suffices: x < 2^32
            if pos < 2:
                return -1
            pos -= 2
            out[pos] = x & 255
            out[pos + 1] = (x >> 8) & 255
            x >>= ANS_WORD_BITS
        x = ((x // f) << precision) + x % f + cum[ctx, t]
    state_bytes = (bit_length(x) + 7) >> 3
    if pos < state_bytes:
        return -1
    pos -= state_bytes
    for i in range(state_bytes):
        out[pos + i] = (x >> (8 * i)) & 255
    return pos


@device
def open_row_stream(buf, start, end):
    """(status, state, position of the first word) of the row stream buf[start:end]."""
    status = ANS_OK
    x = np.int64(0)
    pos = start
    if start < 0 or start > end or end > buf.shape[0]:
        status = ANS_ENDS_EARLY
    else:
        length = end - start
        state_bytes = length if length <= 2 else 4 - (length & 1)
        for i in range(state_bytes):
            x |= np.int64(buf[start + i]) << (8 * i)
        pos = start + state_bytes
        if state_bytes > 0 and (x >> (8 * (state_bytes - 1))) == 0:
            status = ANS_BAD_STATE  # not the fewest bytes: with words after it, a state below L
    return status, x, pos


@device
def slot_step(token, info, x, precision):
    """The state after decoding token (slots[ctx, x % 2^precision]) with info = token_info[ctx, token]:
    f * (x >> precision) + (x % 2^precision) - cum. NO_TOKEN's info is 0 (the stream is bad then)."""
    low = x & ((np.int64(1) << precision) - 1)
    return np.int64(info & 0xFFFF) * (x >> precision) + low - (np.int64(info) >> 16)


@device
def raw_step(x, count):
    """(count raw bits, state)."""
    return x & ((np.int64(1) << count) - 1), x >> count


@device
def refill(buf, x, pos, end):
    """(state, position) after the refill: a word is read when the state fell below L and words remain
    (their count is even by open_row_stream's rule, so a word never straddles end). The state test is
    arithmetic, not a branch: it passes at random, every few samples, and mispredicts."""
    if pos < end:  # false only at a row's end
        take = np.int64(x < ANS_LOW)
        word = np.int64(buf[at(pos)]) | (np.int64(buf[at(pos + 1)]) << 8)
        x = (x << (take << 4)) | (word & -take)
        pos += take << 1
    return x, pos


@device
def row_stream_end(x, pos, end):
    """The status of a row stream whose last sample is decoded."""
    if pos < end:
        return ANS_ENDS_LATE
    if x != 0:
        return ANS_ENDS_EARLY
    return ANS_OK


# ---------------------------------------------------------------- a tile row of a plane


@device
def row_symbols(
    plane,
    y,
    x0,
    width,
    bits,
    bias,
    biased,
    context_of_activity,
    tokens,
    raw_bits,
    raw_values,
    contexts,
    bias_sums,
    bias_counts,
    collect,
):
    """The symbols of row y of the tile at columns x0 .. x0 + width - 1 into the arrays' first width entries.
    With collect, also the sums of the unbiased sign-folded residuals (e * sign) and their counts per
    gradient context, from which the encoder makes the bias table (one pass for both)."""
    half = np.int64(1) << (bits - 1)
    row = y % COMPACT_BAND_ROWS
    left = left2 = upleft = half
    for c in range(width):
        up = np.int64(plane[y - 1, x0 + c]) if row > 0 else half
        w, n, nw = neighbours(row, c, left, left2, up, upleft, half)
        sample = np.int64(plane[y, x0 + c])
        residual = sample - med(w, n, nw)
        bias_value, sign = 0, 1
        if biased or collect:
            index, sign = bias_context(w, n, nw, bits)
            if collect:
                bias_sums[index] += sign * (((residual + half) & (2 * half - 1)) - half)
                bias_counts[index] += 1
            if biased:
                bias_value = bias[index]
            else:
                sign = 1
        tokens[c], raw_bits[c], raw_values[c] = hybrid_token(coded_residual(residual, bias_value, sign, bits))
        contexts[c] = context_of_activity[activity(w, n, nw, bits)]
        left2, left, upleft = left, sample, up


@device
def decode_step(
    buf,
    end,
    plane,
    y,
    band_row,
    x0,
    c,
    x,
    pos,
    left,
    left2,
    up,
    upleft,
    bits,
    slots,
    token_info,
    precision,
    bias,
    biased,
):
    """Decode plane[y, x0 + c] (band_row: y's row in its band) from its row stream's state x and word
    position pos: (status, state, position, sample). left, left2: the row's samples at c - 1 and c - 2; up,
    upleft: N at c and c - 1 (row_above's), which the caller carries in locals as a GPU lane does."""
    half = np.int64(1) << (bits - 1)
    w, n, nw = neighbours(band_row, c, left, left2, up, upleft, half)
    ctx = decoder_context(w, n, nw, bits)
    prediction = med(w, n, nw)
    if biased:
        prediction += bias[at(signed_gradient_index(w, n, nw, bits))]
    token = slots[at(ctx), at(x & ((np.int64(1) << precision) - 1))]
    x = slot_step(token, token_info[at(ctx), at(token)], x, precision)
    status = ANS_BAD_TOKEN
    sample = half
    if token != NO_TOKEN:
        status = ANS_OK
        x, pos = refill(buf, x, pos, end)
        raw = np.int64(0)
        count = token_raw_bits(token)
        if count > 0:
            raw, x = raw_step(x, count)
            x, pos = refill(buf, x, pos, end)
        sample = sample_of(hybrid_value(token, raw), prediction, bits)
        plane[at(y), at(x0 + c)] = sample
    return status, x, pos, sample


@device
def row_above(plane, y, x0, c, half):
    """N of plane[y, x0 + c] (half in a band's first row)."""
    return np.int64(plane[at(y - 1), at(x0 + c)]) if y % COMPACT_BAND_ROWS > 0 else half


@device
def decode_row(
    buf, start, end, plane, y, x0, width, bits, slots, token_info, precision, bias, biased,
):
    """Decode the row stream buf[start:end] into plane[y, x0:x0 + width] (rows above of its band already
    decoded). Returns a status; an undecodable row leaves its later samples as they were."""
    status, x, pos = open_row_stream(buf, start, end)
    half = np.int64(1) << (bits - 1)
    left = left2 = upleft = half
    for c in range(width if status == ANS_OK else 0):
        up = row_above(plane, y, x0, c, half)
        status, x, pos, sample = decode_step(
            buf,
            end,
            plane,
            y,
            y % COMPACT_BAND_ROWS,
            x0,
            c,
            x,
            pos,
            left,
            left2,
            up,
            upleft,
            bits,
            slots,
            token_info,
            precision,
            bias,
            biased,
        )
        if status != ANS_OK:
            break
        left2, left, upleft = left, sample, up
    if status == ANS_OK:
        status = row_stream_end(x, pos, end)
    return status


@device
def decode_row_pair(
    buf, start, middle, end, plane, y, x0, width, bits, slots, token_info, precision, bias, biased,
):
    """decode_row of rows y (stream buf[start:middle]) and y + 1 (buf[middle:end]) of one band, row y + 1 a
    sample behind row y as neighbouring lanes of the GPU wavefront are: two independent chains of dependent
    steps (context, slot load, multiply, refill, prediction) that one CPU core overlaps (1.3-1.5x; four
    rows measured slower, three no faster: too few registers). Returns the first bad status in row order,
    the one decode_row row by row finds."""
    status_a, state_a, pos_a = open_row_stream(buf, start, middle)
    status_b, state_b, pos_b = open_row_stream(buf, middle, end)
    half = np.int64(1) << (bits - 1)
    left_a = left2_a = upleft_a = left_b = left2_b = upleft_b = half
    for c in range(width + 1):
        above = left_a  # row y's sample at c - 1, row y + 1's N there: from a register, not the plane
        if status_a == ANS_OK and c < width:
            up = row_above(plane, y, x0, c, half)
            status_a, state_a, pos_a, sample = decode_step(
                buf,
                middle,
                plane,
                y,
                y % COMPACT_BAND_ROWS,
                x0,
                c,
                state_a,
                pos_a,
                left_a,
                left2_a,
                up,
                upleft_a,
                bits,
                slots,
                token_info,
                precision,
                bias,
                biased,
            )
            left2_a, left_a, upleft_a = left_a, sample, up
        if status_b == ANS_OK and c > 0:
            status_b, state_b, pos_b, sample = decode_step(
                buf,
                end,
                plane,
                y + 1,
                1,  # never a band's first row: its edge rules fold away (and left2_b with them)
                x0,
                c - 1,
                state_b,
                pos_b,
                left_b,
                left2_b,
                above,
                upleft_b,
                bits,
                slots,
                token_info,
                precision,
                bias,
                biased,
            )
            left2_b, left_b, upleft_b = left_b, sample, above
    if status_a == ANS_OK:
        status_a = row_stream_end(state_a, pos_a, middle)
    if status_a != ANS_OK:
        return status_a
    return status_b if status_b != ANS_OK else row_stream_end(state_b, pos_b, end)
