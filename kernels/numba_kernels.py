"""Numba CUDA decode kernels: the same Python pixel and row logic as the CPU decoder.

The device functions of l3codec's mode modules are compiled here with
``cuda.jit(device=True, inline="always")``. The kernels use shared memory and
``syncthreads`` only (no warp intrinsics), so they also run under
``NUMBA_ENABLE_CUDASIM=1``. Their launch tables come from ``l3codec.batch``:
one block per task (a tile of an item), items and tasks as int64 matrices.

compact: block (32, channels). Lane r decodes row r of channel y as a wavefront:
pixel (r, c) at step r + c, after lane r - 1 wrote (r - 1, c) into shared memory
at the previous step. fast: one thread per pair of columns. Each row decodes in
parallel: residuals from the group widths, then even columns, then odd ones.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda

from l3codec import batch, bitio, colour, compact, fast, streams
from l3codec import format as fmt
from l3codec.jit import compile_device_functions

_dev = compile_device_functions([bitio, colour, streams, compact, fast], cuda.jit(device=True, inline="always"))
read_bits = _dev.read_bits
add_green = _dev.add_green
neighbours = _dev.neighbours
row_state_init = _dev.row_state_init
decode_sample = _dev.decode_sample
uncoded_stream_status = _dev.uncoded_stream_status
uncoded_sample = _dev.uncoded_sample
compact_stream_layout = _dev.compact_stream_layout
compact_row_length = _dev.compact_row_length
fast_stream_layout = _dev.fast_stream_layout
width_field_bits = _dev.width_field_bits
groups_per_row = _dev.groups_per_row
predict = _dev.predict
unzigzag = _dev.unzigzag

WARP = 32
# Most threads a fast block uses. The simulator runs every thread as a Python thread:
# one warp keeps its runs short.
FAST_THREADS = 32 if config.ENABLE_CUDASIM else 1024
TILE_SAMPLE = np.dtype(np.uint16)  # shared staging holds 8- and 16-bit samples alike
MAX_GROUPS = fmt.MAX_TILE_WIDTH // fast.GROUP_SIZE
GROUP_STARTS = MAX_GROUPS + 1  # shared array sizes must be plain constants
MAX_TILE_WIDTH = fmt.MAX_TILE_WIDTH

# Column indices of the int64 views of batch.ITEM_DTYPE and batch.TASK_DTYPE records.
_ITEM = {name: i for i, name in enumerate(batch.ITEM_DTYPE.names)}
I_WIDTH, I_HEIGHT, I_CHANNELS, I_BITS = _ITEM["width"], _ITEM["height"], _ITEM["channels"], _ITEM["bits"]
I_TRANSFORM, I_TILE_WIDTH, I_TILE_HEIGHT = _ITEM["transform"], _ITEM["tile_width"], _ITEM["tile_height"]
I_TILES_X, I_STREAM_BASE = _ITEM["tiles_x"], _ITEM["stream_base"]
I_REGION_Y, I_REGION_X, I_REGION_H, I_REGION_W = (
    _ITEM["region_y"], _ITEM["region_x"], _ITEM["region_h"], _ITEM["region_w"]
)
I_OUT_OFFSET, I_OUT_PITCH = _ITEM["out_offset"], _ITEM["out_row_pitch"]
T_ITEM, T_TILE_Y, T_TILE_X = 0, 1, 2

KIND_CODED = fmt.KIND_CODED
STATUS_OK = fmt.STATUS_OK
STATUS_BAD_SIZE = fmt.STATUS_BAD_SIZE
STATUS_BAD_HEADER = fmt.STATUS_BAD_HEADER
STATUS_CORRUPT = fmt.STATUS_CORRUPT
TRANSFORM_SUBTRACT_GREEN = fmt.TRANSFORM_SUBTRACT_GREEN
STATE_SIZE = compact.STATE_SIZE
S_POS = compact.S_POS
S_MAPPED = compact.S_MAPPED
S_ERROR = compact.S_ERROR
GROUP_SIZE = fast.GROUP_SIZE


@cuda.jit(device=True, inline="always")
def report(status, item, code):
    """Keep the first nonzero status of an item."""
    if code != STATUS_OK:
        cuda.atomic.cas(status, item, 0, code)


@cuda.jit(device=True, inline="always")
def stream_id(items, tasks, task, item, channel):
    """Index of the task's tile-channel in the batch's stream arrays."""
    tile = tasks[task, T_TILE_Y] * items[item, I_TILES_X] + tasks[task, T_TILE_X]
    return items[item, I_STREAM_BASE] + tile * items[item, I_CHANNELS] + channel


@cuda.jit(device=True, inline="always")
def write_tile(tiles, items, item, y0, x0, h, w, out, thread, threads):
    """Write the tile's intersection with the item's region to out (HWC), undoing the colour
    transform. Consecutive threads write consecutive pixels."""
    channels = items[item, I_CHANNELS]
    bits = items[item, I_BITS]
    sample_bytes = bits // 8
    ry = items[item, I_REGION_Y]
    rx = items[item, I_REGION_X]
    top = max(y0, ry)
    bottom = min(y0 + h, ry + items[item, I_REGION_H])
    left = max(x0, rx)
    right = min(x0 + w, rx + items[item, I_REGION_W])
    if top >= bottom or left >= right:
        return
    columns = right - left
    for index in range(thread, (bottom - top) * columns, threads):
        y = top + index // columns
        x = left + index % columns
        c0 = np.int64(tiles[0, y - y0, x - x0])
        c1 = c0
        c2 = c0
        if channels >= 3:
            c1 = np.int64(tiles[1, y - y0, x - x0])
            c2 = np.int64(tiles[2, y - y0, x - x0])
            if items[item, I_TRANSFORM] == TRANSFORM_SUBTRACT_GREEN:
                c0, c1, c2 = add_green(c0, c1, c2, bits)
        pos = items[item, I_OUT_OFFSET] + (y - ry) * items[item, I_OUT_PITCH] + (x - rx) * channels * sample_bytes
        for channel in range(channels):
            if channel == 0:
                value = c0
            elif channel == 1 and channels >= 3:
                value = c1
            elif channel == 2:
                value = c2
            else:
                value = np.int64(tiles[channel, y - y0, x - x0])
            out[pos] = value & 255
            if sample_bytes == 2:
                out[pos + 1] = (value >> 8) & 255
            pos += sample_bytes


@cuda.jit
def decode_compact(data, stream_starts, stream_ends, items, tasks, tile_rows, tile_stride, out, status):
    shared = cuda.shared.array(0, dtype=TILE_SAMPLE)
    mapped_slots = cuda.shared.array((2, 4, WARP), dtype=np.int64)
    state = cuda.local.array(STATE_SIZE, dtype=np.int64)
    lane = cuda.threadIdx.x
    channel = cuda.threadIdx.y
    task = cuda.blockIdx.x
    item = tasks[task, T_ITEM]
    channels = items[item, I_CHANNELS]
    bits = items[item, I_BITS]
    planes = shared.shape[0] // (tile_rows * tile_stride)
    tiles = shared[: planes * tile_rows * tile_stride].reshape((planes, tile_rows, tile_stride))
    tile_height = items[item, I_TILE_HEIGHT]
    tile_width = items[item, I_TILE_WIDTH]
    y0 = tasks[task, T_TILE_Y] * tile_height
    x0 = tasks[task, T_TILE_X] * tile_width
    h = min(tile_height, items[item, I_HEIGHT] - y0)
    w = min(tile_width, items[item, I_WIDTH] - x0)
    half = np.int64(1) << (bits - 1)

    active = channel < channels and lane < h
    code = STATUS_OK
    coded = False
    copy_row = False
    row_start = np.int64(0)
    row_end = np.int64(0)
    if active:
        stream = stream_id(items, tasks, task, item, channel)
        start = stream_starts[stream]
        end = stream_ends[stream]
        kind = data[start]
        code = uncoded_stream_status(kind, end - start, bits // 8, h * w)
        if code == STATUS_OK and kind != KIND_CODED:
            for col in range(w):
                tiles[channel, lane, col] = uncoded_sample(data, start, kind, lane * w + col, bits // 8)
        elif code == STATUS_OK:
            code, run_index, k_nibbles, length_bits, table_pos, row_start = compact_stream_layout(
                data, start, end, h
            )
            if code == STATUS_OK:
                for row in range(lane):
                    row_start += compact_row_length(data, table_pos, length_bits, row)
                row_end = row_start + compact_row_length(data, table_pos, length_bits, lane)
                copy_row = row_end == row_start
                if row_end > end * 8 or (lane == h - 1 and (row_end + 7) // 8 != end):
                    code = STATUS_BAD_SIZE
                elif copy_row and lane == 0:
                    code = STATUS_CORRUPT
                else:
                    coded = True
                    row_state_init(state, row_start, k_nibbles, run_index)

    for step in range(h + w - 1):
        col = step - lane
        if coded and 0 <= col < w:
            if copy_row:
                value = np.int64(tiles[channel, lane - 1, col])
                state[S_MAPPED] = 0
            else:
                left = np.int64(tiles[channel, lane, col - 1]) if col > 0 else half
                left2 = np.int64(tiles[channel, lane, col - 2]) if col > 1 else half
                up = np.int64(tiles[channel, lane - 1, col]) if lane > 0 else half
                upleft = np.int64(tiles[channel, lane - 1, col - 1]) if lane > 0 and col > 0 else half
                mapped_n = mapped_slots[(step + 1) % 2, channel, lane - 1] if lane > 0 else 0
                wv, nv, nwv = neighbours(lane, col, left, left2, up, upleft, half)
                value = decode_sample(data, state, wv, nv, nwv, mapped_n, w - col, bits)
            tiles[channel, lane, col] = value
            mapped_slots[step % 2, channel, lane] = state[S_MAPPED]
        cuda.syncthreads()

    if coded and not copy_row and (state[S_POS] != row_end or state[S_ERROR] != 0):
        code = STATUS_CORRUPT
    report(status, item, code)
    cuda.syncthreads()
    write_tile(tiles, items, item, y0, x0, h, w, out, channel * WARP + lane, cuda.blockDim.y * WARP)


@cuda.jit
def decode_fast(data, stream_starts, stream_ends, items, tasks, tile_rows, tile_stride, out, status):
    shared = cuda.shared.array(0, dtype=TILE_SAMPLE)
    group_starts = cuda.shared.array(GROUP_STARTS, dtype=np.int64)
    group_widths = cuda.shared.array(MAX_GROUPS, dtype=np.int64)
    scan_scratch = cuda.shared.array(MAX_TILE_WIDTH, dtype=TILE_SAMPLE)
    thread = cuda.threadIdx.x
    threads = cuda.blockDim.x
    task = cuda.blockIdx.x
    item = tasks[task, T_ITEM]
    channels = items[item, I_CHANNELS]
    bits = items[item, I_BITS]
    tile_height = items[item, I_TILE_HEIGHT]
    tile_width = items[item, I_TILE_WIDTH]
    planes = shared.shape[0] // (tile_rows * tile_stride)
    tiles = shared[: planes * tile_rows * tile_stride].reshape((planes, tile_rows, tile_stride))
    y0 = tasks[task, T_TILE_Y] * tile_height
    x0 = tasks[task, T_TILE_X] * tile_width
    h = min(tile_height, items[item, I_HEIGHT] - y0)
    w = min(tile_width, items[item, I_WIDTH] - x0)
    mask = (np.int64(1) << bits) - 1
    groups = groups_per_row(w)
    field_bits = width_field_bits(bits)

    for channel in range(channels):
        tile = tiles[channel]
        stream = stream_id(items, tasks, task, item, channel)
        start = stream_starts[stream]
        end = stream_ends[stream]
        kind = data[start]
        code = uncoded_stream_status(kind, end - start, bits // 8, h * w)
        if code == STATUS_OK and kind != KIND_CODED:
            for index in range(thread, h * w, threads):
                tile[index // w, index % w] = uncoded_sample(data, start, kind, index, bits // 8)
        elif code == STATUS_OK:
            code, field_pos, row_fields, data_pos = fast_stream_layout(start, end, h, w, bits)
        coded = code == STATUS_OK and kind == KIND_CODED
        for row in range(h if coded else 0):
            if thread == 0:
                # group starts of this row: a short serial scan over the row's width fields
                pos = data_pos
                for group in range(groups):
                    width = read_bits(data, field_pos + row * row_fields + group * field_bits, field_bits)
                    if width > bits:
                        code = STATUS_BAD_HEADER
                    group_widths[group] = width
                    group_starts[group] = pos
                    pos += width * (min(w, (group + 1) * GROUP_SIZE) - group * GROUP_SIZE)
                group_starts[groups] = pos
            cuda.syncthreads()
            data_pos = group_starts[groups]
            for col in range(thread, w, threads):
                group = col // GROUP_SIZE
                width = group_widths[group]
                tile[row, col] = read_bits(data, group_starts[group] + (col % GROUP_SIZE) * width, width)
            cuda.syncthreads()
            if row == 0:
                # row 0 is a running sum mod 2**bits from half: a parallel (Hillis-Steele) scan
                for col in range(thread, w, threads):
                    first = (np.int64(1) << (bits - 1)) if col == 0 else 0
                    tile[0, col] = (first + unzigzag(np.int64(tile[0, col]))) & mask
                cuda.syncthreads()
                offset = 1
                while offset < w:
                    for col in range(thread, w, threads):
                        carry = np.int64(tile[0, col - offset]) if col >= offset else 0
                        scan_scratch[col] = (np.int64(tile[0, col]) + carry) & mask
                    cuda.syncthreads()
                    for col in range(thread, w, threads):
                        tile[0, col] = scan_scratch[col]
                    cuda.syncthreads()
                    offset *= 2
            else:
                for parity in range(2):  # even columns need the row above, odd ones their even neighbours
                    for col in range(2 * thread + parity, w, 2 * threads):
                        residual = unzigzag(np.int64(tile[row, col]))
                        tile[row, col] = (predict(tile, row, col, w, bits) + residual) & mask
                    cuda.syncthreads()
        if coded and (data_pos > end * 8 or (data_pos + 7) // 8 != end):
            code = STATUS_BAD_SIZE
        if thread == 0:
            report(status, item, code)
        cuda.syncthreads()
    write_tile(tiles, items, item, y0, x0, h, w, out, thread, threads)


def launch_geometry(launch) -> tuple:
    """(grid, block, dynamic shared bytes, tile rows, tile stride) for a batch.Launch.

    Shared memory stages every channel of a tile: max_channels planes of tile_rows x stride.
    """
    rows, stride = launch.max_tile_height, launch.max_tile_width
    if launch.mode == fmt.MODE_COMPACT:
        block = (WARP, launch.max_channels)
    else:
        # one thread per column pair: every thread is busy in both the even and the odd phase
        block = (min(FAST_THREADS, max(WARP, (stride // 2 + WARP - 1) // WARP * WARP)),)
    shared = launch.max_channels * rows * stride * TILE_SAMPLE.itemsize
    return (len(launch.tasks),), block, shared, rows, stride


def kernel_for(mode: int):
    return decode_compact if mode == fmt.MODE_COMPACT else decode_fast
