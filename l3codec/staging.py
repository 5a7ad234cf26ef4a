"""Staging a batch of dataset samples for decoding: the per-sample host work a DataLoader worker does.

For each sample of a batch: draw its crop (the same for all of its fields), read each field's
bytes, validate them (header, stream table, checksum, region: batch.plan_item), and choose
where its decoded pixels go. For the GPU the bytes are read straight into a staging buffer
and the launch tables are written after them (batch.write_packed), so the main process
copies one buffer to the device and launches. numpy only, no torch.

Outputs are laid out field by field: a field whose items in this batch share channels and
dtype gets one canvas (N, H, W, C), H and W the largest region of the batch (equal crops
fill it exactly); otherwise each item is laid out on its own (the loader then yields a list).
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field

import numpy as np

from . import batch as batching
from .format import MAX_PIXELS, L3Error
from .order import sample_rng


@dataclass
class SamplePlan:
    """One sample's validated members, in the order of the batch's fields."""

    index: int
    key: str
    label: int
    crop: object  # geometry.Crop
    plans: list  # batch.ItemPlan per field
    views: list  # the bytes each plan validated


@dataclass
class FieldLayout:
    """Where one field's decoded items lie in the output buffer."""

    name: str
    canvas: tuple | None  # (H, W) of an (N, H, W, C) canvas, or None: each item on its own
    offsets: list  # per item: byte offset of its region's origin
    pitches: list  # per item: bytes between rows
    channels: list  # per item
    dtypes: list  # per item
    offset: int  # byte offset of the field's first item
    size: int  # bytes the field takes


@dataclass
class StagedBatch:
    """What a worker hands the main process: small metadata (the bytes stay in the staging buffer)."""

    indices: np.ndarray
    keys: list
    labels: np.ndarray
    crops: list
    fields: list  # FieldLayout per field
    out_size: int
    skipped: list = dataclass_field(default_factory=list)  # (key, reason) of replaced samples
    batch: batching.Batch | None = None  # GPU: launch tables, data left in the buffer
    packed: batching.PackedLayout | None = None


class BadSample(L3Error):
    """A sample failed validation or decoding; the message names its key."""

    @classmethod
    def whole_batch(cls, reasons) -> "BadSample":
        """Every sample of a batch failed: none is left to stand in for the others."""
        return cls("no good sample to substitute in this batch: " + "; ".join(reasons))


def plan_samples(reader, indices, fields, geometry, *, seed: int, epoch: int, verify: bool = True,
                 buffer: np.ndarray | None = None, skip_bad: bool = False, max_pixels: int = MAX_PIXELS) -> tuple:
    """(sample plans in batch order, skipped [(key, reason)], bytes written to buffer).

    buffer: validate each member, then copy into it, back to back, the streams its crop's tiles
    use (GPU staging; batching.stage_streams); None validates the reader's own bytes (CPU
    decoding). A bad sample raises BadSample naming its key, or with skip_bad is replaced by the
    batch's first good sample (its index then appears twice). A batch with no good sample raises. A sample that appears more than once
    (a replacement, a sampler drawing with replacement, a batch larger than the dataset) is read
    and staged once, so a buffer sized by staging_bytes always holds the batch.
    """
    samples, bad, written = [], [], 0
    first_seen = {}  # index -> its SamplePlan, or the reason it is bad
    fetched = _fetch_remote(reader, indices, fields)
    for position, index in enumerate(int(i) for i in indices):
        key = reader.key(index)
        if index in first_seen:
            seen = first_seen[index]
            if isinstance(seen, SamplePlan):
                samples.append(seen)
            else:
                bad.append((position, key, seen))
                samples.append(None)
            continue
        start = written
        try:
            height, width = reader.shape(index, fields[0])[:2]
            crop = geometry(height, width, sample_rng(seed, epoch, index))
            plans, views = [], []
            for name in fields:
                view = fetched.pop((index, name), None)
                if isinstance(view, BaseException):
                    raise view
                if view is None:
                    view = reader.read(index, name)
                plan = batching.plan_item(view, crop.region, verify=verify)
                if (plan.info.height, plan.info.width) != (height, width):
                    raise L3Error(f"{name} is {plan.info.height}x{plan.info.width}, the sample {height}x{width}")
                if buffer is not None:  # only the streams the crop's tiles use (sized from the index)
                    plan = batching.stage_streams(plan, view, buffer[written:])
                    view = buffer[written:written + plan.size]
                    written += plan.size
                plans.append(plan)
                views.append(view)
        except (L3Error, OSError, KeyError) as error:
            if not skip_bad:
                raise BadSample(f"sample {key!r} (index {index}): {error}") from error
            written = start
            bad.append((position, key, str(error)))
            first_seen[index] = str(error)
            samples.append(None)
            continue
        samples.append(SamplePlan(index, key, reader.label(index), crop, plans, views))
        first_seen[index] = samples[-1]
    good = next((s for s in samples if s is not None), None)
    if bad and good is None:
        raise BadSample.whole_batch(f"{k!r}: {r}" for _, k, r in bad)
    for position, _, _ in bad:
        samples[position] = good  # its bytes are staged once; each item decodes them into its own place
    batching.check_pixels([plan for sample in samples for plan in sample.plans], max_pixels)  # before any output
    return samples, [(key, reason) for _, key, reason in bad], written


def _fetch_remote(reader, indices, fields) -> dict:
    """{(sample, field): bytes or the error reading them} of a remote dataset's batch, fetched
    concurrently (DatasetReader.read_many); empty for a local one, whose reads are mappings."""
    if not getattr(reader, "remote", False):
        return {}
    requests = [(index, name) for index in dict.fromkeys(int(i) for i in indices) for name in fields]
    return dict(zip(requests, reader.read_many(requests)))


def layout_fields(samples, fields) -> tuple:
    """([FieldLayout per field], total output bytes), each field 16-byte aligned."""
    layouts, offset = [], 0
    for f, name in enumerate(fields):
        plans = [sample.plans[f] for sample in samples]
        channels = [plan.info.channels for plan in plans]
        dtypes = [plan.info.dtype for plan in plans]
        if len(set(zip(channels, dtypes))) == 1:
            height = max(plan.region[2] for plan in plans)
            width = max(plan.region[3] for plan in plans)
            pitch = width * channels[0] * dtypes[0].itemsize
            item = height * pitch
            offsets = [offset + i * item for i in range(len(plans))]
            layout = FieldLayout(name, (height, width), offsets, [pitch] * len(plans), channels, dtypes,
                                 offset, item * len(plans))
        else:
            item_offsets, pitches, size = batching.default_layout(plans)
            layout = FieldLayout(name, None, [offset + int(o) for o in item_offsets], [int(p) for p in pitches],
                                 channels, dtypes, offset, size)
        layouts.append(layout)
        offset += (layout.size + 15) // 16 * 16
    return layouts, offset


def stage_for_gpu(reader, indices, fields, geometry, buffer: np.ndarray, *, seed: int, epoch: int,
                  verify: bool = True, skip_bad: bool = False, max_pixels: int = MAX_PIXELS) -> StagedBatch:
    """Read, validate and pack a batch into buffer (data, then the launch tables) for one launch."""
    samples, skipped, written = plan_samples(
        reader, indices, fields, geometry, seed=seed, epoch=epoch, verify=verify, buffer=buffer, skip_bad=skip_bad,
        max_pixels=max_pixels,
    )
    layouts, out_size = layout_fields(samples, fields)
    plans = [plan for sample in samples for plan in sample.plans]  # sample-major
    where = [view.ctypes.data - buffer.ctypes.data for sample in samples for view in sample.views]
    offsets = [layouts[f].offsets[s] for s in range(len(samples)) for f in range(len(fields))]
    pitches = [layouts[f].pitches[s] for s in range(len(samples)) for f in range(len(fields))]
    prepared = batching.assemble(plans, buffer[:written], layout=(offsets, pitches, out_size), data_offsets=where,
                                 max_pixels=max_pixels)
    packed = batching.packed_layout(prepared)
    batching.write_packed(prepared, packed, buffer)
    # the bytes and stream tables stay in the buffer; what the main process needs to launch travels back
    prepared.data = np.empty(0, np.uint8)
    prepared.stream_starts = prepared.stream_ends = np.empty(0, np.int64)
    return _staged(samples, layouts, out_size, skipped, prepared, packed)


def _staged(samples, layouts, out_size, skipped, prepared=None, packed=None) -> StagedBatch:
    return StagedBatch(
        indices=np.array([s.index for s in samples], np.int64),
        keys=[s.key for s in samples],
        labels=np.array([s.label for s in samples], np.int64),
        crops=[s.crop for s in samples],
        fields=layouts,
        out_size=out_size,
        skipped=skipped,
        batch=prepared,
        packed=packed,
    )


def staging_bytes(reader, fields, batch_size: int) -> int:
    """A staging buffer size that holds any batch of this split: the batch_size largest samples' bytes
    (plan_samples stages a repeated sample once), plus their launch tables at most
    (batch.most_table_bytes: per item, so a repeated sample has them once per appearance)."""
    data = np.zeros(len(reader), np.int64)
    tables = np.zeros(len(reader), np.int64)
    for name in fields:
        sizes, shapes = member_sizes(reader, name), member_shapes(reader, name)
        data += sizes
        tables += batching.most_table_bytes(sizes, shapes[:, 0], shapes[:, 1], shapes[:, 2])
    largest = np.sort(data)[-batch_size:].sum() + batch_size * tables.max(initial=0)
    return int(largest + 16 * (len(fields) + 2) * 8)  # and the tables' 8-byte alignment after the data


def member_sizes(reader, name) -> np.ndarray:
    """Bytes of field `name` for every sample, from the index."""
    return reader.index[f"{name}_size"].astype(np.int64)


def member_shapes(reader, name) -> np.ndarray:
    """(height, width, channels) of field `name` for every sample, from the index, as an (n, 3) array."""
    return np.stack([reader.index[f"{name}_{column}"].astype(np.int64) for column in ("height", "width", "channels")],
                    axis=1)
