"""What entropy coding the LZ streams would save: evidence for the next format step (#22).

An LZ stream (docs/FORMAT.md §5.2, §5.3) is an LZ4 block: tokens, literals and offsets as
whole bytes. PNG's deflate Huffman-codes the same kinds of symbols, which is where L3 stays
above PNG on rendered text. For each LZ stream of every file this script computes the size of
its block Huffman-coded in two ways, without changing the format:

- one table: every byte of the block under one Huffman code of the block's own byte counts;
- four tables: literals, tokens, offsets' low and high bytes each under their own code (a
  length's extension bytes stay raw).

Written before format version 8, which codes LZ blocks this way (four tables, docs/FORMAT.md §5.4):
run on version-8 files it sees only the blocks left plain. bench/results/lz-entropy.md holds its
figures at version 7, the evidence for that step.

A table costs 32 bytes of symbol bitmap and 4 bits per symbol present (code lengths of at most
15 bits, which these blocks never exceed: the script checks), a block 4 bytes for its size; a
coded block that is not smaller keeps its plain form. Sizes are against the source files.

    python bench/make_corpus.py /tmp/l3-corpus
    python bench/lz_entropy.py /tmp/l3-corpus/documents /tmp/l3-corpus/screens ../shared/corpus/flat --out bench/results/lz-entropy.md
"""

from __future__ import annotations

import argparse
import heapq
from pathlib import Path

import numpy as np
from PIL import Image

import l3codec
from l3codec import format as fmt
from l3codec import streams

TABLE_BITMAP_BYTES = 32
LENGTH_BITS = 4
MAX_CODE_LENGTH = 15
BLOCK_SIZE_BYTES = 4


def huffman_lengths(counts: np.ndarray) -> np.ndarray:
    """Code lengths of a Huffman code for the symbols with counts > 0 (one symbol: length 1)."""
    lengths = np.zeros(len(counts), np.int64)
    present = [int(s) for s in np.flatnonzero(counts)]
    if len(present) == 1:
        lengths[present[0]] = 1
        return lengths
    heap = [(int(counts[s]), s, [s]) for s in present]
    heapq.heapify(heap)
    while len(heap) > 1:
        count_a, key_a, members_a = heapq.heappop(heap)
        count_b, _, members_b = heapq.heappop(heap)
        for s in members_a + members_b:
            lengths[s] += 1
        heapq.heappush(heap, (count_a + count_b, key_a, members_a + members_b))
    return lengths


def coded_bytes(symbols: np.ndarray) -> int:
    """Bytes of symbols (uint8) Huffman-coded with their own table, the table included."""
    if len(symbols) == 0:
        return 0
    counts = np.bincount(symbols, minlength=256)
    lengths = huffman_lengths(counts)
    if lengths.max() > MAX_CODE_LENGTH:
        raise SystemExit(f"a code of {lengths.max()} bits: this estimate assumes at most {MAX_CODE_LENGTH}")
    table = TABLE_BITMAP_BYTES + (np.count_nonzero(counts) * LENGTH_BITS + 7) // 8
    return table + (int(counts @ lengths) + 7) // 8


def lz4_parts(block: np.ndarray):
    """The block's (literals, tokens, offset low bytes, offset high bytes, count of extension bytes)."""
    literals, tokens, low, high = [], [], [], []
    extension = 0
    pos, end = 0, len(block)
    while pos < end:
        token = int(block[pos])
        tokens.append(token)
        pos += 1
        count = token >> 4
        if count == 15:
            while True:
                byte = int(block[pos])
                pos += 1
                extension += 1
                count += byte
                if byte != 255:
                    break
        literals.append(block[pos:pos + count])
        pos += count
        if pos >= end:
            break
        low.append(block[pos])
        high.append(block[pos + 1])
        pos += 2
        if token & 15 == 15:
            while True:
                byte = int(block[pos])
                pos += 1
                extension += 1
                if byte != 255:
                    break
    as_bytes = lambda values: np.asarray(values, np.uint8)  # noqa: E731
    return (np.concatenate(literals) if literals else as_bytes([]), as_bytes(tokens), as_bytes(low), as_bytes(high),
            extension)


def lz_blocks(data: bytes):
    """Each plain LZ stream's LZ4 block (kinds 6 and 7; a palette's LZ index plane too)."""
    buf = np.frombuffer(data, np.uint8)
    for _, start, end in streams.plane_streams(data):
        if buf[start] in (fmt.KIND_LZ, fmt.KIND_PIXEL_LZ):
            yield buf[start + 1:end]


def measure_set(folder: Path, mode: str) -> dict:
    totals = {"source": 0, "l3": 0, "lz": 0, "one": 0, "four": 0}
    for path in sorted(folder.glob("*.png")):
        image = np.asarray(Image.open(path))
        if image.ndim == 3 and image.shape[2] == 4 and (image[..., 3] == 255).all():
            image = image[..., :3]
        data = l3codec.encode(image, mode=mode)
        totals["source"] += path.stat().st_size
        totals["l3"] += len(data)
        for block in lz_blocks(data):
            literals, tokens, low, high, extension = lz4_parts(block)
            plain = len(block)
            one = BLOCK_SIZE_BYTES + coded_bytes(block)
            four = BLOCK_SIZE_BYTES + extension + sum(coded_bytes(part) for part in (literals, tokens, low, high))
            totals["lz"] += plain
            totals["one"] += min(one, plain) - plain
            totals["four"] += min(four, plain) - plain
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of PNG files")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    lines = ["| set | mode | L3 / source | LZ share of L3 | one table | four tables |", "|---|---|---|---|---|---|"]
    for folder in args.folders:
        for mode in ("compact", "fast"):
            t = measure_set(folder, mode)
            source = t["source"]
            lines.append(f"| {folder.parent.name}/{folder.name} | {mode} | {t['l3'] / source:.3f} | {t['lz'] / t['l3']:.2f} "
                         f"| {(t['l3'] + t['one']) / source:.3f} | {(t['l3'] + t['four']) / source:.3f} |")
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("# Entropy-coded LZ streams: estimated sizes against the source files\n\n"
                            f"Written by `python bench/lz_entropy.py` at format version {fmt.VERSION} "
                            "(see the script for what each column assumes).\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
