"""The l3 command-line tool, run in-process through main()."""

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import l3codec
from l3codec.cli import main

from images import make_image

H, W = 37, 53
CASES = [(1, np.uint8), (1, np.uint16), (3, np.uint8), (3, np.uint16), (4, np.uint8), (4, np.uint16)]


def write_png(path, rgb):
    """Write an RGB(A) array as PNG with OpenCV (which wants BGR(A))."""
    bgr = rgb if rgb.ndim == 2 else rgb[:, :, [2, 1, 0, 3][: rgb.shape[2]]]
    assert cv2.imwrite(str(path), np.ascontiguousarray(bgr))


def read_png(path):
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    return image if image.ndim == 2 else image[:, :, [2, 1, 0, 3][: image.shape[2]]]


@pytest.mark.parametrize("channels, dtype", CASES)
def test_encode_decode_round_trip(tmp_path, capsys, channels, dtype):
    image = make_image("smooth_noise", H, W, channels, dtype, seed=channels)
    png = tmp_path / "in.png"
    write_png(png, image)
    np.testing.assert_array_equal(read_png(png), image)

    assert main(["encode", str(png)]) == 0
    l3_path = tmp_path / "in.l3"
    np.testing.assert_array_equal(l3codec.imread(l3_path), image)
    out = capsys.readouterr().out
    assert f"{png.stat().st_size} -> {l3_path.stat().st_size} bytes" in out

    back = tmp_path / "back.png"
    assert main(["decode", str(l3_path), "-o", str(back)]) == 0
    decoded = read_png(back)
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded, image)


@pytest.mark.processes
def test_encode_options_and_output_file(tmp_path):
    image = make_image("gradient", H, W, 3, np.uint8)
    png = tmp_path / "in.png"
    write_png(png, image)
    target = tmp_path / "sub" / "named.l3"
    target.parent.mkdir()
    assert main(["encode", str(png), "-o", str(target), "--mode", "fast", "--tile-width", "32"]) == 0
    facts = l3codec.info(target.read_bytes())
    assert (facts.mode, facts.tile_width) == ("fast", 32)
    np.testing.assert_array_equal(l3codec.imread(target), image)


def test_existing_outputs_are_kept_unless_forced(tmp_path, capsys):
    image = make_image("gradient", H, W, 3, np.uint8)
    png = tmp_path / "photo.png"
    write_png(png, image)
    assert main(["encode", str(png)]) == 0
    assert main(["encode", str(png)]) == 1
    assert f"l3: {tmp_path / 'photo.l3'}: exists (--force replaces it)" in capsys.readouterr().err
    assert main(["encode", str(png), "-f"]) == 0
    source_bytes = png.read_bytes()
    # decoding beside the input never writes photo.png, the source photo.l3 was made from, even with -f
    for force in ([], ["-f"], ["-f"]):
        assert main(["decode", str(tmp_path / "photo.l3"), *force]) == 0
        assert png.read_bytes() == source_bytes
        np.testing.assert_array_equal(read_png(tmp_path / "photo.l3.png"), image)
    assert main(["decode", str(tmp_path / "photo.l3")]) == 1
    assert "photo.l3.png: exists (--force replaces it)" in capsys.readouterr().err
    # into a directory, x.l3 gives x.png
    assert main(["decode", str(tmp_path / "photo.l3"), "-o", str(tmp_path / "restored") + "/"]) == 0
    np.testing.assert_array_equal(read_png(tmp_path / "restored" / "photo.png"), image)


def test_decode_writes_png_only(tmp_path, capsys):
    l3codec.imwrite(tmp_path / "x.l3", make_image("noise", H, W, 3, np.uint8))
    assert main(["decode", str(tmp_path / "x.l3"), "-o", str(tmp_path / "x.jpg")]) == 2
    err = capsys.readouterr().err
    assert f"l3: {tmp_path / 'x.jpg'}: decode writes .png files: the output must end in .png (or in /" in err
    assert not (tmp_path / "x.jpg").exists()


def test_decode_grey_alpha(tmp_path):
    image = make_image("labels", H, W, 2, np.uint8)
    l3codec.imwrite(tmp_path / "la.l3", image)
    assert main(["decode", str(tmp_path / "la.l3")]) == 0
    with Image.open(tmp_path / "la.l3.png") as png:
        assert png.mode == "LA"
        np.testing.assert_array_equal(np.asarray(png), image)

    deep = make_image("noise", H, W, 2, np.uint16)
    l3codec.imwrite(tmp_path / "la16.l3", deep)
    assert main(["decode", str(tmp_path / "la16.l3")]) == 0
    bgra = cv2.imread(str(tmp_path / "la16.l3.png"), cv2.IMREAD_UNCHANGED)  # OpenCV expands to BGRA
    assert bgra.dtype == np.uint16
    np.testing.assert_array_equal(bgra[:, :, 0], deep[:, :, 0])
    np.testing.assert_array_equal(bgra[:, :, 3], deep[:, :, 1])


def test_region_decode(tmp_path):
    image = make_image("noise", 70, 90, 3, np.uint8)
    l3codec.imwrite(tmp_path / "x.l3", image, mode="fast", tile_width=32, tile_height=16)
    crop = tmp_path / "crop.png"
    assert main(["decode", str(tmp_path / "x.l3"), "--region", "5,20,40,33", "-o", str(crop)]) == 0
    np.testing.assert_array_equal(read_png(crop), image[5:45, 20:53])


def test_region_outside_is_reported(tmp_path, capsys):
    l3codec.imwrite(tmp_path / "x.l3", make_image("noise", H, W, 1, np.uint8))
    assert main(["decode", str(tmp_path / "x.l3"), "--region", "30,0,10,10"]) == 1
    assert "is not inside" in capsys.readouterr().err
    assert not (tmp_path / "x.l3.png").exists()
    # a region starting with "-" is a value, not an option: the region check explains it
    assert main(["decode", str(tmp_path / "x.l3"), "--region", "-1,0,5,5"]) == 1
    assert "region (-1, 0, 5, 5) is not inside the 37x53 image" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse rejects a malformed region
        main(["decode", str(tmp_path / "x.l3"), "--region", "1,2,3"])


@pytest.mark.processes
def test_info(tmp_path, capsys):
    l3codec.imwrite(tmp_path / "x.l3", make_image("gradient", H, W, 3, np.uint16), mode="fast")
    assert main(["info", str(tmp_path / "x.l3")]) == 0
    out = capsys.readouterr().out
    assert f"shape ({H}, {W}, 3)" in out and "16-bit" in out and "mode fast" in out
    assert main(["info", "--json", str(tmp_path / "x.l3"), str(tmp_path / "x.l3")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    facts = json.loads(lines[0])
    assert facts["shape"] == [H, W, 3] and facts["bits"] == 16 and facts["mode"] == "fast"


def test_check(tmp_path, capsys):
    data = l3codec.encode(make_image("smooth_noise", H, W, 4, np.uint8))
    good, bad = tmp_path / "good.l3", tmp_path / "bad.l3"
    good.write_bytes(data)
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2 + 40] ^= 0x10
    bad.write_bytes(bytes(corrupt))
    assert main(["check", str(good)]) == 0
    assert f"{good}: OK" in capsys.readouterr().out
    assert main(["check", str(good), str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{good}: OK" in captured.out
    assert captured.err.startswith(f"l3: {bad}: ") and "corrupt" in captured.err


def test_bad_files_do_not_stop_the_others(tmp_path, capsys):
    images = [make_image("labels", H, W, 3, np.uint8, seed=s) for s in range(2)]
    pngs = [tmp_path / "a.png", tmp_path / "b.png"]
    for png, image in zip(pngs, images):
        write_png(png, image)
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not an image at all")
    out_dir = tmp_path / "out"
    argv = ["encode", str(pngs[0]), str(junk), str(tmp_path / "missing.png"), str(pngs[1])]
    assert main(argv + ["-o", str(out_dir)]) == 1
    err = capsys.readouterr().err
    assert f"l3: {junk}: " in err and f"l3: {tmp_path / 'missing.png'}: " in err
    assert "Traceback" not in err
    for png, image in zip(pngs, images):
        np.testing.assert_array_equal(l3codec.imread(out_dir / png.with_suffix(".l3").name), image)

    (out_dir / "junk.l3").write_bytes(b"L3IM" + bytes(60))
    decoded = tmp_path / "decoded"
    argv = ["decode", str(out_dir / "a.l3"), str(out_dir / "junk.l3"), str(out_dir / "b.l3")]
    assert main(argv + ["-o", str(decoded)]) == 1
    assert f"l3: {out_dir / 'junk.l3'}: " in capsys.readouterr().err
    for name, image in zip("ab", images):
        np.testing.assert_array_equal(read_png(decoded / f"{name}.png"), image)
    assert not (decoded / "junk.png").exists()

    assert main(["info", str(out_dir / "a.l3"), str(pngs[0])]) == 1
    captured = capsys.readouterr()
    assert f"{out_dir / 'a.l3'}: width {W}, height {H}" in captured.out
    assert f"l3: {pngs[0]}: not an L3 image" in captured.err


def test_python_dash_m(tmp_path):
    l3codec.imwrite(tmp_path / "x.l3", make_image("constant", H, W, 1, np.uint8))
    (tmp_path / "bad.l3").write_bytes(b"nope")
    result = subprocess.run(
        [sys.executable, "-m", "l3codec.cli", "info", str(tmp_path / "x.l3"), str(tmp_path / "bad.l3")],
        capture_output=True,
        text=True,
        cwd=Path(l3codec.__file__).parent.parent,
    )
    assert result.returncode == 1
    assert f"shape ({H}, {W})" in result.stdout
    expected = f"l3: {tmp_path / 'bad.l3'}: not an L3 image: magic b'nope'"
    assert result.stderr.strip() == expected


def test_empty_and_unreadable_inputs_are_reported_and_the_others_encoded(tmp_path, capsys):
    image = make_image("smooth_noise", H, W, 3, np.uint8)
    rgb, empty, folder = tmp_path / "rgb.png", tmp_path / "empty.png", tmp_path / "folder.png"
    write_png(rgb, image)
    empty.write_bytes(b"")
    folder.mkdir()
    out = tmp_path / "out"
    assert main(["encode", str(empty), str(folder), str(rgb), "-o", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"l3: {empty}: empty file (0 bytes)"
    assert err[1] == f"l3: {folder}: Is a directory"
    assert len(err) == 2
    np.testing.assert_array_equal(l3codec.imread(out / "rgb.l3"), image)
    assert sorted(p.name for p in out.iterdir()) == ["rgb.l3"]

    (out / "empty.l3").write_bytes(b"")
    (out / "text.l3").write_bytes(b"a 28-byte text file, not L3\n")
    assert main(["decode", str(out / "empty.l3"), str(out / "text.l3"), str(out / "rgb.l3")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"l3: {out / 'empty.l3'}: not an L3 image: 0 bytes",
        f"l3: {out / 'text.l3'}: not an L3 image: magic b'a 28'",
    ]
    np.testing.assert_array_equal(read_png(out / "rgb.l3.png"), image)


def test_inputs_sharing_an_output_refuse_the_command_before_anything_is_written(tmp_path, capsys):
    image = make_image("labels", H, W, 3, np.uint8)
    bgr = np.ascontiguousarray(image[:, :, ::-1])
    names = ["a.tif", "a.webp", "a.bmp", "a.gif"]
    for name in names[:3]:
        lossless = [cv2.IMWRITE_WEBP_QUALITY, 101] if name.endswith("webp") else []
        assert cv2.imwrite(str(tmp_path / name), bgr, lossless)
    Image.fromarray(image).convert("P").save(tmp_path / "a.gif")
    out = tmp_path / "out"
    assert main(["encode", "-f", *(str(tmp_path / n) for n in names), "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"l3: {tmp_path / name}: its output {out / 'a.l3'} is also the output of {tmp_path / 'a.tif'}"
        for name in names[1:]
    ] + ["l3: nothing was written"]
    assert not out.exists()
    # beside the inputs, and the same input twice
    assert main(["encode", str(tmp_path / "a.tif"), str(tmp_path / "a.bmp")]) == 2
    assert main(["encode", str(tmp_path / "a.tif"), str(tmp_path / "a.tif"), "-o", str(out)]) == 2
    assert not (tmp_path / "a.l3").exists() and not out.exists()
    capsys.readouterr()
    # an output that is one of the inputs
    l3codec.imwrite(tmp_path / "x.l3", image)
    assert main(["encode", "-f", str(tmp_path / "x.l3")]) == 2
    err = capsys.readouterr().err
    assert f"l3: {tmp_path / 'x.l3'}: its output {tmp_path / 'x.l3'} is one of the inputs" in err
    np.testing.assert_array_equal(l3codec.imread(tmp_path / "x.l3"), image)


def test_an_output_that_cannot_be_written_is_named_with_the_reason(tmp_path, capsys):
    image = make_image("gradient", H, W, 3, np.uint8)
    png = tmp_path / "rgb.png"
    write_png(png, image)
    target = tmp_path / "nonexistent" / "dir" / "x.l3"
    assert main(["encode", str(png), "-o", str(target)]) == 1
    assert capsys.readouterr().err == f"l3: {target}: cannot write: No such file or directory\n"
    l3codec.imwrite(tmp_path / "x.l3", image)
    target = tmp_path / "nonexistent" / "x.png"
    for force in ([], ["-f"]):
        assert main(["decode", str(tmp_path / "x.l3"), "-o", str(target), *force]) == 1
        assert capsys.readouterr().err == f"l3: {target}: cannot write: No such file or directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rgb.png", "x.l3"]


def test_output_for_several_inputs_must_be_a_directory(tmp_path, capsys):
    pngs = [tmp_path / "a.png", tmp_path / "b.png"]
    for seed, png in enumerate(pngs):
        write_png(png, make_image("noise", H, W, 1, np.uint8, seed))
    both = tmp_path / "both.l3"
    assert main(["encode", *map(str, pngs), "-o", str(both)]) == 2
    err = capsys.readouterr().err
    assert f"l3: {both}: -o names a directory for 2 inputs, and this looks like a .l3 file" in err
    assert not both.exists()
    both.write_bytes(b"a file")
    assert main(["encode", *map(str, pngs), "-o", str(both)]) == 2
    assert f"l3: {both}: is not a directory" in capsys.readouterr().err
    assert main(["encode", *map(str, pngs), "-o", str(tmp_path / "dir.l3") + "/"]) == 0
    assert sorted(p.name for p in (tmp_path / "dir.l3").iterdir()) == ["a.l3", "b.l3"]


def test_conversions_follow_the_policy_and_are_noted(tmp_path, capsys):
    grey = make_image("smooth_noise", H, W, 1, np.uint8)
    grey_alpha = make_image("smooth_noise", H, W, 2, np.uint8)
    palette = Image.fromarray(make_image("labels", H, W, 3, np.uint8)).convert("P")
    bilevel = Image.fromarray(grey > 127)
    cmyk = Image.fromarray(make_image("smooth_noise", H, W, 3, np.uint8)).convert("CMYK")
    expanded = "palette expanded to RGB (L3 stores no palette)"
    sources = {
        "p.png": (palette, expanded, np.asarray(palette.convert("RGB"))),
        "la.png": (Image.fromarray(grey_alpha, "LA"), None, grey_alpha),
        "bits.png": (bilevel, "1-bit grey scaled to 8-bit (0..255)", np.asarray(bilevel.convert("L"))),
        "cmyk_tif.tif": (cmyk, "CMYK converted to RGB", None),
        "cmyk.jpg": (cmyk, "CMYK converted to RGB", None),
        "p_gif.gif": (palette, expanded, np.asarray(palette.convert("RGB"))),
    }
    for name, (image, _, _) in sources.items():
        image.save(tmp_path / name)
    out = tmp_path / "out"
    assert main(["encode", *(str(tmp_path / n) for n in sources), "-o", str(out)]) == 0
    # the tool's notes, not the first-use notice a process that compiles prints once (run alone, this test compiles)
    notes = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("l3codec: compiling")]
    expected = [f"l3: {tmp_path / n}: note: {note}" for n, (_, note, _) in sources.items() if note]
    assert notes == expected
    for name, (image, _, pixels) in sources.items():
        decoded = l3codec.imread(out / Path(name).with_suffix(".l3").name)
        if pixels is not None:
            np.testing.assert_array_equal(decoded, pixels)
        else:  # CMYK: OpenCV's conversion, three channels, no alpha added
            assert decoded.shape == (H, W, 3)


def test_grey_alpha_tiff_keeps_its_alpha(tmp_path, capsys):
    grey_alpha = make_image("noise", H, W, 2, np.uint8)
    Image.fromarray(grey_alpha, "LA").save(tmp_path / "la.tif")
    assert main(["encode", str(tmp_path / "la.tif")]) == 0
    assert "note" not in capsys.readouterr().err
    np.testing.assert_array_equal(l3codec.imread(tmp_path / "la.l3"), grey_alpha)


@pytest.mark.parametrize("name, channels, dtype", [("a.jpg", 3, np.uint8), ("a.png", 3, np.uint8),
                                                   ("deep.png", 3, np.uint16), ("grey.png", 1, np.uint16)])
def test_truncated_source_is_refused_not_filled(tmp_path, capsys, name, channels, dtype):
    image = make_image("smooth_noise", 64, 80, channels, dtype)
    source = tmp_path / name
    if name.endswith(".jpg"):
        Image.fromarray(image).save(source, quality=95)
    else:
        write_png(source, image)
    data = source.read_bytes()
    source.write_bytes(data[: len(data) * 2 // 3])
    assert main(["encode", str(source)]) == 1
    err = capsys.readouterr().err.splitlines()
    kind = source.suffix[1:].replace("jpg", "JPEG").upper()
    reason = "IDAT chunk cut short" if kind == "PNG" else "image file is truncated"  # PNG: its chunk walk
    assert len(err) == 1 and err[0].startswith(f"l3: {source}: truncated or corrupt {kind} file ({reason}")
    assert not source.with_suffix(".l3").exists()


def test_encode_help_states_the_pixel_policy(capsys):
    with pytest.raises(SystemExit):
        main(["encode", "--help"])
    out = capsys.readouterr().out
    assert "expanded to RGB" in out and "CMYK" in out and "grey+alpha" in out


def test_transparent_colour_bmp_palette_and_grey_jpeg(tmp_path, capsys):
    rgb = make_image("labels", H, W, 3, np.uint8)
    Image.fromarray(rgb).save(tmp_path / "key.png", transparency=tuple(int(v) for v in rgb[0, 0]))
    Image.fromarray(rgb).convert("P").save(tmp_path / "p.bmp")
    Image.fromarray(make_image("smooth_noise", H, W, 1, np.uint8)).save(tmp_path / "grey.jpg")
    names = ["key.png", "p.bmp", "grey.jpg"]
    assert main(["encode", *(str(tmp_path / n) for n in names)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"l3: {tmp_path / 'key.png'}: note: transparent colour (tRNS) made an alpha channel",
        f"l3: {tmp_path / 'p.bmp'}: note: palette expanded to RGB (L3 stores no palette)",
    ]
    keyed = l3codec.imread(tmp_path / "key.l3")
    assert keyed.shape == (H, W, 4) and keyed[0, 0, 3] == 0
    np.testing.assert_array_equal(keyed[:, :, :3], rgb)
    assert l3codec.imread(tmp_path / "grey.l3").shape == (H, W)


def test_a_damaged_source_is_one_line_naming_its_format(tmp_path, capfd):
    # capfd, not capsys: OpenCV's own log lines go to file descriptor 2, past sys.stderr
    png = tmp_path / "rgb.png"
    write_png(png, make_image("noise", H, W, 3, np.uint8))
    (tmp_path / "half.png").write_bytes(png.read_bytes()[:60])
    (tmp_path / "ifd.tif").write_bytes(b"II*\x00\x08\x00\x00\x00\xff\xff" + bytes(5))  # 65535 tags in 7 bytes
    (tmp_path / "text.png").write_bytes(b"not an image at all\n")
    names = ["half.png", "ifd.tif", "text.png"]
    assert main(["encode", *(str(tmp_path / n) for n in names)]) == 1
    assert capfd.readouterr().err.splitlines() == [
        f"l3: {tmp_path / 'half.png'}: truncated or corrupt PNG file (IDAT chunk cut short)",
        f"l3: {tmp_path / 'ifd.tif'}: truncated or corrupt TIFF file (Pillow cannot read it)",
        f"l3: {tmp_path / 'text.png'}: not an image format Pillow can read",
    ]
    assert not list(tmp_path.glob("*.l3"))


def test_a_chunk_name_inside_png_text_is_not_a_transparent_colour(tmp_path, capsys):
    from PIL import PngImagePlugin

    text = PngImagePlugin.PngInfo()
    text.add_text("Comment", "this image has no tRNS chunk")
    image = make_image("noise", H, W, 3, np.uint8)
    Image.fromarray(image).save(tmp_path / "rgb.png", pnginfo=text)
    assert main(["encode", str(tmp_path / "rgb.png")]) == 0
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(l3codec.imread(tmp_path / "rgb.l3"), image)


def test_an_os2_palette_bmp_is_noted(tmp_path, capsys):
    """A BMP with the 12-byte OS/2 header keeps its bit count at offset 24, not 28."""
    palette = bytes([0, 0, 0, 255, 255, 255]) + bytes(3 * 254)  # 3-byte BGR entries
    rows = bytes([0, 1, 1, 0]) * 2  # 2x2, rows padded to 4 bytes
    offset = 14 + 12 + len(palette)
    data = (b"BM" + (offset + len(rows)).to_bytes(4, "little") + bytes(4) + offset.to_bytes(4, "little")
            + bytes([12, 0, 0, 0, 2, 0, 2, 0, 1, 0, 8, 0]) + palette + rows)
    (tmp_path / "os2.bmp").write_bytes(data)
    assert main(["encode", str(tmp_path / "os2.bmp")]) == 0
    assert "note: palette expanded to" in capsys.readouterr().err


def test_l3_stalls_runs_the_stall_analyzer(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["stalls", "--help"])
    assert stop.value.code == 0 and "--step-ms" in capsys.readouterr().out
    assert main(["stalls", "/nonexistent-dataset"]) == 1
    assert "l3 stalls: " in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["l3", "l3convert"])
def test_version_names_the_format_written(tool, capsys):
    """A user who upgraded can tell which format a tool writes (the package version alone did not say)."""
    from l3codec.converters.cli import main as convert_main

    with pytest.raises(SystemExit) as stop:
        (main if tool == "l3" else convert_main)(["--version"])
    assert stop.value.code == 0
    assert f"writes L3 format {l3codec.VERSION})" in capsys.readouterr().out

