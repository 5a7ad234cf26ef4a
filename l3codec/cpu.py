"""Numba CPU drivers: colour transform, and each mode's streams encoded and decoded in parallel.

The per-stream, per-row and per-sample logic lives in the mode modules; here it is
compiled with ``numba.njit`` and driven over tiles with ``prange``. Each driver compiles on
first use for the dtypes it meets, one mode at a time, into Numba's on-disk cache, keyed on
every source it compiles (jit.cached_njit).
"""

from __future__ import annotations

import sys

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.cpython.unsafe.numbers import trailing_zeros as _count_trailing_zeros
from numba.extending import intrinsic

from . import bitio, colour, compact, fast, streams
from . import format as fmt
from .jit import cached_njit, compile_device_functions

FIRST_USE_NOTICE = "l3codec: compiling the CPU codec for this mode (first use, up to about 30 s; cached afterwards)"


@intrinsic
def _load_unaligned_int64(typingctx, buf, byte_pos):
    """Eight bytes of a contiguous uint8 array at byte_pos, in the machine's order, in one load."""

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.gep(array.data, [args[1]])
        return builder.load(builder.bitcast(pointer, ir.IntType(64).as_pointer()), align=1)

    return types.int64(buf, byte_pos), codegen


_load56_near_end = numba.njit(bitio.load56)


@numba.njit
def _load56(buf, byte_pos):
    """bitio.load56 in one unaligned load, away from the buffer's end (little-endian machines)."""
    if byte_pos + 8 <= buf.shape[0] and buf.strides[0] == 1:
        return _load_unaligned_int64(buf, byte_pos) & ((np.int64(1) << 56) - 1)
    return _load56_near_end(buf, byte_pos)


@numba.njit
def _trailing_zeros(value, limit):
    return np.int64(_count_trailing_zeros(value | (np.int64(1) << limit)))


# the CPU's own forms of two bit-level primitives; the plain Python ones are the reference
_REPLACEMENTS = {"trailing_zeros": _trailing_zeros}
if sys.byteorder == "little":
    _REPLACEMENTS["load56"] = _load56
# The decoders' per-sample functions are inlined where they are used (as calls, they cost the
# compact decoder 2.5x); everything else compiles once and is called (inlined everywhere, the
# first use would compile twice as long).
_INLINED = {
    "load56", "peek_bits", "read_bits", "trailing_zeros", "read_sample", "uncoded_sample", "subtract_green",
    "add_green", "med", "neighbours", "tile_neighbours", "activity_context", "unzigzag", "rice_parameter",
    "adapted", "initial_sum", "decode_code", "decode_run", "predict_odd", "predict", "width_field_bits",
    "groups_per_row", "zigzag", "adapt", "encode_mapped",
}


def _compile(func):
    return numba.njit(inline="always")(func) if func.__name__ in _INLINED else numba.njit(func)


_dev = compile_device_functions(
    [bitio, colour, streams, compact, fast], _compile,
    replacements=None if numba.config.DISABLE_JIT else _REPLACEMENTS,
)
subtract_green = _dev.subtract_green
add_green = _dev.add_green
decode_uncoded = _dev.decode_uncoded
encode_compact_stream = _dev.encode_compact_stream
decode_compact_stream = _dev.decode_compact_stream
encode_fast_stream = _dev.encode_fast_stream
decode_fast_stream = _dev.decode_fast_stream

MODE_COMPACT = fmt.MODE_COMPACT

_cached = cached_njit([sys.modules[__name__]], notice=FIRST_USE_NOTICE, nogil=True)
_cached_parallel = cached_njit([sys.modules[__name__]], notice=FIRST_USE_NOTICE, nogil=True, parallel=True)


def stream_slot_bytes(tile_width, tile_height, bits):
    """Scratch bytes one stream may use while encoding: the raw fallback plus the largest prefix."""
    return compact.MAX_PREFIX_BYTES + 1 + (bits // 8) * tile_width * tile_height + 8


# ---------------------------------------------------------------- colour and layout


@_cached_parallel
def image_to_planes(image, planes, transform, bits):
    """HWC image -> CHW planes, applying the forward colour transform."""
    height, width, channels = image.shape
    for y in numba.prange(height):
        for x in range(width):
            if transform == 1:
                r, g, b = subtract_green(np.int64(image[y, x, 0]), np.int64(image[y, x, 1]),
                                         np.int64(image[y, x, 2]), bits)
                planes[0, y, x] = r
                planes[1, y, x] = g
                planes[2, y, x] = b
                if channels == 4:
                    planes[3, y, x] = image[y, x, 3]
            else:
                for c in range(channels):
                    planes[c, y, x] = image[y, x, c]


@_cached_parallel
def planes_to_image(planes, origin_y, origin_x, out, transform, bits):
    """CHW planes (covering the region from origin) -> HWC out, undoing the colour transform."""
    height, width, channels = out.shape
    for y in numba.prange(height):
        for x in range(width):
            py = y + origin_y
            px = x + origin_x
            if transform == 1:
                r, g, b = add_green(np.int64(planes[0, py, px]), np.int64(planes[1, py, px]),
                                    np.int64(planes[2, py, px]), bits)
                out[y, x, 0] = r
                out[y, x, 1] = g
                out[y, x, 2] = b
                if channels == 4:
                    out[y, x, 3] = planes[3, py, px]
            else:
                for c in range(channels):
                    out[y, x, c] = planes[c, py, px]


# ---------------------------------------------------------------- streams, one driver per mode and verb


@_cached
def _stream_tile(planes, stream, grid):
    """The view of planes that holds a stream's tile-channel. grid = (tiles across the image, tile
    width, tile height, origin y, origin x): planes' pixel (0, 0) is the image's pixel at the origin,
    and planes end where the image or the last tile they cover ends."""
    tiles_x, tile_width, tile_height, origin_y, origin_x = grid
    channels, height, width = planes.shape
    tile = stream // channels
    y0 = (tile // tiles_x) * tile_height - origin_y
    x0 = (tile % tiles_x) * tile_width - origin_x
    return planes[stream % channels, y0:min(y0 + tile_height, height), x0:min(x0 + tile_width, width)]


@_cached_parallel
def _encode_compact_streams(planes, grid, bits, out, slot_bytes, sizes):
    for stream in numba.prange(sizes.shape[0]):
        tile = _stream_tile(planes, stream, grid)
        sizes[stream] = encode_compact_stream(tile, bits, out, stream * slot_bytes)


@_cached_parallel
def _encode_fast_streams(planes, grid, bits, out, slot_bytes, sizes):
    for stream in numba.prange(sizes.shape[0]):
        tile = _stream_tile(planes, stream, grid)
        sizes[stream] = encode_fast_stream(tile, bits, out, stream * slot_bytes)


@_cached_parallel
def _decode_compact_streams(buf, starts, ends, stream_ids, planes, grid, bits, status):
    for i in numba.prange(stream_ids.shape[0]):
        stream = stream_ids[i]
        tile = _stream_tile(planes, stream, grid)
        code, coded = decode_uncoded(buf, starts[stream], ends[stream], tile, bits)
        if coded:
            code = decode_compact_stream(buf, starts[stream], ends[stream], tile, bits)
        status[i] = code


@_cached_parallel
def _decode_fast_streams(buf, starts, ends, stream_ids, planes, grid, bits, status):
    for i in numba.prange(stream_ids.shape[0]):
        stream = stream_ids[i]
        tile = _stream_tile(planes, stream, grid)
        code, coded = decode_uncoded(buf, starts[stream], ends[stream], tile, bits)
        if coded:
            code = decode_fast_stream(buf, starts[stream], ends[stream], tile, bits)
        status[i] = code


def encode_streams(planes, mode, tile_width, tile_height, bits, out, slot_bytes, sizes):
    """Encode every tile-channel of CHW planes into out, stream i at i * slot_bytes; sizes[i] = its size."""
    grid = ((planes.shape[2] + tile_width - 1) // tile_width, tile_width, tile_height, 0, 0)
    driver = _encode_compact_streams if mode == MODE_COMPACT else _encode_fast_streams
    driver(planes, grid, bits, out, slot_bytes, sizes)


def gather_streams(out, slot_bytes, sizes, payload):
    """Copy the encoded streams from their slots in out to consecutive bytes of payload."""
    pos = 0
    for stream, size in enumerate(sizes.tolist()):
        payload[pos:pos + size] = out[stream * slot_bytes:stream * slot_bytes + size]
        pos += size


def decode_streams(buf, starts, ends, stream_ids, planes, origin_y, origin_x,
                   tiles_x, tile_width, tile_height, height, width, mode, bits, status):
    """Decode the listed streams into planes, whose pixel (0, 0) is image pixel (origin_y, origin_x)
    and which end where the image or the last listed tile ends; status[i] = stream i's status."""
    del height, width  # planes end where the image does
    grid = (tiles_x, tile_width, tile_height, origin_y, origin_x)
    driver = _decode_compact_streams if mode == MODE_COMPACT else _decode_fast_streams
    driver(buf, starts, ends, stream_ids, planes, grid, bits, status)
