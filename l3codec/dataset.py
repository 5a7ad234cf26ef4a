"""The sharded dataset container: tar shards in WebDataset layout, a memory-mappable index, a manifest.

docs/DATASET.md has the byte and record layouts. This module stores and finds bytes; it never
decodes pixels, and never imports numba or torch (numpy and the standard library, fsspec for URLs).

    DST/manifest.json              what was converted, how, counts, failures, shard checksums
    DST/<split>/index.npy          one INDEX row per sample (little-endian structured array)
    DST/<split>/shard-000000.tar   <key>.l3, <key>.labelIds.l3, ..., <key>.cls, <key>.json
    DST/<split>/shard-000000.idx   the same members in DALI's wds2idx index format
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import io
import json
import os
import re
import tarfile
import threading
import time

import numpy as np

from .fields import CLASS_SUFFIX, IMAGE_FIELDS, JSON_MEMBER, field_name, member_suffix
from .format import FAST_V1_REFUSED, L3Error

DATASET_FORMAT = "l3dataset"
DATASET_VERSION = 1
MAX_IN_FLIGHT = 32  # concurrent byte-range requests per read_many on a remote dataset
MERGE_GAP = 16384  # bytes between two members of a shard (tar headers, small members) fetched in one request
# A remote request (a byte range, the manifest, an index) that fails or has no answer within
# REMOTE_TIMEOUT_S (connecting and reading) is retried REMOTE_RETRIES times, after RETRY_PAUSE_S,
# then twice that...; then L3Error names its URL and byte range. At worst an error comes after
# (REMOTE_RETRIES + 1) x REMOTE_TIMEOUT_S + 1.4 s: 121.4 s with these defaults.
REMOTE_TIMEOUT_S = 30.0
REMOTE_RETRIES = 3
RETRY_PAUSE_S = 0.2
CONVERSION_WORK_DIR = ".l3convert"  # l3convert's plan and finished-shard records, until the manifest
MANIFEST_NAME = "manifest.json"
INDEX_NAME = "index.npy"

# The built-in image-like fields (each an L3 file) and their tar member suffixes, in member order;
# a dataset may hold others (l3codec.fields.Field), stored the same way.
FIELDS = {name: field.suffix for name, field in IMAGE_FIELDS.items()}

TAR_BLOCK = 512
WDS2IDX_VERSION = "v1.2"


def shard_name(number: int) -> str:
    return f"shard-{number:06d}.tar"


def idx_name(number: int) -> str:
    return f"shard-{number:06d}.idx"


def index_dtype(fields, key_width: int, has_json: bool = False) -> np.dtype:
    """The per-sample row: key, shard, label, source size, then offset/size/shape columns per field."""
    columns = [
        ("key", f"S{max(1, key_width)}"),
        ("shard", "<u4"),
        ("label", "<i4"),
        ("source_bytes", "<u8"),
    ]
    for field in map(field_name, fields):
        columns += [
            (f"{field}_offset", "<u8"),
            (f"{field}_size", "<u8"),
            (f"{field}_height", "<u4"),
            (f"{field}_width", "<u4"),
            (f"{field}_channels", "u1"),
            (f"{field}_bits", "u1"),
        ]
    if has_json:
        columns += [("json_offset", "<u8"), ("json_size", "<u8")]
    return np.dtype(columns)


class _HashingFile:
    """A write-only file that hashes what passes through it (tarfile needs write and tell)."""

    def __init__(self, file):
        self.file = file
        self.digest = hashlib.sha256()
        self.position = 0

    def write(self, data):
        self.digest.update(data)
        self.file.write(data)
        self.position += len(data)
        return len(data)

    def tell(self):
        return self.position


class ShardWriter:
    """Writes one whole shard under a temporary name; close() renames it and returns its record.

    fields: names or l3codec.fields.Field objects. add() takes a sample's members (field -> L3
    bytes, optional JSON bytes, class label) and the facts of each image (from l3codec.info); the returned record holds one index row per sample.
    A shard that was never closed leaves only a ``.tmp`` file, which never counts as written.
    """

    def __init__(self, directory, number: int, fields, *, key_width: int, has_json: bool = False):
        self.directory = os.fspath(directory)
        self.number = number
        self.fields = tuple(map(field_name, fields))
        self.has_json = has_json
        self.dtype = index_dtype(self.fields, key_width, has_json)
        self.path = os.path.join(self.directory, shard_name(number))
        self.temporary = f"{self.path}.tmp"
        self._file = open(self.temporary, "wb")
        self._hashing = _HashingFile(self._file)
        self._tar = tarfile.open(fileobj=self._hashing, mode="w", format=tarfile.PAX_FORMAT)
        self._rows = []
        self._idx_lines = []

    def _member(self, name: str, data: bytes, mtime: int) -> tuple:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = mtime
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))
        # the data ends where the tar now stands, less the padding to a whole block
        padded = -(-len(data) // TAR_BLOCK) * TAR_BLOCK
        return self._tar.offset - padded, len(data)

    def add(self, key: str, images: dict, *, infos: dict, label: int = -1, json_bytes: bytes | None = None,
            source_bytes: int = 0, mtime: int = 0) -> None:
        if "." in key or not key or key.startswith("/"):
            raise L3Error(f"sample key {key!r} must be non-empty, relative and hold no '.'")
        if set(images) != set(self.fields):
            raise L3Error(f"sample {key!r} has fields {sorted(images)}, the shard expects {sorted(self.fields)}")
        encoded = key.encode()
        if len(encoded) > self.dtype["key"].itemsize:
            raise L3Error(f"sample key {key!r} is longer than the index's {self.dtype['key'].itemsize} bytes")
        row = np.zeros((), self.dtype)
        row["key"] = encoded
        row["shard"] = self.number
        row["label"] = label
        row["source_bytes"] = source_bytes
        idx_members = []
        for field in self.fields:
            name = f"{key}.{member_suffix(field)}"
            offset, size = self._member(name, images[field], mtime)
            info = infos[field]
            row[f"{field}_offset"], row[f"{field}_size"] = offset, size
            row[f"{field}_height"], row[f"{field}_width"] = info.height, info.width
            row[f"{field}_channels"], row[f"{field}_bits"] = info.channels, info.bits
            idx_members.append((member_suffix(field), offset, size, name))
        if label >= 0:
            name = f"{key}.{CLASS_SUFFIX}"
            data = str(label).encode()
            offset, size = self._member(name, data, mtime)
            idx_members.append((CLASS_SUFFIX, offset, size, name))
        if self.has_json:
            data = json_bytes if json_bytes is not None else b"{}"
            name = f"{key}.{JSON_MEMBER}"
            offset, size = self._member(name, data, mtime)
            row["json_offset"], row["json_size"] = offset, size
            idx_members.append((JSON_MEMBER, offset, size, name))
        self._rows.append(row)
        self._idx_lines.append(" ".join(f"{ext} {offset} {size} {name}" for ext, offset, size, name in idx_members))

    def __len__(self):
        return len(self._rows)

    def close(self) -> dict:
        """Finish the tar, write the .idx, rename both into place; the shard's record."""
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        idx_path = os.path.join(self.directory, idx_name(self.number))
        idx_text = f"{WDS2IDX_VERSION} {len(self._idx_lines)}\n" + "".join(line + "\n" for line in self._idx_lines)
        write_atomic(idx_path, idx_text.encode())
        os.replace(self.temporary, self.path)
        rows = np.array(self._rows, self.dtype) if self._rows else np.zeros(0, self.dtype)
        return {
            "shard": self.number,
            "name": shard_name(self.number),
            "bytes": self._hashing.position,
            "sha256": self._hashing.digest.hexdigest(),
            "samples": len(self._rows),
            "rows": rows,
        }

    def abort(self) -> None:
        """Drop the unfinished shard (its temporary file)."""
        try:
            self._tar.close()
        except Exception:  # noqa: BLE001 - the file is being thrown away
            pass
        self._file.close()
        if os.path.exists(self.temporary):
            os.remove(self.temporary)


def write_atomic(path, data: bytes) -> None:
    """Write data to path through a temporary name and a rename, so a reader never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def npy_bytes(rows: np.ndarray) -> bytes:
    """Index rows as the bytes of a .npy file."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(rows), allow_pickle=False)
    return buffer.getvalue()


def write_index(directory, rows: np.ndarray) -> str:
    """Write a split's index.npy (rows in sample order); its path."""
    path = os.path.join(os.fspath(directory), INDEX_NAME)
    write_atomic(path, npy_bytes(rows))
    return path


def write_manifest(root, manifest: dict) -> str:
    """Write DST/manifest.json last: its presence marks a finished dataset."""
    body = {"format": DATASET_FORMAT, "version": DATASET_VERSION, **manifest}
    path = os.path.join(os.fspath(root), MANIFEST_NAME)
    write_atomic(path, (json.dumps(body, indent=1, sort_keys=False) + "\n").encode())
    return path


def concatenate_rows(records) -> np.ndarray:
    """One index from shard records in shard order (keys widened to the widest)."""
    arrays = [record["rows"] for record in sorted(records, key=lambda record: record["shard"])]
    if not arrays:
        raise L3Error("no shard records to index")
    width = max(array.dtype["key"].itemsize for array in arrays)
    target = [(name, f"S{width}" if name == "key" else array_type)
              for name, (array_type, _) in arrays[0].dtype.fields.items()]
    return np.concatenate([array.astype(np.dtype(target)) for array in arrays])


# The manifest's schema: key -> (what it must be, a check). Split and shard names become paths
# under the dataset's root, so they must be plain names (a shard's exactly as ShardWriter writes it).
_SHARD_NAME = re.compile(r"shard-[0-9]{6}\.tar")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _plain_name(name: str) -> bool:
    """A name that stays under the directory it is joined to."""
    return name not in ("", ".", "..") and not re.search(r"[/\\\0]", name)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_SHARD_SCHEMA = {
    "name": ("a file name shard-NNNNNN.tar", lambda v: isinstance(v, str) and _SHARD_NAME.fullmatch(v)),
    "bytes": ("a count", _count),
    "sha256": ("64 lowercase hex digits", lambda v: isinstance(v, str) and _SHA256.fullmatch(v)),
    "samples": ("a count", _count),
}
_SPLIT_SCHEMA = {
    "samples": ("a count", _count), "failures": ("a count", _count), "source_bytes": ("a count", _count),
    "l3_bytes": ("a count", _count), "shard_bytes": ("a count", _count), "fields": ("a list of strings", _strings),
    "labelled": ("true or false", lambda v: isinstance(v, bool)),
    "shards": ("a list of shard objects", lambda v: isinstance(v, list)),
}
_MANIFEST_SCHEMA = {
    "class_names": ("a list of strings", _strings), "class_ids": ("a list of strings", _strings),
    "splits": ("an object of split name -> split object", lambda v: isinstance(v, dict)),
    "failures": ("a list of failure objects", lambda v: isinstance(v, list)),
    "options": ("an object", lambda v: isinstance(v, dict)), "source": ("an object", lambda v: isinstance(v, dict)),
    "pixel_notes": ("an object", lambda v: isinstance(v, dict)),
}
_FAILURE_KEYS = ("split", "key", "source", "kind", "error")


def _object_problem(value: dict, schema: dict, where: str) -> str | None:
    for key, (what, valid) in schema.items():
        if key in value and not valid(value[key]):
            return f"{where}{key!r} must be {what}, not {_shown(value[key])}"
    return None


def _shown(value) -> str:
    text = json.dumps(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def manifest_problem(manifest: dict) -> str | None:
    """What makes a parsed manifest unusable (a type, a name that would leave the dataset's root),
    or None: checked once, when it is read, so that nothing after trips on it."""
    problem = _object_problem(manifest, _MANIFEST_SCHEMA, "")
    if problem is not None:
        return problem
    if "splits" not in manifest:
        return "'splits' is missing"
    for split, facts in manifest["splits"].items():
        if not _plain_name(split):
            return f"split name {split!r} is not a plain directory name"
        if not isinstance(facts, dict):
            return f"split {split!r} must be an object, not {_shown(facts)}"
        problem = _object_problem(facts, _SPLIT_SCHEMA, f"split {split!r}: ")
        if problem is not None:
            return problem
        for n, shard in enumerate(facts.get("shards", [])):
            if not isinstance(shard, dict):
                return f"split {split!r}: shard {n} must be an object, not {_shown(shard)}"
            missing = [key for key in ("name", "bytes", "sha256") if key not in shard]
            problem = (f"split {split!r}: shard {n} has no {missing[0]!r}" if missing else
                       _object_problem(shard, _SHARD_SCHEMA, f"split {split!r}: shard {n}: "))
            if problem is not None:
                return problem
    for n, failure in enumerate(manifest.get("failures", [])):
        if not (isinstance(failure, dict) and all(isinstance(failure.get(key, ""), str) for key in _FAILURE_KEYS)):
            return f"failure {n} must be an object of strings ({', '.join(_FAILURE_KEYS)}), not {_shown(failure)}"
    return None


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


def member_name(key: str, member: str) -> str:
    """The tar member name of a sample's member (a field name, or JSON_MEMBER)."""
    return f"{key}.{member_suffix(member)}"


def member_header_problem(header, name: str, size: int) -> str | None:
    """What is wrong with the tar header just before a member's data (the index says that member
    is called name and holds size bytes), or None. The ustar name field holds the name's first
    100 bytes, non-ASCII characters as '?' (PAX keeps the whole name in a header before it)."""
    header = bytes(header)
    if len(header) != TAR_BLOCK:
        return "no tar header before it"
    found = header[:100].split(b"\0", 1)[0]
    if found != name.encode("ascii", "replace")[:100]:
        return f"the tar member there is {found.decode('ascii', 'replace')!r}, not {name!r}"
    try:
        stored = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return "the tar header before it is damaged"
    if stored != size:
        return f"the tar member there holds {stored} bytes, the index says {size}"
    return None


class DatasetLocation:
    """Where a converted dataset is (a local path or an fsspec URL) and its files: the manifest
    without opening a split (read_manifest), and what a DatasetReader reads through."""

    def __init__(self, root, storage_options=None, *, timeout: float = REMOTE_TIMEOUT_S,
                 retries: int = REMOTE_RETRIES):
        root = os.fspath(root).rstrip("/")
        self.root = root[len("file://"):] if root.startswith("file://") else root
        self.remote = _is_url(self.root)
        self.storage_options = dict(storage_options or {})
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, not {retries!r}")
        self.timeout, self.retries = float(timeout), retries
        self.max_in_flight = MAX_IN_FLIGHT  # concurrent range requests of read_many (remote)
        self._fs, self._pid = None, os.getpid()
        self._sync_reader = None  # a filesystem without coroutines: its one reading thread

    def _own_process(self) -> None:
        """After fork, forget the parent's connections."""
        if self._pid != os.getpid():
            self._fs, self._pid, self._sync_reader = None, os.getpid(), None

    def _filesystem(self):
        self._own_process()
        if self._fs is None:
            try:
                import fsspec
            except ImportError as error:
                raise L3Error(f"reading {self.root} needs fsspec (pip install fsspec)") from error
            self._fs, _ = fsspec.core.url_to_fs(self.root, **self._bounded_options())
        return self._fs

    def _bounded_options(self) -> dict:
        """storage_options, with botocore's own retries off unless config_kwargs is given: it
        would retry a refused connection for about 10 s inside each of our attempts."""
        options = dict(self.storage_options)
        if self.root.split("://", 1)[0] in ("s3", "s3a"):
            options.setdefault("config_kwargs", {"retries": {"max_attempts": 1}, "connect_timeout": self.timeout,
                                                 "read_timeout": self.timeout})
        return options

    def _path(self, *parts) -> str:
        return "/".join((self.root, *parts)) if self.remote else os.path.join(self.root, *parts)

    def open_file(self, *parts):
        """A file of the dataset (parts under its root, e.g. (split, shard name)) opened for binary
        reading, locally or through fsspec."""
        path = self._path(*parts)
        return self._filesystem().open(path, "rb") if self.remote else open(path, "rb")

    def url(self, *parts) -> str:
        """The path or URL of a file of the dataset."""
        return self._path(*parts)

    def _read_whole(self, *parts) -> bytes:
        path = self._path(*parts)
        if self.remote:
            [data] = self._fetch_ranges([(path, None, None)])
            if isinstance(data, BaseException):
                raise data
            return data
        with open(path, "rb") as file:
            return file.read()

    def _holds_conversion_plan(self) -> bool:
        try:
            self._read_whole(CONVERSION_WORK_DIR, "plan.json")
        except (OSError, L3Error):
            return False
        return True

    def _fetch_ranges(self, ranges: list) -> list:
        """[(url, start, end)] (start and end None: the whole file) -> bytes or an exception each:
        max_in_flight requests at a time, each bounded by timeout, a failed one retried with a
        growing pause, then an L3Error naming its URL and byte range. A missing file is not
        retried: its FileNotFoundError comes back as it is."""
        fs = self._filesystem()
        results = [None] * len(ranges)
        pending = list(range(len(ranges)))
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(RETRY_PAUSE_S * 2 ** (attempt - 1))
            batch = [ranges[k] for k in pending]
            if getattr(fs, "async_impl", False):
                from fsspec.asyn import sync

                got = sync(fs.loop, _fetch_concurrently, fs, batch, self.timeout, self.max_in_flight)
            else:
                if self._sync_reader is None:
                    self._sync_reader = _SyncReader(self.root)
                got = self._sync_reader.fetch(fs, batch, self.timeout)
            failed = []
            for k, (url, start, end), data in zip(pending, batch, got):
                wanted = None if start is None else end - start
                if isinstance(data, FileNotFoundError):
                    results[k] = data
                elif isinstance(data, BaseException) or (wanted is not None and len(data) != wanted):
                    failed.append(k)
                    results[k] = L3Error(f"{url}: {'' if start is None else f'bytes {start}-{end}: '}"
                                         f"{_failure_reason(data, wanted, self.timeout)} "
                                         f"(after {attempt + 1} attempt{'s' if attempt else ''})")
                else:
                    results[k] = data
            pending = failed
            if not pending:
                break
        return results

    def load_manifest(self) -> dict:
        """The dataset's manifest, checked; sets dataset_id (the sample cache's key)."""
        try:
            text = self._read_whole(MANIFEST_NAME)
        except FileNotFoundError as error:
            if self._holds_conversion_plan():
                raise FileNotFoundError(
                    f"{self.root} holds an unfinished l3convert conversion (no {MANIFEST_NAME} yet): if it "
                    "was interrupted, rerun the same l3convert command with --resume to finish it"
                ) from error
            raise FileNotFoundError(
                f"{self.root} is not a converted l3 dataset (no {MANIFEST_NAME}; convert one with l3convert)"
            ) from error
        from .cache import dataset_id

        self.dataset_id = dataset_id(text)  # the cache's key: two datasets never share entries
        try:
            manifest = json.loads(text)
        except ValueError as error:
            raise L3Error(f"{self._path(MANIFEST_NAME)} is not valid JSON: {error}") from error
        if not isinstance(manifest, dict) or manifest.get("format") != DATASET_FORMAT:
            raise L3Error(f"{self._path(MANIFEST_NAME)} is not an {DATASET_FORMAT} manifest")
        version = manifest.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise L3Error(f"{self._path(MANIFEST_NAME)}: \"version\" must be an integer, not {version!r}")
        if version > DATASET_VERSION:
            raise L3Error(
                f"{self.root} is dataset version {version}; this l3codec reads up to {DATASET_VERSION} "
                "(upgrade l3codec)"
            )
        problem = manifest_problem(manifest)
        if problem is not None:
            raise L3Error(f"{self._path(MANIFEST_NAME)}: {problem}")
        if manifest.get("codec_format_version") == 1 and manifest.get("options", {}).get("mode") == "fast":
            raise L3Error(f"{self.root} holds {FAST_V1_REFUSED}")
        return manifest


class DatasetReader(DatasetLocation):
    """Random access to one split of a converted dataset, by sample number and field.

    Local shards are memory-mapped on first use in each process, remote ones (fsspec URLs) read
    by byte range; nothing is opened until needed, so a reader pickles and survives fork.
    """

    def __init__(self, root, split: str = "train", *, storage_options=None, cache=None,
                 timeout: float = REMOTE_TIMEOUT_S, retries: int = REMOTE_RETRIES):
        super().__init__(root, storage_options, timeout=timeout, retries=retries)
        self.split = split
        self._maps = {}
        self._misplaced = {}  # shard -> {(sample, member): problem}, filled as _maps is
        self.manifest = self.load_manifest()
        self.cache = cache  # a cache.SampleCache shared by every process that reads this dataset
        splits = self.manifest.get("splits", {})
        if split not in splits:
            raise L3Error(f"{self.root} has no split {split!r}; it has {sorted(splits)}")
        self.split_info = splits[split]
        self.class_names = list(self.manifest.get("class_names", []))
        self.index = self._load_index()
        names = self.index.dtype.names or ()
        self.fields = _index_fields(names)
        self.members = self.fields + ((JSON_MEMBER,) if "json_offset" in names else ())

    def with_cache(self, cache) -> DatasetReader:
        """A reader of the same split through cache (None: straight from the source); this one is
        left as it is. The index is shared; shards are mapped again, by the copy, as it reads."""
        other = copy.copy(self)
        other._maps, other._misplaced = {}, {}
        other.cache = cache
        return other

    def _own_process(self) -> None:
        """After fork, forget the parent's mappings and connections."""
        if self._pid != os.getpid():
            self._maps, self._misplaced = {}, {}
        super()._own_process()

    def _load_index(self) -> np.ndarray:
        path = self._path(self.split, INDEX_NAME)
        if not self.remote and not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: the split {self.split!r} was not finished")
        try:
            if self.remote:
                index = np.load(io.BytesIO(self._read_whole(self.split, INDEX_NAME)), allow_pickle=False)
            else:
                index = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, OSError) as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise L3Error(f"{path} is not a readable l3 dataset index (damaged, or not a .npy file)") from None
        if index.dtype.names is None or "key" not in index.dtype.names:
            raise L3Error(f"{self._path(self.split, INDEX_NAME)} is not an l3 dataset index")
        return index

    def _shard_map(self, shard: int):
        self._own_process()
        mapped = self._maps.get(shard)
        if mapped is None:
            path = self._path(self.split, shard_name(shard))
            try:
                mapped = np.memmap(path, np.uint8, mode="r")
            except (ValueError, IsADirectoryError) as error:  # numpy cannot map an empty file
                raise L3Error(f"{path} cannot be read ({error}): an empty or damaged shard") from None
            mapped = mapped.view(np.ndarray)  # the mapping stays its base; slices of a plain array are cheaper
            self._misplaced[shard] = self._misplaced_members(shard, mapped)
            self._maps[shard] = mapped
        return mapped

    def _misplaced_members(self, shard: int, mapped) -> dict:
        """{(sample, member): problem} for the members of this split in a shard whose tar header
        does not name them: an index row pointing at another sample's bytes, checked once per
        shard and process rather than per read."""
        problems = {}
        for sample in np.flatnonzero(self.index["shard"] == shard).tolist():
            row = self.index[sample]
            key = bytes(row["key"]).decode()
            for member in self.members:
                offset, size = int(row[f"{member}_offset"]), int(row[f"{member}_size"])
                header = mapped[max(offset - TAR_BLOCK, 0):offset]
                problem = member_header_problem(header, member_name(key, member), size)
                if problem is not None:
                    problems[(sample, member)] = problem
        return problems

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_maps"], state["_misplaced"], state["_fs"], state["_sync_reader"] = {}, {}, None, None
        if not self.remote:
            state["index"] = None  # reopened (memory-mapped) on arrival
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._pid = os.getpid()
        if self.index is None:
            self.index = self._load_index()

    # -- samples -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.index.shape[0])

    def _row(self, i: int):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples")
        return self.index[i]

    def _check_member(self, field: str) -> None:
        if field not in self.members:
            raise KeyError(f"split {self.split!r} has no field {field!r}; it has {list(self.members)}")

    def key(self, i: int) -> str:
        return bytes(self._row(i)["key"]).decode()

    def label(self, i: int) -> int:
        return int(self._row(i)["label"])

    def shape(self, i: int, field: str = "image") -> tuple:
        if field not in self.fields:
            raise KeyError(f"split {self.split!r} has no image field {field!r}; it has {list(self.fields)}")
        row = self._row(i)
        return (int(row[f"{field}_height"]), int(row[f"{field}_width"]), int(row[f"{field}_channels"]))

    def dtype(self, i: int, field: str = "image") -> np.dtype:
        self.shape(i, field)
        return np.dtype(np.uint16 if int(self._row(i)[f"{field}_bits"]) == 16 else np.uint8)

    def read(self, i: int, field: str = "image", /) -> np.ndarray:
        """The member's exact bytes as uint8 (a memmap view locally, a byte-range read remotely)."""
        self._check_member(field)
        row = self._row(i)
        offset, size = int(row[f"{field}_offset"]), int(row[f"{field}_size"])
        i = int(i) % len(self)
        if self.cache is None:
            return self._read_source(int(row["shard"]), offset, size, i, field)
        cached = self.cache.get(self.dataset_id, self.split, i, field, size)
        if cached is not None:
            return cached
        data = self._read_source(int(row["shard"]), offset, size, i, field)
        return self.cache.put_checked(self.dataset_id, self.split, i, field, data, size,  # checked, else read again
                                      functools.partial(self._read_source, int(row["shard"]), offset, size, i, field),
                                      root=self.root)

    def read_many(self, requests, /) -> list:
        """[(sample, field)] -> for each, its bytes (as read()) or the exception reading it raised.

        Remote members the cache does not hold are fetched concurrently: at most
        `max_in_flight` requests at once, the members of one shard that lie back to back merged
        into one request, each bounded by `timeout` and a failed one retried `retries` times
        with a growing pause, then an L3Error naming the URL and the byte range."""
        results = [None] * len(requests)
        wanted = []  # (shard, offset, size, position, sample, field)
        for position, (i, field) in enumerate(requests):
            try:
                self._check_member(field)
                row = self._row(int(i))
                offset, size = int(row[f"{field}_offset"]), int(row[f"{field}_size"])
                if not self.remote:
                    results[position] = self.read(int(i), field)
                    continue
                sample = int(i) % len(self)
                cached = None if self.cache is None else self.cache.get(self.dataset_id, self.split, sample, field, size)
                if cached is not None:
                    results[position] = cached
                else:  # from the tar header before it, which must name it
                    wanted.append((int(row["shard"]), max(offset - TAR_BLOCK, 0), offset, size, position, sample,
                                   field))
            except (L3Error, IndexError, KeyError, OSError) as error:
                results[position] = error
        merged = _merge_ranges(wanted)
        fetched = self._fetch_ranges([(self._path(self.split, shard_name(shard)), start, end)
                                      for (shard, start, end), _ in merged])
        for ((shard, start, _), members), data in zip(merged, fetched):
            for _, _, offset, size, position, sample, field in members:
                if isinstance(data, BaseException):
                    results[position] = data
                    continue
                try:
                    member = self._placed_member(self._path(self.split, shard_name(shard)), data, start, offset,
                                                 size, sample, field)
                except L3Error as error:
                    results[position] = error
                    continue
                if self.cache is not None:  # checked before it enters, else read again
                    try:
                        member = self.cache.put_checked(
                            self.dataset_id, self.split, sample, field, member, size,
                            functools.partial(self._read_source, shard, offset, size, sample, field), root=self.root)
                    except (L3Error, OSError) as error:
                        member = error
                results[position] = member
        return results

    def _read_source(self, shard: int, offset: int, size: int, sample: int, member: str) -> np.ndarray:
        path = self._path(self.split, shard_name(shard))
        if self.remote:  # with the tar header before it, which must name it
            start = max(offset - TAR_BLOCK, 0)
            [data] = self._fetch_ranges([(path, start, offset + size)])
            if isinstance(data, BaseException):
                raise data
            return self._placed_member(path, data, start, offset, size, sample, member)
        mapped = self._shard_map(shard)
        if offset + size > mapped.shape[0]:
            raise L3Error(f"{path} is shorter than its index says")
        problem = self._misplaced[shard].get((sample, member))
        if problem is not None:
            raise L3Error(f"{path}: the index's {member_name(self.key(sample), member)} at byte {offset}: {problem}")
        return mapped[offset:offset + size]

    def _placed_member(self, path, data, start, offset, size, sample, member) -> np.ndarray:
        """A member's bytes from a fetched range holding it and the tar header before it."""
        name = member_name(self.key(sample), member)
        problem = member_header_problem(data[offset - start - TAR_BLOCK:offset - start] if offset >= TAR_BLOCK
                                        else b"", name, size)
        if problem is not None:
            raise L3Error(f"{path}: the index's {name} at byte {offset}: {problem}")
        return np.frombuffer(data, np.uint8, count=size, offset=offset - start)

    def __repr__(self):
        return f"DatasetReader({self.root!r}, split={self.split!r}, samples={len(self)}, fields={self.fields})"


def _index_fields(names) -> tuple:
    """The image-like fields of an index's columns: the built-in ones in member order, then any
    other (declared by the user, l3codec.fields.Field) in column order."""
    found = [name[:-len("_offset")] for name in names if name.endswith("_offset") and name != "json_offset"]
    return tuple([name for name in FIELDS if name in found] + [name for name in found if name not in FIELDS])


def _merge_ranges(wanted: list) -> list:
    """Members [(shard, first byte wanted, offset, size, ...)] -> [((shard, start, end), members)],
    the members of one shard that lie back to back (as a batch of consecutive samples does) in one
    range."""
    merged = []
    for member in sorted(wanted, key=lambda m: (m[0], m[1])):
        shard, first, offset, size = member[:4]
        if merged and merged[-1][0][0] == shard and first <= merged[-1][0][2] + MERGE_GAP:
            (_, start, end), members = merged[-1]
            merged[-1] = ((shard, start, max(end, offset + size)), members + [member])
        else:
            merged.append(((shard, first, offset + size), [member]))
    return merged


def _range_or_error(fs, url, start, end):
    try:
        return fs.cat_file(url, start=start, end=end)
    except Exception as error:  # noqa: BLE001 - returned to be retried and reported
        return error


class _SyncReader:
    """A filesystem without coroutines (ftp, sftp, a user's own class), read by one thread of its
    own, one request at a time as the filesystem expects (several connections share one client),
    each waited for at most timeout. A request still unanswered is left running (it cannot be
    stopped); until it ends, later requests fail at once rather than queue behind it, so that a
    dead server costs one timeout and one thread, not one per request."""

    def __init__(self, root: str):
        self.root = root
        self._stuck = None  # the thread of a request given up on, while it runs

    def fetch(self, fs, ranges: list, timeout: float) -> list:
        results = []
        for url, start, end in ranges:
            if self._stuck is not None and self._stuck.is_alive():
                results.append(TimeoutError())
                continue
            answer = []
            thread = threading.Thread(target=lambda: answer.append(_range_or_error(fs, url, start, end)),
                                      daemon=True, name="l3-remote-read")  # daemon: exit never waits on it
            try:
                thread.start()
            except RuntimeError as error:  # no thread to be had (a process limit)
                raise L3Error(f"{self.root}: cannot start a remote read ({error})") from None
            thread.join(timeout)
            if thread.is_alive():
                self._stuck = thread
                results.append(TimeoutError())
            else:
                results.append(answer[0])
        return results


async def _fetch_concurrently(fs, ranges: list, timeout: float, limit: int) -> list:
    """An async filesystem's bytes (or exception) for each (url, start, end), at most limit
    requests at once, each given up after timeout seconds (connecting and reading)."""
    slots = asyncio.Semaphore(limit)

    async def fetch(url, start, end):
        async with slots:
            try:
                return await asyncio.wait_for(fs._cat_file(url, start=start, end=end), timeout)
            except Exception as error:  # noqa: BLE001 - returned to be retried and reported
                return error

    return await asyncio.gather(*(fetch(*r) for r in ranges))


def _failure_reason(got, wanted, timeout: float) -> str:
    """Why a remote request failed: what it raised, or the bytes it returned."""
    if isinstance(got, (asyncio.TimeoutError, TimeoutError)):
        return f"no answer within {timeout:g} s"
    if isinstance(got, BaseException):
        text = str(got).strip().replace("\n", " ")
        return f"{type(got).__name__}: {text}" if text else type(got).__name__
    return f"{len(got)} of {wanted} bytes"


def open_dataset(root, /, split: str = "train", *, storage_options=None, cache=None,
                 timeout: float = REMOTE_TIMEOUT_S, retries: int = REMOTE_RETRIES) -> DatasetReader:
    """Open one split of a converted dataset (a local path or an fsspec URL) for random access;
    cache: an l3codec.cache.SampleCache that keeps the samples' bytes on this node.
    timeout, retries: each remote request is given up after timeout seconds (connecting and
    reading) and retried retries times, then L3Error names its URL and byte range."""
    return DatasetReader(root, split, storage_options=storage_options, cache=cache, timeout=timeout,
                         retries=retries)


def read_manifest(root, /, *, storage_options=None, timeout: float = REMOTE_TIMEOUT_S,
                  retries: int = REMOTE_RETRIES) -> dict:
    """A converted dataset's manifest (split names, counts, options, failures, shard checksums)."""
    return DatasetLocation(root, storage_options, timeout=timeout, retries=retries).load_manifest()
