"""A node-local cache of samples' compressed bytes, shared by every worker and job on the node.

Training reads a dataset once per epoch in a new random order. Once the dataset is larger than
memory, the page cache (least recently used) keeps mostly what this epoch has already read, so
few reads hit it; CoorDL (VLDB 2021) keeps instead whatever entered first: with capacity C and a
dataset of size N, every epoch after the first finds C/N of its samples in the cache. L3 bytes
are 0.6-0.9x PNG, so more of a dataset fits than in any cache of decoded pixels.

    cache = SampleCache("/dev/shm/l3-cache", "8GB")          # policy="minio" (the default)
    L3Dataset("s3://bucket/cityscapes-l3", cache=cache)      # or Loader(dataset, ..., cache=cache)

Policies (a documented choice, SampleCache(policy=...)):
- "minio": a sample that enters stays; once the capacity is reached nothing is evicted and
  misses are read from the source. Hit rate per epoch = capacity / dataset size.
- "lru": once full, the least recently used entries make room (what the page cache does), kept
  to measure the difference: in a random order it hits about (C/N)^2 / 2 of the reads.

Trust: the directory is its user's alone (created 0700, entries 0600) unless `group=` names a
group that shares it (02770, entries 0660). A directory that is a symbolic link, owned by another
user (private) or of another group (shared), or writable by anyone else is refused (L3Error), as
is a directory holding files but no marker. Every file is reached through directory descriptors
opened with O_NOFOLLOW and checked with fstat, so a planted symbolic link is never followed,
written or unlinked through; temporaries are created O_EXCL.

On disk (one directory per cache; any filesystem, /dev/shm for memory):

    DIR/l3-cache.json            the marker: {"l3codec": "sample cache", "version": 2}
    DIR/usage                    bytes held, changed only under the lock (flock on DIR)
    DIR/<dataset id>/            id: the first 16 hex digits of SHA-256 of the dataset's manifest
        about.json               the dataset's root, for `l3 cache`
        <split>/<n>.<field>      one member of sample n: a header, then its bytes
        counters@<tag>-<pid>.json  hits, misses, inserts, refusals of one live process
        counters.json            the sums of processes that ended
        .tmp-<pid>-<tag>-<random>  an insert being written, linked into place once complete
    tag: a hash of the boot and the pid namespace, so that processes of other containers sharing
    the folder are never judged by a pid of this one's. (Untagged counters-<pid>.json and
    .tmp-<pid>-<random> are read as this namespace's; the tagged names keep the pid where those
    readers look for it, or a name they do not match, so that they never judge a tagged file.)

    entry header (little-endian), then the split's and the field's names (UTF-8):
    +--------+--------+------------+----------------+--------------+-----------+-----------+
    | "L3C2" | crc32  | size (u64) | dataset id (8) | sample (u64) | split u16 | field u16 |
    +--------+--------+------------+----------------+--------------+-----------+-----------+
    crc32 covers the header (its crc field zero), the names and the bytes.

Bytes enter only after their size matches the index and, for an L3 member, its header and
payload CRCs pass (put_checked reads the source again when they do not). A reader opens only
linked entries, so it never sees half an insert; an entry whose header, size, dataset, sample,
split, field or CRC is wrong is removed and read from the source again, never returned. Each
process, when it first opens the cache, removes what killed jobs left (temporaries; their
counters folded into counters.json) and recounts the usage if an insert was cut short. A full
MinIO cache refuses a miss before checking or writing anything; LRU evicts in the order of its
last scan, kept between inserts. A cache that cannot be written (full disk, read-only) says so
once per process and the reads go to the source.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import grp
import hashlib
import json
import os
import secrets
import shutil
import stat
import struct
import time
import warnings

import numpy as np

from .format import L3Error, crc32

POLICIES = ("minio", "lru")
MARKER = "l3-cache.json"
MARKER_FACTS = {"l3codec": "sample cache", "version": 2}
ENTRY_MAGIC = b"L3C2"
ENTRY_HEADER = struct.Struct("<4sIQ8sQHH")
COUNTERS = ("hits", "misses", "inserts", "refused", "corrupt", "evicted", "unverified")
FLUSH_EVERY = 256  # lookups between writes of a process's counters
LOCK_TIMEOUT_S = 30.0  # a lock not taken by then: the insert is skipped (the holder is stopped, not dead)
CLEAN_UP_WAIT_S = 1.0  # the clean-up when a process opens the cache waits no longer
FULL_RECHECK_S = 1.0  # MinIO usage only grows until a clear: a member that did not fit is refused unread this long
SOURCE_READS = 3  # reads of a member whose bytes fail their check before it is returned uncached
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted as an entry or a cache file opens at once, then fails fstat's S_ISREG
# a file of a process in another pid namespace (a container sharing the folder) is left alone
# while younger than this: its pid cannot be checked from here
FOREIGN_OWNER_STALE_S = 24 * 3600.0
# errors that pass (a full disk, too many open files): one access skipped, the cache stays on
TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM,
                              errno.EAGAIN, errno.EINTR, errno.EBUSY})
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
_ACL_NAMED_USER, _ACL_NAMED_GROUP = 0x02, 0x08  # tags of a POSIX ACL entry naming another user or group


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
    return hashlib.sha256(manifest_bytes).hexdigest()[:16]


def member_problem(field: str, data, size: int) -> str | None:
    """Why a member's bytes must not enter the cache (None: they may): a size other than the
    index's, or, for an L3 member, a header or payload CRC that does not match."""
    view = memoryview(np.ascontiguousarray(data)).cast("B")
    if len(view) != size:
        return f"{len(view)} bytes where the index says {size}"
    if field == "json":  # no checksum of its own: it must at least parse
        try:
            json.loads(bytes(view))
        except ValueError as error:
            return f"not JSON ({error})"
        return None
    from .format import parse

    try:
        parse(np.frombuffer(view, np.uint8), verify=True)
    except L3Error as error:
        return str(error)
    return None


def _group_id(group) -> int | None:
    if group is None:
        return None
    if isinstance(group, (int, np.integer)):
        return int(group)
    try:
        return grp.getgrnam(str(group)).gr_gid
    except KeyError:
        raise L3Error(f"cache group {group!r} does not exist") from None


class _Layout:
    """Modes and trust checks of one cache: private to its user, or shared with a group."""

    def __init__(self, gid: int | None):
        self.gid = gid
        self.dir_mode = 0o700 if gid is None else 0o2770
        self.file_mode = 0o600 if gid is None else 0o660

    def check_dir(self, fd: int, where: str) -> None:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):
            raise L3Error(f"{where} is not a directory")
        self._check_owner(info, where)
        _check_acl(fd, where)

    def check_file(self, fd: int, where: str) -> os.stat_result:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise L3Error(f"{where} is not a regular file")
        self._check_owner(info, where)
        _check_acl(fd, where)
        return info

    def _check_owner(self, info: os.stat_result, where: str) -> None:
        if self.gid is None:
            if info.st_uid != os.geteuid():
                raise L3Error(f"{where} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
                              "refused (another user could serve forged samples); pass group= to share a cache")
            if info.st_mode & 0o022:
                raise L3Error(f"{where} can be written by others (mode {stat.S_IMODE(info.st_mode):o}): refused; "
                              "pass group= to share a cache with a group")
        else:
            if info.st_gid != self.gid:
                raise L3Error(f"{where} belongs to group {info.st_gid}, not to the cache's group {self.gid}: refused")
            if info.st_mode & 0o002:
                raise L3Error(f"{where} can be written by anyone (mode {stat.S_IMODE(info.st_mode):o}): refused")

    def made(self, fd: int, directory: bool) -> None:
        """Give a file or directory this process created the cache's group and mode (the umask may
        have narrowed it below what the owner needs, or below the group's)."""
        if self.gid is not None:
            os.fchown(fd, -1, self.gid)
        _strip_acls(fd)  # entries inherited from a parent's default ACL would let others in
        os.fchmod(fd, self.dir_mode if directory else self.file_mode)

    def mkdir_open(self, parent_fd: int, name: str, where: str, *, create: bool = True) -> int:
        """A subdirectory's descriptor, made with the cache's mode when missing; never through a link."""
        if create:
            try:
                os.mkdir(name, self.dir_mode, dir_fd=parent_fd)
                made = True
            except FileExistsError:
                made = False
        else:
            made = False
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise L3Error(f"{where} is a symbolic link or not a directory: refused") from None
            if error.errno == errno.EACCES:  # say whose it is rather than switch the cache off quietly
                owner = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_uid
                if owner != os.geteuid():
                    raise L3Error(f"{where} belongs to uid {owner}, not to this user (uid {os.geteuid()}): "
                                  "refused") from None
            raise
        try:
            if made:
                self.made(fd, directory=True)
            self.check_dir(fd, where)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _named_acl_entries(fd: int, xattr: str) -> bool:
    """Whether the POSIX ACL in xattr (version u32, then entries of u16 tag, u16 perm, u32 id)
    names a user or group beyond the owner, the group and others."""
    try:
        value = os.getxattr(fd, xattr)
    except OSError as error:
        if error.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    tags = np.frombuffer(value[4:len(value) - (len(value) - 4) % 8], "<u2").reshape(-1, 4)[:, 0]
    return bool(np.isin(tags, (_ACL_NAMED_USER, _ACL_NAMED_GROUP)).any())


def _check_acl(fd: int, where: str) -> None:
    """An ACL granting a named user or group access makes the mode bits show only its mask: refused."""
    for xattr in ACL_XATTRS:
        if _named_acl_entries(fd, xattr):
            raise L3Error(f"{where} has an access control list naming other users or groups ({xattr}): refused")


def _strip_acls(fd: int) -> None:
    for xattr in ACL_XATTRS:
        try:
            os.removexattr(fd, xattr)
        except OSError as error:
            if error.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL):
                raise


def _open_cache_root(directory: str, layout: _Layout, *, create: bool) -> int:
    """The cache directory's descriptor, checked: created (with its marker) when missing and
    `create`, adopted when empty, refused when it is a link, untrusted or holds other files."""
    parent, name = os.path.split(directory)
    if create:
        os.makedirs(parent, exist_ok=True)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not create:
            try:
                os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise L3Error("not a cache directory (it does not exist)") from None
        fd = layout.mkdir_open(parent_fd, name, directory, create=create)
    finally:
        os.close(parent_fd)
    try:
        marker = _read_json_at(fd, MARKER, layout, directory)
        if marker is None:
            present = [name for name in os.listdir(fd) if not name.startswith(".tmp-")]
            if present:  # another process may have just made it: its marker comes first
                marker = _read_json_at(fd, MARKER, layout, directory)
            if marker is None and (present or not create):
                older = "usage" in present or ".lock" in present
                raise L3Error(f"{directory} is not an l3 sample cache (no {MARKER}): refused, nothing written"
                              + ("; it looks like an older l3codec's cache: remove it to make a new one" if older
                                 else ""))
        if marker is None:
            _write_atomic_at(fd, MARKER, json.dumps(MARKER_FACTS).encode(), layout)
        elif marker.get("l3codec") != MARKER_FACTS["l3codec"] or marker.get("version") != MARKER_FACTS["version"]:
            raise L3Error(f"{directory}: {MARKER} says {marker}, not a version {MARKER_FACTS['version']} sample cache")
    except BaseException:
        os.close(fd)
        raise
    return fd


class SampleCache:
    """A directory holding samples' compressed bytes up to `capacity` bytes (see the module).

    group: None (the default) keeps the cache private to this user: directory 0700, entries 0600.
    A group name or id shares it with that group's members (directory 02770, entries 0660),
    who are then trusted to write entries."""

    def __init__(self, directory, capacity, *, policy: str = "minio", group=None):
        if policy not in POLICIES:
            raise L3Error(f"cache policy must be one of {POLICIES}, not {policy!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.capacity = parse_bytes(capacity)
        if self.capacity <= 0:
            raise L3Error(f"cache capacity must be positive, not {capacity!r}")
        self.policy = policy
        self.group = _group_id(group)
        self._reset_process_state()
        try:  # an untrusted directory is refused here, in the process that configures the cache
            self._root()
        except OSError:
            pass  # cannot be created: said once at the first insert, reads go to the source

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._layout = _Layout(self.group)
        self._counts = {}  # dataset id -> {counter: n}
        self._lookups = 0
        self._writable = None  # unknown until the first insert
        self._root_fd = None
        self._dirs = {}  # (dataset,) or (dataset, split) -> descriptor
        self._known = set()  # dataset ids whose about.json was written
        self._lru_queue = []  # newest first, popped from the end: (mtime_ns, name, split, dataset), from the last scan
        self._warned_busy = False
        self._warned_transient = False
        self._free_seen = (0.0, 0)  # MinIO: (until when, bytes free) when an insert last found no room

    def __getstate__(self):
        return {"directory": self.directory, "capacity": self.capacity, "policy": self.policy, "group": self.group}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("group", None)
        self._reset_process_state()

    def __repr__(self):
        group = "" if self.group is None else f", group={self.group}"
        return f"SampleCache({self.directory!r}, {self.capacity}, policy={self.policy!r}{group})"

    # -- per process ----------------------------------------------------------------------------
    def _own_process(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's descriptors and counts are the parent's
            self._reset_process_state()

    def _root(self) -> int:
        """This process's checked descriptor of the cache directory; on first open, cleans up."""
        if self._root_fd is None:
            self._root_fd = _open_cache_root(self.directory, self._layout, create=True)
            try:
                self._clean_up()
            except (OSError, TimeoutError):
                pass  # read-only or busy: the next process to open it cleans up
        return self._root_fd

    def _dir(self, dataset: str, split: str | None = None) -> int:
        key = (dataset,) if split is None else (dataset, split)
        fd = self._dirs.get(key)
        if fd is not None and os.fstat(fd).st_nlink == 0:  # removed (a clear elsewhere): open anew
            for stale in self._dirs.values():
                os.close(stale)
            self._dirs.clear()
            self._known.clear()
            fd = None
        if fd is None:
            if split is None:
                _check_name(dataset, "dataset id")
                fd = self._layout.mkdir_open(self._root(), dataset, os.path.join(self.directory, dataset))
            else:
                _check_name(split, "split")
                fd = self._layout.mkdir_open(self._dir(dataset), split, os.path.join(self.directory, dataset, split))
            self._dirs[key] = fd
        return fd

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
            try:
                _write_atomic_at(self._dir(dataset), f"counters@{_namespace()}-{os.getpid()}.json", json.dumps(counts).encode(),
                                 self._layout)
            except (OSError, L3Error):
                pass  # counters are informative; a cache that cannot take them still serves reads

    # -- the lock, the usage, cleaning up ---------------------------------------------------------
    def _locked(self):
        return _Lock(self._root())

    def _usage(self) -> int:
        try:
            return int(_read_at(self._root(), "usage", self._layout, self.directory) or 0)
        except (OSError, ValueError, L3Error):  # missing or damaged: count again
            return self._recount()

    def _set_usage(self, value: int) -> None:
        _write_atomic_at(self._root(), "usage", str(max(value, 0)).encode(), self._layout)

    def _datasets(self) -> list:
        return [name for name in _listdir(self._root()) if _is_dataset_name(name)]

    def _splits(self, dataset: str) -> list:
        try:
            fd = self._dir(dataset)
        except (OSError, L3Error):
            return []
        return [entry.name for entry in _scandir(fd)
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".")]

    def _entries(self, dataset: str, split: str):
        """(name, lstat) of each regular file in a split folder."""
        try:
            fd = self._dir(dataset, split)
        except (OSError, L3Error):
            return
        for entry in _scandir(fd):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield entry.name, info

    def _recount(self) -> int:
        """Bytes of every linked entry. A live insert is not counted: it adds its own bytes when it
        links its entry, under the lock."""
        return sum(info.st_size for dataset in self._datasets() for split in self._splits(dataset)
                   for _, info in self._entries(dataset, split))

    def _clean_up(self) -> None:
        """What killed processes left: their temporaries removed (the usage recounted when one
        was an insert, which may have linked its entry without counting it), their counters
        folded into counters.json."""
        root = self._root_fd
        with _Lock(root, CLEAN_UP_WAIT_S):  # busy (a stopped holder?): the next process to open it cleans up
            stale = [name for name in _listdir(root) if _stale_temp(root, name)]
            for name in stale:
                _unlink_at(root, name)
            recount = _read_optional(root, "usage", self._layout, self.directory) is None
            for dataset in self._datasets():
                try:
                    folder = self._dir(dataset)
                except L3Error:  # not trusted: left alone, as lookups leave it
                    continue
                for name in _listdir(folder):
                    if _stale_temp(folder, name):
                        recount |= _unlink_at(folder, name)
                self._fold_counters(folder)
            if recount:
                self._set_usage(self._recount())

    def _fold_counters(self, folder: int) -> None:
        ended = [name for name in _listdir(folder) if _counters_ended(folder, name)]
        if not ended:
            return
        totals = _counts_of(_read_optional(folder, "counters.json", self._layout, self.directory) or {})
        for name in ended:
            for counter, value in _counts_of(_read_optional(folder, name, self._layout, self.directory) or {}).items():
                totals[counter] += value
        _write_atomic_at(folder, "counters.json", json.dumps(totals).encode(), self._layout)
        for name in ended:
            _unlink_at(folder, name)

    # -- lookups --------------------------------------------------------------------------------
    def get(self, dataset: str, split: str, index: int, field: str, size: int) -> np.ndarray | None:
        """The cached bytes of one member, or None (a miss: read it from the source and put it)."""
        self._own_process()
        name = f"{int(index)}.{field}"
        if self._writable is False and self._root_fd is None:  # no cache here: the source
            self._count(dataset, "misses")
            return None
        try:
            folder = self._dir(dataset, split)
        except (OSError, L3Error) as error:
            self._turned_off_by(error)
            self._count(dataset, "misses")
            return None
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=folder)
        except OSError as error:
            if error.errno != errno.ELOOP:
                self._count(dataset, "misses")
                return None
            try:  # a symbolic link where an entry belongs: removed, never followed
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
                replaced = stat.S_ISREG(os.fstat(fd).st_mode)  # by an entry, since: not judged here
            except OSError:
                fd, replaced = None, True
            if replaced:
                if fd is not None:
                    os.close(fd)
                self._count(dataset, "misses")
                return None
        # fd stays open until the entry is judged (and removed if damaged): while it is held, its
        # inode cannot be reused by an entry another process puts in its place meanwhile
        try:
            stored, raw = 0, b""
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    info = self._layout.check_file(fd, os.path.join(self.directory, dataset, split, name))
                    stored = info.st_size
                    raw = _read_fd(fd, stored) if stored <= size + ENTRY_HEADER.size + 1024 else b""
                    if self.policy == "lru" and raw:
                        os.utime(fd)  # the entry's last use, for eviction
            except (OSError, L3Error):
                raw = b""
            data = _entry_data(raw, dataset, split, index, field, size)
            if data is None:  # damaged, foreign or not ours: never returned
                self._count(dataset, "corrupt")
                self._count(dataset, "misses")
                self._remove(folder, name, stored, fd)
                return None
        finally:
            os.close(fd)
        self._count(dataset, "hits")
        return data

    def put_checked(self, dataset: str, split: str, index: int, field: str, data, size: int, read_again, *,
                    root: str = ""):
        """Insert a member read from the source once its size and CRCs pass (member_problem);
        otherwise read it again (read_again(), up to SOURCE_READS reads in all). Returns the last
        bytes read: the checked ones, or failing ones, uncached, for the decoder to report."""
        if not self._has_room(dataset, split, field, size):  # full or unwritable: nothing to check or write
            return data
        for attempt in range(SOURCE_READS):
            if attempt:
                data = read_again()
            if member_problem(field, data, size) is None:
                self.put(dataset, split, index, field, data, root=root)
                return data
            self._own_process()
            self._count(dataset, "unverified")
        return data

    def _has_room(self, dataset: str, split: str, field: str, size: int) -> bool:
        """False (counted as refused) when a MinIO cache is full: its usage says so without the lock."""
        self._own_process()
        if self._writable is False:
            return False
        if self.policy != "minio":
            return True
        need = ENTRY_HEADER.size + len(split.encode()) + len(field.encode()) + size
        until, free = self._free_seen
        if need <= free or time.monotonic() >= until:  # otherwise: it did not fit a moment ago, nor now
            try:
                self._root()
                free = self.capacity - self._usage()
            except (OSError, L3Error):
                return True  # put says why, once
            if need <= free:
                return True
            self._free_seen = (time.monotonic() + FULL_RECHECK_S, free)
        self._count(dataset, "refused")
        return False

    def put(self, dataset: str, split: str, index: int, field: str, data, *, root: str = "") -> bool:
        """Insert one member's bytes; False when the policy or the filesystem refuses it."""
        self._own_process()
        if self._writable is False:
            return False
        data = memoryview(np.ascontiguousarray(data)).cast("B")
        header = _entry_header(dataset, split, index, field, data)
        need = len(header) + len(data)
        if need > self.capacity:
            self._count(dataset, "refused")
            return False
        name = f"{int(index)}.{field}"
        temp, inserted, counted = None, False, False
        try:
            if dataset not in self._known:
                self._about(dataset, root)
            folder, target = self._dir(dataset), self._dir(dataset, split)
            if self.policy == "minio" and self._usage() + need > self.capacity:  # full: nothing written
                self._count(dataset, "refused")
                return False
            temp = _write_temp(folder, [header, data], self._layout)
            with self._locked():
                usage = self._usage()
                if usage + need > self.capacity:
                    if self.policy == "minio":
                        self._count(dataset, "refused")
                        return False
                    usage -= self._evict(usage + need - self.capacity, dataset)
                try:  # fails if another process put it first: it is there either way
                    os.link(temp, name, src_dir_fd=folder, dst_dir_fd=target, follow_symlinks=False)
                    inserted = True
                except FileExistsError:
                    inserted = False
                if inserted:
                    self._set_usage(usage + need)
                counted = True
        except TimeoutError:
            if not self._warned_busy:
                warnings.warn(f"l3codec cache {self.directory}: its lock was held for {LOCK_TIMEOUT_S:.0f} s "
                              "(a stopped process?); inserts skipped meanwhile", RuntimeWarning, stacklevel=2)
                self._warned_busy = True
            self._count(dataset, "refused")
            return False
        except (OSError, L3Error) as error:
            if inserted and not counted:  # linked, its bytes not counted: the usage is wrong from here
                self._cannot_write(error)  # off; the temporary kept tells the next opener to recount
            elif not self._turned_off_by(error):
                self._count(dataset, "refused")
            return False
        finally:
            if temp is not None and (counted or not inserted):  # else kept: the next opener recounts
                _unlink_at(self._dirs.get((dataset,), -1), temp)
        self._writable = True
        if inserted:
            self._count(dataset, "inserts")
        return inserted

    def _about(self, dataset: str, root: str) -> None:
        folder = self._dir(dataset)
        if _read_optional(folder, "about.json", self._layout, self.directory) is None:
            _write_atomic_at(folder, "about.json", json.dumps({"root": root}).encode(), self._layout)
        self._known.add(dataset)

    def _turned_off_by(self, error: Exception) -> bool:
        """True when the error turns the cache off for this process; a transient one (no space,
        no descriptors) skips this access only, said once."""
        if not (isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS):
            self._cannot_write(error)
            return True
        if not self._warned_transient:
            warnings.warn(f"l3codec cache {self.directory}: {error.strerror}; this access skipped, "
                          "later ones are tried again", RuntimeWarning, stacklevel=3)
            self._warned_transient = True
        return False

    def _cannot_write(self, error: Exception) -> None:
        """Said once per process; then reads go to the source (an untrusted folder inside the cache
        included: refused, as the directory itself is when the cache is made)."""
        if self._writable is not False:
            reason = getattr(error, "strerror", None) or error
            warnings.warn(f"l3codec cache {self.directory}: cannot write ({reason}); "
                          "samples are read from the source", RuntimeWarning, stacklevel=4)
        self._writable = False

    def _remove(self, folder: int, name: str, size: int, held_fd: int) -> None:
        """Unlink the damaged entry that was read (held_fd: its open descriptor), not one another
        process put there since."""
        try:
            with self._locked():
                if _identity_at(folder, name) == _identity(os.fstat(held_fd)) and _unlink_at(folder, name):
                    self._set_usage(self._usage() - size)
        except (OSError, TimeoutError):
            pass

    def _evict(self, needed: int, dataset: str) -> int:
        """LRU: remove the least recently used entries (any dataset) until `needed` bytes are free.
        The order comes from one scan, kept and consumed until it runs out: an entry used since
        (its mtime changed) or gone is skipped, and every entry linked since is newer than those
        left in it, so each eviction costs one lstat, not a stat of every entry."""
        freed, rescanned = 0, False
        while freed < needed:
            if not self._lru_queue:
                if rescanned:
                    break
                self._lru_queue = sorted(((info.st_mtime_ns, name, split, owner)
                                          for owner in self._datasets() for split in self._splits(owner)
                                          for name, info in self._entries(owner, split)), reverse=True)
                rescanned = True
                continue
            mtime, name, split, owner = self._lru_queue.pop()
            try:
                folder = self._dir(owner, split)
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except (OSError, L3Error):
                continue
            if info.st_mtime_ns != mtime or not stat.S_ISREG(info.st_mode):
                continue  # used since the scan: no longer the oldest
            if _unlink_at(folder, name):
                freed += info.st_size
                self._count(dataset, "evicted")
        return freed

    # -- looking at it --------------------------------------------------------------------------
    def stats(self) -> dict:
        self._own_process()
        if not os.path.lexists(self.directory):  # never created (an unwritable place)
            return {"capacity": self.capacity, "policy": self.policy, "directory": self.directory,
                    "datasets": {}, "bytes": 0}
        return {"capacity": self.capacity, "policy": self.policy,
                **cache_report(self.directory, group=self.group)}

    def clear(self) -> None:
        self._own_process()
        clear_cache(self.directory, group=self.group)
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        self._known.clear()
        self._lru_queue = []


def cache_report(directory, *, group=None) -> dict:
    """Per dataset in a cache directory: its root, entries (one per sample and field), bytes and
    the counters of every process that used it; and the bytes the cache holds. Writes nothing;
    a directory that is not a cache raises L3Error."""
    directory = os.path.abspath(os.fspath(directory))
    layout = _Layout(_group_id(group))
    root = _open_cache_root(directory, layout, create=False)
    report = {"directory": directory, "datasets": {}, "bytes": 0}
    try:
        for name in sorted(_listdir(root)):
            if not _is_dataset_name(name):
                continue
            try:
                folder = layout.mkdir_open(root, name, os.path.join(directory, name), create=False)
            except (OSError, L3Error):
                continue
            try:
                about = _read_optional(folder, "about.json", layout, directory) or {}
                counts = dict.fromkeys(COUNTERS, 0)
                for counters in _listdir(folder):
                    if counters.startswith("counters") and counters.endswith(".json"):
                        for counter, value in _counts_of(_read_optional(folder, counters, layout, directory)
                                                         or {}).items():
                            counts[counter] += value
                entries = size = 0
                for split in _scandir(folder):
                    if not split.is_dir(follow_symlinks=False) or split.name.startswith("."):
                        continue
                    try:
                        split_fd = layout.mkdir_open(folder, split.name, split.path, create=False)
                    except (OSError, L3Error):
                        continue
                    try:
                        for entry in _scandir(split_fd):
                            info = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(info.st_mode):
                                entries += 1
                                size += info.st_size
                    finally:
                        os.close(split_fd)
            finally:
                os.close(folder)
            report["datasets"][name] = {"root": str(about.get("root", "")), "entries": entries, "bytes": size,
                                        **counts}
            report["bytes"] += size
    finally:
        os.close(root)
    return report


def clear_cache(directory, *, group=None) -> None:
    """Remove every entry and counter of a cache directory (the directory and its marker stay).
    A directory that is not a cache, or not trusted, raises L3Error and loses nothing."""
    directory = os.path.abspath(os.fspath(directory))
    layout = _Layout(_group_id(group))
    root = _open_cache_root(directory, layout, create=False)
    try:
        with _Lock(root):
            for name in _listdir(root):
                if _is_dataset_name(name):
                    shutil.rmtree(name, dir_fd=root)  # descriptor based: never follows a link out
            _write_atomic_at(root, "usage", b"0", layout)
    finally:
        os.close(root)


class _Lock:
    """An exclusive flock on the cache directory itself (its own open file description, so
    threads exclude each other too; released if the process dies), waited for at most
    `timeout` seconds (then TimeoutError)."""

    def __init__(self, root_fd: int, timeout: float = LOCK_TIMEOUT_S):
        self.root_fd, self.timeout = root_fd, timeout

    def __enter__(self):
        self.fd = os.open(".", DIR_FLAGS, dir_fd=self.root_fd)
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TimeoutError(f"cache lock not taken in {self.timeout:.0f} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.02)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _entry_header(dataset: str, split: str, index: int, field: str, data) -> bytes:
    names = split.encode() + field.encode()
    fixed = ENTRY_HEADER.pack(ENTRY_MAGIC, 0, len(data), bytes.fromhex(dataset), int(index),
                              len(split.encode()), len(field.encode()))
    crc = crc32(data, crc32(fixed + names))
    return ENTRY_HEADER.pack(ENTRY_MAGIC, crc, len(data), bytes.fromhex(dataset), int(index),
                             len(split.encode()), len(field.encode())) + names


def _entry_data(raw, dataset: str, split: str, index: int, field: str, size: int) -> np.ndarray | None:
    if len(raw) < ENTRY_HEADER.size:
        return None
    magic, crc, length, owner, sample, split_length, field_length = ENTRY_HEADER.unpack_from(raw)
    start = ENTRY_HEADER.size + split_length + field_length
    names = bytes(raw[ENTRY_HEADER.size:start])
    if (magic != ENTRY_MAGIC or length != size or len(raw) - start != size or owner != bytes.fromhex(dataset)
            or sample != index or names != split.encode() + field.encode() or split_length != len(split.encode())):
        return None
    fixed = ENTRY_HEADER.pack(magic, 0, length, owner, sample, split_length, field_length)
    data = memoryview(raw)[start:]
    if crc32(data, crc32(fixed + names)) != crc:
        return None
    return np.frombuffer(raw, np.uint8, count=size, offset=start)


def _check_name(name: str, what: str) -> None:
    if not name or "/" in name or "\0" in name or name.startswith(".") or len(name.encode()) > 200:
        raise L3Error(f"{what} {name!r} cannot name a cache folder")


def _is_dataset_name(name: str) -> bool:
    return len(name) == 16 and all(c in "0123456789abcdef" for c in name)


def _read_fd(fd: int, size: int) -> bytearray:
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        got = os.readv(fd, [view[done:]])
        if got == 0:
            break
        done += got
    return buffer[:done] if done < size else buffer


def _read_at(folder: int, name: str, layout: _Layout, where: str) -> bytes:
    fd = os.open(name, READ_FLAGS, dir_fd=folder)
    try:
        info = layout.check_file(fd, os.path.join(where, name))
        return bytes(_read_fd(fd, min(info.st_size, 1 << 20)))
    finally:
        os.close(fd)


def _read_optional(folder: int, name: str, layout: _Layout, where: str):
    """A small JSON (or text) file's value, None when missing, damaged, a link or not trusted."""
    try:
        text = _read_at(folder, name, layout, where)
    except (OSError, L3Error):
        return None
    if not name.endswith(".json"):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read_json_at(folder: int, name: str, layout: _Layout, where: str):
    try:
        text = _read_at(folder, name, layout, where)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise L3Error(f"{os.path.join(where, name)} cannot be read ({error.strerror or error})") from None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"unreadable": True}


def _write_temp(folder: int, data, layout: _Layout) -> str:
    """A new temporary file in folder holding data (bytes, or a list of buffers written in order):
    created O_EXCL | O_NOFOLLOW, named by the pid."""
    name = f".tmp-{os.getpid()}-{_namespace()}-{secrets.token_hex(6)}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, layout.file_mode,
                 dir_fd=folder)
    try:
        layout.made(fd, directory=False)
        for part in [data] if isinstance(data, (bytes, bytearray)) else data:
            view, done = memoryview(part).cast("B"), 0
            while done < len(view):
                done += os.write(fd, view[done:])
    except BaseException:
        os.close(fd)
        _unlink_at(folder, name)
        raise
    os.close(fd)
    return name


def _write_atomic_at(folder: int, name: str, data: bytes, layout: _Layout) -> None:
    temp = _write_temp(folder, data, layout)
    try:
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)  # replaces a link, never follows it
    except BaseException:
        _unlink_at(folder, temp)
        raise


def _listdir(fd: int) -> list:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _scandir(fd: int) -> list:
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    except OSError:
        return []


def _stale_temp(folder: int, name: str) -> bool:
    """.tmp-<pid>-<tag>-<random> (or untagged .tmp-<pid>-<random>) whose writer has ended."""
    parts = name.split("-")
    if parts[0] != ".tmp" or len(parts) not in (3, 4):
        return False
    return _owner_ended(parts[1], parts[2] if len(parts) == 4 else "", folder, name)


def _counters_ended(folder: int, name: str) -> bool:
    """counters@<tag>-<pid>.json (or untagged counters-<pid>.json) whose process has ended."""
    if not name.endswith(".json"):
        return False
    if name.startswith("counters@"):
        tag, _, pid = name[len("counters@"):-len(".json")].partition("-")
        return _owner_ended(pid, tag, folder, name)
    return name.startswith("counters-") and _owner_ended(name[len("counters-"):-len(".json")], "", folder, name)


@functools.lru_cache(maxsize=1)
def _namespace() -> str:
    """This boot's and pid namespace's tag: pids mean something only within one."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = "?"
    try:
        pid_namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_namespace = "?"
    if "?" in (boot_id, pid_namespace):  # unknown: a tag of this process alone (its files left a day)
        return "x" + secrets.token_hex(4)
    return hashlib.blake2s(f"{boot_id}/{pid_namespace}".encode(), digest_size=4).hexdigest()


def _owner_ended(pid: str, tag: str, folder: int, name: str) -> bool:
    """Whether the process that named a file has ended: by its pid in this namespace (tag "" for
    an untagged name), by the file's age in another."""
    if not tag or tag == _namespace():
        return not _pid_alive(_number(pid))
    try:
        age = time.time() - os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime
    except OSError:
        return False
    return age > FOREIGN_OWNER_STALE_S


def _number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
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


def _identity(info: os.stat_result) -> tuple:
    return info.st_dev, info.st_ino


def _identity_at(folder: int, name: str):
    """The entry's identity (a link's own, never its target's), or None when it is gone."""
    try:
        return _identity(os.stat(name, dir_fd=folder, follow_symlinks=False))
    except OSError:
        return None


def _unlink_at(folder: int, name: str) -> bool:
    """Remove a name from a folder (a link itself, never what it points to)."""
    try:
        os.unlink(name, dir_fd=folder)
        return True
    except (FileNotFoundError, IsADirectoryError, PermissionError, OSError):
        return False


def _counts_of(value: dict) -> dict:
    counts = dict.fromkeys(COUNTERS, 0)
    for name, number in value.items():
        if name in counts and isinstance(number, int) and not isinstance(number, bool) and number >= 0:
            counts[name] += number
    return counts
