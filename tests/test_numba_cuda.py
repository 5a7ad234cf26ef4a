"""Numba CUDA kernels: simulated (NUMBA_ENABLE_CUDASIM=1) against the CPU decoder, and type-checked for sm_90."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import l3codec
from corruption import status_cases
from gpu_cases import crop_regions, encoded_images
from stream_census import fast_census, stream_census

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def simulated():
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install -e \".[gpu]\")")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    completed = subprocess.run(
        [sys.executable, str(TESTS / "simulated_gpu.py")], env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


def test_gpu_cases_reach_every_fast_group_code():
    """The shared GPU batch holds packed, Rice, sparse and bitmap groups at both sample depths."""
    forms = ("sparse", "packed", "rice", "bitmap")
    reached = set()
    for data in encoded_images()[1]:
        info = l3codec.info(data)
        if info.mode == "fast":
            census = fast_census(data)
            reached |= {(form, info.bits) for form in forms if census[form]}
    assert reached == {(form, bits) for form in forms for bits in (8, 16)}, reached


def test_gpu_cases_hold_palette_tiles():
    """Palette streams of one and of several channels (with members), in both modes."""
    reached = set()
    for data in encoded_images()[1]:
        info = l3codec.info(data)
        census = stream_census(data)
        if census["palette"]:
            reached.add((info.mode, info.channels > 1 and census["member"] > 0))
    assert reached == {(mode, several) for mode in ("compact", "fast") for several in (False, True)}, reached


@pytest.mark.emulator
def test_simulated_mixed_batch_matches_cpu_decoder(simulated):
    assert simulated["mixed batch"] == [True] * len(encoded_images()[0])
    assert all(simulated["mixed batch matches source"])


@pytest.mark.emulator
def test_simulated_regions_match_cpu_region_decode(simulated):
    assert simulated["regions"] == [True] * len(encoded_images()[0])


@pytest.mark.emulator
def test_simulated_same_shape_batch(simulated):
    assert simulated["same shape stacked"] == [True, True]


@pytest.mark.emulator
def test_simulated_wide_and_tall_tiles_are_staged_in_rings(simulated):
    assert simulated["staged in strips and bands"] == [True] * 6


@pytest.mark.emulator
def test_simulated_out_buffers_and_device_items(simulated):
    outcomes = simulated["out and device items"]
    assert outcomes["stacked out"] is True
    assert "must be a device array" in outcomes["host out"]
    assert "C-contiguous" in outcomes["strided out"]
    assert outcomes["device item"] is True
    assert "batch item 1: payload checksum mismatch" in outcomes["corrupt device item"]


@pytest.mark.emulator
def test_simulated_corrupt_item_is_reported_like_the_cpu(simulated):
    outcomes = simulated["corrupt item"]
    assert len(outcomes) == 6
    for cpu_ok, gpu_ok, consistent in outcomes:
        assert cpu_ok == gpu_ok
        assert consistent  # same pixels when both decode; the error names item 1 when both refuse
    assert any(not cpu_ok for cpu_ok, _, _ in outcomes)


@pytest.mark.emulator
def test_simulated_hand_made_faults_give_the_cpu_decoders_status(simulated):
    """corruption.status_cases through decode_batch(backend="numba"): every status code, a run past
    the row end, and streams with several faults, where the first failing row decides."""
    expected = {name: code for name, (_, code) in status_cases().items()}
    assert simulated["status cases"] == expected


@pytest.mark.emulator
def test_simulated_status_is_the_first_failing_bands_whatever_the_block_order(simulated):
    """The cases of a tile of two bands, each band a block, run last band first: the item's status is
    still the CPU decoder's (its first failing band's), though a later band may fail too."""
    reversed_codes = simulated["status cases, tasks reversed"]
    two_band_cases = [name for name, (data, _) in status_cases().items() if l3codec.info(data).height > 32]
    assert len(reversed_codes) == len(two_band_cases) >= 8 and "compact first band corrupt, second band's row past the end" in reversed_codes
    assert reversed_codes == {name: code for name, (_, code) in status_cases().items() if name in reversed_codes}


@pytest.mark.emulator
def test_simulated_fast_kernel_at_its_real_block_size(simulated):
    assert simulated["fast at 128 threads"] is True


@pytest.mark.compile
def test_kernels_are_cached_on_the_content_of_what_they_compile(tmp_path):
    """numba-cuda's on-disk cache checks a source stamp before using a cached kernel: it must be the
    content digest of every file the kernels compile, not numba_kernels.py's mtime and size, so
    editing compact.py (say INITIAL_COUNT) or a kernels/ file recompiles them."""
    import shutil

    from numba.cuda.dispatcher import CUDACache

    from l3codec.kernels import numba_kernels

    digest = numba_kernels.source_digest()
    for name in numba_kernels.SIGNATURES:
        cache = getattr(numba_kernels, name)._cache
        assert isinstance(cache, CUDACache)
        assert cache._impl.locator.get_source_stamp() == digest
        assert cache._cache_file._source_stamp == digest  # what a cached index must carry to be used
    package, kernels = tmp_path / "l3codec", tmp_path / "kernels"
    shutil.copytree(pathlib.Path(l3codec.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(pathlib.Path(numba_kernels.__file__).parent, kernels,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert numba_kernels.source_digest((package, kernels)) == digest
    source = (package / "compact.py").read_text()
    (package / "compact.py").write_text(source.replace("INITIAL_COUNT = 1", "INITIAL_COUNT = 2"))
    edited = numba_kernels.source_digest((package, kernels))
    assert edited != digest
    (package / "compact.py").write_text(source)
    (kernels / "l3_common.cuh").write_text((kernels / "l3_common.cuh").read_text() + "\n")
    assert numba_kernels.source_digest((package, kernels)) not in (digest, edited)


@pytest.mark.compile
def test_kernels_type_check_for_sm90():
    """compile_ptx needs no GPU: it type-checks and lowers every kernel for compute capability 9.0."""
    from l3codec.kernels import numba_kernels

    for name in numba_kernels.SIGNATURES:
        ptx = numba_kernels.compile_ptx(name, cc=(9, 0))
        assert ".target sm_90" in ptx
        assert ".entry" in ptx


@pytest.mark.compile
def test_kernels_fit_a_block_without_spills():
    """ptxas (through nvJitLink) on the kernels' PTX: no spills, registers for a full block,
    and shared memory within what a block gets without opting in."""
    from l3codec.kernels import numba_kernels

    report = numba_kernels.resource_report(cc=(9, 0))
    assert set(report) == set(numba_kernels.SIGNATURES)
    for name, entry in report.items():
        assert entry["spill_stores"] == 0 and entry["spill_loads"] == 0, (name, entry)
        assert entry["registers"] * numba_kernels.LAUNCH_THREADS[name] <= 65536, (name, entry)
    assert report["decode_compact"]["shared"] <= numba_kernels.SHARED_LIMIT
    assert report["decode_fast"]["shared"] <= numba_kernels.FAST_STATIC_SHARED


def test_fast_launch_geometry_stays_within_shared_memory():
    from l3codec import batch
    from l3codec.kernels import numba_kernels

    for channels, tile_width, dtype in [(4, 256, np.uint16), (3, 1024, np.uint8), (1, 4096, np.uint16)]:
        image = np.zeros((9, tile_width + 3, channels), dtype)
        launch, = batch.prepare([l3codec.encode(image, mode="fast", tile_width=tile_width)]).launches
        _, _, block, shared, (rows,) = numba_kernels.launch_geometry(launch)
        assert block == (numba_kernels.FAST_THREADS,)
        assert 2 <= rows <= launch.max_tile_height + 1
        assert shared + numba_kernels.FAST_STATIC_SHARED <= numba_kernels.SHARED_LIMIT
    wide = l3codec.encode(np.zeros((2, 4096, 4), np.uint16), mode="fast", tile_width=4096)
    with pytest.raises(RuntimeError, match="shared memory"):
        numba_kernels.launch_geometry(batch.prepare([wide]).launches[0])
    # items that fit alone fit together: the ring is sized per item, not by the widest (a launch
    # holds one channel count: 4-channel items would go to a launch of their own)
    narrow = l3codec.encode(np.zeros((2, 256), np.uint8), mode="fast", tile_width=256)
    single = l3codec.encode(np.zeros((2, 4096), np.uint16), mode="fast", tile_width=4096)
    launch, = batch.prepare([narrow, single]).launches
    assert len(batch.prepare([narrow, wide]).launches) == 2
    _, _, _, shared, (rows,) = numba_kernels.launch_geometry(launch)
    assert shared + numba_kernels.FAST_STATIC_SHARED <= numba_kernels.SHARED_LIMIT
    assert rows == numba_kernels.fast_ring_rows(batch.prepare([single]).launches[0])


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


def test_kernel_cache_degrades_to_no_cache_if_numba_cuda_internals_change(monkeypatch):
    """cached_on_content patches numba-cuda's private cache classes: without them, the kernel is
    still built (uncached, with a warning) rather than the import failing or a stale cache used."""
    from numba import config
    from numba.cuda.core.caching import CacheImpl

    from l3codec.kernels import numba_kernels

    def kernel(out):
        out[0] = 1

    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    monkeypatch.delattr(CacheImpl, "_locator_classes")
    numba_kernels._content_keyed_cache_class.cache_clear()
    try:
        uncached = numba_kernels.cuda.jit(kernel)
        default_cache = uncached._cache  # numba-cuda's no-op cache
        with pytest.warns(RuntimeWarning, match="cache internals have changed .*compiled in every process"):
            assert numba_kernels.cached_on_content(uncached) is uncached
        assert uncached._cache is default_cache
    finally:
        numba_kernels._content_keyed_cache_class.cache_clear()
