"""GPU decode benchmark, and an analytic estimate where no GPU exists.

    python bench/gpu.py [folder] [--batch 64] [--repeat 5] [--out bench/results]

With a CUDA GPU: decode GB/s and images/s for a batch of frames (the folder's
images repeated to --batch), both backends and both modes, next to CPU PNG decode
(OpenCV) and nvImageCodec when installed.

Without one: the ptxas resource report of the CUDA C kernels (NVRTC, sm_80 and
sm_90) and an ESTIMATE, computed from the real encoded frames: bytes read and
written per image, warp steps per tile, and the fraction of lane-steps that do
useful work under the kernels' schedules. Nothing there is a measurement of speed.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import cv2
import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import l3codec  # noqa: E402
from l3codec import format as fmt  # noqa: E402

WARP = 32


def load_frames(folder: pathlib.Path) -> list:
    frames = []
    for path in sorted(folder.glob("*.png")):
        image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        if image is not None and image.ndim == 3:
            image = np.ascontiguousarray(image[:, :, ::-1])
        if image is not None:
            frames.append(image)
    if not frames:
        raise SystemExit(f"no PNG images in {folder}")
    return frames


def gpu_present() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver: no GPU
        return False


# ---------------------------------------------------------------- estimate (no GPU)


def compact_schedule(info: fmt.Info) -> tuple:
    """(busy lane-steps, issued lane-steps, warp steps) of the wavefront over every tile-channel.

    A warp runs h + w - 1 steps for an h x w tile; lane r is useful on w of them.
    """
    useful = issued = steps = 0
    for ty in range(info.tiles_y):
        h = min(info.tile_height, info.height - ty * info.tile_height)
        for tx in range(info.tiles_x):
            w = min(info.tile_width, info.width - tx * info.tile_width)
            useful += h * w * info.channels
            issued += WARP * (h + w - 1) * info.channels
            steps += (h + w - 1) * info.channels
    return useful, issued, steps


def fast_schedule(info: fmt.Info, threads: int) -> tuple:
    """(busy, issued, block steps) of the CUDA C fast kernel (kernels/fast.cu): per row a
    block scan of the group widths (every thread takes part), the unpack of w residuals,
    then w/2 even and w/2 odd columns; row 0 replaces even/odd by a run-sum over runs of
    columns per thread around one more block scan."""
    busy = issued = steps = 0

    def phase(active):
        nonlocal busy, issued, steps
        count = max(1, math.ceil(active / threads))
        busy += active
        issued += count * threads
        steps += count

    for ty in range(info.tiles_y):
        h = min(info.tile_height, info.height - ty * info.tile_height)
        for tx in range(info.tiles_x):
            w = min(info.tile_width, info.width - tx * info.tile_width)
            for _ in range(info.channels):
                for row in range(h):
                    phase(threads)  # width scan
                    phase(w)  # unpack
                    if row == 0:
                        per_thread = math.ceil(w / threads)
                        for _ in range(2 * per_thread):
                            phase(math.ceil(w / per_thread))
                        phase(threads)  # scan of the run sums
                    else:
                        phase((w + 1) // 2)
                        phase(w // 2)
    return busy, issued, steps


def estimate(frames: list, out) -> None:
    from l3codec.kernels import cuda_c

    print("## Estimate (no GPU here): from the encoded frames, not a measurement\n", file=out)
    print("Schedules of the CUDA C kernels: a lane is busy when it has a sample to decode or takes part "
          "in a scan; steps are warp steps (compact) or block-wide phases (fast).\n", file=out)
    print("| mode | frames | MB read / frame | MB written / frame | tiles / frame | steps / tile-channel "
          "| busy lane-steps |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for mode in ("compact", "fast"):
        read = written = tiles = steps = useful = issued = 0
        for frame in frames:
            data = l3codec.encode(frame, mode=mode)
            info = l3codec.info(data)
            read += len(data)
            written += frame.nbytes
            tiles += info.tiles_x * info.tiles_y
            schedule = compact_schedule(info) if mode == "compact" else fast_schedule(info, cuda_c.FAST_THREADS)
            useful += schedule[0]
            issued += schedule[1]
            steps += schedule[2] / info.channels
        n = len(frames)
        print(f"| {mode} | {n} | {read / n / 1e6:.2f} | {written / n / 1e6:.2f} | {tiles / n:.0f} | "
              f"{steps / tiles:.0f} | {useful / issued:.1%} |", file=out)
    print("\nEach compressed byte is read once (the compact row-length table is read by the lanes' "
          "prefix sums as well: 32 x 10-bit entries per tile-channel); each output byte is written once.",
          file=out)


def ptxas_report(out) -> None:
    try:
        from l3codec.kernels import cuda_c
    except ImportError as error:
        print(f"\n(no CUDA C kernels: {error})", file=out)
        return
    print("\n## ptxas resource usage (NVRTC)\n", file=out)
    print(f"Register budget: {cuda_c.REGISTER_BUDGET} per thread; dynamic shared memory is sized per launch "
          "(cuda_c.shared_memory_bytes).\n", file=out)
    print("| arch | kernel | registers | stack bytes | spill stores | spill loads | static smem |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for arch in ("sm_80", "sm_90"):
        try:
            report = cuda_c.compile_report(arch)
        except Exception as error:  # noqa: BLE001 - report why NVRTC is unusable here
            print(f"| {arch} | NVRTC unavailable: {error} | | | | | |", file=out)
            continue
        for kernel, r in sorted(report.items()):
            print(f"| {arch} | {kernel} | {r['registers']} | {r['stack_frame']} | "
                  f"{r['spill_stores']} | {r['spill_loads']} | {r['shared']} |", file=out)
    numba_report(out)


def numba_report(out) -> None:
    """ptxas on the Numba kernels' PTX (numba.cuda.compile_ptx, linked by nvJitLink)."""
    try:
        from l3codec.kernels import numba_kernels

        report = numba_kernels.resource_report(cc=(9, 0))
    except Exception as error:  # noqa: BLE001 - report why numba-cuda or nvJitLink is unusable here
        print(f"\n(no Numba kernel report: {error})", file=out)
        return
    print("\n## ptxas resource usage of the Numba kernels (sm_90, nvJitLink)\n", file=out)
    print("Their stack bytes are the kernels' own local arrays (a compact row's adaptive state, fast's "
          "per-channel stream positions), not spills.\n", file=out)
    print("| kernel | threads per block | registers | stack bytes | spill stores | spill loads | static smem |",
          file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for kernel, r in sorted(report.items()):
        print(f"| {kernel} | {numba_kernels.LAUNCH_THREADS[kernel]} | {r['registers']} | {r['stack_frame']} | "
              f"{r['spill_stores']} | {r['spill_loads']} | {r['shared']} |", file=out)


# ---------------------------------------------------------------- measurement (GPU)


def measure(frames: list, batch: int, repeat: int, out) -> None:
    from numba import cuda

    from l3codec import gpu

    items = [frames[i % len(frames)] for i in range(batch)]
    raw = sum(f.nbytes for f in items)
    print(f"## Measured on {cuda.get_current_device().name.decode()}: batch of {batch}\n", file=out)
    print("| decoder | images/s | output GB/s |", file=out)
    print("|---|---|---|", file=out)
    for mode in ("compact", "fast"):
        datas = [l3codec.encode(f, mode=mode) for f in frames]
        batch_items = [datas[i % len(datas)] for i in range(batch)]
        for backend in gpu.BACKENDS:
            try:
                gpu.decode_batch(batch_items, backend=backend)
                best = math.inf
                for _ in range(repeat):
                    start = time.perf_counter()
                    gpu.decode_batch(batch_items, backend=backend)
                    cuda.synchronize()
                    best = min(best, time.perf_counter() - start)
                print(f"| l3 {mode}, {backend} | {batch / best:.0f} | {raw / best / 1e9:.2f} |", file=out)
            except Exception as error:  # noqa: BLE001 - one backend failing must not hide the others
                print(f"| l3 {mode}, {backend} | failed: {error} | |", file=out)
    pngs = [cv2.imencode(".png", f)[1] for f in frames]
    start = time.perf_counter()
    for i in range(batch):
        cv2.imdecode(pngs[i % len(pngs)], cv2.IMREAD_UNCHANGED)
    elapsed = time.perf_counter() - start
    print(f"| PNG, OpenCV, CPU 1 thread | {batch / elapsed:.0f} | {raw / elapsed / 1e9:.2f} |", file=out)
    try:
        from nvidia import nvimgcodec
    except ImportError:
        print("\n(nvImageCodec not installed: no nvImageCodec row)", file=out)
        return
    decoder = nvimgcodec.Decoder()
    encoded = [bytes(pngs[i % len(pngs)]) for i in range(batch)]
    decoder.decode(encoded)
    start = time.perf_counter()
    decoder.decode(encoded)
    cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"| PNG, nvImageCodec | {batch / elapsed:.0f} | {raw / elapsed / 1e9:.2f} |", file=out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default=str(REPO.parent / "shared" / "corpus" / "hires2048"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    frames = load_frames(pathlib.Path(args.folder))
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu.md"
    with open(path, "w") as out:
        print(f"# GPU decode\n\nCommand: `python bench/gpu.py {args.folder}`; "
              f"{len(frames)} frames of {frames[0].shape}.\n", file=out)
        if gpu_present():
            measure(frames, args.batch, args.repeat, out)
        else:
            estimate(frames, out)
        ptxas_report(out)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
