// `fast` mode GPU decoder (format version 5, l3codec/fast.py, docs/FORMAT.md §7): one block of
// FAST_THREADS threads per tile, the channels and rows of the tile in order, every row decoded
// in parallel.
//
// Every read of the compressed bits is a warp's coalesced load of aligned 4-byte words, lane i the
// i-th word of the span the warp reads next (warp_load_words), and each lane takes its bits from
// them with shuffles (warp_bits), so a warp asks for each byte it needs about once. Per row: the
// warps holding groups (thread t owns group t) load the A bit and all the flags, then their groups'
// headers, placed by counting the flags; a warp scan of the group lengths places the data (the
// groups of later warps add the earlier warps' totals). Then a warp per group: one load for the
// group's fields and, for a Rice group, the unary part after them; lane i decodes samples 2i and
// 2i + 1 (adjacent fields, one 32-bit window); a sparse group's lanes scatter its listed samples
// into a per-warp table (one_at, zeroed first) and read their two back; a bitmap group's lanes
// take their two bits and rank them with a warp scan to find their values. The warp ranks the
// unary part's ones with popcounts into a per-warp table (one_at[rank] = position), so sample i's
// quotient is one_at[i] - one_at[i - 1] - 1. Row 0 is a delta along the row (warp 0, a warp scan of the
// residuals, exact modulo 2**bits). Later rows: phase 0 (columns c % FAST_PERIOD == 0, from N) as the
// residuals are staged, then a thread per period of FAST_PERIOD columns runs the other phases in
// registers (predict_period).
//
// Every read stops at the end of the item's file: bytes past it read as zero, as the CPU decoder
// reads a file, so both see the same bits wherever a corrupt stream sends them.
//
// Rows are staged in a ring in dynamic shared memory, per channel: a band of ring - 1 rows at ring
// rows 1.., ring row 0 holding the row above the band. Once every channel has decoded a band, its
// last row is copied to ring row 0 for the next, its pixels are finished in place (palette colours,
// inverse colour transform: finish_pixel) and written out (write_tile_sectors: whole 32-byte sectors).
#include "l3_common.cuh"

namespace l3 {

// fast.py's FAST_GROUP_SIZE, FAST_QSUM_BITS ... come from l3_constants.cuh (kernels/cuda_c.py)
enum : int {
    FAST_PERIOD = 1 << (FAST_PHASES - 1),      // phase 0 predicts every FAST_PERIOD-th column from N
    FAST_ROW_GROUPS = MAX_TILE_WIDTH / FAST_GROUP_SIZE,  // groups of the widest tile row
    FAST_WIDTH_SHIFT = 2,  // a group's table entry: form (2 bits), width (5 bits), qsum, data offset
    FAST_CODE_SHIFT = FAST_WIDTH_SHIFT + 5,
    FAST_OFFSET_SHIFT = FAST_CODE_SHIFT + FAST_QSUM_BITS,
};
static_assert(FAST_THREADS % FAST_GROUP_SIZE == 0, "a chunk of columns holds whole groups");
static_assert(FAST_ROW_GROUPS <= FAST_THREADS, "a thread per group of the widest row");
static_assert(FAST_GROUP_SIZE + (1 << FAST_QSUM_BITS) <= 65536, "one_at holds a unary part's positions");
// the longest row: every group's header at its longest, a sparse group's whole count field of 16-bit
// entries (a Rice group holds at most 64 * 16 + 127 bits, with the refused k = 15; a bitmap 64 + 127 * 16)
static_assert(FAST_ROW_GROUPS * ((1LL << FAST_QSUM_BITS) - 1) * (FAST_POSITION_BITS + 16) <
                  (1LL << (32 - FAST_OFFSET_SHIFT)),
              "a row's data offsets fit a group's table entry");
static_assert(1 << FAST_POSITION_BITS == FAST_GROUP_SIZE, "a sparse position addresses its group");

// fast.code_bits: the short table (kind KIND_CODED), sparse (0), packed widths 1..bits then Rice parameters
// 0..fast.max_rice_k(bits) = bits - 2, fills its field, so every code is legal; the extended table
// (KIND_CODED_EXTENDED) has one more bit: bits codes per form, its last (Rice k = bits - 1) refused
template <int BITS>
L3_DEVICE constexpr int fast_code_bits(bool extended) { return (BITS == 8 ? 4 : 5) + (extended ? 1 : 0); }
static_assert((1 << fast_code_bits<8>(false)) - 1 - 8 - 1 == 8 - 2, "the largest code is the largest Rice parameter");
static_assert((1 << fast_code_bits<16>(false)) - 1 - 16 - 1 == 16 - 2, "the largest code is the largest Rice parameter");
static_assert((1 << fast_code_bits<8>(true)) == 4 * 8 && (1 << fast_code_bits<16>(true)) == 4 * 16,
              "the extended table: four forms of bits codes each");

// fast.group_form: a code's form (FAST_FORM_*) in the low FAST_WIDTH_SHIFT bits, its width above them
// (for the extended table: the code's quotient and remainder by BITS)
template <int BITS, bool EXTENDED>
L3_DEVICE unsigned fast_group_form(int code) {
    int form, width;
    if (!EXTENDED) {
        form = code == FAST_SPARSE_CODE ? FAST_FORM_SPARSE : code <= BITS ? FAST_FORM_PACKED : FAST_FORM_RICE;
        width = code == FAST_SPARSE_CODE ? BITS : code <= BITS ? code : code - BITS - 1;
    } else {
        form = code / BITS;
        width = code % BITS + (form != FAST_FORM_RICE);
    }
    return (unsigned)form | ((unsigned)width << FAST_WIDTH_SHIFT);
}

// The fixed part of the dynamic shared memory (at most FAST_FIXED_BYTES; the staged rows follow).
struct FastShared {
    TileWriter writer;
    long long data_pos[4];  // bit position of each channel's next row
    long long end[4];       // each channel's stream end (byte)
    int status[4];
    int source[4];  // SOURCE_*
    int value[4];   // the sample of a constant stream
    int extended[4];  // a coded stream's group codes come from the extended table
    int rows;         // the tile's rows (kept here, not in registers)
    long long row_data;  // the current row's first data bit (block-uniform, kept here, not in registers)
    long long row_end;   // its end
    long long size;      // where the item's file ends: reads stop there (kept here, not in registers)
    int scan[FAST_THREADS / 32];  // a row's data bits per warp of groups
    // per group of the current row: (data bit offset << FAST_OFFSET_SHIFT) | (qsum << FAST_CODE_SHIFT) |
    // fast_group_form, the offset from the data of the group's warp (groups 32.. add scan[0]); 0 for an
    // unflagged group (a sparse group of no samples)
    unsigned group[FAST_ROW_GROUPS];
    // per warp: the positions of its Rice group's ones in the unary part, by rank; or its sparse
    // group's samples
    unsigned short one_at[FAST_THREADS / 32][FAST_GROUP_SIZE];
};
static_assert(sizeof(FastShared) <= FAST_FIXED_BYTES && FAST_FIXED_BYTES - sizeof(FastShared) < 16,
              "FAST_FIXED_BYTES is sizeof(FastShared) rounded up to 16");
static_assert(FAST_FIXED_BYTES % 16 == 0, "the staged rows must stay aligned");

// Lane i of a warp loads the i-th aligned 4-byte word from the one holding bit `first_bit`, for as
// many lanes as bits [first_bit, end_bit) span: a coalesced load of the bits the warp reads next,
// which warp_bits then hands out (bit offsets from first_bit & ~31).
L3_DEVICE unsigned warp_load_words(const unsigned char* __restrict__ data, long long size, long long first_bit,
                                   long long end_bit, int lane) {
    const long long first_word = first_bit >> 5;
    const long long words = end_bit > first_bit ? ((end_bit + 31) >> 5) - first_word : 0;
    return lane < words ? load_word(data, size, (first_word + lane) * 4) : 0u;
}

// The 32 bits at bit `at` of the words warp_load_words spread over the warp (every lane takes part;
// `at` is below 31 * 32).
L3_DEVICE unsigned warp_bits(unsigned word, int at) {
    const unsigned lo = __shfl_sync(L3_FULL_MASK, word, at >> 5);
    const unsigned hi = __shfl_sync(L3_FULL_MASK, word, (at >> 5) + 1);
    return __funnelshift_r(lo, hi, (unsigned)at);  // one SHF: the wrap takes at & 31
}

// Word i of a group's words: word (lane i: word i) and, for 16-bit samples, word2 (lane i: word
// 32 + i; i below 63); 8-bit groups span at most 32 words (i below 32).
template <int BITS>
L3_DEVICE unsigned group_word(unsigned word, unsigned word2, int i) {
    if (BITS == 8) return __shfl_sync(L3_FULL_MASK, word, i);
    const unsigned low = __shfl_sync(L3_FULL_MASK, word, i & 31), high = __shfl_sync(L3_FULL_MASK, word2, i & 31);
    return i < 32 ? low : high;
}

// The 32 bits at bit `at` of a group's words (group_word's; `at` below 62 * 32, for 8-bit groups
// below 31 * 32).
template <int BITS>
L3_DEVICE unsigned group_bits(unsigned word, unsigned word2, int at) {
    if (BITS == 8) return warp_bits(word, at);
    const int i = at >> 5;
    return __funnelshift_r(group_word<BITS>(word, word2, i), group_word<BITS>(word, word2, i + 1), (unsigned)at);
}

// The low n bits set (none for n <= 0, all for n >= 32).
L3_DEVICE unsigned low_bits(int n) { return n >= 32 ? ~0u : n <= 0 ? 0u : (1u << n) - 1; }

// Phases 1 .. FAST_PHASES - 1 of the period of columns b .. b + FAST_PERIOD - 1 of a row, in registers:
// distance d = FAST_PERIOD / 2 .. 1, columns c % 2d == d from their neighbours d away, decoded
// before (columns b and b + FAST_PERIOD, the next period's first, in phase 0). Past the row's end
// (w) a column's right neighbours are missing: R = L, NE = NW.
template <typename T, int BITS>
L3_DEVICE void predict_period(T* row, const T* row_above, int b, int w) {
    constexpr int mask = (1 << BITS) - 1;
    int x[FAST_PERIOD + 1], up[FAST_PERIOD + 1];
L3_UNROLL
    for (int o = 0; o <= FAST_PERIOD; ++o) {
        const int c = min_of(b + o, w - 1);  // a clamped column's value is never used
        x[o] = row[c];
        up[o] = row_above[c];
    }
L3_UNROLL
    for (int d = FAST_PERIOD / 2; d >= 1; d >>= 1) {
L3_UNROLL
        for (int o = d; o < FAST_PERIOD; o += 2 * d) {
            const bool inside = b + o + d < w;
            const int left = x[o - d], right = inside ? x[o + d] : left;
            const int up_left = up[o - d], up_right = inside ? up[o + d] : up_left;
            const int predicted = med((left + right) >> 1, up[o], (up_left + up_right) >> 1);
            x[o] = (predicted + unzigzag(x[o])) & mask;
        }
    }
L3_UNROLL
    for (int o = 1; o < FAST_PERIOD; ++o)
        if (b + o < w) row[b + o] = (T)x[o];
}

// Decode row r of a coded stream into row[0..w) (row_above is row r - 1). Block-uniform: every
// thread calls it with the same arguments. Updates sh.data_pos, or on a bad row sh.status and
// sh.source, as fast.decode_fast_stream does row by row (§7.2: the row's headers in the stream,
// their qsums, the row's end, then its Rice values).
template <typename T, int BITS, bool EXTENDED>
L3_DEVICE void decode_fast_row(const unsigned char* __restrict__ data, FastShared& sh, int channel, int r, int w,
                               T* row, const T* row_above) {
    const long long size = sh.size;
    constexpr int code_bits = fast_code_bits<BITS>(EXTENDED);
    constexpr int header_bits = code_bits + FAST_QSUM_BITS;
    constexpr int mask = (1 << BITS) - 1;
    const int tid = threadIdx.x, lane = tid & 31, warp_first = tid & ~31;
    const int groups = (w + FAST_GROUP_SIZE - 1) / FAST_GROUP_SIZE;
    const long long row_pos = sh.data_pos[channel];

    // The row's head. Thread t owns group t; each warp holding groups loads the A bit and all the
    // row's flags (at most 65 bits), then its own groups' headers, placed by counting the flags.
    bool bad = false;
    if (warp_first < groups) {  // warp-uniform
        const int head_at = (int)(row_pos & 31);
        const unsigned head = warp_load_words(data, size, row_pos, row_pos + 1 + groups, lane);
        const bool any = warp_bits(head, head_at) & 1;
        const unsigned flags_lo = any ? warp_bits(head, head_at + 1) & low_bits(groups) : 0u;  // groups 0..31
        const unsigned flags_hi = any ? warp_bits(head, head_at + 33) & low_bits(groups - 32) : 0u;  // 32..63
        const unsigned warp_flags = warp_first ? flags_hi : flags_lo;
        const int warp_before = warp_first ? __popc(flags_lo) : 0;  // flagged groups of earlier warps
        const long long header_pos = row_pos + 1 + groups;
        const long long warp_headers = header_pos + (long long)warp_before * header_bits;
        const unsigned words = warp_load_words(data, size, warp_headers,
                                               warp_headers + __popc(warp_flags) * header_bits, lane);
        const int before = __popc(warp_flags & low_bits(lane));
        const unsigned fields = warp_bits(words, (int)(warp_headers & 31) + before * header_bits);
        unsigned entry = 0;
        int length = 0;
        if ((warp_flags >> lane) & 1) {
            const int code = (int)(fields & ((1u << code_bits) - 1));
            const unsigned form_width = fast_group_form<BITS, EXTENDED>(code);
            const int form = (int)(form_width & ((1u << FAST_WIDTH_SHIFT) - 1));
            const int width = (int)(form_width >> FAST_WIDTH_SHIFT);
            const int qsum = (int)((fields >> code_bits) & ((1u << FAST_QSUM_BITS) - 1));
            const int n = min_of((int)FAST_GROUP_SIZE, w - tid * FAST_GROUP_SIZE);
            if (form == FAST_FORM_SPARSE) {  // qsum listed samples, each a position and a value
                bad = qsum > n;
                length = qsum * (FAST_POSITION_BITS + width);
            } else if (form == FAST_FORM_PACKED) {  // width bits per sample; qsum unused
                bad = qsum != 0;
                length = n * width;
            } else if (form == FAST_FORM_RICE) {  // n remainders of k = width bits, n ones and qsum zeros of unary
                bad = width > BITS - 2;  // the extended table's last code
                length = n * (width + 1) + qsum;
            } else {  // bitmap: n bits, then qsum values
                bad = qsum > n;
                length = n + qsum * width;
            }
            entry = ((unsigned)qsum << FAST_CODE_SHIFT) | form_width;
        }
        // data offsets within the warp; the group table's readers add the earlier warps' bits (sh.scan)
        const int inclusive = warp_inclusive_scan(length, lane);
        if (tid < groups) sh.group[tid] = entry | ((unsigned)(inclusive - length) << FAST_OFFSET_SHIFT);
        if (lane == 31) sh.scan[tid >> 5] = inclusive;
        if (tid == 0)
            sh.row_data = any ? header_pos + (long long)(__popc(flags_lo) + __popc(flags_hi)) * header_bits
                              : row_pos + 1;
    }
    const bool bad_header = __syncthreads_or(bad);  // sh.group, sh.scan and sh.row_data are complete
    const long long row_data = sh.row_data;
    const int low_warp_bits = sh.scan[0];  // the data bits of groups 0..31
    if (tid == 0) sh.row_end = row_data + low_warp_bits + (groups > 32 ? sh.scan[1] : 0);

    // The mapped residuals, a warp per group: lane i holds samples 2i and 2i + 1, whose fields are
    // adjacent (2 * width <= 32 bits). The warp loads the group's bits (fields, then a Rice group's
    // unary part) with one coalesced load, a word per lane (a second for a 16-bit group over 32 words),
    // and shuffles each lane its fields.
    unsigned corrupt = 0;
    unsigned short* one_at = sh.one_at[tid >> 5];
    for (int g = tid >> 5; g < groups; g += FAST_THREADS / 32) {  // warp-uniform
        const unsigned entry = sh.group[g];
        const int form = (int)(entry & ((1u << FAST_WIDTH_SHIFT) - 1));
        // a packed field, a Rice remainder (k bits), a listed value; sparse and bitmap fields are read below
        const int width = (int)((entry >> FAST_WIDTH_SHIFT) & ((1u << (FAST_CODE_SHIFT - FAST_WIDTH_SHIFT)) - 1));
        const int qsum = (int)((entry >> FAST_CODE_SHIFT) & ((1u << FAST_QSUM_BITS) - 1));
        const int n = min_of((int)FAST_GROUP_SIZE, w - g * FAST_GROUP_SIZE);
        const bool rice = form == FAST_FORM_RICE;
        // a sparse or bitmap group's listed samples (an unflagged group: none); more than n is a bad header
        const int listed = min_of(qsum, n);
        const bool sparse = form == FAST_FORM_SPARSE, bitmap = form == FAST_FORM_BITMAP;
        const long long first = row_data + (entry >> FAST_OFFSET_SHIFT) + (g >= 32 ? low_warp_bits : 0);
        const int unary_at = (int)(first & 31) + n * width;  // bit offsets from first & ~31
        const int unary_bits = rice ? n + qsum : 0;
        const int data_bits = sparse   ? listed * (FAST_POSITION_BITS + width)
                              : bitmap ? n + listed * width
                                       : n * width + unary_bits;
        unsigned word = 0, word2 = 0;
        if (data_bits != 0) {  // warp-uniform
            const long long end = first + data_bits;
            word = warp_load_words(data, size, first, end, lane);
            if (BITS == 16) word2 = warp_load_words(data, size, ((first >> 5) + 32) << 5, end, lane);
        }
        const int field_width = sparse || bitmap ? 0 : width;  // a packed field or a Rice remainder
        const unsigned pair = group_bits<BITS>(word, word2, (int)(first & 31) + 2 * lane * field_width);
        int mapped0 = (int)(pair & low_bits(field_width));
        int mapped1 = (int)((pair >> field_width) & low_bits(field_width));
        if (EXTENDED && bitmap) {  // warp-uniform: samples 2i and 2i + 1 take their bits, ranked by a warp scan
            const unsigned own = group_bits<BITS>(word, word2, (int)(first & 31) + 2 * lane) &
                                 low_bits(min_of(2, n - 2 * lane));
            const int ones = __popc(own);
            const int after = warp_inclusive_scan(ones, lane);
            const int rank = after - ones;
            // the lane's values are adjacent (2 * width <= 32 bits); a rank past the listed values reads
            // within the group's words and is never kept
            const unsigned values = group_bits<BITS>(word, word2, (int)(first & 31) + n + min_of(rank, 63) * width);
            const int rank1 = rank + (int)(own & 1);  // sample 2i + 1's, if listed
            mapped0 = (own & 1) && rank < listed ? (int)(values & low_bits(width)) : 0;
            mapped1 = (own & 2) && rank1 < listed ? (int)((values >> ((own & 1) * width)) & low_bits(width)) : 0;
            // fast.decode_bitmap_group: exactly qsum bits set
            corrupt |= (unsigned)(__shfl_sync(L3_FULL_MASK, after, 31) != qsum);
        }
        const int sample = 2 * lane, col = g * FAST_GROUP_SIZE + sample;
        if (rice) {  // warp-uniform
            // the unary part, 32 bits at a time: lane i files the one at bit i under its rank, so
            // one_at[rank] holds the rank-th one's position in the part (the bits after the part, in its
            // last window, rank after its own ones)
            int ones = 0;
            // the windows are consecutive words at one shift: a window's high word is the next one's low
            int next_word = unary_at >> 5;
            unsigned low = group_word<BITS>(word, word2, next_word);
#pragma unroll 1
            for (int at = 0; at < unary_bits; at += 32) {
                const unsigned high = group_word<BITS>(word, word2, ++next_word);
                const unsigned bits = __funnelshift_r(low, high, (unsigned)unary_at);
                low = high;
                const int rank = ones + __popc(bits & low_bits(lane));
                if (((bits >> lane) & 1) && rank < n) one_at[rank] = (unsigned short)(at + lane);
                ones += __popc(bits);
            }
            __syncwarp();  // one_at is filed
            // n codes ending with the part (the quotients sum to qsum): its n-th one is its last bit
            const bool sound = ones >= n && one_at[n - 1] == unary_bits - 1;
            if (sample < n && !sound) {
                corrupt = 1;  // fewer ones than samples: ranks past them were never filed, so none is read
            } else if (sample < n) {
                const int at0 = one_at[sample];
                mapped0 |= (at0 - (sample ? one_at[sample - 1] + 1 : 0)) << width;
                corrupt |= (unsigned)(mapped0 > mask);
                if (sample + 1 < n) {
                    mapped1 |= (one_at[sample + 1] - at0 - 1) << width;
                    corrupt |= (unsigned)(mapped1 > mask);
                }
            }
            __syncwarp();  // one_at is read before the warp's next group files it
        } else if (sparse && listed != 0) {  // warp-uniform; fast.sparse_entry's checks
            one_at[sample] = 0;
            one_at[sample + 1] = 0;
            __syncwarp();  // the group is zero
            const int positions_at = (int)(first & 31), values_at = positions_at + listed * FAST_POSITION_BITS;
            const int value_width = EXTENDED ? width : BITS;  // the short table's are BITS wide
            const unsigned value_mask = low_bits(value_width);
            int previous = -1;  // the position of the entry before this lane's (entry 31's for entry 32)
#pragma unroll 1
            for (int j = lane; j - lane < listed; j += 32) {  // warp-uniform: entry j's position and value
                const int position =
                    (int)(group_bits<BITS>(word, word2, positions_at + j * FAST_POSITION_BITS) & (FAST_GROUP_SIZE - 1));
                const int value = (int)(group_bits<BITS>(word, word2, values_at + j * value_width) & value_mask);
                const int up = __shfl_up_sync(L3_FULL_MASK, position, 1);
                if (lane > 0) previous = up;
                if (j < listed) {
                    corrupt |= (unsigned)!(previous < position && position < n);
                    one_at[position] = (unsigned short)value;
                }
                previous = __shfl_sync(L3_FULL_MASK, position, 31);  // lane 0's, for entry 32
            }
            __syncwarp();  // the listed samples are in place
            mapped0 = one_at[sample];
            mapped1 = one_at[sample + 1];
            __syncwarp();  // one_at is read before the warp's next group uses it
        }
        if (sample < n) {
            // phase 0 (columns c % FAST_PERIOD == 0, predicted by N alone) right away; others keep m
            row[col] = (T)((r > 0 && col % FAST_PERIOD == 0 ? row_above[col] + unzigzag(mapped0) : mapped0) & mask);
            if (sample + 1 < n) row[col + 1] = (T)(mapped1 & mask);
        }
    }
    const bool row_corrupt = __syncthreads_or((int)corrupt);  // and the residuals are staged

    if (r == 0) {
        // X[0][c] = (half + sum of unzigzag(m[0..c])) mod 2**bits: warp 0 alone, each lane a run of columns
        if (tid < 32) {
            const int per_lane = (w + 31) / 32;
            const int c0 = min_of(w, lane * per_lane), c1 = min_of(w, c0 + per_lane);
            int sum = 0;
#pragma unroll 1
            for (int c = c0; c < c1; ++c) sum += unzigzag(row[c]);
            int value = (1 << (BITS - 1)) + warp_inclusive_scan(sum, lane) - sum;
#pragma unroll 1
            for (int c = c0; c < c1; ++c) {
                value += unzigzag(row[c]);
                row[c] = (T)(value & mask);
            }
        }
    } else {
        // phases 1 .. FAST_PHASES - 1, a thread per period of FAST_PERIOD columns
        for (int b = tid * FAST_PERIOD; b < w; b += FAST_THREADS * FAST_PERIOD)
            predict_period<T, BITS>(row, row_above, b, w);
    }
    if (tid == 0) {  // fast.decode_fast_row_residuals's checks, in its order (docs/FORMAT.md §7.2)
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

// Row r of a raw stream (w samples from byte base) into row[0..w): each thread loads an aligned 4-byte
// word of the stream (a warp's loads coalesce: each sector requested once) and stores its bytes that
// belong to the row, not a bounds-checked load per byte.
template <typename T>
L3_DEVICE void stage_raw_row(const unsigned char* __restrict__ data, long long data_size, long long base, int w,
                             T* row, int tid) {
    const int bytes = w * (int)sizeof(T);
    const int skip = (int)(base & 3);  // the first word's bytes before the row
    const long long aligned = base - skip;
    unsigned char* out = reinterpret_cast<unsigned char*>(row);
#pragma unroll 1
    for (int at = 4 * tid; at < skip + bytes; at += 4 * FAST_THREADS) {
        const unsigned word = load_word(data, data_size, aligned + at);
L3_UNROLL
        for (int i = 0; i < 4; ++i) {
            const int to = at + i - skip;
            if (to >= 0 && to < bytes) out[to] = (unsigned char)(word >> (8 * i));
        }
    }
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
    // a launch that does not fit the item (a sample size the kernel lacks, a wrong block) reports instead,
    // at rank 0: before any stream's status
    if (item.bits != BITS || blockDim.x != FAST_THREADS || blockDim.y != 1 || blockDim.z != 1) {
        if (tid == 0) report_status(status, task.item, STATUS_BAD_HEADER, 0);
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
    // a coded stream's reads stop at the end of the item's bytes, as the CPU decoder's stop at the file's
    // end; the other reads stay inside their streams, which may lie in the LZ scratch area past it
    const long long size = min_of(data_size, item.data_end);

    unsigned char* smem = l3_dynamic_shared();
    FastShared& sh = *reinterpret_cast<FastShared*>(smem);
    T* stage = reinterpret_cast<T*>(smem + FAST_FIXED_BYTES);  // [channel][ring][tile_width]

    int colours = PLANE_OWN;  // thread 0: channel 0's palette colours and where its stream starts
    long long palette_stream = 0;
    if (tid < channels) {  // stream headers, one thread per channel
        const long long stream = item.stream_base + (task.tile_y * item.tiles_x + task.tile_x) * channels + tid;
        const long long end = stream_ends[stream];
        const PlaneStream plane = open_stream(data, data_size, stream_starts[stream], end, tid, stream_starts[stream - tid],
                                              channels, (int)sizeof(T));
        const long long start = plane.start;
        const int kind = (int)load_byte(data, data_size, start);
        int code = STATUS_OK, source = SOURCE_ZERO;
        colours = plane.colours;
        palette_stream = stream_starts[stream];
        if (plane.status != STATUS_OK) {
            code = plane.status;
        } else if (colours == PLANE_MEMBER) {
            // channel 0 stages the tile's indices; this channel stages zeros the writer never reads
        } else if (kind > KIND_RAW && kind != KIND_CODED_EXTENDED) {
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
        sh.value[tid] = source == SOURCE_CONSTANT ? (int)load_sample<T>(data, data_size, start + 1) : 0;
        sh.extended[tid] = kind == KIND_CODED_EXTENDED;
    }
    if (tid == 0) {
        init_tile_writer(sh.writer, item, out, tile_y0, tile_x0, h, w, sizeof(T));
        if (colours > 0) {
            sh.writer.colours = colours;
            sh.writer.palette = palette_stream + PALETTE_HEADER_BYTES;
        }
        sh.size = size;
        sh.rows = h;
    }
    __syncthreads();

    for (int r0 = 0; r0 < sh.rows; r0 += band) {
        const int r1 = min_of(sh.rows, r0 + band);
        for (int channel = 0; channel < channels; ++channel) {
            T* plane = stage + channel * ring * tile_width;
            for (int r = r0; r < r1; ++r) {
                T* row = plane + (r - r0 + 1) * tile_width;
                const int source = sh.source[channel];  // block-uniform: changed only between barriers
                if (source == SOURCE_CODED) {
                    if (sh.extended[channel])  // block-uniform
                        decode_fast_row<T, BITS, true>(data, sh, channel, r, w, row, row - tile_width);
                    else
                        decode_fast_row<T, BITS, false>(data, sh, channel, r, w, row, row - tile_width);
                } else if (source == SOURCE_RAW) {
                    const long long base = (sh.data_pos[channel] >> 3) + (long long)r * w * (long long)sizeof(T);
                    stage_raw_row<T>(data, data_size, base, w, row, tid);
                } else {
                    const T value = (T)sh.value[channel];
#pragma unroll 1  // a few rounds (w / FAST_THREADS): nvcc's 4-way copy rarely runs
                    for (int col = tid; col < w; col += FAST_THREADS) row[col] = value;
                }
            }
        }
        __syncthreads();
        if (r1 < sh.rows) {  // row 0 of the ring takes the band's last row, the row above the next band
            for (int channel = 0; channel < channels; ++channel) {
                T* plane = stage + channel * ring * tile_width;
                for (int col = tid; col < w; col += FAST_THREADS) plane[col] = plane[(r1 - r0) * tile_width + col];
            }
        }
        if (sh.writer.colours != 0 || sh.writer.transform != 0) {  // block-uniform: a palette tile's indices
            T* table = stage + (long long)ring * channels * tile_width;  // become colours, the colour transform
            if (r0 == 0 && sh.writer.colours != 0)                       // is undone, but for the copy in ring
                load_palette<T>(sh.writer, data, data_size, table, tid, FAST_THREADS);  // row 0, which the next
            __syncthreads();                                                          // band predicts from
#pragma unroll 1
            for (int r = 1; r <= r1 - r0; ++r)
#pragma unroll 1
                for (int col = tid; col < w; col += FAST_THREADS)
                    finish_pixel<T, BITS>(sh.writer, table, stage + r * tile_width + col, (long long)ring * tile_width);
            __syncthreads();
        }
        const T* staged = stage;
        const int first_row = 1 - r0;  // the ring row of tile row r, less r
        write_tile_sectors<T>(sh.writer, r0, r1, 0, w, tid >> 5, FAST_THREADS / 32, tid & 31,
                                    [&](int c, int r, int col) -> unsigned {
                                        return staged[(c * ring + r + first_row) * tile_width + col];
                                    });
        __syncthreads();
    }

    if (tid < channels) {
        int code = sh.status[tid];
        // the stream ends in the byte holding its last bit
        if (code == STATUS_OK && sh.source[tid] == SOURCE_CODED && (sh.data_pos[tid] + 7) / 8 != sh.end[tid])
            code = STATUS_BAD_SIZE;
        report_status(status, task.item, code, stream_rank(items, tasks, tid));
    }
}

}  // namespace l3

L3_DECODE_KERNEL(l3_decode_fast, l3::FAST_THREADS, l3::decode_fast_tile)
