"""l3codec.cpu's thread pool: every range covered once, and the same bytes and pixels at any thread count."""

import threading

import numba
import numpy as np
import pytest

import l3codec
from l3codec import cpu


@pytest.mark.parametrize("count", [1, 2, 7, 100])
@pytest.mark.parametrize("threads", [1, 2])
def test_ranges_cover_every_index_once(count, threads):
    seen = []
    workers = set()

    def driver(tag, first, stop):
        assert tag == "arg"
        seen.extend(range(first, stop))
        workers.add(threading.get_ident())

    previous = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        cpu._in_parallel(driver, count, "arg")
    finally:
        numba.set_num_threads(previous)
    assert sorted(seen) == list(range(count))
    if threads == 1 or count == 1:
        assert workers == {threading.get_ident()}  # no pool: run where called


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_same_result_at_one_and_all_threads(mode):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("NUMBA_NUM_THREADS is 1: there is no second thread count to compare with")
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (70, 600, 3), dtype=np.uint8)
    image[:, 300:] //= 16  # flat and noisy tiles side by side: streams of different cost
    results = []
    previous = numba.get_num_threads()
    for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
        numba.set_num_threads(threads)
        try:
            data = l3codec.encode(image, mode=mode, tile_width=64)
            results.append((data, l3codec.decode(data)))
        finally:
            numba.set_num_threads(previous)
    assert len(results) == 2
    for data, pixels in results:
        assert data == results[0][0]
        assert np.array_equal(pixels, image)
