"""First use of the CPU codec: who compiles what, while the user waits.

A verb compiles, on first use, the drivers for its mode and dtype into Numba's on-disk cache
(cpu.py). With an empty cache the encoder takes the most, then the decoder; on a machine with
two cores they can compile side by side. So when an encode misses the cache, :data:`coordinator`
starts a *sibling* process that compiles the matching decoder meanwhile, and the process's first
decode of that type waits for it and then loads from the cache.

A sibling holds a lock file in the cache folder while it compiles, so that several processes
starting at once compile each decoder once; the lock is the OS's (flock), released when the
sibling ends, however it ends. This module starts processes and takes locks; what a sibling runs
is warmup.child_main, named only as text, so nothing here imports the codec.
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
except ImportError:  # not a POSIX system: no siblings, each process compiles what it uses
    fcntl = None

SIBLING_TIMEOUT_S = 300  # then the waiting process compiles for itself: a hung sibling costs time, not the run
# set in a sibling's environment: a sibling starts no siblings of its own
NO_SIBLINGS_VARIABLE = "L3CODEC_NO_SIBLINGS"
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
                program: str = CHILD_PROGRAM, **options) -> subprocess.Popen:
    """A child process running warmup.child_main, with this copy of l3codec first on its path and
    this process's Numba cache folder (the child's cache locator then finds the same folder)."""
    package_root = str(pathlib.Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=package_root + (os.pathsep + path if path else ""))
    env[NO_SIBLINGS_VARIABLE] = "1"
    if cache_dir:
        env["NUMBA_CACHE_DIR"] = cache_dir
    return subprocess.Popen([sys.executable, "-c", program, verb, mode, str(bits), str(channels), str(lock)],
                            env=env, stdin=subprocess.DEVNULL, **options)


class Sibling:
    """A child process compiling one verb into the cache (reaped by a thread, so never a zombie)."""

    def __init__(self, process: subprocess.Popen, lock: pathlib.Path):
        self.process, self.lock = process, lock
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


class FirstUse:
    """What this process's verbs are doing, and the siblings it started for them.

    The verbs call :meth:`starting` before their CPU steps; the drivers' cache calls
    :meth:`cache_missed` before it compiles. The verb is a context variable, which the drivers'
    thread pool carries into its threads (cpu._in_parallel): a cache miss sees the verb of the
    call that caused it, never what another thread is doing meanwhile.

    siblings: False in a sibling (and where the environment says so), or to measure without them.
    program: what a sibling runs (a test can make it fail).
    """

    def __init__(self, siblings: bool = True, program: str = CHILD_PROGRAM):
        self.siblings = siblings
        self.program = program
        self._lock = threading.Lock()
        self._verb = contextvars.ContextVar(f"l3codec_verb_{id(self)}", default=None)
        self._started = {}  # (mode name, bits) -> Sibling compiling that decoder, or None if none could start
        self._awaited = set()  # (mode name, bits) whose first decode in this process waited for any sibling
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

    def started(self) -> dict:
        """{(mode name, bits): Sibling or None} of the decoders this process started siblings for."""
        with self._lock:
            return dict(self._started)

    def starting(self, verb: str, mode: str, bits: int, channels: int, cache_path) -> None:
        """Before a verb's CPU steps. Before the first decode of a mode and dtype: wait for a sibling
        compiling that decoder (this process's, or another's: `l3 encode` ends before its sibling
        does), so that it loads from the cache rather than compile twice. cache_path: a callable
        giving the drivers' cache folder (None if there is none), called only when it is needed."""
        self._verb.set((verb, mode, bits, channels))
        if verb != "decode" or not self.siblings:
            return
        with self._lock:
            if (mode, bits) in self._awaited:
                return
            self._awaited.add((mode, bits))
            sibling = self._started.get((mode, bits))
        if sibling is not None:
            sibling.wait()
        elif fcntl is not None and (folder := cache_path()) is not None:
            wait_for_lock(lock_path(folder, "decode", mode, bits))

    def cache_missed(self, folder: str) -> None:
        """The drivers' cache (in folder) missed. For an encode, start a sibling compiling its
        decoder meanwhile, on the other core: a round trip's two compilations then take about as
        long as the longer one. A decode starts none: processes that decode first (loader workers,
        `l3 decode`) rarely encode."""
        self.misses += 1
        self.announce()
        current = self._verb.get()
        if not self.siblings or current is None or current[0] != "encode":
            return
        _, mode, bits, channels = current
        with self._lock:
            if (mode, bits) in self._started or (mode, bits) in self._awaited:
                return
            self._started[(mode, bits)] = self._start_sibling("decode", mode, bits, channels, folder)

    def _start_sibling(self, verb, mode, bits, channels, cache_path) -> Sibling | None:
        """None where a sibling cannot help: no writable cache folder, no Python executable to start."""
        if fcntl is None or not sys.executable or not writable(cache_path):
            return None
        lock = lock_path(cache_path, verb, mode, bits)
        try:
            process = start_child(verb, mode, bits, channels, lock, numba_cache_dir(), self.program,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return None
        return Sibling(process, lock)


coordinator = FirstUse(siblings=not os.environ.get(NO_SIBLINGS_VARIABLE))
