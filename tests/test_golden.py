"""Checked-in files catch format drift in the decoder and in the encoder."""

import pathlib

import numpy as np
import pytest

import l3codec
from l3codec import format as fmt

GOLDEN = pathlib.Path(__file__).parent / "golden"
NAMES = sorted(path.stem for path in GOLDEN.glob("*.l3"))


def test_golden_files_exist():
    assert len(NAMES) >= 8


def test_golden_files_are_current_version():
    """The version field of each file's header bytes, as stored (not Info's default)."""
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        stored = int(np.frombuffer(data, fmt.HEADER_DTYPE, count=1)["version"][0])
        assert stored == l3codec.VERSION, name
        assert l3codec.info(data).version == stored, name


@pytest.mark.parametrize("name", NAMES)
def test_golden_decodes_to_expected_pixels(name):
    expected = np.load(GOLDEN / f"{name}.npy")
    decoded = l3codec.decode((GOLDEN / f"{name}.l3").read_bytes())
    assert decoded.dtype == expected.dtype
    np.testing.assert_array_equal(decoded, expected)


@pytest.mark.parametrize("name", NAMES)
def test_encoder_reproduces_golden_bytes(name):
    data = (GOLDEN / f"{name}.l3").read_bytes()
    info = l3codec.info(data)
    options = {"mode": info.mode, "tile_width": info.tile_width, "tile_height": info.tile_height,
               "transform": info.transform}
    assert l3codec.encode(np.load(GOLDEN / f"{name}.npy"), **options) == data
