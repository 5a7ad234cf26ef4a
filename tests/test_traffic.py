"""The emulator's global memory traffic counters (kernels/cuda_emulation.h): a small probe
kernel with known access patterns, then invariants of the l3codec kernels' traffic.

Expected counts are derived here from each pattern's addresses, the way a GPU coalesces a
warp's accesses: one warp instruction per execution by the warp, one 32-byte sector per
distinct (offset // 32) among its lanes' bytes.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from l3codec.kernels.emulation import (
    BUILD_FLAGS,
    ORDERS,
    TRAFFIC_EXPORTS,
    TRAFFIC_REGIONS,
    Traffic,
    WarpCoverage,
    bind_traffic,
    build_library,
    decode_batch_emulated,
)

import l3codec
from l3codec import batch as l3batch
from stream_census import stream_census

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SECTOR = 32
WARP = 32
LOADS, STORES, BYTE_STORES, LANE_LOOP, REPEAT_ACROSS_SYNC = range(5)

_PROBE = r"""
// Each pattern's global accesses, per thread t of the grid and lane = t % 32.
extern "C" __global__ void probe(const unsigned* in, unsigned* out, unsigned char* bytes, int pattern,
                                 int stride, int offset) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    unsigned local[4] = {1, 2, 3, 4};  // stack memory: never counted
    if (pattern == 0) {  // LOADS: a 4-byte word every `stride` words, the sum stored coalesced
        out[t] = in[t * stride] + local[lane & 3];
    } else if (pattern == 1) {  // STORES: 4-byte words every `stride` words
        out[t * stride] = (unsigned)t;
    } else if (pattern == 2) {  // BYTE_STORES: consecutive bytes from `offset`
        bytes[offset + t] = (unsigned char)t;
    } else if (pattern == 3) {  // LANE_LOOP: lane l runs l + 1 iterations, row i of 32 words
        unsigned sum = 0;
        for (int i = 0; i <= lane; ++i) sum += in[i * 32 + lane];
        out[t] = sum;
    } else {  // REPEAT_ACROSS_SYNC: the same load before and after a rendezvous
        const unsigned a = in[lane];
        __syncwarp();
        out[t] = a + in[lane];
    }
}
"""

_PROBE_SHIM = r"""
CUDA_EMU_TRAFFIC_CALLBACKS();
CUDA_EMU_COVERAGE_CALLBACK();
%(exports)s
extern "C" void probe(const unsigned*, unsigned*, unsigned char*, int, int, int);
extern "C" int probe_launch(int grid, int threads, int order, const unsigned* in, unsigned* out,
                            unsigned char* bytes, int pattern, int stride, int offset) {
    return cuda_emu::launch(dim3(grid), dim3(threads), 0, order, 7, [=] {
        probe(in, out, bytes, pattern, stride, offset);
    });
}
"""

_probe_libraries = {}


def probe_library(build="traffic") -> ctypes.CDLL:
    if build not in _probe_libraries:
        lib = build_library(
            f"{build}-probe",
            [],
            {"probe.cu": _PROBE, "probe_shim.cpp": _PROBE_SHIM % {"exports": TRAFFIC_EXPORTS}},
            kernel_flags=BUILD_FLAGS[build],
        )
        bind_traffic(lib)
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        lib.probe_launch.argtypes = [i32, i32, i32, ptr, ptr, ptr, i32, i32, i32]
        lib.probe_launch.restype = i32
        _probe_libraries[build] = lib
    return _probe_libraries[build]


def run_probe(pattern, *, grid=1, threads=32, stride=1, offset=0, order="forward"):
    """Traffic of one probe launch: in/out/bytes are regions 0, 5 and 6 (data, out, status)."""
    lib = probe_library()
    count = grid * threads
    words = np.arange(max(count * stride, 32 * 32), dtype=np.uint32)
    out = np.zeros(count * stride, np.uint32)
    raw = np.zeros(offset + count, np.uint8)
    regions = dict.fromkeys(TRAFFIC_REGIONS, None)
    regions.update(data=words, out=out, status=raw)
    for index, name in enumerate(TRAFFIC_REGIONS):
        array = regions[name]
        lib.l3emu_traffic_region(
            index, array.ctypes.data if array is not None else None, array.nbytes if array is not None else 0
        )
    traffic = Traffic()
    lib.l3emu_traffic_start()
    result = lib.probe_launch(
        grid,
        threads,
        ORDERS[order],
        words.ctypes.data,
        out.ctypes.data,
        raw.ctypes.data,
        pattern,
        stride,
        offset,
    )
    lib.l3emu_traffic_stop()
    assert result == 0
    traffic.add_from(lib)
    return traffic, words, out, raw


def coalesce(lane_ranges) -> tuple:
    """(sectors, whole sectors) of one warp instruction whose lanes access [start, end) byte ranges."""
    covered = {}
    for start, end in lane_ranges:
        for byte in range(start, end):
            covered.setdefault(byte // SECTOR, set()).add(byte % SECTOR)
    return len(covered), sum(len(bytes_) == SECTOR for bytes_ in covered.values())


def counts(traffic, region, write):
    return {field: traffic.get(region, write, field) for field in Traffic.COUNT_FIELDS}


@pytest.mark.parametrize("stride", [1, 2, 8, 9])
def test_strided_loads(stride):
    grid, threads = 2, 64
    traffic, words, out, _ = run_probe(LOADS, grid=grid, threads=threads, stride=stride)
    sums = words[: grid * threads * stride : stride] + np.tile([1, 2, 3, 4], grid * threads // 4)
    assert np.array_equal(out[: grid * threads], sums)
    warps = grid * threads // WARP
    sectors = sum(
        coalesce((4 * t * stride, 4 * t * stride + 4) for t in range(w * WARP, (w + 1) * WARP))[0]
        for w in range(warps)
    )
    assert counts(traffic, "data", False) == {
        "lane_accesses": grid * threads,
        "bytes": 4 * grid * threads,
        "instructions": warps,
        "sectors": sectors,
        "full_sectors": sum(
            coalesce((4 * t * stride, 4 * t * stride + 4) for t in range(w * WARP, (w + 1) * WARP))[1]
            for w in range(warps)
        ),
    }
    if stride == 1:
        assert sectors == warps * WARP * 4 // SECTOR  # 4 sectors per warp
    if stride == 8:
        assert sectors == warps * WARP  # a sector per lane
    # the coalesced stores of the sums, and nothing counted from the stack array
    assert counts(traffic, "out", True)["sectors"] == warps * 4
    assert counts(traffic, "out", True)["full_sectors"] == warps * 4
    assert sum(traffic.counts[(r, w)].sum() for r in TRAFFIC_REGIONS for w in (False, True)) == sum(
        traffic.counts[key].sum() for key in (("data", False), ("out", True))
    )


@pytest.mark.parametrize("offset", [0, 1, 31, 32])
def test_byte_stores_fill_sectors_only_when_aligned(offset):
    grid, threads = 3, 96
    traffic, _, _, raw = run_probe(BYTE_STORES, grid=grid, threads=threads, offset=offset)
    assert np.array_equal(raw[offset:], np.arange(grid * threads, dtype=np.uint8))
    per_warp = [
        coalesce((offset + t, offset + t + 1) for t in range(w * WARP, (w + 1) * WARP))
        for w in range(grid * threads // WARP)
    ]
    c = counts(traffic, "status", True)
    assert c["instructions"] == len(per_warp)
    assert c["bytes"] == grid * threads
    assert c["sectors"] == sum(s for s, _ in per_warp)
    assert c["full_sectors"] == sum(f for _, f in per_warp)
    assert (c["full_sectors"] == c["sectors"]) == (offset % SECTOR == 0)


def test_strided_stores_touch_a_sector_per_lane():
    traffic, _, out, _ = run_probe(STORES, threads=64, stride=8)
    assert np.array_equal(out[::8], np.arange(64))
    c = counts(traffic, "out", True)
    assert (c["instructions"], c["sectors"], c["full_sectors"]) == (2, 64, 0)


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_a_loop_issues_one_instruction_per_iteration_of_its_longest_lane(order):
    traffic, words, out, _ = run_probe(LANE_LOOP, threads=64, order=order)
    lanes = np.arange(64) % WARP
    assert np.array_equal(out[:64], [words[[i * 32 + lane for i in range(lane + 1)]].sum() for lane in lanes])
    # iteration i: the lanes l >= i of each warp load words i * 32 + l
    per_iteration = [
        coalesce((4 * (i * 32 + lane), 4 * (i * 32 + lane) + 4) for lane in range(i, WARP))[0]
        for i in range(WARP)
    ]
    c = counts(traffic, "data", False)
    assert c["instructions"] == 2 * WARP
    assert c["lane_accesses"] == 2 * sum(lane + 1 for lane in range(WARP))
    assert c["sectors"] == 2 * sum(per_iteration)


def test_a_rendezvous_separates_executions_of_one_load():
    traffic, words, out, _ = run_probe(REPEAT_ACROSS_SYNC, threads=32)
    assert np.array_equal(out[:32], 2 * words[:32])
    c = counts(traffic, "data", False)
    assert (c["instructions"], c["lane_accesses"], c["sectors"]) == (2, 64, 2 * 4)


def test_counts_start_from_zero():
    first = run_probe(LOADS, stride=1)[0]
    again = run_probe(LOADS, stride=1)[0]
    for key in first.counts:
        assert np.array_equal(first.counts[key], again.counts[key])


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_coverage_counts_a_loop_body_once_per_iteration_of_the_longest_lane(order):
    lib = probe_library("coverage")
    threads = 64
    words = np.arange(32 * 32, dtype=np.uint32)
    out = np.zeros(threads, np.uint32)
    coverage = WarpCoverage()
    lib.l3emu_coverage_start()
    result = lib.probe_launch(1, threads, ORDERS[order], words.ctypes.data, out.ctypes.data, None, LANE_LOOP, 1, 0)
    lib.l3emu_coverage_stop()
    assert result == 0
    coverage.add_from(lib)
    # lane l of each warp runs the loop body l + 1 times: a warp issues it 32 times, not 528
    warps = threads // WARP
    assert max(coverage.runs.values()) == warps * WARP
    # the blocks every thread runs once (entry, the pattern's test) are run once per warp
    assert min(coverage.runs.values()) == warps
    assert coverage.library_path and coverage.library_path.endswith(".so")


# ------------------------------------------------------------------ the l3codec kernels


def _image(rng, h, w, c):
    ramp = np.add.outer(np.arange(h), np.arange(w)) // 3
    return (ramp[:, :, None] + rng.integers(0, 4, (h, w, c))).astype(np.uint8)


@pytest.mark.emulator
@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_kernels_write_every_output_byte_once(mode):
    rng = np.random.default_rng(3)
    images = [_image(rng, 40, 70, 3), _image(rng, 33, 50, 1)]
    datas = [l3codec.encode(image, mode=mode) for image in images]
    traffic = Traffic()
    decoded, status = decode_batch_emulated(datas, traffic=traffic)
    plain, _ = decode_batch_emulated(datas)
    assert not status.any()
    for image, a, b in zip(images, decoded, plain):
        assert np.array_equal(a.reshape(image.shape), image)
        assert np.array_equal(a, b)
    out_bytes = sum(image.nbytes for image in images)
    stored = counts(traffic, "out", True)
    assert stored["bytes"] == out_bytes
    assert stored["sectors"] >= out_bytes // SECTOR
    assert counts(traffic, "out", False)["lane_accesses"] == 0
    # every stream byte is asked for at least once
    batch = l3batch.prepare(datas)
    assert counts(traffic, "data", False)["bytes"] >= (batch.stream_ends - batch.stream_starts).sum()
    # no status is reported on good streams
    assert counts(traffic, "status", True)["lane_accesses"] == 0


@pytest.mark.emulator
def test_compact_reads_its_input_about_once_and_writes_whole_sectors(monkeypatch):
    """Each lane's bit reservoir loads its row's 4-byte words once, raw rows are loaded by the warp
    together, and the write-out cuts rows at 32-byte boundaries (strips included), so only the two
    ends of each tile row's output span can leave a sector partly written. Kind 1's streams (files of
    versions 1-9): a kind-10 band reads its stream's slot tables too (30 KB a stream at P = 11, from
    the scratch area through L1), which this bound does not count."""
    from l3codec import encoder_policy

    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", "rice")
    rng = np.random.default_rng(5)
    images = [
        _image(rng, 64, 300, 3),  # coded streams, tiles 272 wide: written in strips
        rng.integers(0, 256, (40, 290, 1), dtype=np.uint8),  # noise: raw streams
        (_image(rng, 33, 40, 2).astype(np.uint16) * 300),  # 16-bit, one whole-tile strip
    ]
    datas = [l3codec.encode(image, mode="compact", tile_width=272) for image in images]
    traffic = Traffic()
    decoded, status = decode_batch_emulated(datas, traffic=traffic)
    assert not status.any()
    for image, got in zip(images, decoded):
        assert np.array_equal(got.reshape(image.shape), image)
    assert any(stream_census(data)["raw"] for data in datas)
    compressed = sum(len(data) for data in datas)
    assert counts(traffic, "data", False)["bytes"] <= 2 * compressed
    out_bytes = sum(image.nbytes for image in images)
    stored = counts(traffic, "out", True)
    assert stored["bytes"] == out_bytes
    spans = sum(image.shape[0] * -(-image.shape[1] // 272) for image in images)  # rows x tiles across
    assert SECTOR * stored["full_sectors"] >= out_bytes - 2 * (SECTOR - 1) * spans
