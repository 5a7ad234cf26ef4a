"""Filling the CPU codec's compile cache ahead of use, in other processes: the one place where
compiling is started on purpose (a verb compiles only what it uses, in its own process: first_use.py).

``python -m l3codec.warmup`` fills the cache for the common types (an optional install step), one
process per verb and type, in parallel. :func:`start` starts one such process from Python (compile a
decoder on the other core while this process compiles its encoder, say); a first call of that verb
and type in any process then waits for it and loads from the cache. :func:`exercise_once` lets a
pool's workers compile each function once between them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading

import numpy as np

from . import first_use
from . import format as fmt
from .first_use import fcntl, lock_path, numba_cache_dir, start_child, writable

VERBS = ("encode", "decode")


def exercise(verb: str, mode: str, bits: int, channels: int) -> None:
    """Run verb once through the public API on a tiny image of that mode, dtype and channel count,
    so that it compiles (or loads from the cache) what a user's call of that type would."""
    from . import codec

    dtype = np.dtype(f"uint{bits}")
    if verb == "encode":
        codec.encode(np.zeros((8, fmt.MIN_TILE_WIDTH, channels), dtype), mode=mode)
        if channels >= 3:  # the transform's sample, which so small an image skips (encoder_policy.chosen_transform)
            from . import cpu

            cpu.transform_residual_counts(fmt.readonly(np.zeros((2, 2, channels), dtype)), [1], bits, fmt.MODES[mode])
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
    # a crop (one plane too goes through the planes), and into a view of a larger buffer (not
    # contiguous), as the loader's batches are
    codec.decode(data, region=(1, 1, 6, fmt.MIN_TILE_WIDTH - 2))
    wider = np.empty((8, fmt.MIN_TILE_WIDTH + 1, channels), dtype)[:, :fmt.MIN_TILE_WIDTH]
    codec.decode(data, out=wider if channels > 1 else wider[:, :, 0])


def exercise_once(verb: str, mode: str, bits: int, channels: int) -> None:
    """exercise() holding the cache's lock for (verb, mode, bits): of several processes starting
    at once (a converter's workers), one compiles and the others wait, then load from the cache."""
    from . import cpu

    folder = cpu.cache_path()
    if fcntl is None or folder is None or not writable(folder):
        exercise(verb, mode, bits, channels)
        return
    # not the warm-up's lock: the verb's own first use may wait on that one (first_use.py), and a second
    # open file of this process would never get it while this one held it
    lock = lock_path(folder, verb, mode, bits).with_suffix(".workers.lock")
    with open(lock, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        exercise(verb, mode, bits, channels)


def child_main(argv: list[str]) -> int:
    """A child process: VERB MODE BITS CHANNELS LOCK. Exits at once if another process holds the lock."""
    verb, mode, bits, channels, lock = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4]
    with open(lock, "a") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another process is compiling it; whoever waits, waits on the lock
        first_use.coordinator.holding(verb, mode, bits)
        exercise(verb, mode, bits, channels)
    return 0


def start(verb: str, mode: str, bits: int, channels: int = 3, **options) -> subprocess.Popen | None:
    """Compile verb's drivers for images of mode, bits and channels into the cache in a child process,
    beside whatever this process does; this process's first call of that verb and type waits for it,
    then loads. None where no child can help: nothing compiles (NUMBA_DISABLE_JIT), no writable cache
    folder, no locks (not POSIX), no Python executable. options go to subprocess.Popen (stdout=...)."""
    import numba

    from . import cpu

    folder = cpu.cache_path()
    if numba.config.DISABLE_JIT or fcntl is None or not sys.executable or not writable(folder):
        return None
    options.setdefault("stdout", subprocess.DEVNULL)
    options.setdefault("stderr", subprocess.DEVNULL)
    try:
        lock = lock_path(folder, verb, mode, bits)
        process = start_child(verb, mode, bits, channels, lock, numba_cache_dir(), **options)
    except OSError:
        return None
    threading.Thread(target=process.wait, name="l3codec-warmup-reaper", daemon=True).start()  # never a zombie
    first_use.coordinator.warming(verb, mode, bits, process)
    return process


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
    if not writable(cache_path):
        print(f"l3codec.warmup: cannot write the cache folder {cache_path}", file=sys.stderr)
        return 1
    jobs = [(verb, mode, bits) for mode in args.mode for bits in args.bits for verb in VERBS]
    running, failed = [], 0
    for verb, mode, bits in jobs:
        while len(running) >= (os.cpu_count() or 1):
            failed += running.pop(0).wait() != 0
        print(f"compiling {verb} {mode} uint{bits}", file=sys.stderr, flush=True)
        running.append(start_child(verb, mode, bits, args.channels, lock_path(cache_path, verb, mode, bits),
                                   numba_cache_dir()))
    failed += sum(process.wait() != 0 for process in running)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
