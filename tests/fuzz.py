"""Mutation fuzzer for the decoder; keeps a replayable corpus in tests/fuzz_corpus/.

    python tests/fuzz.py [--iterations N] [--seed S]

Mutates the golden files (payload damage with resealed checksums, header fields,
truncation) and decodes each with verify=False. Any outcome other than an image of
the declared shape or an L3Error is a bug: the file is saved as crash-*.l3 and the
run fails. A sample of the inputs that reached the stream decoders and were
rejected there is saved too, so the replay test exercises those paths forever.
"""

import argparse
import pathlib
import re
import sys

import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import l3codec  # noqa: E402
from corruption import flip_bits, mutate_payload  # noqa: E402

CORPUS = HERE / "fuzz_corpus"


def outcome(data: bytes) -> str:
    """'image', 'error: <message>', or 'bug: <what>'."""
    try:
        image = l3codec.decode(data, verify=False)
    except l3codec.L3Error as error:
        return f"error: {error}"
    except Exception as error:  # noqa: BLE001 - anything but L3Error is the bug we hunt
        return f"bug: {type(error).__name__}: {error}"
    info = l3codec.info(data)
    if image.shape != info.shape or image.dtype != info.dtype:
        return "bug: wrong shape or dtype"
    return "image"


def rejected_kind(data: bytes, result: str) -> int:
    """The kind byte of the stream a rejection names ("corrupt stream (tile T, channel C)")."""
    tile, channel = map(int, re.search(r"tile (\d+), channel (\d+)", result).groups())
    parsed = l3codec.format.parse(data, verify=False)
    return data[parsed.stream_starts[tile * parsed.info.channels + channel]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=int, default=40, help="stream-level rejections to save")
    parser.add_argument("--kind", type=int, default=None,
                        help="save only rejections of a stream of this kind byte (a new kind's decoder)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    seeds = [path.read_bytes() for path in sorted((HERE / "golden").glob("*.l3"))]
    CORPUS.mkdir(exist_ok=True)
    kept = bugs = 0
    for i in range(args.iterations):
        source = seeds[int(rng.integers(len(seeds)))]
        damaged = mutate_payload(source, rng) if rng.random() < 0.8 else flip_bits(source, rng, 1)
        result = outcome(damaged)
        if result.startswith("bug"):
            bugs += 1
            (CORPUS / f"crash-{args.seed}-{i}.l3").write_bytes(damaged)
            print(f"iteration {i}: {result}")
        elif (result.startswith("error: corrupt stream") and kept < args.keep
              and (args.kind is None or rejected_kind(damaged, result) == args.kind)):
            kept += 1
            (CORPUS / f"stream-{args.seed}-{i}.l3").write_bytes(damaged)
    print(f"{args.iterations} inputs, {bugs} bugs, {kept} stream-level rejections kept in {CORPUS}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
