// LZ streams (kinds 6 to 9, docs/FORMAT.md §5.2 to §5.4) expanded on the device into raw streams,
// before the decode kernels run: a warp per stream (l3codec/batch.py's expansion table). Each writes,
// at its target in the scratch area after the packed batch, the bytes the stream keeps before its LZ
// plane (a palette's header and colour table), KIND_RAW, then the LZ4 block's output; a pixel LZ
// stream's block, whose output interleaves the tile's channels, expands after its planes and is then
// dealt out into a raw stream per channel. The stream tables already point there (a pixel LZ tile's
// members too), so the decode kernels read raw streams. A block that does not make exactly the
// tile's bytes reports STATUS_CORRUPT for its item, as l3codec/lz.py's expand_lz does; a bad member
// the host found reports its own status (member_status: BAD_KIND or BAD_SIZE) where the block is sound.
//
// Every lane reads the same token and length bytes (branches stay warp-uniform); the lanes copy a
// sequence's literals and its match 8 bytes a lane, 256 a warp, at a time (lz_copy_warp). A
// Huffman-coded block (kinds 8 and 9, l3codec/huffman.py): lane 0 reads its code tables into the
// warp's shared LzCodes, the lanes build lookup tables from them (codes of up to LZ_LOOKUP_BITS bits
// in one read; longer ones walk the canonical code as huffman.decode_symbol does), then every lane
// decodes every symbol (the same bits, so the same branches) and lane i writes literals i, i + 32 ...
#include "l3_common.cuh"

namespace l3 {

// LZ_MIN_MATCH (lz4block.py), huffman.py's LZ_TABLES ... and LZ_WARPS_PER_BLOCK come from l3_constants.cuh
enum : int {
    LZ_LOOKUP_BITS = 10,  // codes this short decode in one shared-memory read (lz_fill_lookup)
};

// a coded block's canonical codes (huffman.read_tables' tables), one per warp in the dynamic shared memory
struct LzCodes {
    unsigned short counts[LZ_TABLES][LZ_MAX_CODE_BITS + 1];  // codes of each length
    unsigned short starts[LZ_MAX_CODE_BITS + 1];             // read_tables' scratch
    unsigned char symbols[LZ_TABLES][LZ_SYMBOLS];            // symbols in code order
    // the next LZ_LOOKUP_BITS bits of a table's code -> its symbol | its length << 8; 0 where no code
    // that short matches them
    unsigned short lookup[LZ_TABLES][1 << LZ_LOOKUP_BITS];
    long long after_tables;  // lane 0's read_tables: the byte after them, or -1
};
static_assert(sizeof(LzCodes) == LZ_SHARED_BYTES_PER_WARP, "the host sizes the shared memory by it");

struct LzLength {
    long long length;
    long long pos;  // after the length's bytes; -1 when the block ends inside them
};

// lz4block.lz_length: a token nibble's length and its extension bytes
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

L3_DEVICE int lz_table_length(const unsigned char* data, long long lengths_at, int n) {
    return (data[lengths_at + (n >> 1)] >> (4 * (n & 1))) & 15;
}

// huffman.read_tables (one lane): the byte position after the four tables, or -1 where they are refused
L3_DEVICE long long lz_read_tables(const unsigned char* data, long long pos, long long end, LzCodes& codes) {
    for (int table = 0; table < LZ_TABLES; ++table) {
        if (end - pos < LZ_BITMAP_BYTES) return -1;
        const long long lengths_at = pos + LZ_BITMAP_BYTES;
        unsigned short* const counts = codes.counts[table];
        for (int length = 0; length <= LZ_MAX_CODE_BITS; ++length) counts[length] = 0;
        int n = 0;
        for (int byte = 0; byte < LZ_BITMAP_BYTES; ++byte) {
            for (unsigned present = data[pos + byte]; present != 0; present >>= 1) {
                if (!(present & 1)) continue;
                if (lengths_at + (n >> 1) >= end) return -1;
                const int length = lz_table_length(data, lengths_at, n++);
                if (length == 0) return -1;
                ++counts[length];
            }
        }
        int left = 1, start = 0;
        for (int length = 1; length <= LZ_MAX_CODE_BITS; ++length) {
            left = (left << 1) - counts[length];
            if (left < 0) return -1;
            codes.starts[length] = (unsigned short)start;
            start += counts[length];
        }
        n = 0;
        for (int byte = 0; byte < LZ_BITMAP_BYTES; ++byte) {
            int symbol = byte * 8;
            for (unsigned present = data[pos + byte]; present != 0; present >>= 1, ++symbol) {
                if (!(present & 1)) continue;
                const int length = lz_table_length(data, lengths_at, n++);
                codes.symbols[table][codes.starts[length]++] = (unsigned char)symbol;
            }
        }
        pos = lengths_at + (n + 1) / 2;
    }
    return pos;
}

// huffman.decode_symbol's canonical walk over the first `longest` bits of window: the symbol |
// its length << 8, or 0 where no code of at most `longest` bits matches
L3_DEVICE unsigned lz_canonical_symbol(unsigned window, const LzCodes& codes, int table, int longest) {
    int code = 0, first = 0, index = 0;
#pragma unroll 1  // a search that stops at the code's length
    for (int length = 1; length <= longest; ++length) {
        code |= (window >> (length - 1)) & 1;
        const int count = codes.counts[table][length];
        if (code - first < count) return codes.symbols[table][index + code - first] | length << 8;
        index += count;
        first = (first + count) << 1;
        code <<= 1;
    }
    return 0;
}

// the warp's lookup tables from its canonical codes, every lane a share of the entries: a walk of
// up to LZ_LOOKUP_BITS steps per entry once per block, not of up to 15 per symbol (the walk was
// three quarters of a photograph's expansion cost, whose blocks are mostly short matches)
L3_DEVICE void lz_fill_lookup(LzCodes& codes, int lane) {
    for (int entry = lane; entry < LZ_TABLES << LZ_LOOKUP_BITS; entry += 32) {
        const int table = entry >> LZ_LOOKUP_BITS, bits = entry & ((1 << LZ_LOOKUP_BITS) - 1);
        codes.lookup[table][bits] = (unsigned short)lz_canonical_symbol(bits, codes, table, LZ_LOOKUP_BITS);
    }
}

// The coded bits of a block, cached 64 at a time in a register: a symbol's window is a shift of the
// cache, refilled from two aligned words when it runs out, not three byte loads per symbol (they
// were a third of a contour label map's expansion). Bytes at or past end read as zero (the CPU reads
// the file's bytes there; a code that reaches them is refused either way).
struct LzBits {
    unsigned long long bits;  // the block's bits from bit `from` on
    long long from;           // a multiple of 32
};

// 24 bits from bit `bit` on (at least; the symbols read 15 at most)
L3_DEVICE unsigned lz_window(const unsigned char* data, long long bit, long long end, LzBits& cache) {
    if ((unsigned long long)(bit - cache.from) > 40) {  // fewer than 24 cached bits from `bit` on, or none
        const long long byte = (bit >> 3) & ~3ll;
        const unsigned char* const at = data + byte;
        unsigned long long bits = 0;
        if (byte + 8 <= end && (reinterpret_cast<unsigned long long>(at) & 3) == 0) {
            bits = *reinterpret_cast<const unsigned*>(at) |
                   (unsigned long long)*reinterpret_cast<const unsigned*>(at + 4) << 32;
        } else {
#pragma unroll 1
            for (int i = 0; i < 8; ++i)
                if (byte + i < end) bits |= (unsigned long long)at[i] << (8 * i);
        }
        cache.bits = bits;
        cache.from = byte * 8;
    }
    return (unsigned)(cache.bits >> (bit - cache.from));
}

struct LzSymbol {
    int symbol;  // -1: the bits match no code
    long long bit;
};

// huffman.decode_symbol: a short code from the lookup table, a longer one (or none) by the walk
L3_DEVICE LzSymbol lz_decode_symbol(const unsigned char* data, long long bit, long long end, const LzCodes& codes,
                                    int table, LzBits& cache) {
    const unsigned window = lz_window(data, bit, end, cache);
    unsigned found = codes.lookup[table][window & ((1 << LZ_LOOKUP_BITS) - 1)];
    if (found == 0) found = lz_canonical_symbol(window, codes, table, LZ_MAX_CODE_BITS);
    if (found == 0) return {-1, bit + LZ_MAX_CODE_BITS};
    return {(int)(found & 255), bit + (found >> 8)};
}

// huffman.coded_length: {length, bit after it}, the bit -1 past end_bit
L3_DEVICE LzLength lz_coded_length(const unsigned char* data, long long bit, long long end, long long length,
                                   LzBits& cache) {
    if (length == 15) {
        for (;;) {
            if (bit + LZ_EXTENSION_BITS > end * 8) return {0, -1};
            const unsigned byte = lz_window(data, bit, end, cache) & 255;
            bit += LZ_EXTENSION_BITS;
            length += byte;
            if (byte != 255) break;
        }
    }
    return {length, bit};
}

enum : int { LZ_COPY_BYTES = 8 };  // a lane's chunk of a copy (lz_copy_warp): one aligned 64-bit store

// out[j] = from[j % period] for j < length: a warp's copy of a sequence's literals (period = length)
// or of its match (from: `offset` bytes before out, period = offset; where the match overlaps its own
// output, byte j repeats byte j mod offset before it, so every source byte precedes the copy and no
// lane waits on another's byte). The copy is cut into chunks of LZ_COPY_BYTES at aligned addresses
// (the first and last partial); lane i copies chunks i, i + 32 ... Its loads of a chunk issue
// together, then one aligned word store, so a round trip to global memory moves 256 bytes a warp,
// not 32: those round trips are the latency chain of a label map's long LZ streams. A whole chunk
// whose source does not wrap loads one or two aligned words (two: shifted together), a run's chunk
// (offset 1) repeats its byte; the first and last chunks, and those whose source wraps, gather byte
// by byte. A copy of at most 32 bytes is a byte a lane: one round as well, in fewer instructions (a
// photograph's LZ planes are mostly short matches).
L3_DEVICE void lz_copy_warp(unsigned char* out, const unsigned char* from, int length, int period, int lane) {
    const bool wraps = period < length;
    if (length <= 32) {  // one round either way, and a byte a lane takes the fewest instructions
        if (lane < length) out[lane] = from[wraps ? lane % period : lane];
        return;
    }
    const int skew = (int)(reinterpret_cast<unsigned long long>(out) & (LZ_COPY_BYTES - 1));
    const int chunks = (skew + length + LZ_COPY_BYTES - 1) / LZ_COPY_BYTES;
#pragma unroll 1
    for (int c = lane; c < chunks; c += 32) {
        const int first = c * LZ_COPY_BYTES - skew;  // the chunk's first byte, before out for chunk 0
        const int low = max_of(first, 0), high = min_of(first + LZ_COPY_BYTES, length);
        const bool whole = high - low == LZ_COPY_BYTES;
        unsigned long long word;  // byte i: out[first + i]
        if (period == 1) {        // a run of the byte before the copy: no division, no gather
            word = 0x0101010101010101ull * from[0];
        } else {
            int r = wraps ? low % period : low;  // from[r] is byte `low`'s source
            if (whole && r + LZ_COPY_BYTES <= period) {
                // the chunk's 8 source bytes in one or two aligned words. A second word reads up to 7
                // bytes past them: output this round may be writing (discarded), never past the buffer
                const unsigned char* const at = from + r;
                const int shift = (int)(reinterpret_cast<unsigned long long>(at) & (LZ_COPY_BYTES - 1));
                const auto* const words = reinterpret_cast<const unsigned long long*>(at - shift);
                word = words[0];
                if (shift) word = word >> (8 * shift) | words[1] << (64 - 8 * shift);
            } else {
                word = 0;
L3_UNROLL
                for (int i = 0; i < LZ_COPY_BYTES; ++i) {
                    if (first + i >= low && first + i < high) {
                        word |= (unsigned long long)from[r] << (8 * i);
                        r = r + 1 == period ? 0 : r + 1;
                    }
                }
            }
        }
        if (whole) {
            *reinterpret_cast<unsigned long long*>(out + first) = word;
        } else {
L3_UNROLL
            for (int i = 0; i < LZ_COPY_BYTES; ++i)
                if (first + i >= low && first + i < high) out[first + i] = (unsigned char)(word >> (8 * i));
        }
    }
}

// lz.expand_lz (codes null) or huffman.expand_coded_lz (codes: the warp's) on a warp: the block
// data[pos:end] into raw[0:size]; STATUS_OK or STATUS_CORRUPT. One function, so that the match copy
// and its __syncwarp have one call site; few values live across that call (an output pointer and
// the bytes left and a 32-bit count, not a start, a 64-bit count and a size): what it saves past
// 16 registers spills. remaining: the output's size.
L3_DEVICE int expand_lz_warp(const unsigned char* data, long long pos, long long end, unsigned char* out,
                             long long remaining, int lane, LzCodes* codes) {
    long long at = pos;  // the next byte of a plain block, the next bit of a coded one
    LzBits cache{0, -64};   // empty: every bit is more than 40 past it
    int produced = 0;    // bytes so far (a tile's bytes fit an int)
    if (codes) {
        if (lane == 0) codes->after_tables = lz_read_tables(data, pos, end, *codes);
        __syncwarp();  // the codes, before every lane reads them
        if (codes->after_tables < 0) return STATUS_CORRUPT;
        lz_fill_lookup(*codes, lane);
        __syncwarp();  // the lookup tables, before every lane reads them
        at = codes->after_tables * 8;
    }
    for (;;) {
        int token;
        if (codes) {
            const LzSymbol symbol = lz_decode_symbol(data, at, end, *codes, LZ_TOKEN_TABLE, cache);
            if (symbol.symbol < 0 || symbol.bit > end * 8) return STATUS_CORRUPT;
            token = symbol.symbol;
            at = symbol.bit;
        } else {
            if (at >= end) return STATUS_CORRUPT;
            token = data[at++];
        }
        const LzLength literal = codes ? lz_coded_length(data, at, end, token >> 4, cache) : lz_length(data, at, end, token >> 4);
        const long long literals = literal.length;
        at = literal.pos;
        if (at < 0 || literals > remaining) return STATUS_CORRUPT;
        if (codes) {
            for (int i = 0; i < (int)literals; ++i) {  // int: no spills
                const LzSymbol value = lz_decode_symbol(data, at, end, *codes, LZ_LITERAL_TABLE, cache);
                if (value.symbol < 0 || value.bit > end * 8) return STATUS_CORRUPT;
                if ((i & 31) == lane) out[i] = (unsigned char)value.symbol;
                at = value.bit;
            }
        } else {
            if (literals > end - at) return STATUS_CORRUPT;
            lz_copy_warp(out, data + at, (int)literals, (int)literals, lane);  // int: no spills
            at += literals;
        }
        out += literals;
        remaining -= literals;
        produced += (int)literals;
        if (codes && remaining == 0) return (token & 15) == 0 && (at + 7) / 8 == end ? STATUS_OK : STATUS_CORRUPT;
        if (!codes && at == end) return remaining == 0 ? STATUS_OK : STATUS_CORRUPT;
        unsigned offset;
        if (codes) {
            const LzSymbol low = lz_decode_symbol(data, at, end, *codes, LZ_OFFSET_LOW_TABLE, cache);
            const LzSymbol high = lz_decode_symbol(data, low.bit, end, *codes, LZ_OFFSET_HIGH_TABLE, cache);
            if (low.symbol < 0 || high.symbol < 0 || high.bit > end * 8) return STATUS_CORRUPT;
            offset = (unsigned)low.symbol | (unsigned)high.symbol << 8;
            at = high.bit;
        } else {
            if (end - at < 2) return STATUS_CORRUPT;
            offset = data[at] | data[at + 1] << 8;
            at += 2;
        }
        const LzLength copy = codes ? lz_coded_length(data, at, end, token & 15, cache) : lz_length(data, at, end, token & 15);
        const long long match = copy.length + LZ_MIN_MATCH;
        at = copy.pos;
        if (at < 0 || offset == 0 || (int)offset > produced || match > remaining) return STATUS_CORRUPT;
        __syncwarp();  // every lane's bytes so far, before any lane reads them
        lz_copy_warp(out, out - offset, (int)match, (int)offset, lane);
        out += match;
        remaining -= match;
        produced += (int)match;
    }
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
    l3::LzCodes* const codes = reinterpret_cast<l3::LzCodes*>(l3_dynamic_shared());
    unsigned char* const out = channels == 1 ? target + e.prefix_bytes + 1 : pixels;
    const int kind = data[e.source];  // the host listed kinds 6 to 9 only
    const bool coded = kind == l3::KIND_LZ_CODED || kind == l3::KIND_PIXEL_LZ_CODED;
    const int code = l3::expand_lz_warp(data, e.source + 1, e.source_end, out, channels * e.plane_bytes, lane,
                                        coded ? codes + threadIdx.x / 32 : nullptr);
    if (channels > 1 && code == l3::STATUS_OK) {  // warp-uniform
        __syncwarp();  // the whole output, before lanes deal out each other's bytes
        // lz.pixel_offset: byte b of channel c's sample of pixel p is byte (p * channels + c) *
        // sample_bytes + b. A pass per channel and sample byte, a lane per pixel: no division per
        // byte (which cost pixel LZ screenshots 2.6 warp-instructions per sample)
        const int sample_bytes = (int)e.sample_bytes, pixel_bytes = channels * sample_bytes;
        const int pixel_count = (int)(e.plane_bytes / sample_bytes), plane_span = (int)span;  // ints: no spills
#pragma unroll 1
        for (int within = 0; within < pixel_bytes; ++within) {  // c * sample_bytes + b
            const int c = within / sample_bytes;
            unsigned char* const plane = target + c * plane_span + 1 + within - c * sample_bytes;
            for (int p = lane; p < pixel_count; p += 32) plane[p * sample_bytes] = pixels[p * pixel_bytes + within];
        }
    }
    if (lane == 0) {
        // the stream's own status first (one report: a key of the same rank and a larger code would win)
        l3::report_status(status, e.status_index, code != l3::STATUS_OK ? code : (int)e.member_status, e.status_rank);
    }
}
