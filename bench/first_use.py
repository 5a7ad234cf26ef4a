"""First use of the CPU codec: encode + decode round trips in fresh processes, cache empty then warm.

Usage (from the repository root)::

    python bench/first_use.py [--size 512] [--runs 3] [--mode compact] [--bits 8]

Each run starts a new Python process with NUMBA_CACHE_DIR pointing at a new empty
directory, and times, inside it, the import, the first encode and the first decode of a
size x size RGB image (uint8, or uint16 with --bits 16); then a second process times the
same with that cache warm. Wall time on a loaded machine says little: CPU time (user +
system) is reported beside it, of the process and of the sibling process that compiles the
decoder while the process compiles the encoder (first_use.py), and with --steps the CPU seconds
of each compiled step of the first round trip (compilation included). On two idle cores the
round trip takes about the longer of the two processes' CPU times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import numpy as np
import l3codec
t1 = time.perf_counter()
from l3codec import cpu, first_use
size, mode, dtype = int(sys.argv[1]), sys.argv[2], np.dtype(sys.argv[3])
first_use.coordinator.siblings = sys.argv[4] == "sibling"
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--runs", type=int, default=3, help="fresh-cache runs (the best is reported)")
    p.add_argument("--mode", default="compact", choices=("compact", "fast"))
    p.add_argument("--bits", type=int, default=8, choices=(8, 16))
    p.add_argument("--steps", action="store_true", help="CPU seconds per compiled step, first round trip")
    p.add_argument("--no-sibling", action="store_true",
                   help="compile the decoder in the process too, as before the sibling (for comparison)")
    args = p.parse_args(argv)
    dtype = f"uint{args.bits}"
    results = {"empty cache": [], "warm cache": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            results["empty cache"].append(run_child(Path(cache), args.size, args.mode, dtype, not args.no_sibling))
            results["warm cache"].append(run_child(Path(cache), args.size, args.mode, dtype, not args.no_sibling))
    print(f"first {args.mode} round trip of a {args.size}x{args.size} {dtype} RGB image, fresh process"
          f"{' without a sibling' if args.no_sibling else ''}, "
          f"best of {args.runs} (load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}):")
    for name, runs in results.items():
        best = min(runs, key=lambda r: r["round_trip_s"])
        print(f"  {name}: round trip {best['round_trip_s']:.1f} s wall (import {best['import_s']:.1f}, "
              f"encode {best['encode_s']:.1f}, decode {best['decode_s']:.1f}), "
              f"{min(r['cpu_s'] for r in runs):.1f} s CPU (this process {min(r['own_cpu_s'] for r in runs):.1f}, "
              f"its sibling {min(r['sibling_cpu_s'] for r in runs):.1f}); stderr: {best['notice'] or '(nothing)'}")
        if args.steps:
            print("    CPU s per step: " + ", ".join(f"{k} {v:.2f}" for k, v in best["steps_cpu_s"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
