"""compact v2's coder on the CPU (issue #39 phase 1): ans.py's row functions compiled with numba.njit, and
plane-level drivers that encode and decode one plane into a CodedPlane. A CodedPlane is phase 1's own
in-memory container for measurements, not a file; kind-10 streams (ans_stream.py, docs/FORMAT.md §6.5) are
encoded and decoded at the end of this module, and by cpu.py's drivers through it.

Encoding takes three passes over a plane, none storing more than a row of symbols: histograms per
TABLE_GROUP_ROWS rows without the static bias (also summing the residuals the bias table is made of), with
it (the cheaper by the quantised tables' own cost is kept), then the row streams. The decoder takes two
rows of a band at once (ans.decode_row_pair).
"""

from __future__ import annotations

import dataclasses
import sys

import numba
import numpy as np
from numba.core.registry import CPUDispatcher
from numba.extending import overload

from . import ans, ans_stream, bitio, compact, streams
from .ans import (
    ANS_CONTEXT_OF_ACTIVITY,
    ANS_CONTEXTS,
    ANS_MESSAGES,
    ANS_OK,
    GRADIENT_CONTEXTS,
    TABLE_GROUP_ROWS,
    token_count,
)
from .ans_stream import (
    ANS_BIAS_CHOOSE,
    ANS_BIAS_OFF,
    ANS_BIAS_ON,
    ANS_MAX_PREFIX_BYTES,
    ANS_REFERENCE_PRECISION,
)
from .format import (
    COMPACT_BAND_ROWS,
    COMPACT_MAX_TILE_HEIGHT,
    STATUS_BAD_HEADER,
    STATUS_BAD_SIZE,
    STATUS_OK,
    L3Error,
)
from .jit import cached_njit, compile_device_functions

MAX_TOKENS = token_count(16)


def _compile_inline(func):
    """Every ans function is inlined where it is used, as compact's per-sample functions are (cpu.py):
    a call that passes arrays costs an incref and decref of each."""
    if numba.config.DISABLE_JIT:
        return func
    return CPUDispatcher(
        py_func=func, targetoptions={"nopython": True, "boundscheck": None, "inline": "always"}
    )


_dev = compile_device_functions([bitio, streams, compact, ans, ans_stream], _compile_inline)
encode_ans_stream = _dev.encode_ans_stream
ans_stream_tables = _dev.ans_stream_tables
ans_rows_start = _dev.ans_rows_start
decode_ans_rows = _dev.decode_ans_rows
constant_value = _dev.constant_value
encode_uncoded = _dev.encode_uncoded
row_symbols = _dev.row_symbols
decode_row = _dev.decode_row
decode_row_pair = _dev.decode_row_pair
encode_row_stream = _dev.encode_row_stream
quantise_counts = _dev.quantise_counts
write_tables = _dev.write_tables
read_tables = _dev.read_tables
build_slot_table = _dev.build_slot_table
cumulative_table = _dev.cumulative_table
neighbours = _dev.neighbours
bias_context = _dev.bias_context
med = _dev.med
zigzag = _dev.zigzag
writer_init = _dev.writer_init
writer_flush = _dev.writer_flush

_cached = cached_njit([sys.modules[__name__]], nogil=True)
# The decoder is compiled without numba's runtime (it allocates nothing): every inlined helper given an
# array would otherwise update its reference count twice, atomically, per sample (decode 2x slower).
_decoder = cached_njit([sys.modules[__name__]], nogil=True, _nrt=False)


@dataclasses.dataclass
class CodedPlane:
    """One plane coded by compact v2's coder: tables per TABLE_GROUP_ROWS rows, the bias, the row streams
    (bands in order, in a band its tiles, in a tile its rows) and each row stream's byte length."""

    height: int
    width: int
    bits: int
    tile_width: int
    precision: int
    biased: bool
    bias: np.ndarray  # GRADIENT_CONTEXTS signed values, all 0 when not biased
    tables: bytes  # each group's tables (ans.write_tables), each group byte-aligned
    table_ends: np.ndarray  # byte end of each group's tables in `tables`
    streams: bytes
    row_lengths: np.ndarray  # (height, tiles): bytes of each row stream

    def stream_bytes(self) -> int:
        return len(self.streams)

    def framing_bytes(self) -> int:
        """What format 10 adds around the row streams, as the model prices it: per band-tile stream 2 header
        bytes, a row-length table (rows x the bit length of its longest row) and a 4-byte stream-table entry;
        the bias flag byte and, when biased, one value per gradient context."""
        total = 1 + (GRADIENT_CONTEXTS * (self.bits // 8) if self.biased else 0)
        for top in range(0, self.height, COMPACT_BAND_ROWS):
            band = self.row_lengths[top : top + COMPACT_BAND_ROWS]
            for column in band.T:
                total += 2 + (len(column) * int(column.max()).bit_length() + 7) // 8 + 4
        return total

    def total_bytes(self) -> int:
        return len(self.tables) + len(self.streams) + self.framing_bytes()


# ---------------------------------------------------------------- encoder passes


@_cached
def _histograms(
    plane,
    tile_width,
    bits,
    bias,
    biased,
    counts,
    tokens,
    raw_bits,
    raw_values,
    contexts,
    bias_sums,
    bias_counts,
    collect,
):
    """counts[group, context, token] over rows of TABLE_GROUP_ROWS (and, with collect, the bias sums: see
    ans.row_symbols); tokens .. contexts are a row's scratch."""
    height, width = plane.shape
    for y in range(height):
        group = counts[y // TABLE_GROUP_ROWS]
        for x0 in range(0, width, tile_width):
            count = min(tile_width, width - x0)
            row_symbols(
                plane,
                y,
                x0,
                count,
                bits,
                bias,
                biased,
                ANS_CONTEXT_OF_ACTIVITY,
                tokens,
                raw_bits,
                raw_values,
                contexts,
                bias_sums,
                bias_counts,
                collect,
            )
            for i in range(count):
                group[contexts[i], tokens[i]] += 1


@_cached
def _tables(counts, precision, freq, cum, alphabets, out):
    """Quantised tables, the encoder's cumulative tables and the written tables of every group; returns the
    byte end of each group's tables in out."""
    ends = np.zeros(counts.shape[0], np.int64)
    writer = np.zeros(bitio.WRITER_STATE_SIZE, np.int64)
    writer_init(writer, 0, out.shape[0])
    for g in range(counts.shape[0]):
        for ctx in range(ANS_CONTEXTS):
            alphabets[g, ctx] = quantise_counts(counts[g, ctx], precision, freq[g, ctx])
        cumulative_table(freq[g], alphabets[g], cum[g])
        write_tables(freq[g], alphabets[g], out, writer)
        ends[g] = writer_flush(out, writer)
        writer_init(writer, ends[g], out.shape[0])
    return ends


@_cached
def _encode_rows(
    plane,
    tile_width,
    bits,
    bias,
    biased,
    freq,
    cum,
    precision,
    tokens,
    raw_bits,
    raw_values,
    contexts,
    scratch,
    out,
    row_lengths,
):
    """Every row stream, bands in order, in a band its tiles, in a tile its rows; returns the bytes written
    or -1 when out is too small. A row's symbols are made into the row scratch arrays just before it is
    coded."""
    height, width = plane.shape
    pos = 0
    for top in range(0, height, COMPACT_BAND_ROWS):
        for tile, x0 in enumerate(range(0, width, tile_width)):
            count = min(tile_width, width - x0)
            for y in range(top, min(top + COMPACT_BAND_ROWS, height)):
                g = y // TABLE_GROUP_ROWS
                row_symbols(
                    plane,
                    y,
                    x0,
                    count,
                    bits,
                    bias,
                    biased,
                    ANS_CONTEXT_OF_ACTIVITY,
                    tokens,
                    raw_bits,
                    raw_values,
                    contexts,
                    bias,
                    bias,
                    False,
                )
                start = encode_row_stream(
                    tokens,
                    raw_bits,
                    raw_values,
                    contexts,
                    0,
                    count,
                    freq[g],
                    cum[g],
                    precision,
                    scratch,
                    scratch.shape[0],
                )
                length = scratch.shape[0] - start
                if start < 0 or pos + length > out.shape[0]:
                    return -1
                out[pos : pos + length] = scratch[start:]
                row_lengths[y, tile] = length
                pos += length
    return pos


def _table_cost_bits(counts, freq, precision):
    used = counts > 0
    return float(np.sum(counts[used] * (precision - np.log2(freq[used]))))


def encode_plane(
    plane: np.ndarray, tile_width: int = 512, precision: int = 11, bias: str = "choose"
) -> CodedPlane:
    """Code one plane (uint8 or uint16, already colour-transformed) with compact v2's coder. bias: "choose"
    (the cheaper of with and without, by the tables' cost), "on" or "off"."""
    if plane.ndim != 2 or plane.dtype not in (np.uint8, np.uint16) or plane.size == 0:
        raise L3Error(f"a plane is a non-empty 2-D uint8 or uint16 array, got {plane.dtype} {plane.shape}")
    if not ans.ANS_MIN_PRECISION <= precision <= ans.ANS_MAX_PRECISION:
        raise L3Error(f"precision must be {ans.ANS_MIN_PRECISION}..{ans.ANS_MAX_PRECISION}, got {precision}")
    if tile_width < 1:
        raise L3Error(f"tile width must be positive, got {tile_width}")
    if bias not in ("choose", "on", "off"):
        raise L3Error(f"bias must be 'choose', 'on' or 'off', got {bias!r}")
    plane = np.ascontiguousarray(plane)
    height, width = plane.shape
    bits = plane.dtype.itemsize * 8
    groups = (height + TABLE_GROUP_ROWS - 1) // TABLE_GROUP_ROWS
    row = [np.zeros(tile_width, dtype) for dtype in (np.uint8, np.uint8, np.int32, np.uint8)]
    sums = np.zeros(GRADIENT_CONTEXTS, np.int64)
    counts_per_gradient = np.zeros(GRADIENT_CONTEXTS, np.int64)
    bias_table = np.zeros(GRADIENT_CONTEXTS, np.int64)
    best = None
    # unbiased first: its pass also sums the residuals the bias table is made of
    for biased in {"choose": (False, True), "on": (False, True), "off": (False,)}[bias]:
        counts = np.zeros((groups, ANS_CONTEXTS, MAX_TOKENS), np.int64)
        _histograms(
            plane,
            tile_width,
            bits,
            bias_table,
            biased,
            counts,
            *row,
            sums,
            counts_per_gradient,
            not biased and bias != "off",
        )
        if not biased:
            bias_table = np.floor(sums / np.maximum(counts_per_gradient, 1) + 0.5).astype(np.int64)
            if bias == "on":
                continue
        freq = np.zeros_like(counts)
        cum = np.zeros_like(counts)
        alphabets = np.zeros((groups, ANS_CONTEXTS), np.int64)
        table_out = np.zeros(groups * ANS_CONTEXTS * (1 + MAX_TOKENS * 2) + 16, np.uint8)
        ends = _tables(counts, precision, freq, cum, alphabets, table_out)
        cost = _table_cost_bits(counts, freq, precision) / 8 + ends[-1] + (GRADIENT_CONTEXTS if biased else 0)
        if best is None or cost < best[0]:
            best = (cost, biased, freq, cum, bytes(table_out[: ends[-1]]), ends)
    _, biased, freq, cum, tables, ends = best
    # a sample costs at most 12 token bits and 14 raw bits, so 4 bytes a sample bound any row stream
    scratch = np.zeros(4 * tile_width + 16, np.uint8)
    out = np.zeros(plane.size * 4 + 16 * height * ((width + tile_width - 1) // tile_width), np.uint8)
    row_lengths = np.zeros((height, (width + tile_width - 1) // tile_width), np.int64)
    written = _encode_rows(
        plane, tile_width, bits, bias_table, biased, freq, cum, precision, *row, scratch, out, row_lengths
    )
    if written < 0:
        raise RuntimeError("compact v2 row stream outgrew its scratch")  # a bug: the bound above holds
    return CodedPlane(
        height,
        width,
        bits,
        tile_width,
        precision,
        biased,
        bias_table if biased else np.zeros(GRADIENT_CONTEXTS, np.int64),
        tables,
        ends,
        bytes(out[:written]),
        row_lengths,
    )


# ---------------------------------------------------------------- decoder


@_decoder
def _read_group_tables(buf, table_ends, bits, precision, freq, alphabets, slots, token_info):
    """Read and check every group's tables into slot tables; returns a status."""
    start = 0
    for g in range(table_ends.shape[0]):
        status, _ = read_tables(buf, start * 8, table_ends[g] * 8, bits, precision, freq[g], alphabets[g])
        if status != ANS_OK:
            return status
        status = build_slot_table(freq[g], alphabets[g], precision, bits, slots[g], token_info[g])
        if status != ANS_OK:
            return status
        start = table_ends[g]
    return ANS_OK


@_decoder
def _decode_rows(streams, row_lengths, tile_width, bits, slots, token_info, precision, bias, biased, plane):
    """_decode_rows_with for constant bits and biased: each combination its own loop, in which the shifts
    and masks of the sample width fold and the bias branch goes."""
    # numba inlines _decode_rows_with only for a call without *args
    if bits == 8 and biased:
        return _decode_rows_with(
            streams, row_lengths, tile_width, slots, token_info, precision, bias, plane, 8, True
        )
    if bits == 8:
        return _decode_rows_with(
            streams, row_lengths, tile_width, slots, token_info, precision, bias, plane, 8, False
        )
    if biased:
        return _decode_rows_with(
            streams, row_lengths, tile_width, slots, token_info, precision, bias, plane, 16, True
        )
    return _decode_rows_with(
        streams, row_lengths, tile_width, slots, token_info, precision, bias, plane, 16, False
    )


@_compile_inline
def _decode_rows_with(
    streams, row_lengths, tile_width, slots, token_info, precision, bias, plane, bits, biased
):
    """Decode every row stream in the order _encode_rows wrote them, two rows of a band at a time
    (ans.decode_row_pair); returns the first bad status, the one row-by-row decoding finds."""
    height, width = plane.shape
    pos = 0
    for top in range(0, height, COMPACT_BAND_ROWS):
        bottom = min(top + COMPACT_BAND_ROWS, height)
        for tile, x0 in enumerate(range(0, width, tile_width)):
            count = min(tile_width, width - x0)
            for y in range(top, bottom, 2):
                slots_y = slots[y // TABLE_GROUP_ROWS]
                token_info_y = token_info[y // TABLE_GROUP_ROWS]
                middle = pos + row_lengths[y, tile]
                if y + 1 < bottom:
                    end = middle + row_lengths[y + 1, tile]
                    status = decode_row_pair(
                        streams,
                        pos,
                        middle,
                        end,
                        plane,
                        y,
                        x0,
                        count,
                        bits,
                        slots_y,
                        token_info_y,
                        precision,
                        bias,
                        biased,
                    )
                else:
                    end = middle
                    status = decode_row(
                        streams,
                        pos,
                        end,
                        plane,
                        y,
                        x0,
                        count,
                        bits,
                        slots_y,
                        token_info_y,
                        precision,
                        bias,
                        biased,
                    )
                if status != ANS_OK:
                    return status
                pos = end
    return ANS_OK if pos == streams.shape[0] else ans.ANS_ENDS_LATE


def signed_bias(bias):
    """A plane's GRADIENT_CONTEXTS bias values as the decoder takes them (ans.signed_bias_table)."""
    table = np.zeros(ans.SIGNED_BIAS_ENTRIES, np.int64)
    table[:GRADIENT_CONTEXTS] = bias
    _dev.signed_bias_table(table)
    return table


def decode_status(coded: CodedPlane) -> tuple[np.ndarray, int]:
    """(plane, status): the decoded plane and ans.ANS_OK, or the first damage found (the plane then holds
    what was decoded before it)."""
    dtype = np.uint8 if coded.bits == 8 else np.uint16
    plane = np.zeros((coded.height, coded.width), dtype)
    groups = len(coded.table_ends)
    freq = np.zeros((groups, ANS_CONTEXTS, MAX_TOKENS), np.int64)
    alphabets = np.zeros((groups, ANS_CONTEXTS), np.int64)
    slots = np.zeros((groups, ANS_CONTEXTS, 1 << coded.precision), np.uint8)
    token_info = np.zeros((groups, ANS_CONTEXTS, ans.NO_TOKEN + 1), np.int32)
    table_bytes = np.frombuffer(coded.tables, np.uint8)
    status = _read_group_tables(
        table_bytes,
        np.asarray(coded.table_ends, np.int64),
        coded.bits,
        coded.precision,
        freq,
        alphabets,
        slots,
        token_info,
    )
    if status != ANS_OK:
        return plane, status
    status = _decode_rows(
        np.frombuffer(coded.streams, np.uint8),
        coded.row_lengths,
        coded.tile_width,
        coded.bits,
        slots,
        token_info,
        coded.precision,
        signed_bias(coded.bias),
        coded.biased,
        plane,
    )
    return plane, status


def decode_plane(coded: CodedPlane) -> np.ndarray:
    """The plane, or L3Error naming the damage."""
    plane, status = decode_status(coded)
    if status != ANS_OK:
        raise L3Error(f"compact v2 plane: {ANS_MESSAGES[status]}")
    return plane


# ---------------------------------------------------------------- kind-10 streams (format 10)

_BIAS_MODES = {"choose": ANS_BIAS_CHOOSE, "off": ANS_BIAS_OFF, "on": ANS_BIAS_ON}


@_cached
def _encode_stream(tile, bits, precision, bias_mode, out):
    return encode_ans_stream(tile, bits, precision, bias_mode, out, 0, out.shape[0])


@_cached
def encode_tile_stream(tile, bits, out, start, limit):
    """A compact tile-channel as the codec writes it with kind 10 (cpu.py's drivers call this): a constant
    stream where the tile is constant, else kind 10 at the reference precision where it is smaller than the
    raw stream, else raw. Returns its size; out[start:limit] must hold ANS_MAX_PREFIX_BYTES and the raw
    stream."""
    constant = constant_value(tile)
    if constant >= 0:
        return encode_uncoded(tile, bits, out, start, constant)
    raw_size = 1 + (bits >> 3) * tile.shape[0] * tile.shape[1]
    size = encode_ans_stream(tile, bits, ANS_REFERENCE_PRECISION, ANS_BIAS_CHOOSE, out, start,
                             min(limit, start + ANS_MAX_PREFIX_BYTES + raw_size))
    if size < 0 or size >= raw_size:
        return encode_uncoded(tile, bits, out, start, -1)
    return size


def encode_stream(plane: np.ndarray, precision: int = ANS_REFERENCE_PRECISION, bias: str = "choose") -> bytes:
    """One tile-channel (uint8 or uint16, already colour-transformed, at most COMPACT_MAX_TILE_HEIGHT rows) as
    the bytes of a kind-10 stream (ans_stream.py). bias: "choose", "on" or "off"."""
    if plane.ndim != 2 or plane.dtype not in (np.uint8, np.uint16) or plane.size == 0:
        raise L3Error(f"a plane is a non-empty 2-D uint8 or uint16 array, got {plane.dtype} {plane.shape}")
    if plane.shape[0] > COMPACT_MAX_TILE_HEIGHT:
        raise L3Error(f"a kind-10 stream holds at most {COMPACT_MAX_TILE_HEIGHT} rows, got {plane.shape[0]}")
    if not ans.ANS_MIN_PRECISION <= precision <= ans.ANS_MAX_PRECISION:
        raise L3Error(f"precision must be {ans.ANS_MIN_PRECISION}..{ans.ANS_MAX_PRECISION}, got {precision}")
    if bias not in _BIAS_MODES:
        raise L3Error(f"bias must be 'choose', 'on' or 'off', got {bias!r}")
    plane = np.ascontiguousarray(plane)
    # a sample costs at most 4 bytes (ans_stream.encode_ans_stream's row bound)
    out = np.zeros(ANS_MAX_PREFIX_BYTES + 4 * plane.size + 16 * plane.shape[0] + 16, np.uint8)
    size = _encode_stream(plane, plane.dtype.itemsize * 8, precision, _BIAS_MODES[bias], out)
    if size < 0:
        raise RuntimeError("kind-10 stream outgrew its buffer")  # a bug: the bound above holds
    return bytes(out[:size])


def stream_scratch():
    """The decoder's tables for one kind-10 stream at a time: (bias, freq, alphabets, slots, token_info)."""
    return (
        np.zeros(ans.SIGNED_BIAS_ENTRIES, np.int64),
        np.zeros((ANS_CONTEXTS, MAX_TOKENS), np.int64),
        np.zeros(ANS_CONTEXTS, np.int64),
        np.zeros((ANS_CONTEXTS, 1 << ans.ANS_MAX_PRECISION), np.uint8),
        np.zeros((ANS_CONTEXTS, ans.NO_TOKEN + 1), np.int32),
    )


def specialised_rows(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias, slots,
                     token_info):
    """ans_stream.decode_ans_rows with the sample width and the bias flag constants, so that the shifts and
    masks fold and the bias branch goes. Compiled, the width is the tile's dtype's (the overload below): a
    uint8 tile compiles only the 8-bit rows, which halves the decoder's first-use compile (decode_stream_into
    60 -> 30 s on one core). Uncompiled, the plain call."""
    return decode_ans_rows(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias, slots,
                           token_info)


@overload(specialised_rows, jit_options={"_nrt": False})
def _specialised_rows_of_dtype(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias,
                               slots, token_info):
    width = 8 if tile.dtype == numba.types.uint8 else 16

    def rows(buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias, slots, token_info):
        if bits != width:  # a tile of another sample width: cpu.py never passes one
            return STATUS_BAD_HEADER
        if biased:
            return decode_ans_rows(
                buf, length_table, pos, end, tile, width, True, precision, length_bits, bias, slots, token_info
            )
        return decode_ans_rows(
            buf, length_table, pos, end, tile, width, False, precision, length_bits, bias, slots, token_info
        )

    return rows


@_decoder
def decode_stream_into(buf, start, end, tile, bits, bias, freq, alphabets, slots, token_info):
    """ans_stream.decode_ans_stream with its rows specialised (specialised_rows). Returns a FORMAT.md §8
    status."""
    status, biased, precision, length_bits, length_table = ans_stream_tables(
        buf, start, end, bits, bias, freq, alphabets, slots, token_info
    )
    if status != STATUS_OK:
        return status
    pos = ans_rows_start(length_table, end, tile.shape[0], length_bits)
    if pos < 0:
        return STATUS_BAD_SIZE
    return specialised_rows(
        buf, length_table, pos, end, tile, bits, biased, precision, length_bits, bias, slots, token_info
    )


def decode_stream(stream, height: int, width: int, bits: int) -> tuple[np.ndarray, int]:
    """(tile, status) of one kind-10 stream of a height x width tile-channel: status is format.STATUS_OK or
    the first failing check's FORMAT.md §8 code (the tile then holds what was decoded before it)."""
    buf = np.frombuffer(bytes(stream), np.uint8)
    if buf.size == 0:
        raise L3Error("a stream holds at least its kind byte")
    tile = np.zeros((height, width), np.uint8 if bits == 8 else np.uint16)
    status = decode_stream_into(buf, 0, buf.shape[0], tile, bits, *stream_scratch())
    return tile, int(status)
