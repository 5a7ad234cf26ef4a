"""What the DataLoader workers run (one whole batch per request), how they start, and the watch on them."""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from .. import codec
from .. import staging as stage
from ..format import L3Error
from ..lifeline import watch_owner
from .dataset import L3Dataset, _one_numba_thread
from .finish import Finish, region_view, replace_bad_samples

# a batch from the workers that takes longer is a stuck worker, not a slow one: a first batch that
# compiles the CPU decoder takes under a minute, and a compile by another process (a warm-up) is waited for 300 s at most
WORKER_TIMEOUT_S = 600.0
# how often the wait for a batch checks that every worker is alive: workers are the forkserver's
# children, not this process's, so no SIGCHLD tells torch that one died
WORKER_POLL_S = 5.0


class WorkerStalled(RuntimeError):
    """No batch came from the loader's workers within the timeout."""


class WorkerExited(RuntimeError):
    """A worker died before handing over its batch (it failed at start, or was killed)."""


def _identity(batch):
    return batch


class _BatchSource(Dataset):
    """What DataLoader workers run: one whole batch per request (epoch, number, slot, indices)."""

    def __init__(self, dataset: L3Dataset, place: str, geometry, seed: int, skip_bad: bool, finish: Finish,
                 ring):
        self.reader, self.fields, self.decode = dataset.reader, dataset.fields, place
        self.verify, self.geometry, self.seed, self.skip_bad = dataset.verify, geometry, seed, skip_bad
        self.max_pixels = dataset.max_pixels
        self.finish, self.ring = finish, ring  # ring: shared (slots, bytes) uint8 staging buffers (GPU path)

    def __len__(self) -> int:  # requests come from _Requests, not from indices
        return len(self.reader)

    def __getitem__(self, request):
        epoch, number, slot, indices = request
        options = dict(seed=self.seed, epoch=epoch, verify=self.verify, skip_bad=self.skip_bad,
                       max_pixels=self.max_pixels)
        try:
            if self.decode == "gpu":
                staged = stage.stage_for_gpu(self.reader, indices, self.fields, self.geometry,
                                             self.ring[slot].numpy(), **options)
                return number, slot, staged
            return number, slot, self._decode_on_cpu(indices, options)
        except L3Error as error:  # returned, for _watched to raise as it is: torch would wrap it in its traceback
            return error
        finally:
            if self.reader.cache is not None:  # so that `l3 cache` counts what this worker did
                self.reader.cache.flush_counters()

    def _decode_on_cpu(self, indices, options) -> dict:
        samples, skipped, _ = stage.plan_samples(self.reader, indices, self.fields, self.geometry, **options)
        layouts, out_size = stage.layout_fields(samples, self.fields)
        # allocated in shared memory, as default_collate does, so that handing it over copies nothing
        flat = torch.empty(0, dtype=torch.uint8)
        flat.set_(torch.UntypedStorage._new_shared(max(out_size, 1)) if get_worker_info() else
                  torch.UntypedStorage(max(out_size, 1)))
        host, bad = flat.numpy(), {}
        for s, sample in enumerate(samples):
            try:
                for f, (plan, view) in enumerate(zip(sample.plans, sample.views)):
                    out = _item_view(host, layouts[f], s, plan.region[2:])
                    codec.decode(view, region=plan.region, out=out, verify=False)
            except L3Error as error:
                if not self.skip_bad:
                    raise stage.BadSample(f"sample {sample.key!r} (index {sample.index}): {error}") from error
                bad[s] = str(error)
        if len(bad) == len(samples):
            raise stage.BadSample.whole_batch(f"{samples[s].key!r}: {reason}" for s, reason in bad.items())
        staged = stage._staged(samples, layouts, out_size, skipped)
        images = {layout.name: self.finish.field(layout.name, flat, layout, staged.crops) for layout in layouts}
        if bad:
            replace_bad_samples(staged, images, bad)
        return _batch_dict(staged, images)


def _item_view(host: np.ndarray, layout, i: int, size: tuple) -> np.ndarray:
    """Item i's (h, w) region in a field layout of the flat output: an HW or HWC numpy view."""
    pixels = region_view(host, layout.offsets[i], layout.pitches[i], *size, layout.channels[i], layout.dtypes[i])
    return pixels[:, :, 0] if layout.channels[i] == 1 else pixels


def _batch_dict(staged, images: dict) -> dict:
    return {
        **images,
        "label": torch.from_numpy(staged.labels),
        "index": torch.from_numpy(staged.indices),
        "region": torch.tensor([crop.region for crop in staged.crops], dtype=torch.int64).reshape(-1, 4),
        "flip": torch.tensor([crop.flip for crop in staged.crops], dtype=torch.bool),
        "key": staged.keys,
        "skipped": staged.skipped,
    }


def _start_method(context) -> str | None:
    return getattr(context, "get_start_method", lambda: context)()


def _worker_context() -> str:
    """How DataLoader workers start: from a forkserver, never by forking this process.

    A forked child inherits every lock of this process's thread pools in whatever state the
    pool threads held them, but not the threads: once a training step has run, torch's GNU
    OpenMP intra-op pool (and Numba's, if it ran) is live, and the worker's first parallel torch
    operation (a flip's gather, a resize) waits forever on a futex no thread will release. The
    forkserver is a single-threaded process started before any of that, so its children begin clean.
    """
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


# what every worker imports: preloaded once by the forkserver, whose children then start in about
# 50 ms; without them each worker imported torch itself, about 2 s on 2 busy cores. Importing these
# starts none of torch's or Numba's thread pools (only numpy's OpenBLAS pool, which forks safely).
WORKER_MODULES = ("__main__", "torch", "torch.utils.data", "numba", "l3codec.loader", "l3codec.cpu",
                  "l3codec.warmup")


def _start_forkserver(context) -> None:
    """Start the forkserver now, preloading WORKER_MODULES, so that its imports overlap what the
    training script does before its first batch. Nothing for another start method, or a forkserver
    already running (its preloads are whatever it started with)."""
    if _start_method(context) != "forkserver":
        return
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
        forkserver.set_forkserver_preload(list(WORKER_MODULES))
    forkserver.ensure_running()  # spawns it and returns; it imports while this process goes on


def _poll_interval(timeout: float) -> float:
    """The DataLoader's own timeout: one wait for a batch, after which torch checks its workers."""
    return min(WORKER_POLL_S, timeout) if timeout > 0 else WORKER_POLL_S


def _watched(batches: DataLoader, timeout: float):
    """Iterate a DataLoader (whose timeout is _poll_interval's), turning a dead worker into
    WorkerExited within a poll, and no batch in `timeout` seconds (0: never) into WorkerStalled,
    each naming the likely causes. The workers start here, before the first batch is asked for."""
    return _watch(batches, iter(batches), timeout)


def _watch(batches: DataLoader, iterator, timeout: float):
    waiting_since = time.monotonic()
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (RuntimeError, ConnectionError) as error:
            if isinstance(error, ConnectionError) or "exited unexpectedly" in str(error):
                _stop_workers(batches)  # so that the next epoch starts workers anew
                raise WorkerExited(_exited_message(error)) from None
            if "timed out" not in str(error):
                raise
            if not timeout or time.monotonic() - waiting_since < timeout:
                continue  # the workers are alive: wait on
            raise WorkerStalled(
                f"no batch came from the loader's {batches.num_workers} workers in {timeout:g} s: a worker is "
                f"stuck. Workers started by forking a process whose thread pools were running (torch's "
                f"or Numba's OpenMP threads after a training step) deadlock; they start from a forkserver "
                f"unless multiprocessing_context says otherwise (it is {_start_method(batches.multiprocessing_context)!r}). "
                f"A source that never answers (a FIFO, a stalled remote read) stalls them too."
            ) from None
        if isinstance(batch, L3Error):  # a worker's (a bad sample, a remote read given up)
            raise batch
        yield batch
        waiting_since = time.monotonic()


def _exited_message(error: Exception) -> str:
    # a ConnectionError: a worker killed after it queued a batch, whose memory is shared through
    # the worker's socket, before torch noticed the worker had gone
    what = str(error) if isinstance(error, RuntimeError) else \
        f"a DataLoader worker exited unexpectedly: its batch could not be received ({error!r})"
    return (f"{what}. Workers start from a forkserver, which imports your script again in each of them: "
            f"keep the training entry point under `if __name__ == \"__main__\":`, or the workers fail at start "
            f"(their traceback is above). A worker killed for memory (the kernel's OOM killer) exits like this too.")


def _stop_workers(batches: DataLoader) -> None:
    """Stop a DataLoader's persistent workers and forget them: its next iteration starts new ones."""
    iterator = getattr(batches, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    batches._iterator = None


def _worker_init(owner: int, decoders: tuple, notice, worker_id: int) -> None:
    _one_numba_thread()
    watch_owner(owner, "loader-watch")  # a forkserver's child: torch's parent check cannot see the loader die
    # the decoders this dataset needs, each compiled by one worker while the others compile another
    # or wait, then load it from the cache, instead of every worker compiling each at once; one
    # first-use notice for them all
    from .. import first_use, warmup

    first_use.coordinator.share_notice(notice)

    start = worker_id % len(decoders) if decoders else 0
    for mode, bits, channels in decoders[start:] + decoders[:start]:
        warmup.exercise_once("decode", mode, bits, channels)


def _decoders(dataset) -> tuple:
    """(mode, bits, channels) of the CPU decoders a dataset's fields need: the modes and sample
    depths its index and manifest record."""
    reader, needed = dataset.reader, set()
    image_mode = reader.manifest.get("options", {}).get("mode", "compact")
    label_mode = reader.manifest.get("options", {}).get("label_mode", "compact")
    for name, spec in dataset.field_specs.items():
        mode = label_mode if spec.is_label else image_mode
        for bits in np.unique(reader.index[f"{name}_bits"]).tolist():
            needed.add((mode, int(bits), 3 if name == "image" else 1))
    return tuple(sorted(needed))
