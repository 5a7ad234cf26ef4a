"""The stall analyzer's prediction against a measured run: l3codec.stalls, then bench/pipeline.py's
training loop (a fixed-time step fed by the same Loader) for the same step times.

    python bench/stalls.py ../shared/corpus/hires2048 --step-ms 20 100 --out bench/results

Writes stalls.md and stalls.json to --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import linked_tree, measure  # noqa: E402

from l3codec import stalls  # noqa: E402
from l3codec.converters import convert  # noqa: E402
from l3codec.loader import L3Dataset, Loader  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a folder of PNG files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--mode", choices=("fast", "compact"), default="fast")
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--step-ms", type=float, nargs="+", default=[20.0, 100.0])
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/stalls.py", *(sys.argv[1:] if argv is None else argv)])
    rows = []
    with tempfile.TemporaryDirectory(prefix="l3-stalls-") as temporary:
        linked_tree(args.src, args.repeat, Path(temporary) / "src")
        converted = Path(temporary) / "converted"
        convert("folder", Path(temporary) / "src", converted, mode=args.mode, workers=args.workers, progress=False)
        result = stalls.measure(converted, batch_size=args.batch_size, workers=args.workers, batches=args.batches)
        print(stalls.report(result, []))
        for step_ms in args.step_ms:
            predicted = stalls.predict(result["rates"], args.batch_size, step_ms, result["fits_in_memory"],
                                       handoff_ms=result["handoff_ms"])
            loader = Loader(L3Dataset(converted, fields=("image",), decode="cpu"), args.batch_size, device="cpu",
                            num_workers=args.workers)
            measured = measure("L3 CPU decode", loader, args.batch_size, step_ms / 1e3, 2, args.batches, 0)
            rows.append({"step_ms": step_ms, "predicted": predicted.stall_fraction,
                         "measured": measured["stall_fraction"], "bottleneck": predicted.bottleneck,
                         "predicted_images_per_s": 1e3 * args.batch_size / max(predicted.data_ms_per_batch,
                                                                           step_ms + result["handoff_ms"]),
                         "measured_images_per_s": measured["images_per_s"]})
            print(json.dumps(rows[-1]))
    args.out.mkdir(parents=True, exist_ok=True)
    rates = {name: rate.images_per_s for name, rate in result["rates"].items()}
    (args.out / "stalls.json").write_text(json.dumps({"command": command, "rates": rates, "rows": rows}, indent=1))
    lines = [f"`{command}`", "", stalls.report(result, []), "",
             "| step ms | predicted wait | measured wait | predicted images/s | measured images/s | bottleneck |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['step_ms']:g} | {r['predicted']:.0%} | {r['measured']:.0%} | {r['predicted_images_per_s']:.1f} "
              f"| {r['measured_images_per_s']:.1f} | {r['bottleneck']} |" for r in rows]
    (args.out / "stalls.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
