"""The L3 on-disk layout, defined once: dtypes, constants, limits, parsing, validation.

A file is ``header | stream table | payload`` (docs/FORMAT.md has the byte diagrams).
This module never imports numba, cupy or torch: the GPU batch preparation validates
with exactly the same code as the CPU decoder.
"""

from __future__ import annotations

import dataclasses

try:  # the same CRC-32 (zlib's polynomial), with SIMD: about 13x zlib's speed on a 1.7 MB payload
    from isal.isal_zlib import crc32
except ImportError:
    from zlib import crc32
from dataclasses import dataclass

import numpy as np

MAGIC = b"L3IM"
VERSION = 9
# Every version-2 to -8 file is a valid version-9 file (version 3 gave fast mode's group
# code 0 its sparse meaning, version 4 added the palette stream kinds, version 5 the fast coded
# stream with the extended group codes, version 6 the LZ stream, version 7 the pixel LZ stream,
# version 8 their Huffman-coded forms, version 9 compact tiles taller than one band). Version 1 differs in its
# fast-mode stream (and had no transform 2): its compact files still decode, its fast files are
# refused with this reason.
def version_text(package_version: str) -> str:
    """What --version says: the package and the format version it writes (docs/FORMAT.md says which it reads)."""
    return f"l3codec {package_version} (writes L3 format {VERSION})"


FAST_V1_REFUSED = ("fast-mode files of L3 format version 1 are no longer decodable; "
                   "re-encode them from the source")

MODE_COMPACT = 0
MODE_FAST = 1

TRANSFORM_NONE = 0
TRANSFORM_SUBTRACT_GREEN = 1
TRANSFORM_RGB_MEAN = 2  # R - G, G, B - (R + G) / 2 (format version 2)
TRANSFORM_NAMES = {TRANSFORM_NONE: "none", TRANSFORM_SUBTRACT_GREEN: "subtract-green", TRANSFORM_RGB_MEAN: "rg-mean"}
TRANSFORMS = {name: value for value, name in TRANSFORM_NAMES.items()}

# First byte of every stream (one stream per tile and channel).
KIND_CONSTANT = 0
KIND_CODED = 1
KIND_RAW = 2
KIND_PALETTE = 3  # a tile's channel-0 stream: a colour table, then the tile's index plane (version 4)
KIND_PALETTE_MEMBER = 4  # channels 1.. of a palette tile: one byte, the pixels come from channel 0
KIND_CODED_EXTENDED = 5  # fast mode: a coded stream whose groups take the extended codes (version 5)
KIND_LZ = 6  # either mode: the raw stream's bytes as an LZ4 block (version 6, l3codec/lz.py)
KIND_PIXEL_LZ = 7  # a tile's channel-0 stream: the tile's pixels, channels interleaved, as an LZ4 block (version 7)
KIND_LZ_CODED = 8  # kind 6 with the LZ4 block's symbols Huffman-coded (version 8, l3codec/huffman.py)
KIND_PIXEL_LZ_CODED = 9  # kind 7 likewise (version 8)
KIND_CODED_ANS = 10  # compact only: a tile-channel coded with static-table rANS, its own tables (version 10)
PALETTE_MAX_COLOURS = 256  # the count byte holds colours - 1
PALETTE_HEADER_BYTES = 2  # kind, colours - 1

COMPACT_BAND_ROWS = 32  # a compact tile is decoded in bands of a warp's 32 rows, a lane per row
COMPACT_MAX_TILE_HEIGHT = 256  # 8 bands (version 9; before it, one band)
TILE_WIDTH_STEP = 16  # tile widths are multiples of 16 (version 1's fast-mode group size)
MIN_TILE_WIDTH = 16
MAX_TILE_WIDTH = 4096
FAST_MIN_TILE_HEIGHT = 8
FAST_MAX_TILE_HEIGHT = 256
FAST_TILE_HEIGHT_STEP = 8
FLAT_TILE_HEIGHT = 256  # the encoder's tile height for flat graphics and text, where smaller (encoder_policy)
FLAT_COLOUR_TILE_WIDTH = 256  # ... and its tile width for colour (2+ channels) there; one channel keeps the default


@dataclass(frozen=True)
class Mode:
    """What the format says of one mode; each layer keys its own per-mode table (CPU drivers,
    kernels) on ``id``."""

    id: int  # the header's mode byte
    name: str
    tile_heights: range  # the legal tile heights
    default_tile_width: int
    default_tile_height: int
    default_transform: int  # the encoder's, for 3 and 4 channels: the smaller on the corpus (FORMAT.md §3)


MODE_SPECS = {
    MODE_COMPACT: Mode(MODE_COMPACT, "compact",
                       range(COMPACT_BAND_ROWS, COMPACT_MAX_TILE_HEIGHT + 1, COMPACT_BAND_ROWS),
                       default_tile_width=512, default_tile_height=COMPACT_BAND_ROWS,
                       default_transform=TRANSFORM_RGB_MEAN),
    MODE_FAST: Mode(MODE_FAST, "fast", range(FAST_MIN_TILE_HEIGHT, FAST_MAX_TILE_HEIGHT + 1, FAST_TILE_HEIGHT_STEP),
                    default_tile_width=512, default_tile_height=64, default_transform=TRANSFORM_RGB_MEAN),
}
MODE_NAMES = {mode.id: mode.name for mode in MODE_SPECS.values()}
MODES = {mode.name: mode.id for mode in MODE_SPECS.values()}
DEFAULT_TILE_WIDTH = {mode.id: mode.default_tile_width for mode in MODE_SPECS.values()}
DEFAULT_TILE_HEIGHT = {mode.id: mode.default_tile_height for mode in MODE_SPECS.values()}
DEFAULT_COLOUR_TRANSFORM = {mode.id: mode.default_transform for mode in MODE_SPECS.values()}

MAX_DIM = 1 << 18
MAX_PIXELS = 1 << 28  # keeps every offset of the largest legal image inside uint32
# What decode() and the readers of source images (l3 encode, l3convert) accept unless told more
# (max_pixels=, --max-pixels): 8192 x 8192, docs/cli.md says why.
DEFAULT_MAX_PIXELS = 1 << 26

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S4"),
        ("version", "<u2"),
        ("header_size", "<u2"),
        ("width", "<u4"),
        ("height", "<u4"),
        ("channels", "u1"),
        ("bits", "u1"),
        ("mode", "u1"),
        ("transform", "u1"),
        ("tile_width", "<u2"),
        ("tile_height", "<u2"),
        ("stream_count", "<u4"),
        ("payload_size", "<u4"),
        ("payload_crc", "<u4"),
        ("reserved", "<u4"),
        ("header_crc", "<u4"),
    ]
)
assert HEADER_DTYPE.itemsize == 44
HEADER_SIZE = HEADER_DTYPE.itemsize
HEADER_CRC_OFFSET = HEADER_DTYPE.fields["header_crc"][1]

# The stream table holds the end offset of each stream, relative to the payload start.
STREAM_END_DTYPE = np.dtype("<u4")
assert STREAM_END_DTYPE.itemsize == 4


class L3Error(ValueError):
    """Raised for any malformed, corrupt or unsupported L3 data or argument."""


@dataclass(frozen=True)
class Info:
    """What a header says, after validation."""

    width: int
    height: int
    channels: int
    bits: int
    mode: str
    transform: str
    tile_width: int
    tile_height: int
    tiles_x: int
    tiles_y: int
    file_size: int
    version: int = VERSION

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bits == 8 else np.uint16)

    @property
    def shape(self) -> tuple:
        if self.channels == 1:
            return (self.height, self.width)
        return (self.height, self.width, self.channels)

    def tile_rows(self, tile_y):
        """Rows of the tiles in tile row tile_y (an int or an array): tile_height, the last row of tiles fewer."""
        return np.minimum(self.tile_height, self.height - tile_y * self.tile_height)

    def tile_columns(self, tile_x):
        """Columns of the tiles in tile column tile_x (an int or an array): tile_width, the last fewer."""
        return np.minimum(self.tile_width, self.width - tile_x * self.tile_width)


@dataclass(frozen=True)
class Parsed:
    """A validated file: its info, stream boundaries and payload, ready for a decoder."""

    info: Info
    header: np.void
    stream_starts: np.ndarray  # int64, absolute byte offsets into the file
    stream_ends: np.ndarray  # int64, absolute byte offsets into the file
    payload_offset: int


def tile_grid(width: int, height: int, tile_width: int, tile_height: int) -> tuple:
    return (-(-width // tile_width), -(-height // tile_height))


def as_bytes_view(data) -> np.ndarray:
    """A read-only uint8 view of bytes, bytearray, memoryview or a contiguous numpy buffer."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise L3Error("L3 data must be a contiguous buffer")
        view = data.reshape(-1).view(np.uint8)
    else:
        try:
            view = np.frombuffer(data, dtype=np.uint8)
        except (TypeError, ValueError, BufferError) as exc:  # not a buffer, or a non-contiguous one
            raise L3Error(f"L3 data must be a contiguous bytes-like buffer, not {type(data).__name__}: {exc}") from exc
    return readonly(view)


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of array. The CPU drivers take what they only read as read-only views,
    whoever owns the memory: Numba compiles each function once per argument type, and read-only
    is part of the type (bytes and Pillow's arrays are read-only, numpy's and bytearray's not)."""
    view = array.view()
    view.flags.writeable = False
    return view


def check_geometry(width, height, channels, bits, mode, tile_width, tile_height) -> None:
    """Raise L3Error unless these image and tile parameters are legal."""
    if not (1 <= width <= MAX_DIM and 1 <= height <= MAX_DIM):
        raise L3Error(f"image size {width}x{height} outside 1..{MAX_DIM}")
    if width * height > MAX_PIXELS:
        raise L3Error(f"image of {width * height} pixels exceeds MAX_PIXELS={MAX_PIXELS}")
    if not 1 <= channels <= 4:
        raise L3Error(f"channels must be 1..4, got {channels}")
    if bits not in (8, 16):
        raise L3Error(f"bits per sample must be 8 or 16, got {bits}")
    if mode not in MODE_NAMES:
        raise L3Error(f"unknown mode {mode}")
    if not (MIN_TILE_WIDTH <= tile_width <= MAX_TILE_WIDTH and tile_width % TILE_WIDTH_STEP == 0):
        raise L3Error(
            f"tile width {tile_width} must be a multiple of {TILE_WIDTH_STEP} "
            f"in {MIN_TILE_WIDTH}..{MAX_TILE_WIDTH}"
        )
    heights = MODE_SPECS[mode].tile_heights
    if tile_height not in heights:
        if len(heights) == 1:
            raise L3Error(f"{MODE_NAMES[mode]} tiles are {heights[0]} rows tall, got {tile_height}")
        raise L3Error(
            f"{MODE_NAMES[mode]} tile height {tile_height} must be a multiple of {heights.step} "
            f"in {heights[0]}..{heights[-1]}"
        )


def header_crc(header_bytes: np.ndarray, table_bytes: np.ndarray) -> int:
    crc = crc32(header_bytes[:HEADER_CRC_OFFSET].tobytes())
    return crc32(table_bytes.tobytes(), crc)


def parse_header(data) -> tuple:
    """(header record, Info with file_size 0) from the first HEADER_SIZE bytes alone.

    Checks every header field except the checksum, which also covers the stream
    table: enough for a reader that wants shape and mode before reading the rest.
    """
    buf = as_bytes_view(data)
    start = buf[: len(MAGIC)].tobytes()
    if not start:
        raise L3Error("not an L3 image: 0 bytes")
    if not MAGIC.startswith(start):  # the magic first: a short text file is not "truncated"
        raise L3Error(f"not an L3 image: magic {start!r}")
    if buf.size < HEADER_SIZE:
        raise L3Error(f"truncated: {buf.size} bytes is shorter than the {HEADER_SIZE}-byte header")
    header = buf[:HEADER_SIZE].view(HEADER_DTYPE)[0]
    version = int(header["version"])
    if version not in (1, 2, 3, 4, 5, 6, 7, 8, VERSION):
        raise L3Error(f"unsupported L3 version {version} (this decoder reads 1 (compact only), 2 to {VERSION})")
    if header["header_size"] != HEADER_SIZE:
        raise L3Error(f"header size {header['header_size']} != {HEADER_SIZE}")
    width, height = int(header["width"]), int(header["height"])
    channels, bits = int(header["channels"]), int(header["bits"])
    mode, transform = int(header["mode"]), int(header["transform"])
    tile_width, tile_height = int(header["tile_width"]), int(header["tile_height"])
    check_geometry(width, height, channels, bits, mode, tile_width, tile_height)
    if version == 1 and mode == MODE_FAST:
        raise L3Error(FAST_V1_REFUSED)
    if version < 9 and mode == MODE_COMPACT and tile_height != COMPACT_BAND_ROWS:
        raise L3Error(f"compact tiles of L3 version {version} are {COMPACT_BAND_ROWS} rows tall, got {tile_height}")
    if transform not in TRANSFORM_NAMES or (version == 1 and transform == TRANSFORM_RGB_MEAN):
        raise L3Error(f"unknown colour transform {transform} for L3 version {version}")
    if transform != TRANSFORM_NONE and channels < 3:
        raise L3Error(f"colour transform {TRANSFORM_NAMES[transform]} needs 3 or 4 channels")
    if header["reserved"] != 0:
        raise L3Error("reserved header field is not zero")
    tiles_x, tiles_y = tile_grid(width, height, tile_width, tile_height)
    stream_count = tiles_x * tiles_y * channels
    if header["stream_count"] != stream_count:
        raise L3Error(f"stream count {header['stream_count']} != {stream_count} for this geometry")
    info = Info(
        width=width,
        height=height,
        channels=channels,
        bits=bits,
        mode=MODE_NAMES[mode],
        transform=TRANSFORM_NAMES[transform],
        tile_width=tile_width,
        tile_height=tile_height,
        tiles_x=tiles_x,
        tiles_y=tiles_y,
        file_size=0,
        version=version,
    )
    return header, info


def parse(data, *, verify: bool = True) -> Parsed:
    """Validate header, stream table and (with verify) the payload checksum.

    Everything a decoder later trusts is checked here, before any allocation
    proportional to the image: sizes, limits, table monotonicity and checksums.
    """
    buf = as_bytes_view(data)
    header, info = parse_header(buf)
    stream_count = info.tiles_x * info.tiles_y * info.channels
    payload_offset = HEADER_SIZE + stream_count * STREAM_END_DTYPE.itemsize
    payload_size = int(header["payload_size"])
    if buf.size < payload_offset:
        raise L3Error(f"truncated: {buf.size} bytes, the stream table ends at {payload_offset}")
    table_bytes = buf[HEADER_SIZE:payload_offset]
    if header_crc(buf[:HEADER_SIZE], table_bytes) != header["header_crc"]:
        raise L3Error("header checksum mismatch: header or stream table is corrupt")
    if buf.size != payload_offset + payload_size:
        what = "truncated" if buf.size < payload_offset + payload_size else "trailing bytes"
        raise L3Error(f"{what}: file is {buf.size} bytes, header says {payload_offset + payload_size}")
    ends = table_bytes.view(STREAM_END_DTYPE).astype(np.int64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1]
    if np.any(ends - starts < 1) or ends[-1] != payload_size:
        raise L3Error("stream table is not increasing or does not end at the payload size")
    if verify and crc32(buf[payload_offset:]) != header["payload_crc"]:
        raise L3Error("payload checksum mismatch: the image data is corrupt")
    info = dataclasses.replace(info, file_size=int(buf.size))
    return Parsed(info, header, starts + payload_offset, ends + payload_offset, payload_offset)


def pack(
    *, width, height, channels, bits, mode, transform, tile_width, tile_height, stream_ends, payload
) -> bytes:
    """Assemble header, stream table and payload into one file."""
    header = np.zeros((), HEADER_DTYPE)
    header["magic"] = MAGIC
    header["version"] = VERSION
    header["header_size"] = HEADER_SIZE
    header["width"], header["height"] = width, height
    header["channels"], header["bits"] = channels, bits
    header["mode"], header["transform"] = mode, transform
    header["tile_width"], header["tile_height"] = tile_width, tile_height
    header["stream_count"] = len(stream_ends)
    header["payload_size"] = len(payload)
    header["payload_crc"] = crc32(payload)
    table = np.ascontiguousarray(stream_ends, dtype=STREAM_END_DTYPE)
    header_bytes = np.frombuffer(header.tobytes(), np.uint8)
    header["header_crc"] = header_crc(header_bytes, table.view(np.uint8))
    return header.tobytes() + table.tobytes() + bytes(payload)


# Per-stream decode status, reported by the CPU and GPU decoders alike.
STATUS_OK = 0
STATUS_BAD_KIND = 1
STATUS_BAD_SIZE = 2
STATUS_BAD_HEADER = 3
STATUS_CORRUPT = 4
STATUS_MESSAGES = {
    STATUS_BAD_KIND: "unknown stream kind, a kind the file's mode lacks, or a palette kind out of place",
    STATUS_BAD_SIZE: "stream size does not match its contents",
    STATUS_BAD_HEADER: "stream header or its tables out of range",
    STATUS_CORRUPT: "bitstream does not decode to its recorded lengths or to valid samples",
}
# Kind 10 (l3codec/ans_stream.py) reports through these codes, none of its own (a batch entry holds 3 bits):
# its header fields out of range and its tables (a table not summing to 2**P, a bit length past P + 1, an
# alphabet past the sample width's tokens, a bias table or table set cut short) are STATUS_BAD_HEADER; a
# row-length table or a row past the stream's end, or bytes after the last row, STATUS_BAD_SIZE; a row whose
# state and tokens do not decode to exactly its bytes (ans.ANS_BAD_STATE, ANS_BAD_TOKEN, ANS_ENDS_EARLY,
# ANS_ENDS_LATE) STATUS_CORRUPT, as a kind-1 row. The first failing check counts, in the order: header,
# tables, row-length table, rows from row 0, the end.
ANS_TABLE_FAULT_STATUS = STATUS_BAD_HEADER
ANS_ROW_FAULT_STATUS = STATUS_CORRUPT
