// `fast` mode GPU decoder (format version 2, l3codec/fast.py, docs/FORMAT.md §7): one block of
// FAST_THREADS threads per tile, the channels and rows of the tile in order, every row decoded
// in parallel.
//
// Per row: the A bit (any residual non-zero); thread t owns group t: its flag, a block scan of the
// flags places its header, the header gives the group's bit length, a block scan of the lengths
// places its data. Then thread t decodes column t of each
// FAST_THREADS-column chunk. A packed sample and a Rice remainder sit at fixed offsets; a Rice
// quotient comes from the group's unary part, read in words of up to 32 bits by the group's first
// 32 lanes, which rank its ones with popcounts into a shared table (one_at[rank] = position), so
// sample i's quotient is one_at[i] - one_at[i - 1] - 1. Row 0 is a delta along the row (a block
// scan of the residuals, exact modulo 2**bits); later rows are predicted in FAST_PHASES passes, a
// barrier after each.
//
// Every read stops at the end of the item's file: bytes past it read as zero, as the CPU decoder
// reads a file, so both see the same bits wherever a corrupt stream sends them.
//
// Rows are staged in a ring in dynamic shared memory, per channel; each band of ring - 1 rows is
// written out (all channels, inverse colour transform, coalesced) once every channel has decoded
// it, the ring's spare row keeping the row above.
#include "l3_common.cuh"

namespace l3 {

enum : int {  // fast.py (tests/test_cuda_c.py checks them)
    FAST_GROUP_SIZE = 64,
    FAST_QSUM_BITS = 7,
    FAST_PHASES = 4,
};

enum : int {
    FAST_PERIOD = 1 << (FAST_PHASES - 1),      // phase 0 predicts every FAST_PERIOD-th column from N
    FAST_ROW_GROUPS = 4096 / FAST_GROUP_SIZE,  // groups of the widest tile row (format.MAX_TILE_WIDTH)
    FAST_CODE_SHIFT = 5,  // a group's table entry: code (5 bits), qsum, data offset
    FAST_OFFSET_SHIFT = FAST_CODE_SHIFT + FAST_QSUM_BITS,
};
static_assert(FAST_THREADS % FAST_GROUP_SIZE == 0, "a chunk of columns holds whole groups");
static_assert(FAST_ROW_GROUPS <= FAST_THREADS, "a thread per group of the widest row");
static_assert(FAST_GROUP_SIZE + (1 << FAST_QSUM_BITS) <= 65536, "one_at holds a unary part's positions");
// the longest row: 4096 samples of MAX_K + 1 <= 15 bits plus every group's qsum
static_assert((4096LL * 15 + FAST_ROW_GROUPS * (1 << FAST_QSUM_BITS)) < (1LL << (32 - FAST_OFFSET_SHIFT)),
              "a row's data offsets fit a group's table entry");

// fast.code_bits: a header's code, packed widths 0..bits then Rice parameters 0..fast.max_rice_k(bits) =
// bits - 2, fills its field, so every code is legal
template <int BITS>
L3_DEVICE constexpr int fast_code_bits() { return BITS == 8 ? 4 : 5; }
static_assert((1 << fast_code_bits<8>()) - 1 - 8 - 1 == 8 - 2, "the largest code is the largest Rice parameter");
static_assert((1 << fast_code_bits<16>()) - 1 - 16 - 1 == 16 - 2, "the largest code is the largest Rice parameter");

// The fixed part of the dynamic shared memory (at most FAST_FIXED_BYTES; the staged rows follow).
struct FastShared {
    TileWriter writer;
    long long data_pos[4];  // bit position of each channel's next row
    long long end[4];       // each channel's stream end (byte)
    int status[4];
    int source[4];  // SOURCE_*
    int value[4];   // the sample of a constant stream
    long long row_data;  // the current row's first data bit (block-uniform, kept here, not in registers)
    long long row_end;   // its end
    int scan[FAST_THREADS / 32];
    // per group of the current row: (data bit offset << FAST_OFFSET_SHIFT) | (qsum << FAST_CODE_SHIFT) | code;
    // 0 (packed, width 0) for an unflagged group
    unsigned group[FAST_ROW_GROUPS];
    // per chunk of columns (two, alternating): the positions of each Rice group's ones, by rank
    unsigned short one_at[2][FAST_THREADS];
    // and whether each Rice group's unary part holds its n codes exactly
    unsigned char sound[2][FAST_THREADS / FAST_GROUP_SIZE];
};
static_assert(sizeof(FastShared) <= FAST_FIXED_BYTES, "FastShared must fit FAST_FIXED_BYTES");
static_assert(FAST_FIXED_BYTES % 16 == 0, "the staged rows must stay aligned");

// Decode row r of a coded stream into row[0..w) (row_above is row r - 1). Block-uniform: every
// thread calls it with the same arguments. Updates sh.data_pos, or on a bad row sh.status and
// sh.source, as fast.decode_fast_stream does row by row (§7.2: the row's headers in the stream,
// their qsums, the row's end, then its Rice values).
template <typename T, int BITS>
L3_DEVICE void decode_fast_row(const unsigned char* __restrict__ data, long long size, FastShared& sh, int channel,
                               int r, int w, T* row, const T* row_above) {
    constexpr int code_bits = fast_code_bits<BITS>();
    constexpr int header_bits = code_bits + FAST_QSUM_BITS;
    constexpr int mask = (1 << BITS) - 1;
    const int tid = threadIdx.x;
    const int groups = (w + FAST_GROUP_SIZE - 1) / FAST_GROUP_SIZE;
    const long long row_pos = sh.data_pos[channel];
    // the A bit and the warp's 32 group flags: read by one lane of each warp, shuffled to the others
    const int warp_lane = tid & 31;
    unsigned a_bit = 0, warp_flags = 0;
    if (warp_lane == 0) {
        a_bit = read_bits(data, size, row_pos, 1);
        if (tid < groups) warp_flags = read_bits(data, size, row_pos + 1 + tid, 32);
    }
    const bool any = __shfl_sync(L3_FULL_MASK, a_bit, 0) != 0;  // block-uniform
    warp_flags = __shfl_sync(L3_FULL_MASK, warp_flags, 0);
    bool bad_header = false;
    if (tid == 0) sh.row_data = sh.row_end = row_pos + 1;  // read by thread 0 alone unless any

    if (any) {
        // thread t owns group t: its flag, then its header (placed by a scan of the flags), then its
        // data (placed by a scan of the lengths)
        const bool flag = tid < groups && ((warp_flags >> warp_lane) & 1);
        int flagged;
        const int header = block_exclusive_scan((int)flag, sh.scan, &flagged);
        __syncthreads();  // the scan's warp sums are reused
        const long long header_pos = row_pos + 1 + groups;
        unsigned entry = 0;
        int length = 0;
        bool bad = false;
        if (flag) {
            const unsigned fields = read_bits(data, size, header_pos + (long long)header * header_bits, header_bits);
            const int code = (int)(fields & ((1u << code_bits) - 1));
            const int qsum = (int)(fields >> code_bits);
            const int n = min_of((int)FAST_GROUP_SIZE, w - tid * FAST_GROUP_SIZE);
            if (code <= BITS) {  // packed, code bits per sample; qsum unused
                bad = qsum != 0;
                length = n * code;
            } else {  // Rice: n remainders of k bits, n ones and qsum zeros of unary
                length = n * (code - BITS) + qsum;  // k = code - BITS - 1
            }
            entry = ((unsigned)qsum << FAST_CODE_SHIFT) | (unsigned)code;
        }
        int total;
        const int offset = block_exclusive_scan(length, sh.scan, &total);
        if (tid < groups) sh.group[tid] = entry | ((unsigned)offset << FAST_OFFSET_SHIFT);
        if (tid == 0) {
            sh.row_data = header_pos + (long long)flagged * header_bits;
            sh.row_end = sh.row_data + total;
        }
        bad_header = __syncthreads_or(bad);  // and sh.group, sh.row_data are complete
    }

    // the mapped residuals, FAST_THREADS columns at a time (a block-uniform loop)
    bool corrupt = false;
    for (int c0 = 0; c0 < w; c0 += FAST_THREADS) {
        const int col = c0 + tid;
        const int buffer = (c0 / FAST_THREADS) & 1;
        unsigned short* one_at = sh.one_at[buffer];
        int mapped = 0, k = -1, lane = 0, remainder = 0;
        if (any && col < w) {
            const int g = col / FAST_GROUP_SIZE;
            const unsigned entry = sh.group[g];
            const int code = (int)(entry & ((1u << FAST_CODE_SHIFT) - 1));
            const int qsum = (int)((entry >> FAST_CODE_SHIFT) & ((1u << FAST_QSUM_BITS) - 1));
            const long long pos = sh.row_data + (entry >> FAST_OFFSET_SHIFT);
            const int n = min_of((int)FAST_GROUP_SIZE, w - g * FAST_GROUP_SIZE);
            lane = col - g * FAST_GROUP_SIZE;
            if (code <= BITS) {
                mapped = (int)read_bits(data, size, pos + (long long)lane * code, code);
            } else {
                k = code - BITS - 1;
                remainder = (int)read_bits(data, size, pos + (long long)lane * k, k);
                const int span = min_of(n, 32);
                if (lane < span) {
                    // the unary part (n + qsum bits) in words of span bits: lane i files the one at bit i
                    // of a word under its rank, so the group's one_at[rank] holds the rank-th one's position
                    const long long unary = pos + (long long)n * k;
                    const int unary_bits = n + qsum;
                    int ones = 0;
                    bool last = false;
                    for (int at = 0; at < unary_bits; at += span) {
                        const int count = min_of(span, unary_bits - at);
                        const unsigned word = read_bits(data, size, unary + at, count);
                        if ((word >> lane) & 1) {
                            const int rank = ones + __popc(word & ((1u << lane) - 1));
                            if (rank < n) one_at[tid - lane + rank] = (unsigned short)(at + lane);
                        }
                        ones += __popc(word);
                        last = (word >> (count - 1)) & 1;
                    }
                    // n codes, ending with the part: the quotients sum to qsum
                    if (lane == 0) sh.sound[buffer][tid / FAST_GROUP_SIZE] = ones == n && last;
                }
            }
        }
        __syncthreads();  // one_at and sound are filed
        if (k >= 0) {
            if (sh.sound[buffer][tid / FAST_GROUP_SIZE]) {
                const int quotient = one_at[tid] - (lane ? one_at[tid - 1] + 1 : 0);
                mapped = (quotient << k) | remainder;
                corrupt |= mapped > mask;
            } else {
                corrupt = true;
            }
        }
        if (col < w) row[col] = (T)(mapped & mask);
    }
    const bool row_corrupt = __syncthreads_or(corrupt);  // and the residuals are staged

    if (r == 0) {
        // X[0][c] = (half + sum of unzigzag(m[0..c])) mod 2**bits: each thread a run of columns
        const int per_thread = (w + FAST_THREADS - 1) / FAST_THREADS;
        const int c0 = min_of(w, tid * per_thread), c1 = min_of(w, c0 + per_thread);
        int sum = 0;
        for (int c = c0; c < c1; ++c) sum += unzigzag(row[c]);
        int unused;
        int value = (1 << (BITS - 1)) + block_exclusive_scan(sum, sh.scan, &unused);
        for (int c = c0; c < c1; ++c) {
            value += unzigzag(row[c]);
            row[c] = (T)(value & mask);
        }
    } else {
        // phase 0: columns c % FAST_PERIOD == 0 from N; phase j: distance d = FAST_PERIOD >> j, columns
        // c % 2d == d from their neighbours d away, decoded in earlier phases
        for (int phase = 0; phase < FAST_PHASES; ++phase) {
            const int step = phase == 0 ? FAST_PERIOD : FAST_PERIOD >> (phase - 1);
            const int d = phase == 0 ? 0 : step >> 1;
            for (int col = d + tid * step; col < w; col += FAST_THREADS * step) {
                int predicted = row_above[col];
                if (phase > 0) {
                    const int left = row[col - d];
                    const int up_left = row_above[col - d];
                    const int right = col + d < w ? row[col + d] : left;
                    const int up_right = col + d < w ? row_above[col + d] : up_left;
                    predicted = med((left + right) >> 1, predicted, (up_left + up_right) >> 1);
                }
                row[col] = (T)((predicted + unzigzag(row[col])) & mask);
            }
            __syncthreads();
        }
    }
    if (tid == 0) {  // fast.decode_fast_row's checks, in its order (docs/FORMAT.md §7.2)
        const long long end = sh.end[channel] * 8;
        int code = STATUS_OK;
        if (sh.row_data > end) {  // the A bit, or the flags and headers
            code = STATUS_BAD_SIZE;
        } else if (bad_header) {
            code = STATUS_BAD_HEADER;
        } else if (sh.row_end > end) {
            code = STATUS_BAD_SIZE;
        } else if (row_corrupt) {
            code = STATUS_CORRUPT;
        }
        if (code != STATUS_OK) {
            sh.status[channel] = code;
            sh.source[channel] = SOURCE_ZERO;
        } else {
            sh.data_pos[channel] = sh.row_end;
        }
    }
    __syncthreads();
}

template <typename T, int BITS>
L3_DEVICE void decode_fast_tile(const unsigned char* __restrict__ data, long long data_size,
                                const long long* __restrict__ stream_starts, const long long* __restrict__ stream_ends,
                                const L3Item* __restrict__ items, const L3Task* __restrict__ tasks,
                                long long task_count, unsigned char* __restrict__ out, int* __restrict__ status) {
    if ((long long)blockIdx.x >= task_count) return;
    const L3Task task = tasks[blockIdx.x];
    const L3Item& item = items[task.item];
    const int tid = threadIdx.x;
    // a launch that does not fit the item (a sample size the kernel lacks, a wrong block) reports instead
    if (item.bits != BITS || blockDim.x != FAST_THREADS || blockDim.y != 1 || blockDim.z != 1) {
        if (tid == 0) report_status(status, task.item, STATUS_BAD_HEADER);
        return;
    }
    const int channels = (int)item.channels;
    const int tile_width = (int)item.tile_width;
    const long long tile_y0 = task.tile_y * item.tile_height;
    const long long tile_x0 = task.tile_x * item.tile_width;
    const int h = (int)min_of(item.tile_height, item.height - tile_y0);
    const int w = (int)min_of(item.tile_width, item.width - tile_x0);
    const int ring = fast_ring_rows(channels, tile_width, item.tile_height, sizeof(T));
    const int band = ring - 1;
    // the item's file ends with its last stream: reads stop there, as the CPU decoder's stop at the file's end
    const long long tiles_y = (item.height + item.tile_height - 1) / item.tile_height;
    const long long size = min_of(data_size, stream_ends[item.stream_base + tiles_y * item.tiles_x * channels - 1]);

    unsigned char* smem = l3_dynamic_shared();
    FastShared& sh = *reinterpret_cast<FastShared*>(smem);
    T* stage = reinterpret_cast<T*>(smem + FAST_FIXED_BYTES);  // [channel][ring][tile_width]

    if (tid < channels) {  // stream headers, one thread per channel
        const long long stream = item.stream_base + (task.tile_y * item.tiles_x + task.tile_x) * channels + tid;
        const long long start = stream_starts[stream], end = stream_ends[stream];
        const int kind = (int)load_byte(data, size, start);
        int code = STATUS_OK, source = SOURCE_ZERO;
        if (kind > KIND_RAW) {
            code = STATUS_BAD_KIND;
        } else if (kind == KIND_CONSTANT) {
            if (end - start != 1 + (long long)sizeof(T)) code = STATUS_BAD_SIZE; else source = SOURCE_CONSTANT;
        } else if (kind == KIND_RAW) {
            if (end - start != 1 + (long long)sizeof(T) * h * w) code = STATUS_BAD_SIZE; else source = SOURCE_RAW;
        } else {
            source = SOURCE_CODED;  // its rows are checked as they are decoded
        }
        sh.end[tid] = end;
        sh.data_pos[tid] = (start + 1) * 8;  // a coded stream's rows start after the kind byte
        sh.status[tid] = code;
        sh.source[tid] = source;
        sh.value[tid] = source == SOURCE_CONSTANT ? (int)load_sample<T>(data, size, start + 1) : 0;
    }
    if (tid == 0) init_tile_writer(sh.writer, item, out, tile_y0, tile_x0, h, w, sizeof(T));
    __syncthreads();

    for (int r0 = 0; r0 < h; r0 += band) {
        const int r1 = min_of(h, r0 + band);
        for (int channel = 0; channel < channels; ++channel) {
            T* plane = stage + channel * ring * tile_width;
            for (int r = r0; r < r1; ++r) {
                T* row = plane + (r % ring) * tile_width;
                const int source = sh.source[channel];  // block-uniform: changed only between barriers
                if (source == SOURCE_CODED) {
                    decode_fast_row<T, BITS>(data, size, sh, channel, r, w, row,
                                             plane + ((r + ring - 1) % ring) * tile_width);
                } else if (source == SOURCE_RAW) {
                    const long long base = (sh.data_pos[channel] >> 3) + (long long)r * w * (long long)sizeof(T);
                    for (int col = tid; col < w; col += FAST_THREADS)
                        row[col] = (T)load_sample<T>(data, size, base + (long long)col * (long long)sizeof(T));
                } else {
                    const T value = (T)sh.value[channel];
                    for (int col = tid; col < w; col += FAST_THREADS) row[col] = value;
                }
            }
        }
        __syncthreads();
        const T* staged = stage;
        write_tile_part<T, BITS>(sh.writer, r0, r1, 0, w, tid, FAST_THREADS, [&](int c, int r, int col) -> unsigned {
            return staged[(c * ring + r % ring) * tile_width + col];
        });
        __syncthreads();
    }

    if (tid < channels) {
        int code = sh.status[tid];
        // the stream ends in the byte holding its last bit
        if (code == STATUS_OK && sh.source[tid] == SOURCE_CODED && (sh.data_pos[tid] + 7) / 8 != sh.end[tid])
            code = STATUS_BAD_SIZE;
        report_status(status, task.item, code);
    }
}

}  // namespace l3

L3_DECODE_KERNEL(l3_decode_fast, l3::FAST_THREADS, l3::decode_fast_tile)
