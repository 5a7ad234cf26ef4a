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


def test_expand_grid_parses_lz_cu_once(monkeypatch):
    cuda_c.expand_constants.cache_clear()
    calls = []
    real = cuda_c.header_constants
    monkeypatch.setattr(cuda_c, "header_constants", lambda *a: calls.append(a) or real(*a))
    first = cuda_c.expand_grid(5)
    for count in (1, 7, 100):
        cuda_c.expand_grid(count)
    assert len(calls) == 1
    assert first == cuda_c.expand_grid(5)
