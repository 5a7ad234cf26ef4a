"""Data-stall analysis by difference (after DS-Analyzer): where a training input pipeline spends its time.

    python -m l3codec.stalls /data/cityscapes-l3 --batch-size 16 --workers 4 --crop 512 --step-ms 120

For the user's dataset and loader settings it measures, each with the same workers:
  fetch, cold    the samples' compressed bytes read from storage (local shards evicted from the
                 page cache first), nothing decoded: the storage's ceiling; whole batches, read
                 as the Loader's workers read them (DatasetReader.read_many: concurrent requests
                 on a remote dataset);
  fetch, warm    the same bytes again from memory: the ceiling of reading alone;
  loader, cold   the whole Loader (decode, crop, resize, flip) with the shards evicted first;
  loader, warm   the whole Loader again, the shards in the page cache: the preparation's ceiling.
With decode="gpu" and no GPU the loader rows measure the GPU path's host side (reading,
validation, staging) with the decode stubbed, and say so. Each stage runs --repeats times,
interleaved, over as many epochs as plan_batches asks (a split of one whole batch will do);
the median run is used and the slowest and fastest are shown. A remote dataset has no page
cache to evict from: it is read from storage every epoch, and its cold rate is used.

A step of T ms per batch that overlaps its input (the loader prefetches) waits (P - T) / P of the
time, with P = max(D, T + H): D is the loader's time per batch and H the main process's share
of receiving a batch that is ready (measured too);
the rate used is the warm one when the dataset fits in the memory available for the page
cache, else the cold one. The bottleneck is storage when fetching alone is not much faster
than the whole loader, otherwise the preparation (CPU decode, or the GPU path's host staging).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from .dataset import shard_name
from .format import L3Error

HANDOFFS = 3  # batches timed for the main process's own share of a ready batch
MAX_TIMED = 20  # timed batches per run at most
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
    """A map-style dataset whose items are whole batches (lists of sample indices), read as the
    Loader's workers read them: reader.read_many (concurrent on a remote dataset), each member's
    bytes copied out (a memory-mapped view alone would read nothing); nothing decoded."""

    def __init__(self, reader, fields):
        self.reader, self.fields = reader, fields

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, indices):
        requests = [(int(i), field) for i in indices for field in self.fields]
        total = 0
        for data in self.reader.read_many(requests):
            if isinstance(data, BaseException):
                raise data
            total += len(np.asarray(data).tobytes())
        return list(indices)


def _stub_decode(staged, buffer, out, status, stream):
    """No decode: the GPU path's host side alone."""


def plan_batches(samples: int, batch_size: int, workers: int, batches: int | None = None) -> tuple:
    """(untimed, timed, hand-over) batch counts, read over as many epochs as they take (a small
    split is read several times, its epochs' boundaries included, as training reads it): the
    untimed ones carry the workers' start (the Loader's first, the main process's own, and each
    worker's first); the timed ones are whole rounds of the workers (they hand over a round at a
    time, so a part of one would time the hand-over, not the rate); the hand-over ones time the
    main process's share of a ready batch. Needs one whole batch."""
    if samples < batch_size or batch_size < 1:
        raise L3Error(f"{samples} samples: l3 stalls needs one whole batch of {batch_size} at least: "
                      "lower --batch-size")
    rounds = max(workers, 1)
    timed = MAX_TIMED if batches is None else batches
    timed = max(timed - timed % rounds, rounds)
    return (rounds + 1 if workers else 1), timed, HANDOFFS


def _epochs(loader, set_epoch=None):
    """The loader's batches, epoch after epoch, for ever."""
    for epoch in itertools.count():
        if set_epoch is not None:
            set_epoch(epoch)
        yield from loader


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


def _say(message: str) -> None:
    print(f"l3 stalls: {message}", file=sys.stderr, flush=True)


def measure(root, *, split="train", fields=None, batch_size=16, workers=2, crop=None, decode="cpu",
            batches=None, repeats=3, storage_options=None, progress=_say) -> dict:
    """The four rates (fetch and loader, cold and warm) for these loader settings, each measured
    `repeats` times (interleaved) over the timed batches of plan_batches; result["rates"] holds
    each stage's median run, result["spread"] its slowest and fastest images/s."""
    import torch
    from torch.utils.data import DataLoader

    from .loader import Decode, L3Dataset, Loader, Workers
    from .order import EpochOrder

    say = progress or (lambda message: None)
    dataset = L3Dataset(root, split=split, fields=fields, storage_options=storage_options)
    reader = dataset.reader
    warmup, timed, handoff_batches = plan_batches(len(reader), batch_size, workers, batches)
    shards = [] if reader.remote else [os.path.join(reader.root, reader.split, shard_name(int(s)))
                                       for s in np.unique(reader.index["shard"])]
    cuda = decode == "gpu" and torch.cuda.is_available()
    order = EpochOrder(len(reader), batch_size=batch_size, seed=0)

    def fetch():
        loader = DataLoader(_FetchOnly(reader, dataset.fields), sampler=order.batches(), batch_size=None,
                            num_workers=workers, multiprocessing_context="forkserver" if workers else None,
                            persistent_workers=workers > 0)
        return _timed_epoch_prefix(_epochs(loader), timed, warmup)[:2]

    def load():
        place = Decode(decode, device="cuda" if cuda else "cpu",
                       step=None if cuda or decode == "cpu" else _stub_decode)
        loader = Loader(dataset, batch_size, crop=crop, decode=place, workers=Workers(workers), seed=0)
        images, seconds, handoff = _timed_epoch_prefix(_epochs(loader, loader.set_epoch), timed, warmup,
                                                       handoff_batches)
        if handoff_batches:
            handoffs.append(handoff)
        return images, seconds

    say(f"{len(reader)} samples ({len(order)} batches an epoch); per stage {warmup} untimed and {timed} timed "
        f"batches of {batch_size}, {repeats} times")
    runs, handoffs = {}, []
    for repeat in range(repeats):
        for stage, run in (("fetch", fetch), ("loader", load)):
            for temperature in ("cold", "warm"):
                if temperature == "cold":
                    evict_from_page_cache(shards)
                images, seconds = run()
                name = f"{stage}, {temperature}"
                runs.setdefault(name, []).append(Rate(name, images, seconds))
                say(f"{name} ({repeat + 1}/{repeats}): {runs[name][-1].images_per_s:.1f} images/s")
    rates = {name: sorted(found, key=lambda rate: rate.images_per_s)[len(found) // 2] for name, found in runs.items()}
    spread = {name: (min(r.images_per_s for r in found), max(r.images_per_s for r in found))
              for name, found in runs.items()}
    sizes = sum(int(reader.index[f"{field}_size"].sum()) for field in dataset.fields)
    return {
        "rates": rates, "spread": spread, "repeats": repeats, "dataset_bytes": sizes, "images": len(reader),
        "batch_size": batch_size, "timed_batches": timed, "workers": workers, "decode": decode, "gpu": cuda,
        "remote": reader.remote, "crop": repr(crop), "fits_in_memory": not reader.remote and sizes <= _page_cache_bytes(),
        "handoff_ms": 1e3 * min(handoffs) if handoffs else 0.0,
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
    where = ("remote: every epoch reads from storage, nothing to evict, so cold and warm read alike"
             if result["remote"] else
             f"{'fits' if result['fits_in_memory'] else 'does not fit'} in available memory")
    lines = [
        f"{result['images']} samples, {result['dataset_bytes'] / 1e6:.1f} MB compressed ({where}); batch "
        f"{result['batch_size']}, {result['workers']} workers, decode={result['decode']}"
        + ("" if result["gpu"] or result["decode"] == "cpu" else " (no GPU: decode stubbed, host side only)"),
        "",
        f"| stage | images/s (median of {result['repeats']}) | slowest-fastest |",
        "|---|---|---|",
    ]
    lines += [f"| {rate.stage} | {rate.images_per_s:.1f} | {result['spread'][name][0]:.1f}-"
              f"{result['spread'][name][1]:.1f} |" for name, rate in result["rates"].items()]
    lines += ["", f"A ready batch takes {result['handoff_ms']:.1f} ms to reach the training loop."]
    if predictions:
        lines += ["", "| step ms | data ms/batch | predicted wait | bottleneck |", "|---|---|---|---|"]
        lines += [f"| {p.step_ms:g} | {p.data_ms_per_batch:.1f} | {p.stall_fraction:.0%} | {p.bottleneck} |"
                  for p in predictions]
    return "\n".join(lines)


def storage_options(pairs) -> dict:
    """--storage-option KEY=VALUE pairs as fsspec's storage_options: a VALUE that parses as JSON
    (true, 3, {"endpoint_url": "..."}) is that value, any other is the string."""
    options = {}
    for pair in pairs or ():
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise L3Error(f"--storage-option takes KEY=VALUE, not {pair!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


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
    parser.add_argument("--batches", type=int, help=f"batches timed per stage, whole rounds of the workers "
                        f"(default {MAX_TIMED}), over several epochs of a small split; it needs one whole batch")
    parser.add_argument("--repeats", type=int, default=3, help="times each stage is measured (median and spread)")
    parser.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                        help="an fsspec storage option for a remote dataset (repeatable; VALUE as JSON or a string), "
                        'e.g. anon=true or client_kwargs=\'{"endpoint_url": "http://..."}\'')
    parser.add_argument("--step-ms", type=float, nargs="*", default=[], help="model step times to predict for")
    parser.add_argument("--json", help="write the measurements and predictions here")
    args = parser.parse_args(argv)
    crop = None
    if args.crop:
        crop = CenterCrop(args.crop) if args.center else RandomResizedCrop(args.crop, flip=0.5)
    try:
        if args.repeats < 1 or (args.batches is not None and args.batches < 1):
            raise L3Error("--repeats and --batches must be at least 1")
        result = measure(args.dataset, split=args.split, batch_size=args.batch_size, workers=args.workers,
                         crop=crop, decode=args.decode, batches=args.batches, repeats=args.repeats,
                         storage_options=storage_options(args.storage_option))
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
