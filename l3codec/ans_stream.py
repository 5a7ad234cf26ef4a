"""Stream kind 10 (KIND_CODED_ANS, format 10, compact mode): one tile-channel coded with ans.py's
static-table rANS coder, self-contained (its own table set), so a crop decodes only the tiles it needs.

    offset  size  field
    0       1     kind = 10
    1       1     flags: bit 0 = biased; bits 1-7 must be 0
    2       1     P: table precision, ANS_MIN_PRECISION .. ANS_MAX_PRECISION
    3       1     L: row-length bit width, 0 .. 31
    4       B     bias table when biased: GRADIENT_CONTEXTS signed values of bits/8 bytes each
    4+B     T1    table set (ans.write_tables), padded to a byte
    ...     T2    row-length table: h byte lengths of L bits, LSB-first, padded to a byte
    ...           row streams of rows 0 .. h-1 (ans.encode_row_stream); the stream ends with the last

Statuses (FORMAT.md §8): the header fields out of range, the bias table or table set cut short, or a table
ans.read_tables / build_slot_table refuse -> STATUS_BAD_HEADER; a stream shorter than its header, a
row-length table or a row past the stream's end, or bytes after the last row -> STATUS_BAD_SIZE; a row
whose state and tokens do not decode to exactly its bytes -> STATUS_CORRUPT. Checked in that order:
header, tables, row-length table, rows from row 0, the end.

Single-source as ans.py: the decoder's stages (ans_stream_tables, ans_rows_start, ans_row_length,
decode_ans_rows) are @device functions a GPU decoder compiles too; the encoder is CPU only.
"""

import numpy as np

from .ans import (
    ANS_CONTEXT_OF_ACTIVITY,
    ANS_CONTEXTS,
    ANS_MAX_PRECISION,
    ANS_MIN_PRECISION,
    ANS_OK,
    GRADIENT_CONTEXTS,
    SIGNED_BIAS_ENTRIES,
    build_slot_table,
    cumulative_table,
    decode_row,
    decode_row_pair,
    encode_row_stream,
    quantise_counts,
    read_tables,
    row_symbols,
    signed_bias_table,
    token_count,
    write_tables,
)
from .bitio import WRITER_STATE_SIZE, bit_length, put_bits, read_bits, writer_flush, writer_init
from .format import (
    ANS_ROW_FAULT_STATUS,
    ANS_TABLE_FAULT_STATUS,
    COMPACT_MAX_TILE_HEIGHT,
    KIND_CODED_ANS,
    STATUS_BAD_HEADER,
    STATUS_BAD_KIND,
    STATUS_BAD_SIZE,
    STATUS_OK,
)
from .jit import device

ANS_HEADER_BYTES = 4  # kind, flags, precision, row-length bit width
ANS_FLAG_BIASED = 1
ANS_MAX_LENGTH_BITS = 31
ANS_REFERENCE_PRECISION = 11  # what the reference encoder writes (bench/results/compact-v2-model.md)
ANS_MAX_TOKENS = token_count(16)
# the most a table set can take: per context its alphabet byte, per token 4 + PRECISION bits
ANS_MAX_TABLE_BYTES = (ANS_CONTEXTS * (8 + ANS_MAX_TOKENS * (4 + ANS_MAX_PRECISION)) + 7) // 8
ANS_MAX_PREFIX_BYTES = (
    ANS_HEADER_BYTES + GRADIENT_CONTEXTS * 2 + ANS_MAX_TABLE_BYTES
    + (COMPACT_MAX_TILE_HEIGHT * ANS_MAX_LENGTH_BITS + 7) // 8
)
# the encoder's bias choice
ANS_BIAS_CHOOSE = 0  # the cheaper of with and without, by the quantised tables' own cost
ANS_BIAS_OFF = 1
ANS_BIAS_ON = 2


# ---------------------------------------------------------------- decoder stages


@device
def ans_stream_header(buf, start, end):
    """(status, biased, precision, row-length bits) of the kind-10 stream buf[start:end]."""
    if end - start < ANS_HEADER_BYTES:
        return STATUS_BAD_SIZE, 0, 0, 0
    flags = np.int64(buf[start + 1])
    precision = np.int64(buf[start + 2])
    length_bits = np.int64(buf[start + 3])
    if (flags & ~ANS_FLAG_BIASED) != 0 or precision < ANS_MIN_PRECISION or precision > ANS_MAX_PRECISION \
            or length_bits > ANS_MAX_LENGTH_BITS:
        return STATUS_BAD_HEADER, 0, 0, 0
    return STATUS_OK, flags & ANS_FLAG_BIASED, precision, length_bits


@device
def read_bias_table(buf, pos, end, bits, bias):
    """bias[i]: the two's complement values of bits/8 bytes at buf[pos:]; returns the byte after them, or -1
    when they pass end."""
    size = bits >> 3
    if pos + GRADIENT_CONTEXTS * size > end:
        return -1
    sign_bit = np.int64(1) << (bits - 1)
    for i in range(GRADIENT_CONTEXTS):
        value = np.int64(buf[pos + i * size])
        if size == 2:
            value |= np.int64(buf[pos + i * size + 1]) << 8
        bias[i] = (value ^ sign_bit) - sign_bit
    return pos + GRADIENT_CONTEXTS * size


@device
def ans_stream_tables(buf, start, end, bits, bias, freq, alphabets, slots, token_info):
    """The table stage: header, bias table and table set of the kind-10 stream buf[start:end] into the
    decoder's tables (bias: SIGNED_BIAS_ENTRIES, as ans.signed_bias_table expands it, all 0 when unbiased;
    freq: ANS_CONTEXTS x ANS_MAX_TOKENS; slots: ANS_CONTEXTS x 2^ANS_MAX_PRECISION; token_info: ANS_CONTEXTS
    x NO_TOKEN + 1). Returns (status, biased, precision, row-length bits, byte position of the row-length
    table)."""
    if buf[start] != KIND_CODED_ANS:
        return STATUS_BAD_KIND, 0, 0, 0, 0
    status, biased, precision, length_bits = ans_stream_header(buf, start, end)
    if status != STATUS_OK:
        return status, 0, 0, 0, 0
    pos = start + ANS_HEADER_BYTES
    for i in range(SIGNED_BIAS_ENTRIES):
        bias[i] = 0
    if biased:
        pos = read_bias_table(buf, pos, end, bits, bias)
        if pos < 0:
            return ANS_TABLE_FAULT_STATUS, 0, 0, 0, 0
        signed_bias_table(bias)
    table_status, bit_pos = read_tables(buf, pos * 8, end * 8, bits, precision, freq, alphabets)
    if table_status == ANS_OK:
        table_status = build_slot_table(freq, alphabets, precision, bits, slots, token_info)
    if table_status != ANS_OK:
        return ANS_TABLE_FAULT_STATUS, 0, 0, 0, 0
    return STATUS_OK, biased, precision, length_bits, (bit_pos + 7) >> 3


@device
def ans_rows_start(length_table, end, height, length_bits):
    """Byte position of row 0's stream, or -1 when the row-length table passes end."""
    rows = length_table + ((height * length_bits + 7) >> 3)
    return rows if rows <= end else -1


@device
def ans_row_length(buf, length_table, length_bits, row):
    """Byte length of row `row`'s stream (0: the empty stream, final state 0)."""
    return read_bits(buf, length_table * 8 + row * length_bits, length_bits)


@device
def decode_ans_rows(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias, slots,
                    token_info):
    """Rows 0 .. h-1 of tile from the row streams at buf[pos:end], two rows of a band at a time
    (ans.decode_row_pair; bands have an even number of rows, so a pair never straddles two). Returns the
    first failing row's status in row order (a row past end: BAD_SIZE; one that does not decode to
    exactly its bytes: CORRUPT), then BAD_SIZE for bytes after the last row."""
    height, width = tile.shape
    for y in range(0, height, 2):
        middle = pos + ans_row_length(buf, length_table, length_bits, y)
        if middle > end:
            return STATUS_BAD_SIZE
        if y + 1 < height:
            stop = middle + ans_row_length(buf, length_table, length_bits, y + 1)
            if stop > end:
                status = decode_row(buf, pos, middle, tile, y, 0, width, bits, slots, token_info, precision,
                                    bias, biased)
                return ANS_ROW_FAULT_STATUS if status != ANS_OK else STATUS_BAD_SIZE
            status = decode_row_pair(buf, pos, middle, stop, tile, y, 0, width, bits, slots, token_info,
                                     precision, bias, biased)
        else:
            stop = middle
            status = decode_row(buf, pos, middle, tile, y, 0, width, bits, slots, token_info, precision, bias,
                                biased)
        if status != ANS_OK:
            return ANS_ROW_FAULT_STATUS
        pos = stop
    return STATUS_OK if pos == end else STATUS_BAD_SIZE


@device
def decode_ans_stream(buf, start, end, tile, bits, bias, freq, alphabets, slots, token_info):
    """Decode the kind-10 stream buf[start:end] into tile (h x w); the rest are scratch tables as
    ans_stream_tables takes them. Returns a FORMAT.md §8 status."""
    status, biased, precision, length_bits, length_table = ans_stream_tables(
        buf, start, end, bits, bias, freq, alphabets, slots, token_info)
    if status != STATUS_OK:
        return status
    pos = ans_rows_start(length_table, end, tile.shape[0], length_bits)
    if pos < 0:
        return STATUS_BAD_SIZE
    return decode_ans_rows(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias,
                           slots, token_info)


# ---------------------------------------------------------------- encoder (CPU only)


@device
def tile_histograms(tile, bits, bias, biased, counts, tokens, raw_bits, raw_values, contexts, bias_sums,
                    bias_counts, collect):
    """counts[context, token] over the tile (and with collect, the bias sums: see ans.row_symbols)."""
    height, width = tile.shape
    for y in range(height):
        row_symbols(tile, y, 0, width, bits, bias, biased, ANS_CONTEXT_OF_ACTIVITY, tokens, raw_bits,
                    raw_values, contexts, bias_sums, bias_counts, collect)
        for i in range(width):
            counts[contexts[i], tokens[i]] += 1


@device
def quantised_tables(counts, precision, freq, alphabets):
    for ctx in range(ANS_CONTEXTS):
        alphabets[ctx] = quantise_counts(counts[ctx], precision, freq[ctx])


@device
def table_set_bits(freq, alphabets):
    """The bits write_tables writes for this set."""
    total = 0
    for ctx in range(ANS_CONTEXTS):
        total += 8
        for t in range(alphabets[ctx]):
            total += 4 + max(bit_length(freq[ctx, t]) - 1, 0)
    return total


@device
def coded_bits(counts, freq, alphabets, precision):
    """The tokens' cost in bits under the quantised tables (raw bits are the same either way)."""
    total = 0.0
    for ctx in range(ANS_CONTEXTS):
        for t in range(alphabets[ctx]):
            if counts[ctx, t] > 0:
                total += counts[ctx, t] * (precision - np.log2(np.float64(freq[ctx, t])))
    return total


@device
def encode_ans_stream(tile, bits, precision, bias_mode, out, start, limit):
    """Encode one tile-channel (h x w, h <= COMPACT_MAX_TILE_HEIGHT, colour-transformed samples) as a
    kind-10 stream at out[start:]; returns its size, or -1 when it would reach past limit (limit - start
    must be at least ANS_MAX_PREFIX_BYTES: the rows are written after room for the largest prefix, then
    moved down). bias_mode: ANS_BIAS_CHOOSE, ANS_BIAS_OFF or ANS_BIAS_ON."""
    height, width = tile.shape
    tokens = np.zeros(width, np.int64)
    raw_bits = np.zeros(width, np.int64)
    raw_values = np.zeros(width, np.int64)
    contexts = np.zeros(width, np.int64)
    bias = np.zeros(GRADIENT_CONTEXTS, np.int64)
    bias_sums = np.zeros(GRADIENT_CONTEXTS, np.int64)
    bias_counts = np.zeros(GRADIENT_CONTEXTS, np.int64)
    counts = np.zeros((2, ANS_CONTEXTS, ANS_MAX_TOKENS), np.int64)  # [biased]
    freq = np.zeros((2, ANS_CONTEXTS, ANS_MAX_TOKENS), np.int64)
    alphabets = np.zeros((2, ANS_CONTEXTS), np.int64)
    # unbiased first: its pass also sums the residuals the bias table is made of
    tile_histograms(tile, bits, bias, False, counts[0], tokens, raw_bits, raw_values, contexts, bias_sums,
                    bias_counts, bias_mode != ANS_BIAS_OFF)
    quantised_tables(counts[0], precision, freq[0], alphabets[0])
    biased = bias_mode == ANS_BIAS_ON
    if bias_mode != ANS_BIAS_OFF:
        for i in range(GRADIENT_CONTEXTS):  # the rounded mean: floor(sum / count + 1/2)
            n = max(bias_counts[i], 1)
            bias[i] = (2 * bias_sums[i] + n) // (2 * n)
        tile_histograms(tile, bits, bias, True, counts[1], tokens, raw_bits, raw_values, contexts, bias_sums,
                        bias_counts, False)
        quantised_tables(counts[1], precision, freq[1], alphabets[1])
        if bias_mode == ANS_BIAS_CHOOSE:
            plain = (coded_bits(counts[0], freq[0], alphabets[0], precision)
                     + table_set_bits(freq[0], alphabets[0]))
            with_bias = (coded_bits(counts[1], freq[1], alphabets[1], precision)
                         + table_set_bits(freq[1], alphabets[1]) + 8 * GRADIENT_CONTEXTS * (bits >> 3))
            biased = with_bias < plain
    chosen = 1 if biased else 0
    cum = np.zeros((ANS_CONTEXTS, ANS_MAX_TOKENS), np.int64)
    cumulative_table(freq[chosen], alphabets[chosen], cum)
    # a sample costs at most 12 token bits and 14 raw bits, so 4 bytes a sample bound any row stream
    scratch = np.zeros(4 * width + 16, np.uint8)
    row_lengths = np.zeros(height, np.int64)
    rows_start = start + ANS_MAX_PREFIX_BYTES
    pos = rows_start
    longest = 0
    for y in range(height):
        row_symbols(tile, y, 0, width, bits, bias, biased, ANS_CONTEXT_OF_ACTIVITY, tokens, raw_bits,
                    raw_values, contexts, bias_sums, bias_counts, False)
        first = encode_row_stream(tokens, raw_bits, raw_values, contexts, 0, width, freq[chosen], cum,
                                  precision, scratch, scratch.shape[0])
        length = scratch.shape[0] - first
        if first < 0 or pos + length > limit:
            return -1
        for i in range(length):
            out[pos + i] = scratch[first + i]
        row_lengths[y] = length
        longest = max(longest, length)
        pos += length
    length_bits = bit_length(longest)
    out[start] = KIND_CODED_ANS
    out[start + 1] = ANS_FLAG_BIASED if biased else 0
    out[start + 2] = precision
    out[start + 3] = length_bits
    prefix_end = start + ANS_HEADER_BYTES
    if biased:
        for i in range(GRADIENT_CONTEXTS):
            for b in range(bits >> 3):
                out[prefix_end + b] = (bias[i] >> (8 * b)) & 255
            prefix_end += bits >> 3
    writer = np.zeros(WRITER_STATE_SIZE, np.int64)
    writer_init(writer, prefix_end, rows_start)
    write_tables(freq[chosen], alphabets[chosen], out, writer)
    prefix_end = writer_flush(out, writer)
    writer_init(writer, prefix_end, rows_start)
    for y in range(height):
        put_bits(out, writer, row_lengths[y], length_bits)
    prefix_end = writer_flush(out, writer)
    for i in range(pos - rows_start):
        out[prefix_end + i] = out[rows_start + i]
    return prefix_end + pos - rows_start - start
