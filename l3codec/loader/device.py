"""The GPU path's streams, events and pinned memory on CUDA; the same calls do nothing on the CPU.

Two side streams: `copy` takes each staged batch to the device and `decode` runs its kernels,
resize and finishing, so the copy of batch k+1 overlaps the decode of batch k. The decode stream
has the lowest priority, so the training stream's kernels are scheduled first where both are
ready. Events are blocking: a host wait sleeps instead of keeping a core spinning.

The staging ring is page-locked in the main process after it is shared. The workers that write
into it start from a forkserver (workers.py), not by fork, so no child ever inherits a
registered range: each maps the ring's shared memory afresh from its file descriptor.
"""

from __future__ import annotations

import contextlib
import os
import weakref

import torch

from ..format import L3Error

HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: the pinned range counts as such in every context
LOWEST_PRIORITY = 0  # CUDA stream priorities run from 0 (lowest, torch's default) to negative (higher)


def resolve_device(device=None) -> torch.device:
    """The loader's device with its index fixed at construction: None means CUDA where available,
    else the CPU; a CUDA device without an index is LOCAL_RANK's GPU (torchrun sets it) or else the
    current one, so DDP ranks that never call torch.cuda.set_device do not all land on GPU 0, and a
    set_device after construction does not split the loader across GPUs."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise L3Error(f"device={str(device)!r}: this machine has no CUDA device (or torch is a CPU build); "
                      "use Loader(decode=Decode('cpu', device='cpu'))")
    if device.index is None:
        local_rank = os.environ.get("LOCAL_RANK")
        index = int(local_rank) if local_rank is not None else torch.cuda.current_device()
        if not 0 <= index < torch.cuda.device_count():
            raise L3Error(f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} CUDA devices")
        device = torch.device("cuda", index)
    return device


class _Device:
    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"
        if self.cuda:
            self.copy = torch.cuda.Stream(device)
            self.decode = torch.cuda.Stream(device, priority=LOWEST_PRIORITY)
        else:
            self.copy = self.decode = None

    def on(self, stream):
        """A context in which work is queued on stream (nothing on the CPU)."""
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def record(self):
        """A blocking event recorded on the current stream (None on the CPU)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event(blocking=True)
        event.record()
        return event

    def wait(self, event) -> None:
        """The current stream waits for event (recorded on another stream) before its next work."""
        if self.cuda and event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)

    def pin(self, tensor: torch.Tensor) -> None:
        """Page-lock a shared-memory tensor in place, so that copies from it are asynchronous DMA,
        until the tensor is freed: a registration that outlived its memory would make the next
        loader's cudaHostRegister of the same addresses fail. Registered within this loader's
        device (no context is made on GPU 0 for a rank on cuda:3), and portable to all contexts."""
        if self.cuda:
            cudart = torch.cuda.cudart()
            with torch.cuda.device(self.device):
                result = cudart.cudaHostRegister(tensor.data_ptr(), tensor.numel(), HOST_REGISTER_PORTABLE)
            if int(result) != 0:
                raise RuntimeError(f"cudaHostRegister of the staging buffers failed ({result})")
            weakref.finalize(tensor, cudart.cudaHostUnregister, tensor.data_ptr())

    def hand_over(self, event, tensors) -> None:
        """Make tensors made on the decode stream safe on the caller's current stream."""
        if not self.cuda:
            return
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors:
            tensor.record_stream(current)


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [v.to(device, non_blocking=True) for v in value]
    return value
