"""Prepared first-contact check on one GPU, bounded in time (issue #38).

    python bench/gpu_check.py --out DIR [--quick] [--dry-run]

Each step runs in its own subprocess under its own timeout; a step that fails or times out is
recorded and the next one runs; DIR/results.json and DIR/summary.md are rewritten after every step,
so a cut run still leaves its partial results. Without a GPU (or with --dry-run) the GPU steps are
skipped and the summary says so. Frames come from ../shared/corpus/hires2048 when present, else
are generated (photo-like, 2048x1024 RGB).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BUDGET_S = 470  # the whole run under 8 minutes
BATCHES = (1, 4, 16, 64)


def gpu_present() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


# ---------------------------------------------------------------- steps (each run in a subprocess)

def step_env() -> dict:
    """Python, packages and the GPU as the driver reports it."""
    import platform

    report = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in ("numpy", "numba", "numba_cuda", "cupy", "torch"):
        try:
            report[name] = __import__(name).__version__
        except Exception as error:
            report[name] = f"absent ({type(error).__name__})"
    try:
        report["nvidia-smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as error:
        report["nvidia-smi"] = f"absent ({type(error).__name__})"
    return report


def frames(count: int) -> list:
    """hires2048 frames from the shared corpus, or generated ones of the same size."""
    import numpy as np

    folder = REPO.parent / "shared" / "corpus" / "hires2048"
    images = []
    if folder.is_dir():
        from PIL import Image

        for path in sorted(folder.glob("*.png"))[:count]:
            images.append(np.asarray(Image.open(path).convert("RGB")))
    rng = np.random.default_rng(0)
    while len(images) < count:  # smooth gradients plus noise: photo-like residuals
        y, x = np.mgrid[0:1024, 0:2048]
        base = (x // 8 + y // 4 + len(images) * 17)[..., None] + np.array([0, 40, 80])
        images.append(((base + rng.integers(0, 6, base.shape)) % 256).astype(np.uint8))
    return [images[i % len(images)] for i in range(count)]


def step_smoke() -> dict:
    """One CuPy batch against the CPU decoder, and the occupancy API's blocks per SM."""
    import cupy
    import numpy as np

    import l3codec
    from l3codec import gpu
    from l3codec.kernels import cuda_c

    images = frames(2)
    files = [l3codec.encode(image, mode=mode) for image, mode in zip(images, ("compact", "fast"))]
    decoded = gpu.decode_batch(files, backend="cupy")
    equal = [bool(np.array_equal(cupy.asnumpy(got) if hasattr(got, "get") else got, l3codec.decode(f)))
             for got, f in zip(decoded, files)]
    occupancy = {}
    for mode in ("compact", "fast"):
        try:
            spec = cuda_c.KERNELS[{"compact": cuda_c.MODE_COMPACT, "fast": cuda_c.MODE_FAST}[mode]]
            kernel = cuda_c.load_module(spec.source).get_function(spec.kernel)
            occupancy[mode] = {"registers": kernel.num_regs, "max_threads": kernel.max_threads_per_block}
        except Exception as error:
            occupancy[mode] = f"{type(error).__name__}: {error}"
    return {"equal_to_cpu": equal, "kernels": occupancy}


def step_timings(quick: bool) -> dict:
    """decode_batch timed with CUDA events, batches of hires2048-like frames, per mode."""
    import cupy

    import l3codec
    from l3codec import gpu

    results = {}
    batches = BATCHES[:3] if quick else BATCHES
    source = frames(max(batches))
    for mode in ("compact", "fast"):
        files = [l3codec.encode(image, mode=mode) for image in source[:6]]
        for batch in batches:
            items = [files[i % len(files)] for i in range(batch)]
            gpu.decode_batch(items, backend="cupy")  # compile and warm up
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            repeat = 3
            for _ in range(repeat):
                gpu.decode_batch(items, backend="cupy")
            end.record()
            end.synchronize()
            seconds = cupy.cuda.get_elapsed_time(start, end) / 1e3 / repeat
            raw = sum(image.nbytes for image in source[:batch])
            results[f"{mode} x{batch}"] = {"ms": round(seconds * 1e3, 3), "GB/s end to end": round(raw / seconds / 1e9, 2)}
    return results


def step_pytest(backend: str) -> dict:
    """pytest -m cuda of one backend's tests."""
    files = {"cupy": ["tests/test_cuda_c.py", "tests/test_gpu_batch.py"], "numba": ["tests/test_numba_cuda.py"]}[backend]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", *files], cwd=REPO, env=env,
                          capture_output=True, text=True)
    return {"rc": done.returncode, "tail": done.stdout[-1500:]}


def step_ncu() -> dict:
    """Optional: is ncu there (counter collection left to a later run)."""
    done = subprocess.run(["which", "ncu"], capture_output=True, text=True)
    return {"ncu": done.stdout.strip() or "absent"}


STEPS = {  # name: (function, needs a GPU, timeout in seconds)
    "env": (lambda quick: step_env(), False, 30),
    "smoke": (lambda quick: step_smoke(), True, 120),
    "pytest_cupy": (lambda quick: step_pytest("cupy"), True, 150),
    "timings": (step_timings, True, 150),
    "pytest_numba": (lambda quick: step_pytest("numba"), True, 150),
    "ncu": (lambda quick: step_ncu(), True, 20),
}
NOT_BUILT = ["per-launch CUDA-event timings (LZ expansion, decode) apart", "loader GPU vs CPU throughput",
             "ncu counters"]


# ---------------------------------------------------------------- orchestration

def write(out: pathlib.Path, results: dict) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    lines = ["# GPU check", "", f"GPU present: {results['gpu']}; budget {results['budget_s']} s", "",
             "| step | outcome | seconds |", "|---|---|---|"]
    for name, step in results["steps"].items():
        lines.append(f"| {name} | {step['outcome']} | {step.get('seconds', '')} |")
    lines += ["", "Not built yet: " + "; ".join(NOT_BUILT), ""]
    (out / "summary.md").write_text("\n".join(lines))


def run_step(name: str, quick: bool, timeout: float) -> dict:
    started = time.monotonic()
    command = [sys.executable, __file__, "--step", name] + (["--quick"] if quick else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        if done.returncode == 0:
            step = {"outcome": "ok", "result": json.loads(done.stdout.strip().splitlines()[-1])}
        else:
            step = {"outcome": f"failed (rc {done.returncode})", "stderr": done.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        step = {"outcome": f"timed out after {timeout:.0f} s"}
    except Exception as error:
        step = {"outcome": f"failed to run: {type(error).__name__}: {error}"}
    step["seconds"] = round(time.monotonic() - started, 1)
    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/l3-gpu-check")
    parser.add_argument("--quick", action="store_true", help="smaller batches, for a tight budget")
    parser.add_argument("--dry-run", action="store_true", help="skip every GPU step even with a GPU")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:  # inside the step's subprocess: its result as the last line of stdout
        print(json.dumps(STEPS[args.step][0](args.quick), default=str))
        return 0
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    has_gpu = gpu_present() and not args.dry_run
    results = {"gpu": has_gpu, "budget_s": BUDGET_S, "steps": {}}
    start = time.monotonic()
    for name, (_, needs_gpu, timeout) in STEPS.items():
        left = BUDGET_S - (time.monotonic() - start)
        if needs_gpu and not has_gpu:
            results["steps"][name] = {"outcome": "skipped: no GPU" + (" (--dry-run)" if args.dry_run else "")}
        elif left < 10:
            results["steps"][name] = {"outcome": "skipped: budget spent"}
        else:
            results["steps"][name] = run_step(name, args.quick, min(timeout, left))
        write(out, results)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
