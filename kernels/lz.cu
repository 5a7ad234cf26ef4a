// LZ streams (kind 6, docs/FORMAT.md §5.2) expanded on the device into raw streams, before the
// decode kernels run: a warp per stream (l3codec/batch.py's expansion table). Each writes, at its
// target in the scratch area after the packed batch, the bytes the stream keeps before its LZ plane
// (a palette's header and colour table), KIND_RAW, then the LZ4 block's output; the stream tables
// already point there, so the decode kernels read a raw stream. A block that does not make exactly
// the tile-channel's bytes reports STATUS_CORRUPT for its item, as l3codec/lz.py's expand_lz does.
//
// Every lane reads the same token and length bytes (branches stay warp-uniform); the lanes copy a
// sequence's literals and its match 32 bytes at a time. A match may overlap its own output: its
// byte j repeats byte j mod offset of the `offset` bytes before it, which are all written before
// the match starts, so no lane waits on another's byte of the same match.
#include "l3_common.cuh"

namespace l3 {

enum : int {
    LZ_MIN_MATCH = 4,     // lz.MIN_MATCH
    LZ_WARPS_PER_BLOCK = 4,
};

struct LzLength {
    long long length;
    long long pos;  // after the length's bytes; -1 when the block ends inside them
};

// lz.lz_length: a token nibble's length and its extension bytes
L3_DEVICE LzLength lz_length(const unsigned char* data, long long pos, long long end, long long length) {
    if (length == 15) {
        for (;;) {
            if (pos >= end) return {0, -1};
            const unsigned byte = data[pos++];
            length += byte;
            if (byte != 255) break;
        }
    }
    return {length, pos};
}

// lz.expand_lz on a warp: the block data[pos:end] into raw[0:size]; STATUS_OK or STATUS_CORRUPT
L3_DEVICE int expand_lz_warp(const unsigned char* data, long long pos, long long end, unsigned char* raw,
                             long long size, int lane) {
    long long produced = 0;
    while (pos < end) {
        const unsigned token = data[pos];
        const LzLength literal = lz_length(data, pos + 1, end, token >> 4);
        const long long literals = literal.length;
        pos = literal.pos;
        if (pos < 0 || literals > end - pos || literals > size - produced) return STATUS_CORRUPT;
        for (int i = lane; i < (int)literals; i += 32) raw[produced + i] = data[pos + i];  // int: no spills
        pos += literals;
        produced += literals;
        if (pos == end) return produced == size ? STATUS_OK : STATUS_CORRUPT;
        if (end - pos < 2) return STATUS_CORRUPT;
        const unsigned offset = data[pos] | data[pos + 1] << 8;
        const LzLength copy = lz_length(data, pos + 2, end, token & 15);
        const long long match = copy.length + LZ_MIN_MATCH;
        pos = copy.pos;
        if (pos < 0 || offset == 0 || offset > produced || match > size - produced) return STATUS_CORRUPT;
        __syncwarp();  // every lane's bytes so far, before any lane reads them
        unsigned char* const at = raw + produced;
        for (int j = lane; j < (int)match; j += 32) at[j] = at[(long long)((unsigned)j % offset) - offset];
        produced += match;
    }
    return STATUS_CORRUPT;  // a block holds at least one sequence
}

}  // namespace l3

extern "C" __global__ void __launch_bounds__(32 * l3::LZ_WARPS_PER_BLOCK)
    l3_expand_lz(unsigned char* __restrict__ data, const L3Expansion* __restrict__ expansions, long long count,
                 int* __restrict__ status) {
    const long long index = (long long)blockIdx.x * l3::LZ_WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (index >= count) return;  // a whole warp
    const L3Expansion e = expansions[index];
    unsigned char* const target = data + e.target;
    for (long long i = lane; i < e.prefix_bytes; i += 32) target[i] = data[e.prefix_start + i];
    if (lane == 0) target[e.prefix_bytes] = l3::KIND_RAW;
    // every offset lies inside data: the host placed them (l3codec/batch.py)
    const int code = l3::expand_lz_warp(data, e.source + 1, e.source_end, target + e.prefix_bytes + 1, e.plane_bytes,
                                        lane);
    if (code != l3::STATUS_OK && lane == 0) atomicCAS(&status[e.status_index], 0, code);
}
