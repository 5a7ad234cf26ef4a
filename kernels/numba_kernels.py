"""Numba CUDA decode kernels: the same Python pixel and row logic as the CPU decoder.

The device functions of l3codec's mode modules are compiled here with
``cuda.jit(device=True, inline="always")``. The kernels use shared memory and
``syncthreads`` only (no warp intrinsics), so they also run under
``NUMBA_ENABLE_CUDASIM=1``. Their launch tables come from ``l3codec.batch``:
one block per task (a tile of an item, in compact mode a band of 32 rows of a tile), items and
tasks as int64 matrices.

compact: block (32, channels). Lane r decodes row r of channel y as a wavefront:
pixel (r, c) at step r + c, after lane r - 1 wrote (r - 1, c) into shared memory
at the previous step. A kind-10 (compact v2, rANS) stream's lane carries its row's
rANS state and reads the slot tables and token info that the table stage (ans_table_blocks, a warp
per stream, before the decode) built in the stream's table block.

fast: FAST_THREADS threads, a column each (striding). Per row, thread 0
reads the headers into shared group tables; then every column's mapped residual is read in
parallel (a Rice quotient by popcounts over its group's unary part) and the row is predicted
in fast.PHASES passes, a barrier after each.

Both stage decoded samples in rings, as the CUDA C kernels do, so that shared memory
stays within the 48 KiB a block gets without opting in, whatever the tile width:
compact a ring of COMPACT_RING columns written out in strips, fast a ring of rows
written out in bands.

The kernels are cached on disk (numba-cuda's cache=True, one entry per compute
capability), keyed on the content of every file of the package rather than on this
file's time stamp alone, so editing the shared pixel logic recompiles them.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from pathlib import Path

import numpy as np
from numba import config, cuda

import l3codec
from l3codec import (
    ans,
    ans_stage,
    ans_stream,
    batch,
    bitio,
    colour,
    compact,
    fast,
    huffman,
    lz,
    lz4block,
    lz_stage,
    streams,
)
from l3codec import format as fmt
from l3codec.ans_stage import (  # a kind-10 stream's table block (the table stage's output)
    BLOCK_ALPHABETS,
    BLOCK_BIAS,
    BLOCK_END,
    BLOCK_END_STATUS,
    BLOCK_LENGTHS,
    BLOCK_ROWS,
    BLOCK_SLOTS,
    BLOCK_STATUS,
    BLOCK_TOKEN_INFO,
)
from l3codec.jit import compile_device_functions

from . import cuda_c

_dev = compile_device_functions([bitio, colour, lz4block, huffman, lz, streams, compact, fast],
                                cuda.jit(device=True, inline="always"))
# compact v2's stream and row functions on their own: ans.read_tables is not huffman's
_ans = compile_device_functions([bitio, compact, ans, ans_stream], cuda.jit(device=True, inline="always"))
expand_lz_stream = _dev.expand_lz_stream
LZ_TABLES, LZ_TABLE_SIZE = huffman.TABLES, huffman.TABLE_SIZE
pixel_offset = _dev.pixel_offset
read_bits = _dev.read_bits
inverse_colour = _dev.inverse_colour
neighbours = _dev.neighbours
row_state_init = _dev.row_state_init
decode_sample = _dev.decode_sample
uncoded_sample = _dev.uncoded_sample
plane_stream_status = _dev.plane_stream_status
open_stream = _dev.open_stream
uncoded_stream_status = _dev.uncoded_stream_status
palette_sample = _dev.palette_sample
compact_stream_layout = _dev.compact_stream_layout
compact_row_length = _dev.compact_row_length
code_bits = _dev.code_bits
header_bits = _dev.header_bits
group_form = _dev.group_form
group_data_bits = _dev.group_data_bits
group_header_sound = _dev.group_header_sound
sparse_entry = _dev.sparse_entry
is_coded = _dev.is_coded
groups_per_row = _dev.groups_per_row
predict_between = _dev.predict_between
unzigzag = _dev.unzigzag
read_ans_tables = _ans.read_tables
ans_stream_header = _ans.ans_stream_header
read_bias_table = _ans.read_bias_table
ans_rows_start = _ans.ans_rows_start
ans_row_length = _ans.ans_row_length
open_row_stream = _ans.open_row_stream
slot_step = _ans.slot_step
refill = _ans.refill
raw_step = _ans.raw_step
token_raw_bits = _ans.token_raw_bits
hybrid_value = _ans.hybrid_value
sample_of = _ans.sample_of
predicted = _ans.predicted
activity = _ans.activity
bias_context = _ans.bias_context
row_stream_end = _ans.row_stream_end

WARP = 32
COMPACT_BAND_ROWS = fmt.COMPACT_BAND_ROWS  # a band a block, its rows a warp's lanes
assert COMPACT_BAND_ROWS == WARP
# Threads of a fast block (one per column pair of a 256-wide tile, as in fast.cu). The
# simulator runs every thread as a Python thread: one warp keeps its runs short.
FAST_THREADS = 32 if config.ENABLE_CUDASIM else cuda_c.FAST_THREADS
TILE_SAMPLE = np.dtype(np.uint16)  # shared staging holds 8- and 16-bit samples alike
MAX_CHANNELS = 4
MAX_GROUPS = fmt.MAX_TILE_WIDTH // fast.GROUP_SIZE  # shared array sizes must be plain constants
MAX_TILE_WIDTH = fmt.MAX_TILE_WIDTH
# compact stages a ring of columns per row, like compact.cu: a tile up to RING wide at once,
# a wider one in strips of RING - WARP steps, each written out before the ring wraps
COMPACT_RING = cuda_c.COMPACT_RING_MAX
COMPACT_STAGE = MAX_CHANNELS * WARP * COMPACT_RING
# fast stages a ring of rows per channel, cuda_c.FAST_STAGE_BUDGET bytes (at least 2 rows), like fast.cu;
# a block may use cuda_c.DEFAULT_SHARED_LIMIT without opting in to more, which numba-cuda cannot do
SHARED_LIMIT = cuda_c.DEFAULT_SHARED_LIMIT
# a bound on decode_fast's static shared arrays (group tables, scan scratch); the tests check
# it against ptxas's report
FAST_STATIC_SHARED = 16 * 1024

# Column indices of the int64 views of batch.ITEM_DTYPE and batch.TASK_DTYPE records.
_ITEM = {name: i for i, name in enumerate(batch.ITEM_DTYPE.names)}
I_WIDTH, I_HEIGHT, I_CHANNELS, I_BITS = _ITEM["width"], _ITEM["height"], _ITEM["channels"], _ITEM["bits"]
I_TRANSFORM, I_TILE_WIDTH, I_TILE_HEIGHT = _ITEM["transform"], _ITEM["tile_width"], _ITEM["tile_height"]
I_TILES_X, I_STREAM_BASE = _ITEM["tiles_x"], _ITEM["stream_base"]
I_REGION_Y, I_REGION_X, I_REGION_H, I_REGION_W = (
    _ITEM["region_y"], _ITEM["region_x"], _ITEM["region_h"], _ITEM["region_w"]
)
I_OUT_OFFSET, I_OUT_PITCH, I_DATA_END = _ITEM["out_offset"], _ITEM["out_row_pitch"], _ITEM["data_end"]
T_ITEM, T_TILE_Y, T_TILE_X, T_BAND_Y = 0, 1, 2, 3
_EXPANSION = {name: i for i, name in enumerate(lz_stage.EXPANSION_DTYPE.names)}
X_SOURCE, X_SOURCE_END, X_PREFIX_START = _EXPANSION["source"], _EXPANSION["source_end"], _EXPANSION["prefix_start"]
X_PREFIX_BYTES, X_TARGET, X_PLANE_BYTES, X_STATUS_INDEX = (
    _EXPANSION["prefix_bytes"], _EXPANSION["target"], _EXPANSION["plane_bytes"], _EXPANSION["status_index"]
)
X_CHANNELS, X_SAMPLE_BYTES, X_MEMBER_STATUS, X_STATUS_RANK = (
    _EXPANSION["channels"], _EXPANSION["sample_bytes"], _EXPANSION["member_status"], _EXPANSION["status_rank"]
)
STATUS_BAND_BITS = batch.STATUS_BAND_BITS
status_key = cuda.jit(device=True, inline="always")(batch.status_key)
KIND_RAW = fmt.KIND_RAW

KIND_CODED = fmt.KIND_CODED
KIND_CODED_EXTENDED = fmt.KIND_CODED_EXTENDED
PLANE_MEMBER = streams.PLANE_MEMBER
STATUS_OK = fmt.STATUS_OK
STATUS_BAD_SIZE = fmt.STATUS_BAD_SIZE
STATUS_BAD_HEADER = fmt.STATUS_BAD_HEADER
STATUS_BAD_KIND = fmt.STATUS_BAD_KIND
STATUS_CORRUPT = fmt.STATUS_CORRUPT
TRANSFORM_NONE = fmt.TRANSFORM_NONE
STATE_SIZE = compact.STATE_SIZE
S_POS = compact.S_POS
S_MAPPED = compact.S_MAPPED
S_ERROR = compact.S_ERROR
GROUP_SIZE = fast.GROUP_SIZE
FORM_SPARSE = fast.FORM_SPARSE
FORM_PACKED = fast.FORM_PACKED
FORM_RICE = fast.FORM_RICE
PHASES = fast.PHASES
PERIOD = fast.PERIOD

# compact v2 (format 10, issue #39): stream kind 10, a static-table rANS row stream per row. The table stage
# (build_ans_tables, after the LZ expansion) turns each kind-10 stream into a table block in the scratch area
# (l3codec/ans_stage.py: the checks before the rows, the row and length positions, the bias values, token
# info and slot tables), where the stage's stream tables point decode_compact's lanes.
KIND_CODED_ANS = fmt.KIND_CODED_ANS
ANS_HEADER_BYTES = ans_stream.ANS_HEADER_BYTES
ANS_CONTEXTS = ans.ANS_CONTEXTS
ANS_TOKEN_COLUMNS = ans_stage.ANS_TOKEN_COLUMNS
ANS_MAX_TOKENS = ans_stream.ANS_MAX_TOKENS
ANS_CONTEXT_OF_ACTIVITY = ans.ANS_CONTEXT_OF_ACTIVITY
GRADIENT_CONTEXTS = ans.GRADIENT_CONTEXTS
NO_TOKEN = ans.NO_TOKEN
ANS_OK = ans.ANS_OK
ANS_TABLE_FAULT_STATUS = fmt.ANS_TABLE_FAULT_STATUS  # a bias table or table set refused or cut short
ANS_ROW_FAULT_STATUS = fmt.ANS_ROW_FAULT_STATUS  # a row not decoding to exactly its bytes
# columns of the int64 view of the stage's records (ans_stage.TABLE_STAGE_DTYPE)
_RECORD = {name: i for i, name in enumerate(ans_stage.TABLE_STAGE_DTYPE.names)}
R_SOURCE, R_SOURCE_END, R_PREFIX_START = _RECORD["source"], _RECORD["source_end"], _RECORD["prefix_start"]
R_PREFIX_BYTES, R_TARGET, R_SLOT_BYTES = _RECORD["prefix_bytes"], _RECORD["target"], _RECORD["slot_bytes"]
R_BITS, R_ROWS = _RECORD["bits"], _RECORD["rows"]

@cuda.jit(device=True, inline="always")
def report(status, item, code, rank):
    """Report a failing stream of rank `rank`: the item's entry keeps the first failing stream's
    batch.status_key (the largest)."""
    if code != STATUS_OK:
        cuda.atomic.max(status, item, np.int32(status_key(code, rank)))


@cuda.jit(device=True, inline="always")
def item_stream(items, tasks, task, item, channel):
    """Index of the task's tile-channel among its item's streams (in the file's stream order)."""
    tile = tasks[task, T_TILE_Y] * items[item, I_TILES_X] + tasks[task, T_TILE_X]
    return tile * items[item, I_CHANNELS] + channel


@cuda.jit(device=True, inline="always")
def stream_id(items, tasks, task, item, channel):
    """Index of the task's tile-channel in the batch's stream arrays."""
    return items[item, I_STREAM_BASE] + item_stream(items, tasks, task, item, channel)


@cuda.jit(device=True, inline="always")
def stream_rank(items, tasks, task, item, channel):
    """The status rank of the task's tile-channel stream (batch.status_key; a compact band adds its index)."""
    return item_stream(items, tasks, task, item, channel) << STATUS_BAND_BITS


@cuda.jit(device=True, inline="always")
def task_tile(items, tasks, task):
    """(item, channels, bits, tile y0, tile x0, tile rows, tile columns) of block `task`."""
    item = tasks[task, T_ITEM]
    y0 = tasks[task, T_TILE_Y] * items[item, I_TILE_HEIGHT]
    x0 = tasks[task, T_TILE_X] * items[item, I_TILE_WIDTH]
    h = min(items[item, I_TILE_HEIGHT], items[item, I_HEIGHT] - y0)
    w = min(items[item, I_TILE_WIDTH], items[item, I_WIDTH] - x0)
    return item, items[item, I_CHANNELS], items[item, I_BITS], y0, x0, h, w


@cuda.jit(device=True, inline="always")
def staged(channel, row, col, ring):
    """Index of a tile sample in a ring-staged 1-D shared array: [channel][row][column];
    ring = (rows, columns) it holds of each channel."""
    ring_rows, ring_columns = ring
    return (channel * ring_rows + row % ring_rows) * ring_columns + col % ring_columns


@cuda.jit(device=True, inline="always")
def tile_sample(stage, ring, channel, row, col, palette, channels, sample_bytes):
    """A staged plane sample, or for a palette tile (palette = (data, palette stream start, colours),
    colours > 0) channel `channel` of the colour whose index channel 0 staged."""
    data, palette_start, colours = palette
    if colours > 0:
        index = np.int64(stage[staged(0, row, col, ring)])
        return palette_sample(data, palette_start, colours, index, channel, channels, sample_bytes)
    return np.int64(stage[staged(channel, row, col, ring)])


@cuda.jit(device=True, inline="always")
def write_tile(stage, ring, items, item, origin, rows, columns, out, lanes, palette):
    """Write tile-local rows [rows[0], rows[1]) x columns [columns[0], columns[1]) of the tile at
    image pixel origin (y0, x0), clipped to the item's region, from the ring to out (HWC), undoing
    the colour transform (and a palette: tile_sample). lanes = (this thread's index, threads):
    consecutive threads write consecutive pixels."""
    y0, x0 = origin
    thread, threads = lanes
    channels = items[item, I_CHANNELS]
    bits = items[item, I_BITS]
    sample_bytes = bits // 8
    ry = items[item, I_REGION_Y]
    rx = items[item, I_REGION_X]
    top = max(y0 + rows[0], ry)
    bottom = min(y0 + rows[1], ry + items[item, I_REGION_H])
    left = max(x0 + columns[0], rx)
    right = min(x0 + columns[1], rx + items[item, I_REGION_W])
    if top >= bottom or left >= right:
        return
    width = right - left
    for index in range(thread, (bottom - top) * width, threads):
        y = top + index // width
        x = left + index % width
        c0 = tile_sample(stage, ring, 0, y - y0, x - x0, palette, channels, sample_bytes)
        c1 = c0
        c2 = c0
        if channels >= 3:
            c1 = tile_sample(stage, ring, 1, y - y0, x - x0, palette, channels, sample_bytes)
            c2 = tile_sample(stage, ring, 2, y - y0, x - x0, palette, channels, sample_bytes)
            transform = items[item, I_TRANSFORM]
            if transform != TRANSFORM_NONE:
                c0, c1, c2 = inverse_colour(transform, c0, c1, c2, bits)
        pos = items[item, I_OUT_OFFSET] + (y - ry) * items[item, I_OUT_PITCH] + (x - rx) * channels * sample_bytes
        for channel in range(channels):
            if channel == 0:
                value = c0
            elif channel == 1 and channels >= 3:
                value = c1
            elif channel == 2:
                value = c2
            else:
                value = tile_sample(stage, ring, channel, y - y0, x - x0, palette, channels, sample_bytes)
            out[pos] = value & 255
            if sample_bytes == 2:
                out[pos + 1] = (value >> 8) & 255
            pos += sample_bytes


def source_digest(directories=None) -> str:
    """SHA-256 of the names and contents of the Python and CUDA sources in `directories` (default:
    the l3codec package and this kernels package): everything the kernels compile or take constants from."""
    if directories is None:
        directories = (Path(l3codec.__file__).parent, Path(__file__).parent)
    digest = hashlib.sha256()
    for directory in directories:
        for path in sorted(Path(directory).glob("*")):
            if path.suffix in (".py", ".cu", ".cuh"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _content_keyed_cache_class():
    """numba-cuda's CUDACache with every locator's source stamp (checked before any cached kernel
    is used) replaced by source_digest(), instead of the kernel file's mtime and size."""
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl

    def get_source_stamp(self):
        return source_digest()

    locators = [type(cls.__name__, (cls,), {"get_source_stamp": get_source_stamp})
                for cls in CUDACacheImpl._locator_classes]
    impl = type("ContentKeyedCacheImpl", (CUDACacheImpl,), {"_locator_classes": locators})
    return type("ContentKeyedCache", (CUDACache,), {"_impl_class": impl})


def cached_on_content(kernel):
    """Turn on kernel's on-disk cache keyed on source_digest() (a no-op in the simulator).

    This leans on numba-cuda internals: should they change, the kernel is left uncached (compiled
    in every process) with a warning, rather than cached on its file's mtime, which can go stale."""
    if config.ENABLE_CUDASIM:
        return kernel
    try:
        kernel._cache = _content_keyed_cache_class()(kernel.py_func)  # what enable_caching() does
    except (ImportError, AttributeError, TypeError) as error:
        warnings.warn(
            f"l3codec: numba-cuda's cache internals have changed ({type(error).__name__}: {error}); "
            f"the Numba CUDA kernel {kernel.__name__} is compiled in every process, not cached on disk",
            RuntimeWarning, stacklevel=2,
        )
    return kernel


# ---------------------------------------------------------------- compact v2 (stream kind 10)


@cuda.jit(device=True, inline="always")
def read_le(data, pos, count):
    """An unsigned little-endian value of count (1..8) bytes at byte pos."""
    value = np.int64(0)
    for i in range(count):
        value |= np.int64(data[pos + i]) << (8 * i)
    return value


@cuda.jit(device=True, inline="always")
def write_le(data, pos, value, count):
    for i in range(count):
        data[pos + i] = (value >> (8 * i)) & 255


@cuda.jit(device=True, inline="always")
def read_signed(data, pos, count):
    """A little-endian two's complement value of count (1, 2 or 4) bytes (a bias value)."""
    sign_bit = np.int64(1) << (8 * count - 1)
    return (read_le(data, pos, count) ^ sign_bit) - sign_bit


@cuda.jit(device=True, inline="always")
def stream_table_checks(data, record, bias, freq, alphabets):
    """One thread's pass over a kind-10 stream before its rows, in the CPU decoder's order
    (ans_stream.decode_ans_stream: header, bias table and table set, the row-length table's fit; and for
    after the rows, whether the row lengths add up to the stream): writes the block's header copy,
    statuses, positions, bias values and alphabets, and bias/freq/alphabets. Returns (status, precision)."""
    source, end, target = record[R_SOURCE], record[R_SOURCE_END], record[R_TARGET]
    bits, rows = record[R_BITS], record[R_ROWS]
    for i in range(ANS_HEADER_BYTES):
        data[target + i] = data[source + i] if source + i < end else 0
    for i in range(GRADIENT_CONTEXTS):
        bias[i] = 0
    for ctx in range(ANS_CONTEXTS):
        alphabets[ctx] = 0
    code, biased, precision, length_bits = ans_stream_header(data, source, end)
    if code == STATUS_OK and (ANS_CONTEXTS << precision) != record[R_SLOT_BYTES]:
        code = STATUS_BAD_HEADER  # the host sized the block from this byte: never so unless it changed since
    lengths_pos = rows_pos = np.int64(0)
    if code == STATUS_OK:
        pos = source + ANS_HEADER_BYTES
        if biased:
            pos = read_bias_table(data, pos, end, bits, bias)
        if pos < 0:
            code = ANS_TABLE_FAULT_STATUS
        else:
            ans_status, table_end = read_ans_tables(data, pos * 8, end * 8, bits, precision, freq, alphabets)
            code = STATUS_OK if ans_status == ANS_OK else ANS_TABLE_FAULT_STATUS
            lengths_pos = (table_end + 7) >> 3
    if code == STATUS_OK:
        rows_pos = ans_rows_start(lengths_pos, end, rows, length_bits)
        if rows_pos < 0:
            code = STATUS_BAD_SIZE  # the row-length table passes the stream's end
    end_status = STATUS_OK
    if code == STATUS_OK:
        total = rows_pos
        for row in range(rows):
            total += ans_row_length(data, lengths_pos, length_bits, row)
        end_status = STATUS_OK if total == end else STATUS_BAD_SIZE
    write_le(data, target + BLOCK_STATUS, code, 4)
    write_le(data, target + BLOCK_ROWS, rows_pos, 8)
    write_le(data, target + BLOCK_LENGTHS, lengths_pos, 8)
    write_le(data, target + BLOCK_END, end, 8)
    write_le(data, target + BLOCK_END_STATUS, end_status, 4)
    for index in range(GRADIENT_CONTEXTS):
        write_le(data, target + BLOCK_BIAS + 4 * index, bias[index], 4)
    for ctx in range(ANS_CONTEXTS):
        data[target + BLOCK_ALPHABETS + ctx] = alphabets[ctx]
    return code, precision


@cached_on_content
@cuda.jit
def ans_table_blocks(data, records):
    """A warp per kind-10 stream (records: the stage's, ans_stage.TABLE_STAGE_DTYPE): its palette prefix
    copied before its block, then lane 0's stream_table_checks, then the token info and slot tables
    (ans.build_slot_table's, laid out as the block's) by all lanes, a token per lane at a time. (The
    checks leave nothing for build_slot_table to refuse: read_tables caps alphabets and sums.)"""
    bias = cuda.shared.array(GRADIENT_CONTEXTS, dtype=np.int64)
    freq = cuda.shared.array((ANS_CONTEXTS, ANS_MAX_TOKENS), dtype=np.int64)
    alphabets = cuda.shared.array(ANS_CONTEXTS, dtype=np.int64)
    outcome = cuda.shared.array(2, dtype=np.int64)  # lane 0's status and precision
    lane = cuda.threadIdx.x
    record = records[cuda.blockIdx.x]
    target = record[R_TARGET]
    prefix = record[R_PREFIX_BYTES]
    for i in range(lane, prefix, WARP):
        data[target - prefix + i] = data[record[R_PREFIX_START] + i]
    if lane == 0:
        outcome[0], outcome[1] = stream_table_checks(data, record, bias, freq, alphabets)
    cuda.syncthreads()
    if outcome[0] != STATUS_OK:
        return  # the band kernel reads no tables of a failed stream
    precision = outcome[1]
    for ctx in range(ANS_CONTEXTS):
        slots = target + BLOCK_SLOTS + (ctx << precision)
        alphabet = alphabets[ctx]
        if alphabet == 0:
            for s in range(lane, np.int64(1) << precision, WARP):
                data[slots + s] = NO_TOKEN
        for t in range(lane, ANS_TOKEN_COLUMNS, WARP):
            start = np.int64(0)
            for before in range(min(t, alphabet)):
                start += freq[ctx, before]
            f = freq[ctx, t] if t < alphabet else 0
            info = target + BLOCK_TOKEN_INFO + 4 * (ctx * ANS_TOKEN_COLUMNS + t)
            write_le(data, info, f | (start << 16), 4)
            for j in range(f):
                data[slots + start + j] = t


ANS_TABLE_THREADS = WARP


def build_ans_tables(data, records, stream=0) -> None:
    """Launch ans_table_blocks on a packed batch's device buffer (batch.packed_views' data,
    batch.packed_ans_records), after the LZ expansion and before the decode launches, on the same stream."""
    count = int(records.shape[0])
    if count:
        ans_table_blocks[count, ANS_TABLE_THREADS, stream](data, records)


@cuda.jit(device=True, inline="always")
def ans_sample(data, end, x, pos, neighbourhood, bits, block, bias, biased):
    """One sample of a kind-10 row stream (ans.decode_step, with W, N, NW = neighbourhood from the lane's
    ring rather than a plane, and the slot tables and token info read from the stream's table block
    (block = (its position, precision)): (ans status, state, position, sample). bias: the stream's bias
    values (read when biased)."""
    w, n, nw = neighbourhood
    target, precision = block
    ctx = ANS_CONTEXT_OF_ACTIVITY[activity(w, n, nw, bits)]
    token = np.int64(data[target + BLOCK_SLOTS + (ctx << precision) + (x & ((np.int64(1) << precision) - 1))])
    info = read_le(data, target + BLOCK_TOKEN_INFO + 4 * (ctx * ANS_TOKEN_COLUMNS + token), 4)
    x = slot_step(token, info, x, precision)
    if token == NO_TOKEN:
        return ans.ANS_BAD_TOKEN, x, pos, np.int64(1) << (bits - 1)
    x, pos = refill(data, x, pos, end)
    raw = np.int64(0)
    count = token_raw_bits(token)
    if count > 0:
        raw, x = raw_step(x, count)
        x, pos = refill(data, x, pos, end)
    bias_value, sign = np.int64(0), np.int64(1)
    if biased:
        index, sign = bias_context(w, n, nw, bits)
        bias_value = np.int64(bias[index])
    return ANS_OK, x, pos, sample_of(hybrid_value(token, raw), predicted(w, n, nw, bias_value, sign), bits)


@cuda.jit(device=True, inline="always")
def ring_neighbours(stage, ring, channel, row, col, half):
    """(W, N, NW) of band row `row` (a lane) at column col, from the staged ring (compact.neighbours)."""
    left = np.int64(stage[staged(channel, row, col - 1, ring)]) if col > 0 else half
    left2 = np.int64(stage[staged(channel, row, col - 2, ring)]) if col > 1 else half
    up = np.int64(stage[staged(channel, row - 1, col, ring)]) if row > 0 else half
    upleft = np.int64(stage[staged(channel, row - 1, col - 1, ring)]) if row > 0 and col > 0 else half
    return neighbours(row, col, left, left2, up, upleft, half)


@cached_on_content
@cuda.jit
def decode_compact(data, stream_starts, stream_ends, items, tasks, out, status):
    stage = cuda.shared.array(COMPACT_STAGE, dtype=TILE_SAMPLE)
    bias_tables = cuda.shared.array((MAX_CHANNELS, GRADIENT_CONTEXTS), dtype=np.int32)  # kind 10's
    mapped_slots = cuda.shared.array((2, MAX_CHANNELS, WARP), dtype=np.int64)
    state = cuda.local.array(STATE_SIZE, dtype=np.int64)
    # per row, its status; per channel, the end-of-stream check: lane 0 reports the first failure
    row_codes = cuda.shared.array((MAX_CHANNELS, WARP), dtype=np.int32)
    end_codes = cuda.shared.array(MAX_CHANNELS, dtype=np.int32)
    palette_info = cuda.shared.array(2, dtype=np.int64)  # channel 0's palette: stream start, colours (0: none)
    lane = cuda.threadIdx.x
    channel = cuda.threadIdx.y
    task = cuda.blockIdx.x
    item, channels, bits, y0, x0, tile_h, w = task_tile(items, tasks, task)
    band_y = tasks[task, T_BAND_Y]  # the task's band: tile rows [band_y, band_y + h), its first without a row above
    h = min(WARP, tile_h - band_y)
    tile_width = items[item, I_TILE_WIDTH]
    half = np.int64(1) << (bits - 1)
    ring = (WARP, COMPACT_RING)  # a row per lane

    active = channel < channels and lane < h
    code = STATUS_OK
    coded = False
    copy_row = False
    raw_start = np.int64(-1)  # a raw or constant stream's start: its samples are read as the wavefront passes
    raw_kind = 0
    row_start = np.int64(0)
    row_end = np.int64(0)
    # kind 10: the row's rANS state, word position and status (OK while it decodes), its stream's tables
    ans_coded = False
    block = np.int64(0)  # the table block's position
    ans_state = np.int64(0)
    ans_pos = np.int64(0)
    ans_status = ANS_OK
    biased = np.int64(0)
    precision = np.int64(ans.ANS_MIN_PRECISION)
    end_code = STATUS_OK  # checked once every row has passed
    if channel == 0 and lane == 0:
        palette_info[1] = 0
    cuda.syncthreads()
    if active:
        stream = stream_id(items, tasks, task, item, channel)
        end = stream_ends[stream]
        code, start, colours = open_stream(data, stream_starts[stream], end, channel,
                                           stream_starts[stream - channel], channels, bits // 8)
        if code == STATUS_OK and colours != PLANE_MEMBER and data[start] != KIND_CODED_ANS:
            # plane_stream_status's check; a kind-10 stream's are the table stage's
            code = uncoded_stream_status(data[start], end - start, bits // 8, tile_h * w)
        if code == STATUS_OK and colours > 0 and lane == 0:
            palette_info[0] = stream_starts[stream]
            palette_info[1] = colours
        kind = data[start]
        if code != STATUS_OK or colours == PLANE_MEMBER:
            pass  # a failed stream, or a palette member: nothing of its own to stage
        elif kind == KIND_CODED_EXTENDED:
            code = STATUS_BAD_KIND  # fast mode's
        elif kind == KIND_CODED_ANS:  # start: its table block (ans_stage.py)
            if start < 0 or end - start < BLOCK_SLOTS or end > data.size:
                code = STATUS_BAD_SIZE  # the host's stage tables never give such a block (as compact.cu)
            else:
                code = read_signed(data, start + BLOCK_STATUS, 4)
            if code == STATUS_OK and end - start != BLOCK_SLOTS + (ANS_CONTEXTS << np.int64(data[start + 2])):
                code = STATUS_BAD_SIZE
            if code == STATUS_OK:
                block = start
                precision, biased = np.int64(data[start + 2]), np.int64(data[start + 1]) & 1
                length_bits = np.int64(data[start + 3])
                lengths_pos = read_le(data, start + BLOCK_LENGTHS, 8) * 8
                stream_end = read_le(data, start + BLOCK_END, 8)
                row_start = read_le(data, start + BLOCK_ROWS, 8)
                for row in range(band_y + lane + 1):
                    row_end = row_start + read_bits(data, lengths_pos + row * length_bits, length_bits)
                    if row < band_y + lane:
                        row_start = row_end
                if band_y + lane == tile_h - 1:
                    end_code = read_signed(data, start + BLOCK_END_STATUS, 4)
                for index in range(lane, GRADIENT_CONTEXTS, h):  # the band's h lanes
                    bias_tables[channel, index] = read_signed(data, start + BLOCK_BIAS + 4 * index, 4)
                if row_end > stream_end:
                    code = STATUS_BAD_SIZE  # a row past the stream's end, in row order as the CPU's
                else:
                    ans_status, ans_state, ans_pos = open_row_stream(data, row_start, row_end)
                    ans_coded = True
        elif kind != KIND_CODED:
            raw_start = start
            raw_kind = kind
        else:
            code, run_index, k_nibbles, length_bits, table_pos, row_start = compact_stream_layout(
                data, start, end, tile_h
            )
            if code == STATUS_OK:
                for row in range(band_y + lane):
                    row_start += compact_row_length(data, table_pos, length_bits, row)
                row_end = row_start + compact_row_length(data, table_pos, length_bits, band_y + lane)
                copy_row = row_end == row_start
                if band_y + lane == tile_h - 1 and (row_end + 7) // 8 != end:
                    end_code = STATUS_BAD_SIZE  # the stream ends in the byte holding its last bit
                if row_end > end * 8:
                    code = STATUS_BAD_SIZE
                elif copy_row and lane == 0:
                    code = STATUS_CORRUPT
                else:
                    coded = True
                    row_state_init(state, row_start, k_nibbles, run_index)

    cuda.syncthreads()  # the bias tables are in
    # the wavefront: lane r decodes column step - r; a tile wider than the ring goes in strips of
    # ring - WARP steps, after each of which the columns every row has finished are written out
    steps = h + w - 1
    strip = steps if tile_width <= COMPACT_RING else COMPACT_RING - WARP
    written = 0
    for s0 in range(0, steps, strip):
        s1 = min(s0 + strip, steps)
        for step in range(s0, s1):
            col = step - lane
            if active and 0 <= col < w:
                value = np.int64(0)
                if raw_start >= 0:
                    value = uncoded_sample(data, raw_start, raw_kind, (band_y + lane) * w + col, bits // 8)
                elif ans_coded:
                    value = half
                    if ans_status == ANS_OK:
                        neighbourhood = ring_neighbours(stage, ring, channel, lane, col, half)
                        ans_status, ans_state, ans_pos, value = ans_sample(
                            data, row_end, ans_state, ans_pos, neighbourhood, bits, (block, precision),
                            bias_tables[channel], biased,
                        )
                elif coded and copy_row:
                    value = np.int64(stage[staged(channel, lane - 1, col, ring)])
                    state[S_MAPPED] = 0
                elif coded:
                    mapped_n = mapped_slots[(step + 1) % 2, channel, lane - 1] if lane > 0 else 0
                    wv, nv, nwv = ring_neighbours(stage, ring, channel, lane, col, half)
                    value = decode_sample(data, state, wv, nv, nwv, mapped_n, w - col, bits)
                stage[staged(channel, lane, col, ring)] = value
                mapped_slots[step % 2, channel, lane] = state[S_MAPPED] if coded else 0
            cuda.syncthreads()
        # after steps [0, s1) row r has columns [0, s1 - r): all h rows have [0, s1 - h + 1)
        done = w if s1 == steps else max(written, s1 - h + 1)
        write_tile(stage, ring, items, item, (y0 + band_y, x0), (0, h), (written, done), out,
                   (channel * WARP + lane, cuda.blockDim.y * WARP), (data, palette_info[0], palette_info[1]))
        written = done
        cuda.syncthreads()

    if coded and not copy_row and (state[S_POS] != row_end or state[S_ERROR] != 0):
        code = STATUS_CORRUPT
    if ans_coded:
        if ans_status == ANS_OK:
            ans_status = row_stream_end(ans_state, ans_pos, row_end)
        if ans_status != ANS_OK:
            code = ANS_ROW_FAULT_STATUS
    # the band's status, as the CPU decoder's: the first failing row, else (the last band) the end-of-stream check
    if active:
        row_codes[channel, lane] = code
        if lane == h - 1:
            end_codes[channel] = end_code
    cuda.syncthreads()
    if active and lane == 0:
        code = end_codes[channel]
        for row in range(h):
            if row_codes[channel, row] != STATUS_OK:
                code = row_codes[channel, row]
                break
        report(status, item, code, stream_rank(items, tasks, task, item, channel) + band_y // COMPACT_BAND_ROWS)


@cuda.jit(device=True, inline="always")
def row_headers(buf, pos, end_bit, width, bits, extended, group_starts, group_codes, row_state):
    """One thread's pass over a fast row's A bit, flags and headers (fast.decode_fast_row_residuals's checks, in
    its order, up to the row's end): group_starts/group_codes get each group's data bit position and
    form | width << 3 | qsum << 8 (0, a sparse group of no samples, for an unflagged group); row_state gets the
    status of these checks and the bit after the row."""
    row_state[0] = STATUS_OK
    row_state[1] = pos + 1
    groups = groups_per_row(width)
    if pos + 1 > end_bit:
        row_state[0] = STATUS_BAD_SIZE
        return
    if read_bits(buf, pos, 1) == 0:
        for group in range(groups):
            group_codes[group] = 0
        return
    flagged = 0
    for group in range(groups):
        flagged += read_bits(buf, pos + 1 + group, 1)
    header = pos + 1 + groups
    data_pos = header + flagged * header_bits(bits, extended)
    if data_pos > end_bit:
        row_state[0] = STATUS_BAD_SIZE
        return
    for group in range(groups):
        group_codes[group] = 0
        if read_bits(buf, pos + 1 + group, 1) != 0:
            fields = read_bits(buf, header, header_bits(bits, extended))
            header += header_bits(bits, extended)
            form, width_bits = group_form(fields & ((1 << code_bits(bits, extended)) - 1), bits, extended)
            qsum = fields >> code_bits(bits, extended)
            count = min(GROUP_SIZE, width - group * GROUP_SIZE)
            if not group_header_sound(form, width_bits, qsum, count, bits):
                row_state[0] = STATUS_BAD_HEADER
                return
            group_codes[group] = form | (width_bits << 3) | (qsum << 8)
            group_starts[group] = data_pos
            data_pos += group_data_bits(form, width_bits, qsum, count)
    if data_pos > end_bit:
        row_state[0] = STATUS_BAD_SIZE
        return
    row_state[1] = data_pos


@cuda.jit(device=True, inline="always")
def bit_count(buf, pos, count):
    """The set bits among count (0..64) bits at bit pos."""
    low = min(count, 32)
    return cuda.popc(read_bits(buf, pos, low)) + cuda.popc(read_bits(buf, pos + low, count - low))


@cuda.jit(device=True, inline="always")
def nth_one(word, n):
    """Position of the n-th (from 0) one bit of a 32-bit word that has more than n: a binary search
    on popcounts."""
    position = 0
    half = 16
    while half > 0:
        low = cuda.popc(word & ((np.int64(1) << half) - 1))
        if n >= low:
            n -= low
            word >>= half
            position += half
        half >>= 1
    return position


@cuda.jit(device=True, inline="always")
def unary_quotient(buf, pos, length, count, index):
    """(quotient of code `index`, the part is sound) for a unary part of `length` bits at bit pos holding
    `count` codes, each q zero bits then a one: q is the distance between the index-th one and the one
    before, found by popcounts over 32-bit words. Sound means exactly count ones, the last bit one
    (fast.add_quotients reads count codes in exactly `length` bits)."""
    ones = 0
    before = -1  # position of the one ending code index - 1 (-1: the part's start)
    here = -1
    last = 0
    for at in range(0, length, 32):
        size = min(32, length - at)
        word = read_bits(buf, pos + at, size)
        word_ones = cuda.popc(word)
        if ones <= index - 1 and index - 1 < ones + word_ones:
            before = at + nth_one(word, index - 1 - ones)
        if ones <= index and index < ones + word_ones:
            here = at + nth_one(word, index - ones)
        ones += word_ones
        last = (word >> (size - 1)) & 1
    return here - before - 1, ones == count and last == 1


@cached_on_content
@cuda.jit
def decode_fast(data, stream_starts, stream_ends, items, tasks, ring_rows, out, status):
    stage = cuda.shared.array(0, dtype=TILE_SAMPLE)
    group_starts = cuda.shared.array(MAX_GROUPS, dtype=np.int64)
    group_codes = cuda.shared.array(MAX_GROUPS, dtype=np.int32)
    scan_scratch = cuda.shared.array(MAX_TILE_WIDTH, dtype=TILE_SAMPLE)
    row_state = cuda.shared.array(2, dtype=np.int64)  # row_headers' status and row end
    # per channel, the same in every thread: status, bit position of the next row
    codes = cuda.local.array(MAX_CHANNELS, dtype=np.int64)
    data_pos = cuda.local.array(MAX_CHANNELS, dtype=np.int64)
    plane_starts = cuda.local.array(MAX_CHANNELS, dtype=np.int64)  # -1 for a palette member
    thread = cuda.threadIdx.x
    threads = cuda.blockDim.x
    task = cuda.blockIdx.x
    item, channels, bits, y0, x0, h, w = task_tile(items, tasks, task)
    tile_width = items[item, I_TILE_WIDTH]
    mask = (np.int64(1) << bits) - 1
    # a coded stream's reads stop at the end of the item's bytes, as the CPU decoder's stop at the file's
    # end; the other reads stay inside their streams, which may lie in the LZ scratch area past it
    buf = data[:items[item, I_DATA_END]]

    palette = (data, np.int64(0), np.int64(0))
    for channel in range(channels):
        stream = stream_id(items, tasks, task, item, channel)
        end = stream_ends[stream]
        code, start, colours = plane_stream_status(data, stream_starts[stream], end, channel,
                                                   stream_starts[stream - channel], channels, bits // 8, h * w)
        if code == STATUS_OK and colours > 0:
            palette = (data, stream_starts[stream], colours)
        if code == STATUS_OK and colours != PLANE_MEMBER and data[start] == KIND_CODED_ANS:
            code = STATUS_BAD_KIND  # compact mode's
        codes[channel] = code
        plane_starts[channel] = -1 if colours == PLANE_MEMBER else start
        data_pos[channel] = (start + 1) * 8  # a coded stream's rows start after its kind byte

    # bands of ring_rows - 1 rows; the ring's spare row keeps the row above the band
    ring = (ring_rows, tile_width)
    band = ring_rows - 1
    for b0 in range(0, h, band):
        b1 = min(b0 + band, h)
        for channel in range(channels):
            stream = stream_id(items, tasks, task, item, channel)
            start = plane_starts[channel]
            if codes[channel] != STATUS_OK or start < 0:
                continue  # block-uniform: every thread holds the same codes; a member has no plane of its own
            kind = data[start]
            if not is_coded(kind):
                for index in range(thread, (b1 - b0) * w, threads):
                    row = b0 + index // w
                    col = index % w
                    stage[staged(channel, row, col, ring)] = uncoded_sample(
                        data, start, kind, row * w + col, bits // 8
                    )
                continue
            for row in range(b0, b1):
                if thread == 0:
                    row_headers(buf, data_pos[channel], stream_ends[stream] * 8, w, bits, kind == KIND_CODED_EXTENDED,
                                group_starts, group_codes, row_state)
                cuda.syncthreads()
                row_status = row_state[0]
                row_end = row_state[1]
                corrupt = 0
                if row_status == STATUS_OK:
                    for col in range(thread, w, threads):
                        group = col // GROUP_SIZE
                        lane = col - group * GROUP_SIZE
                        form = group_codes[group] & 7
                        width_bits = (group_codes[group] >> 3) & 31
                        qsum = group_codes[group] >> 8
                        pos = group_starts[group]
                        count = min(GROUP_SIZE, w - group * GROUP_SIZE)
                        if form == FORM_SPARSE:
                            mapped = 0  # its listed samples are scattered below
                        elif form == FORM_PACKED:
                            mapped = read_bits(buf, pos + lane * width_bits, width_bits)
                        elif form == FORM_RICE:
                            k = width_bits
                            quotient, sound = unary_quotient(buf, pos + count * k, count + qsum, count, lane)
                            mapped = read_bits(buf, pos + lane * k, k) + (quotient << k)
                            if not sound or mapped >> bits != 0:
                                corrupt = 1
                        else:  # bitmap: a set bit's value is the rank-th, rank = the set bits before it
                            mapped = 0
                            if read_bits(buf, pos + lane, 1) != 0:
                                rank = bit_count(buf, pos, lane)
                                if rank < qsum:  # more set bits than values is caught below
                                    mapped = read_bits(buf, pos + count + rank * width_bits, width_bits)
                            if lane == 0 and bit_count(buf, pos, count) != qsum:
                                corrupt = 1
                        stage[staged(channel, row, col, ring)] = mapped & mask
                cuda.syncthreads()  # sparse groups' zeros are in place
                if row_status == STATUS_OK:
                    for col in range(thread, w, threads):  # entry `lane` of a sparse group
                        group = col // GROUP_SIZE
                        lane = col - group * GROUP_SIZE
                        size = group_codes[group] >> 8
                        if group_codes[group] & 7 == FORM_SPARSE and lane < size:
                            count = min(GROUP_SIZE, w - group * GROUP_SIZE)
                            width_bits = (group_codes[group] >> 3) & 31
                            position, value, sound = sparse_entry(buf, group_starts[group], size, lane, count,
                                                                  width_bits)
                            if sound:
                                stage[staged(channel, row, group * GROUP_SIZE + position, ring)] = value
                            else:
                                corrupt = 1
                corrupt = cuda.syncthreads_or(corrupt)  # and every thread has read row_state
                if row_status == STATUS_OK and corrupt == 0:
                    unpredict_staged_row(stage, channel, row, w, ring, bits, scan_scratch, (thread, threads))
                    data_pos[channel] = row_end
                else:
                    codes[channel] = row_status if row_status != STATUS_OK else STATUS_CORRUPT
                    break
        cuda.syncthreads()
        write_tile(stage, ring, items, item, (y0, x0), (b0, b1), (0, w), out, (thread, threads), palette)
        cuda.syncthreads()

    for channel in range(channels):
        code = codes[channel]
        stream = stream_id(items, tasks, task, item, channel)
        if code == STATUS_OK and plane_starts[channel] >= 0 and is_coded(data[plane_starts[channel]]):
            if (data_pos[channel] + 7) // 8 != stream_ends[stream]:
                code = STATUS_BAD_SIZE  # the stream ends in the byte holding its last bit
        if thread == 0:
            report(status, item, code, stream_rank(items, tasks, task, item, channel))


@cuda.jit(device=True, inline="always")
def unpredict_staged_row(stage, channel, row, w, ring, bits, scan_scratch, lanes):
    """A staged row of mapped residuals -> samples (fast.unpredict_row, in parallel over lanes =
    (thread, threads)): row 0 by a running sum from half (a Hillis-Steele scan), later rows in
    PHASES passes with a barrier after each."""
    thread, threads = lanes
    mask = (np.int64(1) << bits) - 1
    if row == 0:
        for col in range(thread, w, threads):
            here = staged(channel, 0, col, ring)
            first = (np.int64(1) << (bits - 1)) if col == 0 else 0
            stage[here] = (first + unzigzag(np.int64(stage[here]))) & mask
        cuda.syncthreads()
        offset = 1
        while offset < w:
            for col in range(thread, w, threads):
                here = staged(channel, 0, col, ring)
                carry = np.int64(stage[here - offset]) if col >= offset else 0
                scan_scratch[col] = (np.int64(stage[here]) + carry) & mask
            cuda.syncthreads()
            for col in range(thread, w, threads):
                stage[staged(channel, 0, col, ring)] = scan_scratch[col]
            cuda.syncthreads()
            offset *= 2
        return
    # phase 0: columns c % PERIOD == 0 from N; phase j: distance d = PERIOD >> j, columns c % 2d == d
    for phase in range(PHASES):
        step = PERIOD if phase == 0 else PERIOD >> (phase - 1)
        distance = step >> 1 if phase > 0 else 0
        for col in range(distance + thread * step, w, threads * step):
            here = staged(channel, row, col, ring)
            prediction = np.int64(stage[staged(channel, row - 1, col, ring)])
            if phase > 0:
                left = np.int64(stage[here - distance])
                upleft = np.int64(stage[staged(channel, row - 1, col - distance, ring)])
                right = left
                upright = upleft
                if col + distance < w:
                    right = np.int64(stage[here + distance])
                    upright = np.int64(stage[staged(channel, row - 1, col + distance, ring)])
                prediction = predict_between(left, right, prediction, upleft, upright)
            stage[here] = (prediction + unzigzag(np.int64(stage[here]))) & mask
        cuda.syncthreads()


def fast_ring_rows(launch) -> int:
    """Rows of each channel's ring in a fast launch: the fewest that cuda_c.fast_ring_rows gives
    any of its items (FAST_STAGE_BUDGET bytes of 16-bit staging, 2..tile height + 1)."""
    items = launch.items
    rows = cuda_c.fast_ring_rows(items["channels"], items["tile_width"], items["tile_height"], TILE_SAMPLE.itemsize)
    return int(rows.min())


def _compact_geometry(launch) -> tuple:
    return decode_compact, (len(launch.tasks),), (WARP, launch.max_channels), 0, ()


def _fast_geometry(launch) -> tuple:
    rows = fast_ring_rows(launch)
    row_samples = launch.items["channels"].astype(np.int64) * launch.items["tile_width"]
    shared = rows * int(row_samples.max()) * TILE_SAMPLE.itemsize
    if shared + FAST_STATIC_SHARED > SHARED_LIMIT:
        widest = int(row_samples.argmax())
        raise RuntimeError(
            f"fast tiles {launch.items['tile_width'][widest]} wide with {launch.items['channels'][widest]} channels"
            f" need {shared + FAST_STATIC_SHARED} bytes of shared memory, more than the numba backend's"
            f" {SHARED_LIMIT}; use backend='cupy'"
        )
    return decode_fast, (len(launch.tasks),), (FAST_THREADS,), shared, (rows,)


_GEOMETRY = {fmt.MODE_COMPACT: _compact_geometry, fmt.MODE_FAST: _fast_geometry}


# ---------------------------------------------------------------- LZ streams, expanded before the decode

@cached_on_content
@cuda.jit
def expand_streams(data, expansions, status):
    """A thread per LZ stream (lz_stage.EXPANSION_DTYPE rows): at its target in the scratch area, where
    the stream tables point, the bytes kept before its LZ plane, KIND_RAW, then the plane's raw bytes;
    a pixel LZ stream's block expands after its planes and is then dealt out to them, a raw stream
    per channel (kernels/lz.cu expands with a warp per stream)."""
    index = cuda.grid(1)
    if index >= expansions.shape[0]:
        return
    target, prefix = expansions[index, X_TARGET], expansions[index, X_PREFIX_BYTES]
    plane_bytes, channels = expansions[index, X_PLANE_BYTES], expansions[index, X_CHANNELS]
    span = (prefix + 1 + plane_bytes + 7) // 8 * 8  # lz_stage.plane_span
    for i in range(prefix):
        data[target + i] = data[expansions[index, X_PREFIX_START] + i]
    for channel in range(channels):
        data[target + channel * span + prefix] = KIND_RAW
    source, source_end = expansions[index, X_SOURCE], expansions[index, X_SOURCE_END]
    tables = cuda.local.array((LZ_TABLES, LZ_TABLE_SIZE), dtype=np.int32)  # a coded stream's codes
    pixels = target + channels * span  # a pixel LZ block's interleaved output
    # one call site: each inlines the plain and the coded expansion
    code = expand_lz_stream(data, source, source_end, tables, data, target + prefix + 1 if channels == 1 else pixels,
                            channels * plane_bytes)
    if channels > 1 and code == STATUS_OK:
        sample_bytes = expansions[index, X_SAMPLE_BYTES]
        for pixel in range(plane_bytes // sample_bytes):
            for channel in range(channels):
                at = pixels + pixel_offset(pixel, channel, channels, sample_bytes)
                for byte in range(sample_bytes):
                    data[target + channel * span + 1 + pixel * sample_bytes + byte] = data[at + byte]
    # the stream's own status first (one report: a key of the same rank and a larger code would win)
    report(status, expansions[index, X_STATUS_INDEX], code if code != STATUS_OK else expansions[index, X_MEMBER_STATUS],
           expansions[index, X_STATUS_RANK])


EXPAND_THREADS = WARP


def expand_lz_streams(data, expansions, status, stream=0) -> None:
    """Launch expand_streams on a packed batch's device buffer (batch.packed_views), before its decode
    launches on the same stream."""
    count = int(expansions.shape[0])
    if count:
        expand_streams[-(-count // EXPAND_THREADS), EXPAND_THREADS, stream](data, expansions, status)


def launch_geometry(launch) -> tuple:
    """(kernel, grid, block, dynamic shared bytes, extra kernel arguments) for a batch.Launch.

    Raises RuntimeError when an item's tiles need more shared memory than a block gets
    without opting in (the cupy backend can opt in).
    """
    return _GEOMETRY[launch.mode](launch)


# ---------------------------------------------------------------- compiling without a GPU

# The kernels' argument types, for compile_ptx: batch data, stream starts and ends, item and
# task tables, (fast only) ring rows, the output bytes and per-item status.
_HEAD = (
    "Array(uint8, 1, 'C', readonly=True)", "int64[::1]", "int64[::1]", "int64[:, ::1]", "int64[:, ::1]"
)
_TAIL = ("uint8[::1]", "int32[::1]")
SIGNATURES = {"decode_compact": (*_HEAD, *_TAIL), "decode_fast": (*_HEAD, "int64", *_TAIL),
              "expand_streams": ("uint8[::1]", "int64[:, ::1]", "int32[::1]"),
              "ans_table_blocks": ("uint8[::1]", "int64[:, ::1]")}
# threads per block each kernel is launched with (compact: a warp per channel)
LAUNCH_THREADS = {"decode_compact": WARP * MAX_CHANNELS, "decode_fast": FAST_THREADS,
                  "expand_streams": EXPAND_THREADS, "ans_table_blocks": ANS_TABLE_THREADS}


def compile_ptx(name: str, cc=(9, 0)) -> str:
    """PTX of kernel `name` for compute capability cc; needs no GPU."""
    from numba import types

    signature = tuple(eval(text, vars(types)) for text in SIGNATURES[name])  # noqa: S307 - our own constants
    ptx, _ = cuda.compile_ptx(globals()[name].py_func, signature, cc=cc)
    return ptx


def resource_report(cc=(9, 0)) -> dict:
    """ptxas's resource report of each kernel for cc, from nvJitLink (no GPU needed): as
    kernels.cuda_c.compile_report, {kernel name: {"registers", "spill_stores", ...}}."""
    from cuda.bindings import nvjitlink

    from .cuda_c import parse_ptxas_log

    report = {}
    for name in SIGNATURES:
        ptx = compile_ptx(name, cc).encode()
        handle = nvjitlink.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), f"{name}.ptx")
            try:
                nvjitlink.complete(handle)
            except nvjitlink.nvJitLinkError as error:
                log = _jitlink_log(nvjitlink, handle, "error")
                raise RuntimeError(f"nvJitLink failed for {name}: {log}") from error
            log = _jitlink_log(nvjitlink, handle, "info")
        finally:
            nvjitlink.destroy(handle)
        entries = parse_ptxas_log(log, f"{name}.ptx")
        # numba mangles entry names: the one entry of this PTX is the kernel
        (entry,) = entries.values()
        report[name] = entry
    return report


def _jitlink_log(nvjitlink, handle, which: str) -> str:
    size = getattr(nvjitlink, f"get_{which}_log_size")(handle)
    buffer = bytearray(size)
    getattr(nvjitlink, f"get_{which}_log")(handle, buffer)
    return buffer.decode(errors="replace").rstrip("\0 ")

