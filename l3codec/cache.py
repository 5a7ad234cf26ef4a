"""A node-local cache of samples' compressed bytes, shared by every worker and job on the node.

Training reads a dataset once per epoch in a new random order. Once the dataset is larger than
memory, the page cache (least recently used) keeps mostly what this epoch has already read, so
few reads hit it; CoorDL (VLDB 2021) keeps instead whatever entered first: with capacity C and a
dataset of size N, every epoch after the first finds C/N of its samples in the cache. L3 bytes
are 0.6-0.9x PNG, so more of a dataset fits than in any cache of decoded pixels.

    cache = SampleCache("/dev/shm/l3-cache", "8GB")          # policy="minio" (the default)
    L3Dataset("s3://bucket/cityscapes-l3", cache=cache)      # or Loader(..., cache=cache)

Policies (a documented choice, SampleCache(policy=...)):
- "minio": a sample that enters stays; once the capacity is reached nothing is evicted and
  misses are read from the source. Hit rate per epoch = capacity / dataset size.
- "lru": once full, the least recently used entries make room (what the page cache does), kept
  to measure the difference: in a random order it hits about (C/N)^2 / 2 of the reads.

On disk (one directory per cache; any filesystem, /dev/shm for memory):

    DIR/usage                    bytes held, changed only under the lock on DIR/.lock
    DIR/<dataset id>/            id: the first 16 hex digits of SHA-256 of the dataset's manifest
        about.json               the dataset's root, for `l3 cache`
        <split>/<n>.<field>      one sample member: a 32-byte header, then its bytes
        counters-<pid>.json      hits, misses, inserts, refusals of one process
        .tmp-<pid>-<n>           an insert being written, linked into place once complete

    entry header (little-endian):
    +--------+--------+----------------+----------------+----------------+
    | "L3C1" | crc32  | size (u64)     | dataset id (8) | sample (u64)   |
    +--------+--------+----------------+----------------+----------------+

A reader opens only linked entries, so it never sees half an insert; an entry whose header,
size, dataset, sample or CRC is wrong is removed and read from the source again, never
returned. A job killed mid-insert leaves a temporary file, removed (and the usage recounted) by
the next process that opens the cache. A cache that cannot be written (full disk, read-only)
says so once per process and the reads go to the source.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import struct
import warnings

import numpy as np

from .format import L3Error, crc32

POLICIES = ("minio", "lru")
ENTRY_MAGIC = b"L3C1"
ENTRY_HEADER = struct.Struct("<4sIQ8sQ")
COUNTERS = ("hits", "misses", "inserts", "refused", "corrupt", "evicted")
FLUSH_EVERY = 256  # lookups between writes of a process's counters


def parse_bytes(text) -> int:
    """'8GB', '512MiB', 1000000 -> bytes."""
    if isinstance(text, (int, np.integer)):
        return int(text)
    units = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
             "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
    cleaned = str(text).strip().lower()
    number = cleaned.rstrip("kmgtib")
    try:
        return int(float(number) * units[cleaned[len(number):]])
    except (ValueError, KeyError):
        raise L3Error(f"cache capacity must look like 8GB, 512MiB or 1000000, not {text!r}") from None


def dataset_id(manifest_bytes: bytes) -> str:
    import hashlib

    return hashlib.sha256(manifest_bytes).hexdigest()[:16]


class SampleCache:
    """A directory holding samples' compressed bytes up to `capacity` bytes (see the module)."""

    def __init__(self, directory, capacity, *, policy: str = "minio"):
        if policy not in POLICIES:
            raise L3Error(f"cache policy must be one of {POLICIES}, not {policy!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.capacity = parse_bytes(capacity)
        if self.capacity <= 0:
            raise L3Error(f"cache capacity must be positive, not {capacity!r}")
        self.policy = policy
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._counts = {}  # dataset id -> {counter: n}
        self._lookups = 0
        self._writable = None  # unknown until the first insert
        self._known = set()  # dataset ids whose folders exist and were checked
        self._temp_number = 0

    def __getstate__(self):
        return {"directory": self.directory, "capacity": self.capacity, "policy": self.policy}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_process_state()

    def __repr__(self):
        return f"SampleCache({self.directory!r}, {self.capacity}, policy={self.policy!r})"

    # -- per process ----------------------------------------------------------------------------
    def _own_process(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's counts are the parent's
            self._reset_process_state()

    def _count(self, dataset: str, counter: str) -> None:
        counts = self._counts.setdefault(dataset, dict.fromkeys(COUNTERS, 0))
        counts[counter] += 1
        self._lookups += 1
        if self._lookups % FLUSH_EVERY == 0:
            self.flush_counters()

    def flush_counters(self) -> None:
        """Write this process's counters (the loader's workers do it every FLUSH_EVERY lookups)."""
        self._own_process()
        for dataset, counts in self._counts.items():
            path = os.path.join(self.directory, dataset, f"counters-{self._pid}.json")
            try:
                _write_atomic(path, json.dumps(counts).encode(), self._pid)
            except OSError:
                pass  # counters are informative; a cache that cannot take them still serves reads

    # -- the lock and the usage -----------------------------------------------------------------
    def _locked(self):
        return _Lock(os.path.join(self.directory, ".lock"))

    def _usage(self) -> int:
        try:
            with open(os.path.join(self.directory, "usage"), "rb") as file:
                return int(file.read() or 0)
        except (OSError, ValueError):  # damaged: count again
            return self._recount()

    def _set_usage(self, value: int) -> None:
        _write_atomic(os.path.join(self.directory, "usage"), str(max(value, 0)).encode(), self._pid)

    def _recount(self) -> int:
        """Bytes of every linked entry; stale inserts of dead processes removed. A live insert is
        not counted: it adds its own bytes when it links its entry, under the lock."""
        total = 0
        for dataset in _dataset_dirs(self.directory):
            for temp in glob.glob(os.path.join(dataset, ".tmp-*")):
                if not _pid_alive(_temp_pid(temp)):
                    _unlink(temp)
            for path in _entries(dataset):
                total += _size(path)
        return total

    # -- binding a dataset ----------------------------------------------------------------------
    def _prepare(self, dataset: str, root: str) -> bool:
        """Make the dataset's folder (once per process) and clear what killed jobs left."""
        if dataset in self._known:
            return True
        folder = os.path.join(self.directory, dataset)
        try:
            os.makedirs(folder, exist_ok=True)
            if not os.path.exists(os.path.join(folder, "about.json")):
                _write_atomic(os.path.join(folder, "about.json"), json.dumps({"root": root}).encode(), self._pid)
            stale = [t for d in _dataset_dirs(self.directory) for t in glob.glob(os.path.join(d, ".tmp-*"))
                     if not _pid_alive(_temp_pid(t))]
            if stale or not os.path.exists(os.path.join(self.directory, "usage")):
                with self._locked():
                    self._set_usage(self._recount())
        except OSError as error:
            self._cannot_write(error)
            return False
        self._known.add(dataset)
        return True

    def _cannot_write(self, error: OSError) -> None:
        if self._writable is not False:
            warnings.warn(f"l3codec cache {self.directory}: cannot write ({error.strerror or error}); "
                          "samples are read from the source", RuntimeWarning, stacklevel=4)
        self._writable = False

    # -- lookups --------------------------------------------------------------------------------
    def _entry_path(self, dataset: str, split: str, index: int, field: str) -> str:
        return os.path.join(self.directory, dataset, split, f"{index}.{field}")

    def get(self, dataset: str, split: str, index: int, field: str, size: int) -> np.ndarray | None:
        """The cached bytes of one member, or None (a miss: read it from the source and put it)."""
        self._own_process()
        path = self._entry_path(dataset, split, index, field)
        try:
            with open(path, "rb") as file:
                raw = file.read()
        except OSError:
            self._count(dataset, "misses")
            return None
        data = _entry_data(raw, dataset, index, size)
        if data is None:  # damaged, or another dataset's: never returned
            self._count(dataset, "corrupt")
            self._count(dataset, "misses")
            self._remove(path, len(raw))
            return None
        if self.policy == "lru":
            try:
                os.utime(path)
            except OSError:
                pass
        self._count(dataset, "hits")
        return data

    def put(self, dataset: str, split: str, index: int, field: str, data, *, root: str = "") -> bool:
        """Insert one member's bytes; False when the policy or the filesystem refuses it."""
        self._own_process()
        if self._writable is False or not self._prepare(dataset, root):
            return False
        data = memoryview(np.ascontiguousarray(data)).cast("B")
        header = ENTRY_HEADER.pack(ENTRY_MAGIC, crc32(data), len(data), bytes.fromhex(dataset), index)
        need = len(header) + len(data)
        if need > self.capacity:
            self._count(dataset, "refused")
            return False
        path = self._entry_path(dataset, split, index, field)
        self._temp_number += 1
        temp = os.path.join(self.directory, dataset, f".tmp-{self._pid}-{self._temp_number}")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(temp, "wb") as file:
                file.write(header)
                file.write(data)
            with self._locked():
                usage = self._usage()
                if usage + need > self.capacity:
                    if self.policy == "minio":
                        _unlink(temp)
                        self._count(dataset, "refused")
                        return False
                    usage -= self._evict(usage + need - self.capacity, dataset)
                try:
                    os.link(temp, path)  # fails if another process put it first: it is there either way
                    inserted = True
                except FileExistsError:
                    inserted = False
                self._set_usage(usage + need if inserted else usage)
            _unlink(temp)
        except OSError as error:
            _unlink(temp)
            self._cannot_write(error)
            return False
        self._writable = True
        if inserted:
            self._count(dataset, "inserts")
        return inserted

    def _remove(self, path: str, size: int) -> None:
        try:
            with self._locked():
                if _unlink(path):
                    self._set_usage(self._usage() - size)
        except OSError:
            pass

    def _evict(self, needed: int, dataset: str) -> int:
        """LRU: remove the least recently used entries (any dataset) until `needed` bytes are free."""
        entries = []
        for folder in _dataset_dirs(self.directory):
            for path in _entries(folder):
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                entries.append((stat.st_mtime_ns, stat.st_size, path))
        freed = 0
        for _, size, path in sorted(entries):
            if freed >= needed:
                break
            if _unlink(path):
                freed += size
                self._count(dataset, "evicted")
        return freed

    # -- looking at it --------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"capacity": self.capacity, "policy": self.policy,
                **cache_report(self.directory, missing_ok=True)}

    def clear(self) -> None:
        clear_cache(self.directory)
        self._known.clear()


def cache_report(directory, *, missing_ok: bool = False) -> dict:
    """Per dataset in a cache directory: its root, entries, bytes and the counters of every
    process that used it; and the bytes the cache holds."""
    directory = os.path.abspath(os.fspath(directory))
    report = {"directory": directory, "datasets": {}, "bytes": 0}
    if not os.path.isdir(directory):
        if missing_ok:
            return report
        raise L3Error("not a cache directory (it does not exist)")
    for folder in _dataset_dirs(directory):
        about = _read_json(os.path.join(folder, "about.json"))
        entries = _entries(folder)
        counts = dict.fromkeys(COUNTERS, 0)
        for path in glob.glob(os.path.join(folder, "counters-*.json")):
            for name, value in _read_json(path).items():
                if name in counts and isinstance(value, int):
                    counts[name] += value
        size = sum(_size(path) for path in entries)
        report["datasets"][os.path.basename(folder)] = {"root": about.get("root", ""), "entries": len(entries),
                                                        "bytes": size, **counts}
        report["bytes"] += size
    return report


def clear_cache(directory) -> None:
    """Remove every entry and counter of a cache directory (the directory stays)."""
    directory = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(directory):
        return
    with _Lock(os.path.join(directory, ".lock")):
        for folder in _dataset_dirs(directory):
            shutil.rmtree(folder, ignore_errors=True)
        _write_atomic(os.path.join(directory, "usage"), b"0", os.getpid())


class _Lock:
    """An exclusive fcntl lock on a file, held for a with block (released if the process dies)."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.file = open(self.path, "a+b")  # noqa: SIM115 - held until __exit__
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def _entry_data(raw: bytes, dataset: str, index: int, size: int) -> np.ndarray | None:
    if len(raw) < ENTRY_HEADER.size:
        return None
    magic, crc, length, owner, sample = ENTRY_HEADER.unpack_from(raw)
    data = memoryview(raw)[ENTRY_HEADER.size:]
    if (magic != ENTRY_MAGIC or length != size or len(data) != size or owner != bytes.fromhex(dataset)
            or sample != index or crc32(data) != crc):
        return None
    return np.frombuffer(raw, np.uint8, count=size, offset=ENTRY_HEADER.size)


def _write_atomic(path: str, data: bytes, pid: int) -> None:
    temp = f"{path}.{pid}.partial"
    with open(temp, "wb") as file:
        file.write(data)
    os.replace(temp, path)


def _dataset_dirs(directory: str) -> list:
    try:
        return sorted(entry.path for entry in os.scandir(directory)
                      if entry.is_dir() and len(entry.name) == 16 and not entry.name.startswith("."))
    except OSError:
        return []


def _entries(dataset_dir: str) -> list:
    found = []
    try:
        for split in os.scandir(dataset_dir):
            if split.is_dir():
                found += [entry.path for entry in os.scandir(split.path) if not entry.name.endswith(".partial")]
    except OSError:  # removed meanwhile (a clear)
        pass
    return found


def _temp_pid(path: str) -> int:
    try:
        return int(os.path.basename(path).split("-")[1])
    except (IndexError, ValueError):
        return -1


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as file:
            value = json.load(file)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}
