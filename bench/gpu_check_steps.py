"""The machine-level steps of bench/gpu_check.py: the environment, the CPU codec's compile, the
frames, pytest -m cuda, the Cityscapes-like tree and the Loader (the kernel-level ones are in
gpu_check_kernels.py). Each is called with a gpu_check.Check in a process of its own and returns a
dict: "passed" (False when what it checks is wrong; absent when it only reports), "note" (a few
words for the step table), "summary" (markdown lines) and its figures.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import gpu_check_data as data
import gpu_check_kernels as kernels

CUDA_TEST_FILES = ("tests/test_cuda_c.py", "tests/test_gpu_batch.py", "tests/test_torch.py",
                   "tests/test_loader.py")
TOOLS = ("nvidia-smi", "ncu", "nvdisasm", "g++")
PER_TEST_TIMEOUT_S = 120  # with pytest-timeout, where installed
TREE_SAMPLES, QUICK_TREE_SAMPLES, STAND_IN_TREE_SAMPLES = 96, 48, 8
LOADER_BATCH, STAND_IN_LOADER_BATCH = 16, 2
PACKAGES = ("numpy", "numba", "numba_cuda", "cupy", "torch", "cuda.bindings", "cv2", "PIL", "pytest",
            "pytest_timeout", "hypothesis", "isal")


def version_of(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - absent or broken: say which
        return f"absent ({type(error).__name__})"
    return str(getattr(module, "__version__", "present"))


# ---------------------------------------------------------------- env

def torch_facts() -> str:
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        return f"absent ({type(error).__name__})"
    if not torch.cuda.is_available():
        return f"{torch.__version__}, CUDA build {torch.version.cuda}, no CUDA device"
    properties = torch.cuda.get_device_properties(0)
    return (f"{torch.__version__}, CUDA {torch.version.cuda}, {properties.name}, "
            f"{properties.multi_processor_count} SMs")


def step_env(check) -> dict:
    """GPU name, driver, CUDA runtime, SM count and clock; the packages and tools the check uses,
    and which of them are missing."""
    report = {"python": sys.version.split()[0], "cores": os.cpu_count(),
              "packages": {name: version_of(name) for name in PACKAGES},
              "tools": {tool: shutil.which(tool) or "absent" for tool in TOOLS},
              "cupy": kernels.cupy_facts(), "torch": torch_facts()}
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm"
        try:
            done = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                                  timeout=30, check=False)
            report["nvidia-smi"] = done.stdout.strip() or done.stderr.strip()
        except subprocess.TimeoutExpired:
            report["nvidia-smi"] = "no answer within 30 s"
    facts = report["cupy"]
    if isinstance(facts, dict):
        report["gpu"] = (f"{facts['name']} (sm_{facts['compute_capability']}, {facts['sms']} SMs, "
                         f"{facts['clock_hz'] / 1e9:.3f} GHz, {facts['memory_gib']} GiB), driver CUDA "
                         f"{facts['driver']}, runtime CUDA {facts['runtime']}, NVRTC {facts['nvrtc']}")
    report["missing"] = [name for name, version in report["packages"].items() if version.startswith("absent")]
    missing = f"missing: {', '.join(report['missing'])}" if report["missing"] else "no package missing"
    report["note"] = f"{report.get('gpu', 'no GPU through CuPy')}; {missing}"
    report["summary"] = [
        f"- GPU: {report.get('gpu', facts)}",
        f"- nvidia-smi: {report.get('nvidia-smi', 'absent')}",
        f"- torch: {report['torch']}",
        "- packages: " + ", ".join(f"{name} {version}" for name, version in report["packages"].items()),
        "- tools: " + ", ".join(f"{tool}: {path}" for tool, path in report["tools"].items()),
        f"- Python {report['python']}, {report['cores']} cores",
    ]
    return report


# ---------------------------------------------------------------- CPU codec compile, frames

def step_warmup(check) -> dict:
    """The CPU codec compiled into Numba's disk cache by `python -m l3codec.warmup` (processes in
    parallel), 8-bit, 3 and 1 channels, so that later steps and every worker load it."""
    runs = []
    for channels in (3, 1):
        started = time.perf_counter()
        command = [sys.executable, "-m", "l3codec.warmup", "--bits", "8", "--channels", str(channels)]
        try:
            done = subprocess.run(command, cwd=data.REPO, capture_output=True, text=True, check=False,
                                  timeout=max(check.seconds_left(), 1))
            rc, stderr = done.returncode, done.stderr[-500:]
        except subprocess.TimeoutExpired:  # the first run's figures kept
            rc, stderr = None, "cut by the step's deadline"
        runs.append({"channels": channels, "rc": rc, "stderr": stderr,
                     "seconds": round(time.perf_counter() - started, 1)})
    failed = [run for run in runs if run["rc"] != 0]
    note = ", ".join(f"{run['channels']} ch {run['seconds']} s" for run in runs)
    return {"passed": not failed, "runs": runs,
            "note": note + "".join(f"; {r['channels']} ch FAILED: {r['stderr'][-200:]}" for r in failed)}


def step_frames(check) -> dict:
    """The photos and label maps (the corpus's, or generated), encoded in both modes once for all steps."""
    from l3codec import batch as batching

    frames = data.encoded_frames(check)
    rows = {}
    table = ["| frames | mode | count | MB / frame | ratio | LZ expansions / frame |",
             "|---|---|---|---|---|---|"]
    for (kind, mode), encoded in frames["encoded"].items():
        raw, size = sum(image.nbytes for image in frames[kind]), sum(map(len, encoded))
        expansions = kernels.lz_expansions(batching.prepare(encoded, verify=False))
        rows[f"{kind} {mode}"] = {"count": len(encoded), "bytes": size, "ratio": raw / size,
                                  "expansions": expansions}
        table.append(f"| {kind} | {mode} | {len(encoded)} | {size / len(encoded) / 1e6:.2f} "
                     f"| {raw / size:.2f} | {expansions / len(encoded):.1f} |")
    return {"source": frames["source"], "encoded": rows, "note": frames["source"],
            "summary": [f"Source: {frames['source']}.", "", *table]}


# ---------------------------------------------------------------- pytest -m cuda

PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)")


def pytest_counts(text: str) -> dict:
    """{"passed": n, "failed": n, ...} from pytest's last summary line ("3 passed, 1 failed in 2.0s")."""
    for line in reversed(text.splitlines()):
        if re.search(r" in [\d.]+s", line) and PYTEST_COUNT.search(line):
            return {word.removesuffix("s") if word in ("errors", "warnings") else word: int(n)
                    for n, word in PYTEST_COUNT.findall(line)}
    return {}


def run_cuda_tests(check, backend: str, files=CUDA_TEST_FILES) -> dict:
    """pytest -m cuda over the GPU test files, one backend's tests (-k), its output in
    out/pytest_<backend>.txt; a run cut by the step's deadline is counted from its verbose lines."""
    select = "numba" if backend == "numba" else "not numba"
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-k", select, "-v", "-rfEs",
               "-p", "no:cacheprovider", "--continue-on-collection-errors", *map(str, files)]
    if not version_of("pytest_timeout").startswith("absent"):
        command.append(f"--timeout={PER_TEST_TIMEOUT_S}")
    log = pathlib.Path(check.out) / f"pytest_{backend}.txt"
    try:
        with open(log, "w") as handle:
            rc = subprocess.run(command, cwd=data.REPO, stdout=handle, stderr=subprocess.STDOUT, check=False,
                                timeout=max(check.seconds_left(), 1)).returncode
    except subprocess.TimeoutExpired:
        rc = None
    text = log.read_text(errors="replace")
    counts = pytest_counts(text) if rc is not None else {}
    if not counts:  # cut short: the outcomes printed so far
        verbose = r"^\S+::.+? (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b"
        for outcome in re.findall(verbose, text, re.MULTILINE):
            counts[outcome.lower()] = counts.get(outcome.lower(), 0) + 1
    summary_lines = re.findall(r"^(?:FAILED|ERROR) (\S+(?:::.+?)?)(?: - .*)?$", text, re.MULTILINE)
    verbose_lines = re.findall(r"^(\S+::.+?) (?:FAILED|ERROR)\b", text, re.MULTILINE)
    failures = sorted(set(summary_lines + verbose_lines))
    skips = re.findall(r"^SKIPPED \[\d+\] .*$", text, re.MULTILINE)  # why, where nothing ran
    status = "cut by the step's deadline" if rc is None else f"exit status {rc}"
    note = ", ".join(f"{n} {word}" for word, n in counts.items()) + f" ({status})"
    return {"passed": rc == 0 and counts.get("passed", 0) > 0, "rc": rc, "counts": counts,
            "failures": failures, "note": note,
            "summary": [f"`{' '.join(command[1:])}`: {status}; output in {log.name}.",
                        *[f"- {name}" for name in failures[:30]], *[f"- {line}" for line in skips[:5]]]}


def step_pytest_cupy(check) -> dict:
    return run_cuda_tests(check, "cupy")


def step_pytest_numba(check) -> dict:
    return run_cuda_tests(check, "numba")


# ---------------------------------------------------------------- tree and loader

def tree_paths(check) -> tuple:
    root = pathlib.Path(check.work) / "cityscapes"
    return root / "source", {mode: root / f"l3-{mode}" for mode in kernels.MODES}


def step_tree(check) -> dict:
    """A Cityscapes-like tree of the frames (leftImg8bit photos, gtFine labelIds), converted with
    l3convert's Python API in both modes."""
    from l3codec.converters import convert

    source, converted = tree_paths(check)
    count = QUICK_TREE_SAMPLES if check.quick else TREE_SAMPLES
    count = count if check.gpu else STAND_IN_TREE_SAMPLES
    frames = data.encoded_frames(check)
    started = time.perf_counter()
    shutil.rmtree(source, ignore_errors=True)
    written = data.cityscapes_tree(source, frames, count)
    result = {"samples": count, "source_bytes": written, "tree_s": time.perf_counter() - started,
              "convert": {}}
    for mode, destination in converted.items():
        started = time.perf_counter()
        shutil.rmtree(destination, ignore_errors=True)
        summary = convert("cityscapes", source, destination, mode=mode, workers=None if check.gpu else 0,
                          progress=False)
        result["convert"][mode] = {"samples": summary.samples, "failures": len(summary.failures),
                                   "l3_bytes": summary.l3_bytes,
                                   "seconds": round(time.perf_counter() - started, 1)}
    converted_all = all(entry["samples"] == count and not entry["failures"]
                        for entry in result["convert"].values())
    times = ", ".join(f"{mode} in {entry['seconds']} s" for mode, entry in result["convert"].items())
    return {**result, "passed": converted_all,
            "note": f"{count} samples ({frames['source']}), converted: {times}"}


def make_loader(check, dataset: pathlib.Path, path: str, workers: int, batch: int):
    """A Loader of the converted split: path "gpu" decodes on the GPU with CuPy (the stand-in: on the
    CPU), "cpu" in its workers."""
    from l3codec.loader import Decode, L3Dataset, Loader, Workers

    if path == "gpu" and not check.stand_in:
        return Loader(L3Dataset(dataset), batch, decode=Decode("gpu", device="cuda", backend="cupy"),
                      workers=Workers(workers), seed=1)
    return Loader(L3Dataset(dataset), batch, decode=Decode("cpu"), workers=Workers(workers), seed=1)


def run_epochs(loader, seconds: float, epochs: int) -> dict:
    """Frames per second over whole epochs after one warm-up epoch, as many as fit in `seconds`."""
    import torch

    def synchronize():
        if loader.device.type == "cuda":
            torch.cuda.synchronize(loader.device)

    deadline = time.time() + seconds
    loader.set_epoch(0)
    for _ in loader:
        pass
    synchronize()
    frames, timed, started = 0, 0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        if time.time() > deadline:
            break
        loader.set_epoch(epoch)
        for batch in loader:
            frames += len(batch["key"])
        timed += 1
    synchronize()
    elapsed = time.perf_counter() - started
    return {"epochs": timed, "frames": frames, "seconds": elapsed,
            "frames/s": frames / elapsed if frames else 0.0}


def same_batches(first, second) -> tuple:
    """(batches compared, the first key of each batch that differs): one epoch of two loaders that
    share an order, batch by batch, every field's pixels."""
    import torch

    compared, differing = 0, []
    for a, b in zip(first, second):
        compared += 1
        fields = ("image", "labelIds")
        if a["key"] != b["key"] or not all(torch.equal(a[f].cpu(), b[f].cpu()) for f in fields):
            differing.append(a["key"][0])
    return compared, differing


def step_loader(check) -> dict:
    """The Loader on the converted tree: GPU decode (CuPy) against CPU decode (workers): one epoch
    of each compared batch by batch, then frames/s over whole epochs. Stand-in: a CPU-path Loader
    with another worker count in the GPU path's place."""
    _, converted = tree_paths(check)
    cores = os.cpu_count() or 2
    gpu_workers, cpu_workers = (0, 1) if check.stand_in else (max(2, min(8, cores // 2)), max(1, cores - 1))
    batch = STAND_IN_LOADER_BATCH if check.stand_in else LOADER_BATCH
    modes = [mode for mode in kernels.MODES if converted[mode].exists()]
    result, rows = {"runs": [], "equal": {}}, []
    for mode in modes:
        share = max(check.seconds_left() - 10, 4) / (3 * len(modes))  # comparison, GPU run, CPU run
        compared, differing = same_batches(make_loader(check, converted[mode], "gpu", gpu_workers, batch),
                                           make_loader(check, converted[mode], "cpu", cpu_workers, batch))
        result["equal"][mode] = {"batches": compared, "differing": differing}
        for path, workers in (("gpu", gpu_workers), ("cpu", cpu_workers)):
            run = run_epochs(make_loader(check, converted[mode], path, workers, batch), share, 3)
            result["runs"].append({"mode": mode, "path": path, "workers": workers, **run})
            label = "CPU (stand-in)" if check.stand_in and path == "gpu" else path.upper()
            rows.append(f"| {mode} | {label} | {workers} | {run['frames/s']:.0f} | {run['epochs']} "
                        f"| {compared} | {'yes' if not differing else 'NO: ' + ', '.join(differing[:3])} |")
        check.save({**result, "partial": True})
    passed = bool(modes) and all(entry["batches"] and not entry["differing"]
                                 for entry in result["equal"].values())
    speed = {(run["mode"], run["path"]): run["frames/s"] for run in result["runs"]}
    note = ", ".join(f"{mode}: GPU path {speed.get((mode, 'gpu'), 0):.0f}, "
                     f"CPU path {speed.get((mode, 'cpu'), 0):.0f} frames/s" for mode in modes)
    note += "" if passed else "; BATCHES DIFFER"
    return {**result, "passed": passed, "note": ("stand-in: " if check.stand_in else "") + note,
            "summary": [(f"Batch {batch}, full frames, {cores} cores; frames/s over whole epochs after a "
                         "warm-up epoch. = CPU: one epoch of the GPU path's batches equal to the CPU path's, "
                         "pixel for pixel."),
                        "", "| mode | path | workers | frames/s | epochs | batches compared | = CPU |",
                        "|---|---|---|---|---|---|---|", *rows]}
