"""compact v2's rANS coder (l3codec/ans.py, issue #39 phase 1): tokens, tables, row streams, planes, damage.

The plain-Python row functions are the reference: tests of single streams run them directly, and damaged
planes are decoded by them too (an out-of-bounds read raises there) and by the compiled decoder, which
must give the same status.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from images import make_image

from l3codec import L3Error, ans, ans_cpu, bitio

BITS = (8, 16)


def small_table(precision, freqs_by_context):
    """freq, cum and slot tables from {context: [frequencies]}; other contexts code nothing."""
    freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    for ctx, freqs in freqs_by_context.items():
        freq[ctx, : len(freqs)] = freqs
        alphabets[ctx] = len(freqs)
    cum = np.zeros_like(freq)
    ans.cumulative_table(freq, alphabets, cum)
    slots, token_info = slot_tables(precision)
    assert ans.build_slot_table(freq, alphabets, precision, 16, slots, token_info) == ans.ANS_OK
    return freq, cum, (slots, token_info)


def slot_tables(precision):
    """Empty decoder tables (ans.build_slot_table's slots and token_info)."""
    return (
        np.zeros((ans.ANS_CONTEXTS, 1 << precision), np.uint8),
        np.zeros((ans.ANS_CONTEXTS, ans.NO_TOKEN + 1), np.int32),
    )


def encode_symbols(tokens, raws, contexts, freq, cum, precision):
    """A row stream (bytes) of hybrid tokens with their raw bits."""
    tokens = np.asarray(tokens, np.int64)
    raws = np.asarray(raws, np.int64)
    counts = np.array([ans.token_raw_bits(t) for t in tokens], np.int64)
    out = np.zeros(8 * len(tokens) + 8, np.uint8)
    start = ans.encode_row_stream(
        tokens,
        counts,
        raws,
        np.asarray(contexts, np.int64),
        0,
        len(tokens),
        freq,
        cum,
        precision,
        out,
        out.shape[0],
    )
    assert start >= 0
    return out[start:]


def decode_symbols(stream, contexts, tables, precision):
    """(tokens, raws, status) read back with the decoder's own steps; tables: small_table's (slots,
    token_info)."""
    slots, token_info = tables
    buf = np.asarray(stream, np.uint8)
    status, x, pos = ans.open_row_stream(buf, 0, buf.shape[0])
    tokens, raws = [], []
    if status != ans.ANS_OK:
        return tokens, raws, status
    end = buf.shape[0]
    for ctx in contexts:
        token = slots[ctx, x & ((1 << precision) - 1)]
        x = ans.slot_step(token, token_info[ctx, token], x, precision)
        if token == ans.NO_TOKEN:
            return tokens, raws, ans.ANS_BAD_TOKEN
        x, pos = ans.refill(buf, x, pos, end)
        raw = 0
        if ans.token_raw_bits(token) > 0:
            raw, x = ans.raw_step(x, ans.token_raw_bits(token))
            x, pos = ans.refill(buf, x, pos, end)
        tokens.append(int(token))
        raws.append(int(raw))
    return tokens, raws, ans.row_stream_end(x, pos, buf.shape[0])


# ---------------------------------------------------------------- tokens and tables


@pytest.mark.parametrize("bits", BITS)
def test_hybrid_tokens_cover_every_residual_once(bits):
    seen = set()
    for m in range(0, 1 << bits, 1 if bits == 8 else 7):
        token, count, raw = ans.hybrid_token(m)
        assert (
            0 <= token < ans.token_count(bits)
            and count == ans.token_raw_bits(token)
            and 0 <= raw < (1 << count)
        )
        assert ans.hybrid_value(token, raw) == m
        seen.add((token, raw))
    assert ans.hybrid_token((1 << bits) - 1)[0] == ans.token_count(bits) - 1


@pytest.mark.parametrize("bits", BITS)
def test_activity_contexts_are_the_bins_of_the_edges(bits):
    edges = np.array(ans.ACTIVITY_EDGES) << (bits - 8)
    for a in list(range(0, 300 << (bits - 8), 1 << (bits - 8))) + [(1 << bits) - 1, 2 * ((1 << bits) - 1)]:
        w, n, nw = a, 0, 0  # activity |W-NW| + |N-NW| = a
        context = ans.ANS_CONTEXT_OF_ACTIVITY[ans.activity(w, n, nw, bits)]
        assert context == np.searchsorted(edges, a, side="right") and context < ans.ANS_CONTEXTS


@pytest.mark.parametrize("bits", BITS)
def test_the_decoders_context_and_bias_lookups_are_the_encoders_at_every_difference(bits):
    """decoder_context (uncapped activity) and signed_gradient_index (8 bits: tables of every difference)
    against activity + ANS_CONTEXT_OF_ACTIVITY and gradient_context, at the extremes and at random."""
    top = (1 << bits) - 1
    edges = [0, 1, 2, top - 1, top] + [e << (bits - 8) for e in (*ans.ACTIVITY_EDGES, *ans.GRADIENT_EDGES)]
    edges += [e - 1 for e in edges if e > 0] + [e + 1 for e in edges if e < top]
    rng = np.random.default_rng(bits)
    triples = [(w, n, nw) for w in edges for n in edges for nw in (0, top, top // 2)]
    triples += [tuple(int(v) for v in t) for t in rng.integers(0, top + 1, (3000, 3))]
    for w, n, nw in triples:
        context = ans.ANS_CONTEXT_OF_ACTIVITY[ans.activity(w, n, nw, bits)]
        assert ans.decoder_context(w, n, nw, bits) == context
        index = ans.signed_gradient_index(w, n, nw, bits)
        assert index == ans.gradient_context(w, n, nw, bits) + ans.GRADIENT_CONTEXTS - 1


@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=ans_cpu.MAX_TOKENS),
    st.integers(ans.ANS_MIN_PRECISION, ans.ANS_MAX_PRECISION),
)
def test_quantised_tables_sum_to_their_precision_and_keep_every_used_token(counts, precision):
    counts = np.array(counts, np.int64)
    freq = np.zeros_like(counts)
    alphabet = ans.quantise_counts(counts, precision, freq)
    used = np.flatnonzero(counts)
    if used.size == 0:
        assert alphabet == 0 and not freq.any()
        return
    assert alphabet == used[-1] + 1
    assert freq.sum() == 1 << precision
    assert np.all(freq[counts > 0] >= 1) and np.all(freq[counts == 0] == 0)


def written_tables(freq, alphabets):
    out = np.zeros(4096, np.uint8)
    writer = np.zeros(bitio.WRITER_STATE_SIZE, np.int64)
    bitio.writer_init(writer, 0, out.shape[0])
    ans.write_tables(freq, alphabets, out, writer)
    return out[: bitio.writer_flush(out, writer)]


def quantised(rng, precision, bits):
    freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    for ctx in range(1, ans.ANS_CONTEXTS):  # context 0 codes nothing
        counts = rng.integers(0, 50, ans.token_count(bits)) * (rng.random(ans.token_count(bits)) < 0.6)
        counts[0] += 1
        alphabets[ctx] = ans.quantise_counts(counts, precision, freq[ctx])
    return freq, alphabets


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("precision", [6, 11, 12])
def test_tables_read_back_as_written(bits, precision):
    freq, alphabets = quantised(np.random.default_rng(precision + bits), precision, bits)
    data = written_tables(freq, alphabets)
    got, got_alphabets = np.zeros_like(freq), np.zeros_like(alphabets)
    status, end_bit = ans.read_tables(data, 0, data.shape[0] * 8, bits, precision, got, got_alphabets)
    assert status == ans.ANS_OK and (end_bit + 7) // 8 == data.shape[0]
    np.testing.assert_array_equal(got, freq)
    np.testing.assert_array_equal(got_alphabets, alphabets)


def test_a_table_that_does_not_sum_to_its_precision_is_refused():
    freq, alphabets = quantised(np.random.default_rng(1), 11, 8)
    freq[3, 0] += 1
    got, got_alphabets = np.zeros_like(freq), np.zeros_like(alphabets)
    data = written_tables(freq, alphabets)
    assert ans.read_tables(data, 0, data.shape[0] * 8, 8, 11, got, got_alphabets)[0] == ans.ANS_BAD_TABLE
    slots, token_info = slot_tables(11)
    assert ans.build_slot_table(freq, alphabets, 11, 8, slots, token_info) == ans.ANS_BAD_TABLE
    freq[3, 0] -= 2  # short of it
    assert ans.build_slot_table(freq, alphabets, 11, 8, slots, token_info) == ans.ANS_BAD_TABLE


def test_a_frequency_wider_than_the_precision_and_a_cut_table_are_refused():
    freq, alphabets = quantised(np.random.default_rng(2), 8, 8)
    data = written_tables(freq, alphabets)
    got, got_alphabets = np.zeros_like(freq), np.zeros_like(alphabets)
    # read at a lower precision: some frequency is then longer than precision + 1 bits, or the sums differ
    assert ans.read_tables(data, 0, data.shape[0] * 8, 8, 6, got, got_alphabets)[0] == ans.ANS_BAD_TABLE
    for cut in (0, 1, data.shape[0] // 2, data.shape[0] - 1):
        assert ans.read_tables(data, 0, cut * 8, 8, 8, got, got_alphabets)[0] == ans.ANS_BAD_TABLE


@pytest.mark.parametrize("bits", BITS)
def test_an_alphabet_past_the_sample_width_is_a_bad_token(bits):
    freq = np.zeros((ans.ANS_CONTEXTS, 64), np.int64)
    alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
    alphabets[0] = ans.token_count(bits) + 1
    freq[0, : alphabets[0]] = 1
    freq[0, 0] += (1 << 12) - alphabets[0]
    data = written_tables(freq, alphabets)
    got, got_alphabets = np.zeros((ans.ANS_CONTEXTS, 64), np.int64), np.zeros_like(alphabets)
    assert ans.read_tables(data, 0, data.shape[0] * 8, bits, 12, got, got_alphabets)[0] == ans.ANS_BAD_TOKEN
    assert (
        ans.build_slot_table(freq, alphabets, 12, bits, *slot_tables(12)) == ans.ANS_BAD_TOKEN
    )


# ---------------------------------------------------------------- row streams


@given(
    st.lists(st.tuples(st.integers(0, (1 << 16) - 1), st.integers(0, 2)), max_size=300),
    st.sampled_from([6, 10, 12]),
)
def test_row_streams_round_trip_with_the_fewest_state_bytes(samples, precision):
    """Any residuals in up to three contexts, with tables from their own counts (as the encoder makes
    them)."""
    ms = [m for m, _ in samples]
    contexts = [ctx for _, ctx in samples]
    split = [ans.hybrid_token(m) for m in ms]
    tokens = [t for t, _, _ in split]
    raws = [r for _, _, r in split]
    freqs = {}
    for ctx in range(3):
        counts = np.bincount([t for t, c in zip(tokens, contexts) if c == ctx], minlength=ans.token_count(16))
        freq = np.zeros(ans.token_count(16), np.int64)
        if ans.quantise_counts(counts, precision, freq):
            freqs[ctx] = freq[: np.flatnonzero(freq)[-1] + 1]
    freq, cum, tables = (
        small_table(precision, freqs) if freqs else small_table(precision, {0: [1 << precision]})
    )
    stream = encode_symbols(tokens, raws, contexts, freq, cum, precision)
    # the state leads in the fewest bytes: its length follows from the stream's (<= 2: all, odd: 3, even: 4)
    assert len(stream) <= 2 or stream[2 + (len(stream) % 2 == 0)] != 0
    got_tokens, got_raws, status = decode_symbols(stream, contexts, tables, precision)
    assert status == ans.ANS_OK
    assert got_tokens == tokens and got_raws == raws


def test_a_flat_row_costs_no_bytes():
    freq, cum, _ = small_table(12, {0: [4095, 1]})
    assert len(encode_symbols([0] * 512, [0] * 512, [0] * 512, freq, cum, 12)) == 0


def test_a_state_not_in_its_fewest_bytes_is_out_of_range():
    tables = small_table(12, {0: [2048, 2048]})[2]
    for stream in ([0], [5, 0], [5, 0, 0], [1, 2, 3, 0, 7, 7]):  # top byte 0: fewer bytes would hold it
        assert decode_symbols(stream, [0] * 4, tables, 12)[2] == ans.ANS_BAD_STATE


def test_a_stream_cut_short_ends_early_and_one_with_words_to_spare_ends_late():
    rng = np.random.default_rng(5)
    freq, cum, tables = small_table(12, {0: [1000, 1000, 1000, 1096]})
    tokens = list(rng.integers(0, 4, 400))
    stream = encode_symbols(tokens, [0] * 400, [0] * 400, freq, cum, 12)
    assert len(stream) > 20
    assert decode_symbols(stream, [0] * 400, tables, 12)[2] == ans.ANS_OK
    assert decode_symbols(stream[:-2], [0] * 400, tables, 12)[2] == ans.ANS_ENDS_EARLY
    # a likely token barely lowers the state: from 2^24 four samples need no word, so one is left over
    freq, cum, tables = small_table(12, {0: [4095, 1]})
    assert decode_symbols([0, 0, 0, 1, 9, 9], [0] * 4, tables, 12)[2] == ans.ANS_ENDS_LATE
    assert ans.open_row_stream(np.zeros(4, np.uint8), 0, 5)[0] == ans.ANS_ENDS_EARLY


def test_a_context_without_tokens_is_a_bad_token():
    """Row 0 of a tile: sample 1 = half + 1 makes sample 2's activity 2, whose context codes nothing."""
    freq, cum, (slots, token_info) = small_table(12, {0: [2048, 1024, 1024]})
    stream = encode_symbols([0, 2, 0], [0, 0, 0], [0, 0, 0], freq, cum, 12)
    plane = np.zeros((1, 3), np.uint8)
    status = ans.decode_row(
        stream,
        0,
        len(stream),
        plane,
        0,
        0,
        3,
        8,
        slots,
        token_info,
        12,
        np.zeros(ans.SIGNED_BIAS_ENTRIES, np.int64),
        False,
    )
    assert status == ans.ANS_BAD_TOKEN
    assert list(plane[0, :2]) == [128, 129]


# ---------------------------------------------------------------- planes


def plane_cases():
    for kind in ("smooth_noise", "noise", "constant", "gradient", "labels", "extremes"):
        for dtype in (np.uint8, np.uint16):
            yield kind, dtype


@pytest.mark.parametrize("kind,dtype", list(plane_cases()))
@pytest.mark.parametrize("bias", ["choose", "on", "off"])
def test_planes_round_trip(kind, dtype, bias):
    """Heights past a band and a table group, a last tile narrower than the rest."""
    plane = make_image(kind, 300, 70, 1, dtype, seed=3).astype(dtype)
    coded = ans_cpu.encode_plane(plane, tile_width=32, precision=11, bias=bias)
    np.testing.assert_array_equal(ans_cpu.decode_plane(coded), plane)
    assert coded.row_lengths.shape == (300, 3) and len(coded.table_ends) == 2
    assert coded.biased == (bias == "on") or bias == "choose"


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 1), (33, 1), (3, 3), (257, 2)])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_tiny_planes_round_trip_at_the_lowest_precision(shape, dtype):
    """One-sample rows and columns, tiles of 2 (a last tile of 1), a second table group of one row, and
    tables of the lowest precision (2^6 slots for up to 40 tokens)."""
    plane = np.random.default_rng(1).integers(0, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)
    coded = ans_cpu.encode_plane(plane, tile_width=2, precision=6)
    np.testing.assert_array_equal(ans_cpu.decode_plane(coded), plane)


def test_smooth_planes_code_below_a_bit_a_sample_and_noise_near_its_width():
    smooth = make_image("gradient", 64, 512, 1, np.uint8)
    noise = make_image("noise", 64, 512, 1, np.uint8, seed=1).astype(np.uint8)
    assert ans_cpu.encode_plane(smooth).total_bytes() * 8 < 0.2 * smooth.size
    coded = ans_cpu.encode_plane(noise).total_bytes() * 8 / noise.size
    assert 7.9 < coded < 8.4  # uniform noise cannot compress; the coder must not lose much either


def test_bad_arguments_raise_l3error():
    with pytest.raises(L3Error, match="2-D uint8 or uint16"):
        ans_cpu.encode_plane(np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(L3Error, match="precision"):
        ans_cpu.encode_plane(np.zeros((4, 4), np.uint8), precision=13)
    with pytest.raises(L3Error, match="bias"):
        ans_cpu.encode_plane(np.zeros((4, 4), np.uint8), bias="maybe")


def reference_decode(coded):
    """The plain-Python decoder over a CodedPlane (ans_cpu.decode_status's steps, uncompiled)."""
    plane = np.zeros((coded.height, coded.width), np.uint8 if coded.bits == 8 else np.uint16)
    tables = np.frombuffer(coded.tables, np.uint8)
    slots = []
    start = 0
    for end in coded.table_ends:
        freq = np.zeros((ans.ANS_CONTEXTS, ans_cpu.MAX_TOKENS), np.int64)
        alphabets = np.zeros(ans.ANS_CONTEXTS, np.int64)
        status, _ = ans.read_tables(tables, start * 8, end * 8, coded.bits, coded.precision, freq, alphabets)
        if status == ans.ANS_OK:
            tables = slot_tables(coded.precision)
            status = ans.build_slot_table(freq, alphabets, coded.precision, coded.bits, *tables)
            slots.append(tables)
        if status != ans.ANS_OK:
            return status
        start = end
    streams = np.frombuffer(coded.streams, np.uint8)
    pos = 0
    for top in range(0, coded.height, 32):
        for tile, x0 in enumerate(range(0, coded.width, coded.tile_width)):
            for y in range(top, min(top + 32, coded.height)):
                end = pos + int(coded.row_lengths[y, tile])
                status = ans.decode_row(
                    streams,
                    pos,
                    end,
                    plane,
                    y,
                    x0,
                    min(coded.tile_width, coded.width - x0),
                    coded.bits,
                    *slots[y // ans.TABLE_GROUP_ROWS],
                    coded.precision,
                    ans_cpu.signed_bias(coded.bias),
                    coded.biased,
                )
                if status != ans.ANS_OK:
                    return status
                pos = end
    return ans.ANS_OK if pos == len(streams) else ans.ANS_ENDS_LATE


@pytest.fixture(scope="module")
def small_coded():
    plane = make_image("smooth_noise", 40, 24, 1, np.uint8, seed=9).astype(np.uint8)
    return plane, ans_cpu.encode_plane(plane, tile_width=16, precision=10, bias="on")


def test_the_reference_decoder_reads_what_the_compiled_encoder_wrote(small_coded):
    coded = small_coded[1]
    assert reference_decode(coded) == ans.ANS_OK


@given(st.data())
def test_damaged_planes_give_the_same_status_compiled_and_plain(small_coded, data):
    """Flipped bytes in the tables or the streams, or a row length moved: a status, never a crash or a read
    out of bounds (the plain decoder would raise), and the compiled decoder agrees."""
    plane, coded = small_coded
    where = data.draw(st.sampled_from(["tables", "streams", "lengths"]))
    damaged = ans_cpu.CodedPlane(**vars(coded))
    if where == "lengths":
        lengths = coded.row_lengths.copy()
        y, tile = data.draw(st.integers(0, 39)), data.draw(st.integers(0, 1))
        lengths[y, tile] = max(0, lengths[y, tile] + data.draw(st.sampled_from([-2, -1, 1, 2, 3])))
        damaged.row_lengths = lengths
    else:
        part = bytearray(getattr(coded, where))
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(part) - 1))
            part[i] ^= data.draw(st.integers(1, 255))
        setattr(damaged, where, bytes(part))
    status = reference_decode(damaged)
    decoded, compiled_status = ans_cpu.decode_status(damaged)
    assert compiled_status == status
    if status == ans.ANS_OK:  # damage that still decodes cleanly gives some plane, never a crash
        assert decoded.shape == plane.shape


@pytest.mark.compile
def test_the_row_decoder_type_checks_for_the_gpu_without_spills():
    """The same decode_row through numba.cuda.jit(device=True) in a one-row-per-thread kernel, lowered for
    sm_90 (no GPU needed), then ptxas through nvJitLink: registers within compact's 64 and no spills."""
    cuda = pytest.importorskip("numba.cuda")
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    from numba import types

    from l3codec import compact
    from l3codec.jit import compile_device_functions
    from l3codec.kernels.cuda_c import parse_ptxas_log
    from l3codec.kernels.numba_kernels import _jitlink_log

    decode_row = compile_device_functions(
        [bitio, compact, ans], cuda.jit(device=True, inline="always")
    ).decode_row

    def decode_rows(buf, starts, ends, plane, width, slots, token_info, bias, biased, status):
        y = cuda.grid(1)
        if y < plane.shape[0]:
            status[y] = decode_row(
                buf, starts[y], ends[y], plane, y, 0, width, 8, slots, token_info, 11, bias, biased
            )

    signature = (
        types.uint8[::1],
        types.int64[::1],
        types.int64[::1],
        types.uint8[:, ::1],
        types.int64,
        types.uint8[:, ::1],
        types.int32[:, ::1],
        types.int64[::1],
        types.boolean,
        types.int64[::1],
    )
    ptx, _ = cuda.compile_ptx(decode_rows, signature, cc=(9, 0))
    assert ".target sm_90" in ptx and ".entry" in ptx
    handle = nvjitlink.create(2, ["-arch=sm_90", "-verbose"])
    data = ptx.encode()
    nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "ans.ptx")
    nvjitlink.complete(handle)
    report = parse_ptxas_log(_jitlink_log(nvjitlink, handle, "info"), "ans.ptx")
    assert len(report) == 1
    entry = next(iter(report.values()))
    assert entry["spill_stores"] == 0 and entry["spill_loads"] == 0, entry
    assert entry["registers"] <= 64, entry
    print(f"decode_row for sm_90: {entry['registers']} registers, no spills")  # shown by pytest -s / -rP
