"""The conversion pipeline: plan shards, convert each shard in a worker, index and describe the result.

Coordinator: finds the layout, plans shards (consecutive samples, about shard_size bytes each,
estimated from source sizes), submits one task per unfinished shard, then writes every split's
index.npy and, last, manifest.json. Worker (convert_shard): for each sample, decode the sources once,
encode with l3codec.encode, optionally decode the result and compare with the pixels in memory,
append to the shard, and finally write the shard's record into DST/.l3convert/ — the record is
the mark of a finished shard that --resume trusts.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue as queue_module
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import l3codec
from l3codec import dataset, first_use, sources
from l3codec.fields import field as field_named
from l3codec.format import DEFAULT_MAX_PIXELS, MAX_PIXELS, MODES, L3Error
from l3codec.sources import UnreadableSource

from . import executors
from .layouts import find_layout, read_regular_file
from .pixels import LOSSY_SUFFIXES, resize, target_size

WORK_DIR = dataset.CONVERSION_WORK_DIR
LOSSY_EXPANSION = 4  # planning guess: L3 bytes per byte of JPEG/WebP source (lossless sources: 1)
CONVERTER_VERSION = 1


class ConvertError(RuntimeError):
    """The conversion cannot go on (destination unusable, plan changed under --resume, ...)."""


AUTO_SHARD_SIZE = "auto"
AUTO_SHARDS_PER_SPLIT = 16  # enough shards to keep 16 workers busy on a small split
AUTO_SHARD_BYTES = (1_000_000, 256_000_000)  # and shards neither tiny nor huge


def parse_size(text) -> int | None:
    """'256MB', '1MiB', '500k', 1000000 -> bytes; "auto" -> None (plan_shards picks per split)."""
    if isinstance(text, str) and text.strip().lower() == AUTO_SHARD_SIZE:
        return None
    if isinstance(text, (int, np.integer)):
        value = int(text)
    else:
        units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
                 "kib": 2**10, "mib": 2**20, "gib": 2**30}
        cleaned = str(text).strip().lower()
        number = cleaned.rstrip("kmgib")
        unit = cleaned[len(number):]
        try:
            value = int(float(number) * units[unit])
        except (ValueError, KeyError):
            raise ValueError(f"shard size must look like 256MB, 1MiB or 500000, not {text!r}") from None
    if value <= 0:
        raise ValueError(f"shard size must be positive, not {text!r}")
    return value


@dataclass(frozen=True)
class ShardTask:
    split: str
    number: int
    fields: tuple
    has_json: bool
    key_width: int
    samples: tuple  # SourceSample, ...
    estimated_bytes: int  # of L3 output, from the sources' sizes: the plan's measure of its work


@dataclass
class Summary:
    """What a conversion did; str() is the final table."""

    dst: str
    samples: int = 0
    failures: list = field(default_factory=list)
    source_bytes: int = 0
    l3_bytes: int = 0
    shards: int = 0
    shards_reused: int = 0
    converted_samples: int = 0  # by this run: the rates leave out what --resume found already written
    converted_source_bytes: int = 0
    wall_seconds: float = 0.0
    starting_seconds: float = 0.0  # to the first converted images: the workers' start, compiling on first use
    verified: bool = False
    workers: int = 1
    per_split: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.l3_bytes / self.source_bytes if self.source_bytes else float("nan")

    def __str__(self) -> str:
        rows = [("split", "samples", "failures", "source MB", "L3 MB", "ratio")]
        for name, split in self.per_split.items():
            ratio = split["l3_bytes"] / split["source_bytes"] if split["source_bytes"] else float("nan")
            rows.append((name, split["samples"], split["failures"], f"{split['source_bytes'] / 1e6:.1f}",
                         f"{split['l3_bytes'] / 1e6:.1f}", f"{ratio:.3f}"))
        rows.append(("total", self.samples, len(self.failures), f"{self.source_bytes / 1e6:.1f}",
                     f"{self.l3_bytes / 1e6:.1f}", f"{self.ratio:.3f}"))
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(str(value).rjust(width) for value, width in zip(row, widths)) for row in rows]
        # the rate over the whole run but the start (on an empty cache most of a minute of compiling,
        # which made a small run's rate a tenth of the workers')
        starting = self.starting_seconds
        seconds = max(self.wall_seconds - starting, 1e-9)
        work = (f"{self.converted_samples / seconds:.1f} images/s, "
                f"{self.converted_source_bytes / 1e6 / seconds:.1f} MB/s" if self.converted_samples
                else "nothing left to convert")
        if starting:
            work += f" after the first {starting:.1f} s (the workers' start, compiling on first use)"
        lines.append(f"{self.shards} shards ({self.shards_reused} reused), wall {self.wall_seconds:.1f} s, {work}"
                     + (", every sample verified" if self.verified else ""))
        if self.shards < self.workers:  # (a resume that finds few shards left is not the shard size's doing)
            lines.append(f"  note: {self.shards} shards for {self.workers} workers left some "
                         "idle (a worker converts whole shards): a smaller --shard-size spreads the work")
        for failure in self.failures[:10]:
            source = "" if failure["source"] in failure["error"] else f" ({failure['source']})"  # named once
            lines.append(f"  skipped {failure['split']}/{failure['key']}: {failure['error']}{source}")
        if len(self.failures) > 10:
            lines.append(f"  ... and {len(self.failures) - 10} more failures (manifest.json lists them all)")
        return "\n".join(lines)


# -- worker side ----------------------------------------------------------------------------------------

def _read_file(path: str, member: str) -> bytes:
    try:
        return read_regular_file(path)
    except OSError as error:
        raise UnreadableSource(f"{member} {path} unreadable: {error.strerror or error}") from error


def _encode_sample(sample, fields, options) -> tuple:
    """(images {field: bytes}, infos, json bytes, source bytes, notes) or UnreadableSource."""
    arrays, source_bytes, notes, json_bytes = {}, 0, [], None
    for member, path in sample.files:
        if member == "json":
            json_bytes = _read_file(path, member)
            source_bytes += len(json_bytes)
            continue
        if member not in fields:
            continue
        data = _read_file(path, member)
        source_bytes += len(data)
        try:
            arrays[member], member_notes = sources.read(data, exif_transpose=options["exif_transpose"],
                                                        max_pixels=options["max_pixels"])
        except UnreadableSource as error:
            raise UnreadableSource(f"{member} {path}: {error}") from error
        notes += member_notes
    missing = [member for member in fields if member not in arrays]
    if missing:
        raise UnreadableSource(f"no source file for {', '.join(missing)}")
    base = arrays["image"].shape[:2]
    for member, array in arrays.items():
        if array.shape[:2] != base:
            raise UnreadableSource(f"{member} is {array.shape[:2]}, the image is {base}")
    size = target_size(*base, max_side=options["max_side"], resize_short=options["resize_short"])
    images, infos = {}, {}
    for member, array in arrays.items():
        kind = field_named(member)
        array = resize(array, size, labels=kind.is_label)
        data = l3codec.encode(array, mode=kind.encoding_mode(options["mode"]), tile_width=options["tile_width"])
        if options["verify"] and not _same_pixels(l3codec.decode(data), array):
            raise VerifyError(f"{member}: decoded L3 pixels differ from the source pixels")
        images[member], infos[member] = data, l3codec.info(data)
    return images, infos, json_bytes, source_bytes, notes


def _same_pixels(decoded: np.ndarray, source: np.ndarray) -> bool:
    """decode() gives HW for one channel where the source may be HW1."""
    return decoded.size == source.size and decoded.dtype == source.dtype and np.array_equal(
        decoded.reshape(source.shape), source)


class VerifyError(Exception):
    """A written sample did not decode to its source pixels (a codec fault: reported, never written)."""


def _record_paths(dst: str, split: str, number: int) -> tuple:
    base = os.path.join(dst, WORK_DIR, split, f"shard-{number:06d}")
    return f"{base}.npy", f"{base}.json"


def convert_shard(task: ShardTask, options: dict, dst: str) -> dict:
    """Convert one shard's samples; write the shard, its .idx and its record; the record (without rows)."""
    if os.environ.get("NUMBA_NUM_THREADS") == "1":
        import numba

        numba.set_num_threads(1)
    started = time.perf_counter()
    queue = executors.progress_sink()
    directory = os.path.join(dst, task.split)
    writer = dataset.ShardWriter(directory, task.number, task.fields, key_width=task.key_width,
                                 has_json=task.has_json)
    failures, notes, source_total, written_total = [], {}, 0, 0
    try:
        for sample in task.samples:
            image_path = dict(sample.files)["image"]
            try:
                images, infos, json_bytes, source_bytes, sample_notes = _encode_sample(sample, task.fields, options)
            except (UnreadableSource, VerifyError, L3Error) as error:
                kind = "verify" if isinstance(error, VerifyError) else "source"
                failures.append({"split": task.split, "key": sample.key, "source": image_path,
                                 "kind": kind, "error": str(error)})
                if queue is not None:
                    queue.put((1, 0, 0))
                continue
            writer.add(sample.key, images, infos=infos, label=sample.label, json_bytes=json_bytes,
                       source_bytes=source_bytes, mtime=int(os.stat(image_path).st_mtime))
            for note in sample_notes:
                notes[note] = notes.get(note, 0) + 1
            written = sum(len(data) for data in images.values())
            source_total += source_bytes
            written_total += written
            if queue is not None:
                queue.put((1, source_bytes, written))
        record = writer.close()
    except BaseException:
        writer.abort()
        raise
    rows = record.pop("rows")
    record.update(split=task.split, failures=failures, notes=notes, source_bytes=source_total,
                  l3_bytes=written_total, seconds=time.perf_counter() - started)
    rows_path, record_path = _record_paths(dst, task.split, task.number)
    dataset.write_atomic(rows_path, dataset.npy_bytes(rows))
    dataset.write_atomic(record_path, json.dumps(record).encode())
    return record


def _load_record(dst: str, split: str, number: int) -> dict | None:
    """A finished shard's record with its rows, or None if the shard is not finished."""
    rows_path, record_path = _record_paths(dst, split, number)
    shard_path = os.path.join(dst, split, dataset.shard_name(number))
    try:
        with open(record_path, encoding="utf-8") as file:
            record = json.load(file)
        rows = np.load(rows_path, allow_pickle=False)
        if os.path.getsize(shard_path) != record["bytes"]:
            return None
    except (OSError, ValueError, KeyError):
        return None
    record["rows"] = rows
    return record


# -- coordinator side -----------------------------------------------------------------------------------

def _estimated_bytes(sample) -> int:
    total = 0
    for _, path in sample.files:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        total += size * (LOSSY_EXPANSION if path.lower().endswith(LOSSY_SUFFIXES) else 1)
    return total


def auto_shard_bytes(samples) -> int:
    """A split's shard size when none is given: the split in AUTO_SHARDS_PER_SPLIT shards, so
    every worker has work on a small dataset, within AUTO_SHARD_BYTES, so a large one still gets
    few large shards. It depends on the sources only, so a resumed run plans the same shards."""
    low, high = AUTO_SHARD_BYTES
    return min(high, max(low, sum(_estimated_bytes(sample) for sample in samples) // AUTO_SHARDS_PER_SPLIT))


def plan_shards(layout, shard_bytes: int | None) -> list:
    """Consecutive samples per shard, each shard about shard_bytes of estimated L3 output (None:
    auto_shard_bytes of each split)."""
    tasks = []
    for split, samples in layout.splits.items():
        split_shard_bytes = shard_bytes or auto_shard_bytes(samples)
        fields = layout.fields[split]
        has_json = any(member == "json" for sample in samples for member, _ in sample.files)
        key_width = max(len(sample.key.encode()) for sample in samples)
        number, current, current_bytes = 0, [], 0
        for sample in samples:
            estimate = _estimated_bytes(sample)
            if current and current_bytes + estimate > split_shard_bytes:
                tasks.append(ShardTask(split, number, fields, has_json, key_width, tuple(current), current_bytes))
                number, current, current_bytes = number + 1, [], 0
            current.append(sample)
            current_bytes += estimate
        if current:
            tasks.append(ShardTask(split, number, fields, has_json, key_width, tuple(current), current_bytes))
    return tasks


def _plan_fingerprint(layout_name: str, tasks: list, byte_options: dict) -> str:
    """A hash of everything that decides the output bytes: options, shard plan, source files and mtimes."""
    digest = hashlib.sha256(json.dumps({"layout": layout_name, "options": byte_options,
                                        "converter": CONVERTER_VERSION}, sort_keys=True).encode())
    for task in tasks:
        digest.update(f"{task.split}/{task.number}/{task.fields}/{task.has_json}/{task.key_width}\n".encode())
        for sample in task.samples:
            digest.update(f"{sample.key}|{sample.label}".encode())
            for member, path in sample.files:
                try:
                    stat = os.stat(path)
                    digest.update(f"|{member}={path}:{stat.st_size}:{int(stat.st_mtime)}".encode())
                except OSError:
                    digest.update(f"|{member}={path}:missing".encode())
            digest.update(b"\n")
    return digest.hexdigest()


def _destination_error(error: OSError, dst: str, written: bool = True) -> ConvertError:
    """What went wrong writing to dst; with written=False nothing was converted yet, so there is
    nothing to resume."""
    reasons = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
               errno.EROFS: "it is on a read-only filesystem", errno.EACCES: "permission denied",
               errno.EPERM: "permission denied", errno.ENOTDIR: "a path on the way is a file, not a directory",
               errno.EEXIST: "it exists and is not a directory"}
    reason = reasons.get(error.errno, error.strerror or str(error))
    advice = ("finished shards are kept, free space or fix the destination and rerun with --resume" if written
              else "nothing was written; choose a writable directory")
    return ConvertError(f"cannot write the dataset to {dst}: {reason} ({error.filename or dst}); {advice}")


def _prepare_destination(dst: str, fingerprint: str, resume: bool, splits):
    """Check dst, take its lock and write the plan; returns the lock (held until it is closed)."""
    work = os.path.join(dst, WORK_DIR)
    plan_path = os.path.join(work, "plan.json")
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise ConvertError(f"{dst} exists and is not a directory; nothing was written")
    if os.path.exists(os.path.join(dst, dataset.MANIFEST_NAME)) and not resume:
        raise ConvertError(f"{dst} already holds a converted dataset; delete it first "
                           "(or pass --resume to check it is complete)")
    if os.path.isdir(dst) and os.listdir(dst) and not os.path.isdir(work) and not resume:
        raise ConvertError(f"{dst} is not empty ({', '.join(sorted(os.listdir(dst))[:5])}); "
                           "choose an empty or new directory")
    if os.path.isdir(work):
        if not resume:
            raise ConvertError(f"{dst} holds an interrupted conversion; rerun with --resume to finish it, "
                               "or delete the directory to start over")
        try:
            with open(plan_path, encoding="utf-8") as file:
                previous = json.load(file)["fingerprint"]
        except (OSError, ValueError, KeyError):
            previous = None
        if previous != fingerprint:
            raise ConvertError(f"the sources or options changed since the interrupted conversion in {dst}; "
                               "--resume needs the same ones (or delete the directory to start over)")
    fresh = not os.path.isdir(work)
    try:
        os.makedirs(work, exist_ok=True)
        lock = _lock_destination(dst, work)
        for split in splits:
            os.makedirs(os.path.join(work, split), exist_ok=True)
            os.makedirs(os.path.join(dst, split), exist_ok=True)
        dataset.write_atomic(plan_path, json.dumps({"fingerprint": fingerprint}).encode())
    except OSError as error:
        raise _destination_error(error, dst, written=not fresh) from error
    return lock


def _lock_destination(dst: str, work: str):
    """An exclusive lock on dst's work directory for this run: a second run into dst is refused,
    naming the process that holds it. Released when the returned file is closed or the process ends."""
    import fcntl

    file = open(os.path.join(work, "lock"), "a+")
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = file.read().strip() or "unknown"
        file.close()
        raise ConvertError(f"another l3convert run (pid {holder}) is writing to {dst}; wait for it or stop it") from None
    file.seek(0)
    file.truncate()
    file.write(str(os.getpid()))
    file.flush()
    return file


class _Progress:
    """A tqdm bar fed per image (pool workers' queue) or per shard (inline and Dask)."""

    def __init__(self, total: int, enabled: bool, queue):
        self.queue = queue
        self.source_bytes = 0
        self.started = time.perf_counter()
        self.first_converted = None  # when a pool's first converted images came: its start and compiling end
        self.rate_from = self.started  # the bar's MB/s counts from its first images
        self.bar = None
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="img", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                self.bar = None
        self._stop = threading.Event()
        self._thread = None
        if queue is not None:
            self._thread = threading.Thread(target=self._drain, daemon=True)
            self._thread.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.queue.get(timeout=0.2)
            except queue_module.Empty:
                self._tick()
                continue
            except (OSError, EOFError, ValueError):
                continue
            self._take(message)

    def _take(self, message) -> None:
        """One worker message: (images, source bytes, written bytes), ("compiled", kind, seconds) or
        ("notice", first-use notice)."""
        if message[0] == "compiled":
            self.compiled(*message[1:])
        elif message[0] == "notice":
            self.write(message[1])
        else:
            self.advance(*message[:2])

    def write(self, text: str) -> None:
        """A line on stderr, above the bar if there is one."""
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def _tick(self) -> None:
        """Before the first image the bar gets no update, and tqdm moves its clock only on one: this
        keeps the elapsed time moving while the workers compile (a minute or more on an empty cache)."""
        if self.bar is not None and self.bar.n == 0:
            self.bar.refresh()

    def compiled(self, kind: tuple, seconds: float) -> None:
        """A worker compiled kind (verb, mode, bits, channels): one line above the bar, or alone where
        tqdm is not installed (the user install); none with progress off."""
        if self.enabled:
            self.write(f"l3codec: compiled the {first_use.described(kind)} in {seconds:.1f} s")

    def advance(self, images: int, source_bytes: int) -> None:
        if source_bytes and self.first_converted is None and self.queue is not None:  # per image, not per shard
            self.first_converted = time.perf_counter()
        self.source_bytes += source_bytes
        if self.bar is not None:
            if self.bar.n == 0 and images:
                # the first images end the workers' start, which on an empty cache is most of a minute
                # of compiling: the bar's rate, time left and MB/s count from here, not from the start
                self.bar.reset()
                self.rate_from = time.perf_counter()
            self.bar.update(images)
            seconds = max(time.perf_counter() - self.rate_from, 1e-9)
            self.bar.set_postfix_str(f"{self.source_bytes / 1e6 / seconds:.3g} MB/s", refresh=False)

    def shard_done(self, record: dict) -> None:
        if self.queue is None:
            self.advance(record["samples"] + len(record["failures"]), record["source_bytes"])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            try:  # what the workers reported after the drain stopped
                while True:
                    self._take(self.queue.get_nowait())
            except (queue_module.Empty, OSError, EOFError, ValueError):
                pass
        if self.bar is not None:
            self.bar.close()


def _compile_list(found, mode: str, verify: bool) -> tuple:
    """What the workers will compile: the encoder (and with verify the decoder) of the images'
    mode for the sample depths the layout saw in them, and of compact for 8- and 16-bit label
    maps where the layout has them. A depth the layout did not see compiles when first met."""
    verbs = ("encode", "decode") if verify else ("encode",)
    kinds = {(field_named(member).encoding_mode(mode), bits)
             for fields in found.fields.values() for member in fields
             for bits in (found.image_bits if member == "image" else (8, 16))}
    return tuple((verb, kind_mode, bits, 3 if bits == 8 else 1) for verb in verbs for kind_mode, bits in sorted(kinds))


def convert(layout: str, src, dst, /, *, split: str | None = None, mode: str = "compact",
            tile_width: int | None = None, shard_size=AUTO_SHARD_SIZE, workers: int | None = None, scheduler=None,
            verify: bool = False, resume: bool = False, max_side: int | None = None,
            resize_short: int | None = None, exif_transpose: bool = False, annotations: str = "gtFine",
            val_labels: str | None = None, synset_words: str | None = None, force: bool = False,
            max_pixels: int = DEFAULT_MAX_PIXELS, progress: bool = True) -> Summary:
    """Convert a folder, Cityscapes or ImageNet tree at src into a sharded L3 dataset at dst.

    workers: processes (default all cores; 0 or 1 runs in this process); scheduler: a Dask
    distributed address instead. resume finishes an interrupted run; verify decodes every written
    sample and compares it with the source pixels. force: "folder" takes a tree laid out as
    Cityscapes or ImageNet as classes anyway. max_pixels: a source image of more pixels is
    reported and skipped, from its header (default DEFAULT_MAX_PIXELS, 8192 x 8192; at most
    MAX_PIXELS). Returns a Summary (print it for the table).
    """
    started = time.perf_counter()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, not {mode!r}")
    for name, value in (("max_side", max_side), ("resize_short", resize_short), ("tile_width", tile_width)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if not isinstance(max_pixels, int) or not 1 <= max_pixels <= MAX_PIXELS:
        raise ValueError(f"max_pixels must be an integer in 1..{MAX_PIXELS}, not {max_pixels!r}")
    shard_bytes = parse_size(shard_size)
    src, dst = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))
    found = find_layout(layout, src, split=split, annotations=annotations, val_labels=val_labels,
                        synset_words=synset_words, force=force)
    tasks = plan_shards(found, shard_bytes)
    byte_options = {"mode": mode, "label_mode": "compact", "tile_width": tile_width, "shard_size": shard_bytes or AUTO_SHARD_SIZE,
                    "max_side": max_side, "resize_short": resize_short, "exif_transpose": exif_transpose,
                    "annotations": annotations if layout == "cityscapes" else None}
    fingerprint = _plan_fingerprint(found.name, tasks, byte_options)
    if resume and os.path.exists(os.path.join(dst, dataset.MANIFEST_NAME)):
        return _summary_from_manifest(dst, fingerprint, started)
    plan = _Plan(found, src, dst, tasks, byte_options, verify, max_pixels, fingerprint, started)
    # before anything is written: a scheduler may not answer
    executor = executors.make_executor(workers, scheduler, warm=_compile_list(found, mode, verify))
    try:
        lock = _prepare_destination(dst, fingerprint, resume, found.splits)
    except BaseException:
        executor.shutdown(cancel=True)
        raise
    try:
        return _convert_tasks(plan, executor, resume=resume, progress=progress)
    finally:
        lock.close()


@dataclass(frozen=True)
class _Plan:
    """One conversion, as convert() planned it."""

    found: object  # the layout's Found
    src: str
    dst: str
    tasks: list  # one per shard
    byte_options: dict  # what changes the bytes written (in the manifest and the fingerprint)
    verify: bool
    max_pixels: int  # which sources are read (not in the fingerprint: it changes no byte written)
    fingerprint: str
    started: float  # time.perf_counter()


def _convert_tasks(plan: _Plan, executor, *, resume: bool, progress: bool) -> Summary:
    """Run the shards not finished yet on executor, then write the indexes and the manifest."""
    dst, tasks = plan.dst, plan.tasks
    worker_options = {**plan.byte_options, "verify": plan.verify, "max_pixels": plan.max_pixels}
    records = {}
    pending = []
    for task in tasks:
        record = _load_record(dst, task.split, task.number) if resume else None
        if record is not None:
            records[(task.split, task.number)] = record
        else:
            pending.append(task)
    reused = len(records)
    bar = _Progress(sum(len(task.samples) for task in tasks), progress, executor.progress_queue)
    bar.advance(sum(len(task.samples) for task in tasks if (task.split, task.number) in records), 0)
    interrupted = True
    futures = []
    try:
        if executor.parallel:  # largest first, so that the last to finish are small ones and no worker idles long
            pending = sorted(pending, key=lambda task: -task.estimated_bytes)
        futures = [executor.submit(convert_shard, task, worker_options, dst) for task in pending]
        for future in executor.as_completed(futures):
            try:
                record = future.result()
            except OSError as error:
                raise _destination_error(error, dst) from error
            bar.shard_done(record)
            records[(record["split"], record["shard"])] = _load_record(dst, record["split"], record["shard"])
        interrupted = False
    finally:
        bar.close()
        executor.shutdown(cancel=interrupted)
    try:
        summary = _finish(plan, records)
    except OSError as error:
        raise _destination_error(error, dst) from error
    summary.shards_reused = reused
    converted = [records[(task.split, task.number)] for task in pending]
    summary.converted_samples = sum(record["samples"] for record in converted)
    summary.converted_source_bytes = sum(record["source_bytes"] for record in converted)
    summary.workers = getattr(executor, "workers", 1)
    if bar.first_converted is not None:
        summary.starting_seconds = bar.first_converted - plan.started
    return summary


def _finish(plan: _Plan, records: dict) -> Summary:
    """Write every split's index, then the manifest; drop the work directory."""
    summary = Summary(dst=plan.dst, verified=plan.verify)
    splits = {}
    notes = {}
    for split in plan.found.splits:
        split_records = [records[(task.split, task.number)] for task in plan.tasks if task.split == split]
        if any(record is None for record in split_records):
            raise ConvertError(f"a shard of {split} has no record; rerun with --resume")
        splits[split], failures = _finish_split(plan, split, split_records)
        for record in split_records:
            for note, count in record["notes"].items():
                notes[note] = notes.get(note, 0) + count
        entry = splits[split]
        summary.per_split[split] = {key: entry[key] for key in ("samples", "failures", "source_bytes", "l3_bytes")}
        summary.samples += entry["samples"]
        summary.failures += failures
        summary.source_bytes += entry["source_bytes"]
        summary.l3_bytes += entry["l3_bytes"]
        summary.shards += len(split_records)
    byte_options = plan.byte_options
    dataset.write_manifest(plan.dst, {
        "codec_format_version": l3codec.VERSION,
        "l3codec_version": l3codec.__version__,
        "source": {"path": plan.src, "layout": plan.found.name},
        "options": {**byte_options, "lossy_resize": byte_options["max_side"] is not None
                    or byte_options["resize_short"] is not None},
        "class_names": plan.found.class_names,
        "class_ids": plan.found.class_ids,
        "splits": splits,
        "failures": summary.failures,
        "pixel_notes": notes,
        "plan_fingerprint": plan.fingerprint,
    })
    shutil.rmtree(os.path.join(plan.dst, WORK_DIR), ignore_errors=True)
    summary.wall_seconds = time.perf_counter() - plan.started
    return summary


def _finish_split(plan: _Plan, split: str, split_records: list) -> tuple:
    """Write a split's index from its shards' records; (its manifest entry, its failures)."""
    rows = dataset.concatenate_rows(split_records)
    dataset.write_index(os.path.join(plan.dst, split), rows)
    failures = [failure for record in split_records for failure in record["failures"]]
    entry = {
        "samples": int(rows.shape[0]),
        "failures": len(failures),
        "fields": list(plan.found.fields[split]),
        "labelled": bool(rows.shape[0]) and bool((rows["label"] >= 0).any()),
        "source_bytes": sum(record["source_bytes"] for record in split_records),
        "l3_bytes": sum(record["l3_bytes"] for record in split_records),
        "shard_bytes": sum(record["bytes"] for record in split_records),
        "shards": [{key: record[key] for key in ("name", "bytes", "sha256", "samples")} for record in split_records],
    }
    return entry, failures


def _summary_from_manifest(dst: str, fingerprint: str, started: float) -> Summary:
    """--resume on a finished dataset: nothing to do if it is the same conversion."""
    manifest = dataset.read_manifest(dst)
    if manifest.get("plan_fingerprint") != fingerprint:
        raise ConvertError(f"{dst} already holds a finished conversion of other sources or options; "
                           "delete it to convert again")
    summary = Summary(dst=dst, failures=list(manifest.get("failures", [])))
    for name, split in manifest["splits"].items():
        summary.per_split[name] = {key: split[key] for key in ("samples", "failures", "source_bytes", "l3_bytes")}
        summary.samples += split["samples"]
        summary.source_bytes += split["source_bytes"]
        summary.l3_bytes += split["l3_bytes"]
        summary.shards += len(split["shards"])
    summary.shards_reused = summary.shards
    summary.wall_seconds = time.perf_counter() - started
    return summary
