"""The public verbs' argument checks: out=, non-buffer data, what a non-L3 file is called, imwrite,
and decode()'s default pixel budget."""

import os
import subprocess
import sys

import numpy as np
import pytest

import l3codec
from images import make_image

H, W = 21, 35


@pytest.fixture(scope="module")
def image_and_data():
    image = make_image("gradient", H, W, 3, np.uint16)
    return image, l3codec.encode(image)


def test_out_is_validated_before_decoding(image_and_data):
    image, data = image_and_data
    read_only = np.zeros_like(image)
    read_only.flags.writeable = False
    cases = [
        (read_only, "writeable"),
        (np.zeros((H, W, 3), np.uint8), "uint16 array of shape"),
        (np.zeros((H, W), np.uint16), "uint16 array of shape"),
        (np.zeros((H, W, 3), ">u2"), "uint16 array of shape"),
        ([[0] * W] * H, "numpy array, not list"),
    ]
    for out, message in cases:
        with pytest.raises(l3codec.L3Error, match=message):
            l3codec.decode(data, out=out)
    assert not read_only.any()
    out = np.zeros_like(image)
    assert l3codec.decode(data, out=out) is out
    np.testing.assert_array_equal(out, image)


def test_out_may_be_a_strided_view_into_a_larger_buffer(image_and_data):
    # a padded batch slot: rows of a wider buffer, every other column
    image, data = image_and_data
    padded = np.zeros((H + 2, W * 2 + 3, 3), np.uint16)
    window = padded[1:H + 1, 1:W * 2 + 1:2]
    assert l3codec.decode(data, out=window) is window
    np.testing.assert_array_equal(window, image)
    window[...] = 0
    assert not padded.any(), "decode wrote outside the view it was given"


@pytest.mark.parametrize("data", ["x.l3", None, 5, [1, 2, 3]])
def test_non_buffers_raise_type_error(data):
    for verb in (l3codec.check, l3codec.decode, l3codec.info):
        with pytest.raises(TypeError, match="bytes-like"):
            verb(data)


def test_a_path_points_to_imread():
    with pytest.raises(TypeError, match="imread"):
        l3codec.check("x.l3")


def test_check_is_false_for_bad_data_of_any_buffer_type(image_and_data):
    _, data = image_and_data
    for buffer in (data, bytearray(data), np.frombuffer(data, np.uint8)):
        assert l3codec.check(buffer)
    assert not l3codec.check(memoryview(data)[:-1])
    assert not l3codec.check(b"")


@pytest.mark.parametrize(
    "data, message",
    [
        (b"a 28-byte text file, not L3\n", r"not an L3 image: magic b'a 28'"),
        (b"", "not an L3 image: 0 bytes"),
        (b"\x89PNG", r"not an L3 image: magic b'\\x89PNG'"),
        (b"L3", "truncated: 2 bytes is shorter than the 44-byte header"),
        (b"L3IM" + bytes(20), "truncated: 24 bytes is shorter than the 44-byte header"),
    ],
)
def test_magic_is_checked_before_the_size(data, message):
    with pytest.raises(l3codec.L3Error, match=message):
        l3codec.info(data)


def test_imwrite_refuses_another_format_suffix(tmp_path):
    image = make_image("noise", 8, 8, 1, np.uint8)
    for name in ("x.png", "x", "x.l3.tmp"):
        with pytest.raises(l3codec.L3Error, match=r"must end in \.l3"):
            l3codec.imwrite(tmp_path / name, image)
    assert not list(tmp_path.iterdir())
    l3codec.imwrite(tmp_path / "x.L3", image)
    l3codec.imwrite(str(tmp_path / "y.l3"), image)
    np.testing.assert_array_equal(l3codec.imread(tmp_path / "x.L3"), image)


def test_a_non_buffer_is_also_an_l3error():
    with pytest.raises(l3codec.L3Error):
        l3codec.decode(None)


BOMB = os.path.join(os.path.dirname(__file__), "bombs", "rgba16-16384x16384.l3")  # 57 KB; 4 GiB of pixels
# The child's own peak: VmHWM, not getrusage's ru_maxrss, which carries over the peak of the
# process it was forked from (this test process, torch and all, when other tests ran first).
PEAK_SCRIPT = """
import re, sys
import l3codec
data = open(sys.argv[1], "rb").read()
try:
    l3codec.decode(data)
    outcome = "decoded"
except l3codec.L3Error as error:
    outcome = str(error)
peak_kib = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(int(peak_kib) // 1024, outcome)
"""


def test_a_small_file_cannot_make_decode_allocate_gigabytes_by_default():
    """decode() with default arguments, in a child whose peak memory is measured: the 57 KB file
    describes 16384 x 16384 16-bit RGBA (4 GiB decoded, 4.2 GiB peak before the default budget)."""
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, BOMB], capture_output=True, text=True, timeout=120)
    peak_mib, outcome = done.stdout.split(" ", 1)
    assert int(peak_mib) < 400, f"peak {peak_mib} MiB: {outcome}"
    assert "16384x16384 pixels exceed max_pixels=67108864" in outcome, done.stderr[-2000:]


def test_the_pixel_budget_is_raised_knowingly():
    with open(BOMB, "rb") as file:
        data = file.read()
    assert l3codec.decode(data, region=(100, 200, 64, 32)).shape == (64, 32, 4)  # a window within the budget
    with pytest.raises(l3codec.L3Error, match="exceed max_pixels=67108864"):
        l3codec.decode(data)
    assert not l3codec.check(data)
    small = l3codec.encode(np.zeros((40, 50), np.uint8))
    with pytest.raises(l3codec.L3Error, match="40x50 pixels exceed max_pixels=1999"):
        l3codec.decode(small, max_pixels=1999)
    assert l3codec.decode(small, max_pixels=2000).shape == (40, 50)
