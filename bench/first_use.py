"""First use of the CPU codec: encode + decode round trips in fresh processes, cache empty then warm.

Usage (from the repository root)::

    python bench/first_use.py [--size 512] [--runs 3] [--mode compact]

Each run starts a new Python process with NUMBA_CACHE_DIR pointing at a new empty
directory, and times, inside it, the import, the first encode and the first decode of a
size x size RGB uint8 image; then a second process times the same with that cache warm.
Wall time on a loaded machine says little: CPU time (user + system) of the process is
reported beside it.
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
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import l3codec
t1 = time.perf_counter()
size, mode = int(sys.argv[1]), sys.argv[2]
y, x = np.mgrid[:size, :size]
image = np.stack([(x + y) // 4, (2 * x) % 256, y // 2], -1).astype(np.uint8)
image += np.random.default_rng(0).integers(0, 3, image.shape, dtype=np.uint8)
data = l3codec.encode(image, mode=mode)
t2 = time.perf_counter()
assert np.array_equal(l3codec.decode(data), image)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "encode_s": t2 - t1, "decode_s": t3 - t2, "round_trip_s": t3 - t0}))
"""


def run_child(cache: Path, size: int, mode: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", CHILD, str(size), mode], env=env, capture_output=True,
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
    args = p.parse_args(argv)
    results = {"empty cache": [], "warm cache": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            results["empty cache"].append(run_child(Path(cache), args.size, args.mode))
            results["warm cache"].append(run_child(Path(cache), args.size, args.mode))
    print(f"first {args.mode} round trip of a {args.size}x{args.size} RGB image, fresh process, "
          f"best of {args.runs} (load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}):")
    for name, runs in results.items():
        best = min(runs, key=lambda r: r["round_trip_s"])
        print(f"  {name}: round trip {best['round_trip_s']:.1f} s wall (import {best['import_s']:.1f}, "
              f"encode {best['encode_s']:.1f}, decode {best['decode_s']:.1f}), "
              f"{min(r['cpu_s'] for r in runs):.1f} s CPU; stderr: {best['notice'] or '(nothing)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
