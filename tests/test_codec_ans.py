"""Kind 10 in files (format 10, compact v2): the encoder writes it for coded compact tiles when
encoder_policy.COMPACT_CODER says so, and the CPU decoder reads it wherever it meets it: whole images,
regions, several threads, check(); a fast file holding one is refused."""

import numba
import numpy as np
import pytest
from images import make_image

import l3codec
from l3codec import ans_cpu, encoder_policy
from l3codec import format as fmt


@pytest.fixture
def coder(monkeypatch):
    def use(name):
        monkeypatch.setattr(encoder_policy, "COMPACT_CODER", name)

    return use


def stream_kinds(data):
    parsed = fmt.parse(data)
    return np.frombuffer(data, np.uint8)[parsed.stream_starts]


def repacked(data, replace):
    """data with its streams replaced by replace(stream index, bytes) (checksums made anew)."""
    parsed = fmt.parse(data)
    streams = [replace(i, bytes(data[start:end]))
               for i, (start, end) in enumerate(zip(parsed.stream_starts, parsed.stream_ends))]
    header = parsed.header
    return fmt.pack(width=parsed.info.width, height=parsed.info.height, channels=parsed.info.channels,
                    bits=parsed.info.bits, mode=int(header["mode"]), transform=int(header["transform"]),
                    tile_width=parsed.info.tile_width, tile_height=parsed.info.tile_height,
                    stream_ends=np.cumsum([len(s) for s in streams]), payload=b"".join(streams))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("tile_height", [32, 256])
def test_compact_files_of_kind_10_round_trip(coder, tile_height, channels, dtype):
    """Partial tiles at the right and bottom, a tall tile's bands; regions decode only their tiles."""
    coder("ans")
    image = make_image("smooth_noise", 300, 200, channels, dtype, seed=channels)
    data = l3codec.encode(image, mode="compact", tile_width=128, tile_height=tile_height)
    assert set(stream_kinds(data)) == {fmt.KIND_CODED_ANS}
    np.testing.assert_array_equal(l3codec.decode(data), image)
    np.testing.assert_array_equal(l3codec.decode(data, region=(100, 70, 150, 100)), image[100:250, 70:170])
    assert l3codec.check(data)


def test_every_content_kind_round_trips_beside_the_other_stream_kinds(coder):
    """Palette, LZ, constant and raw tiles stay: kind 10 is one choice among them."""
    coder("ans")
    kinds_seen = set()
    for kind in ("labels", "flat_graphics", "text", "constant", "noise", "extremes", "gradient"):
        image = make_image(kind, 96, 160, 3, np.uint8, seed=2)
        data = l3codec.encode(image, mode="compact", tile_width=48, tile_height=64)
        np.testing.assert_array_equal(l3codec.decode(data), image)
        kinds_seen |= set(stream_kinds(data).tolist())
    assert fmt.KIND_CODED_ANS in kinds_seen and fmt.KIND_CODED not in kinds_seen
    assert kinds_seen & {fmt.KIND_CONSTANT, fmt.KIND_RAW} and kinds_seen & {fmt.KIND_PALETTE, fmt.KIND_PIXEL_LZ,
                                                                              fmt.KIND_PIXEL_LZ_CODED}


def test_several_threads_decode_what_one_does(coder):
    coder("ans")
    image = make_image("smooth_noise", 256, 512, 3, np.uint16, seed=4)
    data = l3codec.encode(image, mode="compact", tile_width=64, tile_height=64)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = l3codec.decode(data)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        np.testing.assert_array_equal(l3codec.decode(data), one)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(one, image)


def test_the_smaller_coder_keeps_the_smaller_stream_of_each_tile(coder):
    image = make_image("smooth_noise", 128, 256, 3, np.uint8, seed=6)
    sizes = {}
    for name in ("rice", "ans", "smaller"):
        coder(name)
        data = l3codec.encode(image, mode="compact", tile_width=64, tile_height=64)
        np.testing.assert_array_equal(l3codec.decode(data), image)
        parsed = fmt.parse(data)
        sizes[name] = parsed.stream_ends - parsed.stream_starts
    np.testing.assert_array_equal(sizes["smaller"], np.minimum(sizes["rice"], sizes["ans"]))


def test_a_damaged_kind_10_stream_fails_check_with_its_status(coder):
    coder("ans")
    image = make_image("smooth_noise", 64, 64, 1, np.uint8, seed=1)
    data = l3codec.encode(image, mode="compact", tile_width=64, tile_height=64)
    damaged = repacked(data, lambda i, stream: stream[:2] + bytes([13]) + stream[3:])  # precision 13
    assert not l3codec.check(damaged)
    with pytest.raises(l3codec.L3Error, match=fmt.STATUS_MESSAGES[fmt.STATUS_BAD_HEADER]):
        l3codec.decode(damaged)
    cut = repacked(data, lambda i, stream: stream[:-1])
    with pytest.raises(l3codec.L3Error, match=fmt.STATUS_MESSAGES[fmt.STATUS_BAD_SIZE]):
        l3codec.decode(cut)


def test_a_kind_10_stream_in_a_fast_file_is_a_bad_kind():
    image = make_image("smooth_noise", 64, 64, 1, np.uint8, seed=1)
    data = l3codec.encode(image, mode="fast", tile_width=64, tile_height=64)
    assert l3codec.info(data).mode == "fast"
    swapped = repacked(data, lambda i, stream: ans_cpu.encode_stream(image))
    with pytest.raises(l3codec.L3Error, match=fmt.STATUS_MESSAGES[fmt.STATUS_BAD_KIND]):
        l3codec.decode(swapped)


def test_the_default_coder_is_still_kind_1():
    """Until every backend decodes kind 10 (issue #39 decision 1)."""
    image = make_image("smooth_noise", 64, 64, 1, np.uint8, seed=1)
    assert set(stream_kinds(l3codec.encode(image, mode="compact"))) == {fmt.KIND_CODED}
