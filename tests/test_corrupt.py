"""Malformed input raises L3Error with a message; it never crashes, hangs or reads out of bounds."""

import numpy as np
import pytest

import l3codec
from corruption import (
    flip_bits,
    mutate_payload,
    reseal,
    status_cases,
    structural_boundaries,
    with_header_fields,
)
from images import make_image
from l3codec import format as fmt


def _sample_files():
    return {
        "compact_rgb": l3codec.encode(make_image("smooth_noise", 40, 70, 3, np.uint8, 1), tile_width=32),
        "compact_labels16": l3codec.encode(make_image("labels", 50, 40, 1, np.uint16, 2), tile_width=16),
        "fast_rgba16": l3codec.encode(
            make_image("smooth_noise", 30, 41, 4, np.uint16, 3), mode="fast", tile_width=16, tile_height=8
        ),
        "fast_gray": l3codec.encode(make_image("gradient", 20, 33, 1, np.uint8, 4), mode="fast", tile_width=16),
    }


FILES = _sample_files()


def _decodes_or_raises(data, **options):
    """The only acceptable outcomes for damaged data: L3Error, or an image of the declared shape."""
    try:
        image = l3codec.decode(data, **options)
    except l3codec.L3Error as error:
        assert str(error)
        return None
    info = l3codec.info(data)
    assert image.shape == info.shape and image.dtype == info.dtype
    return image


@pytest.mark.parametrize("name", sorted(FILES))
def test_truncation_at_every_structural_boundary(name):
    data = FILES[name]
    boundaries = structural_boundaries(data)
    assert len(boundaries) > 10
    for offset in boundaries:
        with pytest.raises(l3codec.L3Error):
            l3codec.decode(data[:offset])
        with pytest.raises(l3codec.L3Error):
            l3codec.info(data[:offset]) if offset < fmt.HEADER_SIZE else l3codec.decode(data[:offset], verify=False)


@pytest.mark.parametrize("name", sorted(FILES))
def test_random_bit_flips_are_detected(name):
    rng = np.random.default_rng(11)
    data = FILES[name]
    for _ in range(60):
        damaged = flip_bits(data, rng, int(rng.integers(1, 4)))
        with pytest.raises(l3codec.L3Error):
            l3codec.decode(damaged)
        _decodes_or_raises(damaged, verify=False)


@pytest.mark.parametrize("name", sorted(FILES))
def test_resealed_payload_damage_never_crashes(name):
    """With valid checksums, damage reaches the stream decoders: they must stay in bounds."""
    rng = np.random.default_rng(12)
    outcomes = {"error": 0, "image": 0}
    for _ in range(150):
        result = _decodes_or_raises(mutate_payload(FILES[name], rng))
        outcomes["error" if result is None else "image"] += 1
    assert outcomes["error"] > 0  # the stream-level checks do catch damage


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"magic": b"PNG\x00"}, "not an L3 image"),
        ({"version": 999}, "version"),
        ({"header_size": 12}, "header size"),
        ({"width": 0}, "image size"),
        ({"width": 2**32 - 1}, "image size"),
        ({"height": fmt.MAX_DIM + 1}, "image size"),
        ({"width": fmt.MAX_DIM, "height": fmt.MAX_DIM}, "MAX_PIXELS"),
        ({"channels": 0}, "channels"),
        ({"channels": 200}, "channels"),
        ({"bits": 12}, "bits"),
        ({"mode": 7}, "mode"),
        ({"transform": 9}, "transform"),
        ({"tile_width": 0}, "tile width"),
        ({"tile_width": 65535}, "tile width"),
        ({"tile_height": 1}, "multiple of 32"),
        ({"stream_count": 2**32 - 1}, "stream count"),
        ({"payload_size": 2**32 - 1}, "truncated"),
        ({"reserved": 1}, "reserved"),
    ],
)
def test_extreme_header_fields(fields, message):
    data = with_header_fields(FILES["compact_rgb"], **fields)
    with pytest.raises(l3codec.L3Error, match=message):
        l3codec.decode(data)
    with pytest.raises(l3codec.L3Error):
        l3codec.info(data)


@pytest.mark.parametrize(
    "name, fields, message",
    [
        ("fast_gray", {"version": 1}, "fast-mode files of L3 format version 1 are no longer decodable"),
        ("compact_rgb", {"version": 1, "transform": fmt.TRANSFORM_RGB_MEAN}, "transform 2 for L3 version 1"),
        ("fast_gray", {"transform": fmt.TRANSFORM_RGB_MEAN}, "needs 3 or 4 channels"),
        ("compact_rgb", {"version": 8, "tile_height": 64}, "compact tiles of L3 version 8 are 32 rows tall"),
    ],
)
def test_version_rules(name, fields, message):
    """Version-1 files are compact with transform 0 or 1; transforms 1 and 2 need colour; compact tiles
    before version 9 are one band."""
    data = with_header_fields(FILES[name], **fields)
    for read in (l3codec.info, l3codec.decode):
        with pytest.raises(l3codec.L3Error, match=message):
            read(data)


def test_header_checksum_guards_the_header():
    data = bytearray(FILES["compact_rgb"])
    data[8] ^= 1  # width, checksum not resealed
    with pytest.raises(l3codec.L3Error, match="header checksum"):
        l3codec.decode(bytes(data))


def test_stream_table_must_increase():
    parsed = fmt.parse(FILES["fast_gray"])
    buf = bytearray(FILES["fast_gray"])
    table = np.frombuffer(buf, fmt.STREAM_END_DTYPE, count=len(parsed.stream_ends), offset=fmt.HEADER_SIZE).copy()
    table[0], table[1] = table[1], table[0]
    buf[fmt.HEADER_SIZE: parsed.payload_offset] = table.tobytes()
    with pytest.raises(l3codec.L3Error, match="stream table"):
        l3codec.decode(reseal(bytes(buf)))


def _stream_padding_bit(data):
    """(byte, bit) of a padding bit at the end of a coded compact stream: changing it leaves the
    pixels alone (docs/FORMAT.md §9) and only the payload checksum notices."""
    parsed = fmt.parse(data)
    info = parsed.info
    bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
    for stream, (start, end) in enumerate(zip(parsed.stream_starts, parsed.stream_ends)):
        if data[start] != fmt.KIND_CODED:
            continue
        rows = int(info.tile_rows(stream // info.channels // info.tiles_x))
        length_bits = data[start + 7]
        table = bits[(start + 8) * 8:(start + 8) * 8 + rows * length_bits].reshape(rows, length_bits)
        used = 8 * (8 + (rows * length_bits + 7) // 8) + int((table << np.arange(length_bits)).sum())
        if used % 8:
            return int(end - 1), 7
    raise AssertionError("no stream ends in a partly used byte")


def test_payload_checksum_can_be_skipped():
    """verify=False skips the payload CRC: damage the streams cannot see decodes to the same pixels,
    damage that breaks a stream's structure still raises (README, "Bad input")."""
    data = FILES["compact_rgb"]
    expected = l3codec.decode(data)
    byte, bit = _stream_padding_bit(data)
    padded = bytearray(data)
    padded[byte] ^= 1 << bit
    with pytest.raises(l3codec.L3Error, match="payload checksum"):
        l3codec.decode(bytes(padded))
    np.testing.assert_array_equal(l3codec.decode(bytes(padded), verify=False), expected)
    broken = bytearray(data)
    broken[fmt.parse(data).payload_offset] = fmt.KIND_CODED_ANS + 1  # the first stream's kind byte: no such kind
    with pytest.raises(l3codec.L3Error, match="payload checksum"):
        l3codec.decode(bytes(broken))
    with pytest.raises(l3codec.L3Error, match="corrupt stream .tile 0, channel 0.: unknown stream kind"):
        l3codec.decode(bytes(broken), verify=False)


@pytest.mark.parametrize("data", [b"", b"L3IM", bytes(44), 12345, None, memoryview(bytes(200))[::2]])
def test_not_bytes_or_too_short(data):
    with pytest.raises(l3codec.L3Error):
        l3codec.decode(data)


def test_run_past_the_row_end_is_rejected():
    """A hand-made stream, checksums valid: run index 31 codes a 100-sample run in a 16-wide row
    whose 17 bits match its row-length entry."""
    data, _ = status_cases()["compact run past the row end"]
    assert l3codec.info(data).shape == (1, 16)
    with pytest.raises(l3codec.L3Error, match="corrupt stream"):
        l3codec.decode(data)


@pytest.mark.parametrize("name, case", sorted(status_cases().items()))
def test_hand_made_faults_raise_the_status_message(name, case):
    """The CPU decoder's message for each status of corruption.status_cases (GPU tests check the codes)."""
    data, code = case
    if code == fmt.STATUS_OK:
        assert l3codec.decode(data).shape == l3codec.info(data).shape
    else:
        with pytest.raises(l3codec.L3Error, match=fmt.STATUS_MESSAGES[code]):
            l3codec.decode(data)
