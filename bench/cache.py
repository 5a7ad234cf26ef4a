"""The sample cache's own costs, on a local dataset already in the page cache (where a cache
cannot pay: it copies what memory already holds).

    python bench/cache.py --out bench/results [--label NAME]

1. Epoch time, reading every sample's image bytes (reader.read, no decode) in a random order:
   no cache, and a MinIO cache that is full (capacity one entry: every miss is refused).
   The same through the loader (decode="cpu", batch 16, no workers): seconds per epoch.
2. LRU eviction cost per insert: a full LRU cache of N entries of 4 KB; time of inserts that
   each evict one entry (500 of them).
Writes OUT/cache-<label>.json; bench/results/cache.md compares labels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l3codec.cache import SampleCache  # noqa: E402
from l3codec.converters import convert  # noqa: E402
from l3codec.dataset import open_dataset  # noqa: E402


def make_dataset(folder: Path, samples: int, side: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:side, 0:side]
    for n in range(samples):
        base = (x * (n % 7 + 1) + y * (n % 5 + 1)) % 256
        pixels = np.clip(base[..., None] + rng.integers(-8, 9, (side, side, 3)), 0, 255).astype(np.uint8)
        (folder / "src" / f"c{n % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / "src" / f"c{n % 2}" / f"{n}.png")
    convert("folder", folder / "src", folder / "l3", workers=0, progress=False)
    return folder / "l3"


def epoch_seconds(reader, epochs: int) -> float:
    times = []
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(len(reader))
        start = time.perf_counter()
        for i in order:
            reader.read(int(i), "image")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loader_epoch_seconds(dataset: Path, cache, epochs: int) -> float:
    from l3codec.loader import Decode, L3Dataset, Loader

    loader = Loader(L3Dataset(dataset, cache=cache), 16, decode=Decode("cpu", device="cpu"))
    times = []
    for epoch in range(epochs + 1):  # the first fills the cache and compiles
        loader.set_epoch(epoch)
        start = time.perf_counter()
        for _ in loader:
            pass
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def eviction_us_per_insert(folder: Path, entries: int, inserts: int) -> float:
    data = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    cache = SampleCache(folder, entries * (4096 + 64), policy="lru")
    for i in range(entries):
        cache.put("0123456789abcdef", "train", i, "image", data)
    start = time.perf_counter()
    for i in range(entries, entries + inserts):
        cache.put("0123456789abcdef", "train", i, "image", data)
    return (time.perf_counter() - start) / inserts * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--label", default="current")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--entries", type=int, nargs="+", default=[1000, 4000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as work:
        work = Path(work)
        dataset = make_dataset(work, args.samples, args.side)
        plain = open_dataset(dataset, "train")
        epoch_seconds(plain, 1)  # into the page cache
        entry = int(plain.index["image_size"].max()) + 64
        cached = open_dataset(dataset, "train", cache=SampleCache(work / "full", entry))
        epoch_seconds(cached, 1)  # fills it (one entry): full from here on
        result = {"label": args.label, "samples": args.samples, "side": args.side,
                  "no_cache_s": epoch_seconds(plain, args.epochs),
                  "full_minio_s": epoch_seconds(cached, args.epochs),
                  "loader_no_cache_s": loader_epoch_seconds(dataset, None, args.epochs),
                  "loader_full_minio_s": loader_epoch_seconds(dataset, SampleCache(work / "full-loader", entry),
                                                              args.epochs),
                  "lru_us_per_insert": {str(n): eviction_us_per_insert(work / f"lru-{n}", n, 500)
                                        for n in args.entries}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"cache-{args.label}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
