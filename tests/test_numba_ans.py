"""Numba CUDA kernels on compact v2 (stream kind 10) under NUMBA_ENABLE_CUDASIM=1: batches mixing kind-1
and kind-10 tile-channels against their sources, and damaged kind-10 streams against the CPU decoder's
status (tests/simulated_ans.py runs them in a subprocess)."""

import json
import os
import pathlib
import subprocess
import sys

import ans_cases
import numpy as np
import pytest
from corruption import first_cpu_status

from l3codec.format import STATUS_BAD_HEADER, STATUS_BAD_KIND, STATUS_BAD_SIZE, STATUS_CORRUPT

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def simulated():
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install -e \".[gpu]\")")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    completed = subprocess.run(
        [sys.executable, str(TESTS / "simulated_ans.py")], env=env, capture_output=True, text=True,
        timeout=900, check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


@pytest.mark.emulator
def test_simulated_mixed_kind_1_and_kind_10_batch_matches_source(simulated):
    items = len(ans_cases.MIXED) + len(ans_cases.ENCODED)
    assert simulated["mixed batch"] == [True] * items  # the CPU decoder's pixels
    assert simulated["mixed batch matches source"] == [True] * items
    sorts = simulated["kind-10 streams"]
    assert all(item["streams"] > 0 for item in sorts)
    depths = [case[4] for case in ans_cases.MIXED + ans_cases.ENCODED]
    assert {depth for depth, item in zip(depths, sorts) if item["biased"]} == {np.uint8, np.uint16}
    assert any(item["palette"] and item["lz"] for item in sorts)  # both stages' scratch in one batch


@pytest.mark.emulator
def test_simulated_kind_10_regions_match_the_cpu_decoder(simulated):
    assert simulated["regions"] == [True] * (len(ans_cases.MIXED) + len(ans_cases.ENCODED))


@pytest.mark.emulator
def test_simulated_kind_10_faults_give_the_cpu_decoders_status(simulated):
    """Each fault of ans_cases.FAULTS (header, bias table, table set, row-length table, rows in either band,
    the end-of-stream size) fails with the CPU decoder's status, whatever order the bands' blocks run in;
    the stream decoder (ans_cpu.decode_stream) gives the same."""
    files = ans_cases.fault_files()
    expected = {name: first_cpu_status(data) for name, (data, _) in files.items()}
    assert expected == {name: ans_cases.cpu_stream_status(stream) for name, (_, stream) in files.items()}
    assert all(expected.values()), expected
    assert set(expected.values()) == {STATUS_BAD_SIZE, STATUS_BAD_HEADER, STATUS_CORRUPT}
    assert simulated["fault statuses"] == expected
    assert simulated["fault statuses, tasks reversed"] == expected
    # and this process's files and decoder are the simulator's fresh process's (an NVRTC compile in the
    # suite once wrote over CPython's shared b" ": see test_cuda_c's bytes test)
    assert simulated["cpu fault statuses"] == expected


@pytest.mark.emulator
def test_simulated_kind_10_in_a_fast_file_is_a_bad_kind(simulated):
    assert simulated["fast file with a kind-10 stream"] == first_cpu_status(ans_cases.fast_file_with_kind10())
    assert simulated["fast file with a kind-10 stream"] == STATUS_BAD_KIND


@pytest.mark.emulator
def test_simulated_fuzzed_kind_10_streams_give_the_cpu_decoders_status(simulated):
    """Random bit flips in kind-10 streams (ans_cases.fuzzed_files), bands run last first: each item's
    status is the CPU decoder's first failing stream's."""
    expected = [first_cpu_status(data) for data in ans_cases.fuzzed_files()]
    assert simulated["fuzzed statuses"] == expected
    assert len(set(expected)) >= 2
