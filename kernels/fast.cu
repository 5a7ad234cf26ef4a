// `fast` mode GPU decoder: one block of 128 threads per tile, the channels and rows of the
// tile in order, every row decoded in parallel (l3codec/fast.py).
//
// Per row: thread t reads the width fields of groups 2t and 2t+1 (at most 256 groups), a
// block-wide exclusive scan turns widths into bit offsets, then every thread unpacks
// its columns' mapped residuals from the widths alone. Row 0 is a delta along the row
// (a block scan of the unzigzagged residuals, exact modulo 2**bits); later rows decode
// their even columns from N, __syncthreads, then their odd columns from the even ones.
//
// Rows are staged in a ring in dynamic shared memory, per channel; each band of
// ring - 1 rows is written out (all channels, inverse colour transform, coalesced)
// once every channel has decoded it, the ring's spare row keeping the row above.
#include "l3_common.cuh"

namespace l3 {

// The fixed part of the dynamic shared memory (FAST_FIXED_BYTES).
struct FastShared {
    TileWriter writer;
    long long data_pos[4];  // next residual bit of each channel's stream
    long long start[4];
    long long end[4];
    int status[4];
    int source[4];  // SOURCE_*
    int value[4];   // the sample of a constant stream
    int scan[FAST_THREADS / 32];
    int groups[FAST_MAX_GROUPS];  // per group of the current row: (bit offset << 5) | width
};
static_assert(sizeof(FastShared) == FAST_FIXED_BYTES, "FAST_FIXED_BYTES must match FastShared");
static_assert(FAST_FIXED_BYTES % 16 == 0, "the staged rows must stay aligned");

enum : int { GROUP_BAD = 1 << 20 };  // added to a group's bit count when its width exceeds bits

// Decode row r of a coded stream into row[0..w) (row_above is row r - 1). Block-uniform:
// every thread calls it with the same arguments. Updates sh.data_pos, or on a bad row
// sh.status and sh.source, as cpu.decode_fast_stream does after decode_fast_row.
template <typename T, int BITS>
L3_DEVICE void decode_fast_row(const unsigned char* __restrict__ data, long long size, FastShared& sh, int channel,
                               int r, int w, T* row, const T* row_above) {
    constexpr int field_bits = BITS == 8 ? 4 : 5;  // fast.width_field_bits
    constexpr int mask = (1 << BITS) - 1;
    const int tid = threadIdx.x;
    const int groups = (w + GROUP_SIZE - 1) / GROUP_SIZE;
    const long long data_pos = sh.data_pos[channel];
    const long long field_pos = (sh.start[channel] + 1) * 8 + (long long)r * groups * field_bits;

    // thread t reads the width fields of groups 2t and 2t + 1
    int width[2] = {0, 0}, group_bits[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
        const int g = 2 * tid + k;
        if (g < groups) {
            width[k] = (int)read_bits(data, size, field_pos + g * field_bits, field_bits);
            group_bits[k] = width[k] * min_of((int)GROUP_SIZE, w - g * GROUP_SIZE) + (width[k] > BITS ? GROUP_BAD : 0);
        }
    }
    int total;
    const int offset = block_exclusive_scan(group_bits[0] + group_bits[1], sh.scan, &total);
    if (2 * tid < groups) sh.groups[2 * tid] = ((offset & (GROUP_BAD - 1)) << 5) | width[0];
    if (2 * tid + 1 < groups)
        sh.groups[2 * tid + 1] = (((offset + group_bits[0]) & (GROUP_BAD - 1)) << 5) | width[1];
    __syncthreads();

    for (int col = tid; col < w; col += FAST_THREADS) {
        const int group = sh.groups[col / GROUP_SIZE];
        const int group_width = group & 31;
        const long long pos = data_pos + (group >> 5) + (col % GROUP_SIZE) * group_width;
        row[col] = (T)read_bits(data, size, pos, group_width);
    }
    __syncthreads();

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
        for (int col = 2 * tid; col < w; col += 2 * FAST_THREADS)
            row[col] = (T)((row_above[col] + unzigzag(row[col])) & mask);
        __syncthreads();
        for (int col = 2 * tid + 1; col < w; col += 2 * FAST_THREADS) {
            const int left = row[col - 1];
            const int up_left = row_above[col - 1];
            const int right = col + 1 < w ? row[col + 1] : left;
            const int up_right = col + 1 < w ? row_above[col + 1] : up_left;
            const int predicted = med((left + right) >> 1, row_above[col], (up_left + up_right) >> 1);
            row[col] = (T)((predicted + unzigzag(row[col])) & mask);
        }
    }
    if (tid == 0) {
        const long long next = data_pos + (total & (GROUP_BAD - 1));
        if (total >= GROUP_BAD) {
            sh.status[channel] = STATUS_BAD_HEADER;
            sh.source[channel] = SOURCE_ZERO;
        } else if (next > sh.end[channel] * 8) {
            sh.status[channel] = STATUS_BAD_SIZE;
            sh.source[channel] = SOURCE_ZERO;
        } else {
            sh.data_pos[channel] = next;
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

    unsigned char* smem = l3_dynamic_shared();
    FastShared& sh = *reinterpret_cast<FastShared*>(smem);
    T* stage = reinterpret_cast<T*>(smem + FAST_FIXED_BYTES);  // [channel][ring][tile_width]

    if (tid < channels) {  // stream headers, one thread per channel
        const long long stream = item.stream_base + (task.tile_y * item.tiles_x + task.tile_x) * channels + tid;
        const long long start = stream_starts[stream], end = stream_ends[stream];
        const int kind = (int)load_byte(data, data_size, start);
        int code = STATUS_OK, source = SOURCE_ZERO;
        long long data_pos = 0;
        if (kind > KIND_RAW) {
            code = STATUS_BAD_KIND;
        } else if (kind == KIND_CONSTANT) {
            if (end - start != 1 + (long long)sizeof(T)) code = STATUS_BAD_SIZE; else source = SOURCE_CONSTANT;
        } else if (kind == KIND_RAW) {
            if (end - start != 1 + (long long)sizeof(T) * h * w) code = STATUS_BAD_SIZE; else source = SOURCE_RAW;
        } else {
            const long long row_fields = (long long)((w + GROUP_SIZE - 1) / GROUP_SIZE) * (BITS == 8 ? 4 : 5);
            data_pos = (start + 1 + (h * row_fields + 7) / 8) * 8;
            if (data_pos > end * 8) code = STATUS_BAD_SIZE; else source = SOURCE_CODED;
        }
        sh.start[tid] = start;
        sh.end[tid] = end;
        sh.data_pos[tid] = data_pos;
        sh.status[tid] = code;
        sh.source[tid] = source;
        sh.value[tid] = source == SOURCE_CONSTANT ? (int)load_sample<T>(data, data_size, start + 1) : 0;
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
                    decode_fast_row<T, BITS>(data, data_size, sh, channel, r, w, row,
                                             plane + ((r + ring - 1) % ring) * tile_width);
                } else if (source == SOURCE_RAW) {
                    const long long base = sh.start[channel] + 1 + (long long)r * w * (long long)sizeof(T);
                    for (int col = tid; col < w; col += FAST_THREADS)
                        row[col] = (T)load_sample<T>(data, data_size, base + (long long)col * (long long)sizeof(T));
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
        // the stream ends in the byte holding its last residual bit
        if (code == STATUS_OK && sh.source[tid] == SOURCE_CODED && (sh.data_pos[tid] + 7) / 8 != sh.end[tid])
            code = STATUS_BAD_SIZE;
        report_status(status, task.item, code);
    }
}

}  // namespace l3

L3_DECODE_KERNEL(l3_decode_fast, l3::FAST_THREADS, l3::decode_fast_tile)
