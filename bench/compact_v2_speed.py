"""compact v2's coder (l3codec/ans_cpu.py, issue #39 phase 1) on real images: one-thread encode and decode
speed against today's compact and libspng, and sizes against WebP lossless as bench/compact_v2_model.py
counts them.

Per image: the rg-mean colour transform's three planes (as the model), each coded by ans_cpu.encode_plane
and decoded by ans_cpu.decode_plane (checked equal). Times are the best of --repeat runs, measured two
ways: wall clock, and the calling thread's CPU time (time.thread_time), which a machine shared with other
jobs disturbs much less; both are reported, the CPU time is the one to compare. The colour transform is
outside the v2 timings (today's compact decode includes its inverse, a few % of its time).
Today's compact: l3codec.encode(mode="compact") / l3codec.decode at one thread. libspng: pyspng.load of
OpenCV-default PNG bytes (bench/codecs.py's "PNG, libspng decode" row). WebP: OpenCV, quality 101
(lossless), as the model. v2 bytes: tables + row streams + framing (CodedPlane.total_bytes) + a 44-byte
file header per image.

Usage: python bench/compact_v2_speed.py /work/shared/corpus/hires2048/*.png [--tile-width 512]
       [--precision 11] [--repeat 5]
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import cv2
import numpy as np

import l3codec
from l3codec import ans_cpu

FILE_HEADER_BYTES = 44


def bench_codecs():
    """bench/codecs.py, loaded from its path: on sys.path its name would be the standard library's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_codecs", Path(__file__).with_name("codecs.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def planes_of(rgb):
    r, g, b = (rgb[..., i].astype(np.int32) for i in range(3))
    return [
        ((r - g + 128) & 255).astype(np.uint8),
        g.astype(np.uint8),
        ((b - ((r + g) >> 1) + 128) & 255).astype(np.uint8),
    ]


def best(fn, repeat):
    """(last result, best wall seconds, best thread CPU seconds)."""
    result = fn()  # warm: compiles, page-faults
    wall = cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.thread_time()
        result = fn()
        cpu = min(cpu, time.thread_time() - c0)
        wall = min(wall, time.perf_counter() - w0)
    return result, wall, cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("images", nargs="+")
    parser.add_argument("--tile-width", type=int, default=512)
    parser.add_argument("--precision", type=int, default=11)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    codecs = bench_codecs()
    codecs.set_threads(1)
    totals = {"pixels": 0, "src": 0, "webp": 0, "compact": 0, "v2": 0}
    times = {
        key: [0.0, 0.0] for key in ("v2 encode", "v2 decode", "compact encode", "compact decode", "libspng")
    }
    for path in args.images:
        rgb = codecs.load(Path(path))
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
            print(f"skipped {path}: not 8-bit RGB")
            continue
        planes = planes_of(rgb)
        coded, wall, cpu = best(
            lambda planes=planes: [ans_cpu.encode_plane(p, args.tile_width, args.precision) for p in planes],
            args.repeat,
        )
        times["v2 encode"][0] += wall
        times["v2 encode"][1] += cpu
        decoded, wall, cpu = best(lambda coded=coded: [ans_cpu.decode_plane(c) for c in coded], args.repeat)
        if not all(np.array_equal(d, p) for d, p in zip(decoded, planes)):
            raise SystemExit(f"v2 ROUND TRIP FAILED on {path}")
        times["v2 decode"][0] += wall
        times["v2 decode"][1] += cpu
        data, wall, cpu = best(lambda rgb=rgb: l3codec.encode(rgb, mode="compact"), max(1, args.repeat // 2))
        times["compact encode"][0] += wall
        times["compact encode"][1] += cpu
        image, wall, cpu = best(lambda data=data: l3codec.decode(data), args.repeat)
        assert np.array_equal(image, rgb)
        times["compact decode"][0] += wall
        times["compact decode"][1] += cpu
        png = codecs.cv2_png_encoder(None)(codecs.swap_rb(rgb))  # OpenCV writes BGR
        image, wall, cpu = best(lambda png=png: codecs.spng_decode(png), args.repeat)
        assert np.array_equal(image, rgb)
        times["libspng"][0] += wall
        times["libspng"][1] += cpu
        _, webp = cv2.imencode(".webp", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_WEBP_QUALITY, 101])
        totals["pixels"] += rgb.shape[0] * rgb.shape[1]
        totals["src"] += os.path.getsize(path)
        totals["webp"] += len(webp)
        totals["compact"] += len(data)
        totals["v2"] += FILE_HEADER_BYTES + sum(c.total_bytes() for c in coded)
        print(
            f"  {os.path.basename(path)}: v2 {sum(c.total_bytes() for c in coded):,} B, biased planes "
            f"{[c.biased for c in coded]}",
            flush=True,
        )
    mp = totals["pixels"] / 1e6
    print(
        f"\n{len(args.images)} images, {mp:.1f} MP, tile width {args.tile_width}, "
        f"precision {args.precision}, "
        f"best of {args.repeat}; {platform.processor() or platform.machine()}, load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print("| | wall MP/s | thread-CPU MP/s | x libspng (CPU) |")
    print("|---|---:|---:|---:|")
    spng = mp / times["libspng"][1]
    for key, (wall, cpu) in times.items():
        print(f"| {key} | {mp / wall:.1f} | {mp / cpu:.1f} | {mp / cpu / spng:.2f} |")
    print("\n| bytes | total | x sources | x WebP |\n|---|---:|---:|---:|")
    for key in ("v2", "compact", "webp"):
        print(
            f"| {key} | {totals[key]:,} | {totals[key] / totals['src']:.4f} "
            f"| {totals[key] / totals['webp']:.4f} |"
        )


if __name__ == "__main__":
    main()
