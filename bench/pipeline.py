"""Data-stall measurement (in the spirit of DS-Analyzer): how long a training step waits for its input.

    python bench/pipeline.py ../shared/corpus/hires2048 --out bench/results --step-ms 100 --workers 2

A training step of fixed compute time (a sleep: the step's work happens on an accelerator and
takes no host CPU) is fed by
  (a) PNG files decoded by Pillow in DataLoader workers (torch's default collate),
  (b) the L3 loader with CPU decode (Numba, one thread per worker),
  (c) the L3 loader with GPU decode where CUDA exists; without it, its CPU side alone:
      workers read and validate the bytes and pack them with the launch tables into the
      staging buffers, the main process runs the batch logic, and the decode step is a stub
      (no device copy, no pixels). It is labelled as such in the results.
The source folder of PNGs is linked `--repeat` times under new names (so an epoch is long enough
to measure) and converted with l3codec.converters.convert into a temporary directory, unless
--converted names a dataset converted from the same tree.

Per pipeline, after --warmup batches: images/s; the fraction of wall time the loop waits for
data; CPU seconds per image over all processes (psutil, 10 ms ticks: the main process and its live worker
processes, over the measured batches only) and of the main process alone; bytes read per image.
Writes pipeline.md, pipeline.json and pipeline.png to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from l3codec.converters import convert  # noqa: E402
from l3codec.loader import Decode, L3Dataset, Loader  # noqa: E402


class PngFiles(Dataset):
    """The baseline: PNG files decoded by Pillow into CHW uint8 tensors."""

    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        with Image.open(self.paths[index]) as image:
            array = np.array(image.convert("RGB"))  # decoded, then one copy into a writable array
        return torch.from_numpy(array).permute(2, 0, 1)


def _stub_decode(staged, buffer, out, status, stream):
    """No decode: measures the GPU path's CPU side alone."""


def _cpu_seconds(processes) -> dict:
    """{pid: user + system CPU seconds} of the processes still alive."""
    seconds = {}
    for process in processes:
        try:
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return seconds


def _main_cpu_seconds() -> float:
    """This process's CPU seconds, all threads, at microsecond resolution (psutil's are 10 ms ticks)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _spent(before: dict, after: dict) -> float:
    """CPU seconds spent between two snapshots by the processes alive at both."""
    return sum(after[pid] - before[pid] for pid in before if pid in after)


def measure(name, batches, batch_size, step_seconds, warmup, count, bytes_per_image) -> dict:
    """Run `count` training steps fed by the iterator `batches` after `warmup` ones."""
    me = psutil.Process()
    iterator = iter(batches)
    for _ in range(warmup):
        next(iterator)
        time.sleep(step_seconds)
    processes = [me, *me.children(recursive=True)]  # the workers are alive from here to the end
    cpu_before, main_before = _cpu_seconds(processes), _main_cpu_seconds()
    waited, images = 0.0, 0
    start = time.perf_counter()
    for _ in range(count):
        before = time.perf_counter()
        batch = next(iterator)
        waited += time.perf_counter() - before
        images += len(batch["key"]) if isinstance(batch, dict) else len(batch)
        time.sleep(step_seconds)  # the training step
    wall = time.perf_counter() - start
    cpu_after, cpu_main = _cpu_seconds(processes), _main_cpu_seconds() - main_before
    cpu_all = _spent(cpu_before, cpu_after)
    del iterator
    return {
        "pipeline": name, "images": images, "images_per_s": images / wall, "stall_fraction": waited / wall,
        "cpu_ms_per_image": 1e3 * cpu_all / images, "main_cpu_ms_per_image": 1e3 * cpu_main / images,
        "bytes_per_image": bytes_per_image, "step_ms": 1e3 * step_seconds, "batch_size": batch_size,
    }


def linked_tree(src: Path, repeat: int, directory: Path) -> list:
    """src's PNG files linked `repeat` times under distinct names (a folder without classes)."""
    files = sorted(p for p in src.iterdir() if p.suffix.lower() == ".png")
    if not files:
        raise SystemExit(f"no PNG files in {src}")
    directory.mkdir(parents=True, exist_ok=True)
    links = []
    for r in range(repeat):
        for path in files:
            link = directory / f"r{r:03d}_{path.name}"
            if not link.exists():
                link.symlink_to(path.resolve())
            links.append(link)
    return links


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a folder of PNG files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--converted", type=Path, help="an L3 dataset converted from the linked tree")
    parser.add_argument("--mode", choices=("fast", "compact"), default="fast")
    parser.add_argument("--repeat", type=int, default=8, help="links per source file")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-ms", type=float, nargs="+", default=[0.0, 100.0])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--pipelines", nargs="+", default=["png", "l3-cpu", "l3-gpu"])
    args = parser.parse_args(argv)
    args.command = shlex.join(["python", "bench/pipeline.py", *(sys.argv[1:] if argv is None else argv)])

    with tempfile.TemporaryDirectory(prefix="l3-pipeline-") as temporary:
        links = linked_tree(args.src, args.repeat, Path(temporary) / "src")
        converted = args.converted
        if converted is None:
            converted = Path(temporary) / "converted"
            started = time.perf_counter()
            convert("folder", Path(temporary) / "src", converted, mode=args.mode, workers=args.workers,
                    progress=False)
            print(f"converted {len(links)} images ({args.mode}) in {time.perf_counter() - started:.1f} s")
        needed = (args.warmup + args.batches) * args.batch_size
        if len(links) < needed:
            raise SystemExit(f"{len(links)} images; {needed} are needed: raise --repeat")
        png_bytes = float(np.mean([p.stat().st_size for p in links]))
        cuda = torch.cuda.is_available()
        rows = []
        for step_ms in args.step_ms:
            step = step_ms / 1e3
            for name in args.pipelines:
                if name == "png":
                    batches = DataLoader(PngFiles(links), batch_size=args.batch_size, num_workers=args.workers,
                                         shuffle=True, persistent_workers=False)
                    rows.append(measure("PNG + Pillow", batches, args.batch_size, step, args.warmup, args.batches,
                                        png_bytes))
                    continue
                decode = "cpu" if name == "l3-cpu" else "gpu"
                dataset = L3Dataset(converted, fields=("image",))
                l3_bytes = float(dataset.reader.index["image_size"].mean())
                if decode == "cpu":
                    loader, label = Loader(dataset, args.batch_size, decode=Decode("cpu", device="cpu"),
                                           workers=args.workers), "L3 CPU decode"
                elif cuda:
                    loader, label = Loader(dataset, args.batch_size, decode=Decode("gpu", device="cuda"),
                                           workers=args.workers), "L3 GPU decode"
                else:
                    stubbed = Decode("gpu", device="cpu", step=_stub_decode)
                    loader = Loader(dataset, args.batch_size, decode=stubbed, workers=args.workers)
                    label = "L3 GPU path, CPU side only (no GPU: decode stubbed, no device copy)"
                rows.append(measure(label, loader, args.batch_size, step, args.warmup, args.batches, l3_bytes))
                print(json.dumps(rows[-1]))
            if args.pipelines and args.pipelines[0] == "png":
                print(json.dumps(rows[-len(args.pipelines)]))
    report(rows, args)


def report(rows, args) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Data-stall benchmark: `{args.command}` ({os.cpu_count()} CPUs, CUDA: {torch.cuda.is_available()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "| step ms | pipeline | images/s | waiting for data | CPU ms/image (all processes) | main-process CPU ms/image "
        "| bytes read/image |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['step_ms']:.0f} | {row['pipeline']} | {row['images_per_s']:.1f} | {row['stall_fraction']:.0%} | "
            f"{row['cpu_ms_per_image']:.2f} | {row['main_cpu_ms_per_image']:.3f} | {row['bytes_per_image'] / 1e6:.2f} MB |"
        )
    (args.out / "pipeline.md").write_text("\n".join(lines) + "\n")
    (args.out / "pipeline.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted({row["step_ms"] for row in rows})
    names = list(dict.fromkeys(row["pipeline"] for row in rows))
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(len(names), 1)
    for n, name in enumerate(names):
        for axis, key in zip(axes, ("images_per_s", "stall_fraction")):
            values = [next((r[key] for r in rows if r["pipeline"] == name and r["step_ms"] == s), 0) for s in steps]
            axis.bar(np.arange(len(steps)) + n * width, values, width, label=name[:40])
    for axis, title in zip(axes, ("images/s", "fraction of time waiting for data")):
        axis.set_xticks(np.arange(len(steps)) + width * (len(names) - 1) / 2, [f"step {s:.0f} ms" for s in steps])
        axis.set_title(title)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.out / "pipeline.png", dpi=100)


if __name__ == "__main__":
    main()
