"""Data-stall analysis by difference (after DS-Analyzer): where a training input pipeline spends its time.

    python -m l3codec.stalls /data/cityscapes-l3 --batch-size 16 --workers 4 --crop 512 --step-ms 120

For the user's dataset and loader settings it measures, each with the same workers:
  fetch, cold    the samples' compressed bytes read from storage (local shards evicted from the
                 page cache first), nothing decoded: the storage's ceiling;
  fetch, warm    the same bytes again from memory: the ceiling of reading alone;
  loader, cold   the whole Loader (decode, crop, resize, flip) with the shards evicted first;
  loader, warm   the whole Loader again, the shards in the page cache: the preparation's ceiling.
With decode="gpu" and no GPU the loader rows measure the GPU path's host side (reading,
validation, staging) with the decode stubbed, and say so.

A step of T ms per batch that overlaps its input (the loader prefetches) waits (P - T) / P of the
time, with P = max(D, T + H): D is the loader's time per batch and H the main process's share
of receiving a batch that is ready (measured too);
the rate used is the warm one when the dataset fits in the memory available for the page
cache, else the cold one. The bottleneck is storage when fetching alone is not much faster
than the whole loader, otherwise the preparation (CPU decode, or the GPU path's host staging).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from .dataset import shard_name
from .format import L3Error

HANDOFFS = 3  # batches timed for the main process's own share of a ready batch
# fetching alone must be this much faster than the whole loader for storage not to be its limit
STORAGE_MARGIN = 1.25


@dataclass
class Rate:
    stage: str
    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class Prediction:
    step_ms: float
    data_ms_per_batch: float
    stall_fraction: float
    bottleneck: str
    rate_used: str


def evict_from_page_cache(paths) -> int:
    """Ask the kernel to drop these files' clean pages (no root needed); bytes covered."""
    covered = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            covered += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return covered


class _FetchOnly:
    """A map-style dataset whose items are the bytes of a sample's fields, copied out of the shard
    (a memory-mapped view alone would read nothing)."""

    def __init__(self, reader, fields):
        self.reader, self.fields = reader, fields

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, index):
        return sum(len(self.reader.read(index, field).tobytes()) for field in self.fields)


def _stub_decode(staged, buffer, out, status, stream):
    """No decode: the GPU path's host side alone."""


def _timed_epoch_prefix(batches, count: int, warmup: int, handoffs: int = 0) -> tuple:
    """(images, seconds) over `count` batches after `warmup` untimed ones, and the mean seconds
    that `handoffs` more batches take to arrive when each has had time to be ready."""
    iterator = iter(batches)
    for _ in range(warmup):
        next(iterator)
    images, start = 0, time.perf_counter()
    for _ in range(count):
        batch = next(iterator)
        images += len(batch["key"]) if isinstance(batch, dict) else len(batch)
    seconds = time.perf_counter() - start
    waits = []
    for _ in range(handoffs):
        time.sleep(2 * seconds / count)
        before = time.perf_counter()
        next(iterator)
        waits.append(time.perf_counter() - before)
    return images, seconds, (sum(waits) / len(waits) if waits else 0.0)


def measure(root, *, split="train", fields=None, batch_size=16, workers=2, crop=None, decode="cpu",
            batches=None, warmup=2, storage_options=None) -> dict:
    """The four rates (fetch and loader, cold and warm) for these loader settings, each over
    `batches` batches of one epoch (None: as many as the split holds, up to 20)."""
    import torch
    from torch.utils.data import DataLoader

    from .loader import L3Dataset, Loader

    dataset = L3Dataset(root, split=split, fields=fields, decode=decode, storage_options=storage_options)
    reader = dataset.reader
    if batches is None:  # as many as one epoch holds, up to 20
        batches = min(20, len(reader) // batch_size - warmup - HANDOFFS)
    needed = (max(batches, 1) + warmup + HANDOFFS) * batch_size
    if len(reader) < needed:
        raise L3Error(f"{len(reader)} samples in split {split!r}; {needed} are needed for {max(batches, 1)} "
                      f"timed batches of {batch_size} (and {warmup + HANDOFFS} more): lower --batches or "
                      "--batch-size")
    shards = [] if reader.remote else [os.path.join(reader.root, reader.split, shard_name(int(s)))
                                       for s in np.unique(reader.index["shard"])]
    cuda = decode == "gpu" and torch.cuda.is_available()

    def fetch():
        loader = DataLoader(_FetchOnly(reader, dataset.fields), batch_size=batch_size, num_workers=workers,
                            shuffle=True, collate_fn=list, multiprocessing_context="forkserver" if workers else None,
                            generator=torch.Generator().manual_seed(0))
        return _timed_epoch_prefix(loader, batches, warmup)[:2]

    def load():
        options = {} if cuda or decode == "cpu" else {"decode_step": _stub_decode}
        loader = Loader(dataset, batch_size, crop=crop, num_workers=workers, device="cuda" if cuda else "cpu",
                        **options)
        images, seconds, handoff = _timed_epoch_prefix(loader, batches, warmup, HANDOFFS)
        handoffs.append(handoff)
        return images, seconds

    rates, handoffs = {}, []
    for stage, run in (("fetch", fetch), ("loader", load)):
        for temperature in ("cold", "warm"):
            if temperature == "cold":
                evict_from_page_cache(shards)
            images, seconds = run()
            rates[f"{stage}, {temperature}"] = Rate(f"{stage}, {temperature}", images, seconds)
    sizes = sum(int(reader.index[f"{field}_size"].sum()) for field in dataset.fields)
    return {
        "rates": rates, "dataset_bytes": sizes, "images": len(reader), "batch_size": batch_size,
        "workers": workers, "decode": decode, "gpu": cuda, "remote": reader.remote,
        "crop": repr(crop), "fits_in_memory": sizes <= _page_cache_bytes(), "handoff_ms": 1e3 * min(handoffs),
    }


def _page_cache_bytes() -> int:
    """Memory the page cache may hold: what is available now (MemAvailable)."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def predict(rates: dict, batch_size: int, step_ms: float, fits_in_memory: bool, decode: str = "cpu",
            gpu: bool = False, handoff_ms: float = 0.0) -> Prediction:
    """The fraction of time a step of step_ms per batch waits for data, and what limits the data.

    The workers make a batch every data_ms; the main process takes handoff_ms to receive a ready
    one, so an iteration lasts max(data_ms, step_ms + handoff_ms) and waits all but step_ms of it."""
    temperature = "warm" if fits_in_memory else "cold"
    loader, fetch = rates[f"loader, {temperature}"], rates[f"fetch, {temperature}"]
    data_ms = 1e3 * batch_size / loader.images_per_s
    period = max(data_ms, step_ms + handoff_ms)
    stall = (period - step_ms) / period if period > 0 else 0.0
    if data_ms <= step_ms:
        bottleneck = "none: the step is slower than the data"
    elif fetch.images_per_s < STORAGE_MARGIN * loader.images_per_s:
        bottleneck = "storage (fetching alone is hardly faster than the whole loader)"
    elif decode == "gpu" and not gpu:
        bottleneck = "host-side staging (the GPU path's reading, validation and packing)"
    elif decode == "gpu":
        bottleneck = "host-side staging or the GPU decode"
    else:
        bottleneck = "CPU decode and finishing in the workers"
    return Prediction(step_ms, data_ms, stall, bottleneck, f"loader, {temperature}")


def report(result: dict, predictions: list) -> str:
    lines = [
        f"{result['images']} samples, {result['dataset_bytes'] / 1e6:.1f} MB compressed "
        f"({'fits' if result['fits_in_memory'] else 'does not fit'} in available memory); batch "
        f"{result['batch_size']}, {result['workers']} workers, decode={result['decode']}"
        + ("" if result["gpu"] or result["decode"] == "cpu" else " (no GPU: decode stubbed, host side only)"),
        "",
        "| stage | images/s |",
        "|---|---|",
    ]
    lines += [f"| {rate.stage} | {rate.images_per_s:.1f} |" for rate in result["rates"].values()]
    lines += ["", f"A ready batch takes {result['handoff_ms']:.1f} ms to reach the training loop."]
    if predictions:
        lines += ["", "| step ms | data ms/batch | predicted wait | bottleneck |", "|---|---|---|---|"]
        lines += [f"| {p.step_ms:g} | {p.data_ms_per_batch:.1f} | {p.stall_fraction:.0%} | {p.bottleneck} |"
                  for p in predictions]
    return "\n".join(lines)


def main(argv=None) -> int:
    from .geometry import CenterCrop, RandomResizedCrop

    parser = argparse.ArgumentParser(prog="l3 stalls", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a converted dataset: a path or an fsspec URL")
    parser.add_argument("--split", default="train")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--decode", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--crop", type=int, help="RandomResizedCrop(N, flip=0.5); --center for CenterCrop(N)")
    parser.add_argument("--center", action="store_true")
    parser.add_argument("--batches", type=int, help="batches timed per stage (default: as many as one epoch "
                        "holds, up to 20)")
    parser.add_argument("--step-ms", type=float, nargs="*", default=[], help="model step times to predict for")
    parser.add_argument("--json", help="write the measurements and predictions here")
    args = parser.parse_args(argv)
    crop = None
    if args.crop:
        crop = CenterCrop(args.crop) if args.center else RandomResizedCrop(args.crop, flip=0.5)
    try:
        result = measure(args.dataset, split=args.split, batch_size=args.batch_size, workers=args.workers,
                         crop=crop, decode=args.decode, batches=args.batches)
    except (L3Error, OSError) as error:
        print(f"l3 stalls: {error}", file=sys.stderr)
        return 1
    predictions = [predict(result["rates"], args.batch_size, step, result["fits_in_memory"], args.decode,
                           result["gpu"], result["handoff_ms"]) for step in args.step_ms]
    print(report(result, predictions))
    if args.json:
        payload = {**result, "rates": {k: {**asdict(v), "images_per_s": v.images_per_s}
                                       for k, v in result["rates"].items()},
                   "predictions": [asdict(p) for p in predictions]}
        with open(args.json, "w") as file:
            json.dump(payload, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
