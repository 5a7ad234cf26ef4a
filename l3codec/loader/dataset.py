"""L3Dataset: a split of a converted dataset, map-style, decoded on the CPU or handed over as bytes."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from .. import codec
from .. import staging as stage
from ..fields import declared
from ..format import MAX_PIXELS, L3Error
from ..torch import chw_view

DEFAULT_FIELDS = ("image", "labelIds")


def _one_numba_thread() -> None:
    """In a DataLoader worker: decode with one Numba thread, so workers do not oversubscribe the cores."""
    import numba

    numba.set_num_threads(1)


def _check_dtype(reader, spec) -> None:
    """A declared field's dtype against the depths the split's index records."""
    if spec.dtype is None:
        return
    bits = 16 if spec.dtype == "uint16" else 8
    found = sorted(set(np.unique(reader.index[f"{spec.name}_bits"]).tolist()) - {bits})
    if found:
        raise L3Error(f"field {spec.name!r} is declared {spec.dtype}, but the split {reader.split!r} holds "
                      f"{'/'.join(map(str, found))}-bit samples of it")


class L3Dataset(Dataset):
    """A split of a converted dataset (l3convert), map-style: dataset[i] is a dict.

    fields: the image-like fields to return, each a built-in name ("image", "labelIds",
    "instanceIds", "color") or an l3codec.fields.Field declared by the user (a depth map, a
    second label map); None: "image" and "labelIds" where the split has them.
    dataset[i] holds each field as a CHW tensor (HW label maps as 1×H×W) from the Numba CPU
    decoder, or with compressed=True as its compressed bytes (a uint8 numpy array) for a
    DataLoader of your own that decodes them (l3codec.torch.decode). Where Loader decodes is
    Loader(decode=), never the dataset's.
    Each dict also holds "key", "index" and "label" (class index, -1 without classes), and goes
    through transform when given. root: a path or an fsspec URL (storage_options for its backend).
    max_pixels: a batch whose decoded regions hold more pixels is refused (L3Error) before any
    output is allocated; a sample alone, in dataset[i], likewise.
    cache: an l3codec.cache.SampleCache keeping the samples' compressed bytes on this node, shared
    by every worker and job that reads this dataset.
    decode: deprecated ("gpu": compressed items and a loader decoding on the GPU; "cpu": decoded
    items and a loader decoding on the CPU); say compressed= here and Loader(decode=) instead.
    """

    def __init__(self, root, split: str = "train", fields=None, decode: str | None = None, transform=None, *,
                 storage_options=None, verify: bool = True, cache=None, max_pixels: int = MAX_PIXELS,
                 compressed: bool = False):
        from ..dataset import open_dataset

        if decode is not None:
            if decode not in ("gpu", "cpu"):
                raise L3Error(f"decode must be 'gpu' or 'cpu', not {decode!r}")
            warnings.warn(f"L3Dataset(decode={decode!r}) is deprecated and goes in the next version: say "
                          f"where the loader decodes with Loader(decode={decode!r})"
                          + (" and ask for bytes with L3Dataset(compressed=True)" if decode == "gpu" else ""),
                          DeprecationWarning, stacklevel=2)
            compressed = decode == "gpu"
        self.reader = open_dataset(root, split=split, storage_options=storage_options, cache=cache)
        present = tuple(self.reader.fields)
        if fields is None:
            fields = tuple(name for name in DEFAULT_FIELDS if name in present)
        specs = [declared(spec) for spec in (fields if isinstance(fields, (list, tuple)) else (fields,))]
        missing = [spec.name for spec in specs if spec.name not in present]
        if not specs or missing:
            asked = tuple(spec.name for spec in specs)
            raise L3Error(f"split {split!r} has fields {present}; asked for {asked}")
        for spec in specs:
            _check_dtype(self.reader, spec)
        self.field_specs = {spec.name: spec for spec in specs}
        self.fields = tuple(self.field_specs)
        self.legacy_decode = decode  # what a Loader without decode= does, until the keyword goes
        self.compressed, self.transform, self.verify = bool(compressed), transform, verify
        self.max_pixels = max_pixels
        self._threads_set = False

    def with_cache(self, cache) -> L3Dataset:
        """A copy of this dataset that reads through cache; this one is left as it is."""
        other = copy.copy(self)
        other.reader = self.reader.with_cache(cache)
        return other

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> dict:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        sample = {"key": self.reader.key(index), "index": index, "label": self.reader.label(index)}
        if not self.compressed and not self._threads_set and get_worker_info() is not None:
            _one_numba_thread()
            self._threads_set = True
        for name in self.fields:
            data = self.reader.read(index, name)
            if self.compressed:
                sample[name] = data
                continue
            try:
                image = codec.decode(data, verify=self.verify, max_pixels=self.max_pixels)
            except L3Error as error:
                raise stage.BadSample(f"sample {sample['key']!r} (index {index}), {name}: {error}") from error
            sample[name] = chw_view(torch.from_numpy(image))
        return self.transform(sample) if self.transform is not None else sample
