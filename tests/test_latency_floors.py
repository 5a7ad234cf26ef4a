"""bench/latency_floors.py's LZ chain model: its copy rounds are the chunks kernels/lz.cu's lz_copy_warp
cuts a copy into, and its walk of a block (plain or Huffman-coded) sees every sequence and byte."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
from corruption import coded_lz, lz_sequence, lz_stream, single_stream_file

from l3codec import format as fmt

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def floors():
    spec = importlib.util.spec_from_file_location("latency_floors", REPO / "bench" / "latency_floors.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_copy_rounds_are_the_kernels_chunks(floors):
    # a chunk: the bytes of one aligned LANE_BYTES word of the output; a round: 32 lanes' chunks
    width = floors.LANE_BYTES
    for length in (0, 1, 7, 8, 9, 255, 256, 257, 1000):
        for skew in range(width):
            chunks = len({address // width for address in range(skew, skew + length)})
            assert floors.copy_rounds(length, skew, width) == -(-chunks // 32)
            assert floors.copy_rounds(length, skew, 1) == -(-length // 32)


@pytest.mark.parametrize("coded", [False, True])
def test_the_walk_sees_every_sequence_and_byte(floors, coded):
    width, height = 64, 8
    row = bytes(range(64))
    block = lz_stream(lz_sequence(row, 64, 300), lz_sequence(b"\x01" * 20, 3, 100), lz_sequence(bytes(28)))
    stream = coded_lz(block) if coded else block
    assert stream[0] == (fmt.KIND_LZ_CODED if coded else fmt.KIND_LZ)
    data = single_stream_file(stream, fmt.MODE_FAST, height, width=width)
    (chain,) = floors.batch_lz_chains([data])
    assert chain.output_bytes == width * height and chain.sequences == 3
    # the matches' rounds: 300 and 100 bytes at a byte a lane; the plain literals' too (64, 20, 28)
    before = -(-300 // 32) + -(-100 // 32) + (0 if coded else -(-64 // 32) + 1 + 1)
    assert chain.copy_rounds_before == before
    assert (chain.symbols > 0) == coded
    assert np.all(np.array(chain.seconds()) <= np.array(chain.seconds(before=True)))
