"""The Loader's grouped options: where decoding happens (Decode) and how the workers run (Workers).

    Loader(dataset, 16, decode=Decode("gpu", device="cuda:1"), workers=Workers(4, timeout=120))
    Loader(dataset, 16, decode="cpu", workers=4)       # the short forms

Before these, the same settings were keywords of Loader (device, backend, decode_step, prefetch;
num_workers, prefetch_factor, multiprocessing_context, timeout) and L3Dataset(decode=); those
are still accepted, with a DeprecationWarning, for one version (legacy_options).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from .. import gpu
from ..format import L3Error
from .workers import WORKER_TIMEOUT_S

PLACES = ("gpu", "cpu")


@dataclass(frozen=True)
class Decode:
    """Where the loader decodes, and the settings that only that place has.

    on=None (the default): "gpu" when `device` is a CUDA device, else "cpu".
    on="gpu": the workers stage each batch's compressed bytes and the device decodes the whole
    batch (the CUDA kernels through `backend`, "cupy" or "numba"), `prefetch` batches ahead of the
    one yielded. on="cpu": the workers decode with the Numba CPU decoder, one thread each.
    device: where batches are yielded ("cuda" by default where there is one, else "cpu"); "gpu"
    needs a CUDA device unless `step` replaces the kernels (host_decode_step runs the GPU path's
    logic on the host, for tests and machines without a GPU).
    """

    on: str | None = None
    device: object = None
    backend: str = "cupy"
    step: Callable | None = None
    prefetch: int = 2

    def __post_init__(self):
        if self.on is not None and self.on not in PLACES:
            raise L3Error(f"Decode(on=) must be one of {PLACES} or None, not {self.on!r}")
        if self.backend not in gpu.BACKENDS:
            raise L3Error(f"backend must be one of {gpu.BACKENDS}, not {self.backend!r}")
        if self.step is not None and (self.on == "cpu" or not callable(self.step)):
            raise L3Error("Decode(step=) replaces the GPU decode: a callable, with on='gpu'")
        if not isinstance(self.prefetch, int) or isinstance(self.prefetch, bool) or self.prefetch < 0:
            raise L3Error(f"prefetch must be an integer >= 0, not {self.prefetch!r}")

    def place(self, device) -> str:
        """"gpu" or "cpu": `on`, or where it is None, "gpu" for a CUDA device (or a replaced step)."""
        if self.on is not None:
            return self.on
        return "gpu" if self.step is not None or device.type == "cuda" else "cpu"


@dataclass(frozen=True)
class Workers:
    """The DataLoader worker processes that read (and on the CPU path decode) whole batches.

    count: processes (0: the main process does it). prefetch_factor: batches each worker keeps
    ready. timeout: seconds without a batch before WorkerStalled is raised (0: wait forever).
    context: how workers start, a multiprocessing context or its name (default: a forkserver).
    """

    count: int = 0
    prefetch_factor: int = 2
    timeout: float = WORKER_TIMEOUT_S
    context: object = None

    def __post_init__(self):
        for name in ("count", "prefetch_factor"):
            value = getattr(self, name)
            least = 0 if name == "count" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise L3Error(f"Workers({name}=) must be an integer >= {least}, not {value!r}")
        if not isinstance(self.timeout, (int, float)) or self.timeout < 0:
            raise L3Error(f"Workers(timeout=) must be a number of seconds >= 0, not {self.timeout!r}")


# the keywords Loader took before the groups: keyword -> (group, field)
LEGACY_KEYWORDS = {
    "device": ("decode", "device"), "backend": ("decode", "backend"), "decode_step": ("decode", "step"),
    "prefetch": ("decode", "prefetch"), "num_workers": ("workers", "count"),
    "prefetch_factor": ("workers", "prefetch_factor"), "multiprocessing_context": ("workers", "context"),
    "timeout": ("workers", "timeout"),
}


def as_decode(decode, dataset_place: str | None) -> Decode:
    """Decode from a Decode, "gpu"/"cpu", or None: the deprecated L3Dataset(decode=) where it was
    given, else Decode() (on the GPU where the device is one)."""
    if isinstance(decode, Decode):
        return decode
    if isinstance(decode, str):
        return Decode(decode)
    if decode is not None:
        raise L3Error(f"decode must be a Decode, 'gpu' or 'cpu', not {decode!r}")
    return Decode(dataset_place)


def as_workers(workers) -> Workers:
    """Workers from a Workers, a count, or None (no worker processes)."""
    if isinstance(workers, Workers):
        return workers
    if workers is None:
        return Workers()
    if isinstance(workers, int) and not isinstance(workers, bool):
        return Workers(workers)
    raise L3Error(f"workers must be a Workers or a count, not {workers!r}")


def legacy_options(decode: Decode, workers: Workers, keywords: dict) -> tuple:
    """(decode, workers) with the deprecated keywords folded in, warning once per call that names them."""
    unknown = sorted(set(keywords) - set(LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"Loader() got unexpected keyword arguments {unknown}")
    if not keywords:
        return decode, workers
    groups = {"decode": {}, "workers": {}}
    for keyword, value in keywords.items():
        group, field = LEGACY_KEYWORDS[keyword]
        groups[group][field] = value
    moved = ", ".join(f"{keyword}= -> {LEGACY_KEYWORDS[keyword][0].title()}({LEGACY_KEYWORDS[keyword][1]}=)"
                      for keyword in keywords)
    warnings.warn(f"Loader({', '.join(keywords)}=...) is deprecated and goes in the next version: "
                  f"{moved}", DeprecationWarning, stacklevel=3)
    return dataclasses.replace(decode, **groups["decode"]), dataclasses.replace(workers, **groups["workers"])
