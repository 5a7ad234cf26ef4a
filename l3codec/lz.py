"""LZ streams: a tile-channel's raw bytes (kind 6, format version 6) or a tile's pixels (kind 7,
version 7) as an LZ4 block; kinds 8 and 9 (version 8) are the same with the block Huffman-coded
(huffman.py), which the encoder writes where smaller.

Rendered text, user interfaces and diagrams repeat whole glyphs and widgets, which a
per-sample predictor codes again each time and an LZ77 match copies. A stream of kind
KIND_LZ holds, after its kind byte, an LZ4 block (the block format of lz4, without a frame)
whose output is exactly the raw stream's bytes: the tile-channel's samples in row-major
order, little-endian. The encoder writes one where it is smaller than the stream its mode
codes (docs/FORMAT.md §5.2). A stream of kind KIND_PIXEL_LZ, a tile's channel-0 stream, holds the
tile's pixels with their channels interleaved (pixel_offset): text in several colours repeats whole
pixels, where each plane alone would pay for every glyph again (§5.3).

    sequence: | token | literal length + ... | literals | offset (u16 LE) | match length + ... |
    token:     high nibble: literals (15: more bytes follow), low nibble: match length - 4 (likewise)
    the last sequence stops after its literals, where the block ends

The decoder here is every decoder's: the CPU's, and the Numba CUDA expansion kernel's (one
thread per stream); kernels/lz.cu is its warp-wide twin.
"""

import numpy as np

from .format import KIND_LZ, KIND_LZ_CODED, KIND_PIXEL_LZ, KIND_PIXEL_LZ_CODED, STATUS_CORRUPT, STATUS_OK
from .huffman import TABLES, SYMBOLS, coded_size, expand_coded_lz, write_coded_lz
from .jit import device
from .lz4block import MIN_MATCH, copy_match, lz_length

MAX_OFFSET = 65535
LAST_LITERALS = 5  # LZ4's end-of-block rules, which the encoder follows so that lz4 itself reads its blocks:
MATCH_START_LIMIT = 12  # the last 5 bytes are literals, the last match starts 12 bytes before the end
HASH_BITS = 12
HASH_BYTES = 4
CHAIN_DEPTH = 64  # earlier positions of the same hash tried per position
NICE_LENGTH = 256  # ... until one matches this far (rendered text: a longer one is often further down the chain)
SAMPLE_STEP = 4  # lz_may_pay's histogram takes every 4th sample
DOMINANT_SHARE = 4  # ... and looks for a value in a quarter of them
SAME_AS_LEFT_PERCENT = 85  # ... or 85% of them equal to their left neighbour
# A fast colour plane becomes an LZ stream only where that is 10% smaller: a photograph's LZ planes
# (a sky, short matches) saved 0.04% of hires2048 and cost its frame 0 a tenth of the GPU estimate,
# 5.04 -> 5.59 warp-instructions per sample with expansion (bench/results/gpu.md); corpus flat
# 0.9916 -> 0.9930x its sources. compact and one-channel planes take any gain: their coded decode
# costs more than an expansion.
FAST_COLOUR_LZ_GAIN_PERCENT = 10
INSIDE_MATCH = 16  # positions at each end of a match that join the chains
SKIP_AFTER = 32  # positions without a match before the search strides 2, then 3 ... positions


@device
def expand_lz(buf, pos, end, out, first, size):
    """Expand the LZ4 block buf[pos:end] into out[first:first + size]: STATUS_OK, or STATUS_CORRUPT
    when it does not make exactly `size` bytes (a length or offset cut short by the block's end, an
    offset of 0 or before the output's start, more bytes than `size`, or fewer)."""
    produced = np.int64(0)
    while True:
        if pos >= end:
            return STATUS_CORRUPT
        token = np.int64(buf[pos])
        literals, pos = lz_length(buf, pos + 1, end, token >> 4)
        if pos < 0 or literals > end - pos or literals > size - produced:
            return STATUS_CORRUPT
        for i in range(literals):
            out[first + produced + i] = buf[pos + i]
        pos += literals
        produced += literals
        if pos == end:
            return STATUS_OK if produced == size else STATUS_CORRUPT
        if end - pos < 2:
            return STATUS_CORRUPT
        offset = np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8)
        match, pos = lz_length(buf, pos + 2, end, token & 15)
        match += MIN_MATCH
        if pos < 0 or not copy_match(out, first, produced, offset, match, size):
            return STATUS_CORRUPT
        produced += match


@device
def is_lz(kind):
    """An LZ stream of one plane (kind 6, or 8: its coded form)."""
    return kind == KIND_LZ or kind == KIND_LZ_CODED


@device
def is_pixel_lz(kind):
    """A pixel LZ stream (kind 7, or 9: its coded form)."""
    return kind == KIND_PIXEL_LZ or kind == KIND_PIXEL_LZ_CODED


@device
def is_coded_lz(kind):
    """A Huffman-coded LZ stream (kind 8 or 9), whose expansion needs code tables."""
    return kind == KIND_LZ_CODED or kind == KIND_PIXEL_LZ_CODED


@device
def expand_lz_stream(buf, start, end, tables, out, first, size):
    """The LZ stream buf[start:end] of any LZ kind (6-9: plain or Huffman-coded) into out[first:first + size]:
    its status. tables: huffman.TABLES x huffman.TABLE_SIZE scratch for a coded stream's codes."""
    if is_coded_lz(buf[start]):
        return expand_coded_lz(buf, start + 1, end, tables, out, first, size)
    return expand_lz(buf, start + 1, end, out, first, size)


@device
def pixel_offset(pixel, channel, channels, bytes_per_sample):
    """Where a pixel LZ block's output holds sample `channel` of pixel `pixel` (row-major in the tile):
    pixels one after another, each its channels in order, each sample little-endian."""
    return (pixel * channels + channel) * bytes_per_sample


# ---------------------------------------------------------------- encoder (CPU only)


@device
def raw_bytes(tile, bits, raw):
    """The raw stream's bytes of a tile plane (2-D view) into raw: samples row-major, little-endian."""
    pos = 0
    for row in range(tile.shape[0]):
        for col in range(tile.shape[1]):
            value = np.int64(tile[row, col])
            raw[pos] = value & 255
            if bits == 16:
                raw[pos + 1] = value >> 8
            pos += bits // 8
    return pos


@device
def pixel_bytes(pixels, bits, raw):
    """A pixel LZ block's output for a tile's planes (3-D view: channel, row, column) into raw."""
    channels, height, width = pixels.shape
    bytes_per_sample = bits // 8
    for row in range(height):
        for col in range(width):
            for channel in range(channels):
                pos = pixel_offset(row * width + col, channel, channels, bytes_per_sample)
                value = np.int64(pixels[channel, row, col])
                raw[pos] = value & 255
                if bytes_per_sample == 2:
                    raw[pos + 1] = value >> 8
    return channels * height * width * bytes_per_sample


@device(cpu_inline=True)
def hash_at(raw, i):
    """A hash of raw[i:i + HASH_BYTES]: the chains hold positions whose next HASH_BYTES bytes may repeat."""
    word = np.uint64(0)
    for j in range(HASH_BYTES):
        word |= np.uint64(raw[i + j]) << np.uint64(8 * j)
    return np.int64((word * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - HASH_BITS))


@device
def lz_may_pay(tile, counts, repeats):
    """Whether to look for an LZ stream of a tile plane (2-D view) at all, judged on every
    SAMPLE_STEP-th sample: one low byte is at least 1/DOMINANT_SHARE of them (the backgrounds of
    text and diagrams), or, where `repeats` (a one-channel image: label maps), at least
    SAME_AS_LEFT_PERCENT per cent of them equal their left neighbour (label maps of many regions, none
    dominant, whose rows an LZ match copies from the row above). In a photograph the commonest value
    is a few per cent, and the match search would cost the encoder a third of its speed there
    (hires2048) for nothing; a colour photograph's sky repeats its neighbours too, but LZ streams
    of it save a fraction of a per cent and cost a GPU more to expand than their decode saves (with
    this rule in colour, hires2048 0.05% smaller, corpus flat 0.5%, and hires2048 frame 0's GPU
    estimate 5.59 -> 6.99 warp-instructions per sample, measured without FAST_COLOUR_LZ_GAIN_PERCENT:
    bench/results/gpu.md), so colour takes the first test alone."""
    for value in range(256):
        counts[value] = 0
    samples = 0
    same = 0
    for row in range(tile.shape[0]):
        for col in range(row % SAMPLE_STEP, tile.shape[1], SAMPLE_STEP):
            counts[np.int64(tile[row, col]) & 255] += 1
            samples += 1
            if repeats and col > 0 and tile[row, col] == tile[row, col - 1]:
                same += 1
    top = 0
    for value in range(256):
        top = max(top, counts[value])
    return top * DOMINANT_SHARE >= samples or (repeats and same * 100 >= samples * SAME_AS_LEFT_PERCENT)


@device
def put_length(out, pos, length):
    """A length's extension bytes after its token nibble of 15 (length: what the nibble left over)."""
    while length >= 255:
        out[pos] = 255
        pos += 1
        length -= 255
    out[pos] = length
    return pos + 1


# put_sequence and longest_match stay calls on the CPU: each inlined cost about 0.35 s of first
# use per dtype, for no speed measured (the per-byte helpers around them are inlined)
@device
def put_sequence(out, pos, raw, anchor, literals, offset, match):
    """One sequence: token, literal length, literals and, for match > 0, offset and match length."""
    token_pos = pos
    pos += 1
    token = min(literals, 15) << 4
    if literals >= 15:
        pos = put_length(out, pos, literals - 15)
    for i in range(literals):
        out[pos + i] = raw[anchor + i]
    pos += literals
    if match > 0:
        out[pos] = offset & 255
        out[pos + 1] = offset >> 8
        pos += 2
        token |= min(match - MIN_MATCH, 15)
        if match - MIN_MATCH >= 15:
            pos = put_length(out, pos, match - MIN_MATCH - 15)
    out[token_pos] = token
    return pos


@device(cpu_inline=True)
def sequence_bytes(literals, match):
    """Bytes put_sequence writes at most."""
    return 1 + literals + literals // 255 + 1 + 2 + match // 255 + 1


@device(cpu_inline=True)
def chain_position(raw, i, head, chain):
    """Put position i at the head of its hash's chain."""
    h = hash_at(raw, i)
    chain[i] = head[h]
    head[h] = i


@device
def longest_match(raw, size, i, head, chain):
    """(length, offset) of the longest match for position i among the CHAIN_DEPTH latest earlier
    positions of its hash within MAX_OFFSET, ending LAST_LITERALS bytes before the end at the latest."""
    candidate = head[hash_at(raw, i)]
    longest = 0
    offset = 0
    depth = 0
    most = size - LAST_LITERALS - i
    while candidate >= 0 and i - candidate <= MAX_OFFSET and depth < CHAIN_DEPTH:
        # a candidate whose byte at the longest length so far differs cannot be longer: one compare
        # turns most of a chain away (the longest is below most here: the search stops at most)
        if raw[candidate + longest] == raw[i + longest]:
            length = 0
            while length < most and raw[candidate + length] == raw[i + length]:
                length += 1
            if length > longest:
                longest, offset = length, i - candidate
                if length == most or length >= NICE_LENGTH:
                    break
        candidate = chain[candidate]
        depth += 1
    return longest, offset


@device
def encode_lz_block(raw, size, out, start, limit, head, chain):
    """raw[:size] as an LZ4 block at out[start:], following LZ4's end-of-block rules; returns its end,
    or -1 as soon as the block would reach `limit`. Each position takes its longest match
    (longest_match), unless the next position's is longer (one step of lazy matching)."""
    for h in range(head.shape[0]):
        head[h] = -1
    pos = start
    anchor = 0
    i = 0
    chained = 0  # positions before this one are in the chains
    last = size - MATCH_START_LIMIT  # matches start before it
    misses = 0  # positions since the last match: past SKIP_AFTER of them the search strides (LZ4's acceleration)
    while i < last:
        if pos + sequence_bytes(i - anchor, 0) >= limit:
            return -1
        # the positions inside the last match join the chains, but only its first INSIDE_MATCH and last
        # INSIDE_MATCH ones: a label map's long runs would hash every byte (all before `last`, so a
        # hash never reads past the end)
        if i - chained > 2 * INSIDE_MATCH:
            for j in range(chained, chained + INSIDE_MATCH):
                chain_position(raw, j, head, chain)
            chained = i - INSIDE_MATCH
        while chained < i:
            chain_position(raw, chained, head, chain)
            chained += 1
        longest, offset = longest_match(raw, size, i, head, chain)
        chain_position(raw, i, head, chain)
        chained = i + 1
        if longest < MIN_MATCH:
            misses += 1
            i += 1 + misses // SKIP_AFTER  # a photograph's stream gives up at its coded size soon after
            chained = i  # positions skipped stay out of the chains
            continue
        misses = 0
        if i + 1 < last:
            next_longest, next_offset = longest_match(raw, size, i + 1, head, chain)
            chain_position(raw, i + 1, head, chain)
            chained = i + 2
            if next_longest > longest:
                i += 1
                longest, offset = next_longest, next_offset
        if pos + sequence_bytes(i - anchor, longest) >= limit:
            return -1
        pos = put_sequence(out, pos, raw, anchor, i - anchor, offset, longest)
        i += longest
        anchor = i
    if pos + sequence_bytes(size - anchor, 0) >= limit:
        return -1
    return put_sequence(out, pos, raw, anchor, size - anchor, 0, 0)


# a plain block up to this many times the size to beat is kept for coding: coding saves up to half of it.
# At 1.5x compact never finished the LZ block of a contour-like label map's tile, whose coded rows are
# small (generated label maps 0.965 -> 0.909x their PNG files at 2x; their compact encode 9.9 -> 7.7 MP/s)
PLAIN_LIMIT = 2


@device
def smallest_lz(block, end, limit, kind, coded_kind, out, start):
    """The LZ4 block block[1:end] at out[start:] as a stream of `kind`, or of `coded_kind` where coding
    it is smaller, if that is smaller than limit bytes: its size, else 0 and out unchanged."""
    counts = np.empty((TABLES, SYMBOLS), np.int64)
    lengths = np.empty((TABLES, SYMBOLS), np.int64)
    coded = coded_size(block, 1, end, counts, lengths)
    if coded < end and coded < limit:
        return write_coded_lz(block, 1, end, lengths, coded_kind, out, start) - start
    if end >= limit:
        return 0
    out[start] = kind
    for i in range(1, end):
        out[start + i] = block[i]
    return end


@device
def smaller_as_lz(tile, bits, out, start, size, raw, block, head, chain, repeats, gain_percent):
    """The stream of `size` bytes at out[start:] (the tile plane's, coded by its mode), replaced by
    an LZ stream, plain or coded, where that is smaller than size less gain_percent per cent of it
    (strictly smaller at 0); returns the stream's size. raw, block, head, chain: scratch (lz_scratch;
    head counts lz_may_pay's low bytes before it heads the hash chains); repeats: the plane is a
    one-channel image's, or a palette's index plane, which the encoder codes as one (lz_may_pay)."""
    if size <= 1 + bits // 8:  # constant
        return size
    if tile.size * (bits // 8) <= MATCH_START_LIMIT or not lz_may_pay(tile, head, repeats):
        return size
    count = raw_bytes(tile, bits, raw)
    end = encode_lz_block(raw, count, block, 1, min(size * PLAIN_LIMIT, block.shape[0]), head, chain)
    if end < 0:
        return size
    lz = smallest_lz(block, end, size - size * gain_percent // 100, KIND_LZ, KIND_LZ_CODED, out, start)
    return lz if lz > 0 else size


@device
def pixel_lz_stream(pixels, bits, out, start, limit, raw, block, head, chain):
    """The tile's planes (3-D view) as a pixel LZ stream, plain or coded, at out[start:] if it is
    smaller than `limit` bytes: its size, else 0 and out unchanged. Tried only where every plane passes
    lz_may_pay. raw, block, head, chain: lz_scratch for the tile's samples of every channel."""
    for channel in range(pixels.shape[0]):
        if not lz_may_pay(pixels[channel], head, False):
            return 0
    count = pixel_bytes(pixels, bits, raw)
    if count <= MATCH_START_LIMIT:
        return 0
    end = encode_lz_block(raw, count, block, 1, min(limit * PLAIN_LIMIT, block.shape[0]), head, chain)
    if end < 0:
        return 0
    return smallest_lz(block, end, limit, KIND_PIXEL_LZ, KIND_PIXEL_LZ_CODED, out, start)


@device
def lz_scratch(tile_width, tile_height, bits):
    """smaller_as_lz's scratch for tiles of at most this size (pixel_lz_stream's: tile_height times the
    channels): (raw, block, head, chain)."""
    count = tile_width * tile_height * (bits // 8)
    return (np.empty(count, np.uint8), np.empty(count + 1, np.uint8), np.empty(1 << HASH_BITS, np.int32),
            np.empty(count, np.int32))
