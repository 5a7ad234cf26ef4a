"""One executor interface, concurrent.futures style (submit, as_completed, shutdown), three engines.

The conversion pipeline submits whole-shard tasks and never knows which engine runs them:
- Inline: in this process (workers=0 or 1), what tests and notebooks use for tiny datasets;
- a local process pool (workers=N, the default: all cores), one Numba thread per process;
- a Dask distributed cluster (scheduler="tcp://host:8786"); DST must be on a filesystem its workers share.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time

from l3codec.lifeline import watch_owner

_progress_queue = None  # set in each pool process: where per-image progress goes
SCHEDULER_CONNECT_TIMEOUT_S = 10.0


class ExecutorError(RuntimeError):
    """The executor cannot start (no scheduler at the address, a missing extra)."""


def progress_sink():
    """The per-image progress queue of this process (None where progress is reported per shard)."""
    return _progress_queue


def _init_pool_process(queue, coordinator: int, warm: tuple = (), notice=None) -> None:
    global _progress_queue
    _progress_queue = queue
    if notice is not None:  # one first-use notice for the whole pool
        from l3codec import first_use

        # through the coordinator's progress bar, which would draw over it on stderr
        first_use.coordinator.share_notice(notice, write=lambda text: queue.put(("notice", text)))
    # the pool's processes are children of the forkserver, not of the coordinator: they watch it
    # themselves, so that a coordinator killed outright (SIGKILL, OOM) leaves no process behind
    watch_owner(coordinator, "coordinator-watch")
    # Ctrl-C reaches the whole process group: the coordinator handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _one_numba_thread()
    _compile_ahead(warm)


def _one_numba_thread() -> None:
    """One Numba thread in this worker, so N workers use N cores and do not oversubscribe them. Set
    here, in the worker before its first task, never in the coordinator or at an import: Numba reads
    NUMBA_NUM_THREADS again at each compile, and one changed in a process whose Numba threads have
    started fails that compile ('Cannot set NUMBA_NUM_THREADS ... once the threads have been launched')."""
    if "numba" in sys.modules:
        # the forkserver was started by another of its users (the Loader) and imported numba with
        # its own thread count: NUMBA_NUM_THREADS changed now fails the next compile (RuntimeError)
        import numba

        _numba_start_lock_without_semaphore()
        numba.set_num_threads(1)
        return
    os.environ["NUMBA_NUM_THREADS"] = "1"  # before numba is imported: the thread count it starts with
    # GNU OpenMP (Numba's usual layer here) aborts a forked child; the workqueue layer survives fork, and
    # one thread per process never needs the others' thread safety
    os.environ["NUMBA_THREADING_LAYER"] = "workqueue"
    _numba_start_lock_without_semaphore()


def _numba_start_lock_without_semaphore() -> None:
    """Numba guards the start of its threading layer with a multiprocessing RLock where the start
    method contains "fork" (forkserver does): a named semaphore, registered with the coordinator's
    resource tracker. A worker stopped by terminate() (Ctrl-C, SIGTERM) never unlinks it, and the
    tracker then warns of "leaked semaphore objects" after l3convert's one-line message. Made in
    this process, after the fork, it guards nothing another process shares: a thread lock does as much."""
    from numba.np.ufunc import parallel

    if getattr(parallel, "_backend_init_process_lock", False) is None:  # not made yet (the name is Numba's)
        parallel._backend_init_process_lock = threading.RLock()


def _compile_ahead(warm: tuple) -> None:
    """Compile (or load) what the tasks will run, each function in one worker at a time: a
    worker takes the list from its own starting point, so two workers compile two different
    functions side by side, then load each other's from the cache instead of compiling it too.
    What a worker compiled goes to the progress queue as ("compiled", (verb, mode, bits, channels),
    seconds): on an empty cache that is all that happens for the first minute or more."""
    from l3codec import first_use, warmup

    if not warm:
        return
    start = os.getpid() % len(warm)
    for kind in warm[start:] + warm[:start]:
        misses, began = first_use.coordinator.misses, time.perf_counter()
        warmup.exercise_once(*kind)
        if _progress_queue is not None and first_use.coordinator.misses > misses:
            _progress_queue.put(("compiled", kind, time.perf_counter() - began))


class InlineExecutor:
    """Runs each task at submit time in this process; results come back as finished futures."""

    progress_queue = None
    parallel = False

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(error, KeyboardInterrupt):
                raise
            future.set_exception(error)
        return future

    def as_completed(self, futures):
        return iter(list(futures))

    def shutdown(self, cancel: bool = False) -> None:
        pass


class PoolExecutor:
    """A local process pool. Workers fork from a forkserver (not from the coordinator, which runs threads)
    that has imported the codec once (pool_warmup), so each starts with it, then sets its own Numba
    thread count (_one_numba_thread)."""

    parallel = True

    def __init__(self, workers: int, warm: tuple = ()):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([f"{__package__}.pool_warmup"])
        _start_forkserver()
        self.progress_queue = context.Queue()
        self.workers = workers
        self._pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init_pool_process,
            initargs=(self.progress_queue, os.getpid(), tuple(warm), context.Value("b", 0)),
        )

    def submit(self, fn, /, *args, **kwargs):
        with _stop_signals_held():  # the pool may be starting a worker
            return self._pool.submit(fn, *args, **kwargs)

    def as_completed(self, futures):
        return concurrent.futures.as_completed(futures)

    def shutdown(self, cancel: bool = False) -> None:
        if cancel:  # interrupted or failed: stop the shards in flight too (their temporary files stay behind)
            for process in list((self._pool._processes or {}).values()):
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=cancel)


@contextlib.contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM wait for the end of the block, then arrive as they would have. A pool's submit
    may start a worker: one stopped after the forkserver forked it and before the pool recorded it
    is a worker shutdown cannot stop, which then fails, with a traceback, on the queues shutdown removed."""
    if threading.current_thread() is not threading.main_thread():  # only it can set handlers
        yield
        return
    caught = []
    previous = {signum: signal.signal(signum, lambda number, frame: caught.append(number))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        try:  # nested: a signal handled between the two restores cannot skip the second
            signal.signal(signal.SIGINT, _handler(previous[signal.SIGINT]))
        finally:
            signal.signal(signal.SIGTERM, _handler(previous[signal.SIGTERM]))
        if caught:  # a SIGTERM held with a SIGINT is the one delivered: the run was ended from outside
            signal.raise_signal(signal.SIGTERM if signal.SIGTERM in caught else signal.SIGINT)


def _handler(previous):
    return signal.SIG_DFL if previous is None else previous


def _start_forkserver() -> None:
    """Start the forkserver without the current directory on its path. It runs `python -c`, whose
    path starts with the current directory (CPython's forkserver ignores the coordinator's path):
    run beside a checkout named l3codec, with l3codec installed editable, that checkout's root
    would be imported as a namespace package l3codec without the codec, and every worker would fail.
    PYTHONSAFEPATH (Python 3.11+) leaves the current directory out.
    It also starts ignoring SIGINT, and so does every worker it forks (a Loader's too, where this
    process starts one later): Ctrl-C reaches the whole process group, and only the coordinator
    handles it, so that none of them prints a traceback while importing the codec. SIG_IGN survives
    exec, and Python then keeps it; a Ctrl-C in the milliseconds the forkserver takes to start is
    dropped."""
    from multiprocessing import forkserver

    previous = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    in_main_thread = threading.current_thread() is threading.main_thread()  # only it can set handlers
    previous_sigint = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    try:
        forkserver.ensure_running()
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous_sigint is None else previous_sigint)
        if previous is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = previous


class DaskExecutor:
    """Tasks on a Dask distributed cluster, through its own futures (which follow the same protocol)."""

    progress_queue = None
    parallel = True

    def __init__(self, address, connect_timeout: float | None = None):
        connect_timeout = SCHEDULER_CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        try:
            from distributed import Client
        except ImportError:
            raise ExecutorError("--scheduler needs Dask distributed: pip install 'l3codec[convert]'") from None
        try:
            self._client = Client(address, set_as_default=False, timeout=connect_timeout)
        except (OSError, TimeoutError, ValueError) as error:
            raise ExecutorError(f"no Dask scheduler answered at {address} within {connect_timeout:g} s "
                                f"({type(error).__name__})") from None
        self.workers = max(1, len(self._client.scheduler_info().get("workers", {})))

    def submit(self, fn, /, *args, **kwargs):
        return self._client.submit(fn, *args, pure=False, **kwargs)

    def as_completed(self, futures):
        from distributed import as_completed

        with self._client.as_current():  # as_completed finds its client as the current one
            yield from as_completed(list(futures))

    def shutdown(self, cancel: bool = False) -> None:
        self._client.close()


def make_executor(workers: int | None, scheduler, warm: tuple = ()):
    """Inline for workers 0/1 without a scheduler, Dask with one, else a pool of workers (default: all cores)
    that first compile `warm`: (verb, mode, bits, channels) of l3codec.warmup.exercise."""
    if scheduler is not None:
        return DaskExecutor(scheduler)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if workers <= 1 and workers >= 0:
        return InlineExecutor()
    if workers < 0:
        raise ValueError(f"workers must be >= 0, not {workers}")
    return PoolExecutor(workers, warm)
