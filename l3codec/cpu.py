"""Numba CPU drivers: colour transform, and each mode's streams encoded and decoded in parallel.

The per-stream, per-row and per-sample logic lives in the mode modules; here it is
compiled with ``numba.njit`` into nogil drivers over ranges of tiles, which a Python thread
pool runs on ``numba.get_num_threads()`` threads. Each driver compiles on
first use for the dtypes it meets, one mode at a time, in the calling process, into Numba's
on-disk cache, keyed on what it compiles (jit.compile_key); a warm-up compiles ahead in
processes of its own (warmup.py, first_use.py).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import itertools
import os
import sys
import typing

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.registry import CPUDispatcher
from numba.cpython.unsafe.numbers import trailing_zeros as _count_trailing_zeros
from numba.extending import intrinsic

from . import (ans_cpu, ans_stream, bitio, colour, compact, fast, first_use, huffman, lz, lz4block, palette,
               streams)
from . import format as fmt
from .jit import cached_njit, compile_device_functions


@intrinsic
def _load_unaligned_int64(typingctx, buf, byte_pos):
    """Eight bytes of a contiguous uint8 array at byte_pos, in the machine's order, in one load."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.gep(array.data, [args[1]])
        return builder.load(builder.bitcast(pointer, ir.IntType(64).as_pointer()), align=1)

    return types.int64(buf, byte_pos), codegen


_peek_window_near_end = numba.njit(bitio.peek_window)


@numba.njit
def _peek_window(buf, bit_pos):
    """bitio.peek_window in one unaligned load, away from the buffer's end (little-endian machines):
    two operations after the load instead of six, on the chain from one code word to the next.
    Written out: built on a one-load load56 (whose form near the end, a loop, stays a call), the
    same bits measured 77% slower in the compact decode step (50.8 -> 89.7 ms per hires2048 frame)."""
    byte_pos = bit_pos >> 3
    if byte_pos + 8 <= buf.shape[0] and buf.strides[0] == 1:
        return (_load_unaligned_int64(buf, byte_pos) & ((np.int64(1) << 56) - 1)) >> (bit_pos & 7)
    return _peek_window_near_end(buf, bit_pos)


@numba.njit
def _trailing_zeros(value, limit):
    return np.int64(_count_trailing_zeros(value | (np.int64(1) << limit)))


# the CPU's own forms of bit-level primitives; the plain Python ones are the reference. peek_bits
# (under read_bits) reads the same bits as peek_window: through bitio.load56, whose form near the
# buffer's end loops and so stays a call, every read paid an atomic incref and decref of buf, taken
# or not (fast decode step 24.1 -> 21.5 ms per hires2048 frame: fast reads its row flags and headers
# with read_bits). The GPU still reads through load56.
_REPLACEMENTS = {"trailing_zeros": _trailing_zeros}
if sys.byteorder == "little":
    _REPLACEMENTS["peek_window"] = _peek_window
    _REPLACEMENTS["peek_bits"] = _peek_window


class _UnliteralDispatcher(CPUDispatcher):
    """Compiled once per argument type. Numba compiles a function again for every constant
    argument a caller passes (Literal[int](0), Literal[int](1) ...), and each copy again for each
    of its own callees: 7 s of a 38 s first round trip, nearly all in the stream encoders. The
    decoders keep that specialisation (without it the compact decoder measured a few % slower)."""

    def get_call_template(self, args, kws):
        return super().get_call_template([types.unliteral(a) for a in args],
                                         {k: types.unliteral(v) for k, v in kws.items()})


def _compile(func, dispatcher=CPUDispatcher):
    if numba.config.DISABLE_JIT:
        return func
    inline = {"inline": "always"} if getattr(func, "l3_cpu_inline", False) else {}
    return dispatcher(py_func=func, targetoptions={"nopython": True, "boundscheck": None, **inline})


def _compile_once_per_type(func):
    return _compile(func, _UnliteralDispatcher)


_MODULES = [bitio, colour, lz4block, huffman, lz, streams, compact, fast, palette]
_REPLACED = None if numba.config.DISABLE_JIT else _REPLACEMENTS
_dev = compile_device_functions(_MODULES, _compile, replacements=_REPLACED)
_encoders = compile_device_functions(_MODULES, _compile_once_per_type, replacements=_REPLACED)
forward_colour = _dev.forward_colour
med = _dev.med
fast_predict = _dev.predict
inverse_colour = _dev.inverse_colour
decode_uncoded = _dev.decode_uncoded
decode_pixel_lz = _dev.decode_pixel_lz
open_stream = _dev.open_stream
palette_sample = _dev.palette_sample
tile_palette = _encoders.tile_palette
palette_indices = _encoders.palette_indices
write_palette_table = _encoders.write_palette_table
write_palette_member = _encoders.write_palette_member
palette_table_bytes = _encoders.palette_table_bytes
palette_may_pay = _encoders.palette_may_pay
_PLANE_MEMBER = streams.PLANE_MEMBER
_PLANE_PIXELS = streams.PLANE_PIXELS
_HASH_SLOTS = palette.HASH_SLOTS
encode_compact_stream = _encoders.encode_compact_stream
decode_compact_stream = _dev.decode_compact_stream
encode_fast_stream = _encoders.encode_fast_stream
decode_fast_stream = _dev.decode_fast_stream
smaller_as_lz = _encoders.smaller_as_lz
pixel_lz_stream = _encoders.pixel_lz_stream
lz_scratch = _encoders.lz_scratch
# kind 10 (compact v2), compiled by ans_cpu: every ans function inlined and its decoder without numba's
# runtime, which a driver here calls once per stream
encode_ans_tile_stream = ans_cpu.encode_tile_stream
decode_ans_stream = ans_cpu.decode_stream_into
_ANS_CONTEXTS = ans_cpu.ANS_CONTEXTS
_ANS_MAX_TOKENS = ans_cpu.MAX_TOKENS
_ANS_SIGNED_BIAS_ENTRIES = ans_cpu.ans.SIGNED_BIAS_ENTRIES
_ANS_SLOTS = 1 << ans_cpu.ans.ANS_MAX_PRECISION
_ANS_TOKEN_INFO = ans_cpu.ans.NO_TOKEN + 1

# compact's coder for a coded tile (encoder_policy.COMPACT_CODER names them): kind 1 (adaptive Golomb-Rice),
# kind 10 (static-table rANS), or whichever of the two is smaller, tile by tile
COMPACT_CODERS = {"rice": 0, "ans": 1, "smaller": 2}
_CODER_RICE, _CODER_SMALLER = COMPACT_CODERS["rice"], COMPACT_CODERS["smaller"]



_cached = cached_njit([sys.modules[__name__]], on_miss=first_use.coordinator.cache_missed, nogil=True)


def cache_path():
    """The folder of the drivers' on-disk cache (None when nothing compiles: NUMBA_DISABLE_JIT)."""
    return None if numba.config.DISABLE_JIT else _encode_compact_streams._cache.cache_path


def _in_parallel(driver, count, *args):
    """driver(*args, first, stop) over ranges that together cover range(count), on numba's thread
    count (numba.set_num_threads). The drivers are plain nogil functions run by a Python thread
    pool: the same speed as prange, without the parallel compiler's ~10 s first compile."""
    threads = min(numba.get_num_threads(), count)
    if threads <= 1:
        driver(*args, 0, count)
        return
    chunks = min(count, 4 * threads)  # a few per thread, so that one slow chunk does not idle the rest
    bounds = [count * i // chunks for i in range(chunks + 1)]
    taken = itertools.count()  # next() on it is atomic under the GIL

    def work():
        for chunk in iter(taken.__next__, None):
            if chunk >= chunks:
                return
            driver(*args, bounds[chunk], bounds[chunk + 1])

    # each in a copy of this context: a cache miss in a pool thread sees the verb that caused it (first_use.py)
    for future in [_pool().submit(contextvars.copy_context().run, work) for _ in range(threads)]:
        future.result()


_pools = {}


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """This process's pool (a forked child gets its own: the parent's threads are not in it)."""
    pid = os.getpid()
    if pid not in _pools:
        _pools[pid] = concurrent.futures.ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS, "l3codec")
    return _pools[pid]


def stream_slot_bytes(tile_width, tile_height, bits):
    """Scratch bytes one stream may use while encoding: the raw fallback plus the largest prefix,
    after room for a palette's table (a palette stream holds its index plane's stream)."""
    palette_bytes = fmt.PALETTE_HEADER_BYTES + fmt.PALETTE_MAX_COLOURS * 4 * (bits // 8)
    prefix_bytes = max(compact.MAX_PREFIX_BYTES, ans_stream.ANS_MAX_PREFIX_BYTES)
    return palette_bytes + prefix_bytes + 1 + (bits // 8) * tile_width * tile_height + 8


# ---------------------------------------------------------------- colour and layout


def image_to_planes(image, planes, transform, bits):
    """HWC image -> CHW planes, applying the forward colour transform."""
    _in_parallel(_image_to_planes, image.shape[0], image, planes, transform, bits)


def transform_residual_counts(image, rows, bits, mode) -> np.ndarray:
    """counts[transform, plane, v]: how often residual v (mod 2**bits) occurs in planes 0-2 of a 3- or
    4-channel HWC image under each colour transform, over the image rows `rows` (each at least 1: it needs
    the row above), predicted as the mode predicts a tile's row (compact: med of W, N, NW, columns 1 on;
    fast: fast.predict's phases, the image one tile wide). For the encoder's choice of transform."""
    counts = np.zeros((len(fmt.TRANSFORM_NAMES), 3, 1 << bits), np.int64)
    _transform_residual_counts(image, np.asarray(rows, np.int64), bits, mode == fmt.MODE_FAST, counts)
    return counts


@_cached
def _transform_residual_counts(image, rows, bits, fast_prediction, counts):
    width = image.shape[1]
    mask = (np.int64(1) << bits) - 1
    pair = np.empty((2, 3, width), np.int64)  # the row above and the row, as planes
    for transform in range(counts.shape[0]):
        for y in rows:
            for r in range(2):
                pixels = image[y - 1 + r]
                for x in range(width):
                    red, green, blue = np.int64(pixels[x, 0]), np.int64(pixels[x, 1]), np.int64(pixels[x, 2])
                    if transform != fmt.TRANSFORM_NONE:
                        red, green, blue = forward_colour(transform, red, green, blue, bits)
                    pair[r, 0, x], pair[r, 1, x], pair[r, 2, x] = red, green, blue
            for c in range(3):
                if fast_prediction:
                    for x in range(width):
                        counts[transform, c, (pair[1, c, x] - fast_predict(pair[:, c], 1, x, width, bits)) & mask] += 1
                    continue
                above, here = pair[0, c], pair[1, c]
                for x in range(1, width):
                    counts[transform, c, (here[x] - med(here[x - 1], above[x], above[x - 1])) & mask] += 1


# One row at a time through 1-D views of the rows (planes_to_image: 4.0 -> 2.5 ms on 2048x1024 RGB,
# against 3-D indexing per pixel).
@_cached
def _image_to_planes(image, planes, transform, bits, first, stop):
    height, width, channels = image.shape
    for y in range(first, stop):
        pixels = image[y]
        if transform != 0:
            red, green, blue = planes[0, y], planes[1, y], planes[2, y]
            for x in range(width):
                red[x], green[x], blue[x] = forward_colour(
                    transform, np.int64(pixels[x, 0]), np.int64(pixels[x, 1]), np.int64(pixels[x, 2]), bits)
            if channels == 4:
                alpha = planes[3, y]
                for x in range(width):
                    alpha[x] = pixels[x, 3]
        else:
            for c in range(channels):
                plane = planes[c, y]
                for x in range(width):
                    plane[x] = pixels[x, c]


def planes_to_image(planes, origin_y, origin_x, out, transform, bits):
    """CHW planes (covering the region from origin) -> HWC out, undoing the colour transform."""
    _in_parallel(_planes_to_image, out.shape[0], planes, origin_y, origin_x, out, transform, bits)


@_cached
def _planes_to_image(planes, origin_y, origin_x, out, transform, bits, first, stop):
    height, width, channels = out.shape
    for y in range(first, stop):
        pixels = out[y]
        row = planes[:, y + origin_y, origin_x:origin_x + width]
        if transform != 0:
            red, green, blue = row[0], row[1], row[2]
            if transform == fmt.TRANSFORM_SUBTRACT_GREEN:  # a loop per transform: no branch per pixel
                for x in range(width):
                    pixels[x, 0], pixels[x, 1], pixels[x, 2] = inverse_colour(
                        fmt.TRANSFORM_SUBTRACT_GREEN, np.int64(red[x]), np.int64(green[x]), np.int64(blue[x]), bits)
            else:
                for x in range(width):
                    pixels[x, 0], pixels[x, 1], pixels[x, 2] = inverse_colour(
                        fmt.TRANSFORM_RGB_MEAN, np.int64(red[x]), np.int64(green[x]), np.int64(blue[x]), bits)
            if channels == 4:
                alpha = row[3]
                for x in range(width):
                    pixels[x, 3] = alpha[x]
        else:
            for c in range(channels):
                plane = row[c]
                for x in range(width):
                    pixels[x, c] = plane[x]


# ---------------------------------------------------------------- streams, one driver per mode and verb


@numba.njit  # compiled into each driver: drivers of one verb and another never share a cache index
def _stream_tile(planes, stream, grid):
    """The view of planes that holds a stream's tile-channel. grid = (tiles across the image, tile
    width, tile height, origin y, origin x): planes' pixel (0, 0) is the image's pixel at the origin,
    and planes end where the image or the last tile they cover ends."""
    return _tile_pixels(planes, stream // planes.shape[0], grid)[stream % planes.shape[0]]


@numba.njit
def _tile_pixels(planes, tile, grid):
    """The view of planes that holds a tile's every channel (grid as for _stream_tile)."""
    tiles_x, tile_width, tile_height, origin_y, origin_x = grid
    channels, height, width = planes.shape
    y0 = (tile // tiles_x) * tile_height - origin_y
    x0 = (tile % tiles_x) * tile_width - origin_x
    return planes[:, y0:min(y0 + tile_height, height), x0:min(x0 + tile_width, width)]


# Each stream in its mode's coding, then as an LZ stream where that is smaller (docs/FORMAT.md §5.2).
@_cached
def _encode_compact_streams(planes, grid, bits, out, slot_bytes, sizes, coder, first, stop):
    raw, block, head, chain = lz_scratch(grid[1], grid[2], bits)
    rice_out = np.empty(slot_bytes if coder == _CODER_SMALLER else 0, np.uint8)
    for stream in range(first, stop):
        tile = _stream_tile(planes, stream, grid)
        start = stream * slot_bytes
        if coder == _CODER_RICE:
            size = encode_compact_stream(tile, bits, out, start)
        else:
            size = encode_ans_tile_stream(tile, bits, out, start, start + slot_bytes)
            if coder == _CODER_SMALLER and out[start] == fmt.KIND_CODED_ANS:
                rice_size = encode_compact_stream(tile, bits, rice_out, 0)
                if rice_size < size:
                    for i in range(rice_size):  # a loop: a slice assignment took a second to compile
                        out[start + i] = rice_out[i]
                    size = rice_size
        sizes[stream] = smaller_as_lz(tile, bits, out, start, size, raw, block, head, chain, planes.shape[0] == 1,
                                      0)


@_cached
def _encode_fast_streams(planes, grid, bits, out, slot_bytes, sizes, coder, first, stop):
    """(coder: compact's, unused here; the drivers of both modes take the same arguments)"""
    raw, block, head, chain = lz_scratch(grid[1], grid[2], bits)
    one_channel = planes.shape[0] == 1
    gain_percent = 0 if one_channel else lz.FAST_COLOUR_LZ_GAIN_PERCENT
    for stream in range(first, stop):
        tile = _stream_tile(planes, stream, grid)
        start = stream * slot_bytes
        sizes[stream] = smaller_as_lz(tile, bits, out, start, encode_fast_stream(tile, bits, out, start),
                                      raw, block, head, chain, one_channel, gain_percent)


# Palette tiles, in three passes over the tiles so that the index planes are coded by the very
# drivers above (one compilation serves both; a driver of its own coding both the plain and the
# palette form compiled 2.5x as long): _palette_index_tiles finds the tiles of few colours and
# writes their indices into an index image, the stream driver codes that image, and
# _keep_palettes replaces a tile's plain streams by its palette stream where that is smaller.


@numba.njit(inline="always")
def _plain_size(sizes, first_stream, channels):
    total = 0
    for channel in range(channels):
        total += sizes[first_stream + channel]
    return total


@_cached
def _palette_index_tiles(planes, grid, bits, sizes, counts, keys, indices, first, stop):
    """For each tile whose palette stream may be smaller than its plain streams (sizes): its colour
    count in counts, their keys in keys, its indices in the one-plane index image `indices`."""
    tiles_x, tile_width, tile_height = grid[0], grid[1], grid[2]
    channels, height, width = planes.shape
    table_keys = np.empty(_HASH_SLOTS, np.int64)
    table_used = np.empty(_HASH_SLOTS, np.bool_)
    table_index = np.empty(_HASH_SLOTS, np.int64)
    for tile in range(first, stop):
        y0 = (tile // tiles_x) * tile_height
        x0 = (tile % tiles_x) * tile_width
        y1, x1 = min(y0 + tile_height, height), min(x0 + tile_width, width)
        pixels = planes[:, y0:y1, x0:x1]
        tile_keys = keys[tile]
        count = tile_palette(pixels, tile_keys, table_keys, table_used)
        # at least the table, the index stream's kind byte and a byte per member
        if (palette_may_pay(tile_keys, count, channels) and palette_table_bytes(count, channels, bits) + channels
                < _plain_size(sizes, tile * channels, channels)):
            counts[tile] = count
            palette_indices(pixels, tile_keys, count, table_keys, table_used, table_index, indices[0, y0:y1, x0:x1])


@_cached
def _keep_palettes(out, slot_bytes, sizes, index_out, index_sizes, counts, keys, channels, bits):
    """Where a tile's palette stream (its table, then its index stream from index_out) and members are
    smaller than its plain streams, write them over those in out's slots."""
    for tile in range(counts.shape[0]):
        count = counts[tile]
        if count == 0:
            continue
        first_stream = tile * channels
        table_bytes = palette_table_bytes(count, channels, bits)
        size = table_bytes + index_sizes[tile]
        if size + channels - 1 >= _plain_size(sizes, first_stream, channels):
            continue
        start = first_stream * slot_bytes
        write_palette_table(keys[tile], count, channels, bits, out, start)
        for i in range(index_sizes[tile]):  # a loop: a slice assignment took a second to compile
            out[start + table_bytes + i] = index_out[tile * slot_bytes + i]
        sizes[first_stream] = size
        for channel in range(1, channels):
            sizes[first_stream + channel] = write_palette_member(out, (first_stream + channel) * slot_bytes)


@numba.njit(inline="always")
def _open_plane(buf, starts, ends, stream, planes, grid, bits):
    """A stream's plane up to its mode's own decoder: open_stream, then a constant or raw plane
    stream decoded into the tile: (status, plane stream start, colours, coded), where coded says
    the mode's decoder must take the plane stream at start."""
    channels = planes.shape[0]
    channel = stream % channels
    code, start, colours = open_stream(buf, starts[stream], ends[stream], channel, starts[stream - channel], channels,
                                       bits // 8)
    coded = False
    if code == fmt.STATUS_OK and colours == _PLANE_PIXELS:
        code = decode_pixel_lz(buf, start, ends[stream], _tile_pixels(planes, stream // channels, grid), bits)
    elif code == fmt.STATUS_OK and colours != _PLANE_MEMBER:
        code, coded = decode_uncoded(buf, start, ends[stream], _stream_tile(planes, stream, grid), bits)
    return code, start, colours, coded


@numba.njit
def _expand_palette(buf, start, colours, planes, stream, grid, bits):
    """Replace the index plane decoded into stream's tile-channel 0, in every channel's plane, by
    its colours."""
    channels = planes.shape[0]
    indices = _stream_tile(planes, stream, grid)
    table = np.empty(colours, planes.dtype)  # one channel of the colours: a gather per sample
    for channel in range(channels - 1, -1, -1):  # channel 0, which holds the indices, last
        for entry in range(colours):  # (`colour` is the module)
            table[entry] = palette_sample(buf, start, colours, entry, channel, channels, bits // 8)
        plane = _stream_tile(planes, stream + channel, grid)
        for row in range(plane.shape[0]):
            samples, row_indices = plane[row], indices[row]
            for col in range(plane.shape[1]):
                index = min(np.int64(row_indices[col]), colours - 1)  # streams.palette_sample's clamp
                samples[col] = table[index]


@_cached
def _decode_compact_streams(buf, starts, ends, stream_ids, planes, grid, bits, status, first, stop):
    # kind 10's tables, rebuilt for each of its streams
    bias = np.zeros(_ANS_SIGNED_BIAS_ENTRIES, np.int64)
    freq = np.zeros((_ANS_CONTEXTS, _ANS_MAX_TOKENS), np.int64)
    alphabets = np.zeros(_ANS_CONTEXTS, np.int64)
    slots = np.zeros((_ANS_CONTEXTS, _ANS_SLOTS), np.uint8)
    token_info = np.zeros((_ANS_CONTEXTS, _ANS_TOKEN_INFO), np.int32)
    for i in range(first, stop):
        stream = stream_ids[i]
        code, start, colours, coded = _open_plane(buf, starts, ends, stream, planes, grid, bits)
        if coded and buf[start] == fmt.KIND_CODED_ANS:
            code = decode_ans_stream(buf, start, ends[stream], _stream_tile(planes, stream, grid), bits, bias,
                                     freq, alphabets, slots, token_info)
        elif coded:
            code = decode_compact_stream(buf, start, ends[stream], _stream_tile(planes, stream, grid), bits)
        if code == fmt.STATUS_OK and colours > 0:
            _expand_palette(buf, starts[stream], colours, planes, stream, grid, bits)
        status[i] = code


@_cached
def _decode_fast_streams(buf, starts, ends, stream_ids, planes, grid, bits, status, first, stop):
    for i in range(first, stop):
        stream = stream_ids[i]
        code, start, colours, coded = _open_plane(buf, starts, ends, stream, planes, grid, bits)
        if coded and buf[start] == fmt.KIND_CODED_ANS:  # compact mode's only
            code = fmt.STATUS_BAD_KIND
        elif coded:
            code = decode_fast_stream(buf, start, ends[stream], _stream_tile(planes, stream, grid), bits)
        if code == fmt.STATUS_OK and colours > 0:
            _expand_palette(buf, starts[stream], colours, planes, stream, grid, bits)
        status[i] = code


@_cached
def _keep_pixel_lz(planes, grid, bits, out, slot_bytes, sizes, first, stop):
    """Where a tile's pixels as a pixel LZ stream, and members, are smaller than its streams so far
    (sizes), write them over those in out's slots (docs/FORMAT.md §5.3)."""
    channels = planes.shape[0]
    raw, block, head, chain = lz_scratch(grid[1], grid[2] * channels, bits)
    for tile in range(first, stop):
        first_stream = tile * channels
        limit = min(_plain_size(sizes, first_stream, channels) - (channels - 1), slot_bytes)
        size = pixel_lz_stream(_tile_pixels(planes, tile, grid), bits, out, first_stream * slot_bytes, limit,
                               raw, block, head, chain)
        if size == 0:
            continue
        sizes[first_stream] = size
        for channel in range(1, channels):
            sizes[first_stream + channel] = write_palette_member(out, (first_stream + channel) * slot_bytes)


class _StreamDrivers(typing.NamedTuple):
    encode: object
    decode: object


_STREAM_DRIVERS = {
    fmt.MODE_COMPACT: _StreamDrivers(_encode_compact_streams, _decode_compact_streams),
    fmt.MODE_FAST: _StreamDrivers(_encode_fast_streams, _decode_fast_streams),
}


def encode_streams(planes, mode, tile_width, tile_height, bits, out, slot_bytes, sizes, compact_coder="rice"):
    """Encode every tile-channel of CHW planes into out, stream i at i * slot_bytes; sizes[i] = its size.
    A tile of few colours becomes a palette tile where that is smaller (docs/FORMAT.md §5.1), a tile
    that repeats its pixels a pixel LZ stream (§5.3). compact_coder: a name in COMPACT_CODERS."""
    grid = ((planes.shape[2] + tile_width - 1) // tile_width, tile_width, tile_height, 0, 0)
    encode = _STREAM_DRIVERS[mode].encode
    coder = COMPACT_CODERS[compact_coder]
    _in_parallel(encode, sizes.shape[0], planes, grid, bits, out, slot_bytes, sizes, coder)
    channels = planes.shape[0]
    tiles = sizes.shape[0] // channels
    if palette.palette_allowed(channels, bits):
        _keep_palette_tiles(planes, grid, bits, encode, coder, out, slot_bytes, sizes)
    if channels > 1:
        _in_parallel(_keep_pixel_lz, tiles, planes, grid, bits, out, slot_bytes, sizes)


def _keep_palette_tiles(planes, grid, bits, encode, coder, out, slot_bytes, sizes):
    """Palette tiles where they are smaller (docs/FORMAT.md §5.1), the index planes coded by the mode's driver."""
    channels = planes.shape[0]
    tiles = sizes.shape[0] // channels
    counts = np.zeros(tiles, np.int64)
    keys = np.empty((tiles, fmt.PALETTE_MAX_COLOURS), np.int64)
    indices = np.zeros((1, planes.shape[1], planes.shape[2]), planes.dtype)
    _in_parallel(_palette_index_tiles, tiles, planes, grid, bits, sizes, counts, keys, indices)
    index_sizes = np.zeros(tiles if counts.any() else 0, np.int64)
    index_out = np.empty(index_sizes.shape[0] * slot_bytes, np.uint8)
    if index_sizes.shape[0]:  # the index image in the same array type as planes: the same compiled driver
        _in_parallel(encode, tiles, fmt.readonly(indices), grid, bits, index_out, slot_bytes, index_sizes, coder)
    _keep_palettes(out, slot_bytes, sizes, index_out, index_sizes, counts, keys, channels, bits)


def gather_streams(out, slot_bytes, sizes, payload):
    """Copy the encoded streams from their slots in out to consecutive bytes of payload."""
    pos = 0
    for stream, size in enumerate(sizes.tolist()):
        payload[pos:pos + size] = out[stream * slot_bytes:stream * slot_bytes + size]
        pos += size


def decode_streams(buf, parsed, stream_ids, planes, status, /, *, origin=(0, 0)):
    """Decode the listed streams of a parsed file (fmt.Parsed; its bytes in buf) into planes, whose
    pixel (0, 0) is image pixel origin (y, x) and which end where the image or the last listed
    tile ends; status[i] = stream_ids[i]'s status."""
    info = parsed.info
    grid = (info.tiles_x, info.tile_width, info.tile_height, origin[0], origin[1])
    _in_parallel(_STREAM_DRIVERS[fmt.MODES[info.mode]].decode, stream_ids.shape[0], buf, parsed.stream_starts,
                 parsed.stream_ends, stream_ids, planes, grid, info.bits, status)
