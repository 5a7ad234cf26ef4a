"""Host-side fixes of issue #38 that a CPU can show (no GPU needed)."""

import importlib.util
import pathlib
import types

from kernels import cuda_c

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_name_accepts_str_and_bytes():
    # numba-cuda 0.30 gives a str; older versions bytes
    bench = load_bench()
    assert bench.device_name(types.SimpleNamespace(name="NVIDIA H100 80GB HBM3")) == "NVIDIA H100 80GB HBM3"
    assert bench.device_name(types.SimpleNamespace(name=b"NVIDIA A100")) == "NVIDIA A100"


def test_expand_grid_reads_no_kernel_source(monkeypatch):
    # it runs once a batch: its sizes are Python constants (the kernels get them generated), not parsed
    def no_reading(*args, **kwargs):
        raise AssertionError("expand_grid read a file")

    monkeypatch.setattr(pathlib.Path, "read_text", no_reading)
    warps = cuda_c.LZ_WARPS_PER_BLOCK
    for count in (1, 5, 7, 100):
        assert cuda_c.expand_grid(count) == ((-(-count // warps),), (32 * warps,),
                                             warps * cuda_c.LZ_SHARED_BYTES_PER_WARP)


def test_numba_staging_is_pinned_once_and_reused(monkeypatch):
    import numpy as np
    from numba import cuda

    from l3codec import gpu

    calls = []
    monkeypatch.setattr(cuda, "pinned_array", lambda size, dtype: calls.append(size) or np.zeros(size, dtype))
    monkeypatch.setattr(gpu, "_numba_pinned", type(gpu._numba_pinned)())
    first = gpu.numba_staging(1000)
    for size in (10, 1000, 500):
        assert gpu.numba_staging(size).size == size
    assert calls == [1000]
    assert np.shares_memory(first, gpu.numba_staging(1000))
    assert gpu.numba_staging(5000).size == 5000 and calls == [1000, 5000]  # grows when a batch is larger


def test_emulate_frames_0_writes_the_report_without_emulating(tmp_path, monkeypatch):
    # bench/gpu.py --emulate-frames 0: traffic_report divided by the emulated frames' compressed bytes,
    # none (ZeroDivisionError); now neither emulated section runs. The compiler and disassembler
    # sections are stubbed (seconds each, and not what this checks)
    import sys

    import cv2
    import numpy as np

    bench = load_bench()
    folder = tmp_path / "frames"
    folder.mkdir()
    frame = (np.arange(24 * 40 * 3) % 251).astype(np.uint8).reshape(24, 40, 3)
    assert cv2.imwrite(str(folder / "frame.png"), frame)
    monkeypatch.setattr(bench, "gpu_present", lambda: False)
    monkeypatch.setattr(bench, "ptxas_report", lambda out: print("ptxas stub", file=out))
    monkeypatch.setattr(bench, "sass_report", lambda out: {})
    monkeypatch.setattr(sys, "argv", ["gpu.py", str(folder), "--emulate-frames", "0", "--out", str(tmp_path)])
    assert bench.main() == 0
    report = (tmp_path / "gpu.md").read_text()
    assert "## Estimate (no GPU here)" in report and "ptxas stub" in report
    assert "Global memory traffic" not in report  # nothing emulated
