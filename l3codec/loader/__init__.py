"""Training input from a converted dataset: L3Dataset (map-style) and Loader (whole batches, decoded on the GPU).

    from l3codec.loader import Decode, L3Dataset, Loader, RandomResizedCrop, Workers

    dataset = L3Dataset("/data/cityscapes-l3", split="train", fields=("image", "labelIds"))
    loader = Loader(dataset, batch_size=16, crop=RandomResizedCrop(512, flip=0.5),
                    decode=Decode("gpu", device="cuda"), workers=Workers(4))
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:      # {"image": N×3×H×W uint8 (channels_last), "labelIds": N×H×W, "label": N, ...}
            ...

Decode("gpu"): DataLoader workers read each batch's compressed bytes straight into a reused
pinned staging buffer and validate them (l3codec.staging); the main process copies that
buffer to the device on a side stream and decodes it with one launch per mode and channel count, with a
region per crop; `prefetch` batches are copied and decoded ahead of the one the training
step uses. Decode("cpu"): the workers decode with the Numba CPU decoder (one thread each).
Crops, flips and resizes use one geometry per sample for all of its fields (images
bilinear, label maps nearest; a field the user declares, l3codec.fields.Field, says which it is).
The order is l3codec.order.EpochOrder: global, a function of (seed, epoch), equal batch counts
on every rank, resumable mid-epoch with state_dict()."""

from __future__ import annotations

from ..geometry import CenterCrop, Full, RandomCrop, RandomResizedCrop
from ..fields import Field
from .dataset import DEFAULT_FIELDS, L3Dataset
from .decode_steps import gpu_decode_step, host_decode_step
from ..cache import SampleCache
from .loader import Loader
from .options import Decode, Workers
from .workers import WORKER_TIMEOUT_S, WorkerExited, WorkerStalled

__all__ = [
    "L3Dataset", "Loader", "Decode", "Workers", "Field", "CenterCrop", "Full", "RandomCrop", "RandomResizedCrop",
    "host_decode_step", "gpu_decode_step", "WorkerExited", "WorkerStalled", "WORKER_TIMEOUT_S", "DEFAULT_FIELDS", "SampleCache",
]
