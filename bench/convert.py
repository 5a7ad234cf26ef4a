"""l3convert benchmark: throughput, --verify cost, index open time, sizes and container overhead.

    python bench/convert.py --corpus ../shared/corpus --synthetic 3000 --out bench/results

Throughput: images/s and source MB/s for 1 worker (in process, one Numba thread) and for all cores
(a process pool, one Numba thread per process), each with and without --verify, on the corpus (an
ImageFolder tree) and on a generated ImageNet-like tree of JPEGs. Wall time is the conversion's own,
from planning to the manifest (pool start included), after warm-up runs have loaded Numba's compiled
code here and in the pool's forkserver. Shard sizes are chosen per source for --shards-per-worker
shards per worker, since a worker converts whole shards.
Sizes: per layout (folder = the corpus, cityscapes = hires2048 + labels arranged as Cityscapes,
imagenet = the synthetic tree) and mode, with the default 256MB shards, L3 bytes against source bytes,
and the container's overhead: (shards + .idx + index.npy + manifest - L3 member bytes) / L3 member bytes.
Index: opening a synthetic 1.28M-sample ImageNet index in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from l3codec import dataset
from l3codec.converters import convert
from l3codec.converters.pipeline import LOSSY_EXPANSION, parse_size
from l3codec.converters.pixels import LOSSY_SUFFIXES

WNIDS = [f"n{1440764 + 1000 * i:08d}" for i in range(10)]


def photo_like(rng, height, width) -> np.ndarray:
    """Smooth gradients, blobs and mild noise: compresses like a photograph, not like noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.zeros((height, width, 3), np.float32)
    for channel in range(3):
        fy, fx, phase = rng.uniform(0.002, 0.03, 2).tolist() + [rng.uniform(0, 6.3)]
        image[:, :, channel] = 128 + 90 * np.sin(fy * y + fx * x + phase)
    for _ in range(6):
        cy, cx, radius = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(10, min(height, width) / 3)
        mask = (y - cy) ** 2 + (x - cx) ** 2 < radius ** 2
        image[mask] = image[mask] * 0.5 + rng.uniform(0, 255, 3)
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_imagenet(root: str, count: int, seed: int = 0) -> None:
    """train/{wnid}/*.JPEG (90%) and a flat val/ with LOC_val_solution.csv (10%), ImageNet-like sizes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    sizes = [(375, 500), (333, 500), (500, 375), (500, 500), (480, 640)]
    val_count = max(1, count // 10)
    lines = ["ImageId,PredictionString"]
    for n in range(count):
        height, width = sizes[n % len(sizes)]
        wnid = WNIDS[n % len(WNIDS)]
        if n < count - val_count:
            folder, name = os.path.join(root, "train", wnid), f"{wnid}_{n}"
        else:
            folder, name = os.path.join(root, "val"), f"ILSVRC2012_val_{n:08d}"
            lines.append(f"{name},{wnid} 0 0 1 1")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(photo_like(rng, height, width)).save(os.path.join(folder, f"{name}.JPEG"), quality=90)
    with open(os.path.join(root, "LOC_val_solution.csv"), "w") as file:
        file.write("\n".join(lines) + "\n")


def make_cityscapes(root: str, corpus: str) -> bool:
    """corpus hires2048 + labels arranged as leftImg8bit/gtFine (symlinks); False if the corpus lacks them."""
    labels = os.path.join(corpus, "labels")
    frames = os.path.join(corpus, "hires2048")
    if not (os.path.isdir(labels) and os.path.isdir(frames)):
        return False
    for name in sorted(os.listdir(frames)):
        stem = os.path.splitext(name)[0]
        if not os.path.exists(os.path.join(labels, f"{stem}_labelIds.png")):
            continue
        key = f"mate_{stem.replace('_', '')}_000019"
        left = os.path.join(root, "leftImg8bit", "train", "mate")
        fine = os.path.join(root, "gtFine", "train", "mate")
        os.makedirs(left, exist_ok=True)
        os.makedirs(fine, exist_ok=True)
        os.symlink(os.path.join(frames, name), os.path.join(left, f"{key}_leftImg8bit.png"))
        for kind in ("labelIds", "instanceIds"):
            os.symlink(os.path.join(labels, f"{stem}_{kind}.png"), os.path.join(fine, f"{key}_gtFine_{kind}.png"))
    return True


def dataset_bytes(dst: str) -> dict:
    """L3 member bytes, shard bytes and everything else the container adds."""
    manifest = dataset.read_manifest(dst)
    members = container = 0
    for split in manifest["splits"]:
        reader = dataset.open_dataset(dst, split)
        members += int(sum(reader.index[f"{field}_size"].astype(np.int64).sum() for field in reader.fields))
    for parent, _, files in os.walk(dst):
        container += sum(os.path.getsize(os.path.join(parent, name)) for name in files)
    source = sum(split["source_bytes"] for split in manifest["splits"].values())
    return {"source_bytes": source, "l3_bytes": members, "total_bytes": container,
            "ratio": members / source, "overhead": (container - members) / members}


def shard_size_for(src: str, shards: int) -> int:
    """A shard size giving about `shards` shards (parallelism is per shard: small trees need small shards)."""
    total = 0
    for parent, _, files in os.walk(src, followlinks=True):
        for name in files:
            path = os.path.join(parent, name)
            total += os.path.getsize(path) * (LOSSY_EXPANSION if name.lower().endswith(LOSSY_SUFFIXES) else 1)
    return max(1, total // shards)


def run(layout: str, src: str, work: str, *, workers: int, verify: bool, shard_size: int,
        mode: str = "compact") -> dict:
    dst = tempfile.mkdtemp(dir=work)
    shutil.rmtree(dst)
    if workers <= 1:
        import numba

        threads = numba.get_num_threads()
        numba.set_num_threads(1)  # one worker = one core, as each pool process has
    try:
        summary = convert(layout, src, dst, workers=workers, verify=verify, mode=mode, shard_size=shard_size,
                          progress=False)
    finally:
        if workers <= 1:
            numba.set_num_threads(threads)
    result = {"layout": layout, "source": src, "workers": workers, "verify": verify, "mode": mode,
              "shards": summary.shards,
              "samples": summary.samples, "failures": len(summary.failures), "wall_s": summary.wall_seconds,
              "images_per_s": summary.samples / summary.wall_seconds,
              "source_mb_per_s": summary.source_bytes / 1e6 / summary.wall_seconds, **dataset_bytes(dst)}
    shutil.rmtree(dst)
    return result


def index_open_time(work: str, samples: int, repeat: int = 5) -> dict:
    """Seconds to open_dataset() a synthetic index of `samples` ImageNet rows, in a fresh process each time."""
    root = os.path.join(work, "index-bench")
    split = os.path.join(root, "train")
    os.makedirs(split, exist_ok=True)
    rows = np.zeros(samples, dataset.index_dtype(("image",), key_width=23))
    rows["key"] = np.char.add(b"n01440764_", np.arange(samples).astype("S12"))
    rows["shard"] = np.arange(samples) // 2000
    rows["label"] = np.arange(samples) % 1000
    rows["image_size"] = 110_000
    rows["image_offset"] = (np.arange(samples) % 2000) * 111_000 + 512
    rows["image_height"], rows["image_width"], rows["image_channels"], rows["image_bits"] = 375, 500, 3, 8
    dataset.write_index(split, rows)
    dataset.write_manifest(root, {"splits": {"train": {"samples": samples, "shards": []}}, "class_names": []})
    code = ("import time; t0 = time.perf_counter(); from l3codec.dataset import open_dataset; "
            f"t1 = time.perf_counter(); r = open_dataset({root!r}, 'train'); n = len(r); k = r.key(n - 1); "
            "t2 = time.perf_counter(); print(t2 - t1, t1 - t0)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(repeat)]
    times = [float(opened) for opened, _ in runs]
    imports = [float(imported) for _, imported in runs]
    return {"samples": samples, "index_bytes": os.path.getsize(os.path.join(split, dataset.INDEX_NAME)),
            "open_s_best": min(times), "open_s_median": float(np.median(times)),
            "import_s_median": float(np.median(imports))}


def markdown(results: dict) -> str:
    lines = ["# l3convert benchmark", "", f"{results['machine']}", "", "## Throughput", "",
             "| source | workers | verify | images | shards | wall s | images/s | source MB/s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results["throughput"]:
        lines.append(f"| {row['name']} | {row['workers']} | {'yes' if row['verify'] else 'no'} | {row['samples']} | "
                     f"{row['shards']} | "
                     f"{row['wall_s']:.2f} | {row['images_per_s']:.1f} | {row['source_mb_per_s']:.1f} |")
    lines += ["", "| source | scaling (all workers / 1 worker) | --verify extra wall time (1 worker, all) |",
              "|---|---|---|"]
    for name, facts in results["derived"].items():
        lines.append(f"| {name} | {facts['scaling']:.2f}x (target >= 1.7x) | "
                     f"{facts['verify_extra_1']:+.0%}, {facts['verify_extra_all']:+.0%} (target <= +40%) |")
    lines += ["", "## Sizes", "", "| layout | mode | samples | source MB | L3 MB | L3 / source | container overhead |",
              "|---|---|---|---|---|---|---|"]
    for row in results["sizes"]:
        lines.append(f"| {row['layout']} | {row['mode']} | {row['samples']} | {row['source_bytes'] / 1e6:.2f} | "
                     f"{row['l3_bytes'] / 1e6:.2f} | {row['ratio']:.3f} | {row['overhead']:.2%} (target <= 1%) |")
    index = results["index"]
    lines += ["", "## Index", "", f"open_dataset() on a {index['samples']:,}-sample index "
              f"({index['index_bytes'] / 1e6:.1f} MB), fresh process: best {index['open_s_best'] * 1000:.1f} ms, "
              f"median {index['open_s_median'] * 1000:.1f} ms (target <= 500 ms), after importing l3codec.dataset "
              f"(median {index['import_s_median'] * 1000:.0f} ms, numpy included)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "corpus"),
                        help="an ImageFolder tree (default ../shared/corpus)")
    parser.add_argument("--synthetic", type=int, default=3000, help="JPEGs in the generated ImageNet-like tree")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="'all workers'")
    parser.add_argument("--index-samples", type=int, default=1_281_167)
    parser.add_argument("--shards-per-worker", type=int, default=8,
                        help="shard size chosen per source for this many shards per worker")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="l3convert-bench-")
    os.makedirs(work, exist_ok=True)
    corpus = os.path.abspath(args.corpus)
    sources = []
    if os.path.isdir(corpus):
        sources.append(("corpus", "folder", corpus))
    synthetic = os.path.join(work, "imagenet")
    if args.synthetic > 0:
        if not os.path.isdir(synthetic):
            print(f"generating {args.synthetic} JPEGs in {synthetic}", file=sys.stderr)
            make_imagenet(synthetic, args.synthetic)
        sources.append(("synthetic imagenet", "imagenet", synthetic))
    results = {"machine": f"{os.uname().nodename}, {len(os.sched_getaffinity(0))} cores, "
                          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
               "throughput": [], "derived": {}, "sizes": []}
    for name, layout, src in sources:
        shard_size = shard_size_for(src, args.shards_per_worker * args.workers)
        # warm-up: Numba's compiled code in this process and in the pool's forkserver, the page cache
        for workers in (0, args.workers):
            run(layout, src, work, workers=workers, verify=True, shard_size=shard_size)
        rows = {}
        for workers in (1, args.workers):
            for verify in (False, True):
                row = {"name": name, **run(layout, src, work, workers=workers, verify=verify, shard_size=shard_size)}
                print(json.dumps(row), file=sys.stderr)
                results["throughput"].append(row)
                rows[(workers, verify)] = row
        results["derived"][name] = {
            "scaling": rows[(args.workers, False)]["images_per_s"] / rows[(1, False)]["images_per_s"],
            "verify_extra_1": rows[(1, True)]["wall_s"] / rows[(1, False)]["wall_s"] - 1,
            "verify_extra_all": rows[(args.workers, True)]["wall_s"] / rows[(args.workers, False)]["wall_s"] - 1,
        }
    cityscapes = os.path.join(work, "cityscapes")
    if not os.path.isdir(cityscapes) and os.path.isdir(corpus):
        make_cityscapes(cityscapes, corpus)
    size_sources = [(layout, src) for _, layout, src in sources]
    if os.path.isdir(cityscapes):
        size_sources.append(("cityscapes", cityscapes))
    for layout, src in size_sources:
        for mode in ("compact", "fast"):
            # sizes with the default shard size: what a user gets (tiny shards would inflate the overhead)
            row = run(layout, src, work, workers=args.workers, verify=False, mode=mode,
                      shard_size=parse_size("256MB"))
            print(json.dumps(row), file=sys.stderr)
            results["sizes"].append(row)
    results["index"] = index_open_time(work, args.index_samples)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "convert.json"), "w") as file:
        json.dump(results, file, indent=1)
    text = markdown(results)
    with open(os.path.join(args.out, "convert.md"), "w") as file:
        file.write(text)
    print(text)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
