"""Stream kind 10 (l3codec/ans_stream.py, format 10): one tile-channel with its own rANS tables. Round trips,
the byte layout read back independently, and each status from a hand-damaged stream."""

import numpy as np
import pytest
from images import make_image

from l3codec import L3Error, ans, ans_cpu, ans_stream, bitio
from l3codec import format as fmt

KINDS = ("noise", "smooth_noise", "gradient", "labels", "extremes")


def plane(kind, height, width, dtype, seed=0):
    return make_image(kind, height, width, 1, dtype, seed=seed).astype(dtype)


def round_trip(tile, **options):
    stream = ans_cpu.encode_stream(tile, **options)
    decoded, status = ans_cpu.decode_stream(stream, *tile.shape, tile.dtype.itemsize * 8)
    assert status == fmt.STATUS_OK
    np.testing.assert_array_equal(decoded, tile)
    return stream


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("bias", ["on", "off", "choose"])
@pytest.mark.parametrize("kind", KINDS)
def test_tiles_round_trip(kind, bias, dtype):
    """Heights of one band, a band and one row, eight bands; widths from 16 to 1024 (and odd ones)."""
    for height, width in [(1, 16), (33, 17), (256, 96), (64, 1024)]:
        tile = plane(kind, height, width, dtype, seed=height)
        stream = round_trip(tile, bias=bias)
        if bias != "choose":
            assert stream[1] == (1 if bias == "on" else 0)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("precision", [6, 12])
def test_tiles_round_trip_at_every_height_and_the_precision_limits(precision, dtype):
    rng = np.random.default_rng(precision)
    for height in [1, 2, 3, 31, 32, 63, 129, 255, 256]:
        width = int(rng.integers(16, 200))
        tile = plane("smooth_noise", height, width, dtype, seed=height)
        assert round_trip(tile, precision=precision)[2] == precision


def test_a_flat_tile_at_mid_grey_is_its_header_and_tables_alone():
    """Every residual 0: each row is the empty stream (final state 0), so the row lengths take 0 bits."""
    tile = np.full((256, 512), 128, np.uint8)
    stream = round_trip(tile, bias="off")
    assert stream[3] == 0  # L
    freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    buf = np.frombuffer(stream, np.uint8)
    status, end_bit = ans.read_tables(buf, 32, len(stream) * 8, 8, 11, freq, alphabets)
    assert status == ans.ANS_OK and len(stream) == (end_bit + 7) // 8  # bits from the stream start
    assert list(alphabets) == [1] + [0] * (ans.ANS_CONTEXTS - 1) and freq[0, 0] == 1 << 11


def layout(stream, height, bits):
    """The stream's parts, parsed here from the layout of the format (not with ans_stream): (flags,
    precision, bias values, row lengths, byte where the rows start)."""
    buf = np.frombuffer(stream, np.uint8)
    kind, flags, precision, length_bits = stream[:4]
    assert kind == fmt.KIND_CODED_ANS
    pos = 4
    bias = []
    if flags & 1:
        size = bits // 8
        bias = [int.from_bytes(stream[pos + i * size : pos + (i + 1) * size], "little", signed=True)
                for i in range(ans.GRADIENT_CONTEXTS)]
        pos += ans.GRADIENT_CONTEXTS * size
    freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    status, end_bit = ans.read_tables(buf, pos * 8, len(stream) * 8, bits, precision, freq, alphabets)
    assert status == ans.ANS_OK
    pos = (end_bit + 7) // 8
    lengths_value = int.from_bytes(stream[pos : pos + (height * length_bits + 7) // 8], "little")
    lengths = [(lengths_value >> (row * length_bits)) & ((1 << length_bits) - 1) for row in range(height)]
    return flags, precision, bias, lengths, pos + (height * length_bits + 7) // 8


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_the_stream_is_its_header_tables_row_lengths_and_rows(dtype):
    bits = np.dtype(dtype).itemsize * 8
    tile = plane("smooth_noise", 70, 300, dtype)
    for bias in ("on", "off"):
        stream = ans_cpu.encode_stream(tile, bias=bias)
        flags, precision, bias_values, lengths, rows = layout(stream, 70, bits)
        assert flags == (1 if bias == "on" else 0) and precision == ans_stream.ANS_REFERENCE_PRECISION
        assert stream[3] == max(lengths).bit_length()
        assert rows + sum(lengths) == len(stream)
        if bias == "on":
            assert any(bias_values) and all(-(1 << (bits - 1)) <= b < 1 << (bits - 1) for b in bias_values)


def test_rows_are_the_row_streams_of_ans_row_coder():
    """Row 0's bytes are the row stream ans.decode_row reads back alone (a band's first row needs nothing
    above it)."""
    tile = plane("smooth_noise", 32, 100, np.uint8)
    stream = ans_cpu.encode_stream(tile, bias="off")
    _, precision, _, lengths, rows = layout(stream, 32, 8)
    buf = np.frombuffer(stream, np.uint8)
    bias, freq, alphabets, slots, token_info = ans_cpu.stream_scratch()
    status, *_ = ans_stream.ans_stream_tables(buf, 0, len(buf), 8, bias, freq, alphabets, slots, token_info)
    assert status == fmt.STATUS_OK
    row = np.zeros((1, 100), np.uint8)
    assert ans.decode_row(buf, rows, rows + lengths[0], row, 0, 0, 100, 8, slots, token_info, precision, bias,
                          False) == ans.ANS_OK
    np.testing.assert_array_equal(row[0], tile[0])


def test_the_plain_python_decoder_agrees_with_the_compiled_one():
    """ans_stream's functions uncompiled (the reference a GPU port follows) on a small biased tile."""
    tile = plane("smooth_noise", 40, 24, np.uint16)
    stream = ans_cpu.encode_stream(tile, bias="on")
    decoded = np.zeros_like(tile)
    buf = np.frombuffer(stream, np.uint8)
    status = ans_stream.decode_ans_stream(buf, 0, len(buf), decoded, 16, *ans_cpu.stream_scratch())
    assert status == fmt.STATUS_OK
    np.testing.assert_array_equal(decoded, tile)


def test_bad_arguments_raise_l3error():
    with pytest.raises(L3Error, match="at most 256 rows"):
        ans_cpu.encode_stream(np.zeros((257, 16), np.uint8))
    with pytest.raises(L3Error, match="precision"):
        ans_cpu.encode_stream(np.zeros((4, 16), np.uint8), precision=5)
    with pytest.raises(L3Error, match="bias"):
        ans_cpu.encode_stream(np.zeros((4, 16), np.uint8), bias="maybe")
    with pytest.raises(L3Error, match="kind byte"):
        ans_cpu.decode_stream(b"", 4, 16, 8)


# ---------------------------------------------------------------- damage: one status per check

HEIGHT, WIDTH = 40, 64


@pytest.fixture(scope="module")
def good():
    """A biased 8-bit stream whose rows all take bytes, and its parsed layout."""
    tile = plane("smooth_noise", HEIGHT, WIDTH, np.uint8, seed=5)
    stream = ans_cpu.encode_stream(tile, bias="on")
    parts = layout(stream, HEIGHT, 8)
    assert min(parts[3]) >= 3  # rows long enough to hold a 3- or 4-byte state and words
    return tile, stream, parts


def status_of(stream, bits=8):
    return ans_cpu.decode_stream(stream, HEIGHT, WIDTH, bits)[1]


def with_byte(stream, index, value):
    damaged = bytearray(stream)
    damaged[index] = value
    return bytes(damaged)


def tables_stream(freq_by_context, precision=11, length_bits=8):
    """A kind-10 stream header and a hand-made table set ({context: frequencies}, 8-bit samples), nothing
    after."""
    freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    for ctx, frequencies in freq_by_context.items():
        freq[ctx, : len(frequencies)] = frequencies
        alphabets[ctx] = len(frequencies)
    out = np.zeros(2048, np.uint8)
    writer = np.zeros(bitio.WRITER_STATE_SIZE, np.int64)
    bitio.writer_init(writer, 0, out.shape[0])
    ans.write_tables(freq, alphabets, out, writer)
    end = bitio.writer_flush(out, writer)
    return bytes([fmt.KIND_CODED_ANS, 0, precision, length_bits]) + bytes(out[:end])


def test_a_wrong_kind_is_bad_kind(good):
    assert status_of(with_byte(good[1], 0, fmt.KIND_CODED)) == fmt.STATUS_BAD_KIND


@pytest.mark.parametrize("index,value", [(1, 2), (1, 0x81), (2, 5), (2, 13), (3, 32)])
def test_header_fields_out_of_range_are_bad_header(good, index, value):
    """Flags bits 1-7, a precision outside 6..12, a row-length width past 31."""
    assert status_of(with_byte(good[1], index, value)) == fmt.STATUS_BAD_HEADER


def test_a_stream_shorter_than_its_header_is_bad_size(good):
    assert status_of(good[1][:3]) == fmt.STATUS_BAD_SIZE


def test_tables_that_fail_their_checks_are_bad_header(good):
    stream = good[1]
    bias_end = 4 + ans.GRADIENT_CONTEXTS
    assert status_of(stream[:bias_end - 1]) == fmt.STATUS_BAD_HEADER  # bias table cut short
    assert status_of(stream[:bias_end + 3]) == fmt.STATUS_BAD_HEADER  # table set cut short
    # context 0's alphabet past the 24 tokens of 8-bit samples
    assert status_of(with_byte(stream, bias_end, 25)) == fmt.STATUS_BAD_HEADER
    assert status_of(tables_stream({0: [1024, 1023]})) == fmt.STATUS_BAD_HEADER  # sums to 2^11 - 1
    assert status_of(tables_stream({0: [2048, 0]}, precision=10)) == fmt.STATUS_BAD_HEADER  # 12 bits > P + 1
    # a well-formed set passes the table stage: what fails then is the row-length table's size (40 x 8 bits)
    assert status_of(tables_stream({0: [1024, 1024]})) == fmt.STATUS_BAD_SIZE


def test_a_row_length_table_past_the_end_is_bad_size(good):
    _, stream, (_, _, _, _, rows) = good
    assert status_of(stream[: rows - 1]) == fmt.STATUS_BAD_SIZE


def test_rows_past_the_end_and_bytes_after_the_last_row_are_bad_size(good):
    stream = good[1]
    assert status_of(stream[:-1]) == fmt.STATUS_BAD_SIZE  # the last row passes the end
    assert status_of(stream + b"\0") == fmt.STATUS_BAD_SIZE  # a byte after the last row


def set_row_lengths(stream, lengths, length_bits, table_pos):
    value = sum(length << (row * length_bits) for row, length in enumerate(lengths))
    size = (len(lengths) * length_bits + 7) // 8
    return stream[:table_pos] + value.to_bytes(size, "little") + stream[table_pos + size :]


def test_rows_that_do_not_decode_to_exactly_their_bytes_are_corrupt(good):
    _, stream, (_, _, _, lengths, rows) = good
    length_bits = stream[3]
    table_pos = rows - (HEIGHT * length_bits + 7) // 8
    # a row's state not in its fewest bytes (top byte 0): ans.ANS_BAD_STATE
    state_bytes = 4 - (lengths[0] & 1)
    assert status_of(with_byte(stream, rows + state_bytes - 1, 0)) == fmt.STATUS_CORRUPT
    # row 0 two bytes short, row 1 two bytes long (the total kept): row 0 ends early or decodes wrong
    moved = set_row_lengths(stream, [lengths[0] - 2, lengths[1] + 2, *lengths[2:]], length_bits, table_pos)
    assert status_of(moved) == fmt.STATUS_CORRUPT
    # ... two bytes long: row 0 has words left after its last sample (ENDS_LATE) or decodes wrong
    moved = set_row_lengths(stream, [lengths[0] + 2, lengths[1] - 2, *lengths[2:]], length_bits, table_pos)
    assert status_of(moved) == fmt.STATUS_CORRUPT


def test_a_context_without_tokens_met_by_a_row_is_corrupt():
    """Tables that code only context 0 (tokens 0 and 1, half the slots each) and a 2-byte row whose state
    3072 decodes token 1 twice (samples 127, 126): the third sample's activity 2 picks context 2, which
    codes nothing (ans.ANS_BAD_TOKEN)."""
    stream = tables_stream({0: [1024, 1024]}, length_bits=2) + bytes([2]) + (3072).to_bytes(2, "little")
    decoded, status = ans_cpu.decode_stream(stream, 1, 16, 8)
    assert status == fmt.STATUS_CORRUPT
    assert list(decoded[0, :3]) == [127, 126, 0]
    # the same row with a 1-byte state (token 0 throughout) decodes, but its state stays 5: it ends early
    stream = tables_stream({0: [1024, 1024]}, length_bits=1) + bytes([1]) + bytes([5])
    decoded, status = ans_cpu.decode_stream(stream, 1, 16, 8)
    assert status == fmt.STATUS_CORRUPT and list(decoded[0]) == [128] * 16


def test_the_first_failing_check_counts_rows_before_the_end(good):
    """A corrupt row 0 and a byte after the last row: CORRUPT (rows are checked before the end)."""
    _, stream, (_, _, _, lengths, rows) = good
    state_bytes = 4 - (lengths[0] & 1)
    damaged = with_byte(stream, rows + state_bytes - 1, 0) + b"\0"
    assert status_of(damaged) == fmt.STATUS_CORRUPT
    # and the tables before the rows: a bad table and a corrupt row give BAD_HEADER
    assert status_of(with_byte(damaged, 4 + ans.GRADIENT_CONTEXTS, 25)) == fmt.STATUS_BAD_HEADER


def test_damaged_streams_give_the_same_status_plain_and_compiled(good):
    """Every single-byte damage of a small stream: the plain-Python decoder (an out-of-bounds read would
    raise there) and the compiled one agree."""
    tile = plane("smooth_noise", 4, 16, np.uint8, seed=9)
    stream = ans_cpu.encode_stream(tile, bias="on", precision=6)
    rng = np.random.default_rng(0)
    for index in range(len(stream)):
        damaged = with_byte(stream, index, int(rng.integers(0, 256)))
        compiled_tile, compiled = ans_cpu.decode_stream(damaged, 4, 16, 8)
        plain_tile = np.zeros((4, 16), np.uint8)
        buf = np.frombuffer(damaged, np.uint8)
        plain = ans_stream.decode_ans_stream(buf, 0, len(buf), plain_tile, 8, *ans_cpu.stream_scratch())
        assert plain == compiled, index
        np.testing.assert_array_equal(plain_tile, compiled_tile)
