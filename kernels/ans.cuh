// Compact v2 (format 10, stream kind 10): the rANS table block and the per-sample row decoder.
//
// l3codec/ans_stage.py describes the table block that the table stage (ans.cu) writes for each kind-10
// stream into the scratch area, and the stage's stream tables point the stream at; the compact band
// kernel (compact.cu) reads its rows through it. l3codec/ans.py is the normative row decoder
// (decode_step, refill, open_row_stream, row_stream_end): these functions follow it bit for bit.
#pragma once

#include "l3_common.cuh"

namespace l3 {

// ans_stage.py's block (its BLOCK_* offsets, asserted below). Read and written at 8-byte aligned
// addresses: the device buffer is, and the host emulation runs on x86.
struct AnsBlock {
    unsigned char kind, flags, precision, length_bits;  // the stream's header bytes
    int status;          // STATUS_OK, or the stream's status before its rows
    long long rows;      // first row stream's byte
    long long lengths;   // row-length table's byte
    long long end;       // the stream's end
    int end_status;      // the check after the rows: the row lengths add up to the stream's size
    int zero;
    int bias[GRADIENT_CONTEXTS];
    unsigned char alphabets[ANS_CONTEXTS];
    unsigned char zero2[ANS_BLOCK_TOKEN_INFO - ANS_BLOCK_ALPHABETS - ANS_CONTEXTS];
    unsigned token_info[ANS_CONTEXTS][ANS_TOKEN_COLUMNS];  // f | cum << 16
    // then the slot tables: [ANS_CONTEXTS][1 << precision] bytes
};
static_assert(__builtin_offsetof(AnsBlock, status) == ANS_BLOCK_STATUS, "ans_stage.BLOCK_STATUS");
static_assert(__builtin_offsetof(AnsBlock, rows) == ANS_BLOCK_ROWS, "ans_stage.BLOCK_ROWS");
static_assert(__builtin_offsetof(AnsBlock, lengths) == ANS_BLOCK_LENGTHS, "ans_stage.BLOCK_LENGTHS");
static_assert(__builtin_offsetof(AnsBlock, end) == ANS_BLOCK_END, "ans_stage.BLOCK_END");
static_assert(__builtin_offsetof(AnsBlock, end_status) == ANS_BLOCK_END_STATUS, "ans_stage.BLOCK_END_STATUS");
static_assert(__builtin_offsetof(AnsBlock, bias) == ANS_BLOCK_BIAS, "ans_stage.BLOCK_BIAS");
static_assert(__builtin_offsetof(AnsBlock, alphabets) == ANS_BLOCK_ALPHABETS, "ans_stage.BLOCK_ALPHABETS");
static_assert(__builtin_offsetof(AnsBlock, token_info) == ANS_BLOCK_TOKEN_INFO, "ans_stage.BLOCK_TOKEN_INFO");
static_assert(sizeof(AnsBlock) == ANS_BLOCK_SLOTS, "ans_stage.BLOCK_SLOTS: the slot tables follow");

// A kind-10 warp's shared memory, in its channel's compact state area (COMPACT_STATE_BYTES, whose row
// ends at its end kind 1 keeps): the activity-to-context table (ANS_ACTIVITY_LIMIT bytes), then the bias values
enum : int { ANS_SHARED_BIAS = (ANS_ACTIVITY_LIMIT + 3) & ~3 };
static_assert(ANS_SHARED_BIAS + 4 * GRADIENT_CONTEXTS <= COMPACT_STATE_BYTES - 32 * 8, "a channel's state area");

L3_DEVICE const unsigned char* ans_slots(const AnsBlock* block) {
    return reinterpret_cast<const unsigned char*>(block) + ANS_BLOCK_SLOTS;
}

// ans.token_count: tokens a plane of `bits`-bit samples can use
L3_DEVICE int ans_token_count(int bits) {
    return (1 << ANS_SPLIT_EXPONENT) + ((bits - ANS_SPLIT_EXPONENT) << ANS_MANTISSA_BITS);
}

// ans.ANS_CONTEXT_OF_ACTIVITY[a]: the edges at or below activity a
L3_DEVICE int ans_context_of_activity(int a) {
    constexpr int edges[] = {ANS_ACTIVITY_EDGE_0,  ANS_ACTIVITY_EDGE_1,  ANS_ACTIVITY_EDGE_2,  ANS_ACTIVITY_EDGE_3,
                             ANS_ACTIVITY_EDGE_4,  ANS_ACTIVITY_EDGE_5,  ANS_ACTIVITY_EDGE_6,  ANS_ACTIVITY_EDGE_7,
                             ANS_ACTIVITY_EDGE_8,  ANS_ACTIVITY_EDGE_9,  ANS_ACTIVITY_EDGE_10, ANS_ACTIVITY_EDGE_11,
                             ANS_ACTIVITY_EDGE_12, ANS_ACTIVITY_EDGE_13};
    static_assert(sizeof(edges) / sizeof(edges[0]) + 1 == ANS_CONTEXTS, "ans.ACTIVITY_EDGES");
    int ctx = 0;
L3_UNROLL
    for (int i = 0; i < ANS_CONTEXTS - 1; ++i) ctx += a >= edges[i];
    return ctx;
}

// ans.gradient_step: JPEG-LS's 9-level quantiser, -4..4
template <int BITS>
L3_DEVICE int ans_gradient_step(int g) {
    const int a = g < 0 ? -g : g;
    const int q = (a > 0) + (a >= (ANS_GRADIENT_EDGE_0 << (BITS - 8))) + (a >= (ANS_GRADIENT_EDGE_1 << (BITS - 8))) +
                  (a >= (ANS_GRADIENT_EDGE_2 << (BITS - 8)));
    return g < 0 ? -q : q;
}

// One lane's row stream (ans.open_row_stream .. row_stream_end): the state and the words left.
struct AnsRow {
    const unsigned char* next;  // the next word
    int left;                   // bytes of words left (even)
    unsigned x;                 // the state (below 2^32: ans.py's invariant)
};

// ans.open_row_stream of `length` bytes at `row`: false when the state is not in the fewest bytes
L3_DEVICE bool ans_open_row(AnsRow& row, const unsigned char* __restrict__ at, int length) {
    const int state_bytes = length <= 2 ? length : 4 - (length & 1);
    unsigned x = 0;
#pragma unroll 1
    for (int i = 0; i < state_bytes; ++i) x |= (unsigned)at[i] << (8 * i);
    row.x = x;
    row.next = at + state_bytes;
    row.left = length - state_bytes;
    return state_bytes == 0 || (x >> (8 * (state_bytes - 1))) != 0;
}

// ans.refill: a word when the state fell below ANS_LOW and words remain
L3_DEVICE void ans_refill(AnsRow& row) {
    if (row.left > 0 && row.x < (unsigned)ANS_LOW) {
        row.x = (row.x << 16) | row.next[0] | (unsigned)row.next[1] << 8;
        row.next += 2;
        row.left -= 2;
    }
}

// ans.decode_step's coding part: the zigzagged residual m of the sample of context ctx, or -1 for a
// slot that holds no token (ans.NO_TOKEN: the row is corrupt)
L3_DEVICE int ans_decode_symbol(AnsRow& row, const AnsBlock* __restrict__ block,
                                const unsigned char* __restrict__ slots, int ctx, int precision) {
    const unsigned mask = (1u << precision) - 1;
    const int token = slots[(ctx << precision) | (int)(row.x & mask)];
    if (token == ANS_NO_TOKEN) return -1;
    const unsigned info = block->token_info[ctx][token];
    row.x = (info & 0xffffu) * (row.x >> precision) + (row.x & mask) - (info >> 16);
    ans_refill(row);
    if (token < (1 << ANS_SPLIT_EXPONENT)) return token;
    // hybrid_value with one mantissa bit: (2 | token & 1) << raw_bits | raw
    static_assert(ANS_MANTISSA_BITS == 1 && ((1 << ANS_SPLIT_EXPONENT) & 1) == 0, "ans.hybrid_value's shape");
    const int raw_bits = ((token - (1 << ANS_SPLIT_EXPONENT)) >> 1) + ANS_SPLIT_EXPONENT - 1;
    const int raw = (int)(row.x & ((1u << raw_bits) - 1));
    row.x >>= raw_bits;
    ans_refill(row);
    return ((2 | (token & 1)) << raw_bits) | raw;
}

}  // namespace l3
