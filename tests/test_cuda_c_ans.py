"""Format 10's kind-10 (rANS) streams in the CUDA C kernels, run by the host emulation: the table stage
(kernels/ans.cu) and the compact band kernel's kind-10 path (kernels/compact.cu, ans.cuh) decode bit for bit
like the reference, beside kind-1, palette and LZ tiles, and report the CPU decoder's statuses."""

import numpy as np
import pytest

import l3codec
from ans_streams import ans_stream_parts, with_ans_streams
from corruption import MEMBER, first_cpu_status, mutate_payload, palette_stream, reseal, single_stream_file
from l3codec import ans_cpu, encoder_policy
from images import make_image
from l3codec import batch as l3batch
from l3codec import format as fmt
from l3codec.kernels.emulation import decode_batch_emulated


def _image(kind, height, width, channels, dtype, seed):
    """make_image's, or for "text+noise" text on the left (LZ tiles) and smooth noise on the right."""
    if kind != "text+noise":
        return make_image(kind, height, width, channels, dtype, seed)
    half = width // 2
    return np.concatenate([make_image("text", height, half, channels, dtype, seed),
                           make_image("smooth_noise", height, width - half, channels, dtype, seed)], axis=1)


def _file(kind, height, width, channels, dtype, tile_width, tile_height, every=2, seed=1, **options):
    """A compact file whose every `every`-th stream is kind 10 where it codes its own plane, the others as
    the encoder chose, and its pixels."""
    image = _image(kind, height, width, channels, dtype, seed)
    default_coder = encoder_policy.COMPACT_CODER
    encoder_policy.COMPACT_CODER = "rice"  # kind 1 as the base, so the batch mixes both coders
    try:
        data = l3codec.encode(image, mode="compact", tile_width=tile_width, tile_height=tile_height,
                              transform=options.pop("transform", None))
    finally:
        encoder_policy.COMPACT_CODER = default_coder
    streams = len(fmt.parse(data).stream_starts)
    return with_ans_streams(data, set(range(0, streams, every)), **options), image


# (image kind, height, width, channels, dtype, tile width, tile height, options)
MIXED = [
    ("smooth_noise", 70, 90, 1, np.uint8, 64, 64, {}),  # partial tiles both ways, two bands + a short one
    ("smooth_noise", 300, 40, 3, np.uint8, 32, 256, {"biased": True}),  # 8 bands; rg-mean transform
    ("smooth_noise", 50, 70, 2, np.uint16, 32, 32, {"precision": 6}),
    ("gradient", 40, 100, 4, np.uint16, 64, 32, {"transform": "subtract-green", "biased": True}),
    ("noise", 33, 40, 3, np.uint8, 16, 32, {"precision": 12, "every": 3}),  # incompressible rows
    ("labels", 64, 64, 3, np.uint8, 32, 64, {}),  # palette tiles
    ("text+noise", 64, 256, 1, np.uint16, 64, 32, {"every": 1}),  # LZ tiles beside kind 10 in one file
]


def _mixed(case):
    kind, height, width, channels, dtype, tile_width, tile_height, options = case
    options = dict(options)
    if "biased" in options:  # a bias of the sample's size, both signs
        options["bias"] = (np.arange(41) % 7 - 3) * (1 if dtype == np.uint8 else 300)
    return _file(kind, height, width, channels, dtype, tile_width, tile_height, **options)


@pytest.mark.emulator
def test_a_batch_mixing_kind_1_and_kind_10_tiles_decodes_bit_exactly():
    files, images = zip(*(_mixed(case) for case in MIXED))
    batch = l3batch.prepare(list(files))
    assert batch.ans is not None and len(batch.ans.records) >= len(files)
    kinds = set()
    for data in files:
        parsed = fmt.parse(data)
        kinds |= set(np.frombuffer(data, np.uint8)[parsed.stream_starts].tolist())
    assert {fmt.KIND_CODED, fmt.KIND_PALETTE, 10} <= kinds and kinds & {fmt.KIND_LZ, fmt.KIND_LZ_CODED}
    decoded, status = decode_batch_emulated(list(files))
    assert status.tolist() == [0] * len(files)
    for got, image in zip(decoded, images):
        np.testing.assert_array_equal(got, image)


@pytest.mark.emulator
def test_crops_decode_only_their_tiles():
    files, images = zip(*(_mixed(case) for case in MIXED[:4]))
    regions = [(5, 60, 40, 30), (250, 3, 50, 35), (31, 33, 2, 2), (0, 70, 40, 30)]
    batch = l3batch.prepare(list(files), regions)
    assert len(batch.ans.records) < sum(len(_mixed_streams(data)) for data in files)
    decoded, status = decode_batch_emulated(list(files), regions)
    assert status.tolist() == [0] * len(files)
    for got, image, (y, x, h, w) in zip(decoded, images, regions):
        np.testing.assert_array_equal(got, image[y:y + h, x:x + w])


def _mixed_streams(data):
    parsed = fmt.parse(data)
    buf = np.frombuffer(data, np.uint8)
    return [s for s in range(len(parsed.stream_starts)) if buf[parsed.stream_starts[s]] == 10]



def _hand_made_cases() -> dict:
    """{name: file}: kind-10 streams with one fault each in the header, the tables, the row-length table,
    a row or the size, on a 40-row tile (two bands) of smooth noise; and two valid ones."""
    plane = make_image("smooth_noise", 40, 32, 1, np.uint8, 3)
    head, lengths, rows = ans_stream_parts(plane, 8, biased=True, bias=np.arange(41) % 5 - 2)
    good = head + lengths + rows
    tables = 4 + 41  # kind, flags, P, L, then the 8-bit bias table: the table set follows

    def changed(at, value):
        stream = bytearray(good)
        stream[at] = value
        return bytes(stream)

    middle = len(head) + len(lengths) + len(rows) // 2
    cases = {
        "valid": good,
        "flat rows": b"".join(ans_stream_parts(np.full((40, 32), 77, np.uint8), 8)),
        "flags bit 1": changed(1, 3),
        "P 5": changed(2, 5),
        "P 13": changed(2, 13),
        "L 32": changed(3, 32),
        "alphabet past the tokens": changed(tables, 25),
        "a frequency changed": changed(tables + 1, good[tables + 1] ^ 0x10),
        "cut in the header": good[:3],
        "cut in the bias table": good[:20],
        "cut in the tables": good[:tables + 3],
        "cut in the row lengths": head + lengths[:2],
        "a row's byte changed": changed(middle, good[middle] ^ 0x01),
        "the last byte changed": changed(len(good) - 1, good[-1] ^ 0x80),
        "a byte after the rows": good + b"\0",
        "the last byte cut": good[:-1],
    }
    return {name: single_stream_file(stream, fmt.MODE_COMPACT, 40, width=32)
            for name, stream in cases.items()}


@pytest.mark.emulator
@pytest.mark.parametrize("order", ["forward", "shuffled"])
def test_hand_made_kind_10_faults_give_the_cpu_decoders_status(order):
    cases = _hand_made_cases()
    images, status = decode_batch_emulated(list(cases.values()), order=order, seed=2)
    for (name, data), got, image in zip(cases.items(), status.tolist(), images):
        assert got == first_cpu_status(data), name
        if got == fmt.STATUS_OK:
            stream = data[fmt.parse(data).payload_offset:]
            np.testing.assert_array_equal(image, ans_cpu.decode_stream(stream, 40, 32, 8)[0], err_msg=name)
    assert status.tolist()[:2] == [0, 0] and len(set(status.tolist())) >= 3


@pytest.mark.emulator
def test_fuzzed_kind_10_streams_give_the_cpu_decoders_status():
    """Random bit flips in the kind-10 streams of a two-channel 16-bit file (bias, two bands, a partial
    tile), checksums resealed: every item's status is the CPU decoder's first failing stream's."""
    data, _ = _file("smooth_noise", 70, 40, 2, np.uint16, 32, 64, every=1, biased=True,
                    bias=(np.arange(41) - 20) * 40)
    parsed = fmt.parse(data)
    rng = np.random.default_rng(10)
    damaged = []
    for _ in range(40):
        stream = int(rng.integers(len(parsed.stream_starts)))
        start, end = int(parsed.stream_starts[stream]), int(parsed.stream_ends[stream])
        bad = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(start, end))] ^= 1 << int(rng.integers(8))
        damaged.append(reseal(bytes(bad)))
    _, status = decode_batch_emulated(damaged, order="reversed")
    assert status.tolist() == [first_cpu_status(item) for item in damaged]
    assert len(set(status.tolist())) >= 2


@pytest.mark.emulator
def test_a_palette_tiles_kind_10_index_plane_decodes_through_the_stage():
    """A palette stream (3 channels) whose index plane is kind 10: the stage copies the palette's header
    and colour table before the table block, so the band kernel finds both where open_stream looks; a
    crop of it too. The colours are corruption.palette_stream's (10 * index + channel)."""
    rng = np.random.default_rng(5)
    indices = np.minimum(np.cumsum(rng.integers(0, 2, (40, 32)), axis=1) // 3, 11).astype(np.uint8)
    index_stream = ans_cpu.encode_stream(indices)
    data = single_stream_file((palette_stream(12, index_stream, 3), MEMBER, MEMBER), fmt.MODE_COMPACT, 40,
                              width=32)
    batch = l3batch.prepare([data])
    assert batch.ans.streams.tolist() == [0] and batch.ans.records["prefix_bytes"].tolist() == [2 + 12 * 3]
    expected = (10 * indices[..., None] + np.arange(3)).astype(np.uint8)
    images, status = decode_batch_emulated([data, data], [None, (30, 7, 10, 20)])
    assert status.tolist() == [0, 0]
    np.testing.assert_array_equal(images[0], expected)
    np.testing.assert_array_equal(images[1], expected[30:40, 7:27])


@pytest.mark.emulator
@pytest.mark.parametrize("coder", ["ans", "smaller"])
def test_the_encoders_kind_10_files_decode_like_the_cpu_and_fail_alike(coder, monkeypatch):
    """Files of the reference encoder with kind 10 on (encoder_policy.COMPACT_CODER: "ans" for every coded
    tile, "smaller" the smaller of kinds 1 and 10 per tile), 8- and 16-bit, 256- and 32-row tiles, a crop:
    the CPU decoder's pixels; then payload damage (corruption.mutate_payload): its first failing status."""
    from l3codec import encoder_policy

    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", coder)
    cases = [("smooth_noise", 300, 140, 3, np.uint8, 64, 256), ("gradient", 70, 50, 2, np.uint16, 32, 32),
             ("text+noise", 64, 256, 1, np.uint8, 64, 64)]
    files = []
    for kind, height, width, channels, dtype, tile_width, tile_height in cases:
        image = _image(kind, height, width, channels, dtype, 4)
        files.append(l3codec.encode(image, mode="compact", tile_width=tile_width, tile_height=tile_height))
    kinds = [np.frombuffer(data, np.uint8)[fmt.parse(data).stream_starts] for data in files]
    assert any(fmt.KIND_CODED_ANS in k for k in kinds)
    regions = [(200, 30, 90, 100), None, None]
    images, status = decode_batch_emulated(files, regions)
    assert status.tolist() == [0] * len(files)
    for got, data, region in zip(images, files, regions):
        np.testing.assert_array_equal(got, l3codec.decode(data, region=region))
    rng = np.random.default_rng(12)
    damaged = [mutate_payload(files[i % len(files)], rng) for i in range(15)]
    _, status = decode_batch_emulated(damaged, order="shuffled", seed=4)
    assert status.tolist() == [first_cpu_status(data) for data in damaged]
    assert any(status)


@pytest.mark.cuda
def test_a_real_gpu_decodes_the_mixed_batch_and_its_crops():
    """gpu.decode_batch on a GPU (cuda_c.launch_ans_tables between the LZ expansion and the decode):
    test_a_batch_mixing_kind_1_and_kind_10_tiles_decodes_bit_exactly's batch, whole and cropped."""
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as error:  # noqa: BLE001 - no driver, no device
        pytest.skip(f"no usable CUDA device: {error}")
    from l3codec import gpu

    files, images = zip(*(_mixed(case) for case in MIXED))
    for got, image in zip(gpu.decode_batch(list(files), backend="cupy"), images):
        np.testing.assert_array_equal(cupy.asnumpy(got), image)
    regions = [(3, 5, 20, 30)] * len(files)
    for got, image in zip(gpu.decode_batch(list(files), backend="cupy", regions=regions), images):
        np.testing.assert_array_equal(cupy.asnumpy(got), image[3:23, 5:35])
