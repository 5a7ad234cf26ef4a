"""Loader: whole batches of a split for one rank, decoded on the GPU (or by the workers on the CPU)."""

from __future__ import annotations

import atexit
import collections
import functools
import multiprocessing
import os
import threading
import warnings
import weakref

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.signal_handling import _set_SIGCHLD_handler

from .. import gpu
from .. import staging as stage
from ..format import L3Error
from ..geometry import Full
from ..order import EpochOrder
from .dataset import L3Dataset
from .decode_steps import gpu_decode_step
from .device import _Device, _to_device, resolve_device
from .finish import Finish, replace_bad_samples
from .options import Decode, Workers, as_decode, as_workers, legacy_options
from .workers import (
    WorkerStalled, _BatchSource, _batch_dict, _decoders, _identity, _poll_interval,
    _start_forkserver, _start_method, _stop_workers, _watched, _worker_context, _worker_init,
)


class _Requests:
    """The DataLoader's sampler: one request per batch, in this rank's order. Iterated lazily in the
    main process as workers take requests, so it can wait for a staging slot to be free first."""

    def __init__(self, slots: int, wait_slot):
        self.slots, self.wait_slot = slots, wait_slot
        self.epoch, self.batches, self.first = 0, [], 0

    def start(self, epoch: int, batches: list, first: int) -> None:
        self.epoch, self.batches, self.first = epoch, batches, first

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for offset, indices in enumerate(self.batches):
            number = self.first + offset
            slot = number % self.slots if self.slots else 0
            if self.wait_slot is not None:
                self.wait_slot()(slot)
            yield self.epoch, number, slot, indices


class Loader:
    """Batches of a split for one rank, decoded where `decode` says, in a deterministic, resumable order.

    batch_size: samples per batch. shuffle, seed: the epoch's global order is a function of
    (seed, epoch); set_epoch() before each epoch. rank, world_size: default from torch.distributed
    when it is initialised; every rank gets len(loader) batches (drop_last: see l3codec.order).
    crop: Full(flip=p), RandomCrop(size, flip=p), RandomResizedCrop(size, scale, ratio, flip=p) or
    CenterCrop(size); one geometry per sample for all its fields; only the tiles a crop touches are
    decoded. None: whole images. normalize: (mean, std) per channel on the 0..1 scale gives float32
    images; otherwise uint8. Images come as N×C×H×W views of N×H×W×C memory (channels_last) unless
    channels_last=False; one-channel label maps as N×H×W; a list where sizes, channels or dtypes differ.
    decode: where decoding happens, the one place that says so: a Decode (on "gpu" or "cpu", the
    device batches are yielded on, the GPU backend and prefetch, a replacement decode step), or
    "gpu"/"cpu"; default: on the GPU where there is one (l3codec.loader.options).
    workers: a Workers (count, prefetch_factor, timeout, start method) or a count; default none.
    on_error: "raise" (L3Error naming the sample's key) or "skip" (the sample is replaced by the
    batch's first good one, batch["skipped"] lists (key, reason), and a warning is issued).
    transform: applied to each yielded batch dict.
    cache: an l3codec.cache.SampleCache for the dataset's compressed bytes; the loader reads
    through a copy of the dataset (loader.dataset), and the one given is left as it is.
    The keywords these groups replaced (device, backend, decode_step, prefetch, num_workers,
    prefetch_factor, multiprocessing_context, timeout) are still accepted, with a DeprecationWarning.
    """

    def __init__(
        self, dataset: L3Dataset, batch_size: int, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
        crop=None, normalize=None, channels_last: bool = True, decode: Decode | str | None = None,
        workers: Workers | int | None = None, rank: int | None = None, world_size: int | None = None,
        on_error: str = "raise", transform=None, cache=None, **deprecated,
    ):
        if on_error not in ("raise", "skip"):
            raise L3Error(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self.decode, self.workers = legacy_options(as_decode(decode, getattr(dataset, "legacy_decode", None)),
                                                   as_workers(workers), deprecated)
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = (torch.distributed.get_rank() if distributed else 0) if rank is None else rank
            world_size = (torch.distributed.get_world_size() if distributed else 1) if world_size is None else world_size
        self.dataset = dataset if cache is None else dataset.with_cache(cache)  # reaches the workers with it
        self.batch_size = batch_size
        self.order = EpochOrder(len(dataset), batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
                                world_size=world_size, drop_last=drop_last)
        self.geometry = Full() if crop is None else crop
        self.device = resolve_device(self.decode.device)
        self.place = self.decode.place(self.device)
        decode_step = self.decode.step
        if self.place == "gpu" and decode_step is None:
            if self.device.type != "cuda":
                raise L3Error("decoding on the GPU needs a CUDA device; use Loader(decode='cpu') without one")
            decode_step = gpu_decode_step(self.decode.backend)
        self.decode_step, self.on_error, self.transform = decode_step, on_error, transform
        self.num_workers, self.prefetch_factor = self.workers.count, self.workers.prefetch_factor
        self.prefetch = max(1, self.decode.prefetch)
        self.multiprocessing_context, self.timeout = self.workers.context, self.workers.timeout
        if self.num_workers:
            _start_forkserver(self.multiprocessing_context or _worker_context())
        self.finish = Finish(self.dataset.field_specs, normalize, channels_last)
        self._device = _Device(self.device)
        self._ring = None  # staging slots, made on first use
        self._batches_loader = self._requests = None  # made on first use
        self._slot_events: dict = {}
        self._yielded = 0  # batches handed out in this epoch
        self._resume_at = 0

    # ---- order and resume

    def __len__(self) -> int:
        return len(self.order)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch's order; a resumed epoch (load_state_dict) keeps its resume point."""
        if int(epoch) != self.order.epoch:
            self._resume_at = 0
        self.order.set_epoch(epoch)

    def state_dict(self) -> dict:
        """Where this rank is: the next batch continues from here after load_state_dict."""
        order = self.order
        return {"seed": order.seed, "epoch": order.epoch, "batches": self._yielded, "batch_size": order.batch_size,
                "world_size": order.world_size, "rank": order.rank, "length": order.length,
                "shuffle": order.shuffle, "drop_last": order.drop_last}

    def load_state_dict(self, state: dict) -> None:
        order = self.order
        mine = self.state_dict()
        for name in ("seed", "batch_size", "world_size", "rank", "length", "shuffle", "drop_last"):
            if state[name] != mine[name]:
                raise L3Error(f"cannot resume: the state has {name}={state[name]}, this loader {mine[name]}")
        order.set_epoch(state["epoch"])
        if not 0 <= state["batches"] <= len(order):
            raise L3Error(f"cannot resume at batch {state['batches']} of {len(order)}")
        self._yielded = self._resume_at = int(state["batches"])

    # ---- iteration

    def __iter__(self):
        first, self._resume_at = self._resume_at, 0
        self._yielded = first
        batches = self.order.batches(first)
        if self.place == "gpu":
            yield from self._gpu_batches(first, batches)
        else:
            yield from self._cpu_batches(first, batches)

    def _data_loader(self, first, batches, slots=0, wait_slot=None) -> DataLoader:
        """The DataLoader for this epoch's requests; its workers persist from epoch to epoch."""
        if self._batches_loader is None:
            source = _BatchSource(self.dataset, self.place, self.geometry, self.order.seed,
                                  self.on_error == "skip", self.finish, self._ring)
            # a weak method: the sampler, held by the DataLoader that the Loader holds, must not hold
            # the Loader, or a dropped Loader would linger as a cycle until some later collection,
            # perhaps inside the next loader's forked workers, whose copy of it cannot stop its workers
            self._requests = _Requests(slots, weakref.WeakMethod(wait_slot) if wait_slot else None)
            workers = self.num_workers
            decoders = _decoders(self.dataset) if self.place == "cpu" and workers else ()
            context = self.multiprocessing_context or _worker_context()
            if isinstance(context, str):
                context = multiprocessing.get_context(context)
            init = functools.partial(_worker_init, os.getpid(), decoders, context.Value("b", 0)) if workers else None
            self._batches_loader = DataLoader(
                source, sampler=self._requests, batch_size=None, collate_fn=_identity, num_workers=workers,
                prefetch_factor=self.prefetch_factor if workers else None, persistent_workers=workers > 0,
                worker_init_fn=init, pin_memory=self.place == "cpu" and self._device.cuda,
                multiprocessing_context=context if workers else None,
                timeout=_poll_interval(self.timeout) if workers else 0,
            )
            if workers:
                atexit.register(_stop_workers_at_exit, weakref.ref(self._batches_loader))
        self._requests.start(self.order.epoch, batches, first)
        return _watched(self._batches_loader, self.timeout)

    def _prepared_batches(self, first, batches, slots=0, wait_slot=None):
        """(number, slot, batch or staged batch) of this epoch, in order. While the workers start
        (the first epoch, or after they were stopped), the main process prepares the first batch
        itself, as a worker would, and the workers take the rest: a worker's start waits for the
        forkserver's imports (about 1 s), the first batch need not. Not with workers forked from
        this process."""
        starting = self.num_workers and batches and (self._batches_loader is None or
                                                     self._batches_loader._iterator is None)
        # a fork while this process's threads prepare a batch could copy a lock one of them holds
        forked = _start_method(self.multiprocessing_context or _worker_context()) == "fork"
        if not starting or forked:
            yield from self._data_loader(first, batches, slots, wait_slot)
            return
        started, first_batch = {}, {}

        def start_workers():
            try:
                started["batches"] = self._data_loader(first + 1, batches[1:], slots, wait_slot)
            except BaseException as error:  # re-raised in the main thread
                started["error"] = error

        def prepare_first():
            try:  # not under the workers' compile lock (warmup.exercise_once): on a warm cache it would
                # make them wait while this process loads its decoders
                first_batch["batch"] = source[(self.order.epoch, first, slot, batches[0])]
            except BaseException as error:
                first_batch["error"] = error

        source = _BatchSource(self.dataset, self.place, self.geometry, self.order.seed,
                              self.on_error == "skip", self.finish, self._ring)
        slot = first % slots if slots else 0
        if wait_slot is not None:
            wait_slot(slot)
        _set_SIGCHLD_handler()  # what the DataLoader does in the main thread only
        starter = threading.Thread(target=start_workers, name="l3codec-start-workers", daemon=True)
        starter.start()
        # in a thread of its own, so that a source that never answers raises as a stuck worker does
        preparer = threading.Thread(target=prepare_first, name="l3codec-first-batch", daemon=True)
        preparer.start()
        preparer.join(self.timeout or None)
        if preparer.is_alive():
            raise WorkerStalled(f"the first batch, prepared in the main process while the {self.num_workers} "
                                f"workers start, did not come in {self.timeout:g} s: a source that never answers "
                                "(a FIFO, a stalled remote read) stalls the loader")
        try:
            if "error" in first_batch:
                raise first_batch["error"]
            if isinstance(first_batch["batch"], L3Error):  # returned by the source, raised as a worker's is:
                raise first_batch["batch"] from None  # one line, without the chain that crossing a process drops
            yield first_batch["batch"]
        finally:  # also when the iteration is dropped here: the starter holds this loader until it ends
            starter.join()
        if "error" in started:
            raise started["error"]
        yield from started["batches"]

    def _cpu_batches(self, first, batches):
        for _, _, batch in self._prepared_batches(first, batches):
            if self._device.cuda:
                batch = {name: _to_device(value, self.device) for name, value in batch.items()}
            yield self._hand_out(batch)

    def _gpu_batches(self, first, batches):
        slots = self._staging_ring()
        inflight = collections.deque()
        for number, slot, staged in self._prepared_batches(first, batches, slots, self._wait_slot):
            inflight.append(self._launch(slot, staged))
            if len(inflight) > self.prefetch:
                yield self._hand_out(self._finish_launch(*inflight.popleft()))
        while inflight:
            yield self._hand_out(self._finish_launch(*inflight.popleft()))

    def _hand_out(self, batch: dict) -> dict:
        self._yielded += 1
        if batch["skipped"]:
            warnings.warn(f"replaced bad samples: {batch['skipped']}", stacklevel=3)
        return self.transform(batch) if self.transform is not None else batch

    def _staging_ring(self) -> int:
        """Allocate (once) the shared, pinned staging slots: enough that a worker never writes into a
        slot whose previous batch is still being copied to the device."""
        workers = max(self.num_workers, 1)
        slots = workers * (self.prefetch_factor if self.num_workers else 1) + self.prefetch + 2
        if self._ring is None:
            size = stage.staging_bytes(self.dataset.reader, self.dataset.fields, self.batch_size)
            check_shared_memory(slots * size)
            self._ring = torch.empty((slots, size), dtype=torch.uint8).share_memory_()
            self._device.pin(self._ring)
            self._device_buffers = [torch.empty(size, dtype=torch.uint8, device=self.device)
                                    for _ in range(self.prefetch + 1)] if self._device.cuda else None
            self._buffer_free = [None] * (self.prefetch + 1)  # per device buffer: its last decode's end
            self._next_buffer = 0
        return len(self._ring)

    def _device_buffer(self, which: int, size: int) -> torch.Tensor:
        """Device buffer `which`, at least `size` bytes: the packed batch, then room for its expanded LZ
        streams (more than the staging slot when a batch has many); a larger one replaces it once the
        decode that last read it has ended."""
        if self._device_buffers[which].numel() < size:
            if self._buffer_free[which] is not None:
                self._buffer_free[which].synchronize()
            self._device_buffers[which] = torch.empty(size, dtype=torch.uint8, device=self.device)
        return self._device_buffers[which][:size]

    def _wait_slot(self, slot: int) -> None:
        event = self._slot_events.pop(slot, None)
        if event is not None:
            event.synchronize()

    def _launch(self, slot: int, staged):
        """Copy the slot to the device on the copy stream and decode it on the decode stream;
        nothing waits on the host here."""
        size = staged.packed.size
        n = len(staged.batch.infos)
        device, copied = self._device, None
        if device.cuda:
            which = self._next_buffer
            self._next_buffer = (which + 1) % len(self._device_buffers)
            buffer = self._device_buffer(which, staged.packed.device_size)
            with device.on(device.copy):
                device.wait(self._buffer_free[which])  # the decode that last read this buffer
                buffer[:size].copy_(self._ring[slot, :size], non_blocking=True)  # not the LZ scratch after it
                copied = self._slot_events[slot] = device.record()
        else:
            buffer = self._ring[slot, :size]
        with device.on(device.decode):
            device.wait(copied)
            out = torch.empty(max(staged.out_size, 1), dtype=torch.uint8, device=self.device)
            status = torch.zeros(n, dtype=torch.int32, device=self.device)
            self.decode_step(staged, buffer, out, status, device.decode)
            if device.cuda:
                self._buffer_free[which] = device.record()
            images = {layout.name: self.finish.field(layout.name, out, layout, staged.crops)
                      for layout in staged.fields}
            status_host = status.to("cpu", non_blocking=True)
            done = device.record()
        return staged, images, status_host, done

    def _finish_launch(self, staged, images, status_host, done) -> dict:
        """Wait for one batch's decode, check its statuses (read once), hand its tensors to the
        current stream, and only then replace bad samples, on that stream."""
        if done is not None:
            done.synchronize()
        status = np.zeros(len(staged.batch.infos), np.int32)
        status[gpu.status_order(staged.batch)] = status_host.numpy()
        bad_samples = sorted({int(i) // len(staged.fields) for i in np.flatnonzero(status)})
        if bad_samples and (self.on_error == "raise" or len(bad_samples) == len(staged.keys)):
            keys = [staged.keys[s] for s in bad_samples]
            raise stage.BadSample(f"samples {keys} failed to decode (corrupt past their checksums)")
        tensors = [t for value in images.values() for t in (value if isinstance(value, list) else [value])]
        self._device.hand_over(done, tensors)
        if bad_samples:
            replace_bad_samples(staged, images, {s: "failed to decode" for s in bad_samples})
        batch = _batch_dict(staged, images)
        batch["label"] = batch["label"].to(self.device, non_blocking=True) if self._device.cuda else batch["label"]
        return batch


def _stop_workers_at_exit(data_loader: weakref.ref) -> None:
    """Stop a live loader's persistent workers at exit, before multiprocessing's own exit handler
    (atexit runs the later registration first): left to interpreter teardown, they were stopped
    after it, and the resource tracker reported their queues' semaphores as leaked."""
    loader = data_loader()
    if loader is not None:
        _stop_workers(loader)


def check_shared_memory(needed: int, directory: str = "/dev/shm") -> None:
    """Refuse to start when the shared-memory file system cannot hold the staging ring: past its
    end, a write into the ring is a SIGBUS that kills the process without a message."""
    try:
        stats = os.statvfs(directory)
    except OSError:  # no such file system here: torch shares memory some other way
        return
    free, size = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # every local rank stages its own ring in the same file system; those already made are not free now
    if needed > free or ranks * needed > size:
        raise L3Error(
            f"the loader's staging ring needs {needed / 2**20:.0f} MiB of shared memory and {directory} has "
            f"{free / 2**20:.0f} MiB free ({ranks} local ranks need {ranks * needed / 2**20:.0f} MiB): in Docker, "
            "raise --shm-size (its default is 64 MB); or lower num_workers, prefetch_factor, prefetch or batch_size"
        )
