"""Dependent-latency floors of a GPU batch, which an issue-rate estimate does not see (bench/gpu.py
prints them in its report; run alone for LZ chains):

    python bench/latency_floors.py [file.png or folder ...] [--mode fast]

- the LZ expansion (kernels/lz.cu): a warp per stream, one sequence after another; each sequence is
  a chain of dependent reads of the stream (its token, length bytes, offset; a coded block's symbol
  decodes) and the copy rounds of its literals and match, each a dependent round trip to output
  written before. The copy rounds are counted for lanes of 1 byte (lz.cu before lz_copy_warp) and of
  LZ_COPY_BYTES (now; a copy of at most 32 bytes is one round either way). The batch waits for its
  longest stream before any decode starts.
- a compact band: COMPACT_BAND_ROWS + tile width - 1 dependent wavefront steps, whatever the batch.
- per batch: the launches, the copy of the packed batch to the device and the status read back.

Each is priced with the ranges below, named assumptions for an H100 (no measurement here).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from dataclasses import dataclass

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import l3codec
from l3codec import batch as l3batch
from l3codec import format as fmt
from l3codec import huffman, lz_stage
from l3codec.lz4block import MIN_MATCH

CLOCK_HZ = 1.755e9  # H100 SXM sustained
WARP = 32
# a lane's bytes per copy round: kernels/lz.cu before lz_copy_warp, and its LZ_COPY_BYTES
LANE_BYTES_BEFORE, LANE_BYTES = 1, 8
# Assumed (H100, not measured): a copy round's dependent load of output written before (an L2 hit to a
# DRAM access)
ROUND_TRIP_CYCLES = (250, 800)
# a dependent read of the stream itself (token, length bytes, offset; a coded block's bit-cache refill):
# sequential, so an L1 hit (~33 cycles) but for the first read of each 32-byte sector (1 in 8 or so)
STREAM_READ_CYCLES = (60, 130)
# a coded block's symbol: a shared-memory lookup and the dependent shifts and compares around it
SYMBOL_CYCLES = (40, 80)
# a compact wavefront step: a shuffle, shared-memory traffic and the adaptive coder's dependent ops
BAND_STEP_CYCLES = (150, 500)
LAUNCH_SECONDS = (3e-6, 6e-6)  # a kernel launch after the one before it on a stream
COPY_BYTES_PER_SECOND = (25e9, 50e9)  # host to device, pinned (PCIe 4 to 5)
STATUS_READ_SECONDS = (10e-6, 30e-6)  # the status array back and the stream synchronised


@dataclass
class LzChain:
    """One LZ stream's serial work on its warp."""

    output_bytes: int = 0
    sequences: int = 0
    copy_rounds_before: int = 0  # a warp's copy rounds, each a dependent global round trip: 1-byte lanes
    copy_rounds: int = 0  # the same with LANE_BYTES lanes
    stream_reads: int = 0  # dependent reads of the stream
    symbols: int = 0  # a coded block's symbol decodes (0 for a plain block)

    def seconds(self, before: bool = False) -> tuple:
        """(low, high) seconds of the chain under the assumed cycle ranges."""
        rounds = self.copy_rounds_before if before else self.copy_rounds
        return tuple((rounds * trip + self.stream_reads * read + self.symbols * symbol) / CLOCK_HZ
                     for trip, read, symbol in zip(ROUND_TRIP_CYCLES, STREAM_READ_CYCLES, SYMBOL_CYCLES))


def copy_rounds(length: int, skew: int, lane_bytes: int) -> int:
    """A warp's rounds to copy `length` bytes starting `skew` bytes past an aligned address, each lane
    taking lane_bytes-byte aligned chunks (lz_copy_warp; lane_bytes 1: a byte a lane)."""
    if length <= 0:
        return 0
    chunks = -(-(skew % lane_bytes + length) // lane_bytes)
    return -(-chunks // WARP)


def lz_chain(buf: np.ndarray, start: int, end: int, size: int, out_address: int) -> LzChain:
    """The chain of the LZ stream buf[start:end] (plain or coded; `size` output bytes) whose output
    starts at out_address (its alignment decides the chunks). A plain block's literals are copied
    like a match; a coded block decodes its literals a symbol each (every lane decodes them: no round
    trip), and its bit cache refills with a dependent load about every 32 bits."""
    chain = LzChain()

    def copy(length):
        skew = out_address + chain.output_bytes
        chain.copy_rounds_before += copy_rounds(length, skew, LANE_BYTES_BEFORE)
        chain.copy_rounds += copy_rounds(length, skew, LANE_BYTES)
        chain.output_bytes += length

    if int(buf[start]) in (fmt.KIND_LZ_CODED, fmt.KIND_PIXEL_LZ_CODED):
        tables = np.zeros((huffman.TABLES, huffman.TABLE_SIZE), np.int64)
        status, pos = huffman.read_tables(buf, start + 1, end, tables)
        if status != fmt.STATUS_OK:
            raise ValueError("a coded LZ stream whose tables do not read")
        bit, end_bit = pos * 8, end * 8
        while True:
            token, bit = huffman.decode_symbol(buf, bit, tables, huffman.TOKEN_TABLE)
            literals, bit = huffman.coded_length(buf, bit, end_bit, token >> 4)
            for _ in range(literals):
                _, bit = huffman.decode_symbol(buf, bit, tables, huffman.LITERAL_TABLE)
            chain.sequences += 1
            chain.symbols += 1 + _extension_bytes(token >> 4, literals) + literals
            chain.output_bytes += literals
            if chain.output_bytes >= size:
                break
            _, bit = huffman.decode_symbol(buf, bit, tables, huffman.OFFSET_LOW_TABLE)
            _, bit = huffman.decode_symbol(buf, bit, tables, huffman.OFFSET_HIGH_TABLE)
            match, bit = huffman.coded_length(buf, bit, end_bit, token & 15)
            chain.symbols += 2 + _extension_bytes(token & 15, match)
            copy(match + MIN_MATCH)
        chain.stream_reads += -(-(end - pos) // 4)
        return chain
    pos = start + 1
    while True:
        token = int(buf[pos])
        literals, after = _plain_length(buf, pos + 1, token >> 4)
        chain.stream_reads += 1 + _extension_bytes(token >> 4, literals)  # the token, each length byte
        copy(literals)
        pos = after + literals
        chain.sequences += 1
        if pos >= end:
            return chain
        match, pos = _plain_length(buf, pos + 2, token & 15)
        chain.stream_reads += 1 + _extension_bytes(token & 15, match)  # the offset's two bytes: one read
        copy(match + MIN_MATCH)


def _extension_bytes(nibble: int, length: int) -> int:
    """The length bytes after a token nibble (15: more follow) for a length of `length`."""
    return (length - 15) // 255 + 1 if nibble == 15 else 0


def _plain_length(buf, pos, length):
    """lz4block.lz_length: (length, the position after its bytes)."""
    if length == 15:
        while True:
            byte = int(buf[pos])
            pos += 1
            length += byte
            if byte != 255:
                break
    return length, pos


def batch_lz_chains(files: list) -> list:
    """The LzChain of every LZ stream the batch of encoded files expands, with its output's address
    as a device would see it (the scratch area 8-byte aligned after the packed batch)."""
    batch = l3batch.prepare(files)
    scratch = -(-batch.data.size // 8) * 8
    chains = []
    for record in ([] if batch.lz is None else batch.lz.records):
        channels = int(record["channels"])
        span = int(lz_stage.plane_span(record))
        within = int(record["prefix_bytes"]) + 1 if channels == 1 else channels * span
        buf = batch.data
        start, end = int(record["source"]), int(record["source_end"])
        size = channels * int(record["plane_bytes"])
        chains.append(lz_chain(buf, start, end, size, scratch + int(record["target"]) + within))
    return chains


def band_floor_seconds(info: fmt.Info) -> tuple:
    """A compact band's dependent steps (rows + the widest tile's columns - 1), priced; 0 in fast mode."""
    if info.mode != "compact":
        return (0.0, 0.0)
    widest = max(int(info.tile_columns(tx)) for tx in range(info.tiles_x))
    steps = min(fmt.COMPACT_BAND_ROWS, info.height) + widest - 1
    return tuple(steps * cycles / CLOCK_HZ for cycles in BAND_STEP_CYCLES)


def fixed_seconds(files: list, launches: int) -> tuple:
    """Per-batch costs: the launches, the batch's bytes copied in, the status read back."""
    size = sum(len(f) for f in files)
    return tuple(launches * launch + size / rate + status for launch, rate, status
                 in zip(LAUNCH_SECONDS, COPY_BYTES_PER_SECOND[::-1], STATUS_READ_SECONDS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=[str(REPO.parent / "shared" / "corpus" / "labels")])
    parser.add_argument("--mode", default="fast", choices=["fast", "compact"])
    args = parser.parse_args()
    import cv2

    paths = []
    for path in map(pathlib.Path, args.paths):
        paths += sorted(path.glob("*.png")) if path.is_dir() else [path]
    print(f"| {args.mode} file | LZ streams | output MB | longest stream: KB | sequences | copy rounds, "
          f"1-byte lanes | copy rounds, {LANE_BYTES}-byte lanes | stream reads | symbols | ms before "
          "| ms now |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        chains = batch_lz_chains([l3codec.encode(image, mode=args.mode)])
        if not chains:
            print(f"| {path.name} | 0 |" + " |" * 9)
            continue
        longest = max(chains, key=lambda chain: chain.seconds(before=True)[0])
        before, now = longest.seconds(before=True), longest.seconds()
        print(f"| {path.name} | {len(chains)} | {sum(c.output_bytes for c in chains) / 1e6:.2f} | "
              f"{longest.output_bytes / 1e3:.0f} | {longest.sequences} | {longest.copy_rounds_before} | "
              f"{longest.copy_rounds} | {longest.stream_reads} | {longest.symbols} | "
              f"{before[0] * 1e3:.2f}-{before[1] * 1e3:.2f} | {now[0] * 1e3:.2f}-{now[1] * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
