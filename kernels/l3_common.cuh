// Device logic shared by the compact and fast CUDA C decoders.
//
// Everything here mirrors the normative Python (l3codec/bitio.py, compact.py, fast.py,
// colour.py, cpu.py) and must decode bit for bit like it. The kernels are plain CUDA C++
// with no library headers, so they build unchanged with NVRTC and, for the tests, with
// g++ under cuda_emulation.h.
#pragma once

#include "l3_constants.cuh"  // generated from the Python modules: kernels/cuda_c.py, constants_header
#include "l3_records.cuh"    // L3Item, L3Task, L3Expansion from the numpy dtypes: cuda_c.py, records_header

#define L3_DEVICE __device__ __forceinline__
#define L3_HOST_DEVICE __host__ __device__ inline
#define L3_FULL_MASK 0xffffffffu

// A loop nvcc unrolls completely. The host emulation's g++ is asked to unroll it too, so that its
// basic blocks match the SASS when bench/gpu.py prices the blocks it ran with the SASS's lines.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define L3_UNROLL _Pragma("unroll")
#else
#define L3_UNROLL _Pragma("GCC unroll 32")
#endif

// A decode kernel taking 8- and 16-bit items alike, so a batch needs one launch per mode:
// every block decodes one tile of one item, so the branch is uniform across the block and
// its barriers. tile_decoder<T, BITS> has the kernel's parameters.
#define L3_DECODE_KERNEL(name, threads, tile_decoder)                                                     \
    extern "C" __global__ void __launch_bounds__(threads, 8)                                               \
        name(const unsigned char* __restrict__ data, long long data_size,                                  \
             const long long* __restrict__ stream_starts, const long long* __restrict__ stream_ends,       \
             const L3Item* __restrict__ items, const L3Task* __restrict__ tasks, long long task_count,    \
             unsigned char* __restrict__ out, int* __restrict__ status) {                                  \
        if ((long long)blockIdx.x < task_count && items[tasks[blockIdx.x].item].bits == 16)                \
            tile_decoder<unsigned short, 16>(data, data_size, stream_starts, stream_ends, items, tasks,    \
                                             task_count, out, status);                                     \
        else                                                                                               \
            tile_decoder<unsigned char, 8>(data, data_size, stream_starts, stream_ends, items, tasks,      \
                                           task_count, out, status);                                       \
    }

// The block's dynamic shared memory (the only shared memory the kernels use).
L3_DEVICE unsigned char* l3_dynamic_shared() {
    extern __shared__ __align__(16) unsigned char l3_shared_memory[];
    return l3_shared_memory;
}

namespace l3 {

// ------------------------------------------------------------------ constants
// The format's and the Python codec's constants (KIND_*, STATUS_*, compact.py's CONTEXTS ...) and the
// shared-memory sizes below come from l3_constants.cuh, which kernels/cuda_c.py generates.

// Where a warp or block takes a stream's samples from, once its header is checked.
enum : int {
    SOURCE_ZERO = 0,  // a failed stream: zeros, so corrupt input stays deterministic
    SOURCE_CONSTANT = 1,
    SOURCE_RAW = 2,
    SOURCE_CODED = 3,
    SOURCE_ANS = 4,  // compact's kind 10: rANS rows through the stream's table block (ans.cuh)
};

// ------------------------------------------------------------------ shared-memory layouts
// The host computes the same numbers in kernels/cuda_c.py (shared_memory_bytes); the
// emulation build exports these functions so the tests compare both.

// compact: a TileWriter (56 bytes, in a 64-byte slot), a palette tile's colour table
// ([PALETTE_MAX_COLOURS][channels] samples), per channel the adaptive sums and counts of the 32 row
// decoders ([2][CONTEXTS][32] int) and their row ends ([32] int64), then per channel a ring of
// decoded columns ([32][ring] samples): COMPACT_HEADER_SHARED_BYTES, COMPACT_STATE_BYTES, a ring of
// COMPACT_RING_MIN .. COMPACT_RING_MAX columns (a wider tile is written in strips).
static_assert(COMPACT_STATE_BYTES == 2 * CONTEXTS * 32 * 4 + 32 * 8, "a channel's row decoder state");

L3_HOST_DEVICE int compact_ring_columns(long long tile_width) {
    int ring = COMPACT_RING_MIN;
    while (ring < tile_width && ring < COMPACT_RING_MAX) ring <<= 1;
    return ring;
}

L3_HOST_DEVICE long long palette_table_bytes(long long channels, long long sample_bytes) {
    return PALETTE_MAX_COLOURS * channels * sample_bytes;
}

L3_HOST_DEVICE long long compact_shared_bytes(long long channels, long long tile_width, long long sample_bytes) {
    return COMPACT_HEADER_SHARED_BYTES + channels * COMPACT_STATE_BYTES +
           channels * COMPACT_BAND_ROWS * compact_ring_columns(tile_width) * sample_bytes +
           palette_table_bytes(channels, sample_bytes);
}

// fast: a fixed header (FastShared in fast.cu, FAST_FIXED_BYTES), then per channel a ring of
// decoded rows ([ring][tile_width] samples): bands of ring - 1 rows are written out at once,
// the ring's extra row keeps the row above the band; then a palette tile's colour table. FAST_THREADS:
// a thread per group of the widest tile's row head (fast.cu asserts it); the unpack takes a warp per
// group, the prediction a thread per period of 8 columns. FAST_STAGE_BUDGET: bytes of staged rows
// aimed at; at least 2 rows are staged.

L3_HOST_DEVICE int fast_ring_rows(long long channels, long long tile_width, long long tile_height,
                                  long long sample_bytes) {
    // a 32-bit division (a 64-bit one is a subroutine call on the GPU): a row of a tile is at most
    // 4 * 4096 * 2 bytes
    long long rows = FAST_STAGE_BUDGET / (int)(channels * tile_width * sample_bytes);
    if (rows > tile_height + 1) rows = tile_height + 1;
    if (rows < 2) rows = 2;
    return (int)rows;
}

L3_HOST_DEVICE long long fast_shared_bytes(long long channels, long long tile_width, long long tile_height,
                                           long long sample_bytes) {
    return FAST_FIXED_BYTES +
           (long long)fast_ring_rows(channels, tile_width, tile_height, sample_bytes) * channels * tile_width *
               sample_bytes +
           palette_table_bytes(channels, sample_bytes);
}

// ------------------------------------------------------------------ small helpers

template <typename V>
L3_DEVICE V min_of(V a, V b) { return a < b ? a : b; }

template <typename V>
L3_DEVICE V max_of(V a, V b) { return a > b ? a : b; }

// Report a failing stream's code. rank: the stream's index among its item's streams << STATUS_BAND_BITS,
// plus a compact tile's band. The item's entry keeps the largest key, the lowest rank's, so it ends with
// the code of the first failing stream (band) in stream order, as the CPU decoder reports (batch.status_key).
L3_DEVICE void report_status(int* status, long long item, int code, long long rank) {
    if (code != STATUS_OK)
        atomicMax(&status[item], (int)(((STATUS_RANK_LIMIT - 1 - rank) << STATUS_CODE_BITS) | code));
}

// The rank of this block's task's tile-channel stream (band 0; a compact band adds its index), for the
// report at a kernel's end: its fields are read again there (volatile, so not kept from the kernel's
// start: kept, they spilled other registers in both decode kernels).
L3_DEVICE long long stream_rank(const L3Item* items, const L3Task* tasks, int channel) {
    const volatile L3Task& task = tasks[blockIdx.x];
    const volatile L3Item& item = items[task.item];
    return ((task.tile_y * item.tiles_x + task.tile_x) * item.channels + channel) << STATUS_BAND_BITS;
}

// ------------------------------------------------------------------ bit reading (bitio.py)
// Bytes at or past data_size read as zero, exactly like bitio.load56, so a corrupt
// stream decodes garbage (caught by the checks) but never reads out of bounds.

L3_DEVICE unsigned load_byte(const unsigned char* __restrict__ data, long long size, long long pos) {
    return (pos >= 0 && pos < size) ? data[pos] : 0u;
}

// Eight little-endian bytes from byte pos (bitio.load56 reads seven; the eighth only adds
// bits no caller looks at).
L3_DEVICE unsigned long long load64(const unsigned char* __restrict__ data, long long size, long long pos) {
    const long long aligned = pos & ~7LL;
    if (pos >= 0 && aligned + 16 <= size && (reinterpret_cast<unsigned long long>(data) & 7) == 0) {
        const unsigned long long* words = reinterpret_cast<const unsigned long long*>(data + aligned);
        const unsigned long long lo = words[0];
        const unsigned long long hi = words[1];
        const int shift = (int)(pos & 7) * 8;
        return shift ? (lo >> shift) | (hi << (64 - shift)) : lo;
    }
    unsigned long long value = 0;
    for (int i = 0; i < 8; ++i) value |= (unsigned long long)load_byte(data, size, pos + i) << (8 * i);
    return value;
}

// At least 57 bits starting at bit_pos, LSB first (bitio.peek_bits, a byte narrower, guarantees 49).
L3_DEVICE unsigned long long peek57(const unsigned char* __restrict__ data, long long size, long long bit_pos) {
    return load64(data, size, bit_pos >> 3) >> (bit_pos & 7);
}

// count (0..32) bits at bit_pos.
L3_DEVICE unsigned read_bits(const unsigned char* __restrict__ data, long long size, long long bit_pos, int count) {
    return (unsigned)(peek57(data, size, bit_pos) & ((1ull << count) - 1));
}

// Four little-endian bytes from byte pos, a multiple of 4 and not negative: one aligned 32-bit
// load unless the word reaches past data_size (or the buffer itself is unaligned).
L3_DEVICE unsigned load_word(const unsigned char* __restrict__ data, long long size, long long pos) {
    if (pos + 4 <= size && (reinterpret_cast<unsigned long long>(data) & 3) == 0)
        return *reinterpret_cast<const unsigned*>(data + pos);
    return load_byte(data, size, pos) | load_byte(data, size, pos + 1) << 8 | load_byte(data, size, pos + 2) << 16 |
           load_byte(data, size, pos + 3) << 24;
}

// A lane's bit reservoir over its bit stream (LSB first, the bits peek57 returns): `bits`
// holds the next `count` bits (the bits above them are zero); refill() tops it up to at least
// 32 with one aligned 4-byte load, so a reader sees every stream byte once.
struct BitReservoir {
    unsigned long long bits;
    long long next;  // byte offset of the next word to load (a multiple of 4)
    int count;
};

L3_DEVICE void reservoir_start(BitReservoir& in, const unsigned char* __restrict__ data, long long size,
                               long long bit_pos) {
    const int skip = (int)(bit_pos & 31);
    in.next = (bit_pos >> 5) * 4;
    in.bits = load_word(data, size, in.next) >> skip;
    in.count = 32 - skip;
    in.next += 4;
}

// Afterwards at least 32 bits are in the reservoir.
L3_DEVICE void refill(BitReservoir& in, const unsigned char* __restrict__ data, long long size) {
    if (in.count < 32) {
        in.bits |= (unsigned long long)load_word(data, size, in.next) << in.count;
        in.next += 4;
        in.count += 32;
    }
}

L3_DEVICE void consume(BitReservoir& in, int count) {
    in.bits >>= count;
    in.count -= count;
}

// The bit position of the next unread bit.
L3_DEVICE long long reservoir_position(const BitReservoir& in) { return in.next * 8 - in.count; }

// One little-endian sample of sizeof(T) bytes (constant and raw streams).
template <typename T>
L3_DEVICE unsigned load_sample(const unsigned char* __restrict__ data, long long size, long long pos) {
    unsigned value = load_byte(data, size, pos);
    if (sizeof(T) == 2) value |= load_byte(data, size, pos + 1) << 8;
    return value;
}

// ------------------------------------------------------------------ prediction and coding (compact.py)

L3_DEVICE int med(int w, int n, int nw) {
    const int lo = min_of(w, n), hi = max_of(w, n);
    if (nw >= hi) return lo;
    if (nw <= lo) return hi;
    return w + n - nw;
}

// (m >> 1) for even m, -((m + 1) >> 1) for odd m >= 0, without a branch
L3_DEVICE int unzigzag(int mapped) { return (mapped >> 1) ^ -(mapped & 1); }

// RUN_ORDER[index] of compact.py (the JPEG-LS J table), without a lookup table.
L3_DEVICE int run_order(int index) {
    return index < 16 ? index >> 2 : (index < 24 ? 4 + ((index - 16) >> 1) : index - 16);
}

// compact.activity_context: how many of ACTIVITY_THRESHOLDS << (bits - 8) the activity exceeds.
template <int BITS>
L3_DEVICE int activity_context(int w, int n, int nw, int mapped_n, int mapped_w) {
    const int d1 = w - nw, d2 = n - nw;
    const int activity = (((d1 < 0 ? -d1 : d1) + (d2 < 0 ? -d2 : d2)) >> 1) + mapped_n + mapped_w;
    // activity > t << (BITS - 8) exactly when scaled > t: a population count of the thresholds
    // below 32 under a mask of the bits below scaled, plus the last one
    const int scaled = ((activity - 1) >> (BITS - 8)) + 1;
    constexpr unsigned thresholds = 1u << 1 | 1u << 3 | 1u << 6 | 1u << 10 | 1u << 16 | 1u << 26;
    return __popc(thresholds & ~(0xffffffffu << min_of(scaled, 31))) + (scaled > 44);
}

// compact.rice_parameter: the least k >= 0 with n << (k + 1) >= a, at most BITS (n >= 1), without
// a loop. n << d, d the difference of their bit lengths, has a's top bit, so k + 1 is d or d + 1.
template <int BITS>
L3_DEVICE int rice_parameter(int a, int n) {
    const int d = max_of(__clz(n) - __clz(a), 0);
    return min_of(max_of(d - ((n << d) >= a), 0), BITS);
}

// colour.add_green for one chroma sample.
template <int BITS>
L3_DEVICE unsigned add_green(unsigned difference, unsigned green) {
    return (difference + green - (1u << (BITS - 1))) & ((1u << BITS) - 1);
}

// ------------------------------------------------------------------ scans

template <typename V>
L3_DEVICE V warp_inclusive_scan(V value, int lane) {
L3_UNROLL
    for (int delta = 1; delta < 32; delta <<= 1) {
        const V other = __shfl_up_sync(L3_FULL_MASK, value, delta);
        if (lane >= delta) value += other;
    }
    return value;
}

// ------------------------------------------------------------------ output

// Where a tile's samples go: the tile's intersection with the item's region, in tile
// coordinates, and the address of its first pixel. Built by one thread into shared memory
// and read by all after a barrier (so the decoding loops do not keep it in registers).
struct TileWriter {
    unsigned char* out;  // output byte of tile pixel (row_lo, col_lo)
    long long pitch;     // bytes between output rows
    int row_lo, row_hi;  // tile rows inside the region
    int col_lo, col_hi;  // tile columns inside the region
    int channels;
    int transform;       // the inverse colour transform (TRANSFORM_*; 0 for fewer than 3 channels)
    int colours;         // a palette tile's colour count (staged channel 0 holds indices); 0: none
    int pad;
    long long palette;   // a palette tile's colour table: byte offset in the data
};
static_assert(sizeof(TileWriter) == 56, "TileWriter layout");
static_assert(sizeof(TileWriter) <= COMPACT_HEADER_SHARED_BYTES, "TileWriter must fit its slot");

L3_DEVICE void init_tile_writer(TileWriter& writer, const L3Item& item, unsigned char* out, long long tile_y0,
                                long long tile_x0, int h, int w, int sample_bytes) {
    const long long row_lo = max_of(item.region_y, tile_y0), row_hi = min_of(item.region_y + item.region_h, tile_y0 + h);
    const long long col_lo = max_of(item.region_x, tile_x0), col_hi = min_of(item.region_x + item.region_w, tile_x0 + w);
    writer.pitch = item.out_row_pitch;
    writer.out = out + item.out_offset + (row_lo - item.region_y) * item.out_row_pitch +
                 (col_lo - item.region_x) * item.channels * sample_bytes;
    writer.row_lo = (int)(row_lo - tile_y0);
    writer.row_hi = (int)(row_hi - tile_y0);
    writer.col_lo = (int)(col_lo - tile_x0);
    writer.col_hi = (int)(col_hi - tile_x0);
    writer.channels = (int)item.channels;
    writer.transform = item.channels >= 3 ? (int)item.transform : 0;
    writer.colours = 0;
    writer.palette = 0;
}

// streams.open_stream: where a tile-channel's plane stream begins. colours is PLANE_OWN for kinds 0-2 and 5,
// a palette's colour count (its table at start + PALETTE_HEADER_BYTES, its index plane's stream at
// `start` after it), or PLANE_MEMBER for a member (nothing of its own to decode). The kernels never
// meet an LZ stream (kinds 6-9) in channel 0, nor a pixel LZ tile's members: the host points them at
// the raw planes its expansion makes (l3codec/batch.py); elsewhere kinds 7 and 9 are refused like
// open_stream's.
struct PlaneStream {
    long long start;
    int status;
    int colours;
};

L3_DEVICE PlaneStream open_stream(const unsigned char* __restrict__ data, long long size, long long start,
                                  long long end, int channel, long long tile_start, int channels, int sample_bytes) {
    const int kind = (int)load_byte(data, size, start);
    const int tile_kind = (int)load_byte(data, size, tile_start);
    const bool in_member_tile =
        channel != 0 && (tile_kind == KIND_PALETTE || tile_kind == KIND_PIXEL_LZ || tile_kind == KIND_PIXEL_LZ_CODED);
    if (kind == KIND_PALETTE_MEMBER) {
        if (!in_member_tile) return {start, STATUS_BAD_KIND, PLANE_MEMBER};
        return {start, end - start == 1 ? (int)STATUS_OK : (int)STATUS_BAD_SIZE, PLANE_MEMBER};
    }
    if (in_member_tile) return {start, STATUS_BAD_KIND, PLANE_OWN};  // such a tile's channels 1.. are members
    if (kind != KIND_PALETTE) return {start, STATUS_OK, PLANE_OWN};  // kinds 6-9 too: refused as > KIND_RAW
    if (channel != 0) return {start, STATUS_BAD_KIND, PLANE_OWN};
    if (end - start < PALETTE_HEADER_BYTES) return {start, STATUS_BAD_SIZE, PLANE_OWN};
    const int colours = (int)load_byte(data, size, start + 1) + 1;
    const long long plane_start = start + PALETTE_HEADER_BYTES + (long long)colours * channels * sample_bytes;
    if (plane_start >= end) return {start, STATUS_BAD_SIZE, PLANE_OWN};
    return {plane_start, STATUS_OK, colours};
}

// A palette tile's colour table, [colour][channel], copied from the stream into shared memory by the
// block (then a barrier, which the caller makes).
template <typename T>
L3_DEVICE void load_palette(const TileWriter& writer, const unsigned char* __restrict__ data, long long size,
                            T* table, int thread, int threads) {
    for (int i = thread; i < writer.colours * writer.channels; i += threads)
        table[i] = (T)load_sample<T>(data, size, writer.palette + (long long)i * (long long)sizeof(T));
}

// Turn a staged index into its colour in every channel's staged plane (streams.palette_sample: an
// index past the last colour selects the last); `sample` is channel 0's, channel c's is c * plane
// samples further.
template <typename T>
L3_DEVICE void expand_index(const TileWriter& writer, const T* table, T* sample, long long plane) {
    const int colour = min_of((int)sample[0], writer.colours - 1);
#pragma unroll 1  // 1 to 4 channels: nvcc's 4-way copy never runs
    for (int c = writer.channels - 1; c >= 0; --c) sample[c * plane] = table[colour * writer.channels + c];
}

// Undo the colour transform of one staged pixel in place (colour.py: R = P0 + G - half; B = P2 + G -
// half for subtract-green, P2 + ((R + G) >> 1) - half for rg-mean); `sample` is channel 0's, channel
// c's is c * plane samples further. Once per pixel before the write-out, which then copies: writing
// it per output sample fetched green again for channels 0 and 2 (about 0.4 SASS per sample).
template <typename T, int BITS>
L3_DEVICE void inverse_transform(const TileWriter& writer, T* sample, long long plane) {
    const unsigned green = sample[plane];
    const unsigned red = add_green<BITS>(sample[0], green);
    sample[0] = (T)red;
    sample[2 * plane] = (T)add_green<BITS>(sample[2 * plane], writer.transform == TRANSFORM_RGB_MEAN ? (red + green) >> 1
                                                                                                    : green);
}

// Make a staged pixel what the output holds: a palette index becomes its colour, then the colour
// transform is undone (the writer's palette and transform say which applies).
template <typename T, int BITS>
L3_DEVICE void finish_pixel(const TileWriter& writer, const T* table, T* sample, long long plane) {
    if (writer.colours != 0) expand_index<T>(writer, table, sample, plane);
    if (writer.transform != 0) inverse_transform<T, BITS>(writer, sample, plane);
}

// Where write_tile_sectors ends an output row whose first byte is at an address `misalign`
// past a 128-byte boundary, once the tile's columns before c are staged: the region's end
// once c reaches it, else the 32-byte boundary at or before column c, but not before the row's
// start. In bytes from that 128-byte boundary.
L3_DEVICE int sector_boundary(const TileWriter& writer, int misalign, int c, int pixel_bytes) {
    if (c >= writer.col_hi) return misalign + (writer.col_hi - writer.col_lo) * pixel_bytes;
    if (c <= writer.col_lo) return misalign;
    return max_of(misalign, (misalign + (c - writer.col_lo) * pixel_bytes) & ~31);
}

// Write the staged samples of tile rows [r0, r1) and columns [c0, c1) that fall inside the region
// (HWC interleaved, little-endian samples, as finish_pixel left them; fetch(channel, row, col)
// returns a staged plane sample, tile coordinates; nothing outside the region is written),
// with each output row cut at sector_boundary: calls for consecutive column
// ranges write every byte once, and columns from c0 - 31 on must still be staged. Warp `warp`
// of `warps` writes rows r0 + warp, r0 + warp + warps, ...: lane i the i-th 4-byte word of each
// 128-byte aligned span of the row, so a warp's stores fill whole 32-byte sectors except at the
// region's edges, whose partial words are written byte by byte.
template <typename T, typename Fetch>
L3_DEVICE void write_tile_sectors(const TileWriter& writer, int r0, int r1, int c0, int c1, int warp, int warps,
                                  int lane, const Fetch& fetch) {
    r0 = max_of(r0, writer.row_lo);
    r1 = min_of(r1, writer.row_hi);
    const int channels = writer.channels;
    const int pixel_bytes = channels * (int)sizeof(T);
    // channels is 1..4: a shift, or for 3 a division by a constant (a multiply)
    const auto pixel_of = [channels](unsigned sample) -> unsigned {
        return channels == 3 ? sample / 3u : sample >> (channels >> 1);
    };
#pragma unroll 1
    for (int r = r0 + warp; r < r1; r += warps) {
        unsigned char* const row_out = writer.out + (r - writer.row_lo) * writer.pitch;
        // byte offsets from the 128-byte boundary at or before the row's first byte
        const int misalign = (int)(reinterpret_cast<unsigned long long>(row_out) & 127);
        unsigned char* const span = row_out - misalign;
        const int lo = sector_boundary(writer, misalign, c0, pixel_bytes);
        const int hi = sector_boundary(writer, misalign, c1, pixel_bytes);
        // the same number of spans for every lane, a __syncwarp after each: one store instruction
        // per span, as on a GPU, for the emulator's traffic counts too
#pragma unroll 1
        for (int span_start = lo & ~127; span_start < hi; span_start += 128) {
            const int word = span_start + 4 * lane;
            if (word + 4 <= lo || word >= hi) {
                // outside the row's bytes
            } else if (word >= lo && word + 4 <= hi) {  // the samples of a whole word (sizeof(T) divides 4)
                const unsigned sample = (unsigned)(word - misalign) / (unsigned)sizeof(T);
                unsigned pixel = pixel_of(sample);
                int channel = (int)(sample - pixel * channels);
                unsigned value = 0;
L3_UNROLL
                for (int i = 0; i < 4 / (int)sizeof(T); ++i) {
                    value |= fetch(channel, r, writer.col_lo + (int)pixel) << (8 * (int)sizeof(T) * i);
                    if (++channel == channels) {
                        channel = 0;
                        ++pixel;
                    }
                }
                *reinterpret_cast<unsigned*>(span + word) = value;
            } else {  // a word cut by the region's edge
#pragma unroll 1
                for (int byte = max_of(word, lo); byte < min_of(word + 4, hi); ++byte) {
                    const unsigned offset = (unsigned)(byte - misalign);
                    const unsigned sample = offset / (unsigned)sizeof(T);
                    const unsigned pixel = pixel_of(sample);
                    const unsigned value = fetch((int)(sample - pixel * channels), r, writer.col_lo + (int)pixel);
                    span[byte] = (unsigned char)(value >> (8 * (offset % sizeof(T))));
                }
            }
            __syncwarp();
        }
    }
}

}  // namespace l3
