"""One loader, several trainers: a producer decodes each batch once and every consumer on the
node receives it (TensorSocket's idea; CoorDL's coordinated prep for a hyperparameter search).

    # the producer (one process)
    loader = Loader(L3Dataset(root, decode="cpu"), 16, crop=RandomResizedCrop(224), num_workers=4)
    BatchServer(loader, "/tmp/l3-share.sock", slots=4).run(epochs=90)

    # each trainer
    shared = SharedLoader("/tmp/l3-share.sock", join="epoch")
    for epoch in range(90):
        for batch in shared:       # the producer's batches of this epoch, in its order
            ...

Every consumer that joined at an epoch's start sees every batch of that epoch once, in the
producer's order. A consumer may join late, from the next batch or the next epoch (join=), and
leave or crash at any time: the producer notices its socket close and goes on without it. The
producer keeps at most `slots` batches that some consumer has not taken yet, so the slowest
consumer sets the pace and memory stays bounded; with no consumer connected it waits.

Transport: a UNIX socket carries small messages (length-prefixed pickles); each batch's tensors
travel in one shared-memory segment that every consumer copies out of, then acknowledges; the
producer unlinks it once every consumer it was sent to has acknowledged or left.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import torch

from .format import L3Error

JOIN_POINTS = ("batch", "epoch")
_LENGTH = struct.Struct("<Q")


def _send(sock: socket.socket, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _receive(sock: socket.socket):
    """The next message, or None when the other end has gone."""
    head = _receive_exactly(sock, _LENGTH.size)
    if head is None:
        return None
    body = _receive_exactly(sock, _LENGTH.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _receive_exactly(sock: socket.socket, count: int) -> bytes | None:
    chunks, left = [], count
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- a batch in shared memory ---------------------------------------------------------------------
def _flatten(value, tensors: list):
    """value with each tensor replaced by ("tensor", number, channels_last) and appended to tensors."""
    if isinstance(value, torch.Tensor):
        channels_last = value.ndim == 4 and not value.is_contiguous() and value.is_contiguous(
            memory_format=torch.channels_last)
        stored = value.permute(0, 2, 3, 1) if channels_last else value
        tensors.append(stored.detach().cpu().contiguous())
        return ("tensor", len(tensors) - 1, channels_last)
    if isinstance(value, dict):
        return {key: _flatten(item, tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_flatten(item, tensors) for item in value]
    return ("value", value)


def _rebuild(layout, tensors: list):
    if isinstance(layout, dict):
        return {key: _rebuild(item, tensors) for key, item in layout.items()}
    if isinstance(layout, list):
        return [_rebuild(item, tensors) for item in layout]
    if layout[0] == "tensor":
        tensor = tensors[layout[1]]
        return tensor.permute(0, 3, 1, 2) if layout[2] else tensor
    return layout[1]


def _publish(batch) -> tuple:
    """(segment, message fields): the batch's tensors copied into one new shared-memory segment."""
    tensors = []
    layout = _flatten(batch, tensors)
    specs, offset = [], 0
    for tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        specs.append((offset, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)))
        offset += (size + 63) // 64 * 64
    segment = shared_memory.SharedMemory(create=True, size=max(offset, 1))
    for tensor, (start, _, _) in zip(tensors, specs):
        size = tensor.numel() * tensor.element_size()
        segment.buf[start:start + size] = tensor.view(torch.uint8).reshape(-1).numpy() if size else b""
    return segment, {"segment": segment.name, "layout": layout, "tensors": specs}


def _take(message) -> dict:
    """The batch of a published message, copied out of its segment (which may go once acknowledged)."""
    segment = shared_memory.SharedMemory(name=message["segment"])
    # attaching registers it with this process's resource tracker, which would unlink it at exit
    # (Python < 3.13 has no track=False): the producer owns it
    resource_tracker.unregister(segment._name, "shared_memory")
    try:
        tensors = []
        for start, dtype, shape in message["tensors"]:
            dtype = getattr(torch, dtype)
            count = int(np.prod(shape, dtype=np.int64))
            size = count * torch.empty(0, dtype=dtype).element_size()
            out = torch.empty(shape, dtype=dtype)
            if size:
                out.view(torch.uint8).reshape(-1).numpy()[:] = np.frombuffer(segment.buf, np.uint8, size, start)
            tensors.append(out)
        return _rebuild(message["layout"], tensors)
    finally:
        segment.close()


# -- the producer ---------------------------------------------------------------------------------
class _Consumer:
    def __init__(self, sock: socket.socket, join: str):
        self.sock, self.join = sock, join
        self.active = False  # receives batches (from its join point on)
        self.gone = False
        self.pending = set()  # batch numbers sent and not acknowledged


class BatchServer:
    """Serves a Loader's batches to every SharedLoader connected to `path` (a UNIX socket).

    slots: batches held at most (each until every consumer sent it has taken it or left).
    min_consumers: consumers to wait for before the first batch; after it, at least one."""

    def __init__(self, loader, path, *, slots: int = 4, min_consumers: int = 1):
        if slots < 1:
            raise L3Error(f"slots must be at least 1, not {slots}")
        self.loader, self.path, self.slots, self.min_consumers = loader, os.fspath(path), slots, min_consumers
        self._consumers: list[_Consumer] = []
        self._segments = {}  # batch number -> segment
        self._changed = threading.Condition()
        self._epoch_started = False  # a batch of the current epoch went out: epoch joiners wait
        self.most_outstanding = 0  # the most batches held at once (at most slots)
        self.served = 0

    def run(self, epochs: int) -> None:
        """Produce `epochs` epochs (set_epoch(e) before each), then tell the consumers it is over."""
        if os.path.exists(self.path):
            os.unlink(self.path)  # a socket left by a producer that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        number = 0
        try:
            for epoch in range(epochs):
                self.loader.set_epoch(epoch)
                self._start_epoch(epoch)
                for batch in self.loader:
                    if not self._wait_for_room():
                        break  # nobody takes the rest of this epoch, and someone waits for the next
                    self._send_batch(epoch, number, batch)
                    number += 1
                self._broadcast({"end": epoch})
            with self._changed:  # every batch taken (or its consumer gone) before the segments go
                self._changed.wait_for(lambda: not self._segments)
        finally:
            self._broadcast({"closed": True})
            listener.close()
            if os.path.exists(self.path):
                os.unlink(self.path)
            for segment in self._segments.values():
                segment.close()
                segment.unlink()
            self._segments.clear()

    def _accept(self, listener) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            hello = _receive(sock)
            join = hello.get("join") if isinstance(hello, dict) else None
            if join not in JOIN_POINTS:
                sock.close()
                continue
            consumer = _Consumer(sock, join)
            with self._changed:
                consumer.active = join == "batch" or not self._epoch_started
                self._consumers.append(consumer)
                self._changed.notify_all()
            threading.Thread(target=self._listen, args=(consumer,), daemon=True).start()

    def _listen(self, consumer: _Consumer) -> None:
        while True:
            message = _receive(consumer.sock)
            with self._changed:
                if message is None:  # left or crashed: nothing more is waited for from it
                    consumer.gone = True
                    consumer.pending.clear()
                    self._consumers.remove(consumer)
                else:
                    consumer.pending.discard(message["ack"])
                self._release_taken()
                self._changed.notify_all()
            if message is None:
                consumer.sock.close()
                return

    def _release_taken(self) -> None:
        waiting = {number for consumer in self._consumers for number in consumer.pending}
        for number in [n for n in self._segments if n not in waiting]:
            segment = self._segments.pop(number)
            segment.close()
            segment.unlink()

    def _start_epoch(self, epoch: int) -> None:
        with self._changed:
            self._epoch_started = False
            for consumer in self._consumers:
                consumer.active = True

    def _wait_for_room(self) -> bool:
        """Wait until a batch may be sent: False when no consumer takes this epoch any more but
        one waits for the next (the epoch ends early rather than stall)."""
        def ready():
            active = sum(c.active for c in self._consumers)
            waiting = len(self._consumers) - active
            needed = self.min_consumers if not self.served else 1  # min_consumers: before the first batch
            return (active == 0 and waiting > 0) or (len(self._segments) < self.slots and active >= needed)

        with self._changed:
            self._changed.wait_for(ready)
            return any(c.active for c in self._consumers)

    def _send_batch(self, epoch: int, number: int, batch) -> None:
        segment, fields = _publish(batch)
        with self._changed:
            self._epoch_started = True
            receivers = [consumer for consumer in self._consumers if consumer.active]
            self._segments[number] = segment
            for consumer in receivers:
                consumer.pending.add(number)
            self.most_outstanding = max(self.most_outstanding, len(self._segments))
        message = {"batch": number, "epoch": epoch, **fields}
        for consumer in receivers:
            try:
                _send(consumer.sock, message)
            except OSError:
                pass  # its listener sees the socket close and drops it
        self.served += 1
        with self._changed:
            self._release_taken()

    def _broadcast(self, message) -> None:
        with self._changed:
            receivers = [consumer for consumer in self._consumers if consumer.active]
        for consumer in receivers:
            try:
                _send(consumer.sock, message)
            except OSError:
                pass


# -- a consumer -----------------------------------------------------------------------------------
class SharedLoader:
    """The batches a BatchServer at `path` produces. Iterating gives one epoch's batches; iterate
    again for the next. join="batch" starts with the next batch produced, "epoch" with the next
    epoch's first."""

    def __init__(self, path, *, join: str = "epoch", connect_timeout: float = 60.0):
        if join not in JOIN_POINTS:
            raise L3Error(f"join must be one of {JOIN_POINTS}, not {join!r}")
        self.path, self.closed, self.epoch = os.fspath(path), False, None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(connect_timeout)
        try:
            self._sock.connect(self.path)
        except OSError as error:
            raise L3Error(f"no BatchServer answers at {self.path} ({error.strerror or error})") from None
        self._sock.settimeout(None)
        _send(self._sock, {"join": join})

    def __iter__(self):
        while not self.closed:
            message = _receive(self._sock)
            if message is None or "closed" in message:
                self.close()
                return
            if "end" in message:
                return
            batch = _take(message)
            _send(self._sock, {"ack": message["batch"]})
            self.epoch = message["epoch"]
            yield batch

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
