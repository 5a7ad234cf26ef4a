"""Prepared first-contact check on one GPU, bounded in time (issue #38).

    python bench/gpu_check.py --out DIR [--quick] [--dry-run] [--corpus DIR]

Steps, in this order (bench/gpu_check_steps.py, one function each): the environment; the frames
(the corpus's hires2048 photos and label maps, generated when the corpus is absent); one CuPy batch
against the CPU decoder, with blocks per SM from the occupancy API; CUDA-event timings of each
launch (LZ expansion, decode) for batches of 1, 4, 16 and 64 frames; pytest -m cuda, CuPy backend;
a Cityscapes-like tree converted with l3convert; the Loader's GPU path against its CPU path; ncu
counters when ncu is on PATH; pytest -m cuda, Numba backend (last: its kernels compile slowly).

Each step runs in a process of its own under its own timeout (the whole process group is stopped
when it overruns); a step that fails or overruns is recorded and the next one runs; nothing starts
once the budget (7.5 minutes, --quick 4) is spent. DIR/summary.md and DIR/results.json are rewritten
after every step, so a cut run leaves what it had. Without a GPU, or with --dry-run, the GPU steps
are skipped and the summary names them; those with a host stand-in (the emulated kernels, the
Loader's CPU path) run it instead, so that their code runs here too, on small frames. At most 6
files land in DIR (summary.md, results.json, steps.log, pytest_cupy.txt, pytest_numba.txt, ncu.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

BENCH = pathlib.Path(__file__).resolve().parent
REPO = BENCH.parent
BUDGET_S = {False: 450, True: 240}  # keyed by --quick: the whole run under 8 minutes, --quick under 5
MIN_STEP_S = 15  # a step is not started with less left
STAND_IN_SHAPE = (128, 256)  # frames without a GPU: the emulator takes minutes over a 2048x1024 one
STOP_GRACE_S = 5  # after SIGTERM to an overrunning step's group, before SIGKILL
LOG_TAIL_LINES = 40  # of a failed step's output, kept in results.json
ERROR_LINES = 15  # of those, in summary.md


@dataclasses.dataclass(frozen=True)
class Step:
    """A step: its function (called with a Check in a process of its own), its timeouts (normal,
    --quick), and what it needs. stand_in: without a GPU the function runs anyway with
    check.stand_in set, against its host stand-in. tool: a program that must be on PATH."""

    name: str
    function: Callable
    timeout_s: float
    quick_timeout_s: float
    needs_gpu: bool = False
    stand_in: bool = False
    tool: str = ""


@dataclasses.dataclass
class Check:
    """What a step is told (written to a JSON file that its process reads)."""

    work: str
    out: str
    corpus: str
    quick: bool
    dry_run: bool
    gpu: bool
    frame_shape: tuple
    step: str = ""
    stand_in: bool = False
    deadline: float = 0.0  # time.time() by which the step should have returned

    def seconds_left(self) -> float:
        return self.deadline - time.time()

    def result_path(self) -> pathlib.Path:
        return pathlib.Path(self.work) / f"{self.step}.json"

    def save(self, result: dict) -> None:
        """Write the step's result (also partial results, which survive an overrun)."""
        self.result_path().write_text(json.dumps(result, default=str))


def gpu_present() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001, S110 - no CuPy, no driver: ask numba-cuda
        pass
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def ensure_importable() -> str:
    """l3codec.kernels and l3codec.converters as a plain checkout lacks them (they are the ignored
    links an editable install or a developer makes): made here when absent, so that the check runs
    from PYTHONPATH without pip, which a machine without network may not manage."""
    made = []
    for name in ("kernels", "converters"):
        link = REPO / "l3codec" / name
        if not link.exists():
            link.unlink(missing_ok=True)  # a dangling link
            link.symlink_to(pathlib.Path("..") / name)
            made.append(str(link.relative_to(REPO)))
    return f"made the links {', '.join(made)}" if made else "l3codec/kernels and l3codec/converters present"


# ---------------------------------------------------------------- running one step

def step_target(function: Callable) -> tuple:
    """(module:qualname, the folder to import it from) for a step's process."""
    module = sys.modules[function.__module__]
    return f"{function.__module__}:{function.__qualname__}", str(pathlib.Path(module.__file__).parent)


def stop_group(process: subprocess.Popen) -> None:
    """Stop a step's whole process group (its pytest, loader workers, ncu): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone: make sure nothing it started lingers
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_step(step: Step, check: Check, timeout: float) -> dict:
    """Run one step in a new process group under `timeout` seconds; its record."""
    check = dataclasses.replace(check, step=step.name, deadline=time.time() + timeout - STOP_GRACE_S)
    work = pathlib.Path(check.work)
    context, log = work / f"{step.name}.context.json", work / f"{step.name}.log"
    context.write_text(json.dumps(dataclasses.asdict(check)))
    check.result_path().unlink(missing_ok=True)
    target, folder = step_target(step.function)
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", target,
               "--child-path", folder, "--context", str(context)]
    path = os.pathsep.join(filter(None, [str(REPO), str(BENCH), os.environ.get("PYTHONPATH")]))
    environment = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    started = time.monotonic()
    with open(log, "w") as handle:  # a file, not a pipe: a lingering grandchild cannot block the wait
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO,
                                   env=environment, start_new_session=True)
        try:
            rc = process.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        stop_group(process)
    record = {"seconds": round(time.monotonic() - started, 1), "timeout_s": round(timeout)}
    result = json.loads(check.result_path().read_text()) if check.result_path().exists() else None
    if rc is None:
        record["outcome"] = f"timed out after {timeout:.0f} s" + (" (partial results kept)" if result else "")
        record["error"] = log_tail(log)
    elif rc != 0 or result is None:
        record["outcome"] = f"error (exit status {rc})"
        record["error"] = log_tail(log)
    else:
        record["outcome"] = "check failed" if result.get("passed") is False else "ok"
    if result is not None:
        record["result"] = result
    if check.stand_in:
        record["outcome"] = f"skipped: no GPU{' (--dry-run)' if check.dry_run else ''}; " \
                            f"host stand-in {record['outcome']}"
    return record


def plan_step(step: Step, check: Check, left: float) -> tuple:
    """(reason to skip or None, run against the stand-in, timeout)."""
    no_gpu = "skipped: no GPU" + (" (--dry-run)" if check.dry_run else "")
    if step.needs_gpu and not check.gpu and not step.stand_in:
        return no_gpu, False, 0
    if step.tool and shutil.which(step.tool) is None:
        return f"skipped: {step.tool} not on PATH", False, 0
    if left < MIN_STEP_S:
        return "skipped: time budget spent", False, 0
    timeout = min(step.quick_timeout_s if check.quick else step.timeout_s, left)
    return None, step.needs_gpu and not check.gpu, timeout


def run_steps(steps: list, check: Check, budget_s: float) -> dict:
    """Every step in order, each recorded; the reports rewritten after each."""
    results = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "gpu": check.gpu, "dry_run": check.dry_run, "quick": check.quick, "budget_s": budget_s,
               "frame_shape": list(check.frame_shape), "steps": {}}
    begin = time.monotonic()
    for step in steps:
        skip, stand_in, timeout = plan_step(step, check, budget_s - (time.monotonic() - begin))
        if skip:
            results["steps"][step.name] = {"outcome": skip}
        else:
            step_check = dataclasses.replace(check, stand_in=stand_in)
            results["steps"][step.name] = run_step(step, step_check, timeout)
        results["seconds"] = round(time.monotonic() - begin, 1)
        write_reports(pathlib.Path(check.out), pathlib.Path(check.work), results)
    return results


def default_steps() -> list:
    """The check's steps in priority order, each with its timeouts (normal, --quick) in seconds."""
    import gpu_check_kernels as kernels
    import gpu_check_steps as steps

    return [
        Step("env", steps.step_env, 45, 45),
        Step("warmup", steps.step_warmup, 120, 90),
        Step("frames", steps.step_frames, 120, 90),
        Step("smoke", kernels.step_smoke, 120, 60, needs_gpu=True, stand_in=True),
        Step("timings", kernels.step_timings, 120, 60, needs_gpu=True, stand_in=True),
        Step("tree", steps.step_tree, 90, 45),
        Step("loader", steps.step_loader, 90, 45, needs_gpu=True, stand_in=True),  # the one end-to-end check
        Step("pytest_cupy", steps.step_pytest_cupy, 150, 75, needs_gpu=True),
        Step("ncu", kernels.step_ncu, 90, 45, needs_gpu=True, tool="ncu"),
        Step("pytest_numba", steps.step_pytest_numba, 150, 75, needs_gpu=True),
    ]


# ---------------------------------------------------------------- reports

def summary_lines(results: dict) -> list:
    steps = results["steps"]
    frames = steps.get("frames", {}).get("result", {}).get("source", "not loaded")
    gpu = steps.get("env", {}).get("result", {}).get("gpu", "none found")
    height, width = results["frame_shape"]
    lines = ["# GPU check (bench/gpu_check.py)", "",
             (f"Started {results['started']}; {results.get('seconds', 0)} s of a {results['budget_s']} s "
              f"budget{'; --quick' if results['quick'] else ''}"
              f"{'; --dry-run' if results['dry_run'] else ''}."),
             f"GPU: {gpu}. Frames: {frames}, {width} x {height} pixels.",
             "",
             "| step | outcome | seconds | note |", "|---|---|---|---|"]
    for name, step in steps.items():
        note = step.get("result", {}).get("note") or last_line(step.get("error", ""))
        lines.append(f"| {name} | {step['outcome']} | {step.get('seconds', '')} | {note.replace('|', '/')} |")
    no_gpu = [name for name, step in steps.items() if step["outcome"].startswith("skipped: no GPU")]
    if no_gpu:
        lines += ["", (f"Skipped for want of a GPU: {', '.join(no_gpu)}. A host stand-in ran for those that "
                       "say so: its figures are the emulator's or the CPU's, never a GPU's.")]
    for name, step in steps.items():
        section = step.get("result", {}).get("summary")
        if section or step.get("error"):
            lines += ["", f"## {name}", ""]
        if section:
            lines += section
        if step.get("error"):
            lines += ["```", *step["error"].splitlines()[-ERROR_LINES:], "```"]
    return lines


def last_line(text: str) -> str:
    """The last line that says something (an error's message), shortened for the step table."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def write_reports(out: pathlib.Path, work: pathlib.Path, results: dict) -> None:
    """summary.md, results.json and steps.log (the tail of every step's output) in out."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "summary.md").write_text("\n".join(summary_lines(results)) + "\n")
    logs = []
    for name in results["steps"]:
        text = log_tail(work / f"{name}.log", 200)
        if text:
            logs += [f"===== {name}", text]
    (out / "steps.log").write_text("\n".join(logs) + "\n")


# ---------------------------------------------------------------- command line

def child_main(target: str, folder: str, context: str) -> int:
    """Inside a step's process: call the step's function and save what it returns."""
    sys.path.insert(0, folder)
    module_name, _, qualname = target.partition(":")
    function = importlib.import_module(module_name)
    for part in qualname.split("."):
        function = getattr(function, part)
    fields = json.loads(pathlib.Path(context).read_text())
    check = Check(**{**fields, "frame_shape": tuple(fields["frame_shape"])})
    check.save(function(check))
    return 0


def frame_shape(text: str) -> tuple:
    """"HxW" as (H, W), each at least 16."""
    try:
        height, width = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HxW (1024x2048, say)") from None
    if min(height, width) < 16:
        raise argparse.ArgumentTypeError(f"{text!r}: frames of at least 16x16")
    return height, width


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/l3-gpu-check", help="where summary.md and results.json go")
    parser.add_argument("--quick", action="store_true",
                        help="batches up to 16, a smaller tree, a 4-minute budget")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU steps even with a GPU: their host stand-ins on small frames")
    parser.add_argument("--corpus", default=None, help="the corpus folder (default ../shared/corpus, else "
                        "shared/corpus in the checkout); frames are generated when it has no hires2048/")
    parser.add_argument("--frame-shape", default=None, type=frame_shape,
                        help="HxW of the frames (default 1024x2048; 128x256 without a GPU or with --dry-run)")
    parser.add_argument("--work", default=None, help="scratch folder (default: a new one under /tmp)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-path", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, args.child_path, args.context)
    import gpu_check_data

    gpu = not args.dry_run and gpu_present()
    shape = args.frame_shape or (gpu_check_data.HIRES_SHAPE if gpu else STAND_IN_SHAPE)
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="l3-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    print(ensure_importable(), flush=True)
    check = Check(work=str(work), out=str(pathlib.Path(args.out).resolve()),
                  corpus=str(args.corpus or gpu_check_data.default_corpus()), quick=args.quick,
                  dry_run=args.dry_run, gpu=gpu, frame_shape=tuple(shape))
    results = run_steps(default_steps(), check, BUDGET_S[args.quick])
    print("\n".join(summary_lines(results)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    sys.exit(main())
