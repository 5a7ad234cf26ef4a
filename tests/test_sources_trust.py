"""Source images that look harmless and are not: huge headers over a few bytes, PNGs cut after
their pixels or damaged in a checksum, 16-bit grey+alpha; and the l3 tool on FIFOs and failed
batches."""

import os
import struct
import zlib

import numpy as np
import pytest

import l3codec
from l3codec import sources
from l3codec.cli import main as l3


def png(width, height, colour_type, bit_depth, raw_rows: bytes) -> bytes:
    """A PNG written chunk by chunk (what Pillow cannot write: 16-bit grey+alpha, or a header
    promising more than the data holds)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (sources.PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw_rows))
            + chunk(b"IEND", b""))


def grey_png(height=4, width=5) -> tuple:
    pixels = np.arange(height * width, dtype=np.uint8).reshape(height, width)
    rows = b"".join(b"\0" + row.tobytes() for row in pixels)
    return png(width, height, 0, 8, rows), pixels


def test_a_huge_header_over_a_few_bytes_is_refused_before_any_pixel_is_decoded(recwarn):
    data = png(20000, 20000, 2, 8, b"\0" * 64)  # promises 1.2 GB of RGB
    assert len(data) < 200
    with pytest.raises(sources.UnreadableSource, match="20000x20000 is more than the 67108864 pixels allowed"):
        sources.read(data)
    assert not [w for w in recwarn if "DecompressionBomb" in type(w.message).__name__]


def test_a_png_cut_after_its_pixels_or_with_a_bad_crc_is_refused():
    data, pixels = grey_png()
    image, notes = sources.read(data)
    np.testing.assert_array_equal(image, pixels)  # the whole file reads
    with pytest.raises(sources.UnreadableSource, match="truncated or corrupt PNG file"):
        sources.read(data[:-20])  # IEND and the last IDAT's CRC gone: the pixels are all there
    damaged = bytearray(data)
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4:idat])[0]
    damaged[idat + 4 + length] ^= 0xFF  # the IDAT chunk's CRC
    with pytest.raises(sources.UnreadableSource, match="IDAT chunk CRC mismatch"):
        sources.read(bytes(damaged))


def test_sixteen_bit_grey_alpha_stays_two_channels_exactly():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 65536, (3, 4, 2), dtype=np.uint16)
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in pixels)
    image, _ = sources.read(png(4, 3, 4, 16, rows))
    assert image.shape == (3, 4, 2) and image.dtype == np.uint16
    np.testing.assert_array_equal(image, pixels)
    np.testing.assert_array_equal(l3codec.decode(l3codec.encode(image)), pixels)


def test_l3_skips_a_fifo_and_leaves_no_empty_output_directory(tmp_path, capsys):
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    (tmp_path / "empty.png").write_bytes(b"")
    out = tmp_path / "outx"
    assert l3(["encode", str(fifo), str(tmp_path / "empty.png"), "-o", f"{out}/"]) == 1
    error = capsys.readouterr().err
    assert f"l3: {fifo}: not a regular file" in error and "empty file" in error
    assert not out.exists()


def test_l3_decode_refuses_more_than_max_pixels_from_the_header(tmp_path, capsys):
    data = l3codec.encode(np.zeros((40, 50), np.uint8))
    (tmp_path / "a.l3").write_bytes(data)
    assert l3(["decode", str(tmp_path / "a.l3"), "--max-pixels", "1999", "-o", str(tmp_path / "a.png")]) == 1
    assert "40x50 pixels exceed max_pixels=1999" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()
    assert l3(["check", str(tmp_path / "a.l3"), "--max-pixels", "2000"]) == 0
    with pytest.raises(l3codec.L3Error, match="exceed max_pixels"):
        l3codec.decode(data, max_pixels=100)


def zeros_png(height, width) -> bytes:
    """A valid grey PNG of zeros: a few kilobytes however many pixels it holds."""
    return png(width, height, 0, 8, b"\0" * ((width + 1) * height))


def test_l3_encode_refuses_a_png_over_the_pixel_budget_unless_raised(tmp_path, capsys):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(zeros_png(8200, 8200))  # 67.2 million pixels, over the default 8192 x 8192
    assert bomb.stat().st_size < 200_000
    assert l3(["encode", str(bomb), "-o", str(tmp_path / "bomb.l3")]) == 1
    assert f"l3: {bomb}: 8200x8200 is more than the 67108864 pixels allowed" in capsys.readouterr().err
    assert not (tmp_path / "bomb.l3").exists()
    small = tmp_path / "small.png"
    small.write_bytes(zeros_png(30, 40))
    assert l3(["encode", str(small), "--max-pixels", "1199", "-o", str(tmp_path / "a.l3")]) == 1
    assert "40x30 is more than the 1199 pixels allowed" in capsys.readouterr().err
    assert l3(["encode", str(small), "--max-pixels", "1200", "-o", str(tmp_path / "a.l3")]) == 0
    np.testing.assert_array_equal(l3codec.imread(tmp_path / "a.l3"), np.zeros((30, 40), np.uint8))
