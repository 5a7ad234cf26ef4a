"""One loader, several trainers: a producer decodes each batch once and every consumer on the
node receives it (TensorSocket's idea; CoorDL's coordinated prep for a hyperparameter search).

    # the producer (one process)
    loader = Loader(L3Dataset(root), 16, crop=RandomResizedCrop(224), decode="cpu", workers=4)
    BatchServer(loader, slots=4).run(epochs=90)          # at default_socket_path()

    # each trainer
    shared = SharedLoader(join="epoch")
    for epoch in range(90):
        for batch in shared:       # the producer's batches of this epoch, in its order
            ...

Every consumer that joined at an epoch's start sees every batch of that epoch once, in the
producer's order. A consumer may join late, from the next batch or the next epoch (join=), and
leave or crash at any time: the producer notices its socket close and goes on without it. The
producer keeps at most `slots` batches that some consumer has not taken yet, so the slowest
consumer sets the pace and memory stays bounded; with no consumer connected it waits.

Transport: a UNIX socket in a directory only its owner can enter carries small messages (a
fixed header, then JSON: nothing a peer sends is ever unpickled or run), each bounded in size
before it is read. Both ends check the peer's uid (SO_PEERCRED). Each batch's tensors travel in
one anonymous memory file (memfd) whose descriptor goes with the message (SCM_RIGHTS): it has
no name another user could open or guess, and the kernel frees it once the producer and every
consumer have closed it, whoever dies first. Both ends send a pulse each `peer_timeout / 4`
seconds: a peer silent for `peer_timeout` (a stopped process) is dropped or reported, and with
BatchServer(hold_timeout=) so is a live consumer that stops taking the batches sent to it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pwd
import queue
import signal
import socket
import stat
import struct
import tempfile
import threading
import time

import numpy as np
import torch

from .format import L3Error

JOIN_POINTS = ("batch", "epoch")
SOCKET_NAME = "l3-share.sock"
_HEADER = struct.Struct("<4sI")  # magic, body length
_MAGIC = b"L3S1"
CONTROL_LIMIT = 4096  # the most a consumer may send in one message (join, ack, pulse)
BATCH_LIMIT = 1 << 20  # the most the producer may send in one message (a batch's description)
HELLO_TIMEOUT = 5.0  # a new connection must say which join point it wants within this
SEND_TIMEOUT = 5.0  # a peer that does not take a small message within this is dropped
# a published batch can no longer change or shrink: no consumer alters what the others read
_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_DTYPES = {name: getattr(torch, name) for name in (
    "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool",
    "uint16", "uint32", "uint64") if hasattr(torch, name)}
log = logging.getLogger("l3codec.share")


class _Silent(Exception):
    """No message arrived within the socket's timeout (nothing of one was read)."""


def default_socket_path() -> str:
    """$XDG_RUNTIME_DIR/l3-share.sock, or <tempdir>/l3-share-<uid>/l3-share.sock (created 0700)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        try:
            _check_private_directory(runtime)
            return os.path.join(runtime, SOCKET_NAME)
        except L3Error:
            pass
    directory = os.path.join(tempfile.gettempdir(), f"l3-share-{os.geteuid()}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    _check_private_directory(directory, advice="the default directory is taken: pass a socket path in a "
                                               "directory of your own, or set XDG_RUNTIME_DIR")
    return os.path.join(directory, SOCKET_NAME)


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _check_private_directory(directory: str, advice: str = "use a directory of your own "
                                                           "(default_socket_path())") -> None:
    """Refuse a directory that is a link, belongs to another user or that another user can write."""
    try:
        info = os.lstat(directory)
    except OSError as error:
        raise L3Error(f"socket directory {directory}: {error.strerror}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise L3Error(f"socket directory {directory} is not a directory (a link is refused): {advice}")
    if info.st_uid not in (os.geteuid(), 0):
        raise L3Error(f"socket directory {directory} belongs to {_owner(info.st_uid)}: {advice}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise L3Error(f"socket directory {directory} is writable by other users (mode "
                      f"{stat.S_IMODE(info.st_mode):o}): another user could put a socket there first; "
                      f"{advice}")


def _peer_uid(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a UNIX socket (SO_PEERCRED)."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", credentials)
    return pid, uid


def _trusted(uid: int, allowed) -> bool:
    return uid in (os.geteuid(), 0) or uid in allowed


# -- messages -------------------------------------------------------------------------------------
def _send(sock: socket.socket, message: dict, fd: int | None = None) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    data = _HEADER.pack(_MAGIC, len(body)) + body
    if fd is None:
        sock.sendall(data)
    else:  # the descriptor rides on the first bytes
        sent = socket.send_fds(sock, [data], [fd])
        if sent < len(data):
            sock.sendall(data[sent:])


def _receive(sock: socket.socket, limit: int, fds: list | None = None):
    """The next message (a dict), or None when the other end has gone. Raises _Silent when
    nothing arrived within the socket's timeout, L3Error for a malformed message (its header
    is checked, and its length against limit, before the body is read). Descriptors that came
    with it are appended to fds (or closed where fds is None)."""
    head = _receive_exactly(sock, _HEADER.size, fds, first=True)
    if head is None:
        return None
    magic, length = _HEADER.unpack(head)
    if magic != _MAGIC:
        raise L3Error(f"not an l3codec.share message (header {head[:8].hex()})")
    if length > limit:
        raise L3Error(f"message of {length} bytes claimed, at most {limit} accepted")
    body = _receive_exactly(sock, length, fds)
    if body is None:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as error:  # undecodable, not JSON, or nested too deep
        raise L3Error(f"malformed message ({type(error).__name__})") from None
    if not isinstance(message, dict) or len(message) < 1:
        raise L3Error(f"malformed message: {type(message).__name__}, not a non-empty object")
    return message


def _receive_exactly(sock: socket.socket, count: int, fds: list | None, first: bool = False) -> bytes | None:
    chunks, left = [], count
    while left:
        try:
            chunk, received, _, _ = socket.recv_fds(sock, left, 4)
        except TimeoutError:
            if first and left == count:
                raise _Silent from None
            raise L3Error(f"message cut short: {count - left} of {count} bytes, then silence") from None
        except OSError:
            return None
        for fd in received:
            if fds is None:
                os.close(fd)
            else:
                fds.append(fd)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- a batch in anonymous shared memory -----------------------------------------------------------
def _flatten(value, tensors: list):
    """value's description (JSON) with each tensor appended to tensors."""
    if isinstance(value, torch.Tensor):
        channels_last = value.ndim == 4 and not value.is_contiguous() and value.is_contiguous(
            memory_format=torch.channels_last)
        stored = value.permute(0, 2, 3, 1) if channels_last else value
        tensors.append(stored.detach().cpu().contiguous())
        return {"tensor": len(tensors) - 1, "channels_last": channels_last}
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            kinds = [type(key).__name__ for key in value]
            raise L3Error(f"a shared batch's dict keys must be strings, not {kinds}")
        return {"dict": {key: _flatten(item, tensors) for key, item in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_flatten(item, tensors) for item in value]}
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise L3Error(f"a shared batch may hold tensors, dicts, lists, tuples, numbers and strings, "
                  f"not {type(value).__name__}")


def _rebuild(layout, tensors: list):
    if not isinstance(layout, dict) or len(layout) not in (1, 2):
        raise L3Error("malformed batch layout")
    if "tensor" in layout:
        tensor = tensors[layout["tensor"]]
        channels_last = layout.get("channels_last") is True and tensor.ndim == 4
        return tensor.permute(0, 3, 1, 2) if channels_last else tensor
    kind, content = next(iter(layout.items()))
    if kind == "dict" and isinstance(content, dict):
        return {key: _rebuild(item, tensors) for key, item in content.items()}
    if kind in ("list", "tuple") and isinstance(content, list):
        items = [_rebuild(item, tensors) for item in content]
        return items if kind == "list" else tuple(items)
    if kind == "value":
        return content
    raise L3Error("malformed batch layout")


def _publish(batch, name: str) -> tuple[int, dict]:
    """(descriptor, message fields): the batch's tensors written into one new memfd."""
    tensors = []
    layout = _flatten(batch, tensors)
    specs, offset = [], 0
    for tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        specs.append([offset, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)])
        offset += (size + 63) // 64 * 64
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, offset)
        for tensor, (start, _, _) in zip(tensors, specs):
            data = memoryview(tensor.view(torch.uint8).reshape(-1).numpy()) if tensor.numel() else b""
            while data:
                written = os.pwrite(fd, data, start)
                data, start = data[written:], start + written
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd, {"layout": layout, "tensors": specs}


def _take(message: dict, fd: int) -> dict:
    """The batch of a published message, copied out of its memfd (checked: every tensor's dtype,
    shape and extent)."""
    size = os.fstat(fd).st_size if stat.S_ISREG(os.fstat(fd).st_mode) else -1
    specs = message.get("tensors")
    if size < 0 or not isinstance(specs, list):
        raise L3Error("malformed batch message")
    try:
        sealed = fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS == _SEALS
    except OSError:
        sealed = False
    if not sealed:
        raise L3Error("batch segment not sealed against writes (not from a BatchServer)")
    tensors = []
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], int) and spec[1] in _DTYPES
                and isinstance(spec[2], list) and all(isinstance(d, int) and d >= 0 for d in spec[2])):
            raise L3Error(f"malformed tensor description {spec!r:.200}")
        start, dtype, shape = spec[0], _DTYPES[spec[1]], spec[2]
        length = int(np.prod(shape, dtype=object)) * torch.empty(0, dtype=dtype).element_size()
        if start < 0 or start + length > size:  # checked before anything is allocated
            raise L3Error(f"tensor {spec!r:.200} lies outside its {size}-byte segment")
        out = torch.empty(shape, dtype=dtype)
        view = memoryview(out.view(torch.uint8).reshape(-1).numpy()) if out.numel() else memoryview(b"")
        while view:
            read = os.preadv(fd, [view], start)
            if read <= 0:
                raise L3Error("batch segment shrank while being read")
            view, start = view[read:], start + read
        tensors.append(out)
    try:
        return _rebuild(message.get("layout"), tensors)
    except (IndexError, TypeError, RecursionError):
        raise L3Error("malformed batch layout") from None


# -- the producer ---------------------------------------------------------------------------------
class _Consumer:
    def __init__(self, sock: socket.socket, join: str, pid: int, uid: int):
        self.sock, self.join, self.pid, self.uid = sock, join, pid, uid
        self.active = False  # receives batches (from its join point on)
        self.gone = False
        self.pending = {}  # batch number -> when it was sent, until acknowledged
        self.sending = threading.Lock()
        self.out = sock.dup()  # its own timeout (SEND_TIMEOUT) while sock waits at most a pulse
        self.out.settimeout(SEND_TIMEOUT)

    def __str__(self):
        return f"consumer pid {self.pid} ({_owner(self.uid)})"


class BatchServer:
    """Serves a Loader's batches to every SharedLoader connected to `path` (a UNIX socket; by
    default default_socket_path(), in a directory only its owner can write).

    slots: batches held at most (each until every consumer sent it has taken it or left).
    min_consumers: consumers to wait for before the first batch; after it, at least one.
    allow_uids: users besides this one (and root) whose consumers are served.
    peer_timeout: a consumer silent this long (seconds; a live one pulses every quarter of it)
    is dropped, so a stopped trainer stalls the others at most this long.
    hold_timeout: a consumer that has not taken a batch this long after it was sent (seconds; a
    live process whose loop paused: a breakpoint, a long evaluation) is dropped. None (the
    default): the slowest consumer sets the pace, however slow. Set it above the longest a trainer
    may go without taking a batch (evaluation between epochs included) plus `slots` of its steps,
    as a batch also waits behind those sent before it."""

    def __init__(self, loader, path=None, *, slots: int = 4, min_consumers: int = 1, allow_uids=(),
                 peer_timeout: float = 30.0, hold_timeout: float | None = None):
        if slots < 1:
            raise L3Error(f"slots must be at least 1, not {slots}")
        if not peer_timeout > 0:
            raise L3Error(f"peer_timeout must be positive, not {peer_timeout}")
        if hold_timeout is not None and not hold_timeout > 0:
            raise L3Error(f"hold_timeout must be positive or None, not {hold_timeout}")
        self.hold_timeout = None if hold_timeout is None else float(hold_timeout)
        self.loader, self.slots, self.min_consumers = loader, slots, min_consumers
        self.path = os.fspath(path) if path is not None else default_socket_path()
        self.allow_uids, self.peer_timeout = frozenset(allow_uids), float(peer_timeout)
        self._consumers: list[_Consumer] = []
        self._segments = {}  # batch number -> memfd
        self._sending_number = None  # its memfd stays open while it is being sent
        self._changed = threading.Condition()
        self._epoch_started = False  # a batch of the current epoch went out: epoch joiners wait
        self._closing = False
        self.most_outstanding = 0  # the most batches held at once (at most slots)
        self.served = 0
        self.dropped = 0  # connections refused or dropped (each logged)

    def run(self, epochs: int) -> None:
        """Produce `epochs` epochs (set_epoch(e) before each), then tell the consumers it is over."""
        listener = self._bind()
        previous = None
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # so that finally removes the socket
            previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        number, finished = 0, False
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
            finished = True
        except BaseException as error:
            cause = str(error) if isinstance(error, _Terminated) else f"{type(error).__name__}: {error}"
            raise
        finally:
            self._closing = True
            self._broadcast({"closed": True} if finished else {"stopped": cause[:200]}, everyone=True)
            listener.close()
            try:
                os.unlink(self.path)
            except OSError:
                pass
            with self._changed:
                for fd in self._segments.values():
                    os.close(fd)
                self._segments.clear()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _bind(self) -> socket.socket:
        """A listening socket at self.path, its directory checked; a stale socket there (its
        producer killed) is replaced, a live one or anything else refused."""
        _check_private_directory(os.path.dirname(os.path.abspath(self.path)))
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            info = None
        if info is not None:
            if not stat.S_ISSOCK(info.st_mode):
                raise L3Error(f"{self.path} exists and is not a socket: left alone")
            if info.st_uid != os.geteuid():
                raise L3Error(f"{self.path} is a socket of {_owner(info.st_uid)}: left alone")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.settimeout(1.0)
                probe.connect(self.path)
                raise L3Error(f"a BatchServer already serves at {self.path} (pid {_peer_uid(probe)[0]})")
            except (ConnectionRefusedError, FileNotFoundError):
                os.unlink(self.path)  # a socket left by a producer that was killed
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)  # the socket file 0600 from its creation
        try:
            listener.bind(self.path)
        finally:
            os.umask(old_mask)
        if self.allow_uids:
            os.chmod(self.path, 0o666)  # other users connect; SO_PEERCRED decides who is served
        listener.listen(64)
        return listener

    def _drop(self, sock: socket.socket, who: str, reason: str) -> None:
        log.warning("BatchServer at %s: dropped %s: %s", self.path, who, reason)
        self.dropped += 1
        try:
            sock.settimeout(0.2)
            _send(sock, {"dropped": reason})
        except OSError:
            pass
        sock.close()

    def _accept(self, listener) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_safely, args=(sock,), daemon=True).start()

    def _serve_safely(self, sock: socket.socket) -> None:
        try:
            self._serve(sock)
        except Exception as error:  # noqa: BLE001 - one connection's failure, logged; the others go on
            log.warning("BatchServer at %s: connection failed: %r", self.path, error)
            sock.close()

    def _serve(self, sock: socket.socket) -> None:
        """One connection: its uid checked, its hello awaited (HELLO_TIMEOUT), then its acks and pulses."""
        pid, uid = _peer_uid(sock)
        who = f"connection from pid {pid} ({_owner(uid)})"
        if not _trusted(uid, self.allow_uids):
            return self._drop(sock, who, "its user is not allowed (BatchServer(allow_uids=...))")
        sock.settimeout(HELLO_TIMEOUT)
        try:
            hello = _receive(sock, CONTROL_LIMIT)
        except (_Silent, L3Error) as error:
            silent = isinstance(error, _Silent)
            reason = f"no hello within {HELLO_TIMEOUT:g} s" if silent else f"invalid hello: {error}"
            return self._drop(sock, who, reason)
        if hello is None:
            log.info("BatchServer at %s: %s closed before its hello", self.path, who)
            return sock.close()
        if set(hello) != {"join"} or hello["join"] not in JOIN_POINTS:
            return self._drop(sock, who, f"malformed hello {hello!r:.100}")
        pulse = self.peer_timeout / 4
        try:
            sock.settimeout(SEND_TIMEOUT)
            _send(sock, {"welcome": {"pid": os.getpid(), "pulse": pulse}})
        except OSError:
            return sock.close()
        consumer = _Consumer(sock, hello["join"], pid, uid)
        with self._changed:
            consumer.active = consumer.join == "batch" or not self._epoch_started
            self._consumers.append(consumer)
            self._changed.notify_all()
        self._listen(consumer, pulse)

    def _listen(self, consumer: _Consumer, pulse: float) -> None:
        heard = sent = time.monotonic()
        reason = None
        consumer.sock.settimeout(pulse if self.hold_timeout is None else min(pulse, self.hold_timeout / 4))
        while reason is None and not consumer.gone:
            try:
                message = _receive(consumer.sock, CONTROL_LIMIT)
                if message is None:
                    break  # left or crashed
                heard = time.monotonic()
                if "ack" in message:
                    number = message["ack"]
                    if set(message) != {"ack"} or not isinstance(number, int) or isinstance(number, bool):
                        raise L3Error(f"malformed ack {message!r:.100}")
                    with self._changed:
                        consumer.pending.pop(number, None)
                        self._release_taken()
                        self._changed.notify_all()
                elif set(message) != {"alive"}:
                    raise L3Error(f"unexpected message {message!r:.100}")
            except _Silent:
                pass
            except Exception as error:  # noqa: BLE001 - whatever it sent, this consumer goes, the others stay
                reason = str(error) if isinstance(error, L3Error) else f"{type(error).__name__}: {error}"
            now = time.monotonic()
            if now - heard > self.peer_timeout and reason is None:
                reason = f"silent for {now - heard:.1f} s (peer_timeout {self.peer_timeout:g} s)"
            if self.hold_timeout is not None and reason is None:
                reason = self._held_too_long(consumer, now)
            if now - sent >= pulse and reason is None:
                sent = now
                if not self._send_to(consumer, {"alive": True}):
                    break
        with self._changed:  # nothing more is waited for from it
            consumer.gone = True
            consumer.pending.clear()
            if consumer in self._consumers:
                self._consumers.remove(consumer)
            self._release_taken()
            self._changed.notify_all()
        with consumer.sending:
            if reason is not None and not self._closing:
                self._drop(consumer.sock, str(consumer), reason)
            else:
                consumer.sock.close()
            consumer.out.close()

    def _held_too_long(self, consumer: _Consumer, now: float) -> str | None:
        with self._changed:
            oldest = min(consumer.pending.items(), key=lambda item: item[1], default=None)
        if oldest is None or now - oldest[1] <= self.hold_timeout:
            return None
        return (f"batch {oldest[0]} not taken {now - oldest[1]:.1f} s after it was sent "
                f"(hold_timeout {self.hold_timeout:g} s)")

    def _send_to(self, consumer: _Consumer, message: dict, fd: int | None = None) -> bool:
        """False where the consumer could not take it (gone, or its socket full for SEND_TIMEOUT)."""
        with consumer.sending:
            try:
                _send(consumer.out, message, fd)
                return True
            except OSError:
                return False

    def _release_taken(self) -> None:
        waiting = {number for consumer in self._consumers for number in consumer.pending}
        for number in [n for n in self._segments if n not in waiting and n != self._sending_number]:
            os.close(self._segments.pop(number))

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
            if not ready() and not self.served and len(self._consumers) < self.min_consumers:
                log.warning("BatchServer: waiting for %d consumer%s at %s (%d connected)", self.min_consumers,
                            "s" if self.min_consumers > 1 else "", self.path, len(self._consumers))
            self._changed.wait_for(ready)
            return any(c.active for c in self._consumers)

    def _send_batch(self, epoch: int, number: int, batch) -> None:
        fd, fields = _publish(batch, f"l3share-{os.getpid()}-{number}")
        message = {"batch": number, "epoch": epoch, **fields}
        if len(json.dumps(message)) > BATCH_LIMIT:
            os.close(fd)
            raise L3Error(f"batch {number}'s description exceeds {BATCH_LIMIT} bytes "
                          f"(too many keys or values)")
        with self._changed:
            self._epoch_started = True
            receivers = [consumer for consumer in self._consumers if consumer.active]
            self._segments[number] = fd
            self._sending_number = number
            for consumer in receivers:
                consumer.pending[number] = time.monotonic()
            self.most_outstanding = max(self.most_outstanding, len(self._segments))
        for consumer in receivers:
            if not self._send_to(consumer, message, fd):
                with self._changed:
                    consumer.pending.pop(number, None)  # its listener sees the socket close and drops it
        self.served += 1
        with self._changed:
            self._sending_number = None
            self._release_taken()

    def _broadcast(self, message, everyone: bool = False) -> None:
        with self._changed:
            receivers = [consumer for consumer in self._consumers if consumer.active or everyone]
        for consumer in receivers:
            self._send_to(consumer, message)


class _Terminated(SystemExit):
    def __str__(self):
        return "SIGTERM"


def _exit_on_sigterm(signum, frame):
    raise _Terminated(128 + signum)


# -- a consumer -----------------------------------------------------------------------------------
class SharedLoader:
    """The batches a BatchServer at `path` (default: default_socket_path()) produces. Iterating
    gives one epoch's batches; iterate again for the next. join="batch" starts with the next
    batch produced, "epoch" with the next epoch's first.

    connect_timeout: seconds to wait for the producer's socket to appear and answer.
    producer_uids: users besides this one (and root) whose producer is trusted.
    peer_timeout: a producer silent this long (seconds; a live one pulses) raises L3Error.
    A producer that goes away before it said the run is over raises L3Error, never a short epoch."""

    def __init__(self, path=None, *, join: str = "epoch", connect_timeout: float = 60.0, producer_uids=(),
                 peer_timeout: float = 30.0):
        if join not in JOIN_POINTS:
            raise L3Error(f"join must be one of {JOIN_POINTS}, not {join!r}")
        self.path = os.fspath(path) if path is not None else default_socket_path()
        self.closed, self.epoch, self.peer_timeout = False, None, float(peer_timeout)
        self._sock = self._connect(connect_timeout)
        try:
            pid, uid = _peer_uid(self._sock)
            self.producer = f"the BatchServer at {self.path} (pid {pid}, {_owner(uid)})"
            if not _trusted(uid, producer_uids):
                raise L3Error(f"{self.producer} runs as another user: refused "
                              f"(SharedLoader(producer_uids=...))")
            self._sock.settimeout(max(connect_timeout, 1.0))
            _send(self._sock, {"join": join})
            try:
                welcome = _receive(self._sock, BATCH_LIMIT)
            except L3Error as error:  # named: which socket and process sent it
                raise L3Error(f"{self.producer}: {error}") from None
            if welcome is None or set(welcome) != {"welcome"} or not isinstance(welcome["welcome"], dict):
                raise L3Error(f"{self.producer} did not welcome this consumer: "
                              f"{(welcome or {}).get('dropped', welcome)!r:.200}")
            pulse = welcome["welcome"].get("pulse")
            if not isinstance(pulse, (int, float)) or not 0 < pulse:
                raise L3Error(f"{self.producer} sent a malformed welcome")
        except (_Silent, OSError) as error:
            self._sock.close()
            raise L3Error(f"{self.path}: no welcome from the BatchServer ({error or 'silent'})") from None
        except BaseException:
            self._sock.close()
            raise
        self._pulse = min(float(pulse), self.peer_timeout / 4)
        self._sending = threading.Lock()
        self._inbox = queue.Queue()  # (message, descriptor) in arrival order; an L3Error at the end
        self._link = threading.Thread(target=self._receive_all, daemon=True)
        self._link.start()

    def _connect(self, timeout: float) -> socket.socket:
        """Connected to self.path, retried while the socket is missing or refuses (a producer
        not started yet, or a stale socket being replaced) until timeout."""
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(timeout, 0.1))
            try:
                sock.connect(self.path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError) as error:
                sock.close()
                if time.monotonic() >= deadline:
                    raise L3Error(f"no BatchServer answers at {self.path} within {timeout:g} s "
                                  f"({error.strerror or error})") from None
                time.sleep(0.05)
            except OSError as error:
                sock.close()
                raise L3Error(f"no BatchServer answers at {self.path} ({error.strerror or error})") from None

    def _receive_all(self) -> None:
        """The link thread: queues what the producer sends, pulses, and queues an L3Error when the
        producer goes away, is silent past peer_timeout, or sends something malformed."""
        heard = sent = time.monotonic()
        self._sock.settimeout(self._pulse)
        error = None
        while not self.closed:
            fds = []
            try:
                message = _receive(self._sock, BATCH_LIMIT, fds)
                heard = time.monotonic()
                if message is None:
                    error = L3Error(f"{self.producer} went away (killed?) before it said the run was over")
                elif "batch" in message:
                    if len(fds) != 1:
                        raise L3Error(f"batch message with {len(fds)} descriptors, not 1")
                    self._inbox.put((message, fds.pop()))
                elif "dropped" in message:
                    error = L3Error(f"{self.producer} dropped this consumer: {message['dropped']!s:.200}")
                elif "stopped" in message:
                    error = L3Error(f"{self.producer} stopped before the run was over: "
                                    f"{message['stopped']!s:.200}")
                elif "end" in message or "closed" in message:
                    self._inbox.put((message, None))
                    if "closed" in message:
                        return
                elif set(message) != {"alive"}:
                    raise L3Error(f"unexpected message {message!r:.100}")
            except _Silent:
                pass
            except Exception as problem:  # noqa: BLE001 - reported to the consumer's loop, never lost
                detail = problem if isinstance(problem, L3Error) else repr(problem)
                error = L3Error(f"{self.producer}: {detail}")
            finally:
                for fd in fds:
                    os.close(fd)
            now = time.monotonic()
            if error is None and now - heard > self.peer_timeout:
                error = L3Error(f"{self.producer} has been silent for {now - heard:.1f} s (stopped?)")
            if error is None and now - sent >= self._pulse:
                sent = now
                try:
                    self._send({"alive": True})
                except OSError:
                    pass  # the next receive sees the socket close
            if error is not None:
                if not self.closed:
                    self._inbox.put((error, None))
                return

    def _send(self, message: dict) -> None:
        with self._sending:
            _send(self._sock, message)

    def __iter__(self):
        while not self.closed:
            message, fd = self._inbox.get()
            if isinstance(message, L3Error):
                self.close()
                raise message
            if "closed" in message:
                self.close()
                return
            if "end" in message:
                return
            try:
                batch = _take(message, fd)
            finally:
                os.close(fd)
            try:
                self._send({"ack": message["batch"]})
            except OSError:
                pass  # the link thread reports why
            self.epoch = message.get("epoch")
            yield batch

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            while True:  # descriptors of batches never taken
                try:
                    _, fd = self._inbox.get_nowait()
                except (queue.Empty, AttributeError):
                    break
                if fd is not None:
                    os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
