"""Kind-10 streams for the kernel tests: files whose chosen tile-channels are kind 10 (the reference
encoder's, ans_cpu.encode_stream, or with a bias table given here, ans_stream_parts': built from ans.py's
row functions in issue #39's decision-4 layout), and the reference decoder's statuses and pixels of such
files (ans_cpu.decode_stream for the kind-10 streams, which the CPU decoder does not read yet, the CPU
decoder for the rest)."""

import numpy as np

from corruption import cpu_stream_statuses
from l3codec import ans, ans_cpu
from l3codec import format as fmt
from l3codec.bitio import bit_length, put_bits, writer_flush, writer_init

KIND = 10


def ans_stream(plane, bits, precision=11, biased=False, bias=None):
    """The kind-10 stream of one tile-channel plane (h x w)."""
    return b"".join(ans_stream_parts(plane, bits, precision, biased, bias))


def ans_stream_parts(plane, bits, precision=11, biased=False, bias=None):
    """(header, bias table and table set; row-length table; row streams) of ans_stream."""
    h, w = plane.shape
    plane = plane.astype(np.int64)
    tokens = np.zeros((h, w), np.int64)
    raw_bits = np.zeros((h, w), np.int64)
    raw_values = np.zeros((h, w), np.int64)
    contexts = np.zeros((h, w), np.int64)
    sums = np.zeros(ans.GRADIENT_CONTEXTS, np.int64)
    counts_b = np.zeros(ans.GRADIENT_CONTEXTS, np.int64)
    if bias is None:
        bias = np.zeros(ans.GRADIENT_CONTEXTS, np.int64)
    for y in range(h):
        ans.row_symbols(plane, y, 0, w, bits, bias, biased, ans.ANS_CONTEXT_OF_ACTIVITY, tokens[y], raw_bits[y],
                        raw_values[y], contexts[y], sums, counts_b, False)
    counts = np.zeros((ans.ANS_CONTEXTS, ans.token_count(bits)), np.int64)
    np.add.at(counts, (contexts.ravel(), tokens.ravel()), 1)
    freq = np.zeros((ans.ANS_CONTEXTS, 64), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    for ctx in range(ans.ANS_CONTEXTS):
        alphabets[ctx] = ans.quantise_counts(counts[ctx], precision, freq[ctx, :counts.shape[1]])
    table_out = np.zeros(8192, np.uint8)
    writer = np.zeros(4, np.int64)
    writer_init(writer, 0, table_out.size)
    ans.write_tables(freq, alphabets, table_out, writer)
    tables = bytes(table_out[:writer_flush(table_out, writer)])
    cum = np.zeros_like(freq)
    ans.cumulative_table(freq, alphabets, cum)
    rows = []
    for y in range(h):
        out = np.zeros(16 * w + 16, np.uint8)
        start = ans.encode_row_stream(tokens[y], raw_bits[y], raw_values[y], contexts[y], 0, w, freq, cum,
                                      precision, out, out.size)
        rows.append(bytes(out[start:]))
    length_bits = bit_length(max(len(r) for r in rows))
    lengths_out = np.zeros(h * 4 + 8, np.uint8)
    writer_init(writer, 0, lengths_out.size)
    for r in rows:
        put_bits(lengths_out, writer, len(r), length_bits)
    lengths = bytes(lengths_out[:writer_flush(lengths_out, writer)])
    bias_bytes = b""
    if biased:
        dtype = np.int8 if bits == 8 else np.dtype("<i2")
        bias_bytes = np.asarray(bias).astype(dtype).tobytes()
    return bytes([KIND, int(biased), precision, length_bits]) + bias_bytes + tables, lengths, b"".join(rows)


def with_ans_streams(data, chosen, precision=11, biased=False, bias=None, mode="choose"):
    """The compact file `data` with the streams in `chosen` that code their own plane (kinds 0-2 outside
    palette and pixel LZ tiles) replaced by kind-10 streams of the same pixels: the reference encoder's
    (bias `mode`), or with `bias` given, with that bias table (biased) from ans_stream_parts."""
    import l3codec

    parsed = fmt.parse(np.frombuffer(data, np.uint8))
    info = parsed.info
    image = l3codec.decode(data)
    planes = image.reshape(info.height, info.width, -1).transpose(2, 0, 1)
    if info.channels >= 3:  # the planes the streams code: after the colour transform
        from l3codec import cpu
        planes = np.empty((info.channels, info.height, info.width), image.dtype)
        cpu.image_to_planes(image, planes, fmt.TRANSFORMS[info.transform], info.bits)
    buf = np.frombuffer(data, np.uint8)
    streams = []
    for s in range(len(parsed.stream_starts)):
        stream = bytes(buf[parsed.stream_starts[s]:parsed.stream_ends[s]])
        tile, channel = divmod(s, info.channels)
        tile_kind = buf[parsed.stream_starts[s - channel]]
        own_plane = stream[0] in (fmt.KIND_CONSTANT, fmt.KIND_CODED, fmt.KIND_RAW) and tile_kind not in (
            fmt.KIND_PALETTE, fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED)
        if s in chosen and own_plane:
            ty, tx = divmod(tile, info.tiles_x)
            y0, x0 = ty * info.tile_height, tx * info.tile_width
            tile_plane = planes[channel, y0:y0 + info.tile_height, x0:x0 + info.tile_width]
            if bias is None:
                stream = ans_cpu.encode_stream(np.ascontiguousarray(tile_plane), precision, mode)
            else:
                stream = ans_stream(tile_plane, info.bits, precision, biased, bias)
        streams.append(stream)
    payload = b"".join(streams)
    ends = np.cumsum([len(s) for s in streams])
    return fmt.pack(width=info.width, height=info.height, channels=info.channels, bits=info.bits,
                    mode=fmt.MODES[info.mode], transform=fmt.TRANSFORMS[info.transform], tile_width=info.tile_width,
                    tile_height=info.tile_height, stream_ends=ends, payload=payload)


def reference_statuses(data) -> np.ndarray:
    """Each stream's status as the reference decoders give it: ans_cpu.decode_stream for kind 10, the CPU
    decoder (corruption.cpu_stream_statuses) for the rest."""
    parsed = fmt.parse(data)
    info = parsed.info
    status = cpu_stream_statuses(data)
    buf = np.frombuffer(data, np.uint8)
    for stream, (start, end) in enumerate(zip(parsed.stream_starts, parsed.stream_ends)):
        tile, channel = divmod(stream, info.channels)
        member_tile = buf[parsed.stream_starts[stream - channel]] in (
            fmt.KIND_PALETTE, fmt.KIND_PIXEL_LZ, fmt.KIND_PIXEL_LZ_CODED)
        if buf[start] == KIND and fmt.MODES[info.mode] == fmt.MODE_COMPACT and not (channel and member_tile):
            rows, columns = info.tile_rows(tile // info.tiles_x), info.tile_columns(tile % info.tiles_x)
            status[stream] = ans_cpu.decode_stream(buf[start:end], int(rows), int(columns), info.bits)[1]
    return status


def first_reference_status(data) -> int:
    """The reference status of the file's first failing stream, or 0 (corruption.first_cpu_status's)."""
    return ([c for c in reference_statuses(data).tolist() if c] or [0])[0]
