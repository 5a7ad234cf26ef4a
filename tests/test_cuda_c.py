"""The CUDA C kernels (kernels/*.cu): bit-exact against the CPU decoder, run on the CPU under the
coroutine emulator of kernels/cuda_emulation.h; NVRTC resource checks; a real-GPU check when one exists.

compact's coded tiles here are kind 1 (adaptive Golomb-Rice: runs, copied rows), as files of versions 1 to 9
hold them, which the kernels still decode; kind 10 (format 10's rANS, the encoder's default) is
tests/test_cuda_c_ans.py's, with batches mixing both."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from typing import ClassVar

import numpy as np
import pytest

import l3codec
from corruption import cpu_stream_statuses, first_cpu_status, mutate_payload, reseal, status_cases
from l3codec.kernels.emulation import (
    EmulationError,
    build_library,
    decode_batch_emulated,
    kernel_library,
)
import fake_cupy
from images import make_image
from stream_census import fast_census, plane_streams, stream_census
from l3codec import batch as l3batch
from l3codec import ans_stage, compact, encoder_policy, fast, huffman, lz, lz_stage
from l3codec import format as fmt
from l3codec.kernels import cuda_c, emulation

ORDERS = ("forward", "reversed", "shuffled")


@pytest.fixture(autouse=True)
def _compact_kind_1(monkeypatch):
    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", "rice")


def _encode(image, mode, tile_width, tile_height=None, transform=None, compact_height=None):
    """tile_height is fast mode's (default 8), compact_height compact's (default: the encoder's choice)."""
    options = {"mode": mode, "tile_width": tile_width, "transform": transform}
    if mode == "fast":
        options["tile_height"] = tile_height or 8
    elif compact_height:
        options["tile_height"] = compact_height
    return l3codec.encode(image, **options)


def _assert_matches_cpu(files, regions=None, orders=ORDERS):
    regions = regions or [None] * len(files)
    expected = [l3codec.decode(f, region=r) for f, r in zip(files, regions)]
    for order in orders:
        images, status = decode_batch_emulated(files, regions, order=order, seed=7)
        assert status.tolist() == [0] * len(files), order
        for i, (got, want) in enumerate(zip(images, expected)):
            assert got.dtype == want.dtype and got.shape == want.shape, (order, i)
            np.testing.assert_array_equal(got, want, err_msg=f"item {i}, order {order}")


# ---------------------------------------------------------------- bit-exact decoding


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_matches_cpu_decoder(mode, dtype, channels):
    """Coded, raw and constant streams, runs and copy rows, partial edge tiles, several tile widths."""
    seed = channels * 10 + (dtype == np.uint16)
    shapes = [(37, 45, 16, 8), (1, 1, 16, 8), (33, 70, 32, 16)]
    kinds = ["smooth_noise", "labels", "noise", "constant", "gradient", "extremes"]
    files = []
    for i, kind in enumerate(kinds):
        h, w, tile_width, tile_height = shapes[i % 3] if kind != "labels" else (45, 37, 16, 16)
        files.append(
            _encode(make_image(kind, h, w, channels, dtype, seed + i), mode, tile_width, tile_height)
        )
    if mode == "fast":  # rows of several groups, the right ones flat: unflagged groups
        image = make_image("smooth_noise", 20, 150, channels, dtype, seed)
        image[:, 64:] = image[:1, 64:65]
        files.append(_encode(image, mode, 144, 8))
    census = {
        key: sum(stream_census(f)[key] for f in files) for key in ("constant", "coded", "raw", "copy_rows")
    }
    assert census["constant"] and census["coded"] and census["raw"], census
    if mode == "compact":
        assert census["copy_rows"], census
    else:
        groups = {key: sum(fast_census(f)[key] for f in files)
                  for key in ("zero_rows", "unflagged", "sparse", "packed", "rice", "bitmap")}
        assert all(groups.values()), groups
    _assert_matches_cpu(files)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_palette_tiles(mode, dtype):
    """Palette streams and their members (docs/FORMAT.md §5.1) with coded, raw and constant index planes,
    1 to 4 channels, every colour transform, crops, compact tiles wider than its ring (written in strips)
    and fast tiles written in bands: the indices become colours before the write-out."""
    files, regions = [], []
    for channels in (1, 2, 3, 4) if dtype == np.uint8 else (1, 2, 3):  # the encoder tries no 4 x 16-bit palettes
        image = make_image("flat_graphics", 37, 300, channels, dtype, channels)
        # a tile of pixels drawn at random from 250 colours: an 8-bit index plane stored raw
        many = make_image("noise", 250, 1, channels, dtype, 9).reshape(250, channels)
        image.reshape(37, 300, channels)[:, 192:240] = many[np.random.default_rng(channels).integers(0, 250, (37, 48))]
        for tile_width in (48, 272):
            transform = ("subtract-green", "rg-mean")[tile_width > 100] if channels >= 3 else None
            files.append(_encode(image, mode, tile_width, 32, transform))
            regions += [None, (5, 30, 20, 250)]
            files.append(files[-1])
    census = [stream_census(f) for f in files]
    # a plane may be smaller as an LZ stream than as a palette (docs/FORMAT.md §5.2)
    assert all(c["palette"] or c["lz"] for c in census), census
    assert sum(c["palette"] for c in census) >= len(census) - 2, census
    assert sum(c["member"] for c in census) and sum(c["index_coded"] for c in census)
    assert sum(c["index_raw"] for c in census) or dtype == np.uint16  # 16-bit indices code smaller than raw
    _assert_matches_cpu(files, regions, orders=("shuffled",))


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_every_colour_transform(mode):
    """The write-out's inverse transforms (format.TRANSFORM_NAMES), 3 and 4 channels, 8 and 16 bits."""
    image = make_image("smooth_noise", 20, 40, 4, np.uint16, 5)
    files = [_encode(image, mode, 16, transform=t) for t in fmt.TRANSFORM_NAMES.values()]
    for transform in ("subtract-green", "rg-mean"):
        files.append(_encode(make_image("gradient", 20, 40, 3, np.uint8, 6), mode, 32, transform=transform))
    assert {fmt.parse(f).info.transform for f in files} == set(fmt.TRANSFORM_NAMES.values())
    _assert_matches_cpu(files, orders=("shuffled",))


def test_flat_colour_content_in_the_encoders_tall_fast_tiles():
    """The fast encoder's 256-row tiles for flat colour content (pixel LZ streams, palettes), whole
    and cropped, as the CPU decodes them."""
    files = [l3codec.encode(make_image("coloured_text", 280, 256, 3, np.uint8, 6), mode="fast"),
             l3codec.encode(make_image("flat_graphics", 270, 200, 4, np.uint8, 7), mode="fast")]
    assert [l3codec.info(data).tile_height for data in files] == [fmt.FLAT_TILE_HEIGHT] * 2
    assert stream_census(files[0])["pixel_lz"] and stream_census(files[1])["palette"]
    _assert_matches_cpu(files, [None, (100, 30, 150, 120)], orders=("shuffled",))


def test_wide_tiles_are_written_in_strips_and_bands():
    """Compact tiles wider than 128 columns go through the staging ring in strips; fast tiles whose rows
    outgrow the staging budget are written in bands of rows."""
    files = [
        _encode(make_image("smooth_noise", 40, 300, 3, np.uint8, 1), "compact", 272),
        _encode(make_image("labels", 35, 200, 2, np.uint16, 2), "compact", 144),
        _encode(make_image("smooth_noise", 70, 260, 4, np.uint16, 3), "fast", 256, 64),
        _encode(make_image("noise", 40, 256, 4, np.uint16, 4), "fast", 256, 64),  # raw streams
    ]
    batch = l3batch.prepare(files)
    fast = next(launch for launch in batch.launches if launch.mode == fmt.MODE_FAST)
    assert cuda_c.fast_ring_rows(4, 256, 64, 2) < 64  # several bands per tile
    assert cuda_c.shared_memory_bytes(fast) <= cuda_c.DEFAULT_SHARED_LIMIT
    _assert_matches_cpu(files, orders=("forward",))
    assert stream_census(files[3])["raw"] == 4
    # the widest fast tile: 4096 // fast.GROUP_SIZE groups, with Rice groups among them
    widest = [_encode(make_image("smooth_noise", 3, 4100, 1, np.uint8, 5), "fast", 4096, 8)]
    assert fast_census(widest[0])["rice"]
    _assert_matches_cpu(widest, orders=("shuffled",))
    _assert_matches_cpu(
        files, [(3, 130, 30, 140), (0, 140, 35, 60), (17, 5, 50, 250), (1, 2, 38, 250)], orders=("reversed",)
    )


def test_fast_groups_over_32_words():
    """A 16-bit fast group whose bits span more than 32 aligned words (packed at 16 bits: 1024 bits)
    is read with a second word per lane (kernels/fast.cu, group_bits)."""
    image = np.full((8, 256), 1000, np.uint16)
    image[:, 64:128] = np.random.default_rng(11).integers(0, 65536, (8, 64), dtype=np.uint16)
    data = _encode(image, "fast", 256, 8)
    census = fast_census(data)
    assert census["group_bits"] >= 1024 and census["unflagged"], census
    _assert_matches_cpu([data])


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_regions(mode):
    image = make_image("smooth_noise", 45, 70, 3, np.uint16, 9)
    data = _encode(image, mode, 16, 16)
    regions = [
        (0, 0, 45, 70),
        (0, 0, 1, 1),
        (44, 69, 1, 1),
        (5, 7, 20, 30),
        (16, 16, 16, 16),
        (31, 3, 14, 60),
        (10, 40, 35, 30),
    ]
    _assert_matches_cpu([data] * len(regions), regions)


def test_mixed_batch_both_modes_both_sample_sizes():
    files, regions = [], []
    for i, (mode, dtype, channels, kind) in enumerate(
        [
            ("compact", np.uint8, 3, "smooth_noise"),
            ("fast", np.uint16, 1, "labels"),
            ("compact", np.uint16, 4, "labels"),
            ("fast", np.uint8, 2, "gradient"),
            ("compact", np.uint8, 1, "noise"),
            ("fast", np.uint16, 3, "smooth_noise"),
        ]
    ):
        h, w = 30 + 3 * i, 50 - 2 * i
        files.append(
            _encode(make_image(kind, h, w, channels, dtype, i), mode, 16 * (1 + i % 2), 8 * (1 + i % 2))
        )
        regions.append(None if i % 2 else (i, 2 * i, h - 2 * i, w - 3 * i))
    files.append(_encode(make_image("noise", 20, 30, 3, np.uint16, 9), "compact", 16, 8))  # beside item 0's 8 bits
    regions.append(None)
    batch = l3batch.prepare(files, regions)
    # one launch per mode and channel count; one kernel takes 8- and 16-bit items alike
    assert sorted({launch.mode for launch in batch.launches}) == sorted(cuda_c.KERNELS)
    assert len(batch.launches) == 6 and all(len(set(launch.items["channels"])) == 1 for launch in batch.launches)
    assert any(set(launch.items["bits"]) == {8, 16} for launch in batch.launches)
    _assert_matches_cpu(files, regions)


def test_reads_stop_at_the_end_of_data():
    """The data buffer ends right before an inaccessible page: a read past data_size faults. The decode runs
    in a forked child, so a fault fails this test instead of ending the test run."""
    import os
    import signal

    files = [_encode(make_image("noise", 9, 20, 1, np.uint16, 4), "compact", 16)]  # raw streams
    files += [
        _encode(make_image("smooth_noise", 45, 41, 2, np.uint8, 4), mode, 16) for mode in ("fast", "compact")
    ]
    assert np.frombuffer(files[-1], np.uint8)[fmt.parse(files[-1]).stream_starts[-1]] == fmt.KIND_CODED
    expected = [l3codec.decode(f) for f in files]
    kernel_library()  # build before forking
    for guard in ("aligned", "tight", "shifted"):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                images, status = decode_batch_emulated(files, guard=guard)
                code = (
                    0
                    if status.tolist() == [0] * len(files)
                    and all(np.array_equal(a, b) for a, b in zip(images, expected))
                    else 3
                )
            finally:
                os._exit(code)
        _, wait_status = os.waitpid(pid, 0)
        assert not os.WIFSIGNALED(wait_status), (
            f"{guard}: killed by {signal.Signals(os.WTERMSIG(wait_status))!r}"
        )
        assert os.WEXITSTATUS(wait_status) == 0, f"{guard}: wrong output or status"


def _random_batch(seed):
    from images import KINDS

    rng = np.random.default_rng(seed)
    files, regions = [], []
    for _ in range(6):
        mode = str(rng.choice(["compact", "fast"]))
        h, w = int(rng.integers(1, 100)), int(rng.integers(1, 140))
        dtype = [np.uint8, np.uint16][int(rng.integers(2))]
        image = make_image(
            str(rng.choice(KINDS)), h, w, int(rng.integers(1, 5)), dtype, int(rng.integers(1 << 16))
        )
        tile_height = int(rng.choice([8, 16, 24]))  # compact: tiles of 1 to 3 bands
        files.append(_encode(image, mode, int(rng.choice([16, 32, 48, 128, 144])), tile_height,
                             compact_height=4 * tile_height))
        y, x = int(rng.integers(h)), int(rng.integers(w))
        regions.append((y, x, int(rng.integers(1, h - y + 1)), int(rng.integers(1, w - x + 1))))
    return files, regions


RANDOM_BATCH_SEEDS = range(206)
SAMPLED_SEEDS = [*RANDOM_BATCH_SEEDS[:6], *RANDOM_BATCH_SEEDS[6::40]]  # every run: 11 of them


@pytest.mark.parametrize("seed", SAMPLED_SEEDS)
def test_random_batches(seed):
    """Random shapes, contents, tile geometries and regions in mixed batches: a fixed sample of the sweep."""
    _assert_matches_cpu(*_random_batch(seed), orders=(ORDERS[seed % 3],))


@pytest.mark.slow
def test_random_batches_sweep():
    """The rest of the 206 random batches (L3_RUN_SLOW=1; about 20 s)."""
    for seed in sorted(set(RANDOM_BATCH_SEEDS) - set(SAMPLED_SEEDS)):
        _assert_matches_cpu(*_random_batch(seed), orders=(ORDERS[seed % 3],))


# ---------------------------------------------------------------- corrupt input


@pytest.mark.emulator
@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_corrupt_streams_report_status(mode):
    """Damaged payloads (checksums resealed), the blocks run in shuffled order: the item's status is the
    CPU decoder's, its first failing stream's (a tall compact tile's first failing band's), and 0 exactly
    when the CPU accepts it; accepted damage decodes identically."""
    rng = np.random.default_rng(3)
    sources = [
        _encode(make_image("smooth_noise", 33, 40, 3, np.uint8, 1), mode, 16),
        _encode(make_image("labels", 40, 33, 1, np.uint16, 2), mode, 16),
        _encode(make_image("flat_graphics", 33, 40, 3, np.uint8, 3), mode, 16),  # palettes and members
        _encode(make_image("coloured_text", 40, 128, 3, np.uint8, 1), mode, 128, 16),  # coded LZ streams
        _encode(make_image("smooth_noise", 75, 24, 1, np.uint8, 4), mode, 16, 16, compact_height=64),  # compact bands
    ]
    assert stream_census(sources[2])["member"] and stream_census(sources[3])["huffman"]
    damaged = [mutate_payload(sources[i % len(sources)], rng) for i in range(80)]
    images, status = decode_batch_emulated(damaged, order="shuffled", seed=1)
    rejected = 0
    for data, image, code in zip(damaged, images, status):
        cpu_codes = [c for c in cpu_stream_statuses(data).tolist() if c]
        if cpu_codes:
            rejected += 1
            assert code == cpu_codes[0]
        else:
            assert code == 0
            np.testing.assert_array_equal(image, l3codec.decode(data))
    assert rejected >= (8 if mode == "compact" else 1)  # fast mode's packed residuals rarely notice damage


def test_coded_lz_codes_longer_than_the_kernels_lookup():
    """kernels/lz.cu decodes codes of up to LZ_LOOKUP_BITS bits from a lookup table and walks the
    canonical code for longer ones: a block whose tables hold both (geometric noise, whose rare values,
    tokens and offsets get long codes) expands to the CPU decoder's pixels, and damaged copies of it
    give the CPU decoder's statuses."""
    lookup_bits = emulation.private_constants()["LZ_LOOKUP_BITS"]  # as the emulated lz.cu was compiled
    image = np.minimum(np.random.default_rng(1).geometric(0.5, (64, 512)) - 1, 255).astype(np.uint8)
    data = _encode(image, "fast", 512, 64)
    buf = np.frombuffer(data, np.uint8)
    tables = np.zeros((huffman.TABLES, huffman.TABLE_SIZE), np.int64)
    longest = []
    for _, start, end in plane_streams(data):
        assert buf[start] == fmt.KIND_LZ_CODED
        assert huffman.read_tables(buf, int(start) + 1, int(end), tables)[0] == fmt.STATUS_OK
        longest += [int(tables[t, huffman.TABLE_LONGEST]) for t in range(huffman.TABLES)]
    assert min(longest) <= lookup_bits < max(longest)
    _assert_matches_cpu([data], orders=["forward"])
    rng = np.random.default_rng(4)
    damaged = [mutate_payload(data, rng) for _ in range(12)]
    _, status = decode_batch_emulated(damaged, order="forward", seed=1)
    for item, code in zip(damaged, status.tolist()):
        assert code == first_cpu_status(item)
    assert any(status)


@pytest.mark.parametrize("order", ORDERS)
def test_hand_made_faults_give_the_cpu_decoders_status(order):
    """Every status code in both modes, a run past the row end (whose row still has its recorded
    length), and streams with several faults (the first failing row decides): the exact code of
    corruption.status_cases, which the CPU decoder gives too; the valid ones decode to its pixels."""
    cases = status_cases()
    assert {code for _, code in cases.values()} == set(range(5))
    images, status = decode_batch_emulated([data for data, _ in cases.values()], order=order, seed=5)
    for (name, (data, code)), got, image in zip(cases.items(), status.tolist(), images):
        assert first_cpu_status(data) == code, name
        assert got == code, name
        if code == fmt.STATUS_OK:
            np.testing.assert_array_equal(image, l3codec.decode(data), err_msg=name)


def test_every_status_code_is_reachable_in_encoded_files():
    """Hand-made damage to one stream of real encoded files gives the CPU decoder's exact status."""
    from corruption import reseal

    noisy = make_image("smooth_noise", 32, 16, 1, np.uint8, 1)
    smooth = make_image("gradient", 32, 16, 1, np.uint8, 1)
    cases = []
    fast_kinds = set()
    for mode, image in (("compact", noisy), ("fast", noisy), ("fast", smooth)):
        data = bytearray(_encode(image, mode, 16))
        start = fmt.parse(bytes(data)).payload_offset
        extended = data[start] == fmt.KIND_CODED_EXTENDED
        if mode == "compact":
            assert data[start] == fmt.KIND_CODED
        else:  # a fast stream takes the code table that makes it smaller: these two one each
            fast_kinds.add(data[start])
        code_bits = fast.code_bits(8, extended)
        bad_kind = bytearray(data)
        bad_kind[start] = fmt.KIND_CODED_ANS + 1  # past the last kind
        cases.append((reseal(bytes(bad_kind)), fmt.STATUS_BAD_KIND))
        if mode == "compact":  # fast mode's extended kind
            bad_kind[start] = fmt.KIND_CODED_EXTENDED
            cases.append((reseal(bytes(bad_kind)), fmt.STATUS_BAD_KIND))
        bad_header = bytearray(data)
        if mode == "compact":
            bad_header[start + 1] = 40  # run index > 31
        else:
            # row 0: A = 1, one group flagged, its header from bit 2 of byte start + 1: packed width 8
            # with a nonzero qsum
            assert data[start + 1] & 3 == 3
            packed8 = fast.table_code(fast.FORM_PACKED, 8, 8, extended)
            bad_header[start + 1:start + 3] = (((packed8 | 1 << code_bits) << 2) | 3).to_bytes(2, "little")
        cases.append((reseal(bytes(bad_header)), fmt.STATUS_BAD_HEADER))
        corrupt = bytearray(data)
        if mode == "compact":
            length_bits = corrupt[start + 7]
            corrupt[start + 8] &= ~((1 << min(8, length_bits)) - 1) & 0xFF  # row 0 length -> 0 (low bits)
            cases.append((reseal(bytes(corrupt)), None))
        else:  # row 0's code -> Rice, k = 0: its unary part no longer holds its samples' ones
            keep = (3 | 0xFF << (2 + code_bits)) & 0xFF  # all but the code's bits
            corrupt[start + 1] = (corrupt[start + 1] & keep) | (fast.table_code(fast.FORM_RICE, 0, 8, extended) << 2)
            cases.append((reseal(bytes(corrupt)), fmt.STATUS_CORRUPT))
    assert fast_kinds == {fmt.KIND_CODED, fmt.KIND_CODED_EXTENDED}
    constant = _encode(np.full((8, 16), 9, np.uint8), "compact", 16)
    cases.append((constant, 0))
    files = [c[0] for c in cases]
    _, status = decode_batch_emulated(files)
    for (data, expected), code in zip(cases, status):
        cpu_codes = sorted(set(cpu_stream_statuses(data).tolist()) - {0})
        assert [code] == (cpu_codes or [0])
        if expected is not None:
            assert code == expected


@pytest.mark.parametrize(
    "mode, block", [("compact", (32, 2, 1)), ("compact", (64, 3, 1)), ("fast", (64, 1, 1))]
)
def test_a_launch_that_does_not_fit_reports(mode, block):
    data = _encode(make_image("smooth_noise", 20, 20, 3, np.uint8, 0), mode, 16)
    _, status = decode_batch_emulated([data], block=block)
    assert status.tolist() == [fmt.STATUS_BAD_HEADER]


# ---------------------------------------------------------------- the emulator itself

_TEST_KERNELS = r"""
extern "C" __global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) __syncthreads();
    out[threadIdx.x] = 1;
}
extern "C" __global__ void barrier_at_two_sites(int* out) {
    if (threadIdx.x % 2) { out[threadIdx.x] = 1; __syncthreads(); }
    else { out[threadIdx.x] = 2; __syncthreads(); }
}
extern "C" __global__ void divergent_shuffle(int* out) {
    int v = threadIdx.x;
    if (threadIdx.x < 40) v = __shfl_down_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
extern "C" __global__ void mismatched_masks(int* out) {
    int v = threadIdx.x;
    v = __shfl_xor_sync(threadIdx.x < 16 ? 0x0000ffffu : 0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
extern "C" __global__ void good(int* out) {
    extern __shared__ __align__(16) unsigned char scratch_bytes[];
    int* scratch = reinterpret_cast<int*>(scratch_bytes);
    const int t = threadIdx.x;
    const int poisoned = scratch[t];  // read before any write: the marker
    scratch[t] = t;
    __syncthreads();
    int v = scratch[(t + 1) % blockDim.x];
    v += __shfl_up_sync(0xffffffffu, v, 1) + __shfl_xor_sync(0xffffffffu, v, 3);
    v += __shfl_sync(0xffffffffu, v, 5) + __popc(__ballot_sync(0xffffffffu, t & 1));
    __syncwarp();
    v += __any_sync(0xffffffffu, t == 3) + __all_sync(0xffffffffu, t < 64) - 2;
    out[t] = v + __syncthreads_count(t < 10);
    out[blockDim.x + t] = poisoned;
}
"""

_TEST_SHIM = r"""
CUDA_EMU_DYNAMIC_SHARED(scratch_bytes);
extern "C" void divergent_barrier(int*); extern "C" void barrier_at_two_sites(int*);
extern "C" void divergent_shuffle(int*); extern "C" void mismatched_masks(int*); extern "C" void good(int*);
extern "C" int run(int which, int order, int* out) {
    void (*kernels[])(int*) = {divergent_barrier, barrier_at_two_sites, divergent_shuffle, mismatched_masks, good};
    return cuda_emu::launch(dim3(2), dim3(64), 256, order, 5, [=] { kernels[which](out); });
}
extern "C" const char* error() { return cuda_emu::last_error(); }
"""


@pytest.fixture(scope="module")
def test_kernels(tmp_path_factory):
    import ctypes

    source = tmp_path_factory.mktemp("emulator") / "test_kernels.cu"
    source.write_text(_TEST_KERNELS)
    lib = build_library("emulator_test", [source], {"shim.cpp": _TEST_SHIM})
    lib.run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.error.restype = ctypes.c_char_p
    return lib


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize(
    "which, message",
    [
        (0, "divergent barrier"),
        (1, "divergent barrier"),
        (2, "divergent warp operation"),
        (3, "divergent warp operation"),
    ],
)
def test_emulator_reports_divergence(test_kernels, which, message, order):
    out = np.zeros(128, np.int32)
    assert test_kernels.run(which, order, out.ctypes.data) != 0
    text = test_kernels.error().decode()
    assert message in text and "test_kernels.cu" in text, text


@pytest.mark.parametrize("order", [0, 1, 2])
def test_emulator_runs_a_correct_kernel(test_kernels, order):
    out = np.zeros(128, np.int32)
    assert test_kernels.run(4, order, out.ctypes.data) == 0, test_kernels.error()
    t = np.arange(64)
    v = (t + 1) % 64
    lane = t % 32
    warp_base = t - lane
    up = np.where(lane >= 1, v[np.maximum(t - 1, 0)], v)
    v2 = v + up + v[warp_base + (lane ^ 3)]
    v3 = v2 + v2[warp_base + 5] + 16
    v4 = v3 + np.where(t < 32, 0, -1)  # __any_sync(t == 3) + __all_sync(t < 64) - 2
    np.testing.assert_array_equal(out[:64], v4 + 10)
    poison = (0xA5 + 0x3B * 5) & 0xFF  # the emulator's fill byte for seed 5, the shim's
    assert (out[64:] == np.int32(np.frombuffer(bytes([poison]) * 4, np.int32)[0])).all()


# ---------------------------------------------------------------- host-side tables and formulas


def test_shared_memory_formulas_match_the_kernels():
    lib = kernel_library()
    for channels in (1, 2, 3, 4):
        for sample_bytes in (1, 2):
            for tile_width in (16, 32, 48, 112, 128, 144, 512, 4096):
                want = lib.l3emu_compact_shared_bytes(channels, tile_width, sample_bytes)
                items = np.zeros(1, l3batch.ITEM_DTYPE)
                items["channels"], items["tile_width"], items["tile_height"] = channels, tile_width, 32
                items["bits"] = 8 * sample_bytes
                launch = l3batch.Launch(
                    fmt.MODE_COMPACT,
                    items,
                    np.zeros(1, np.int64),
                    np.zeros(0, l3batch.TASK_DTYPE),
                    channels,
                    tile_width,
                    32,
                )
                assert cuda_c.shared_memory_bytes(launch) == want
                assert want <= cuda_c.DEFAULT_SHARED_LIMIT
                for tile_height in (8, 64, 256):
                    items["tile_height"] = tile_height
                    launch.mode, launch.max_tile_height = fmt.MODE_FAST, tile_height
                    want = lib.l3emu_fast_shared_bytes(channels, tile_width, tile_height, sample_bytes)
                    assert cuda_c.shared_memory_bytes(launch) == want
                    assert want <= 67 * 1024


def test_a_mixed_launch_gets_the_shared_memory_of_its_largest_item():
    lib = kernel_library()
    items = np.zeros(2, l3batch.ITEM_DTYPE)
    items["channels"], items["tile_width"], items["tile_height"] = (4, 1), (64, 512), 32
    items["bits"] = (8, 16)
    launch = l3batch.Launch(fmt.MODE_COMPACT, items, np.arange(2), np.zeros(0, l3batch.TASK_DTYPE), 4, 512, 32)
    each = [lib.l3emu_compact_shared_bytes(4, 64, 1), lib.l3emu_compact_shared_bytes(1, 512, 2)]
    assert cuda_c.shared_memory_bytes(launch) == max(each)


def test_kernel_constants_come_from_the_python_codec():
    """The constants the kernels share with format.py, batch.py, compact.py, fast.py, lz4block.py and
    huffman.py are generated from them (cuda_c.kernel_constants), the emulated kernels are compiled with
    those values, and no kernel source defines one of them by hand any more."""
    from l3codec import lz4block

    constants = {name: value for name, (value, _) in cuda_c.kernel_constants().items()}
    python = {
        **{name: getattr(fmt, name) for name in ("KIND_PIXEL_LZ_CODED", "STATUS_CORRUPT",
                                                 "TRANSFORM_RGB_MEAN", "PALETTE_HEADER_BYTES",
                                                 "COMPACT_BAND_ROWS", "MAX_TILE_WIDTH")},
        **{name: getattr(l3batch, name) for name in ("STATUS_CODE_BITS", "STATUS_BAND_BITS",
                                                     "STATUS_RANK_LIMIT")},
        "CONTEXTS": compact.CONTEXTS, "RESET_COUNT": compact.RESET_COUNT,
        "COMPACT_HEADER_BYTES": compact.HEADER_BYTES, "K_NIBBLE_BYTES": compact.K_NIBBLE_BYTES,
        "FAST_GROUP_SIZE": fast.GROUP_SIZE, "FAST_FORM_RICE": fast.FORM_RICE,
        "LZ_MIN_MATCH": lz4block.MIN_MATCH, "LZ_MAX_CODE_BITS": huffman.MAX_CODE_BITS,
        "COMPACT_RING_MIN": fmt.MIN_TILE_WIDTH, "FAST_THREADS": cuda_c.FAST_THREADS,
        "LZ_SHARED_BYTES_PER_WARP": cuda_c.LZ_SHARED_BYTES_PER_WARP,
    }
    assert {name: constants[name] for name in python} == python
    kinds = [name for name in vars(fmt) if name.startswith("KIND_")]
    assert len(kinds) == 11 and set(kinds) <= set(constants)  # every stream kind, a new one included
    lib = kernel_library()
    assert [lib.l3emu_constant(i) for i in range(len(constants))] == list(constants.values())
    for path in cuda_c.KERNEL_DIR.glob("*.cu*"):
        text = re.sub(r"//[^\n]*", "", path.read_text())
        defined = [name for name in constants if re.search(rf"\b{name}\s*=[^=]", text)]
        assert not defined, f"{path.name} defines {defined}: they come from {cuda_c.CONSTANTS_HEADER}"


def test_launch_geometry():
    files = [
        _encode(make_image("gradient", 40, 40, 3, np.uint8, 0), "compact", 16),
        _encode(make_image("gradient", 40, 40, 2, np.uint16, 0), "fast", 16),
    ]
    batch = l3batch.prepare(files)
    shapes = {launch.mode: cuda_c.block_shape(launch) for launch in batch.launches}
    assert shapes == {fmt.MODE_COMPACT: (32, 3, 1), fmt.MODE_FAST: (cuda_c.FAST_THREADS, 1, 1)}


# ---------------------------------------------------------------- NVRTC: every kernel compiles lean


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_resources(arch):
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    try:
        nvrtc.nvrtcVersion()
    except Exception as error:  # noqa: BLE001 - the bindings import, the NVRTC library does not load
        pytest.skip(f"the NVRTC library does not load: {error}")
    report = cuda_c.compile_report(arch)
    assert set(report) == {kernel.kernel for kernel in cuda_c.KERNELS.values()} | {cuda_c.EXPAND_KERNEL,
                                                                                     cuda_c.ANS_KERNEL}
    for name, figures in report.items():
        summary = {k: v for k, v in figures.items() if k != "log"}
        assert figures["spill_stores"] == 0 and figures["spill_loads"] == 0, (name, summary)
        assert figures["stack_frame"] == 0, (name, summary)
        assert figures["registers"] <= cuda_c.REGISTER_BUDGET, (name, summary)
        assert figures["shared"] == 0, (name, summary)  # dynamic shared memory only


# An NVRTC compile with an empty log, then what test_numba_ans checks: ans_cases' "row-length bits 32" fault
# (byte 3 set with bytes([32])) and its header status, by ans_stream's plain Python (nothing to compile)
NVRTC_THEN_A_FAULT = """
import pathlib, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import ans_cases
from l3codec import ans_stream
from l3codec.kernels import cuda_c

cuda_c.KERNEL_DIR = pathlib.Path(sys.argv[2])
cubin, log = cuda_c.nvrtc_compile("empty_log.cu", "sm_80")
assert cubin[:4] == b"\\x7fELF" and log == "", log
stream = ans_cases.edited(bytes([10, 0, 11, 8]) + bytes(60), 3, 32)
status = ans_stream.ans_stream_header(np.frombuffer(stream, np.uint8), 0, len(stream))[0]
print(bytes([32]).hex(), stream[3], status)
"""


@pytest.mark.compile
@pytest.mark.processes
def test_an_nvrtc_compile_leaves_the_processs_bytes_objects_alone(tmp_path):
    """NVRTC writes its log and cubin where it is told: into a bytes object once, and an empty log is
    one byte, b" " * 1 being CPython's shared b" ". Every later bytes([32]) in the process read b"\\0":
    in the full suite (test_kernel_layout's NVRTC test first), test_numba_ans's "row-length bits 32"
    fault was written with L = 0 and decoded to BAD_SIZE, not BAD_HEADER. In a subprocess, to keep this
    process sound whatever happens."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    kernel = 'extern "C" __global__ void probe(int* out) { out[threadIdx.x] = 1; }\n'
    (tmp_path / "empty_log.cu").write_text(kernel)
    tests = pathlib.Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", NVRTC_THEN_A_FAULT, str(tests), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["20", "32", str(fmt.STATUS_BAD_HEADER)]


# ---------------------------------------------------------------- the CuPy host path, against a fake CuPy


class _FakeCupy:
    """Just enough of CuPy for kernels/cuda_c.py: RawModule kernels run on the emulator."""

    class Array:
        def __init__(self, array):
            self.array = np.ascontiguousarray(array)
            self.size, self.dtype, self.shape = self.array.size, self.array.dtype, self.array.shape
            self.data = type("Pointer", (), {"ptr": self.array.ctypes.data})()

        def get(self):
            return self.array.copy()

    class RawModule:
        compiled: ClassVar[list] = []

        def __init__(self, code, options):
            assert code.startswith('#line 1 "') and "-std=c++17" in options
            self.compiled.append(code)

        def get_function(self, name):
            return _FakeCupy.Kernel(name)

    class Kernel:
        launches: ClassVar[list] = []

        def __init__(self, name):
            self.name = name
            self.max_dynamic_shared_size_bytes = 0

        def __call__(self, grid, block, args, shared_mem=0):
            names = [cuda_c.KERNELS[key].kernel for key in sorted(cuda_c.KERNELS)]
            values = [a.data.ptr if isinstance(a, _FakeCupy.Array) else int(a) for a in args]
            lib = kernel_library()
            if self.name == cuda_c.ANS_KERNEL:
                assert isinstance(args[1], np.int64) and isinstance(args[3], np.int64) and len(block) == 1
                assert shared_mem == 0
                self.launches.append((self.name, grid, block, shared_mem))
                assert lib.l3emu_ans_tables(grid[0], block[0], 2, 1, *values) == 0, lib.l3emu_last_error()
                return
            if self.name == cuda_c.EXPAND_KERNEL:
                assert isinstance(args[2], np.int64) and len(block) == 1
                assert shared_mem == cuda_c.expand_grid(1)[2]  # each warp's codes for a coded stream
                self.launches.append((self.name, grid, block, shared_mem))
                assert lib.l3emu_expand(grid[0], block[0], shared_mem, 2, 1, *values) == 0, lib.l3emu_last_error()
                return
            assert isinstance(args[1], np.int64) and isinstance(args[6], np.int64)
            assert shared_mem <= 48 * 1024 or self.max_dynamic_shared_size_bytes >= shared_mem
            self.launches.append((self.name, grid, block, shared_mem))
            assert (
                lib.l3emu_launch(names.index(self.name), grid[0], *block, shared_mem, 2, 1, *values) == 0
            ), lib.l3emu_last_error()

    class cuda:  # mirrors the cupy.cuda namespace: fake_cupy's device (sm_90's limits) and streams
        Stream, Device = fake_cupy.Stream, fake_cupy.Device

    uint8, int32 = np.uint8, np.int32

    @staticmethod
    def asarray(array):
        return _FakeCupy.Array(array)

    @staticmethod
    def zeros(shape, dtype):
        return _FakeCupy.Array(np.zeros(shape, dtype))


def test_launch_helper_with_a_fake_cupy(monkeypatch):
    """cuda_c.launch and load_module as gpu.py calls them: arguments, geometry, shared memory opt-in."""
    import sys

    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy)
    monkeypatch.setattr(cuda_c, "_modules", {})
    files = [
        _encode(make_image("smooth_noise", 20, 4100, 4, np.uint16, 1), "fast", 4096, 8),  # > 48 KiB
        _encode(make_image("smooth_noise", 40, 50, 3, np.uint8, 2), "compact", 16),
        _encode(make_image("gradient", 20, 30, 1, np.uint8, 3), "fast", 16),
    ]
    regions = [(3, 4000, 10, 90), None, (1, 2, 5, 20)]
    batch = l3batch.prepare(files, regions)
    assert batch.lz is None  # the decode kernels alone (test_lz_expansion_helper_with_a_fake_cupy: with LZ)
    data = _FakeCupy.Array(batch.data)
    starts, ends = _FakeCupy.Array(batch.stream_starts), _FakeCupy.Array(batch.stream_ends)
    out = _FakeCupy.Array(np.zeros(batch.out_size, np.uint8))
    for launch in batch.launches:
        status = _FakeCupy.zeros(len(launch.items), np.int32)
        cuda_c.launch(launch, data, starts, ends, out, status)
        assert status.get().tolist() == [0] * len(launch.items)
    assert len(_FakeCupy.RawModule.compiled) == 2  # one module per source file, cached
    assert max(shared for *_, shared in _FakeCupy.Kernel.launches) > 48 * 1024
    for got, data_, region in zip(l3batch.split_output(batch, out.get()), files, regions):
        np.testing.assert_array_equal(got, l3codec.decode(data_, region=region))


def test_lz_expansion_helper_with_a_fake_cupy(monkeypatch):
    """cuda_c.launch_expand as gpu.launch_packed calls it: the batch's LZ streams expanded into the
    scratch area after its bytes (a palette's LZ index plane with its table), then decoded as raw
    streams by the decode kernels; a damaged LZ stream reports its item corrupt."""
    import sys

    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy)
    monkeypatch.setattr(cuda_c, "_modules", {})
    files = [_encode(make_image("text", 40, 256, 1, np.uint8, 1), "fast", 256, 8),
             _encode(make_image("text", 32, 128, 1, np.uint16, 1), "compact", 128, 32),
             _encode(make_image("coloured_text", 40, 128, 3, np.uint8, 1), "compact", 64, 32)]
    assert stream_census(files[2])["pixel_lz"]
    damaged = bytearray(files[0])
    lz_start = max(start for start in fmt.parse(files[0]).stream_starts if lz.is_lz(files[0][start]))
    if files[0][lz_start] == fmt.KIND_LZ:
        damaged[lz_start + 1] = 0x0F  # its first token: no literals, then a match, whose offset reaches before the start
    else:
        assert any(files[0][lz_start + 1:lz_start + 1 + huffman.BITMAP_BYTES])  # literals have codes
        damaged[lz_start + 1 + huffman.BITMAP_BYTES] = 0  # the first literal's code length: 0
    files.append(reseal(bytes(damaged)))
    batch = l3batch.prepare(files, [None, (3, 5, 20, 100), (9, 30, 25, 80), None])
    assert {int(item) for item in batch.lz.records["status_index"]} == {0, 1, 2, 3}
    assert set(batch.lz.records["channels"].tolist()) == {1, 3}
    padded, scratch = emulation.with_scratch(batch)
    data = _FakeCupy.Array(padded)
    starts, ends, expansions = l3batch.expanded_tables(batch, scratch)
    status = _FakeCupy.zeros(len(files), np.int32)
    columns = len(lz_stage.EXPANSION_DTYPE.names)
    cuda_c.launch_expand(data, _FakeCupy.Array(expansions.view(np.int64).reshape(-1, columns)), status)
    out = _FakeCupy.Array(np.zeros(batch.out_size, np.uint8))
    for launch in batch.launches:
        launch_status = _FakeCupy.zeros(len(launch.items), np.int32)
        cuda_c.launch(launch, data, _FakeCupy.Array(starts), _FakeCupy.Array(ends), out, launch_status)
        assert launch_status.get().tolist() == [0] * len(launch.items)  # raw streams, whatever they hold
    assert l3batch.status_codes(status.get()).tolist() == [0, 0, 0, fmt.STATUS_CORRUPT]
    for got, data_, region in list(zip(l3batch.split_output(batch, out.get()), files, batch.regions))[:3]:
        np.testing.assert_array_equal(got, l3codec.decode(data_, region=region))


def test_compiled_source_holds_every_header(tmp_path, monkeypatch):
    """CuPy keys its kernel cache on the source string and options, not on headers found through -I:
    the source handed to it inlines every header, so editing one changes the key."""
    import re
    import shutil
    import sys

    for path in cuda_c.KERNEL_DIR.glob("*.cu*"):
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(cuda_c, "KERNEL_DIR", tmp_path)
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy)
    monkeypatch.setattr(cuda_c, "_modules", {})
    monkeypatch.setattr(_FakeCupy.RawModule, "compiled", [])
    assert not any(option.startswith("-I") for option in cuda_c.COMPILE_OPTIONS)
    before = {name: cuda_c.source_text(name) for name in cuda_c.SOURCES}
    for text in before.values():
        assert not re.search(r"#\s*include", text)
        assert "struct L3Item" in text and "SOURCE_RAW = 2" in text  # both headers, once
        assert text.count("struct L3Item {") == 1
        assert text.count("RESET_COUNT = 64,") == 1  # the generated constants, once
    header = tmp_path / "l3_common.cuh"
    header.write_text(header.read_text().replace("SOURCE_RAW = 2", "SOURCE_RAW = 2 + 0"))
    commented = tmp_path / "compact.cu"  # an include with a trailing comment is inlined too
    commented.write_text(commented.read_text().replace('"l3_common.cuh"', '"l3_common.cuh"  // shared'))
    monkeypatch.setattr(compact, "RESET_COUNT", 32)  # a Python constant the kernels take
    for name in cuda_c.SOURCES:
        after = cuda_c.source_text(name)
        assert after != before[name] and "RESET_COUNT = 32," in after and "SOURCE_RAW = 2 + 0" in after
        assert not re.search(r"#\s*include", after)
        cuda_c.load_module(name)
        assert _FakeCupy.RawModule.compiled[-1] == after  # what CuPy compiles and keys


@pytest.mark.compile
@pytest.mark.parametrize("name, value, source, message", [
    ("FAST_FIXED_BYTES", 1024, "fast.cu", "FAST_FIXED_BYTES is sizeof"),
    ("LZ_SHARED_BYTES_PER_WARP", 9392, "lz.cu", "the host sizes the shared memory by it"),
])
def test_a_launch_constant_that_disagrees_with_its_struct_fails_the_build(monkeypatch, name, value, source,
                                                                         message):
    """The kernels' launch sizes are Python constants now (cuda_c.py): the static_asserts of the .cu
    files, compiled with the generated header, still refuse one that does not match its struct."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    monkeypatch.setattr(cuda_c, name, value)
    with pytest.raises(RuntimeError, match=message):
        cuda_c.nvrtc_compile(source, "sm_80")


def test_compiler_messages_name_the_real_file_and_line(tmp_path, monkeypatch):
    """#line directives around the inlined headers: an error in a header, after the generated headers it
    includes, is reported at its line."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    import shutil

    for path in cuda_c.KERNEL_DIR.glob("*.cu*"):
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(cuda_c, "KERNEL_DIR", tmp_path)
    header = tmp_path / "l3_common.cuh"
    lines = header.read_text().splitlines()
    assert cuda_c.RECORDS_HEADER in "".join(lines[:11])
    lines.insert(11, "this_is_not_cuda;")
    header.write_text("\n".join(lines))
    with pytest.raises(RuntimeError, match=r"l3_common\.cuh\(12\)"):
        cuda_c.nvrtc_compile("fast.cu", "sm_80")


# ---------------------------------------------------------------- a real GPU, when there is one


def _cupy_with_gpu():
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as error:  # noqa: BLE001 - no driver, no device
        pytest.skip(f"no usable CUDA device: {error}")
    return cupy


def _real_gpu_batch():
    """test_real_gpu_matches_cpu's files and regions: both modes and sample sizes; the labels items 1, 5
    and 13 have LZ planes, and the last needs more than 48 KiB of shared memory (the opt-in path)."""
    files, regions = [], []
    for i, (mode, dtype, channels) in enumerate(
        [("compact", np.uint8, 3), ("compact", np.uint16, 1), ("fast", np.uint8, 4), ("fast", np.uint16, 2)]
    ):
        for kind in ("smooth_noise", "labels", "noise", "constant"):
            image = make_image(kind, 150 + i, 300 - i, channels, dtype, i)
            files.append(l3codec.encode(image, mode=mode))
            regions.append(None if kind != "labels" else (7, 9, 100, 200))
    files.append(
        l3codec.encode(make_image("smooth_noise", 40, 4200, 4, np.uint16, 9), mode="fast", tile_width=4096)
    )
    regions.append((5, 4000, 30, 200))
    return files, regions


def _decode_with_launches(cupy, batch, *, expand_lz=True):
    """test_real_gpu_matches_cpu's launch sequence, on real CuPy or _FakeCupy (the emulator): the LZ
    expansion into the scratch area (with_scratch, expanded_tables, launch_expand), then each decode
    launch on the same stream, its statuses folded into the expansion's as gpu.decode_batch does.
    expand_lz=False: the decode launches alone on the packed batch's own tables (the sequence before
    992f8a9, which a GPU would fail). Returns (each item's status code, the output bytes)."""
    if expand_lz:
        padded, scratch = emulation.with_scratch(batch)
        host_starts, host_ends, host_expansions = l3batch.expanded_tables(batch, scratch)
    else:
        padded, host_starts, host_ends = batch.data, batch.stream_starts, batch.stream_ends
    data = cupy.asarray(padded)
    starts, ends = cupy.asarray(host_starts), cupy.asarray(host_ends)
    out = cupy.zeros(batch.out_size, cupy.uint8)
    status = cupy.zeros(len(batch.infos), cupy.int32)
    stream = cupy.cuda.Stream()  # blocking: ordered after the allocations on the default stream
    if expand_lz:
        rows = np.ascontiguousarray(host_expansions).view(np.int64).reshape(len(host_expansions), -1)
        cuda_c.launch_expand(data, cupy.asarray(rows), status, stream=stream)
        tables = l3batch.ans_records(batch, scratch)
        columns = len(ans_stage.TABLE_STAGE_DTYPE.names)
        cuda_c.launch_ans_tables(data, cupy.asarray(tables.view(np.int64).reshape(len(tables), columns)),
                                 stream=stream)
        stream.synchronize()
    statuses = status.get()
    for launch in batch.launches:
        launch_status = cupy.zeros(len(launch.items), cupy.int32)
        cuda_c.launch(launch, data, starts, ends, out, launch_status, stream=stream)
        stream.synchronize()
        statuses[launch.item_index] = np.maximum(statuses[launch.item_index], launch_status.get())
    return l3batch.status_codes(statuses), out.get()


def _assert_launches_match_cpu(cupy):
    files, regions = _real_gpu_batch()
    batch = l3batch.prepare(files, regions)
    assert batch.lz.scratch_size  # the labels items have LZ planes: the expansion runs first
    statuses, out = _decode_with_launches(cupy, batch)
    assert statuses.tolist() == [0] * len(files)
    for got, data_, region in zip(l3batch.split_output(batch, out), files, regions):
        np.testing.assert_array_equal(got, l3codec.decode(data_, region=region))
    return files, batch


@pytest.mark.cuda
def test_real_gpu_matches_cpu():
    _assert_launches_match_cpu(_cupy_with_gpu())


@pytest.mark.emulator
def test_the_real_gpu_tests_launches_replayed_under_the_emulator(monkeypatch):
    """test_real_gpu_matches_cpu's own launch sequence (_decode_with_launches) with _FakeCupy, whose
    kernels run on the emulator: every status 0 and the CPU decoder's pixels. The sequence without the
    LZ expansion fails the replay as it would fail a GPU: the three LZ items report BAD_KIND (their
    decode kernels meet an LZ kind), so the replay can tell a wrong sequence."""
    import sys

    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy)
    monkeypatch.setattr(cuda_c, "_modules", {})
    files, batch = _assert_launches_match_cpu(_FakeCupy)
    lz_items = sorted({int(item) for item in batch.lz.records["status_index"]})
    assert lz_items == [1, 5, 13]
    statuses, _ = _decode_with_launches(_FakeCupy, batch, expand_lz=False)
    assert statuses.tolist() == [fmt.STATUS_BAD_KIND if i in lz_items else 0 for i in range(len(files))]


def test_a_launch_the_emulator_refuses_raises():
    """decode_batch_emulated fails loudly, naming the kernel and the emulator's reason."""
    data = _encode(make_image("smooth_noise", 20, 20, 3, np.uint8, 0), "compact", 16)
    with pytest.raises(EmulationError, match="l3_decode_compact: unsupported launch"):
        decode_batch_emulated([data], block=(32, 33, 1))  # 1056 threads


def test_a_rice_group_with_fewer_ones_than_samples_decodes_the_same_under_any_poison():
    """A unary part of only zeros (no sample's code ends): the kernel flags the row and reads no
    rank it never filed, so what it writes does not depend on the shared memory's old contents
    (the emulator poisons it differently per seed and thread order)."""
    from corruption import FAST_WIDTH, ZERO_ROW, fast_row, fast_stream, single_stream_file

    n, qsum = 64, 20
    no_ones = fast_row([(8 + 1, qsum, [0] * (n + qsum)), None])  # code 9: k = 0, 8-bit samples
    data = single_stream_file(fast_stream([ZERO_ROW, no_ones]), fmt.MODE_FAST, 2, width=FAST_WIDTH)
    outputs = set()
    for order, seed in (("forward", 1), ("shuffled", 2), ("reversed", 3), ("shuffled", 4)):
        images, status = decode_batch_emulated([data], order=order, seed=seed)
        assert status.tolist() == [fmt.STATUS_CORRUPT]
        outputs.add(images[0].tobytes())
    assert len(outputs) == 1
