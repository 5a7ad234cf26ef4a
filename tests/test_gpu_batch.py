"""gpu.decode_batch on a real GPU, both backends: the gpu_cases batch, hand-made faults and damaged
items, each against the CPU decoder. Marked `cuda`: skipped where no GPU is present (the same
kernels run without one under tests/test_cuda_c.py's emulation and tests/test_numba_cuda.py's
simulator)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import l3codec
from corruption import mutate_payload, status_cases
from gpu_cases import crop_regions, encoded_images
from l3codec import format as fmt

pytestmark = pytest.mark.cuda
BACKENDS = ["cupy", "numba"]


def _gpu(backend):
    if backend == "cupy":
        pytest.importorskip("cupy", reason="cupy is not installed")
    from l3codec import gpu

    return gpu


def _host(array):
    return array.get() if hasattr(array, "get") else array.copy_to_host()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_cases_match_the_cpu_decoder(backend):
    """Compact and fast, 8- and 16-bit, 1-4 channels, partial tiles: whole images and regions."""
    gpu = _gpu(backend)
    images, datas = encoded_images()
    for got, data, image in zip(gpu.decode_batch(datas, backend=backend), datas, images):
        np.testing.assert_array_equal(_host(got), l3codec.decode(data))
        np.testing.assert_array_equal(_host(got), image)
    regions = crop_regions(images)
    for got, data, region in zip(gpu.decode_batch(datas, backend=backend, regions=regions), datas, regions):
        np.testing.assert_array_equal(_host(got), l3codec.decode(data, region=region))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(status_cases()))
def test_hand_made_faults_give_the_cpu_decoders_status(backend, name):
    """corruption.status_cases, among them the run past the row end that compact.cu once accepted."""
    gpu = _gpu(backend)
    data, code = status_cases()[name]
    good = encoded_images()[1][0]
    if code == fmt.STATUS_OK:
        decoded = gpu.decode_batch([good, data], backend=backend)
        np.testing.assert_array_equal(_host(decoded[1]), l3codec.decode(data))
    else:
        message = re.escape(fmt.STATUS_MESSAGES[code])
        with pytest.raises(l3codec.L3Error, match=f"1 corrupt batch item.*item 1: {message}"):
            gpu.decode_batch([good, data], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_damaged_items_are_rejected_exactly_when_the_cpu_rejects_them(backend):
    gpu = _gpu(backend)
    _, datas = encoded_images()
    rng = np.random.default_rng(21)
    rejected = 0
    for source in range(len(datas)):
        for _ in range(4):
            damaged = mutate_payload(datas[source], rng)
            try:
                expected = l3codec.decode(damaged)
            except l3codec.L3Error:
                rejected += 1
                with pytest.raises(l3codec.L3Error, match="item 1:"):
                    gpu.decode_batch([datas[0], damaged], backend=backend)
                continue
            decoded = gpu.decode_batch([datas[0], damaged], backend=backend)
            np.testing.assert_array_equal(_host(decoded[1]), expected)
    assert rejected > 0


_CACHE_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from gpu_cases import encoded_images
from l3codec import gpu
from l3codec.kernels import numba_kernels
gpu.decode_batch(encoded_images()[1], backend="numba")
kernels = (numba_kernels.decode_compact, numba_kernels.decode_fast)
print(sum(sum(k._cache_hits.values()) for k in kernels), sum(sum(k._cache_misses.values()) for k in kernels))
"""


def test_numba_kernels_load_from_the_disk_cache_in_a_new_process():
    _gpu("numba")
    here = os.path.dirname(__file__)
    runs = [
        subprocess.run([sys.executable, "-c", _CACHE_PROBE, here], capture_output=True, text=True,
                       timeout=600)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    hits, misses = (int(v) for v in runs[1].stdout.split()[-2:])
    assert (hits, misses) == (2, 0)  # both kernels came from the cache the first run filled


def test_a_batch_mixing_channel_counts_launches_once_per_mode_and_channel_count():
    """Label maps (1 channel) and images (3) of one mode get separate launches, so label tiles do
    not run with the image tiles' idle warps and shared memory; every item still decodes."""
    import l3codec
    from l3codec import batch as l3batch

    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (24, 40, 3), dtype=np.uint8), rng.integers(0, 8, (24, 40), dtype=np.uint8),
              rng.integers(0, 256, (16, 32, 3), dtype=np.uint8)]
    items = [l3codec.encode(image, mode="fast") for image in images]
    prepared = l3batch.prepare(items)
    assert [(launch.mode, launch.max_channels, launch.item_index.tolist()) for launch in prepared.launches] == [
        (fmt.MODE_FAST, 1, [1]), (fmt.MODE_FAST, 3, [0, 2])]
    assert all(int(launch.items["channels"].min()) == launch.max_channels for launch in prepared.launches)
