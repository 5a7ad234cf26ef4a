"""bench/gpu_check.py's CPU side: the step runner (a step that raises, fails its check or overruns
is recorded and the next one runs; the budget; steps needing a GPU or a tool), the reports, the
parsers and arithmetic the GPU steps report with, the launch-by-launch timing on the host stand-in,
and the whole dry run."""

import io
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from images import make_image

import l3codec

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gpu_check  # noqa: E402
import gpu_check_data  # noqa: E402
import gpu_check_kernels  # noqa: E402
import gpu_check_steps  # noqa: E402

Step = gpu_check.Step


def make_check(tmp_path, **changes) -> gpu_check.Check:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    fields = {"work": str(work), "out": str(tmp_path / "out"), "corpus": str(tmp_path / "no-corpus"),
              "quick": False, "dry_run": True, "gpu": False, "frame_shape": (64, 128)}
    return gpu_check.Check(**{**fields, **changes})


# the runner's test steps: each runs in a process of its own, which imports this module by name

def step_that_raises(check):
    raise RuntimeError("deliberate failure inside a step")


def step_that_passes(check):
    return {"passed": True, "note": f"ran with stand_in={check.stand_in}", "summary": ["- all well"]}


def step_that_fails_its_check(check):
    return {"passed": False, "note": "pixels differ"}


def step_that_overruns(check):
    lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    check.save({"partial": True, "grandchild": lingering.pid})
    time.sleep(300)


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, waiting to be reaped, does not)."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.processes
def test_failures_are_recorded_and_the_next_step_runs(tmp_path):
    check = make_check(tmp_path)
    steps = [Step("raises", step_that_raises, 60, 60), Step("fails", step_that_fails_its_check, 60, 60),
             Step("gpu only", step_that_passes, 60, 60, needs_gpu=True),
             Step("stand-in", step_that_passes, 60, 60, needs_gpu=True, stand_in=True),
             Step("last", step_that_passes, 60, 60)]
    results = gpu_check.run_steps(steps, check, budget_s=300)
    outcomes = {name: step["outcome"] for name, step in results["steps"].items()}
    assert outcomes == {"raises": "error (exit status 1)", "fails": "check failed",
                        "gpu only": "skipped: no GPU (--dry-run)",
                        "stand-in": "skipped: no GPU (--dry-run); host stand-in ok", "last": "ok"}
    assert "deliberate failure inside a step" in results["steps"]["raises"]["error"]
    assert results["steps"]["stand-in"]["result"]["note"] == "ran with stand_in=True"
    assert results["steps"]["last"]["result"]["note"] == "ran with stand_in=False"
    out = pathlib.Path(check.out)
    assert json.loads((out / "results.json").read_text())["steps"].keys() == results["steps"].keys()
    summary = (out / "summary.md").read_text()
    for name, outcome in outcomes.items():
        assert f"| {name} | {outcome} |" in summary
    row = r"\| raises \| error \(exit status 1\) \| [\d.]+ \| RuntimeError: deliberate failure"
    assert re.search(row, summary)  # the step table names the error
    assert "Skipped for want of a GPU: gpu only, stand-in." in summary
    assert "deliberate failure inside a step" in summary and "- all well" in summary
    assert "deliberate failure inside a step" in (out / "steps.log").read_text()


@pytest.mark.processes
def test_a_step_that_overruns_is_stopped_with_what_it_started(tmp_path):
    check = make_check(tmp_path)
    steps = [Step("slow", step_that_overruns, 3, 3), Step("after", step_that_passes, 60, 60)]
    started = time.monotonic()
    results = gpu_check.run_steps(steps, check, budget_s=300)
    assert time.monotonic() - started < 3 + 2 * gpu_check.STOP_GRACE_S + 10
    slow = results["steps"]["slow"]
    assert slow["outcome"] == "timed out after 3 s (partial results kept)"
    grandchild = slow["result"]["grandchild"]
    deadline = time.monotonic() + 10  # killed with its group; reaped by whoever adopted it
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(grandchild)
    assert results["steps"]["after"]["outcome"] == "ok"


def test_plan_step_skips_for_the_budget_a_missing_gpu_or_tool_and_caps_the_timeout(tmp_path):
    check = make_check(tmp_path)
    plain = Step("plain", step_that_passes, 100, 40)
    spent = ("skipped: time budget spent", False, 0)
    assert gpu_check.plan_step(plain, check, left=gpu_check.MIN_STEP_S - 1) == spent
    assert gpu_check.plan_step(plain, check, left=500) == (None, False, 100)
    assert gpu_check.plan_step(plain, make_check(tmp_path, quick=True), left=500) == (None, False, 40)
    assert gpu_check.plan_step(plain, check, left=70) == (None, False, 70)
    gpu_only = Step("gpu", step_that_passes, 100, 40, needs_gpu=True)
    assert gpu_check.plan_step(gpu_only, check, left=500)[0] == "skipped: no GPU (--dry-run)"
    no_gpu_here = make_check(tmp_path, dry_run=False)
    assert gpu_check.plan_step(gpu_only, no_gpu_here, left=500)[0] == "skipped: no GPU"
    assert gpu_check.plan_step(gpu_only, make_check(tmp_path, gpu=True), left=500) == (None, False, 100)
    stand_in = Step("stand-in", step_that_passes, 100, 40, needs_gpu=True, stand_in=True)
    assert gpu_check.plan_step(stand_in, check, left=500) == (None, True, 100)
    tool = Step("tool", step_that_passes, 100, 40, tool="no-such-tool-l3")
    assert gpu_check.plan_step(tool, check, left=500)[0] == "skipped: no-such-tool-l3 not on PATH"


def test_frame_shapes_are_read_as_height_by_width():
    assert gpu_check.frame_shape("1024x2048") == (1024, 2048)
    for text in ("1024", "axb", "8x2048"):
        with pytest.raises(gpu_check.argparse.ArgumentTypeError):
            gpu_check.frame_shape(text)


def test_the_links_a_plain_checkout_lacks_are_made(tmp_path, monkeypatch):
    (tmp_path / "l3codec").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "converters").mkdir()
    (tmp_path / "l3codec" / "converters").symlink_to(tmp_path / "gone")  # dangling
    monkeypatch.setattr(gpu_check, "REPO", tmp_path)
    assert gpu_check.ensure_importable() == "made the links l3codec/kernels, l3codec/converters"
    for name in ("kernels", "converters"):
        assert (tmp_path / "l3codec" / name).resolve() == (tmp_path / name).resolve()
    assert gpu_check.ensure_importable() == "l3codec/kernels and l3codec/converters present"


# ---------------------------------------------------------------- what the GPU steps report with

def test_the_implied_issue_rate_inverts_bench_gpus_throughput_estimate():
    """bench/gpu.py prints the GB/s its count per sample gives at each assumed issue rate; the
    check's implied rate, fed that throughput, must give the assumed rate back."""
    bench = gpu_check_data.bench_gpu()
    count = 7.43
    out = io.StringIO()
    bench.throughput_estimate({"compact": count}, out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("| compact |"))
    printed = [float(cell) for cell in row.strip("|").split("|")[2:]]  # GB/s at each rate, rounded
    for rate, gbs in zip(bench.ISSUE_PER_CYCLE, printed):
        samples = 10**9  # one GB of 8-bit samples
        implied = gpu_check_kernels.implied_issue_rate(count, samples, samples / (gbs * 1e9), bench.H100_SMS,
                                                       bench.H100_CLOCK_HZ)
        assert implied == pytest.approx(rate, rel=0.5 / gbs)  # the printed GB/s is rounded to units
    facts = {"sms": bench.H100_SMS, "clock_hz": bench.H100_CLOCK_HZ}
    predicted = gpu_check_kernels.predicted_gbs({"compact": {"decode": count, "expansion": 0.0}}, facts)
    assert predicted["compact"] == [round(gbs) for gbs in printed]


def test_the_estimate_table_is_read_by_its_column_names(tmp_path):
    report = tmp_path / "gpu.md"
    report.write_text("# GPU decode\n\n| mode | frames | warp-instructions per sample | of which write-out "
                      "| LZ expansion (its kernel) | other |\n|---|---|---|---|---|---|\n"
                      "| compact | 1 | 7.25 | 0.9 | 0.125 | x |\n"
                      "| fast | 1 | 4.5 | 0.4 | 0.25 | y |\n\nafter\n")
    estimate, source = gpu_check_kernels.estimated_per_sample(report)
    assert estimate == {"compact": {"decode": 7.25, "expansion": 0.125},
                        "fast": {"decode": 4.5, "expansion": 0.25}}
    assert source.startswith(str(report))
    report.write_text("no table here\n")
    assert gpu_check_kernels.estimated_per_sample(report)[0] == {}
    committed, _ = gpu_check_kernels.estimated_per_sample()  # what the check reads from bench/results/gpu.md
    assert set(committed) == {"compact", "fast"}


def test_blocks_per_sm_by_hand_names_the_limit():
    limits = gpu_check_kernels.SM90_LIMITS
    # 128 threads of 64 registers: 4 warps of 2048 registers, 8 blocks in 65536; 34032 + 1024 bytes of
    # shared memory: 6 blocks in 233472; 2048 threads: 16 blocks
    assert gpu_check_kernels.blocks_per_sm_by_hand(64, 128, 34032, limits) == {"blocks": 6,
                                                                                "limited by": "shared memory"}
    by_registers = {"blocks": 8, "limited by": "registers"}
    assert gpu_check_kernels.blocks_per_sm_by_hand(64, 128, 0, limits) == by_registers
    # 32 threads of 32 registers, no shared memory: 64 blocks by registers and warps, 32 the cap
    by_cap = {"blocks": 32, "limited by": "blocks"}
    assert gpu_check_kernels.blocks_per_sm_by_hand(32, 32, 0, limits) == by_cap


def test_ncu_csv_rows_are_read_per_launch_in_order():
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
              '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')

    def row(launch, kernel, metric, value):
        return (f'"{launch}","7","python3","host","{kernel}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
                f'"Command line profiler metrics","{metric}","","{value}"')

    text = "\n".join(["==PROF== Connected to process 7", header,
                      row(1, "l3_decode_fast", "smsp__inst_executed.sum", "2,500,000"),
                      row(0, "l3_decode_compact", "smsp__inst_executed.sum", "1,234,567"),
                      row(0, "l3_decode_compact", "sm__inst_executed.avg.per_cycle_active", "1.87"),
                      "==PROF== Disconnected from process 7"])
    assert gpu_check_kernels.ncu_rows(text) == [
        {"kernel": "l3_decode_compact", "smsp__inst_executed.sum": 1234567.0,
         "sm__inst_executed.avg.per_cycle_active": 1.87},
        {"kernel": "l3_decode_fast", "smsp__inst_executed.sum": 2500000.0}]


@pytest.mark.processes
def test_the_cuda_tests_step_counts_pytests_outcomes(tmp_path):
    """run_cuda_tests on a generated test file: the cuda-marked tests of the backend selected (-k)
    run, and their outcomes are counted and named."""
    tests = tmp_path / "test_generated_cuda.py"
    tests.write_text("import pytest\n\n"
                     "@pytest.mark.cuda\n@pytest.mark.parametrize('case', ['a b'])\n"
                     "def test_cupy_passes(case):\n    pass\n\n"
                     "@pytest.mark.cuda\ndef test_cupy_fails():\n    assert 1 == 2\n\n"
                     "@pytest.mark.cuda\ndef test_cupy_skips():\n    pytest.skip('no reason')\n\n"
                     "@pytest.mark.cuda\ndef test_numba_is_the_other_backend():\n    pass\n\n"
                     "def test_not_marked():\n    pass\n")
    check = make_check(tmp_path, deadline=time.time() + 60)
    pathlib.Path(check.out).mkdir()
    result = gpu_check_steps.run_cuda_tests(check, "cupy", files=[tests])
    outcomes = ("passed", "failed", "skipped", "deselected")  # beside the warnings of an unregistered mark
    assert {word: result["counts"].get(word) for word in outcomes} == {"passed": 1, "failed": 1, "skipped": 1,
                                                                        "deselected": 2}
    assert result["passed"] is False and result["rc"] == 1
    assert [name.split("::")[-1] for name in result["failures"]] == ["test_cupy_fails"]
    assert "test_cupy_fails" in (pathlib.Path(check.out) / "pytest_cupy.txt").read_text()
    assert "- SKIPPED [1] " in "\n".join(result["summary"])  # why a test did not run


@pytest.mark.processes
def test_a_cuda_test_run_cut_by_the_deadline_is_counted_so_far(tmp_path):
    tests = tmp_path / "test_generated_slow.py"
    tests.write_text("import time\nimport pytest\n\n"
                     "@pytest.mark.cuda\n@pytest.mark.parametrize('case', ['a b', 'c'])\n"
                     "def test_cupy_passes(case):\n    pass\n\n"
                     "@pytest.mark.cuda\ndef test_cupy_fails():\n    assert False\n\n"
                     "@pytest.mark.cuda\ndef test_cupy_sleeps():\n    time.sleep(120)\n")
    check = make_check(tmp_path, deadline=time.time() + 10)
    pathlib.Path(check.out).mkdir()
    started = time.monotonic()
    result = gpu_check_steps.run_cuda_tests(check, "cupy", files=[tests])
    assert time.monotonic() - started < 30
    assert result["rc"] is None and result["passed"] is False
    assert result["counts"] == {"passed": 2, "failed": 1}
    assert [name.split("::")[-1] for name in result["failures"]] == ["test_cupy_fails"]
    assert "cut by the step's deadline" in result["note"]


@pytest.mark.emulator
def test_time_launches_on_the_host_stand_in_decodes_exactly():
    """The timing loop launches as gpu.launch_packed does: the LZ expansion first, then the kind-10 table
    stage (compact's coded tiles since format 10), then one decode launch per mode and channel count, each
    item's status in its launch's slice."""
    images = [make_image("labels", 40, 300, 1, np.uint8, 1),
              make_image("smooth_noise", 33, 70, 3, np.uint8, 2),
              make_image("labels", 24, 90, 3, np.uint8, 3)]
    items = [l3codec.encode(images[0], mode="fast"), l3codec.encode(images[1], mode="compact"),
             l3codec.encode(images[2], mode="compact")]
    timed = gpu_check_kernels.time_launches(gpu_check_kernels.EmulatedDevice(), items, repeat=2)
    names = [launch["name"] for launch in timed["launches"]]
    assert timed["expansions"] > 0 and names[:2] == [gpu_check_kernels.EXPANSION, gpu_check_kernels.ANS_TABLES]
    assert sorted(names[2:]) == ["decode compact 3 ch", "decode fast 1 ch"]
    assert timed["status_codes"] == [0, 0, 0]
    assert timed["samples"] == sum(image.size for image in images)
    for got, image in zip(timed["images"], images):
        np.testing.assert_array_equal(got.reshape(image.shape), image)


@pytest.mark.emulator
def test_the_gpu_steps_run_their_cupy_code_on_a_fake_cupy(tmp_path, monkeypatch):
    """The environment, smoke, timings and the ncu workload through their CuPy code (gpu.decode_batch,
    cuda_c's launches, events, the device queries, the occupancy call) on tests/fake_cupy.py: CuPy's
    calls over numpy, the kernels in the host emulation. The figures are the emulator's."""
    import fake_cupy

    fake_cupy.install(monkeypatch)
    check = make_check(tmp_path, quick=True, dry_run=False, gpu=True, frame_shape=(64, 160),
                       deadline=time.time() + 600)
    assert gpu_check_steps.step_env(check)["gpu"].startswith("Emulated sm_90 (fake CuPy) (sm_90, 132 SMs")
    smoke = gpu_check_kernels.step_smoke(check)
    assert smoke["passed"] and smoke["equal_to_cpu"] == [True] * 6
    kernels = {report["kernel"].split()[0] for report in smoke["occupancy"]}
    assert kernels == {"l3_decode_compact", "l3_decode_fast", "l3_expand_lz"}
    for report in smoke["occupancy"]:
        expected = (fake_cupy.BLOCKS_PER_SM, fake_cupy.REGISTERS)
        assert (report["blocks per SM"], report["registers"]) == expected
    timings = gpu_check_kernels.step_timings(check)
    assert timings["passed"] and not timings["cut_by_deadline"]
    assert timings["device"] == "Emulated sm_90 (fake CuPy)"
    batches = [(row["frames"], row["mode"], row["batch"]) for row in timings["rows"]]
    photos = [("photos", mode, batch) for mode in ("compact", "fast") for batch in (1, 4, 16)]
    assert batches == [*photos, ("labels", "compact", 16), ("labels", "fast", 16)]
    for row in timings["rows"]:  # photos: the implied rate and the whole decode_batch, timed
        if row["frames"] == "photos":
            assert row["implied issue rate"] > 0 and row["end_to_end_ms"] > 0
        else:
            assert "end_to_end_ms" not in row
    labels = [row for row in timings["rows"] if row["frames"] == "labels"]
    # every labels row times a stage before its decode: fast's LZ expansion; compact's label maps are
    # kind 10 since format 10 (smaller than its LZ streams), so its stage is the kind-10 tables
    assert all(row["expansion_ms"] > 0 for row in labels)
    stages = {row["mode"]: [launch["name"] for launch in row["launches"]][0] for row in labels}
    assert stages == {"fast": gpu_check_kernels.EXPANSION, "compact": gpu_check_kernels.ANS_TABLES}
    assert all(row["expansions"] for row in labels if row["mode"] == "fast")
    launches = gpu_check_kernels.ncu_workload(check)["launches"]
    decoded = [launch for launch in launches if launch["kernel"] != "l3_expand_lz"]
    assert sum(launch["samples"] for launch in decoded) == 2 * 4 * 64 * 160 * 3  # 4 photos a mode


FAKE_NCU = """#!{python}
# Runs the program after ncu's options, then writes one smsp__inst_executed.sum row per launch the
# workload listed (1000, 2000, ... instructions), as ncu --csv does, to the --log-file.
import json, pathlib, subprocess, sys

arguments = sys.argv[1:]
log = arguments[arguments.index("--log-file") + 1]
program = arguments[arguments.index("--log-file") + 2:]
done = subprocess.run(program)
context = json.loads(pathlib.Path(program[program.index("--context") + 1]).read_text())
launches = json.loads((pathlib.Path(context["work"]) / "ncu_launches.json").read_text())
lines = ["==PROF== Disconnected from process 7", ",".join(f'"{{name}}"' for name in (
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
    "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"))]
for index, launch in enumerate(launches):
    lines.append(f'"{{index}}","7","python3","host","{{launch["kernel"]}}","1","7","(128, 1, 1)","(8, 1, 1)",'
                 f'"0","9.0","Command line profiler metrics","smsp__inst_executed.sum","inst",'
                 f'"{{1000 * (index + 1):,}}"')
pathlib.Path(log).write_text("\\n".join(lines) + "\\n")
sys.exit(done.returncode)
"""


@pytest.mark.processes
@pytest.mark.emulator
def test_the_ncu_step_pairs_each_profiled_launch_with_its_samples(tmp_path, monkeypatch):
    """step_ncu with a stand-in ncu on PATH (it runs the workload on tests/fake_cupy.py and reports
    made-up instruction counts): each launch's count divided by that launch's samples, set beside
    the estimate for its kernel."""
    shim, tools = tmp_path / "shim", tmp_path / "tools"
    shim.mkdir()
    tools.mkdir()
    (shim / "cupy.py").write_text("import importlib\nimport sys\n\n"
                                  "sys.modules[__name__] = importlib.import_module('fake_cupy')\n")
    (tools / "ncu").write_text(FAKE_NCU.format(python=sys.executable))
    (tools / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    paths = [str(shim), str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    check = make_check(tmp_path, dry_run=False, gpu=True, frame_shape=(64, 160), deadline=time.time() + 300)
    pathlib.Path(check.out).mkdir()
    result = gpu_check_kernels.step_ncu(check)
    assert result["passed"], result
    launches = json.loads((tmp_path / "work" / "ncu_launches.json").read_text())
    assert [row["kernel"] for row in result["measured"]] == [launch["kernel"] for launch in launches]
    estimate, _ = gpu_check_kernels.estimated_per_sample()
    for index, row in enumerate(result["measured"]):
        assert row["warp-inst / sample"] == pytest.approx(1000 * (index + 1) / launches[index]["samples"])
        part = "expansion" if row["kernel"] == "l3_expand_lz" else "decode"
        assert row["estimate"] == estimate[row["mode"]][part]
    assert {row["mode"] for row in result["measured"]} == {"compact", "fast"}


@pytest.mark.processes
@pytest.mark.emulator
def test_dry_run_runs_the_cpu_side_and_names_the_steps_skipped_for_want_of_a_gpu(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--dry-run", "--out", str(out),
               "--work", str(tmp_path / "work"), "--corpus", str(tmp_path / "no-corpus"),
               "--frame-shape", "64x160"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    names = [step.name for step in gpu_check.default_steps()]
    assert list(results["steps"]) == names
    gpu_steps = [step.name for step in gpu_check.default_steps() if step.needs_gpu]
    for step in gpu_check.default_steps():
        outcome = results["steps"][step.name]["outcome"]
        if step.stand_in:
            assert outcome == "skipped: no GPU (--dry-run); host stand-in ok", step.name
        elif step.needs_gpu:
            assert outcome == "skipped: no GPU (--dry-run)", step.name
        else:
            assert outcome == "ok", (step.name, results["steps"][step.name])
    assert results["steps"]["frames"]["result"]["source"].startswith("generated")
    summary = (out / "summary.md").read_text()
    assert f"Skipped for want of a GPU: {', '.join(gpu_steps)}." in summary
    assert re.search(r"Frames: generated \(.*no-corpus absent\)", summary)
    for name in names:
        assert f"| {name} | {results['steps'][name]['outcome']} |" in summary
    timings = results["steps"]["timings"]["result"]
    assert all(row["equal_to_cpu"] and row["status_ok"] for row in timings["rows"])
    assert any(row["expansions"] for row in timings["rows"])  # the label maps' LZ streams were expanded
    assert results["steps"]["loader"]["result"]["equal"]["compact"]["batches"] > 0
    assert sorted(os.listdir(out)) == ["results.json", "steps.log", "summary.md"]
