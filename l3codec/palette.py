"""Palette tiles (format version 4, docs/FORMAT.md §5.1): the encoder's side.

A tile with few colours is coded as a colour table and one plane of indices, which the
mode's own stream coder codes like any plane: flat graphics and label maps, whose tiles
hold a few dozen colours, shrink by a third to a half (bench/results/codecs-vs-source.md). The
decoder's side is streams.open_stream and streams.palette_sample.

Colours are the tile's pixels after the colour transform (plane values), ordered by their
key: channel 0 most significant. Keys are collected in an open-addressing hash table.
"""

import numpy as np

from .format import KIND_PALETTE, KIND_PALETTE_MEMBER, PALETTE_HEADER_BYTES, PALETTE_MAX_COLOURS
from .jit import device
from .streams import write_sample

HASH_SLOTS = 4 * PALETTE_MAX_COLOURS  # a power of two, at most a quarter full
KEY_BITS = 48  # a colour's key holds 16 bits a channel: 4 channels of 16 bits are not tried


@device
def palette_allowed(channels, bits):
    return channels * 16 <= KEY_BITS or bits == 8


# The palette's helpers are inlined on the CPU: each compiled apart cost about half a second
# of the first use.
@device(cpu_inline=True)
def colour_key(pixels, row, col):
    """The pixel (channels, row, col) of a (channels, h, w) view as one integer, channel 0 highest."""
    key = np.int64(0)
    for channel in range(pixels.shape[0]):
        key = (key << 16) | np.int64(pixels[channel, row, col])
    return key


@device(cpu_inline=True)
def hash_slot(key):
    """A slot of the hash table: bits 20.. of a multiplicative hash of the key folded to 32 bits
    (the product stays below 2**63: no int64 overflows)."""
    folded = (key ^ (key >> 32) ^ (key >> 16)) & 0xFFFFFFFF
    return ((folded * 0x5BD1E995) >> 20) & (HASH_SLOTS - 1)


@device(cpu_inline=True)
def find_slot(table_keys, table_used, key):
    slot = hash_slot(key)
    while table_used[slot] and table_keys[slot] != key:
        slot = (slot + 1) & (HASH_SLOTS - 1)
    return slot


@device(cpu_inline=True)
def tile_palette(pixels, keys, table_keys, table_used):
    """The distinct colours of a (channels, h, w) tile: their count, their keys sorted into
    keys[:count]; 0 when there are more than PALETTE_MAX_COLOURS. The table (HASH_SLOTS
    entries each) is left holding them."""
    for slot in range(HASH_SLOTS):  # a loop: a slice assignment costs the first use compile time
        table_used[slot] = False
    count = 0
    previous = np.int64(-1)  # a run of one colour is looked up once
    for row in range(pixels.shape[1]):
        for col in range(pixels.shape[2]):
            key = colour_key(pixels, row, col)
            if key == previous:
                continue
            previous = key
            slot = find_slot(table_keys, table_used, key)
            if not table_used[slot]:
                if count == PALETTE_MAX_COLOURS:
                    return 0
                table_used[slot] = True
                table_keys[slot] = key
                keys[count] = key
                count += 1
    sort_keys(keys, count)
    return count


@device(cpu_inline=True)
def sort_keys(keys, count):
    """keys[:count] in rising order: an insertion sort (at most PALETTE_MAX_COLOURS keys), which
    compiles in a fraction of the time numpy's sort takes under Numba."""
    for i in range(1, count):
        key = keys[i]
        j = i - 1
        while j >= 0 and keys[j] > key:
            keys[j + 1] = keys[j]
            j -= 1
        keys[j + 1] = key


@device(cpu_inline=True)
def palette_indices(pixels, keys, count, table_keys, table_used, table_index, index_plane):
    """index_plane[row, col] = the rank of the pixel's colour among keys[:count] (tile_palette's table)."""
    for i in range(count):
        table_index[find_slot(table_keys, table_used, keys[i])] = i
    previous = np.int64(-1)
    index = np.int64(0)
    for row in range(pixels.shape[1]):
        for col in range(pixels.shape[2]):
            key = colour_key(pixels, row, col)
            if key != previous:
                previous = key
                index = table_index[find_slot(table_keys, table_used, key)]
            index_plane[row, col] = index


@device(cpu_inline=True)
def palette_may_pay(keys, count, channels):
    """False for a tile of one colour, or of one channel whose values leave no gap (its indices
    would be its values less the smallest: the same residuals, and a table to pay for)."""
    return count >= 2 and (channels > 1 or keys[count - 1] - keys[0] + 1 > count)


@device(cpu_inline=True)
def palette_table_bytes(count, channels, bits):
    return PALETTE_HEADER_BYTES + count * channels * (bits // 8)


@device(cpu_inline=True)
def write_palette_table(keys, count, channels, bits, out, start):
    """The palette stream's kind, count and colour table at out[start:]; its index stream follows."""
    out[start] = KIND_PALETTE
    out[start + 1] = count - 1
    bytes_per_sample = bits // 8
    pos = start + PALETTE_HEADER_BYTES
    for i in range(count):
        for channel in range(channels):
            write_sample(out, pos, (keys[i] >> (16 * (channels - 1 - channel))) & 0xFFFF, bytes_per_sample)
            pos += bytes_per_sample


@device(cpu_inline=True)
def write_palette_member(out, start):
    out[start] = KIND_PALETTE_MEMBER
    return 1
