"""kernels/lz.cu's warp copy (lz_copy_warp) under the emulator, against the CPU decoder (l3codec/lz.py):
hand-made LZ4 blocks whose literals and matches reach each of its paths (a copy of at most 32 bytes, a
byte a lane; longer: a whole 8-byte chunk loaded as one word, a whole chunk gathered byte by byte, a
partial first or last chunk), overlapping matches of
every distance below a chunk and a warp's round, matches that end at the output's end, the longest
match a tile allows, and damaged blocks, whose statuses must be the CPU decoder's."""

from __future__ import annotations

import numpy as np
import pytest
from corruption import first_cpu_status, lz_sequence, lz_stream, single_stream_file

import l3codec
from l3codec import format as fmt
from l3codec.kernels.emulation import decode_batch_emulated

WIDTH, HEIGHT = 512, 8  # one fast tile of 4096 bytes (8-bit) or 8192 (16-bit)
# overlapping distances below a chunk (several wraps in one), about it, and below a warp's round of
# 32 chunks; non-overlapping ones, aligned to a chunk and not
DISTANCES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 40, 63, 64, 100, 255, 256, 257, 1000)
MATCHES = (4, 5, 7, 8, 9, 15, 16, 17, 19, 20, 31, 32, 33, 64, 255, 256, 257, 300, 513)
LITERALS = (0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 31, 33, 255, 256, 270)


def _block(rng, size, distances=DISTANCES, matches=MATCHES, final_match=False):
    """A valid LZ4 block of `size` bytes from random literals and matches drawn from the given sets,
    ending with literals, or (final_match) with a match that reaches the output's end and a token of
    no literals."""
    sequences, produced = [], 0
    while True:
        literals = int(rng.choice(LITERALS)) if produced else 1 + int(rng.choice(LITERALS))
        literals = min(literals, size - produced)
        room = size - produced - literals
        if room < 4:
            sequences.append(lz_sequence(rng.integers(0, 256, size - produced, np.uint8).tobytes()))
            return lz_stream(*sequences)
        offset = min(int(rng.choice(distances)), produced + literals)
        match = room if final_match and room <= 600 else min(int(rng.choice(matches)), room)
        sequences.append(lz_sequence(rng.integers(0, 256, literals, np.uint8).tobytes(), offset, match))
        produced += literals + match
        if produced == size:
            sequences.append(lz_sequence(b""))
            return lz_stream(*sequences)


def _files(seed, count, bits=8, **options):
    rng = np.random.default_rng(seed)
    size = WIDTH * HEIGHT * bits // 8
    return [single_stream_file(_block(rng, size, **options), fmt.MODE_FAST, HEIGHT, width=WIDTH, bits=bits)
            for _ in range(count)]


def _assert_cpu_pixels(files, guard, order):
    images, status = decode_batch_emulated(files, order=order, seed=11, guard=guard)
    assert status.tolist() == [0] * len(files)
    for i, (image, data) in enumerate(zip(images, files)):
        np.testing.assert_array_equal(image, l3codec.decode(data), err_msg=f"file {i}, {guard}, {order}")


@pytest.mark.parametrize(
    ("guard", "order"), [("aligned", "forward"), ("tight", "shuffled"), ("shifted", "reversed")])
def test_every_copy_path_gives_the_cpu_decoders_bytes(guard, order):
    """Random blocks of every distance and length above, at three alignments of the batch (the
    output's address decides which chunks are whole): 8- and 16-bit planes, and blocks whose last
    match ends at the output's end."""
    files = _files(1, 6) + _files(2, 2, bits=16) + _files(3, 4, final_match=True)
    _assert_cpu_pixels(files, guard, order)


@pytest.mark.parametrize("distance", [1, 2, 3, 5, 7, 8, 9, 16, 24, 31])
def test_long_overlapping_matches(distance):
    """A run of one distance below a warp's round, as long as the tile allows (length bytes of 255s):
    byte j repeats byte j mod distance before the match, across many chunks and rounds."""
    size = WIDTH * HEIGHT
    seed = np.arange(1, distance + 1, dtype=np.uint8).tobytes()
    longest = lz_stream(lz_sequence(seed, distance, size - distance), lz_sequence(b""))
    with_literals = lz_stream(lz_sequence(seed + b"\x01\x02\x03", distance, size - distance - 4),
                              lz_sequence(b"\x09"))
    files = [single_stream_file(block, fmt.MODE_FAST, HEIGHT, width=WIDTH)
             for block in (longest, with_literals)]
    _assert_cpu_pixels(files, "aligned", "shuffled")


def test_damaged_blocks_give_the_cpu_decoders_status():
    """Blocks cut short and blocks with a byte changed (lengths, offsets past the output's start or
    0, matches past its end): the kernel's status is the CPU decoder's, and 0 exactly when the CPU
    accepts the block, whose bytes are then the same."""
    rng = np.random.default_rng(5)
    size = WIDTH * HEIGHT
    damaged = []
    for _ in range(24):
        block = bytearray(_block(rng, size))
        if rng.random() < 0.3:
            block = block[: int(rng.integers(1, len(block)))]
        else:
            value = rng.choice([0, 1, 15, 16, 255, rng.integers(256)])
            block[int(rng.integers(1, min(len(block), 64)))] = int(value)
        damaged.append(single_stream_file(bytes(block), fmt.MODE_FAST, HEIGHT, width=WIDTH))
    images, status = decode_batch_emulated(damaged, order="shuffled", seed=2)
    codes = [first_cpu_status(data) for data in damaged]
    assert status.tolist() == codes
    assert fmt.STATUS_CORRUPT in codes and 0 in codes  # both outcomes reached
    for image, data, code in zip(images, damaged, codes):
        if code == 0:
            np.testing.assert_array_equal(image, l3codec.decode(data))
