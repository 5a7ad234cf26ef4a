"""The pixel policy (l3codec/sources.py) as the converter applies it (README, "Converting a dataset")."""

import io

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

import l3codec
from l3codec import sources
from l3codec.cli import main
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
    assert np.array_equal(image, colours[indices]) and manifest["pixel_notes"] == {sources.PALETTE_NOTE.format(layout="RGB"): 1}
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
    assert manifest["pixel_notes"] == {"CMYK converted to RGB": 1}


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
    assert manifest["options"]["exif_transpose"] and manifest["pixel_notes"] == {"EXIF orientation applied": 1}


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


def test_the_l3_tool_and_the_converter_read_a_source_alike(tmp_path, capsys):
    """One policy: each file gives the same pixels and the same notes through both."""
    rgb = RNG.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    palette = Image.fromarray(rgb).convert("P")
    writers = {
        "p.png": lambda path: palette.save(path),
        "key.png": lambda path: Image.fromarray(rgb).save(path, transparency=tuple(int(v) for v in rgb[0, 0])),
        "bits.png": lambda path: Image.fromarray(rgb[:, :, 0] > 127).save(path),
        "cmyk.jpg": lambda path: Image.fromarray(rgb).convert("CMYK").save(path, quality=95),
        "grey.jpg": lambda path: Image.fromarray(rgb[:, :, 1]).save(path, quality=95),
        "deep.png": lambda path: cv2.imwrite(path, RNG.integers(0, 65536, (24, 40, 4), dtype=np.uint16)),
        "deep.tif": lambda path: cv2.imwrite(path, RNG.integers(0, 65536, (24, 40, 3), dtype=np.uint16)),
        "deep.ppm": lambda path: cv2.imwrite(path, RNG.integers(0, 65536, (24, 40, 3), dtype=np.uint16)),
        "two_bits.png": lambda path: Image.fromarray(rgb[:, :, 2] // 64 * 85).save(path, bits=2),
        "la.tif": lambda path: Image.fromarray(rgb[:, :, :2].copy(), "LA").save(path),
    }
    expected_notes = {
        "p.png": ["palette expanded to RGB (L3 stores no palette)"],
        "key.png": ["transparent colour (tRNS) made an alpha channel"],
        "bits.png": ["1-bit grey scaled to 8-bit (0..255)"],
        "two_bits.png": ["2-bit grey scaled to 8-bit (0..255)"],
        "cmyk.jpg": ["CMYK converted to RGB"],
    }
    for name, write in writers.items():
        convert_dir = tmp_path / name.replace(".", "_")
        image, manifest = convert_one(convert_dir, name, write)
        source = convert_dir / "src" / name
        capsys.readouterr()
        assert main(["encode", str(source), "-o", str(tmp_path / f"{name}.l3")]) == 0
        lines = capsys.readouterr().err.splitlines()  # at most one: "l3: PATH: note: a; b"
        tool_notes = lines[0].split(": note: ", 1)[1].split("; ") if lines else []
        np.testing.assert_array_equal(l3codec.imread(tmp_path / f"{name}.l3"), image, err_msg=name)
        if name.startswith("deep"):  # 16-bit colour, which Pillow alone would narrow to 8 bits
            bgr = cv2.imread(str(source), cv2.IMREAD_UNCHANGED)
            assert image.dtype == np.uint16 and np.array_equal(image, bgr[:, :, [2, 1, 0, 3][: bgr.shape[2]]])
        assert manifest["pixel_notes"] == {note: 1 for note in tool_notes}, name
        assert tool_notes == expected_notes.get(name, []), name


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_of_16bit_colour_pngs_turns_as_pillow_does(orientation):
    """16-bit colour PNG pixels come from OpenCV, so EXIF orientation is applied by sources._orient."""
    pixels = RNG.integers(0, 256, (6, 10, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", exif=exif)
    buffer.seek(0)
    with Image.open(buffer) as image:
        expected = np.asarray(ImageOps.exif_transpose(image))
    np.testing.assert_array_equal(sources._orient(pixels, orientation), expected)


def test_gif_is_converted_and_an_animation_keeps_its_first_frame(tmp_path):
    frames = [Image.fromarray(RNG.integers(0, 4, (24, 40), dtype=np.uint8) * 60, "L").convert("P") for _ in range(3)]
    image, manifest = convert_one(tmp_path, "anim.gif", lambda path: frames[0].save(path, save_all=True,
                                                                                        append_images=frames[1:]))
    assert np.array_equal(image, np.asarray(frames[0].convert("RGB")))
    assert manifest["pixel_notes"] == {sources.FRAMES_NOTE.format(frames=3): 1,
                                       sources.PALETTE_NOTE.format(layout="RGB"): 1}
