"""The pixel policy: what each kind of source becomes (README, "Converting a dataset")."""

import io
import os

import cv2
import numpy as np
import pytest
from PIL import Image

import l3codec
from l3codec.converters import convert
from l3codec.dataset import open_dataset, read_manifest

from dataset_trees import cityscapes_tree

RNG = np.random.default_rng(7)


def convert_one(tmp_path, name, write, **options):
    """Convert a folder holding one file; (decoded image, manifest)."""
    src = tmp_path / "src"
    src.mkdir(parents=True)
    write(str(src / name))
    convert("folder", src, tmp_path / "dst", workers=0, progress=False, verify=True, **options)
    reader = open_dataset(tmp_path / "dst")
    assert len(reader) == 1, read_manifest(tmp_path / "dst")["failures"]
    return l3codec.decode(reader.read(0)), read_manifest(tmp_path / "dst")


def test_16bit_colour_png_stays_16bit(tmp_path):
    rgb = RNG.integers(0, 65536, (24, 40, 3), dtype=np.uint16)
    image, _ = convert_one(tmp_path, "deep.png", lambda path: cv2.imwrite(path, rgb[:, :, ::-1]))
    assert image.dtype == np.uint16 and np.array_equal(image, rgb)


def test_16bit_rgba_png_keeps_alpha(tmp_path):
    rgba = RNG.integers(0, 65536, (24, 40, 4), dtype=np.uint16)
    image, _ = convert_one(tmp_path, "deep.png", lambda path: cv2.imwrite(path, rgba[:, :, [2, 1, 0, 3]]))
    assert np.array_equal(image, rgba)


def test_16bit_grayscale_stays_one_channel(tmp_path):
    gray = RNG.integers(0, 65536, (24, 40), dtype=np.uint16)
    image, _ = convert_one(tmp_path, "gray16.png", lambda path: Image.fromarray(gray).save(path))
    assert image.dtype == np.uint16 and np.array_equal(image, gray)


def test_rgba_and_gray_alpha_keep_alpha(tmp_path):
    rgba = RNG.integers(0, 256, (24, 40, 4), dtype=np.uint8)
    image, _ = convert_one(tmp_path, "a.png", lambda path: Image.fromarray(rgba).save(path))
    assert np.array_equal(image, rgba)
    la = RNG.integers(0, 256, (24, 40, 2), dtype=np.uint8)
    image, _ = convert_one(tmp_path / "la", "la.png", lambda path: Image.fromarray(la, "LA").save(path))
    assert np.array_equal(image, la)


def test_palette_is_expanded_to_rgba_when_transparent(tmp_path):
    indices = RNG.integers(0, 4, (24, 40), dtype=np.uint8)
    palette = [255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9]

    def write(path, transparency):
        image = Image.fromarray(indices, "P")
        image.putpalette(palette)
        image.save(path, **({"transparency": 3} if transparency else {}))

    colours = np.array(palette, np.uint8).reshape(4, 3)
    image, manifest = convert_one(tmp_path, "p.png", lambda path: write(path, False))
    assert np.array_equal(image, colours[indices]) and manifest["pixel_notes"] == {"palette-expanded": 1}
    image, _ = convert_one(tmp_path / "t", "p.png", lambda path: write(path, True))
    alpha = np.where(indices == 3, 0, 255).astype(np.uint8)
    assert np.array_equal(image, np.dstack([colours[indices], alpha]))


def test_cmyk_jpeg_is_converted_and_recorded(tmp_path):
    cmyk = Image.fromarray(RNG.integers(0, 256, (24, 40, 4), dtype=np.uint8), "CMYK")

    def write(path):
        cmyk.save(path, quality=95)

    image, manifest = convert_one(tmp_path, "c.jpg", write)
    with Image.open(tmp_path / "src" / "c.jpg") as source:
        assert source.mode == "CMYK"
        assert np.array_equal(image, np.asarray(source.convert("RGB")))
    assert manifest["pixel_notes"] == {"cmyk-converted": 1}


def _rotated_jpeg(path, pixels):
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    Image.fromarray(pixels).save(path, exif=exif, quality=95)


def test_exif_orientation_ignored_by_default_applied_on_request(tmp_path):
    pixels = RNG.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    stored, _ = convert_one(tmp_path, "r.jpg", lambda path: _rotated_jpeg(path, pixels))
    assert stored.shape == (24, 40, 3)
    with Image.open(tmp_path / "src" / "r.jpg") as source:
        assert np.array_equal(stored, np.asarray(source))
    turned, manifest = convert_one(tmp_path / "t", "r.jpg", lambda path: _rotated_jpeg(path, pixels),
                                   exif_transpose=True)
    assert turned.shape == (40, 24, 3) and np.array_equal(turned, np.rot90(stored, -1))
    assert manifest["options"]["exif_transpose"] and manifest["pixel_notes"] == {"exif-transposed": 1}


def test_resize_is_lossy_recorded_and_labels_stay_labels(tmp_path):
    expected = cityscapes_tree(tmp_path / "src", per_city=1, test_images=1)
    convert("cityscapes", tmp_path / "src", tmp_path / "dst", split="train", max_side=20, workers=0,
            progress=False)
    manifest = read_manifest(tmp_path / "dst")
    assert manifest["options"]["lossy_resize"] and manifest["options"]["max_side"] == 20
    reader = open_dataset(tmp_path / "dst", "train")
    for i in range(len(reader)):
        sample = expected["train"][reader.key(i)]
        for field in reader.fields:
            assert reader.shape(i, field)[:2] == (12, 20)
        labels = l3codec.decode(reader.read(i, "labelIds"))
        assert np.array_equal(labels, cv2.resize(sample["labelIds"], (20, 12), interpolation=cv2.INTER_NEAREST))
        instances = l3codec.decode(reader.read(i, "instanceIds"))
        assert instances.dtype == np.uint16 and set(np.unique(instances)) <= set(np.unique(sample["instanceIds"]))


def test_resize_short_never_upscales(tmp_path):
    pixels = RNG.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    image, manifest = convert_one(tmp_path, "a.png", lambda path: Image.fromarray(pixels).save(path),
                                  resize_short=100)
    assert np.array_equal(image, pixels)
    image, _ = convert_one(tmp_path / "s", "a.png", lambda path: Image.fromarray(pixels).save(path),
                           resize_short=12)
    assert image.shape == (12, 20, 3)
    assert np.array_equal(image, cv2.resize(pixels, (20, 12), interpolation=cv2.INTER_AREA))


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_modes_and_tile_width_reach_the_encoder(tmp_path, mode):
    pixels = RNG.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    src = tmp_path / "src"
    src.mkdir()
    Image.fromarray(pixels).save(src / "a.png")
    convert("folder", src, tmp_path / "dst", mode=mode, tile_width=16, workers=0, progress=False)
    info = l3codec.info(open_dataset(tmp_path / "dst").read(0))
    assert info.mode == mode and info.tile_width == 16
