"""compact's two decoder forms agree: the CPU's row decoder (compact.decode_compact_row, compiled)
and the per-sample step function a GPU lane runs (compact.decode_sample, here uncompiled, driven
row by row) give the same pixels and the same status, on valid and on damaged streams."""

import numpy as np
import pytest

import l3codec
from images import make_image
from l3codec import compact, cpu, streams
from l3codec import format as fmt


def step_decode_stream(buf, start, end, tile, bits):
    """A stream decoded with decode_sample, one sample at a time, as the Numba kernel's lanes do."""
    status, coded = streams.decode_uncoded(buf, start, end, tile, bits)
    if not coded:
        return status
    height, width = tile.shape
    layout = compact.compact_stream_layout(buf, start, end, height)
    status, run_index, k_nibbles, length_bits, table_pos, pos = layout
    if status != fmt.STATUS_OK:
        return status
    half = 1 << (bits - 1)
    state = np.empty(compact.STATE_SIZE, np.int64)
    mapped_rows = np.zeros((2, width), np.int64)
    for row in range(height):
        row_end = pos + compact.compact_row_length(buf, table_pos, length_bits, row)
        if row_end > end * 8:
            return fmt.STATUS_BAD_SIZE
        band_row = row % fmt.COMPACT_BAND_ROWS  # a lane's row in its band, whose first has no row above
        band = tile[row - band_row:]
        if row_end == pos:
            if band_row == 0:
                return fmt.STATUS_CORRUPT
            tile[row] = tile[row - 1]
            mapped_rows[band_row % 2] = 0
            continue
        compact.row_state_init(state, pos, k_nibbles, run_index)
        for col in range(width):
            w, n, nw = compact.tile_neighbours(band, band_row, col, half)
            mapped_n = mapped_rows[(band_row + 1) % 2, col] if band_row > 0 else 0
            tile[row, col] = compact.decode_sample(buf, state, w, n, nw, mapped_n, width - col, bits)
            mapped_rows[band_row % 2, col] = state[compact.S_MAPPED]
        if state[compact.S_POS] != row_end or state[compact.S_ERROR]:
            return fmt.STATUS_CORRUPT
        pos = row_end
    return fmt.STATUS_OK if (pos + 7) // 8 == end else fmt.STATUS_BAD_SIZE


def step_decode_tile_stream(buf, parsed, planes, stream):
    """step_decode_stream of a file's stream into planes, through its palette (docs/FORMAT.md §5.1)."""
    info = parsed.info
    starts, ends = parsed.stream_starts, parsed.stream_ends
    channel = int(stream) % info.channels
    status, start, colours = streams.open_stream(buf, int(starts[stream]), int(ends[stream]), channel,
                                                 int(starts[stream - channel]), info.channels, info.bits // 8)
    if status != fmt.STATUS_OK or colours == streams.PLANE_MEMBER:
        return status
    tile = stream_tile(info, planes, stream)
    status = step_decode_stream(buf, start, int(ends[stream]), tile, info.bits)
    if status == fmt.STATUS_OK and colours > 0:
        indices = tile.copy()
        for c in range(info.channels):
            stream_tile(info, planes, stream + c)[...] = [
                [streams.palette_sample(buf, int(starts[stream]), colours, int(i), c, info.channels, info.bits // 8)
                 for i in row] for row in indices]
    return status


def both_decoders(data):
    """(statuses, planes) of every stream from the step function and from the CPU codec."""
    parsed = fmt.parse(data, verify=False)
    info = parsed.info
    buf = np.frombuffer(data, np.uint8)
    ids = np.arange(parsed.stream_starts.size, dtype=np.int64)
    results = []
    for decode in ("step", "cpu"):
        planes = np.zeros((info.channels, info.height, info.width), info.dtype)
        status = np.zeros(ids.size, np.int64)
        if decode == "cpu":
            cpu.decode_streams(buf, parsed, ids, planes, status)
        else:
            for stream in ids:
                status[stream] = step_decode_tile_stream(buf, parsed, planes, stream)
        results.append((status, planes))
    return info, results


def stream_tile(info, planes, stream):
    tile_index, channel = divmod(int(stream), info.channels)
    y0 = tile_index // info.tiles_x * info.tile_height
    x0 = tile_index % info.tiles_x * info.tile_width
    return planes[channel, y0:y0 + info.tile_height, x0:x0 + info.tile_width]


IMAGES = {
    "smooth_rgb8": make_image("smooth_noise", 40, 45, 3, np.uint8, 1),
    "labels16": make_image("labels", 24, 30, 1, np.uint16, 2),
    "smooth_gray8_bands": make_image("smooth_noise", 70, 21, 1, np.uint8, 3),  # tiles of 64 rows: two bands
}
TILE_HEIGHTS = {"smooth_gray8_bands": 64}


@pytest.fixture(autouse=True)
def kind_1(monkeypatch):
    """The row and step decoders here are kind 1's (FORMAT.md §6.1-§6.3), which the encoder writes since
    version 10 only when told: kind 10 is its default."""
    from l3codec import encoder_policy

    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", "rice")


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_row_and_step_decoders_agree_on_valid_streams(name):
    data = l3codec.encode(IMAGES[name], tile_width=16, tile_height=TILE_HEIGHTS.get(name, 32))
    _, ((step_status, step_planes), (cpu_status, cpu_planes)) = both_decoders(data)
    assert not step_status.any() and not cpu_status.any()
    assert np.array_equal(step_planes, cpu_planes)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_row_and_step_decoders_report_the_same_status_on_damage(name):
    data = l3codec.encode(IMAGES[name], tile_width=16, tile_height=TILE_HEIGHTS.get(name, 32))
    parsed = fmt.parse(data)
    kind_bytes = set(parsed.stream_starts.tolist())  # left alone: the step decoder knows no LZ kinds
    rng = np.random.default_rng(3)
    statuses = set()
    for _ in range(40):
        damaged = np.frombuffer(data, np.uint8).copy()
        for offset in rng.integers(parsed.payload_offset, damaged.size, int(rng.integers(1, 4))):
            if int(offset) not in kind_bytes:
                damaged[offset] ^= np.uint8(1 << int(rng.integers(0, 8)))
        info, ((step_status, step_planes), (cpu_status, cpu_planes)) = both_decoders(damaged.tobytes())
        assert np.array_equal(step_status, cpu_status)
        statuses.update(step_status.tolist())
        for stream in np.flatnonzero(step_status == 0):  # streams both accept decode to the same pixels
            step_tile = stream_tile(info, step_planes, stream)
            assert np.array_equal(step_tile, stream_tile(info, cpu_planes, stream))
    # the damage reached more than one kind of check (the two-band tile's bytes are nearly all row data)
    assert len(statuses - {0}) >= (1 if name in TILE_HEIGHTS else 2)


def test_branch_free_window_reads_the_bits_peek_bits_reads():
    """bitio.peek_window (the decoders' read) and the CPU build's one-load form of it against
    peek_bits at every bit position of short buffers, including positions near and past the end;
    the CPU build's read_bits against the reference's."""
    from l3codec import bitio

    rng = np.random.default_rng(7)
    compiled = cpu._dev.peek_window
    for size in (8, 9, 15, 16, 23):
        buf = rng.integers(0, 256, size, dtype=np.uint8)
        buf[-1] |= 0x80  # the last byte's top bit set: an arithmetic shift would smear it
        for bit_pos in range(0, (size + 9) * 8):
            expected = bitio.peek_bits(buf, bit_pos)
            assert bitio.peek_window(buf, bit_pos) == expected, (size, bit_pos)
            assert compiled(buf, bit_pos) == expected, (size, bit_pos)
            for count in (1, 6, 12, 32):  # read_bits: the CPU build's form goes through the window
                wanted = bitio.read_bits(buf, bit_pos, count)
                assert cpu._dev.read_bits(buf, bit_pos, count) == wanted, (size, bit_pos, count)
