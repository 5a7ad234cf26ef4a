"""First use of the CPU codec: encode + decode round trips in fresh processes, cache empty then warm.

Usage (from the repository root)::

    python bench/first_use.py [--size 512] [--runs 3] [--mode compact] [--bits 8]
    python bench/first_use.py --quick-start    # the README's main job: cold, warm, after the warm-up

--quick-start runs the README's first command (l3convert on the corpus, inspect, l3 stalls) step
by step, each in the shell as the README gives it, with NUMBA_CACHE_DIR a new empty directory,
then again with that cache filled, then with a new cache filled by `python -m l3codec.warmup`
beforehand, and prints each step's wall time and whether the codec said it compiled.

Each run starts a new Python process with NUMBA_CACHE_DIR pointing at a new empty
directory, and times, inside it, the import, the first encode and the first decode of a
size x size RGB image (uint8, or uint16 with --bits 16); then a second process times the
same with that cache warm. Wall time on a loaded machine says little: CPU time (user +
system) is reported beside it, of the process and (--warmup-decoder) of the warm-up process it
starts to compile the decoder while it compiles the encoder (warmup.start; a verb alone starts
none), and with --steps the CPU seconds of each compiled step of the first round trip (compilation
included). On two idle cores that round trip takes about the longer of the two processes' CPU times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import numpy as np
import l3codec
t1 = time.perf_counter()
from l3codec import cpu, warmup
size, mode, dtype = int(sys.argv[1]), sys.argv[2], np.dtype(sys.argv[3])
if sys.argv[4] == "sibling":
    warmup.start("decode", mode, 8 * dtype.itemsize, 3)
steps = {}


def timed(name, step):
    def run(*args, **options):
        start = time.process_time()
        step(*args, **options)
        steps[name] = steps.get(name, 0) + time.process_time() - start
    return run


for name in ("image_to_planes", "encode_streams", "decode_streams", "planes_to_image"):
    setattr(cpu, name, timed(name, getattr(cpu, name)))
y, x = np.mgrid[:size, :size]
image = np.stack([(x + y) // 4, (2 * x) % 256, y // 2], -1).astype(dtype)
image += np.random.default_rng(0).integers(0, 3, image.shape, dtype=dtype)
data = l3codec.encode(image, mode=mode)
t2 = time.perf_counter()
assert np.array_equal(l3codec.decode(data), image)
t3 = time.perf_counter()
cpu = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"import_s": t1 - t0, "encode_s": t2 - t1, "decode_s": t3 - t2, "round_trip_s": t3 - t0,
                  "steps_cpu_s": steps, "own_cpu_s": cpu[0].ru_utime + cpu[0].ru_stime,
                  "sibling_cpu_s": cpu[1].ru_utime + cpu[1].ru_stime}))
"""


def run_child(cache: Path, size: int, mode: str, dtype: str, sibling: bool) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", CHILD, str(size), mode, dtype, "sibling" if sibling else "alone"], env=env, capture_output=True,
                          text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(done.stdout)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["notice"] = done.stderr.strip()
    return result


def readme_main_job() -> list:
    """The steps of the README's first command (the line that starts with out=$(mktemp -d) &&),
    without the mktemp: each a shell command that uses $out."""
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("out=$(mktemp -d) && "):
            return line.split(" && ")[1:]
    raise SystemExit("README.md has no line starting with out=$(mktemp -d) &&")


def run_main_job(cache: Path, label: str) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(REPO),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory() as out:
        env["out"] = out
        total = 0.0
        for step in readme_main_job():
            start = time.perf_counter()
            done = subprocess.run(["bash", "-c", step], cwd=REPO, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            total += seconds
            compiled = "compiling" in done.stderr
            print(f"  {label}: {seconds:5.1f} s  {'(compiled) ' if compiled else ''}{step.split(' ')[0]} "
                  f"{step.split(' ')[1]}{'' if done.returncode == 0 else f'  FAILED: {done.stderr[-300:]}'}")
        print(f"  {label}: {total:5.1f} s in all")


def quick_start() -> int:
    print(f"the README's main job, step by step (load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}):")
    with tempfile.TemporaryDirectory() as cache:
        run_main_job(Path(cache), "empty cache")
        run_main_job(Path(cache), "warm cache")
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(REPO))
        subprocess.run([sys.executable, "-m", "l3codec.warmup"], env=env, capture_output=True, check=True)
        print(f"  python -m l3codec.warmup: {time.perf_counter() - start:.1f} s")
        run_main_job(Path(cache), "after the warm-up")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--runs", type=int, default=3, help="fresh-cache runs (the best is reported)")
    p.add_argument("--mode", default="compact", choices=("compact", "fast"))
    p.add_argument("--bits", type=int, default=8, choices=(8, 16))
    p.add_argument("--steps", action="store_true", help="CPU seconds per compiled step, first round trip")
    p.add_argument("--warmup-decoder", action="store_true",
                   help="start a warm-up process compiling the decoder before the first encode")
    p.add_argument("--quick-start", action="store_true", help="time the README's main job instead")
    args = p.parse_args(argv)
    if args.quick_start:
        return quick_start()
    dtype = f"uint{args.bits}"
    results = {"empty cache": [], "warm cache": []}
    warm_decoder = args.warmup_decoder
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            for label in ("empty cache", "warm cache"):
                results[label].append(run_child(Path(cache), args.size, args.mode, dtype, warm_decoder))
    print(f"first {args.mode} round trip of a {args.size}x{args.size} {dtype} RGB image, fresh process"
          f"{' with a warm-up process for the decoder' if args.warmup_decoder else ''}, "
          f"best of {args.runs} (load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}):")
    for name, runs in results.items():
        best = min(runs, key=lambda r: r["round_trip_s"])
        print(f"  {name}: round trip {best['round_trip_s']:.1f} s wall (import {best['import_s']:.1f}, "
              f"encode {best['encode_s']:.1f}, decode {best['decode_s']:.1f}), "
              f"{min(r['cpu_s'] for r in runs):.1f} s CPU (this process {min(r['own_cpu_s'] for r in runs):.1f}, "
              f"its warm-up process {min(r['sibling_cpu_s'] for r in runs):.1f}); "
              f"stderr: {best['notice'] or '(nothing)'}")
        if args.steps:
            print("    CPU s per step: " + ", ".join(f"{k} {v:.2f}" for k, v in best["steps_cpu_s"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
