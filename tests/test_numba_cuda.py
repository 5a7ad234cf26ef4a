"""Numba CUDA kernels: simulated (NUMBA_ENABLE_CUDASIM=1) against the CPU decoder, and type-checked for sm_90."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import l3codec
from gpu_cases import crop_regions, encoded_images

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def simulated():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    completed = subprocess.run(
        [sys.executable, str(TESTS / "simulated_gpu.py")], env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


def test_simulated_mixed_batch_matches_cpu_decoder(simulated):
    assert simulated["mixed batch"] == [True] * len(encoded_images()[0])
    assert all(simulated["mixed batch matches source"])


def test_simulated_regions_match_cpu_region_decode(simulated):
    assert simulated["regions"] == [True] * len(encoded_images()[0])


def test_simulated_same_shape_batch(simulated):
    assert simulated["same shape stacked"] == [True, True]


def test_simulated_corrupt_item_is_reported_like_the_cpu(simulated):
    outcomes = simulated["corrupt item"]
    assert len(outcomes) == 6
    for cpu_ok, gpu_ok, consistent in outcomes:
        assert cpu_ok == gpu_ok
        assert consistent  # same pixels when both decode; the error names item 1 when both refuse
    assert any(not cpu_ok for cpu_ok, _, _ in outcomes)


def test_kernels_type_check_for_sm90():
    """compile_ptx needs no GPU: it type-checks and lowers every kernel for compute capability 9.0."""
    cuda = pytest.importorskip("numba.cuda")
    from numba import types

    from l3codec.kernels import numba_kernels

    signature = (
        types.Array(types.uint8, 1, "C", readonly=True),
        types.int64[::1],
        types.int64[::1],
        types.int64[:, ::1],
        types.int64[:, ::1],
        types.int64,
        types.int64,
        types.uint8[::1],
        types.int32[::1],
    )
    for kernel in (numba_kernels.decode_compact, numba_kernels.decode_fast):
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
        assert ".target sm_90" in ptx
        assert ".entry" in ptx


def test_batch_tables_are_validated_before_launch():
    from l3codec import batch

    images, datas = encoded_images()
    with pytest.raises(l3codec.L3Error, match="batch item 2"):
        batch.prepare([datas[0], datas[1], datas[2][:-3]])
    with pytest.raises(l3codec.L3Error, match="batch item 1: region"):
        batch.prepare(datas[:2], [None, (0, 0, 999, 1)])
    with pytest.raises(l3codec.L3Error, match="max_pixels"):
        batch.prepare(datas, max_pixels=10)
    prepared = batch.prepare(datas, crop_regions(images))
    for launch in prepared.launches:
        items = launch.items
        assert np.all(items["region_y"] + items["region_h"] <= items["height"])
        assert np.all(launch.tasks["item"] < len(items))
        # every task's tile intersects its item's region
        tile_y0 = launch.tasks["tile_y"] * items["tile_height"][launch.tasks["item"]]
        region_y = items["region_y"][launch.tasks["item"]]
        assert np.all(tile_y0 < region_y + items["region_h"][launch.tasks["item"]])
    assert prepared.out_size >= sum(np.prod(s) * d.itemsize for s, d in zip(prepared.shapes, prepared.dtypes))


def test_unknown_backend_is_refused():
    from l3codec import gpu

    with pytest.raises(l3codec.L3Error, match="backend"):
        gpu.decode_batch(encoded_images()[1][0], backend="opencl")
