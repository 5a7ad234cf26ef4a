// LZ streams (kinds 6 and 7, docs/FORMAT.md §5.2, §5.3) expanded on the device into raw streams,
// before the decode kernels run: a warp per stream (l3codec/batch.py's expansion table). Each writes,
// at its target in the scratch area after the packed batch, the bytes the stream keeps before its LZ
// plane (a palette's header and colour table), KIND_RAW, then the LZ4 block's output; a pixel LZ
// stream's block, whose output interleaves the tile's channels, expands after its planes and is then
// dealt out into a raw stream per channel. The stream tables already point there (a pixel LZ tile's
// members too), so the decode kernels read raw streams. A block that does not make exactly the
// tile's bytes reports STATUS_CORRUPT for its item, as l3codec/lz.py's expand_lz does; a bad member
// the host found reports its own status (member_status: BAD_KIND or BAD_SIZE).
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
    const L3Expansion& e = expansions[index];  // fields read where used: a copy of all ten spilled
    unsigned char* const target = data + e.target;
    const long long span = (e.prefix_bytes + 1 + e.plane_bytes + 7) / 8 * 8;  // batch.plane_span
    for (long long i = lane; i < e.prefix_bytes; i += 32) target[i] = data[e.prefix_start + i];
    if (lane < e.channels) target[lane * span + e.prefix_bytes] = l3::KIND_RAW;
    // every offset lies inside data: the host placed them (l3codec/batch.py). One call site keeps
    // expand_lz_warp inlined (a second one made it a call, whose saved registers spilled).
    const int channels = (int)e.channels;
    unsigned char* const pixels = target + channels * span;  // a pixel LZ block's interleaved output
    const int code = l3::expand_lz_warp(data, e.source + 1, e.source_end,
                                        channels == 1 ? target + e.prefix_bytes + 1 : pixels, channels * e.plane_bytes,
                                        lane);
    if (channels > 1 && code == l3::STATUS_OK) {  // warp-uniform
        __syncwarp();  // the whole output, before lanes deal out each other's bytes
        // lz.pixel_offset: byte i is byte i % sample_bytes of channel (i / sample_bytes) % channels's
        // sample of pixel i / (channels * sample_bytes)
        const int sample_bytes = (int)e.sample_bytes, pixel_bytes = channels * sample_bytes;
        const int total = (int)(channels * e.plane_bytes), plane_span = (int)span;  // ints: no spills
        for (int i = lane; i < total; i += 32) {
            const int pixel = i / pixel_bytes, within = i - pixel * pixel_bytes;
            const int channel = within / sample_bytes;
            target[channel * plane_span + 1 + pixel * sample_bytes + within - channel * sample_bytes] = pixels[i];
        }
    }
    if (lane == 0) {
        if (code != l3::STATUS_OK) atomicCAS(&status[e.status_index], 0, code);
        if (e.member_status != l3::STATUS_OK) atomicCAS(&status[e.status_index], 0, (int)e.member_status);
    }
}
