"""L3Dataset: a split of a converted dataset, map-style, decoded on the CPU or handed over as bytes."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, get_worker_info

from .. import codec
from .. import staging as stage
from ..format import MAX_PIXELS, L3Error
from ..torch import chw_view

DEFAULT_FIELDS = ("image", "labelIds")


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
    max_pixels: a batch whose decoded regions hold more pixels is refused (L3Error) before any
    output is allocated; a sample alone, in dataset[i], likewise.
    cache: an l3codec.cache.SampleCache keeping the samples' compressed bytes on this node, shared
    by every worker and job that reads this dataset.
    """

    def __init__(self, root, split: str = "train", fields=None, decode: str = "gpu", transform=None, *,
                 storage_options=None, verify: bool = True, cache=None, max_pixels: int = MAX_PIXELS):
        from ..dataset import open_dataset

        if decode not in ("gpu", "cpu"):
            raise L3Error(f"decode must be 'gpu' or 'cpu', not {decode!r}")
        self.reader = open_dataset(root, split=split, storage_options=storage_options, cache=cache)
        present = tuple(self.reader.fields)
        if fields is None:
            fields = tuple(name for name in DEFAULT_FIELDS if name in present)
        fields = tuple(fields)
        missing = [name for name in fields if name not in present]
        if not fields or missing:
            raise L3Error(f"split {split!r} has fields {present}; asked for {fields}")
        self.fields, self.decode, self.transform, self.verify = fields, decode, transform, verify
        self.max_pixels = max_pixels
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
                image = codec.decode(data, verify=self.verify, max_pixels=self.max_pixels)
            except L3Error as error:
                raise stage.BadSample(f"sample {sample['key']!r} (index {index}), {name}: {error}") from error
            sample[name] = chw_view(torch.from_numpy(image))
        return self.transform(sample) if self.transform is not None else sample
