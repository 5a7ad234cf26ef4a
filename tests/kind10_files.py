"""Compact files in which chosen tile-channels are kind-10 (compact v2, rANS) streams, written by the CPU
codec's stream encoder (ans_cpu.encode_stream), for the Numba CUDA kernel tests; and where a kind-10
stream's parts lie, for damaging them."""

import numpy as np

import l3codec
from l3codec import ans, ans_cpu, ans_stream, encoder_policy
from l3codec import format as fmt


def kind10_layout(stream: bytes, bits: int, rows: int) -> dict:
    """Where a sound kind-10 stream's parts begin (bytes): tables, lengths (the row-length table), rows
    (row 0's stream); and each row stream's length."""
    buf = np.frombuffer(stream, np.uint8)
    tables = ans_stream.ANS_HEADER_BYTES + (ans.GRADIENT_CONTEXTS * bits // 8 if stream[1] & 1 else 0)
    freq = np.zeros((ans.ANS_CONTEXTS, ans.token_count(16)), np.int64)
    status, end_bit = ans.read_tables(buf, tables * 8, len(stream) * 8, bits, stream[2], freq,
                                      np.zeros(ans.ANS_CONTEXTS, np.int64))
    assert status == ans.ANS_OK
    lengths = (end_bit + 7) // 8
    length_bits = stream[3]
    row_lengths = [int(ans_stream.ans_row_length(buf, lengths, length_bits, row)) for row in range(rows)]
    rows_start = int(ans_stream.ans_rows_start(lengths, len(stream), rows, length_bits))
    return {"tables": tables, "lengths": lengths, "rows": rows_start, "row_lengths": row_lengths}


def palette_indices(stream: bytes, tile: np.ndarray) -> np.ndarray:
    """The index plane of a palette stream (kind 3) of the tile's pixels (rows, columns, channels): each
    pixel's position in the stream's colour table."""
    colours = stream[1] + 1
    channels = tile.shape[2]
    table = np.frombuffer(stream, tile.dtype, colours * channels, fmt.PALETTE_HEADER_BYTES)
    table = table.reshape(colours, channels)
    matches = np.all(tile[:, :, None, :] == table[None, None], axis=3)
    assert np.all(matches.any(axis=2))
    return np.ascontiguousarray(matches.argmax(axis=2).astype(tile.dtype))


def with_kind10_streams(image: np.ndarray, tile_width: int, tile_height: int, chosen, *, damage=None,
                        mode: str = "compact", **stream_options) -> bytes:
    """A file of image (compact unless mode says, colour transform none) whose streams `chosen(index, kind)`
    says are recoded as kind 10 by ans_cpu.encode_stream(plane, **stream_options) (the others as the encoder
    with format 9's coder wrote them; a chosen palette stream keeps its colour table, its index plane
    recoded); damage(index, stream, rows), when given, returns what each kind-10 stream becomes."""
    saved = encoder_policy.COMPACT_CODER
    encoder_policy.COMPACT_CODER = "rice"  # kind 1 where coded, so that the file mixes kinds 1 and 10
    try:
        data = l3codec.encode(image, mode=mode, tile_width=tile_width, tile_height=tile_height,
                              transform="none")
    finally:
        encoder_policy.COMPACT_CODER = saved
    parsed = fmt.parse(np.frombuffer(data, np.uint8))
    info = parsed.info
    planes = image.reshape(image.shape[0], image.shape[1], -1)
    streams = []
    for index, (start, end) in enumerate(zip(parsed.stream_starts, parsed.stream_ends)):
        stream = data[start:end]
        if chosen(index, stream[0]):
            tile, channel = divmod(index, info.channels)
            y0, x0 = (tile // info.tiles_x) * tile_height, (tile % info.tiles_x) * tile_width
            pixels = planes[y0:y0 + tile_height, x0:x0 + tile_width]
            prefix = b""
            if stream[0] == fmt.KIND_PALETTE:
                plane = palette_indices(stream, pixels)
                prefix = stream[:fmt.PALETTE_HEADER_BYTES + (stream[1] + 1) * info.channels * plane.itemsize]
            else:
                plane = np.ascontiguousarray(pixels[:, :, channel])
            coded = ans_cpu.encode_stream(plane, **stream_options)
            if damage is not None:
                coded = damage(index, coded, plane.shape[0])
            stream = prefix + coded
        streams.append(stream)
    header = parsed.header
    return fmt.pack(width=info.width, height=info.height, channels=info.channels, bits=info.bits,
                    mode=int(header["mode"]), transform=int(header["transform"]), tile_width=tile_width,
                    tile_height=tile_height, stream_ends=np.cumsum([len(s) for s in streams]),
                    payload=b"".join(streams))
