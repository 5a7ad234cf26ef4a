"""Filling the CPU codec's compile cache in other processes, so that a first use waits less.

A verb compiles, on first use, the drivers for its mode and dtype into Numba's on-disk cache
(cpu.py). With an empty cache the encoder takes the most, then the decoder; on a machine with
two cores they can compile side by side. cpu.py starts a *sibling* process that compiles the
decoder while the process compiles the encoder, and waits for it before its own first decode,
which then loads from the cache. ``python -m l3codec.warmup`` fills the cache for the common
types ahead of use (an optional install step), one process per verb and type, in parallel.

A sibling holds a lock file in the cache folder while it compiles, so that several processes
starting at once compile each decoder once; the lock is the OS's (flock), released when the
sibling ends, however it ends.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np

from . import format as fmt

try:
    import fcntl
except ImportError:  # not a POSIX system: no siblings, each process compiles what it uses
    fcntl = None

VERBS = ("encode", "decode")
SIBLING_TIMEOUT_S = 300  # then the waiting process compiles for itself: a hung sibling costs time, not the run
_CHILD = "import sys; from l3codec.warmup import child_main; sys.exit(child_main(sys.argv[1:]))"


def exercise(verb: str, mode: str, bits: int, channels: int) -> None:
    """Run verb once through the public API on a tiny image of that mode, dtype and channel count,
    so that it compiles (or loads from the cache) what a user's call of that type would."""
    from . import codec

    dtype = np.dtype(f"uint{bits}")
    if verb == "encode":
        codec.encode(np.zeros((8, fmt.MIN_TILE_WIDTH, channels), dtype), mode=mode)
        return
    # one tile of constant streams, built without the encoder; decoded from bytes, as a file's would be
    mode_id = fmt.MODES[mode]
    stream = bytes([fmt.KIND_CONSTANT]) + bytes(dtype.itemsize)
    transform = fmt.DEFAULT_COLOUR_TRANSFORM[mode_id] if channels >= 3 else fmt.TRANSFORM_NONE
    data = fmt.pack(width=fmt.MIN_TILE_WIDTH, height=8, channels=channels, bits=bits, mode=mode_id,
                    transform=transform, tile_width=fmt.MIN_TILE_WIDTH,
                    tile_height=fmt.DEFAULT_TILE_HEIGHT[mode_id],
                    stream_ends=np.arange(1, channels + 1) * len(stream), payload=stream * channels)
    codec.decode(data)


def exercise_once(verb: str, mode: str, bits: int, channels: int) -> None:
    """exercise() holding the cache's lock for (verb, mode, bits): of several processes starting
    at once (a converter's workers), one compiles and the others wait, then load from the cache."""
    from . import cpu

    folder = cpu.cache_path()
    if fcntl is None or not _writable(folder):
        exercise(verb, mode, bits, channels)
        return
    # not the siblings' lock: the verb's own first use may wait on that one (cpu.py), and a second
    # open file of this process would never get it while this one held it
    lock = lock_path(folder, verb, mode, bits).with_suffix(".workers.lock")
    with open(lock, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        exercise(verb, mode, bits, channels)


def lock_path(cache_path: str, verb: str, mode: str, bits: int) -> pathlib.Path:
    return pathlib.Path(cache_path) / f"l3codec-{verb}-{mode}-{bits}.lock"


def child_main(argv: list[str]) -> int:
    """A child process: VERB MODE BITS CHANNELS LOCK. Exits at once if another process holds the lock."""
    verb, mode, bits, channels, lock = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4]
    with open(lock, "a") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another process is compiling it; whoever waits, waits on the lock
        from . import cpu  # only now: importing Numba is most of a child's cost when it has nothing to do

        cpu.background = False  # a child starts no siblings of its own
        exercise(verb, mode, bits, channels)
    return 0


def _start_child(verb: str, mode: str, bits: int, channels: int, lock: pathlib.Path, **options):
    """A child process running child_main, with this copy of l3codec first on its path and this
    process's Numba cache folder (the child's cache locator then finds the same folder)."""
    import numba

    package_root = str(pathlib.Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=package_root + (os.pathsep + path if path else ""))
    if numba.config.CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = numba.config.CACHE_DIR
    return subprocess.Popen([sys.executable, "-c", _CHILD, verb, mode, str(bits), str(channels), str(lock)],
                            env=env, stdin=subprocess.DEVNULL, **options)


def _writable(folder: str) -> bool:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


class Sibling:
    """A child process compiling one verb into the cache (reaped by a thread, so never a zombie)."""

    def __init__(self, verb: str, mode: str, bits: int, channels: int, cache_path: str):
        self.lock = lock_path(cache_path, verb, mode, bits)
        self.process = _start_child(verb, mode, bits, channels, self.lock, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        threading.Thread(target=self.process.wait, name="l3codec-sibling-reaper", daemon=True).start()

    def wait(self, timeout: float = SIBLING_TIMEOUT_S) -> None:
        """Until the sibling, or any process holding its lock, has finished (or timeout): what it
        cached then loads; whatever it did not (it died, it was killed), this process compiles."""
        deadline = time.monotonic() + timeout
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return
        wait_for_lock(self.lock, deadline - time.monotonic())  # it may have found another process at it


def wait_for_lock(lock: pathlib.Path, timeout: float = SIBLING_TIMEOUT_S) -> None:
    """Until no process holds lock (or timeout); at once if there is no such file."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
    finally:
        os.close(fd)  # releases it


def start_sibling(verb: str, mode: str, bits: int, channels: int, cache_path: str) -> Sibling | None:
    """A sibling compiling verb into the cache at cache_path, or None where it cannot help: no
    writable cache folder, no Python executable to start."""
    if fcntl is None or not sys.executable or not _writable(cache_path):
        return None
    try:
        return Sibling(verb, mode, bits, channels, cache_path)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m l3codec.warmup",
        description="Compile the CPU codec into Numba's on-disk cache ahead of use, in parallel processes.")
    p.add_argument("--mode", nargs="+", default=sorted(fmt.MODES), choices=sorted(fmt.MODES))
    p.add_argument("--bits", nargs="+", type=int, default=[8, 16], choices=(8, 16))
    p.add_argument("--channels", type=int, default=3, choices=(1, 2, 3, 4),
                   help="3 also covers 4; 1 and 2 skip the colour transform")
    args = p.parse_args(argv)
    import numba

    from . import cpu

    if numba.config.DISABLE_JIT:
        print("l3codec.warmup: NUMBA_DISABLE_JIT is set: nothing compiles", file=sys.stderr)
        return 1
    cache_path = cpu.cache_path()
    if not _writable(cache_path):
        print(f"l3codec.warmup: cannot write the cache folder {cache_path}", file=sys.stderr)
        return 1
    jobs = [(verb, mode, bits) for mode in args.mode for bits in args.bits for verb in VERBS]
    running, failed = [], 0
    for verb, mode, bits in jobs:
        while len(running) >= (os.cpu_count() or 1):
            failed += running.pop(0).wait() != 0
        print(f"compiling {verb} {mode} uint{bits}", file=sys.stderr, flush=True)
        running.append(_start_child(verb, mode, bits, args.channels, lock_path(cache_path, verb, mode, bits)))
    failed += sum(process.wait() != 0 for process in running)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
