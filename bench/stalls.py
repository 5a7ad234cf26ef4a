"""The stall analyzer's prediction against a measured run: l3codec.stalls, then bench/pipeline.py's
training loop (a fixed-time step fed by the same Loader, the rest of one epoch after the batches
that carry the workers' start: the main process's first and each worker's first, as the analyzer
leaves them untimed) for the same step times, --runs times each (median and range).

    python bench/stalls.py ../shared/corpus/hires2048 --repeat 20 --step-ms 20 50 100 --out bench/results

Writes stalls.md and stalls.json to --out, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import linked_tree, measure  # noqa: E402

from l3codec import stalls  # noqa: E402
from l3codec.converters import convert  # noqa: E402
from l3codec.loader import Decode, L3Dataset, Loader  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a folder of PNG files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--mode", choices=("fast", "compact"), default="fast")
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, help="batches the analyzer times (default: its own choice)")
    parser.add_argument("--repeats", type=int, default=3, help="the analyzer's repeats of each stage")
    parser.add_argument("--runs", type=int, default=3, help="measured training loops per step time")
    parser.add_argument("--step-ms", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/stalls.py", *(sys.argv[1:] if argv is None else argv)])
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="l3-stalls-") as temporary:
        linked_tree(args.src, args.repeat, Path(temporary) / "src")
        converted = Path(temporary) / "converted"
        convert("folder", Path(temporary) / "src", converted, mode=args.mode, workers=args.workers, progress=False)
        result = stalls.measure(converted, batch_size=args.batch_size, workers=args.workers, batches=args.batches,
                                repeats=args.repeats)
        print(stalls.report(result, []))
        for step_ms in args.step_ms:
            predicted = stalls.predict(result["rates"], args.batch_size, step_ms, result["fits_in_memory"],
                                       handoff_ms=result["handoff_ms"])
            runs = []
            for _ in range(args.runs):
                loader = Loader(L3Dataset(converted, fields=("image",)), args.batch_size,
                                decode=Decode("cpu", device="cpu"), workers=args.workers)
                untimed = args.workers + 1  # as the analyzer: the main process's first batch, each worker's first
                runs.append(measure("L3 CPU decode", loader, args.batch_size, step_ms / 1e3, untimed,
                                    len(loader) - untimed, 0))
                del loader
            waits = [run["stall_fraction"] for run in runs]
            rows.append({"step_ms": step_ms, "predicted": predicted.stall_fraction,
                         "measured": statistics.median(waits), "measured_range": [min(waits), max(waits)],
                         "bottleneck": predicted.bottleneck,
                         "predicted_images_per_s": 1e3 * args.batch_size / max(predicted.data_ms_per_batch,
                                                                           step_ms + result["handoff_ms"]),
                         "measured_images_per_s": statistics.median(run["images_per_s"] for run in runs)})
            print(json.dumps(rows[-1]), flush=True)
    load_after = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    rates = {name: rate.images_per_s for name, rate in result["rates"].items()}
    (args.out / "stalls.json").write_text(json.dumps({"command": command, "rates": rates, "rows": rows,
                                                      "load_before": load_before, "load_after": load_after}, indent=1))
    lines = [f"`{command}`", "", f"{os.cpu_count()} CPUs; load average {load_before[0]:.1f} before, "
             f"{load_after[0]:.1f} after.", "", stalls.report(result, []), "",
             f"Measured: the median (range) of {args.runs} training loops per step time.", "",
             "| step ms | predicted wait | measured wait | predicted images/s | measured images/s | bottleneck |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['step_ms']:g} | {r['predicted']:.0%} | {r['measured']:.0%} ({r['measured_range'][0]:.0%}-"
              f"{r['measured_range'][1]:.0%}) | {r['predicted_images_per_s']:.1f} "
              f"| {r['measured_images_per_s']:.1f} | {r['bottleneck']} |" for r in rows]
    (args.out / "stalls.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
