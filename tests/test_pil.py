"""The Pillow plugin: Image.open / Image.save of .l3 files."""

import io
import warnings

import numpy as np
import pytest
from PIL import Image, UnidentifiedImageError

import l3codec
import l3codec.pil  # noqa: F401  (registers the plugin)

from images import make_image

H, W = 37, 53

# Pillow mode -> (channels, dtype)
MODES = {
    "L": (1, np.uint8),
    "I;16": (1, np.uint16),
    "LA": (2, np.uint8),
    "RGB": (3, np.uint8),
    "RGBA": (4, np.uint8),
}


def pillow_image(mode: str, kind: str = "smooth_noise") -> tuple:
    channels, dtype = MODES[mode]
    array = make_image(kind, H, W, channels, dtype, seed=3)
    image = Image.fromarray(array, mode) if mode == "LA" else Image.fromarray(array)
    assert image.mode == mode
    return image, array


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_file(tmp_path, mode):
    image, array = pillow_image(mode)
    path = tmp_path / "x.l3"
    image.save(path)
    assert path.read_bytes()[:4] == b"L3IM"
    with Image.open(path) as loaded:
        assert (loaded.format, loaded.mode, loaded.size) == ("L3", mode, (W, H))
        assert loaded.get_format_mimetype() == "image/x-l3"
        np.testing.assert_array_equal(np.asarray(loaded), array)


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_bytesio_with_options(mode):
    image, array = pillow_image(mode, kind="labels")
    buffer = io.BytesIO()
    image.save(buffer, format="L3", mode="fast", tile_width=32, tile_height=16)
    facts = l3codec.info(buffer.getvalue())
    assert (facts.mode, facts.tile_width, facts.tile_height) == ("fast", 32, 16)
    np.testing.assert_array_equal(l3codec.decode(buffer.getvalue()), array)
    buffer.seek(0)
    loaded = Image.open(buffer)
    assert loaded.mode == mode
    np.testing.assert_array_equal(np.asarray(loaded), array)


def test_registered():
    assert Image.registered_extensions()[".l3"] == "L3"
    assert Image.MIME["L3"] == "image/x-l3"
    assert "L3" in Image.SAVE and "L3" in Image.OPEN


def test_open_is_lazy_and_load_verifies():
    image, _ = pillow_image("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="L3")
    data = bytearray(buffer.getvalue())
    data[-1] ^= 0xFF  # payload byte: only the payload checksum notices
    loaded = Image.open(io.BytesIO(bytes(data)))
    assert (loaded.mode, loaded.size) == ("RGB", (W, H))
    with pytest.raises(l3codec.L3Error, match="checksum"):
        loaded.load()


def test_other_formats_not_claimed(tmp_path):
    image, array = pillow_image("RGB")
    path = tmp_path / "x.png"
    image.save(path)
    with Image.open(path) as loaded:
        assert loaded.format == "PNG"
        np.testing.assert_array_equal(np.asarray(loaded), array)
    assert not l3codec.pil._accept(path.read_bytes()[:16])
    with pytest.raises(UnidentifiedImageError):
        Image.open(io.BytesIO(b"L3 is not this" * 10))


@pytest.mark.parametrize("keep", [2, 10, 50, -7])
def test_truncated_gives_clear_error(keep):
    image, _ = pillow_image("RGBA")
    buffer = io.BytesIO()
    image.save(buffer, format="L3")
    data = buffer.getvalue()[:keep]
    with pytest.raises((l3codec.L3Error, OSError)) as caught:
        with Image.open(io.BytesIO(data)) as loaded:
            loaded.load()
    if keep >= 4:  # the magic is there, so it is ours to explain
        assert isinstance(caught.value, l3codec.L3Error)
        assert "truncated" in str(caught.value)


def test_sixteen_bit_colour_has_no_pillow_mode():
    data = l3codec.encode(make_image("gradient", H, W, 3, np.uint16))
    with pytest.raises(l3codec.L3Error, match="no mode for 16-bit images with 3 channels"):
        Image.open(io.BytesIO(data))


def test_save_converts_under_the_tools_policy_and_warns():
    palette = Image.fromarray(make_image("labels", H, W, 1, np.uint8) % 4).convert("P")
    palette.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
    transparent = palette.copy()
    transparent.info["transparency"] = 0
    bilevel = Image.fromarray(make_image("noise", H, W, 1, np.uint8) > 127)
    cmyk = Image.fromarray(make_image("smooth_noise", H, W, 3, np.uint8)).convert("CMYK")
    wide = Image.fromarray(make_image("noise", H, W, 1, np.uint16).astype(np.int32))
    assert (palette.mode, bilevel.mode, cmyk.mode, wide.mode) == ("P", "1", "CMYK", "I")
    for image, expected, warning in [
        (palette, palette.convert("RGB"), "a P image: palette expanded to RGB (L3 stores no palette)"),
        (transparent, transparent.convert("RGBA"),
         "a P image: palette expanded to RGBA (L3 stores no palette)"),
        (bilevel, bilevel.convert("L"), "a 1 image: 1-bit grey scaled to 8-bit (0..255)"),
        (cmyk, cmyk.convert("RGB"), "a CMYK image: CMYK converted to RGB"),
        (wide, wide.convert("I;16"), None),
    ]:
        buffer = io.BytesIO()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            image.save(buffer, format="L3")
        assert [str(w.message) for w in caught] == ([f"L3 plugin, saving {warning}"] if warning else [])
        if warning:
            assert caught[0].filename == __file__  # points at the caller's save()
        buffer.seek(0)
        loaded = Image.open(buffer)
        assert loaded.mode == expected.mode
        np.testing.assert_array_equal(np.asarray(loaded), np.asarray(expected))


def test_save_refuses_modes_outside_the_policy():
    for image in (Image.new("YCbCr", (W, H)), Image.new("F", (W, H)), Image.new("I", (W, H), 70000)):
        with pytest.raises(OSError, match="cannot write mode"):
            image.save(io.BytesIO(), format="L3")


def test_bad_option_is_l3error():
    image, _ = pillow_image("L")
    with pytest.raises(l3codec.L3Error, match="tile width"):
        image.save(io.BytesIO(), format="L3", tile_width=17)
