"""Huffman-coded LZ streams (kinds 8 and 9, format version 8, docs/FORMAT.md §5.4).

An LZ4 block spends a whole byte on every token, literal and offset byte. Rendered text repeats
few literal values, few token shapes and few offsets, which PNG's deflate Huffman-codes: grey pages
of text were 1.34x their PNG files in `fast` with plain LZ streams (bench/results/lz-entropy.md).
A coded stream holds the same LZ4 block's symbols, each class under its own canonical Huffman code:

    stream: | kind (8 or 9) | table 0 | table 1 | table 2 | table 3 | bits ... (LSB first, zero-padded to a byte) |
    table:  | symbol bitmap: 32 bytes, bit s % 8 of byte s // 8 set: symbol s has a code | code lengths: a
              nibble (1..15) per symbol with a code, in symbol order, low nibble first, padded to a byte |
    tables: 0 literals, 1 tokens, 2 an offset's low byte, 3 its high byte

The bits hold, sequence by sequence: the token (table 1), the literal length's extension bytes (8
bits each), the literals (table 0), then, unless the literals ended the block, the offset (tables 2
and 3) and the match length's extension bytes. The block ends when its output reaches the tile's
bytes, after a sequence's literals; its bits end within the stream's last byte. Codes are canonical
(deflate's: shorter codes first, equal lengths in symbol order) and read first bit first.

The decoder here is the CPU's and the Numba CUDA expansion kernel's; kernels/lz.cu is its warp twin.
"""

import numpy as np

from .bitio import appended, peek_window, read_bits
from .format import STATUS_CORRUPT, STATUS_OK
from .jit import device
from .lz4block import MIN_MATCH, copy_match, lz_length

TABLES = 4
LITERAL_TABLE = 0
TOKEN_TABLE = 1
OFFSET_LOW_TABLE = 2
OFFSET_HIGH_TABLE = 3
MAX_CODE_BITS = 15  # a length is a nibble
BITMAP_BYTES = 32
SYMBOLS = 256
# a decoding table per class: code counts per length (at 0: the longest code's length), the symbols
# in code order, and scratch for where each length's symbols start
TABLE_COUNTS = 0
TABLE_LONGEST = 0
TABLE_SYMBOLS = MAX_CODE_BITS + 1
TABLE_STARTS = TABLE_SYMBOLS + SYMBOLS
TABLE_SIZE = TABLE_STARTS + MAX_CODE_BITS + 1
EXTENSION_BITS = 8


@device(cpu_inline=True)
def table_length(buf, lengths_at, n):
    """The code length of a table's n-th symbol with a code (its nibble)."""
    return (np.int64(buf[lengths_at + (n >> 1)]) >> (4 * (n & 1))) & 15


@device
def read_tables(buf, pos, end, tables):
    """Parse the four tables at byte pos into tables (TABLES x TABLE_SIZE): (status, byte position after
    them). A table is refused when it runs past end, gives a symbol length 0, or its lengths
    over-subscribe the code space; an empty or incomplete code is allowed (a missing code is an error
    where the bits reach it). The bitmap is walked a byte at a time, a zero byte skipped: most
    tables hold few symbols."""
    for table in range(TABLES):
        if end - pos < BITMAP_BYTES:
            return STATUS_CORRUPT, pos
        lengths_at = pos + BITMAP_BYTES
        for length in range(MAX_CODE_BITS + 1):  # (TABLE_LONGEST too)
            tables[table, TABLE_COUNTS + length] = 0
        n = 0
        for byte in range(BITMAP_BYTES):
            present = np.int64(buf[pos + byte])
            while present != 0:
                if present & 1:
                    if lengths_at + (n >> 1) >= end:
                        return STATUS_CORRUPT, pos
                    length = table_length(buf, lengths_at, n)
                    if length == 0:
                        return STATUS_CORRUPT, pos
                    tables[table, TABLE_COUNTS + length] += 1
                    n += 1
                present >>= 1
        left = 1
        start = 0
        for length in range(1, MAX_CODE_BITS + 1):
            left = (left << 1) - tables[table, TABLE_COUNTS + length]
            if left < 0:
                return STATUS_CORRUPT, pos
            tables[table, TABLE_STARTS + length] = start
            start += tables[table, TABLE_COUNTS + length]
            if tables[table, TABLE_COUNTS + length] > 0:
                tables[table, TABLE_LONGEST] = length
        n = 0
        for byte in range(BITMAP_BYTES):
            present = np.int64(buf[pos + byte])
            symbol = byte * 8
            while present != 0:
                if present & 1:
                    length = table_length(buf, lengths_at, n)
                    tables[table, TABLE_SYMBOLS + tables[table, TABLE_STARTS + length]] = symbol
                    tables[table, TABLE_STARTS + length] += 1
                    n += 1
                present >>= 1
                symbol += 1
        pos = lengths_at + (n + 1) // 2
    return STATUS_OK, pos


@device(cpu_inline=True)
def decode_symbol(buf, bit_pos, tables, table):
    """One symbol of `table` at bit_pos: (symbol, bit position after it); the symbol is -1 where the
    bits match no code (puff's canonical decoding: a length at a time, no lookup table)."""
    window = peek_window(buf, bit_pos)
    code = np.int64(0)
    first = np.int64(0)
    index = np.int64(0)
    # as far as the longest code: a loop of unknown count, which a GPU compiler does not unroll (15
    # unrolled steps at each of four call sites took the Numba expansion kernel to 255 registers)
    for length in range(1, np.int64(tables[table, TABLE_LONGEST]) + 1):
        code |= (window >> (length - 1)) & 1
        count = np.int64(tables[table, TABLE_COUNTS + length])
        if code - first < count:
            return np.int64(tables[table, TABLE_SYMBOLS + index + code - first]), bit_pos + length
        index += count
        first = (first + count) << 1
        code <<= 1
    return np.int64(-1), bit_pos + MAX_CODE_BITS


@device(cpu_inline=True)
def coded_length(buf, bit_pos, end_bit, length):
    """lz4block.lz_length in the bits: (length, bit position after it), the position -1 past end_bit."""
    if length == 15:
        while True:
            if bit_pos + EXTENSION_BITS > end_bit:
                return np.int64(0), np.int64(-1)
            byte = read_bits(buf, bit_pos, EXTENSION_BITS)
            bit_pos += EXTENSION_BITS
            length += byte
            if byte != 255:
                break
    return np.int64(length), np.int64(bit_pos)


@device
def expand_coded_lz(buf, pos, end, tables, out, first, size):
    """lz.expand_lz for a coded block: its tables and bits at buf[pos:end] into out[first:first + size];
    STATUS_OK, or STATUS_CORRUPT where lz.expand_lz's rules fail, a code is missing or the bits do not
    end in the stream's last byte."""
    status, pos = read_tables(buf, pos, end, tables)
    if status != STATUS_OK:
        return status
    bit = pos * 8
    end_bit = end * 8
    produced = np.int64(0)
    while True:
        token, bit = decode_symbol(buf, bit, tables, TOKEN_TABLE)
        if token < 0 or bit > end_bit:
            return STATUS_CORRUPT
        literals, bit = coded_length(buf, bit, end_bit, token >> 4)
        if bit < 0 or literals > size - produced:
            return STATUS_CORRUPT
        for i in range(literals):
            value, bit = decode_symbol(buf, bit, tables, LITERAL_TABLE)
            if value < 0 or bit > end_bit:
                return STATUS_CORRUPT
            out[first + produced + i] = value
        produced += literals
        if produced == size:
            return STATUS_OK if (token & 15) == 0 and (bit + 7) // 8 == end else STATUS_CORRUPT
        low, bit = decode_symbol(buf, bit, tables, OFFSET_LOW_TABLE)
        high, bit = decode_symbol(buf, bit, tables, OFFSET_HIGH_TABLE)
        if low < 0 or high < 0 or bit > end_bit:
            return STATUS_CORRUPT
        offset = low | (high << 8)
        match, bit = coded_length(buf, bit, end_bit, token & 15)
        match += MIN_MATCH
        if bit < 0 or not copy_match(out, first, produced, offset, match, size):
            return STATUS_CORRUPT
        produced += match


# ---------------------------------------------------------------- encoder (CPU only)


@device
def extension_count(length):
    """Extension bytes after a nibble of 15 (length: what the nibble left over)."""
    return length // 255 + 1


@device
def count_symbols(block, pos, end, counts):
    """Symbol counts of each class of the LZ4 block block[pos:end] (one the encoder wrote) into
    counts (TABLES x SYMBOLS); returns its extension bytes."""
    for table in range(TABLES):
        for symbol in range(SYMBOLS):
            counts[table, symbol] = 0
    extensions = 0
    while pos < end:
        token = np.int64(block[pos])
        counts[TOKEN_TABLE, token] += 1
        literals, after = lz_length(block, pos + 1, end, token >> 4)
        extensions += after - pos - 1
        pos = after
        for i in range(literals):
            counts[LITERAL_TABLE, block[pos + i]] += 1
        pos += literals
        if pos >= end:
            break
        counts[OFFSET_LOW_TABLE, block[pos]] += 1
        counts[OFFSET_HIGH_TABLE, block[pos + 1]] += 1
        _, after = lz_length(block, pos + 2, end, token & 15)
        extensions += after - pos - 2
        pos = after
    return extensions


@device
def code_lengths(counts, lengths, table):
    """Huffman code lengths of at most MAX_CODE_BITS for the symbols of counts[table] (a symbol counted
    0 gets none; a lone symbol gets 1 bit) into lengths[table]. Too long a code halves the counts and
    tries again."""
    order = np.empty(SYMBOLS, np.int64)
    weight = np.empty(2 * SYMBOLS, np.int64)
    parent = np.empty(2 * SYMBOLS, np.int64)
    present = 0
    for symbol in range(SYMBOLS):
        lengths[table, symbol] = 0
        if counts[table, symbol] > 0:
            order[present] = symbol
            present += 1
    if present == 1:
        lengths[table, order[0]] = 1
    if present <= 1:
        return
    shift = 0
    while True:
        for i in range(present):  # leaves by weight, lightest first (insertion sort: at most 256)
            symbol = order[i]
            w = max(counts[table, symbol] >> shift, 1)
            j = i
            while j > 0 and weight[j - 1] > w:
                weight[j] = weight[j - 1]
                order[j] = order[j - 1]
                j -= 1
            weight[j] = w
            order[j] = symbol
        # two queues: the sorted leaves, and the merged nodes (made in order of weight)
        leaf = 0
        node = 0
        for made in range(present - 1):
            total = 0
            for _ in range(2):
                if leaf < present and (node >= made or weight[leaf] <= weight[present + node]):
                    parent[leaf] = present + made
                    total += weight[leaf]
                    leaf += 1
                else:
                    parent[present + node] = present + made
                    total += weight[present + node]
                    node += 1
            weight[present + made] = total
        root = 2 * present - 2
        weight[root] = 0  # from here on a node's depth: a parent comes after its children
        for i in range(root - 1, -1, -1):
            weight[i] = weight[parent[i]] + 1
        longest = 0
        for i in range(present):
            lengths[table, order[i]] = weight[i]
            longest = max(longest, weight[i])
        if longest <= MAX_CODE_BITS:
            return
        shift += 1


@device
def table_bytes(lengths, table):
    present = 0
    for symbol in range(SYMBOLS):
        present += lengths[table, symbol] > 0
    return BITMAP_BYTES + (present + 1) // 2


@device
def coded_size(block, pos, end, counts, lengths):
    """Bytes of block[pos:end] (an LZ4 block) as a coded stream, its kind byte included; fills lengths."""
    bits = EXTENSION_BITS * count_symbols(block, pos, end, counts)
    size = 1
    for table in range(TABLES):
        code_lengths(counts, lengths, table)
        size += table_bytes(lengths, table)
        for symbol in range(SYMBOLS):
            bits += counts[table, symbol] * lengths[table, symbol]
    return size + (bits + 7) // 8


@device
def canonical_codes(lengths, codes, table):
    """Each symbol's canonical code, its bits reversed so that an LSB-first writer puts its first bit first."""
    next_code = 0
    for length in range(1, MAX_CODE_BITS + 1):
        for symbol in range(SYMBOLS):
            if lengths[table, symbol] == length:
                reversed_code = 0
                for b in range(length):
                    reversed_code |= ((next_code >> (length - 1 - b)) & 1) << b
                codes[table, symbol] = reversed_code
                next_code += 1
        next_code <<= 1


@device
def write_coded_lz(block, pos, end, lengths, kind, out, start):
    """block[pos:end] (an LZ4 block) as a coded stream of `kind` at out[start:], under the code lengths
    coded_size found; returns its end."""
    codes = np.zeros((TABLES, SYMBOLS), np.int64)
    at = start
    out[at] = kind
    at += 1
    for table in range(TABLES):
        canonical_codes(lengths, codes, table)
        for i in range(BITMAP_BYTES):
            out[at + i] = 0
        n = 0
        for symbol in range(SYMBOLS):
            length = lengths[table, symbol]
            if length > 0:
                out[at + (symbol >> 3)] |= 1 << (symbol & 7)
                nibble_at = at + BITMAP_BYTES + (n >> 1)
                if n & 1:
                    out[nibble_at] |= length << 4
                else:
                    out[nibble_at] = length
                n += 1
        at += BITMAP_BYTES + (n + 1) // 2
    acc = np.int64(0)
    nacc = np.int64(0)
    limit = out.shape[0]
    while pos < end:
        token = np.int64(block[pos])
        at, acc, nacc = appended(out, at, acc, nacc, limit, codes[TOKEN_TABLE, token], lengths[TOKEN_TABLE, token])
        literals, after = lz_length(block, pos + 1, end, token >> 4)
        for i in range(pos + 1, after):
            at, acc, nacc = appended(out, at, acc, nacc, limit, block[i], EXTENSION_BITS)
        pos = after
        for i in range(literals):
            value = block[pos + i]
            at, acc, nacc = appended(out, at, acc, nacc, limit, codes[LITERAL_TABLE, value],
                                     lengths[LITERAL_TABLE, value])
        pos += literals
        if pos >= end:
            break
        for table in range(OFFSET_LOW_TABLE, OFFSET_HIGH_TABLE + 1):
            value = block[pos]
            at, acc, nacc = appended(out, at, acc, nacc, limit, codes[table, value], lengths[table, value])
            pos += 1
        _, after = lz_length(block, pos, end, token & 15)
        for i in range(pos, after):
            at, acc, nacc = appended(out, at, acc, nacc, limit, block[i], EXTENSION_BITS)
        pos = after
    if nacc > 0:
        at, acc, nacc = appended(out, at, acc, nacc, limit, 0, 8 - nacc)
    return at
