// The rANS table stage (format 10, stream kind 10), launched before the decode kernels: a warp per
// kind-10 stream (l3codec/ans_stage.py's records). Each writes its stream's table block (ans.cuh's
// AnsBlock, then the slot tables) at the record's target in the scratch area, after copying the bytes the
// stream keeps before its plane (a palette's header and colour table): the stage's stream tables point
// there, so the band kernel finds the block where the stream's kind byte was.
//
// The checks before the rows, in the CPU decoder's order: the header, the bias table and table set
// (lane 0 reads the bit-packed tables, ans.read_tables), the row-length table fits; the first that fails
// is the block's status and nothing after it is built. Then the lanes fill the slot tables (a token's
// slots 32 at a time) and add up the row lengths for the check after the rows (end_status).
#include "ans.cuh"

namespace l3 {

L3_DEVICE void build_ans_table(unsigned char* __restrict__ data, long long data_size, const L3AnsTable& record,
                               int lane) {
    AnsBlock* block = reinterpret_cast<AnsBlock*>(data + record.target);
#pragma unroll 1
    for (long long i = lane; i < record.prefix_bytes; i += 32)
        data[record.target - record.prefix_bytes + i] = data[record.prefix_start + i];
    const long long start = record.source, end = record.source_end;
    const int bits = (int)record.bits;
    const int flags = (int)load_byte(data, data_size, start + 1);
    const int precision = (int)load_byte(data, data_size, start + 2);
    const int length_bits = (int)load_byte(data, data_size, start + 3);
    int status = STATUS_OK;
    if (end - start < ANS_HEADER_BYTES)
        status = ANS_SHORT_STATUS;
    else if ((flags & ~1) != 0 || precision < ANS_MIN_PRECISION || precision > ANS_MAX_PRECISION ||
             length_bits > 31 || (ANS_CONTEXTS << precision) != record.slot_bytes)
        status = STATUS_BAD_HEADER;
    const bool biased = (flags & 1) != 0;
    const int bias_bytes = biased ? GRADIENT_CONTEXTS * bits / 8 : 0;
    if (status == STATUS_OK && start + ANS_HEADER_BYTES + bias_bytes > end) status = ANS_TABLE_STATUS;
#pragma unroll 1
    for (int i = lane; i < ANS_CONTEXTS * ANS_TOKEN_COLUMNS; i += 32) (&block->token_info[0][0])[i] = 0;
#pragma unroll 1
    for (int i = lane; i < GRADIENT_CONTEXTS; i += 32) {
        int value = 0;
        if (status == STATUS_OK && biased) {
            const long long at = start + ANS_HEADER_BYTES + (long long)i * (bits / 8);
            value = bits == 8 ? (int)(signed char)load_byte(data, data_size, at)
                              : (int)(short)(load_byte(data, data_size, at) | load_byte(data, data_size, at + 1) << 8);
        }
        block->bias[i] = value;
    }
    __syncwarp();
    // lane 0: the table set (ans.read_tables), into token_info and alphabets, through a bit reservoir (a
    // token's fields are at most 4 + 12 bits: one refill each)
    long long bit_pos = (start + ANS_HEADER_BYTES + bias_bytes) * 8;
    if (lane == 0 && status == STATUS_OK) {
        const long long end_bit = end * 8;
        const int tokens = ans_token_count(bits);
        BitReservoir in;
        reservoir_start(in, data, data_size, bit_pos);
#pragma unroll 1
        for (int ctx = 0; ctx < ANS_CONTEXTS && status == STATUS_OK; ++ctx) {
            refill(in, data, data_size);
            if (reservoir_position(in) + 8 > end_bit) {
                status = ANS_TABLE_STATUS;
                break;
            }
            const int alphabet = (int)(in.bits & 255);
            consume(in, 8);
            if (alphabet > tokens) {
                status = ANS_TABLE_STATUS;
                break;
            }
            block->alphabets[ctx] = (unsigned char)alphabet;
            unsigned total = 0;
#pragma unroll 1
            for (int t = 0; t < alphabet; ++t) {
                refill(in, data, data_size);
                const long long at = reservoir_position(in);
                if (at + 4 > end_bit) {
                    status = ANS_TABLE_STATUS;
                    break;
                }
                const int length = (int)(in.bits & 15);
                if (length > precision + 1 || at + 4 + max_of(length - 1, 0) > end_bit) {
                    status = ANS_TABLE_STATUS;
                    break;
                }
                const int extra = max_of(length - 1, 0);
                const unsigned f = length > 0 ? (1u << extra) | (unsigned)((in.bits >> 4) & ((1u << extra) - 1)) : 0;
                consume(in, 4 + extra);
                block->token_info[ctx][t] = f | total << 16;
                total += f;
            }
            if (status == STATUS_OK && alphabet > 0 && total != 1u << precision) status = ANS_TABLE_STATUS;
        }
        bit_pos = reservoir_position(in);
    }
    status = __shfl_sync(L3_FULL_MASK, status, 0);
    bit_pos = __shfl_sync(L3_FULL_MASK, bit_pos, 0);
    // the row-length table fits, and the row lengths add up to the stream (checked after the rows)
    const int rows = (int)record.rows;
    const long long lengths = (bit_pos + 7) / 8;
    const long long rows_start = lengths + ((long long)rows * length_bits + 7) / 8;
    if (status == STATUS_OK && rows_start > end) status = STATUS_BAD_SIZE;
    long long sum = 0;
    if (status == STATUS_OK) {
#pragma unroll 1
        for (int r = lane; r < rows; r += 32)
            sum += read_bits(data, data_size, lengths * 8 + (long long)r * length_bits, length_bits);
    }
    sum = __shfl_sync(L3_FULL_MASK, warp_inclusive_scan(sum, lane), 31);
    if (lane == 0) {
        block->kind = (unsigned char)load_byte(data, data_size, start);
        block->flags = (unsigned char)flags;
        block->precision = (unsigned char)precision;
        block->length_bits = (unsigned char)length_bits;
        block->status = status;
        block->rows = rows_start;
        block->lengths = lengths;
        block->end = end;
        block->end_status = sum == end - rows_start ? STATUS_OK : STATUS_BAD_SIZE;
        block->zero = 0;
    }
    __syncwarp();
    if (status != STATUS_OK) return;
    // the slot tables (ans.build_slot_table): a context with no tokens is all NO_TOKEN
    unsigned char* slots = data + record.target + ANS_BLOCK_SLOTS;
#pragma unroll 1
    for (int ctx = 0; ctx < ANS_CONTEXTS; ++ctx) {
        unsigned char* table = slots + ((long long)ctx << precision);
        const int alphabet = block->alphabets[ctx];
        if (alphabet == 0) {
#pragma unroll 1
            for (int s = lane; s < 1 << precision; s += 32) table[s] = ANS_NO_TOKEN;
        }
#pragma unroll 1
        for (int t = 0; t < alphabet; ++t) {
            const unsigned info = block->token_info[ctx][t];
#pragma unroll 1
            for (int j = lane; j < (int)(info & 0xffffu); j += 32) table[(info >> 16) + j] = (unsigned char)t;
        }
    }
}

}  // namespace l3

// l3_build_ans_tables(data, data_size, tables, count): a warp per record, ANS_WARPS_PER_BLOCK warps a block
extern "C" __global__ void __launch_bounds__(32 * l3::ANS_WARPS_PER_BLOCK, 8)
    l3_build_ans_tables(unsigned char* __restrict__ data, long long data_size, const L3AnsTable* __restrict__ tables,
                        long long count) {
    const long long index = (long long)blockIdx.x * l3::ANS_WARPS_PER_BLOCK + threadIdx.x / 32;
    if (index < count) l3::build_ans_table(data, data_size, tables[index], threadIdx.x % 32);
}
