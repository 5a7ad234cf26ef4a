"""First use of the CPU codec: what compiles where, and the one line that says so.

A verb compiles, on its first use in a process, the drivers for its mode and dtype, in the calling
process, into Numba's on-disk cache (cpu.py), after one line on stderr (:data:`NOTICE`). A verb never
starts a process. Compiling ahead happens in one visible place, the warm-up (warmup.py:
``python -m l3codec.warmup``, or warmup.start from Python), whose child processes each hold a lock
file in the cache folder while they compile one verb of one type.

Why the locks: several processes may want the same compilation at once (a warm-up still running when
the user's first call comes, `l3 encode` run in parallel after a warm-up started). The first call of
a verb and type in a process therefore waits for any process holding that lock, then loads what it
cached rather than compile it a second time (:meth:`FirstUse.starting`). The lock is the OS's (flock),
released when its holder ends, however it ends; a hung holder costs :data:`WARMUP_WAIT_S` at most, then
the process compiles for itself. This module takes locks and names what compiles; it imports nothing
of the codec.
"""

from __future__ import annotations

import contextvars
import os
import pathlib
import subprocess
import sys
import threading
import time

try:
    import fcntl
except ImportError:  # not a POSIX system: no locks, each process compiles what it uses
    fcntl = None

WARMUP_WAIT_S = 300  # then the waiting process compiles for itself: a hung warm-up costs time, not the run
CHILD_PROGRAM = "import sys; from l3codec.warmup import child_main; sys.exit(child_main(sys.argv[1:]))"
NOTICE = ("l3codec: compiling the CPU codec{what} (first use: 5-25 s per verb, mode and dtype on an idle 2-core "
          "machine, minutes on a busy one; cached afterwards; python -m l3codec.warmup compiles ahead)")


def notice(current) -> str:
    """NOTICE naming what compiles: current is (verb, mode, bits, channels) or None."""
    return NOTICE.format(what="" if current is None else f"'s {described(current)}")


def described(kind) -> str:
    """'compact encoder for 8-bit images of 3 channels' for kind (verb, mode, bits, channels)."""
    verb, mode, bits, channels = kind
    return f"{mode} {verb}r for {bits}-bit images of {channels} channel{'s' * (channels > 1)}"


def lock_path(cache_path: str, verb: str, mode: str, bits: int) -> pathlib.Path:
    return pathlib.Path(cache_path) / f"l3codec-{verb}-{mode}-{bits}.lock"


def writable(folder: str) -> bool:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def numba_cache_dir() -> str:
    """Numba's configured cache root ("" for beside the sources), whatever set it."""
    import numba  # loaded already wherever something compiles

    return numba.config.CACHE_DIR


def start_child(verb: str, mode: str, bits: int, channels: int, lock: pathlib.Path, cache_dir: str,
                program: str | None = None, **options) -> subprocess.Popen:
    """A warm-up child process running warmup.child_main, with this copy of l3codec first on its path
    and this process's Numba cache folder (the child's cache locator then finds the same folder)."""
    package_root = str(pathlib.Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=package_root + (os.pathsep + path if path else ""))
    if cache_dir:
        env["NUMBA_CACHE_DIR"] = cache_dir
    arguments = [verb, mode, str(bits), str(channels), str(lock)]
    return subprocess.Popen([sys.executable, "-c", program or CHILD_PROGRAM, *arguments], env=env,
                            stdin=subprocess.DEVNULL, **options)


def wait_for_lock(lock: pathlib.Path, timeout: float = WARMUP_WAIT_S) -> None:
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


class FirstUse:
    """What this process's verbs are doing: for the compile notice, and to wait for a warm-up.

    The verbs call :meth:`starting` before their CPU steps; the drivers' cache calls
    :meth:`cache_missed` before it compiles. The verb is a context variable, which the drivers'
    thread pool carries into its threads (cpu._in_parallel): a cache miss sees the verb of the
    call that caused it, never what another thread is doing meanwhile.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._verb = contextvars.ContextVar(f"l3codec_verb_{id(self)}", default=None)
        self._awaited = set()  # (verb, mode name, bits) whose first call in this process waited for the lock
        self._warming = {}  # (verb, mode name, bits) -> the warm-up process this process started for it
        self._announced = False
        self._shared_notice = None
        self._write_notice = None  # where NOTICE goes instead of stderr (share_notice)
        self.misses = 0  # the drivers' cache misses in this process: a caller can tell a compile from a load

    def share_notice(self, flag, write=None) -> None:
        """The processes of one pool share flag (a multiprocessing Value("b")): the first of them
        to compile prints NOTICE for all, rather than each its own copy. write(text), if given,
        takes NOTICE instead of stderr: a progress bar drawn by another process would overwrite it."""
        self._shared_notice = flag
        self._write_notice = write

    def announce(self) -> None:
        """NOTICE on stderr, once per process (once per pool where share_notice was called)."""
        if self._announced:
            return
        self._announced = True
        if self._shared_notice is not None:
            with self._shared_notice.get_lock():
                if self._shared_notice.value:
                    return
                self._shared_notice.value = 1
        if self._write_notice is not None:
            self._write_notice(notice(self._verb.get()))
        else:
            print(notice(self._verb.get()), file=sys.stderr, flush=True)

    def holding(self, verb: str, mode: str, bits: int) -> None:
        """This process holds the warm-up lock of (verb, mode, bits) (warmup.child_main): its own
        first call of that kind must not wait for it."""
        with self._lock:
            self._awaited.add((verb, mode, bits))

    def warming(self, verb: str, mode: str, bits: int, process: subprocess.Popen) -> None:
        """This process started process to compile (verb, mode, bits) (warmup.start): its first call
        of that kind waits for it, even if it has not taken its lock yet."""
        with self._lock:
            self._warming[(verb, mode, bits)] = process

    def starting(self, verb: str, mode: str, bits: int, channels: int, cache_path) -> None:
        """Before a verb's CPU steps. Before its first call of a verb, mode and dtype: wait for any
        process compiling that (a warm-up child holding its lock), so that it loads from the cache
        rather than compile twice. cache_path: a callable giving the drivers' cache folder (None if
        there is none), called only when it is needed."""
        self._verb.set((verb, mode, bits, channels))
        with self._lock:
            if (verb, mode, bits) in self._awaited:
                return
            self._awaited.add((verb, mode, bits))
            process = self._warming.pop((verb, mode, bits), None)
        deadline = time.monotonic() + WARMUP_WAIT_S
        if process is not None:
            try:
                process.wait(WARMUP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()  # hung: this process compiles for itself
                return
        if fcntl is not None and (folder := cache_path()) is not None:
            wait_for_lock(lock_path(folder, verb, mode, bits), deadline - time.monotonic())

    def cache_missed(self, folder: str) -> None:
        """The drivers' cache (in folder) missed: this process compiles, after the notice."""
        self.misses += 1
        self.announce()


coordinator = FirstUse()
