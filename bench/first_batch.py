"""Time to the first batch in a fresh process: the L3 Loader against a Pillow PNG DataLoader, in one run.

    python bench/first_batch.py ../shared/corpus/photos --runs 3 --out bench/results

Each measurement is a new Python process running a training script as a newcomer writes it
(imports at the top, the loop under `if __name__ == "__main__":`), with the Numba cache warm
(one untimed L3 process fills it first). It times, inside the process:
  imports      torch and the loader's module (Pillow's: torch and PIL),
  open         the dataset (L3Dataset; Pillow's: listing the PNG files),
  first batch  from iter(loader) to the first batch (workers started, first decode),
  3 batches    from iter(loader) to the third batch.
Both loaders: batch 4, --workers workers, a centre crop of --crop pixels, shuffled, uint8 CHW.
Where the L3 time goes is split by variants, each a fresh process too:
  L3, 0 workers        the first batch decoded in the main process alone (the decoders loaded
                       from the Numba cache, then the decode): the decode's share;
  forkserver, no data  a DataLoader over a dataset that returns a constant, started from a
                       forkserver as the L3 workers are: the worker start's share.
The variants run interleaved, --runs times each; the table gives the median and the range, and
the load average before and after. Writes first-batch.md and first-batch.json to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SCRIPT_HEAD = """
import json, sys, time
STARTED = time.perf_counter()


def report(start, opened, made, loader, imported):
    \"\"\"Take three batches from a new iterator; print the phases' times as JSON; the first batch.\"\"\"
    batches = iter(loader)
    first = next(batches)
    first_at = time.perf_counter()
    next(batches), next(batches)
    third_at = time.perf_counter()
    print(json.dumps({"imports": imported - STARTED, "open": opened - start, "loader": made - opened,
                      "first": first_at - made, "three": third_at - made}))
    return first
"""

L3_SCRIPT = SCRIPT_HEAD + """
import torch
from l3codec.loader import CenterCrop, Decode, L3Dataset, Loader
IMPORTED = time.perf_counter()


def main():
    root, workers, batch_size, crop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    start = time.perf_counter()
    dataset = L3Dataset(root, fields=("image",))
    opened = time.perf_counter()
    loader = Loader(dataset, batch_size, crop=CenterCrop(crop), decode=Decode("cpu", device="cpu"),
                    workers=workers, seed=0)
    made = time.perf_counter()
    first = report(start, opened, made, loader, IMPORTED)
    assert first["image"].shape == (batch_size, 3, crop, crop)


if __name__ == "__main__":
    main()
"""

PILLOW_SCRIPT = SCRIPT_HEAD + """
import os
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
IMPORTED = time.perf_counter()


class PngFiles(Dataset):
    def __init__(self, root, crop):
        self.paths = sorted(os.path.join(root, name) for name in os.listdir(root) if name.endswith(".png"))
        self.crop = crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as image:
            image = image.convert("RGB")
            left, top = (image.width - self.crop) // 2, (image.height - self.crop) // 2
            pixels = np.asarray(image.crop((left, top, left + self.crop, top + self.crop)))
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1)


def main():
    root, workers, batch_size, crop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    start = time.perf_counter()
    dataset = PngFiles(root, crop)
    opened = time.perf_counter()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(0))
    made = time.perf_counter()
    first = report(start, opened, made, loader, IMPORTED)
    assert first.shape == (batch_size, 3, crop, crop)


if __name__ == "__main__":
    main()
"""

WORKERS_ONLY_SCRIPT = SCRIPT_HEAD + """
import torch
from torch.utils.data import DataLoader, Dataset
import l3codec.loader
IMPORTED = time.perf_counter()


class Constant(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.zeros(3)


def main():
    workers, batch_size = int(sys.argv[2]), int(sys.argv[3])
    start = time.perf_counter()
    loader = DataLoader(Constant(), batch_size=batch_size, num_workers=workers, multiprocessing_context="forkserver")
    made = time.perf_counter()
    report(start, start, made, loader, IMPORTED)  # no dataset to open


if __name__ == "__main__":
    main()
"""

VARIANTS = {  # name: (script, workers: None for --workers)
    "Pillow PNG DataLoader": (PILLOW_SCRIPT, None),
    "L3 Loader": (L3_SCRIPT, None),
    "L3 Loader, 0 workers": (L3_SCRIPT, 0),
    "forkserver DataLoader, no data": (WORKERS_ONLY_SCRIPT, None),
}
COLUMNS = ("imports", "open", "loader", "first", "three")


def run_script(path: Path, data: Path, workers: int, batch_size: int, crop: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(path), str(data), str(workers), str(batch_size), str(crop)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=path.parent, check=False)
    if done.returncode:
        raise SystemExit(f"{path.name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    from pipeline import linked_tree

    from l3codec.converters import convert

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a folder of PNG files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--crop", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2, help="times the PNG folder is linked into the set")
    parser.add_argument("--label", default="", help="a heading for this run (e.g. the commit)")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/first_batch.py", *(sys.argv[1:] if argv is None else argv)])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="l3-first-batch-") as temporary:
        temporary = Path(temporary)
        pngs = temporary / "png"
        count = len(linked_tree(args.src, args.repeat, pngs))
        converted = temporary / "l3"
        convert("folder", pngs, converted, workers=0, progress=False)
        scripts = {}
        for name, (text, _) in VARIANTS.items():
            scripts[name] = temporary / f"train_{len(scripts)}.py"
            scripts[name].write_text(text)
        run_script(scripts["L3 Loader"], converted, args.workers, args.batch_size, args.crop)  # the Numba cache
        results = {name: [] for name in VARIANTS}
        for _ in range(args.runs):
            for name, (_, workers) in VARIANTS.items():
                data = pngs if name.startswith("Pillow") else converted
                results[name].append(run_script(scripts[name], data, args.workers if workers is None else workers,
                                                args.batch_size, args.crop))
                print(name, json.dumps(results[name][-1]), flush=True)
    load_after = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"command": command, "label": args.label, "images": count, "load_before": load_before,
               "load_after": load_after, "cpus": os.cpu_count(), "results": results}
    (args.out / "first-batch.json").write_text(json.dumps(payload, indent=1))

    def cell(runs, column):
        values = [run[column] for run in runs]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    lines = [f"`{command}`", "", f"{args.label}" if args.label else "",
             f"{count} PNG images ({args.src.name}, linked {args.repeat}x), converted to L3 (compact); batch "
             f"{args.batch_size}, {args.workers} workers, centre crop {args.crop}; {args.runs} fresh processes per "
             f"row, seconds, median (range). {os.cpu_count()} CPUs; load average {load_before[0]:.1f} before, "
             f"{load_after[0]:.1f} after.", "",
             "| loader | imports | open | Loader() | first batch | 3 batches |", "|---|---|---|---|---|---|"]
    lines += [f"| {name} | " + " | ".join(cell(runs, column) for column in COLUMNS) + " |"
              for name, runs in results.items()]
    (args.out / "first-batch.md").write_text("\n".join(line for line in lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
