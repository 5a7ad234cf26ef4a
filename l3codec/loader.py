"""Training input from a converted dataset: L3Dataset (map-style) and Loader (whole batches, decoded on the GPU).

    from l3codec.loader import L3Dataset, Loader, RandomResizedCrop

    dataset = L3Dataset("/data/cityscapes-l3", split="train", fields=("image", "labelIds"))
    loader = Loader(dataset, batch_size=16, crop=RandomResizedCrop(512, flip=0.5), device="cuda", num_workers=4)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:      # {"image": N×3×H×W uint8 (channels_last), "labelIds": N×H×W, "label": N, ...}
            ...

decode="gpu": DataLoader workers read each batch's compressed bytes straight into a reused
pinned staging buffer and validate them (l3codec.staging); the main process copies that
buffer to the device on a side stream and decodes it with one launch per mode, with a
region per crop; `prefetch` batches are copied and decoded ahead of the one the training
step uses. decode="cpu": the workers decode with the Numba CPU decoder (one thread each).
Crops, flips and resizes use one geometry per sample for all of its fields (images
bilinear, label maps nearest). The order is l3codec.order.EpochOrder: global, a function
of (seed, epoch), equal batch counts on every rank, resumable mid-epoch with state_dict().
"""

from __future__ import annotations

import collections
import multiprocessing
import warnings
import weakref

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from . import codec, gpu, resize
from . import staging as stage
from .format import STATUS_CORRUPT, L3Error
from .geometry import CenterCrop, Full, RandomCrop, RandomResizedCrop
from .order import EpochOrder
from .torch import chw_view

__all__ = [
    "L3Dataset", "Loader", "CenterCrop", "Full", "RandomCrop", "RandomResizedCrop", "host_decode_step",
    "gpu_decode_step",
]

DEFAULT_FIELDS = ("image", "labelIds")
# a batch from the workers that takes longer is a stuck worker, not a slow one: a first batch that
# compiles the CPU decoder takes under a minute, and a sibling compile is waited for 300 s at most
WORKER_TIMEOUT_S = 600.0


class WorkerStalled(RuntimeError):
    """No batch came from the loader's workers within the timeout."""
_TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}


def _one_numba_thread() -> None:
    """In a DataLoader worker: decode with one Numba thread, so workers do not oversubscribe the cores."""
    import numba

    numba.set_num_threads(1)


class L3Dataset(Dataset):
    """A split of a converted dataset (l3convert), map-style: dataset[i] is a dict.

    fields: image-like fields to return (None: "image" and "labelIds" where the split has them).
    decode="cpu": decoded CHW tensors (HW label maps as 1×H×W) from the Numba CPU decoder;
    decode="gpu": each field's compressed bytes (a uint8 numpy array), for Loader to decode on the GPU.
    Each dict also holds "key", "index" and "label" (class index, -1 without classes), and goes
    through transform when given. root: a path or an fsspec URL (storage_options for its backend).
    """

    def __init__(self, root, split: str = "train", fields=None, decode: str = "gpu", transform=None, *,
                 storage_options=None, verify: bool = True):
        from .dataset import open_dataset

        if decode not in ("gpu", "cpu"):
            raise L3Error(f"decode must be 'gpu' or 'cpu', not {decode!r}")
        self.reader = open_dataset(root, split=split, storage_options=storage_options)
        present = tuple(self.reader.fields)
        if fields is None:
            fields = tuple(name for name in DEFAULT_FIELDS if name in present)
        fields = tuple(fields)
        missing = [name for name in fields if name not in present]
        if not fields or missing:
            raise L3Error(f"split {split!r} has fields {present}; asked for {fields}")
        self.fields, self.decode, self.transform, self.verify = fields, decode, transform, verify
        self._threads_set = False

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> dict:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        sample = {"key": self.reader.key(index), "index": index, "label": self.reader.label(index)}
        if self.decode == "cpu" and not self._threads_set and get_worker_info() is not None:
            _one_numba_thread()
            self._threads_set = True
        for name in self.fields:
            data = self.reader.read(index, name)
            if self.decode == "gpu":
                sample[name] = data
                continue
            try:
                image = codec.decode(data, verify=self.verify)
            except L3Error as error:
                raise stage.BadSample(f"sample {sample['key']!r} (index {index}), {name}: {error}") from error
            sample[name] = chw_view(torch.from_numpy(image))
        return self.transform(sample) if self.transform is not None else sample


# ---------------------------------------------------------------- decode steps (injectable)

def gpu_decode_step(backend: str = "cupy"):
    """The decode step of a CUDA device: launch_packed through CuPy or Numba on torch's side stream."""
    if backend not in gpu.BACKENDS:
        raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {backend!r}")

    def decode(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
        if backend == "cupy":
            import cupy

            with cupy.cuda.Device(buffer.device.index):
                cupy_stream = cupy.cuda.ExternalStream(stream.cuda_stream)
                arrays = [cupy.from_dlpack(t) for t in (buffer, out, status)]
                gpu.launch_packed(staged.batch, staged.packed, *arrays, backend="cupy", stream=cupy_stream)
        else:
            from numba import cuda

            arrays = [cuda.as_cuda_array(t) for t in (buffer, out, status)]
            gpu.launch_packed(staged.batch, staged.packed, *arrays, backend="numba",
                              stream=cuda.external_stream(stream.cuda_stream))

    return decode


def host_decode_step(staged, buffer: torch.Tensor, out: torch.Tensor, status: torch.Tensor, stream) -> None:
    """A decode step on the host with the CPU decoder, honouring the launch tables' output layout:
    for running the GPU path's logic where there is no GPU (and as a reference in tests)."""
    flat, packed = out.numpy(), staged.packed
    data = buffer.numpy()[:packed.data_size]
    order = gpu.status_order(staged.batch)
    position = {int(item): entry for entry, item in enumerate(order)}
    starts = staged.batch.data_offsets
    for launch in staged.batch.launches:
        for record, item in zip(launch.items, launch.item_index):
            info = staged.batch.infos[item]
            y, x, h, w = (int(record[name]) for name in ("region_y", "region_x", "region_h", "region_w"))
            row = w * info.channels * info.dtype.itemsize
            pitch, offset = int(record["out_row_pitch"]), int(record["out_offset"])
            rows = np.lib.stride_tricks.as_strided(
                flat[offset:], shape=(h, row), strides=(pitch, 1), writeable=True
            )
            target = rows.view(info.dtype).reshape(h, w, info.channels)
            try:
                codec.decode(data[starts[item]:starts[item] + info.file_size], region=(y, x, h, w),
                             out=target if info.channels > 1 else target[:, :, 0], verify=False)
            except L3Error:
                status.numpy()[position[int(item)]] = STATUS_CORRUPT


# ---------------------------------------------------------------- finishing: resize, flip, normalise

class _Finish:
    """Turns decoded canvases into the yielded tensors: resize, flip, layout, normalise.

    Runs on the device (GPU path) or in a worker (CPU path) with the same geometry rules."""

    def __init__(self, normalize=None, channels_last: bool = True, resize: str = "matmul"):
        self.normalize, self.channels_last, self.resize = normalize, channels_last, resize

    def field(self, name: str, flat: torch.Tensor, layout, crops) -> object:
        """One field's output: a batched tensor when the field has one canvas and one output size, else a list."""
        n = len(crops)
        sizes = {tuple(crop.size) for crop in crops}
        if layout.canvas is None or len(sizes) != 1:
            return [self._one(name, flat, layout, crop, i) for i, crop in enumerate(crops)]
        size = sizes.pop()
        dtype = _TORCH_DTYPES[np.dtype(layout.dtypes[0])]
        height, width = layout.canvas
        canvas = flat[layout.offset:layout.offset + layout.size].view(dtype).view(n, height, width, layout.channels[0])
        regions_hw = [tuple(crop.region[2:]) for crop in crops]
        if all(hw == size for hw in regions_hw):
            images = canvas
        else:
            images = self._resized(name, canvas, torch.tensor(regions_hw, dtype=torch.int64, device=flat.device), size)
        return self._present(name, resize.flip_where(images, crops), batched=True)

    def _resized(self, name, canvas, regions, size):
        if name != "image":
            return resize.nearest(canvas, regions, size)
        if self.resize == "matmul":
            return resize.bilinear(canvas, regions, size)
        return torch.stack([resize.interpolate(canvas[i, :h, :w], size) for i, (h, w) in enumerate(regions.tolist())])

    def _one(self, name, flat, layout, crop, i) -> torch.Tensor:
        """Item i of a field whose items differ in channels, dtype or output size."""
        h, w = crop.region[2:]
        channels, dtype = layout.channels[i], np.dtype(layout.dtypes[i])
        pitch, start = layout.pitches[i], layout.offsets[i]
        rows = flat[start:start + (h - 1) * pitch + w * channels * dtype.itemsize]
        pixels = rows.view(_TORCH_DTYPES[dtype])
        image = torch.as_strided(pixels, (h, w, channels), (pitch // dtype.itemsize, channels, 1))
        if tuple(crop.size) != (h, w):
            image = self._resized(name, image[None], torch.tensor([[h, w]], device=flat.device), crop.size)[0]
        else:
            image = resize.as_int_bits(image).clone().view(image.dtype)  # the buffer is reused; list items get their own memory
        if crop.flip:
            image = resize.as_int_bits(image).flip(1).view(image.dtype)
        return self._present(name, image, batched=False)

    def _present(self, name, images: torch.Tensor, batched: bool) -> torch.Tensor:
        """HWC (NHWC) -> CHW (NCHW) for images, HW (NHW) for one-channel label maps; normalised images."""
        if name != "image":
            return images[..., 0] if images.shape[-1] == 1 else images.movedim(-1, -3)
        if self.normalize is not None:
            mean, std = (torch.tensor(v, dtype=torch.float32, device=images.device) for v in self.normalize)
            images = (images.to(torch.float32) / 255.0 - mean) / std
        elif images.dtype.is_floating_point:
            images = images.round_().clamp_(0, 255).to(torch.uint8)
        chw = images.movedim(-1, -3)  # a channels_last view of NHWC memory
        return chw if self.channels_last or not batched else chw.contiguous()


# ---------------------------------------------------------------- the worker side

def _identity(batch):
    return batch


class _BatchSource(Dataset):
    """What DataLoader workers run: one whole batch per request (epoch, number, slot, indices)."""

    def __init__(self, dataset: L3Dataset, geometry, seed: int, skip_bad: bool, finish: _Finish, ring):
        self.reader, self.fields, self.decode = dataset.reader, dataset.fields, dataset.decode
        self.verify, self.geometry, self.seed, self.skip_bad = dataset.verify, geometry, seed, skip_bad
        self.finish, self.ring = finish, ring  # ring: shared (slots, bytes) uint8 staging buffers (GPU path)

    def __len__(self) -> int:  # requests come from _Requests, not from indices
        return len(self.reader)

    def __getitem__(self, request):
        epoch, number, slot, indices = request
        options = dict(seed=self.seed, epoch=epoch, verify=self.verify, skip_bad=self.skip_bad)
        if self.decode == "gpu":
            staged = stage.stage_for_gpu(self.reader, indices, self.fields, self.geometry, self.ring[slot].numpy(),
                                         **options)
            return number, slot, staged
        return number, slot, self._decode_on_cpu(indices, options)

    def _decode_on_cpu(self, indices, options) -> dict:
        samples, skipped, _ = stage.plan_samples(self.reader, indices, self.fields, self.geometry, **options)
        layouts, out_size = stage.layout_fields(samples, self.fields)
        # allocated in shared memory, as default_collate does, so that handing it over copies nothing
        flat = torch.empty(0, dtype=torch.uint8)
        flat.set_(torch.UntypedStorage._new_shared(max(out_size, 1)) if get_worker_info() else
                  torch.UntypedStorage(max(out_size, 1)))
        host = flat.numpy()
        first_good = None
        for s, sample in enumerate(samples):
            try:
                for f, (plan, view) in enumerate(zip(sample.plans, sample.views)):
                    out = _item_view(host, layouts[f], s, plan.region[2:])
                    codec.decode(view, region=plan.region, out=out, verify=False)
            except L3Error as error:
                if not self.skip_bad:
                    raise stage.BadSample(f"sample {sample.key!r} (index {sample.index}): {error}") from error
                skipped.append((sample.key, str(error)))
                samples[s] = None
                continue
            first_good = s if first_good is None else first_good
        if first_good is None:
            raise stage.BadSample("no good sample to substitute in this batch: " + repr(skipped))
        for s, sample in enumerate(samples):
            if sample is None:
                samples[s] = good = samples[first_good]
                for layout in layouts:
                    size = good.crop.region[2:]
                    _item_view(host, layout, s, size)[...] = _item_view(host, layout, first_good, size)
        staged = stage._staged(samples, layouts, out_size, skipped)
        return _batch_dict(staged, {layout.name: self.finish.field(layout.name, flat, layout, staged.crops)
                                    for layout in layouts})


def _item_view(host: np.ndarray, layout, i: int, size: tuple) -> np.ndarray:
    """Item i's (h, w) region in a field layout of the flat output: an HW or HWC numpy view."""
    (h, w), channels, dtype = size, layout.channels[i], np.dtype(layout.dtypes[i])
    rows = host[layout.offsets[i]:layout.offsets[i] + (h - 1) * layout.pitches[i] + w * channels * dtype.itemsize]
    pixels = np.lib.stride_tricks.as_strided(
        rows.view(dtype), (h, w, channels), (layout.pitches[i], channels * dtype.itemsize, dtype.itemsize)
    )
    return pixels[:, :, 0] if channels == 1 else pixels


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


# ---------------------------------------------------------------- the main process

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


class _Device:
    """Streams, events and pinned memory on CUDA; the same calls do nothing (or wait for nothing) on the CPU."""

    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None

    def stream(self):
        return torch.cuda.stream(self.side) if self.cuda else _Nothing()

    def event(self):
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(self.side)
        return event

    def pin(self, tensor: torch.Tensor) -> None:
        """Page-lock a shared-memory tensor in place, so that copies from it are asynchronous DMA,
        until the tensor is freed: a registration that outlived its memory would make the next
        loader's cudaHostRegister of the same addresses fail."""
        if self.cuda:
            cudart = torch.cuda.cudart()
            result = cudart.cudaHostRegister(tensor.data_ptr(), tensor.numel(), 0)
            if int(result) != 0:
                raise RuntimeError(f"cudaHostRegister of the staging buffers failed ({result})")
            weakref.finalize(tensor, cudart.cudaHostUnregister, tensor.data_ptr())

    def hand_over(self, event, tensors) -> None:
        """Make tensors made on the side stream safe on the caller's current stream."""
        if not self.cuda:
            return
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors:
            tensor.record_stream(current)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Loader:
    """Batches of a split for one rank, decoded on `device`, in a deterministic, resumable order.

    batch_size: samples per batch. shuffle, seed: the epoch's global order is a function of
    (seed, epoch); set_epoch() before each epoch. rank, world_size: default from torch.distributed
    when it is initialised; every rank gets len(loader) batches (drop_last: see l3codec.order).
    crop: Full(flip=p), RandomCrop(size, flip=p), RandomResizedCrop(size, scale, ratio, flip=p) or
    CenterCrop(size); one geometry per sample for all its fields; only the tiles a crop touches are
    decoded. None: whole images. normalize: (mean, std) per channel on the 0..1 scale gives float32
    images; otherwise uint8. Images come as N×C×H×W views of N×H×W×C memory (channels_last) unless
    channels_last=False; one-channel label maps as N×H×W; a list where sizes differ.
    device: "cuda" (default when available) or "cpu". num_workers, prefetch_factor: the DataLoader's.
    prefetch: batches copied and decoded ahead of the one yielded (GPU path).
    on_error: "raise" (L3Error naming the sample's key) or "skip" (the sample is replaced by the
    batch's first good one, batch["skipped"] lists (key, reason), and a warning is issued).
    decode_step: replaces the GPU decode (gpu_decode_step(backend)); host_decode_step runs the GPU
    path's logic without a GPU. transform: applied to each yielded batch dict.
    multiprocessing_context: how workers start (default: a forkserver, see _worker_context).
    timeout: seconds to wait for a batch from the workers before raising WorkerStalled (0: forever).
    """

    def __init__(
        self, dataset: L3Dataset, batch_size: int, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
        crop=None, normalize=None, channels_last: bool = True, device=None, num_workers: int = 0,
        prefetch_factor: int = 2, prefetch: int = 2, rank: int | None = None, world_size: int | None = None,
        on_error: str = "raise", backend: str = "cupy", decode_step=None, transform=None,
        multiprocessing_context=None, timeout: float = WORKER_TIMEOUT_S,
    ):
        if on_error not in ("raise", "skip"):
            raise L3Error(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = (torch.distributed.get_rank() if distributed else 0) if rank is None else rank
            world_size = (torch.distributed.get_world_size() if distributed else 1) if world_size is None else world_size
        self.dataset, self.batch_size = dataset, batch_size
        self.order = EpochOrder(len(dataset), batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank,
                                world_size=world_size, drop_last=drop_last)
        self.geometry = Full() if crop is None else crop
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        if dataset.decode == "gpu" and decode_step is None:
            if self.device.type != "cuda":
                raise L3Error("decode='gpu' needs a CUDA device; use L3Dataset(..., decode='cpu') without one")
            decode_step = gpu_decode_step(backend)
        self.decode_step, self.on_error, self.transform = decode_step, on_error, transform
        self.num_workers, self.prefetch_factor, self.prefetch = num_workers, prefetch_factor, max(1, prefetch)
        self.multiprocessing_context, self.timeout = multiprocessing_context, timeout
        resize = "matmul" if dataset.decode == "gpu" else "interpolate"
        self.finish = _Finish(normalize, channels_last, resize)
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
        if self.dataset.decode == "gpu":
            yield from self._gpu_batches(first, batches)
        else:
            yield from self._cpu_batches(first, batches)

    def _data_loader(self, first, batches, slots=0, wait_slot=None) -> DataLoader:
        """The DataLoader for this epoch's requests; its workers persist from epoch to epoch."""
        if self._batches_loader is None:
            source = _BatchSource(self.dataset, self.geometry, self.order.seed, self.on_error == "skip",
                                  self.finish, self._ring)
            # a weak method: the sampler, held by the DataLoader that the Loader holds, must not hold
            # the Loader, or a dropped Loader would linger as a cycle until some later collection,
            # perhaps inside the next loader's forked workers, whose copy of it cannot stop its workers
            self._requests = _Requests(slots, weakref.WeakMethod(wait_slot) if wait_slot else None)
            workers = self.num_workers
            self._batches_loader = DataLoader(
                source, sampler=self._requests, batch_size=None, collate_fn=_identity, num_workers=workers,
                prefetch_factor=self.prefetch_factor if workers else None, persistent_workers=workers > 0,
                worker_init_fn=_worker_init if workers else None,
                pin_memory=self.dataset.decode == "cpu" and self._device.cuda,
                multiprocessing_context=(self.multiprocessing_context or _worker_context()) if workers else None,
                timeout=self.timeout if workers else 0,
            )
        self._requests.start(self.order.epoch, batches, first)
        return _watched(self._batches_loader, self.timeout)

    def _cpu_batches(self, first, batches):
        for _, _, batch in self._data_loader(first, batches):
            if self._device.cuda:
                batch = {name: _to_device(value, self.device) for name, value in batch.items()}
            yield self._hand_out(batch)

    def _gpu_batches(self, first, batches):
        slots = self._staging_ring()
        inflight = collections.deque()
        for number, slot, staged in self._data_loader(first, batches, slots, self._wait_slot):
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
            self._ring = torch.empty((slots, size), dtype=torch.uint8).share_memory_()
            self._device.pin(self._ring)
            self._device_buffers = [torch.empty(size, dtype=torch.uint8, device=self.device)
                                    for _ in range(self.prefetch + 1)] if self._device.cuda else None
            self._next_buffer = 0
        return len(self._ring)

    def _wait_slot(self, slot: int) -> None:
        event = self._slot_events.pop(slot, None)
        if event is not None:
            event.synchronize()

    def _launch(self, slot: int, staged):
        """Copy the slot to the device and decode it on the side stream; nothing waits here."""
        size = staged.packed.size
        n = len(staged.batch.infos)
        with self._device.stream():
            if self._device.cuda:
                buffer = self._device_buffers[self._next_buffer][:size]
                self._next_buffer = (self._next_buffer + 1) % len(self._device_buffers)
                buffer.copy_(self._ring[slot, :size], non_blocking=True)
                self._slot_events[slot] = self._device.event()
            else:
                buffer = self._ring[slot, :size]
            out = torch.empty(max(staged.out_size, 1), dtype=torch.uint8, device=self.device)
            status = torch.zeros(n, dtype=torch.int32, device=self.device)
            self.decode_step(staged, buffer, out, status, self._device.side)
            images = {layout.name: self.finish.field(layout.name, out, layout, staged.crops)
                      for layout in staged.fields}
            status_host = status.to("cpu", non_blocking=True)
            done = self._device.event()
        return staged, images, status_host, done

    def _finish_launch(self, staged, images, status_host, done) -> dict:
        """Wait for one batch's decode, check its statuses (read once), hand its tensors to the current stream."""
        if done is not None:
            done.synchronize()
        status = np.zeros(len(staged.batch.infos), np.int32)
        status[gpu.status_order(staged.batch)] = status_host.numpy()
        bad_samples = sorted({int(i) // len(staged.fields) for i in np.flatnonzero(status)})
        if bad_samples:
            keys = [staged.keys[s] for s in bad_samples]
            if self.on_error == "raise" or len(bad_samples) == len(staged.keys):
                raise stage.BadSample(f"samples {keys} failed to decode (corrupt past their checksums)")
            good = next(s for s in range(len(staged.keys)) if s not in bad_samples)
            with self._device.stream():
                for name, value in images.items():
                    for s in bad_samples:
                        value[s] = value[good]  # a tensor row, or a list item
            for s in bad_samples:
                staged.skipped.append((staged.keys[s], "failed to decode"))
                staged.keys[s], staged.indices[s], staged.labels[s] = staged.keys[good], staged.indices[good], staged.labels[good]
        batch = _batch_dict(staged, images)
        batch["label"] = batch["label"].to(self.device, non_blocking=True) if self._device.cuda else batch["label"]
        tensors = [t for value in images.values() for t in (value if isinstance(value, list) else [value])]
        self._device.hand_over(done, tensors)
        return batch


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


def _watched(batches: DataLoader, timeout: float):
    """Iterate a DataLoader, turning its timeout into an error that names the likely causes."""
    iterator = iter(batches)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return
        except RuntimeError as error:
            if "timed out" not in str(error):
                raise
            raise WorkerStalled(
                f"no batch came from the loader's {batches.num_workers} workers in {timeout:g} s: a worker is "
                f"stuck. Workers started by forking a process whose thread pools were running (torch's "
                f"or Numba's OpenMP threads after a training step) deadlock; they start from a forkserver "
                f"unless multiprocessing_context says otherwise (it is {batches.multiprocessing_context!r}). "
                f"A source that never answers (a FIFO, a stalled remote read) stalls them too."
            ) from None


def _worker_init(worker_id: int) -> None:
    _one_numba_thread()


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [v.to(device, non_blocking=True) for v in value]
    return value
