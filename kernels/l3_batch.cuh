// Launch tables of the GPU decoders: C mirrors of l3codec/batch.py's ITEM_DTYPE and TASK_DTYPE and
// l3codec/lz_stage.py's EXPANSION_DTYPE.
//
// Every field is a little-endian int64, in the dtype's field order, so the structs
// have no padding and sizeof(L3Item) == ITEM_DTYPE.itemsize (tests/test_cuda_c.py
// checks the offsets against the numpy dtypes through the emulation build).
#pragma once

struct L3Item {
    long long width;
    long long height;
    long long channels;
    long long bits;
    long long transform;
    long long tile_width;
    long long tile_height;
    long long tiles_x;
    long long stream_base;    // index of the item's first stream in stream_starts/stream_ends
    long long region_y;
    long long region_x;
    long long region_h;
    long long region_w;
    long long out_offset;     // byte offset of the region's pixel (0, 0) in the output buffer
    long long out_row_pitch;  // bytes between output rows
    long long data_end;       // byte after the item's own bytes in data: the fast kernel's reads stop there
};

struct L3Task {
    long long item;  // index into this launch's items
    long long tile_y;
    long long tile_x;
    long long band_y;  // compact: the first tile row of the task's band of 32 rows (fast: 0)
};

// An LZ stream to expand into raw ones (kernels/lz.cu), before the decode kernels run.
struct L3Expansion {
    long long source;        // the LZ stream's kind byte
    long long source_end;
    long long prefix_start;  // prefix_bytes kept before it (a palette's header and colour table)
    long long prefix_bytes;
    long long target;        // where the raw streams go: per plane the prefix, KIND_RAW, the plane's plane_bytes
    long long plane_bytes;
    long long status_index;  // the status entry of the stream's item
    long long channels;      // planes: 1, or a pixel LZ stream's channels (its interleaved output after them)
    long long sample_bytes;
    long long member_status;  // a status the host found in a pixel LZ tile's members, reported with the expansion's
    long long status_rank;    // the rank both report with (l3::report_status)
};

#define L3_ITEM_FIELDS 16
#define L3_TASK_FIELDS 4
#define L3_EXPANSION_FIELDS 11
static_assert(sizeof(L3Item) == L3_ITEM_FIELDS * 8, "L3Item must be 16 packed int64");
static_assert(sizeof(L3Task) == L3_TASK_FIELDS * 8, "L3Task must be 4 packed int64");
static_assert(sizeof(L3Expansion) == L3_EXPANSION_FIELDS * 8, "L3Expansion must be 11 packed int64");
