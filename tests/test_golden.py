"""Checked-in files catch format drift in the decoder and in the encoder."""

import pathlib
import sys

import numpy as np
import pytest

import l3codec
from l3codec import format as fmt
from stream_census import fast_census, plane_streams, stream_census

GOLDEN = pathlib.Path(__file__).parent / "golden"
NAMES = sorted(path.stem for path in GOLDEN.glob("*.l3"))
VERSION1 = GOLDEN / "v1"  # files written by format version 1, kept as they were
VERSION2 = GOLDEN / "v2"  # and by version 2
VERSION3 = GOLDEN / "v3"  # and by version 3
VERSION4 = GOLDEN / "v4"  # and by version 4
VERSION5 = GOLDEN / "v5"  # and by version 5
VERSION6 = GOLDEN / "v6"  # and by version 6
VERSION7 = GOLDEN / "v7"  # and by version 7
VERSION8 = GOLDEN / "v8"  # and by version 8
VERSION9 = GOLDEN / "v9"  # and by version 9


def _stored_version(data):
    return int(np.frombuffer(data, fmt.HEADER_DTYPE, count=1)["version"][0])


def test_golden_files_are_the_cases_make_golden_writes():
    """Each case of make_golden.py is checked in, each with its expected pixels, and nothing else."""
    sys.path.insert(0, str(GOLDEN))
    try:
        import make_golden
    finally:
        sys.path.remove(str(GOLDEN))
    assert NAMES == sorted(make_golden.CASES)
    assert sorted(path.stem for path in GOLDEN.glob("*.npy")) == NAMES


def test_golden_files_are_current_version():
    """The version field of each file's header bytes, as stored (not Info's default)."""
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        stored = _stored_version(data)
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


def test_golden_files_cover_both_modes_and_transform_2():
    infos = [l3codec.info((GOLDEN / f"{name}.l3").read_bytes()) for name in NAMES]
    assert {"compact", "fast"} <= {info.mode for info in infos}
    assert {("compact", "rg-mean"), ("fast", "rg-mean")} <= {(info.mode, info.transform) for info in infos}


@pytest.mark.parametrize("name", ["dots8_fast", "labels16_fast"])
def test_golden_fast_files_hold_sparse_groups(name):
    census = fast_census((GOLDEN / f"{name}.l3").read_bytes())
    assert census["sparse"] and census["unflagged"], census


def test_golden_fast_files_hold_every_group_form():
    """Version 5's extended group codes: sparse, packed, Rice and bitmap groups in the golden files."""
    totals = {}
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        if l3codec.info(data).mode == "fast":
            for form, count in fast_census(data).items():
                totals[form] = totals.get(form, 0) + count
    assert all(totals[form] for form in ("sparse", "packed", "rice", "bitmap")), totals


def test_golden_fast_files_hold_both_code_tables():
    """Each coded fast stream is written in the code table that makes it smaller (docs/FORMAT.md §7.5):
    kind-1 (short codes) and kind-5 (extended codes) streams among the golden files."""
    kinds = set()
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        if l3codec.info(data).mode == "fast":
            kinds.update(data[start] for _, start, _ in plane_streams(data))
    assert {fmt.KIND_CODED, fmt.KIND_CODED_EXTENDED} <= kinds, kinds


def test_golden_files_hold_palette_tiles():
    """Version 4's palette streams: members of 2 to 4 channels, 8- and 16-bit, in both modes."""
    reached = set()
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        info, census = l3codec.info(data), stream_census(data)
        if census["palette"]:
            reached.add((info.mode, info.bits, census["member"] > 0))
    assert {("compact", 8, True), ("fast", 8, True), ("fast", 16, True), ("compact", 16, False)} <= reached, reached


def test_golden_files_hold_lz_streams():
    """Version 6's LZ streams and version 8's coded ones: planes of both modes, 8- and 16-bit, and a
    palette's index plane."""
    reached = set()
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        starts = fmt.parse(data).stream_starts
        for stream, start, _ in plane_streams(data):
            if data[start] in (fmt.KIND_LZ, fmt.KIND_LZ_CODED):
                info = l3codec.info(data)
                reached.add((int(data[start]), info.mode, info.bits, bool(start != starts[stream])))  # an index plane
    plain, coded = fmt.KIND_LZ, fmt.KIND_LZ_CODED
    assert {(plain, "compact", 8, True), (plain, "fast", 8, False), (plain, "fast", 16, False),
            (plain, "compact", 16, False), (coded, "compact", 8, False), (coded, "fast", 8, False),
            (coded, "compact", 16, True)} <= reached, reached


def test_golden_files_hold_pixel_lz_streams():
    """Version 7's pixel LZ streams and version 8's coded ones, with their members: both modes, 8- and
    16-bit, 3 and 4 channels."""
    reached = set()
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        census = stream_census(data)
        if census["pixel_lz"]:
            info = l3codec.info(data)
            assert census["member"] == census["pixel_lz"] * (info.channels - 1) + census["palette"] * (info.channels - 1)
            for start in fmt.parse(data).stream_starts[::info.channels]:
                if data[start] in (fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED):
                    reached.add((int(data[start]), info.mode, info.bits, info.channels))
    plain, coded = fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED
    assert {(plain, "fast", 16, 4), (coded, "compact", 8, 3), (coded, "fast", 16, 4)} <= reached, reached


def test_golden_files_hold_compact_tiles_of_several_bands():
    """Version 9: compact tiles taller than a band, with coded streams (each band's first row without a
    row above), LZ tiles, and partial last bands (tests/golden/v9 holds kind-1 and palette tiles of several
    bands)."""
    kinds, partial = set(), False
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        info = l3codec.info(data)
        if info.mode == "compact" and info.tile_height > fmt.COMPACT_BAND_ROWS:
            kinds |= {int(data[start]) for start in fmt.parse(data).stream_starts}
            partial |= info.height % info.tile_height % fmt.COMPACT_BAND_ROWS != 0
    assert {fmt.KIND_CODED_ANS, fmt.KIND_PIXEL_LZ_CODED} <= kinds and partial, kinds


def test_golden_files_hold_kind_10_streams():
    """Version 10: compact's stream kind 10, biased and unbiased, 8- and 16-bit, a palette's index plane
    aside (the coded compact streams are all kind 10), and in the reference encoder's own tiles."""
    reached, default_tiles = set(), False
    for name in NAMES:
        data = (GOLDEN / f"{name}.l3").read_bytes()
        info = l3codec.info(data)
        for _, start, _ in plane_streams(data):
            assert info.mode == "fast" or data[start] != fmt.KIND_CODED, name
            if data[start] == fmt.KIND_CODED_ANS:
                reached.add((info.bits, bool(data[start + 1] & 1)))
                default_tiles |= (info.tile_width, info.tile_height) == (
                    fmt.DEFAULT_TILE_WIDTH[fmt.MODE_COMPACT], fmt.DEFAULT_TILE_HEIGHT[fmt.MODE_COMPACT])
    assert {(8, False), (8, True), (16, False)} <= reached and default_tiles, reached


OLDER_FILES = [(version, path) for version, folder in ((2, VERSION2), (3, VERSION3), (4, VERSION4), (5, VERSION5),
                                                       (6, VERSION6), (7, VERSION7), (8, VERSION8), (9, VERSION9))
               for path in sorted(folder.glob("*.l3"))]


@pytest.mark.parametrize("version, path", OLDER_FILES, ids=[f"v{v}-{p.stem}" for v, p in OLDER_FILES])
def test_older_files_still_decode(version, path):
    """Each version gave meaning only to bytes the one before never wrote (version 3: a fast group
    code; 4: the palette stream kinds; 5: the fast stream kind with extended group codes; 6: the LZ
    stream kind; 7: the pixel LZ stream kind; 8: the coded LZ stream kinds; 9: compact tile heights
    above 32; 10: compact's stream kind 10), so files of versions 2 to 9 decode unchanged, on the CPU and through the GPU batch's host
    validation."""
    from l3codec import batch

    data = path.read_bytes()
    assert _stored_version(data) == version and l3codec.info(data).version == version
    np.testing.assert_array_equal(l3codec.decode(data), np.load(path.with_suffix(".npy")))
    assert batch.plan_item(data).info.version == version


@pytest.mark.parametrize("name", ["rgb8_compact", "labels16_compact"])
def test_version1_compact_files_still_decode(name):
    from l3codec import batch

    data = (VERSION1 / f"{name}.l3").read_bytes()
    assert _stored_version(data) == 1 and l3codec.info(data).version == 1
    np.testing.assert_array_equal(l3codec.decode(data), np.load(VERSION1 / f"{name}.npy"))
    assert batch.plan_item(data).info.version == 1


@pytest.mark.parametrize("name", ["rgb8_compact"])  # labels16_compact's tiles are palettes today
def test_version1_compact_streams_are_what_today_writes(name, monkeypatch):
    """The compact kind-1 bitstream did not change: only the header's version (and its checksum) did."""
    from l3codec import encoder_policy

    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", "rice")  # kind 1, the coder of versions 1 to 9
    old = (VERSION1 / f"{name}.l3").read_bytes()
    info = l3codec.info(old)
    new = l3codec.encode(np.load(VERSION1 / f"{name}.npy"), mode="compact", tile_width=info.tile_width,
                         tile_height=info.tile_height, transform=info.transform)
    assert _stored_version(new) == l3codec.VERSION
    offset = fmt.HEADER_DTYPE.fields["width"][1]
    assert len(new) == len(old) and new[offset:fmt.HEADER_CRC_OFFSET] == old[offset:fmt.HEADER_CRC_OFFSET]
    assert new[fmt.HEADER_SIZE:] == old[fmt.HEADER_SIZE:]


def test_version1_fast_files_are_refused():
    """By the CPU decoder and by the GPU batch's host validation, before anything is allocated."""
    from l3codec import batch

    data = (VERSION1 / "rgba8_fast.l3").read_bytes()
    assert _stored_version(data) == 1
    for read in (l3codec.info, l3codec.decode, batch.plan_item, lambda item: batch.prepare([item])):
        with pytest.raises(l3codec.L3Error, match="fast-mode files of L3 format version 1 are no longer decodable"):
            read(data)


def test_datasets_of_version1_fast_files_are_refused_at_open(tmp_path):
    """The converter records the format version and mode in the manifest: the reader refuses a
    dataset of version-1 fast images before reading a shard."""
    from l3codec import dataset

    for version, mode in ((1, "fast"), (1, "compact"), (2, "fast")):
        dataset.write_manifest(tmp_path, {"codec_format_version": version, "options": {"mode": mode},
                                          "splits": {}})
        if (version, mode) == (1, "fast"):
            with pytest.raises(l3codec.L3Error, match="fast-mode files of L3 format version 1 are no longer"):
                dataset.open_dataset(tmp_path)
        else:  # gets past the manifest, to the missing split
            with pytest.raises(l3codec.L3Error, match="no split 'train'"):
                dataset.open_dataset(tmp_path)
