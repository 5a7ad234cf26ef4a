// `compact` mode GPU decoder: one block per band of 32 rows of a tile, one warp per channel, a
// wavefront per warp.
//
// Every row of a tile-channel is its own bitstream with its own adaptive state
// (l3codec/compact.py), and each band's first row is coded without a row above, so the bands of a
// tall tile are decoded by blocks of their own (batch.py's tasks). Lane r of warp `channel` owns row
// r of the band; at step s it decodes pixel (r, s - r). Its N and N's mapped residual are what
// lane r - 1 produced at step s - 1 (one __shfl_up_sync), NW is the N it received one step earlier
// (a register), W and WW are its own previous outputs (lane 0's NW register holds its WW). Lanes find their
// row's first bit from the row-length table with a warp prefix sum, then read the row
// through a 64-bit bit reservoir in registers, refilled by one aligned 4-byte load when
// it holds fewer than 32 bits. The adaptive sums and counts live in shared memory,
// indexed [context][lane]; everything else in registers. Constant and raw streams skip
// the wavefront: the warp stages their rows with consecutive lanes on consecutive samples.
//
// Decoded samples are staged in a ring of columns in dynamic shared memory. A tile up to
// 128 columns wide is staged whole: after the wavefront, a __syncthreads, then the block
// writes the tile's intersection with the region (all channels; palette colours and the inverse
// colour transform applied in place first, finish_pixel; write_tile_sectors: a warp per output
// row, 4-byte stores filling whole 32-byte sectors). A wider tile goes through a 128-column ring in strips of 64 steps,
// writing after each strip the columns every row has finished up to a 32-byte boundary,
// so shared memory stays under 48 KiB whatever the tile width (a default 512-wide tile
// of 4 16-bit channels would need 128 KiB staged whole). blockDim = (32, max_channels):
// warps with threadIdx.y >= channels only take part in the barriers and the writing.
//
// A kind-10 stream (format 10's rANS rows, l3codec/ans.py) takes the same wavefront: lane r holds row
// r's rANS state and its next word; the stream's table block (ans_stage.py, built by ans.cu before this
// kernel) gives its slot tables and token words, read through L1, and the warp copies the activity-to-
// context table and the bias values into its channel's state area in shared memory.
#include "ans.cuh"

namespace l3 {

// One row decoder (compact.py's S_* state array), kept in registers.
struct CompactRow {
    BitReservoir in;  // S_POS: the row's bits from the next unread one
    int run_left;     // S_RUN_LEFT
    int run_value;    // S_RUN_VALUE
    int run_index;    // S_RUN_INDEX
    int mapped;       // S_MAPPED: mapped residual of the last sample (W's for the next one)
    bool interrupt;   // S_INTERRUPT
    bool error;       // S_ERROR: the row's bits are impossible (a run past the row end)
};

// compact.decode_mapped; ctx_a/ctx_n point at this lane's sums and counts (stride 32 per context).
template <int BITS>
L3_DEVICE int decode_mapped(const unsigned char* __restrict__ data, long long size, CompactRow& row, int* ctx_a,
                            int* ctx_n, int ctx) {
    int a = ctx_a[ctx * 32];
    int n = ctx_n[ctx * 32];
    const int k = rice_parameter<BITS>(a, n);
    refill(row.in, data, size);  // a code word has at most UNARY_LIMIT + BITS <= 28 bits
    const unsigned long long window = row.in.bits;
    const unsigned unary = (unsigned)window & ((1u << UNARY_LIMIT) - 1);
    int mapped;
    if (unary != 0) {  // q zero bits, a one bit, then k bits
        const int q = __ffs(unary) - 1;
        mapped = (q << k) | (int)((window >> (q + 1)) & ((1ull << k) - 1));
        consume(row.in, q + 1 + k);
    } else {  // escape: UNARY_LIMIT zero bits, then the mapped residual in BITS bits
        mapped = (int)((window >> UNARY_LIMIT) & ((1ull << BITS) - 1));
        consume(row.in, UNARY_LIMIT + BITS);
    }
    a += min_of(mapped, 1 << (k + ADAPT_CAP_SHIFT));
    n += 1;
    if (n == RESET_COUNT) {
        a >>= 1;
        n >>= 1;
    }
    ctx_a[ctx * 32] = a;
    ctx_n[ctx * 32] = n;
    row.mapped = mapped;
    return mapped;
}

// Samples the one bits of run indices [0, index) cover: the sum of 2**run_order(j) over j < index
// (four chunks of each order 0-3, two of each order 4-7, then one of each order from 8).
L3_DEVICE int run_chunks_below(int index) {
    if (index < 16) return ((4 + (index & 3)) << (index >> 2)) - 4;
    if (index < 24) return ((2 + (index & 1)) << ((index - 8) >> 1)) + 28;
    return (1 << (index - 16)) + 284;
}

// compact.decode_run_length, from the reservoir. A run ended by a zero bit before the row's end
// is decoded at once: its one bits, counted by one __ffs, raise the run index from run_index to
// `end` and cover run_chunks_below(end) - run_chunks_below(run_index) samples. A run reaching the
// row's end goes bit by bit: that loop ends because every one bit adds a chunk of at least one
// sample and a chunk reaching `remaining` returns.
L3_DEVICE int decode_run_length(const unsigned char* __restrict__ data, long long size, CompactRow& row,
                                int remaining) {
    refill(row.in, data, size);
    const int ones = __ffs(~(unsigned)row.in.bits | 0x80000000u) - 1;  // of the 32 bits refill guarantees
    const int end = row.run_index + ones;
    if (end <= RUN_INDEX_MAX) {
        const int covered = run_chunks_below(end) - run_chunks_below(row.run_index);
        const int order = run_order(end);
        const int used = ones + 1 + order;
        if (covered < remaining && used <= row.in.count) {
            int run = covered + (int)((unsigned)(row.in.bits >> (ones + 1)) & ((1u << order) - 1));
            consume(row.in, used);
            if (run > remaining - 1) {  // a run that ends past the row: corrupt
                run = remaining - 1;
                row.error = true;
            }
            row.run_index = max_of(end - 1, 0);
            row.interrupt = true;
            return run;
        }
    }
    int run = 0;
    for (;;) {
        refill(row.in, data, size);  // a run bit and at most 15 more
        const int index = row.run_index;
        const int order = run_order(index);
        const int chunk = 1 << order;
        const unsigned window = (unsigned)row.in.bits;
        if (window & 1) {
            consume(row.in, 1);
            if (chunk >= remaining - run) {
                if (chunk == remaining - run && index < RUN_INDEX_MAX) row.run_index = index + 1;
                return remaining;
            }
            run += chunk;
            if (index < RUN_INDEX_MAX) row.run_index = index + 1;
        } else {
            run += (int)((window >> 1) & (unsigned)(chunk - 1));
            consume(row.in, 1 + order);
            if (run > remaining - 1) {  // a run that ends past the row: corrupt
                run = remaining - 1;
                row.error = true;
            }
            if (index > 0) row.run_index = index - 1;
            row.interrupt = true;
            return run;
        }
    }
}

// compact.decode_sample. The three residual cases (regular, run interruption, zero-length run)
// pick their context and prediction first and share one decode_mapped, so lanes taking
// different cases in one warp step run it once.
template <int BITS>
L3_DEVICE int decode_sample(const unsigned char* __restrict__ data, long long size, CompactRow& row, int* ctx_a,
                            int* ctx_n, int w, int n, int nw, int mapped_n, int remaining) {
    if (row.run_left > 0) {
        row.run_left -= 1;
        row.mapped = 0;
        return row.run_value;
    }
    // compact.decode_interruption: context INTERRUPT_CONTEXT, predicted N, mapped + 1 when N == W
    int ctx = INTERRUPT_CONTEXT, predicted = n, bias = n == w;
    if (row.interrupt) {
        row.interrupt = false;
    } else if (w == n && n == nw) {
        const int run = decode_run_length(data, size, row, remaining);
        if (run > 0) {
            row.run_value = w;
            row.run_left = run - 1;
            row.mapped = 0;
            return w;
        }
        row.interrupt = false;  // a zero-length run: its interruption sample is this one
    } else {
        ctx = activity_context<BITS>(w, n, nw, mapped_n, row.mapped);
        predicted = med(w, n, nw);
        bias = 0;
    }
    const int mapped = decode_mapped<BITS>(data, size, row, ctx_a, ctx_n, ctx);
    return (predicted + unzigzag(mapped + bias)) & ((1 << BITS) - 1);
}

template <typename T, int BITS>
L3_DEVICE void decode_compact_tile(const unsigned char* __restrict__ data, long long data_size,
                                   const long long* __restrict__ stream_starts,
                                   const long long* __restrict__ stream_ends, const L3Item* __restrict__ items,
                                   const L3Task* __restrict__ tasks, long long task_count,
                                   unsigned char* __restrict__ out, int* __restrict__ status) {
    if ((long long)blockIdx.x >= task_count) return;
    const L3Task task = tasks[blockIdx.x];
    const L3Item& item = items[task.item];
    const int channels = (int)item.channels;
    // a launch that does not fit the item (a sample size the kernel lacks, too few warps) reports instead,
    // at rank 0: before any stream's status
    if (item.bits != BITS || blockDim.x != 32 || (int)blockDim.y < channels || blockDim.z != 1) {
        if (threadIdx.x == 0 && threadIdx.y == 0) report_status(status, task.item, STATUS_BAD_HEADER, 0);
        return;
    }
    const int lane = threadIdx.x;
    const int channel = threadIdx.y;
    const long long tile_y0 = task.tile_y * item.tile_height;
    const long long tile_x0 = task.tile_x * item.tile_width;
    const int tile_h = (int)min_of(item.tile_height, item.height - tile_y0);
    const int band_y = (int)task.band_y;  // the band's first tile row
    const int h = min_of((int)COMPACT_BAND_ROWS, tile_h - band_y);
    const int w = (int)min_of(item.tile_width, item.width - tile_x0);
    const int ring = compact_ring_columns(item.tile_width);
    const bool whole_tile = item.tile_width <= ring;  // the ring holds the whole tile: written once
    const bool decoding = channel < channels;
    const long long stream = item.stream_base + (task.tile_y * item.tiles_x + task.tile_x) * channels + channel;

    // shared memory: TileWriter | colour table | per channel: sums [CONTEXTS][32], counts [CONTEXTS][32],
    // row ends [32] | stage
    unsigned char* smem = l3_dynamic_shared();
    TileWriter& writer = *reinterpret_cast<TileWriter*>(smem);
    // a palette tile's colour table right after the writer, at a fixed place (no register holds it)
    T* table = reinterpret_cast<T*>(smem + COMPACT_HEADER_SHARED_BYTES);
    unsigned char* const states = smem + COMPACT_HEADER_SHARED_BYTES + palette_table_bytes(channels, sizeof(T));
    unsigned char* state = states + (decoding ? channel : 0) * COMPACT_STATE_BYTES;
    int* ctx_a = reinterpret_cast<int*>(state) + lane;
    int* ctx_n = ctx_a + CONTEXTS * 32;
    long long& row_end = reinterpret_cast<long long*>(state + 2 * CONTEXTS * 32 * 4)[lane];
    T* stage = reinterpret_cast<T*>(states + channels * COMPACT_STATE_BYTES);
    T* my_stage = stage + ((decoding ? channel : 0) * COMPACT_BAND_ROWS + lane) * ring;
    if (threadIdx.x == 0 && threadIdx.y == 0)
        init_tile_writer(writer, item, out, tile_y0 + band_y, tile_x0, h, w, sizeof(T));

    // ---- stream header (every lane of the warp reads the same bytes, so branches are warp-uniform)
    int source = SOURCE_ZERO;
    // the stream's status, or for a coded stream this row's check that precedes decoding
    // (cpu.decode_compact_stream order); the row's decoding is checked after the wavefront
    int lane_status = STATUS_OK;
    bool copy_row = false;
    // a constant stream keeps its value in run_value; a raw stream's first sample is at byte in.next
    CompactRow row = {{0, 0, 0}, 0, 0, 0, 0, false, false};
    AnsRow ans_row = {data, 0, 0};  // a kind-10 row's state
    const AnsBlock* ans_block = nullptr;
    if (decoding) {
        const long long end = stream_ends[stream];
        const PlaneStream plane = open_stream(data, data_size, stream_starts[stream], end, channel,
                                              stream_starts[stream - channel], channels, (int)sizeof(T));
        const long long start = plane.start;
        const int kind = (int)load_byte(data, data_size, start);
        row_end = 0;
        if (plane.status != STATUS_OK) {
            lane_status = plane.status;
        } else if (plane.colours == PLANE_MEMBER) {
            // channel 0's warp stages the tile's indices; this warp stages zeros the writer never reads
        } else if (kind == KIND_CODED_ANS) {
            // the table block the stage wrote where the stream was (ans.cuh's AnsBlock)
            ans_block = reinterpret_cast<const AnsBlock*>(data + start);
            if (start < 0 || end - start < ANS_BLOCK_SLOTS || end > data_size) {
                lane_status = STATUS_BAD_SIZE;  // the host's stage tables never give such a block
            } else if (ans_block->status != STATUS_OK) {
                lane_status = ans_block->status;
            } else if (end - start != ANS_BLOCK_SLOTS + ((long long)ANS_CONTEXTS << ans_block->precision)) {
                lane_status = STATUS_BAD_SIZE;
            } else {
                const int length_bits = ans_block->length_bits;
                const long long table_pos = ans_block->lengths * 8;
                const long long length =
                    lane < h ? (long long)read_bits(data, data_size, table_pos + (band_y + lane) * length_bits,
                                                    length_bits) : 0;
                long long before = 0;  // the bytes of the bands before this one
#pragma unroll 1
                for (int r = lane; r < band_y; r += 32)
                    before += (long long)read_bits(data, data_size, table_pos + r * length_bits, length_bits);
                before = __shfl_sync(L3_FULL_MASK, warp_inclusive_scan(before, lane), 31);
                const long long row_start = ans_block->rows + before + warp_inclusive_scan(length, lane) - length;
                if (lane < h) {
                    if (row_start + length > ans_block->end)
                        lane_status = ANS_ROW_SIZE_STATUS;
                    else if (!ans_open_row(ans_row, data + row_start, (int)length))
                        lane_status = ANS_ROW_STATUS;
                }
                unsigned char* const contexts = state;  // the activity-to-context table, then the bias values
                int* const bias = reinterpret_cast<int*>(state + ANS_SHARED_BIAS);
#pragma unroll 1
                for (int a = lane; a < ANS_ACTIVITY_LIMIT; a += 32)
                    contexts[a] = (unsigned char)ans_context_of_activity(a);
#pragma unroll 1
                for (int i = lane; i < GRADIENT_CONTEXTS; i += 32) bias[i] = ans_block->bias[i];
                __syncwarp();
                source = SOURCE_ANS;
            }
        } else if (kind > KIND_RAW) {
            lane_status = STATUS_BAD_KIND;
        } else if (kind == KIND_CONSTANT) {
            if (end - start != 1 + (long long)sizeof(T)) {
                lane_status = STATUS_BAD_SIZE;
            } else {
                row.run_value = (int)load_sample<T>(data, data_size, start + 1);
                source = SOURCE_CONSTANT;
            }
        } else if (kind == KIND_RAW) {
            if (end - start != 1 + (long long)sizeof(T) * tile_h * w) {
                lane_status = STATUS_BAD_SIZE;
            } else {
                row.in.next = start + 1 + (long long)sizeof(T) * band_y * w;
                source = SOURCE_RAW;
            }
        } else if (end - start < COMPACT_HEADER_BYTES) {
            lane_status = STATUS_BAD_SIZE;
        } else {
            const int run_index = (int)load_byte(data, data_size, start + 1);
            unsigned long long k_nibbles = 0;
            for (int i = 0; i < K_NIBBLE_BYTES; ++i)
                k_nibbles |= (unsigned long long)load_byte(data, data_size, start + 2 + i) << (8 * i);
            const int length_bits = (int)load_byte(data, data_size, start + 2 + K_NIBBLE_BYTES);
            const long long table_pos = (start + COMPACT_HEADER_BYTES) * 8;
            const long long rows_pos = (start + COMPACT_HEADER_BYTES + (tile_h * length_bits + 7) / 8) * 8;
            if (run_index > RUN_INDEX_MAX || length_bits > 31 || (k_nibbles >> (4 * CONTEXTS)) != 0) {
                lane_status = STATUS_BAD_HEADER;
            } else if (rows_pos > end * 8) {
                lane_status = STATUS_BAD_SIZE;
            } else {
                const long long length =
                    lane < h ? (long long)read_bits(data, data_size, table_pos + (band_y + lane) * length_bits,
                                                    length_bits) : 0;
                long long before = 0;  // the bits of the bands before this one
#pragma unroll 1
                for (int r = lane; r < band_y; r += 32)
                    before += (long long)read_bits(data, data_size, table_pos + r * length_bits, length_bits);
                before = __shfl_sync(L3_FULL_MASK, warp_inclusive_scan(before, lane), 31);
                const long long row_start = rows_pos + before + warp_inclusive_scan(length, lane) - length;
                row_end = row_start + length;
                if (lane < h) {
                    if (row_start + length > end * 8)
                        lane_status = STATUS_BAD_SIZE;
                    else if (length == 0 && lane == 0)
                        lane_status = STATUS_CORRUPT;
                }
                copy_row = length == 0 && lane > 0;  // a zero row length copies the row above
                if (lane < h && !copy_row && lane_status == STATUS_OK)
                    reservoir_start(row.in, data, data_size, row_start);
                row.run_index = run_index;
                for (int ctx = 0; ctx < CONTEXTS; ++ctx) {
                    // a mean mapped residual of 1.5 * 2**k, weighted as INITIAL_COUNT samples
                    // (compact.row_state_init)
                    ctx_a[ctx * 32] = (3 * INITIAL_COUNT << ((k_nibbles >> (4 * ctx)) & 15)) >> 1;
                    ctx_n[ctx * 32] = INITIAL_COUNT;
                }
                source = SOURCE_CODED;
            }
        }
        if (plane.colours > 0 && lane == 0) {  // channel 0's stream, read by thread (0, 0), which set up the writer
            writer.colours = plane.colours;
            writer.palette = stream_starts[stream] + PALETTE_HEADER_BYTES;
        }
    }

    __syncthreads();  // the writer, a palette tile's colour count included, is set
    if (writer.colours != 0) {  // block-uniform
        load_palette<T>(writer, data, data_size, table, channel * 32 + lane, 32 * blockDim.y);
        __syncthreads();
    }

    // ---- the wavefront, in strips of `strip` steps between writes
    const int steps = w + h - 1;
    // a strip's write ends each row at a 32-byte boundary, up to 31 columns before the columns
    // every row has finished, so the ring keeps COMPACT_BAND_ROWS + 32 columns besides the strip
    const int strip = whole_tile ? steps : ring - 2 * COMPACT_BAND_ROWS;
    // lane 0 receives its own last sample as N, so its x_nw is the sample before that (WW)
    int x_w = 0;         // this row's last sample: W of the next one, and N of the row below
    int x_nw = 0;        // N received at the previous step: NW of this one
    int written = 0;  // columns already written out (up to each row's sector boundary before them)
    for (int s0 = 0; s0 < steps; s0 += strip) {
        const int s1 = min_of(s0 + strip, steps);
        if (decoding && source == SOURCE_CODED) {
            for (int s = s0; s < s1; ++s) {
                const unsigned long long mine = ((unsigned long long)(unsigned)row.mapped << 32) | (unsigned)x_w;
                const unsigned long long above = __shfl_up_sync(L3_FULL_MASK, mine, 1);
                const int up = (int)(unsigned)above;
                const int col = s - lane;
                if (lane < h && col >= 0 && col < w) {
                    int x;
                    if (copy_row) {
                        x = up;
                    } else {
                        int nw_, n_, w_;
                        if (lane == 0) {
                            if (col == 0) {
                                w_ = n_ = nw_ = 1 << (BITS - 1);
                            } else {
                                w_ = n_ = x_w;
                                nw_ = col == 1 ? x_w : x_nw;
                            }
                        } else if (col == 0) {
                            w_ = n_ = nw_ = up;
                        } else {
                            w_ = x_w;
                            n_ = up;
                            nw_ = x_nw;
                        }
                        const int mapped_up = lane > 0 ? (int)(above >> 32) : 0;
                        x = decode_sample<BITS>(data, data_size, row, ctx_a, ctx_n, w_, n_, nw_, mapped_up, w - col);
                    }
                    my_stage[col & (ring - 1)] = (T)x;
                    x_w = x;
                }
                x_nw = up;
            }
        } else if (decoding && source == SOURCE_ANS) {
            const int precision = ans_block->precision;
            const bool biased = (ans_block->flags & 1) != 0;
            const unsigned char* const slots = ans_slots(ans_block);
            const unsigned char* const contexts = state;
            const int* const bias = reinterpret_cast<const int*>(state + ANS_SHARED_BIAS);
            for (int s = s0; s < s1; ++s) {
                const int up = __shfl_up_sync(L3_FULL_MASK, x_w, 1);
                const int col = s - lane;
                if (lane < h && col >= 0 && col < w) {
                    int nw_, n_, w_;
                    if (lane == 0) {
                        if (col == 0) {
                            w_ = n_ = nw_ = 1 << (BITS - 1);
                        } else {
                            w_ = n_ = x_w;
                            nw_ = col == 1 ? x_w : x_nw;
                        }
                    } else if (col == 0) {
                        w_ = n_ = nw_ = up;
                    } else {
                        w_ = x_w;
                        n_ = up;
                        nw_ = x_nw;
                    }
                    int x = 0;
                    if (lane_status == STATUS_OK) {
                        const int d1 = w_ - nw_, d2 = n_ - nw_;
                        const int activity = ((d1 < 0 ? -d1 : d1) + (d2 < 0 ? -d2 : d2)) >> (BITS - 8);
                        const int ctx = contexts[min_of(activity, ANS_ACTIVITY_LIMIT - 1)];
                        const int mapped = ans_decode_symbol(ans_row, ans_block, slots, ctx, precision);
                        if (mapped < 0) lane_status = ANS_ROW_STATUS;
                        int e = unzigzag(mapped);
                        if (biased) {  // ans.predicted's bias, sign-folded (e + sign * bias spilled at sm_80)
                            const int g = ans_gradient_step<BITS>(n_ - nw_) * 9 + ans_gradient_step<BITS>(nw_ - w_);
                            const int sign = g < 0 ? -1 : 1;
                            e = (e * sign + bias[g < 0 ? -g : g]) * sign;
                        }
                        x = (med(w_, n_, nw_) + e) & ((1 << BITS) - 1);
                    }
                    my_stage[col & (ring - 1)] = (T)x;
                    x_w = x;
                }
                x_nw = up;
            }
        } else if (decoding) {
            // constant, raw or failed (run_value 0): the columns the wavefront would have staged,
            // row by row, consecutive lanes on consecutive samples (a raw row is contiguous)
            T* plane = my_stage - lane * ring;
#pragma unroll 1
            for (int r = 0; r < h; ++r) {
                const int c1 = min_of(w, s1 - r);
#pragma unroll 1
                for (int col = max_of(0, s0 - r) + lane; col < c1; col += 32)
                    plane[r * ring + (col & (ring - 1))] =
                        source == SOURCE_RAW
                            ? (T)load_sample<T>(data, data_size, row.in.next + (r * w + col) * (int)sizeof(T))
                            : (T)row.run_value;
            }
        }
        __syncthreads();
        // after steps [0, s1) row r has columns [0, s1 - r): all h rows have [0, s1 - h + 1)
        const int done = s1 == steps ? w : max_of(written, s1 - h + 1);
        if (writer.colours != 0 || writer.transform != 0) {  // block-uniform: columns [written, done) finished:
#pragma unroll 1                                                       // colours, the colour transform undone
            for (int r = channel; r < h; r += blockDim.y)  // a warp per row
#pragma unroll 1
                for (int col = written + lane; col < done; col += 32)
                    finish_pixel<T, BITS>(writer, table, stage + r * ring + (col & (ring - 1)),
                                          COMPACT_BAND_ROWS * ring);
            __syncthreads();
        }
        const T* staged = stage;
        write_tile_sectors<T>(writer, 0, h, written, done, channel, blockDim.y, lane,
                                    [&](int c, int r, int col) -> unsigned {
                                        return staged[(c * COMPACT_BAND_ROWS + r) * ring + (col & (ring - 1))];
                                    });
        written = done;
        __syncthreads();
    }

    // ---- status: the first failing row in row order, as the CPU decoder stops there (a tall tile's
    // bands report apart, each with its own rank: an earlier band's status is the item's)
    if (decoding) {
        int code = lane_status;
        if (source == SOURCE_CODED) {
            if (lane_status == STATUS_OK && lane < h && !copy_row &&
                (reservoir_position(row.in) != row_end || row.error))
                lane_status = STATUS_CORRUPT;
            const unsigned failing = __ballot_sync(L3_FULL_MASK, lane_status != STATUS_OK);
            const int first = failing ? __ffs(failing) - 1 : h - 1;
            code = __shfl_sync(L3_FULL_MASK, lane_status, first);
            // the stream ends in the byte holding its last bit (checked by its last band)
            const long long* row_ends = reinterpret_cast<long long*>(state + 2 * CONTEXTS * 32 * 4);
            if (!failing && band_y + h == tile_h && (row_ends[h - 1] + 7) / 8 != stream_ends[stream])
                code = STATUS_BAD_SIZE;
        } else if (source == SOURCE_ANS) {
            // ans.row_stream_end: no word left, the state back at 0
            if (lane_status == STATUS_OK && lane < h && (ans_row.left != 0 || ans_row.x != 0))
                lane_status = ANS_ROW_STATUS;
            const unsigned failing = __ballot_sync(L3_FULL_MASK, lane_status != STATUS_OK);
            code = __shfl_sync(L3_FULL_MASK, lane_status, failing ? __ffs(failing) - 1 : 0);
            // the row lengths add up to the stream's size (checked after the last band's rows)
            if (!failing && band_y + h == tile_h) code = ans_block->end_status;
        }
        if (lane == 0)
            report_status(status, task.item, code,
                          stream_rank(items, tasks, channel) + band_y / COMPACT_BAND_ROWS);
    }
}

}  // namespace l3

L3_DECODE_KERNEL(l3_decode_compact, 128, l3::decode_compact_tile)  // a warp per channel, up to 4
