"""Three trainers on one node: fed by one shared producer (l3codec.share) against three
independent loaders, CPU decode.

    python bench/share.py ../shared/corpus/hires2048 --trainers 3 --batches 30 --out bench/results

Each trainer takes --batches batches (batch 4, RandomResizedCrop(512), a --step-ms training
step). Reported: images/s per trainer (its batches over its own wall time) and CPU per
consumed image, machine-wide (busy time from /proc/stat over the images all trainers took),
so run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l3codec.converters import convert  # noqa: E402

COMMON = """
import json, sys, time
from l3codec.loader import Decode, L3Dataset, Loader, RandomResizedCrop
"""

INDEPENDENT = COMMON + textwrap.dedent("""
    root, batches, step, workers, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    loader = Loader(L3Dataset(root), 4, crop=RandomResizedCrop(512), decode=Decode("cpu", device="cpu"),
                    workers=workers)
    if __name__ == "__main__":
        taken, epoch, start = 0, 0, None
        while taken < batches:
            loader.set_epoch(epoch)
            for batch in loader:
                if start is None:
                    start = time.perf_counter()  # from the first batch: start-up is not throughput
                time.sleep(step)
                taken += 1
                if taken == batches:
                    break
            epoch += 1
        json.dump({"batches": taken - 1, "seconds": time.perf_counter() - start}, open(out, "w"))
""")

PRODUCER = COMMON + textwrap.dedent("""
    from l3codec.share import BatchServer
    root, path, workers, trainers, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    if __name__ == "__main__":
        loader = Loader(L3Dataset(root), 4, crop=RandomResizedCrop(512), decode=Decode("cpu", device="cpu"),
                        workers=workers)
        BatchServer(loader, path, slots=4, min_consumers=trainers).run(epochs=epochs)
""")

CONSUMER = textwrap.dedent("""
    import json, sys, time
    from l3codec.share import SharedLoader
    path, batches, step, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    shared = SharedLoader(path, join="epoch")
    taken, start = 0, None
    while taken < batches and not shared.closed:
        for batch in shared:
            if start is None:
                start = time.perf_counter()
            time.sleep(step)
            taken += 1
            if taken == batches:
                break
    json.dump({"batches": taken - 1, "seconds": time.perf_counter() - start}, open(out, "w"))
    shared.close()
""")


def busy_seconds() -> float:
    with open("/proc/stat") as file:
        fields = [int(v) for v in file.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run(commands: list, reports: list) -> dict:
    busy, start = busy_seconds(), time.perf_counter()
    processes = [subprocess.Popen(command) for command in commands]
    for process in processes:
        process.wait(timeout=1800)
    cpu, wall = busy_seconds() - busy, time.perf_counter() - start
    results = [json.load(open(report)) for report in reports]
    images = sum(4 * r["batches"] for r in results)
    return {"images_per_s_per_trainer": [4 * r["batches"] / r["seconds"] for r in results],
            "cpu_ms_per_image": 1e3 * cpu / images, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src")
    parser.add_argument("--trainers", type=int, default=3)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--step-ms", type=float, default=0)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of each loader")
    parser.add_argument("--out", default="/tmp/l3-bench")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="l3-share-"))
    convert("folder", args.src, work / "l3", mode="fast", progress=False)
    from l3codec.dataset import open_dataset

    samples = len(open_dataset(work / "l3", "train"))
    epochs = -(-args.batches * 4 // samples) + 1
    step = args.step_ms / 1e3
    reports = [str(work / f"independent-{n}.json") for n in range(args.trainers)]
    independent = run([[sys.executable, "-c", INDEPENDENT, str(work / "l3"), str(args.batches), str(step),
                        str(args.workers), report] for report in reports], reports)
    path = str(work / "share.sock")
    reports = [str(work / f"shared-{n}.json") for n in range(args.trainers)]
    producer = [sys.executable, "-c", PRODUCER, str(work / "l3"), path, str(args.workers), str(args.trainers),
                str(epochs)]
    consumers = [[sys.executable, "-c", CONSUMER, path, str(args.batches), str(step), report] for report in reports]
    busy, start = busy_seconds(), time.perf_counter()
    server = subprocess.Popen(producer)
    while not os.path.exists(path):
        time.sleep(0.05)
    processes = [subprocess.Popen(command) for command in consumers]
    for process in processes:
        process.wait(timeout=1800)
    cpu = busy_seconds() - busy
    server.terminate()
    server.wait()
    results = [json.load(open(report)) for report in reports]
    images = sum(4 * r["batches"] for r in results)
    shared = {"images_per_s_per_trainer": [4 * r["batches"] / r["seconds"] for r in results],
              "cpu_ms_per_image": 1e3 * cpu / images, "wall_s": time.perf_counter() - start}
    rows = [("independent loaders", independent), ("one shared producer", shared)]
    lines = [f"# {args.trainers} trainers, one producer against independent loaders: `python bench/share.py {args.src} "
             f"--trainers {args.trainers} --batches {args.batches} --step-ms {args.step_ms:g} --workers {args.workers}`",
             "", f"{samples} images, L3 fast, CPU decode, batch 4, RandomResizedCrop(512), {args.workers} workers per "
             f"loader, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. CPU is "
             "machine-wide busy time over the images every trainer took.", "",
             "| feeding | images/s per trainer | CPU ms per consumed image |", "|---|---|---|"]
    lines += [f"| {name} | {', '.join(f'{v:.1f}' for v in r['images_per_s_per_trainer'])} | "
              f"{r['cpu_ms_per_image']:.1f} |" for name, r in rows]
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, "share.md").write_text("\n".join(lines) + "\n")
    Path(args.out, "share.json").write_text(json.dumps(dict(rows), indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
