"""Streams, events and pinned memory on CUDA; the same calls do nothing on the CPU."""

from __future__ import annotations

import weakref

import torch


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


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [v.to(device, non_blocking=True) for v in value]
    return value
