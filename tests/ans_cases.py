"""Kind-10 (compact v2) test cases shared by the simulator script and its tests: batches mixing kind-1 and
kind-10 tile-channels, and faults in kind-10 streams (tests/kind10_files.py frames the streams)."""

import numpy as np
from corruption import reseal
from images import make_image
from kind10_files import kind10_layout, with_kind10_streams

import l3codec
from l3codec import ans_cpu, encoder_policy
from l3codec import format as fmt

# (kind, height, width, channels, dtype, tile_width, tile_height, which streams are kind 10, bias table)
MIXED = [
    ("smooth_noise", 13, 21, 3, np.uint8, 16, 32, "every other", "on"),
    ("smooth_noise", 40, 17, 1, np.uint16, 16, 64, "coded", "on"),  # two bands, a partial tile
    ("noise", 5, 18, 2, np.uint8, 16, 32, "all", "choose"),
    ("gradient", 9, 20, 4, np.uint16, 16, 32, "every other", "off"),
    # palette (its index plane recoded), LZ and constant tiles: the LZ stage's scratch, then the blocks
    ("labels", 35, 18, 1, np.uint16, 16, 32, "all", "choose"),
    ("smooth_noise", 70, 33, 3, np.uint8, 32, 64, "every other", "choose"),  # two tile rows, a 1-column tile
]
RECODED_KINDS = (fmt.KIND_CODED, fmt.KIND_RAW, fmt.KIND_PALETTE)
CHOICES = {
    "all": lambda index, kind: kind in RECODED_KINDS,
    "coded": lambda index, kind: kind == fmt.KIND_CODED,
    "every other": lambda index, kind: kind in RECODED_KINDS and index % 2 == 0,
}


# files of the reference encoder with format 10's coder (encoder_policy.COMPACT_CODER "ans"): colour
# transforms too; (kind, height, width, channels, dtype, tile_width, tile_height, transform)
ENCODED = [
    ("smooth_noise", 45, 37, 3, np.uint8, 32, 64, "rg-mean"),
    ("gradient", 20, 24, 4, np.uint16, 16, 32, "subtract-green"),
]


def mixed_images():
    """The MIXED then the ENCODED items: (images, files)."""
    images, datas = [], []
    for seed, (kind, h, w, c, dtype, tw, th, which, bias) in enumerate(MIXED):
        image = make_image(kind, h, w, c, dtype, seed)
        images.append(image)
        datas.append(with_kind10_streams(image, tw, th, CHOICES[which], bias=bias))
    saved = encoder_policy.COMPACT_CODER
    encoder_policy.COMPACT_CODER = "ans"
    try:
        for seed, (kind, h, w, c, dtype, tw, th, transform) in enumerate(ENCODED):
            image = make_image(kind, h, w, c, dtype, seed)
            images.append(image)
            datas.append(l3codec.encode(image, mode="compact", tile_width=tw, tile_height=th,
                                        transform=transform))
    finally:
        encoder_policy.COMPACT_CODER = saved
    return images, datas


def edited(stream: bytes, position: int, value: int) -> bytes:
    return stream[:position] + bytes([value]) + stream[position + 1:]


def row_at(stream, rows, row):
    layout = kind10_layout(stream, 8, rows)
    return layout["rows"] + sum(layout["row_lengths"][:row])


# damage to a kind-10 stream (index, stream bytes, tile rows) -> bytes, in the order the checks meet it
FAULTS = {
    "header cut short": lambda i, s, rows: s[:3],
    "bias table cut short": lambda i, s, rows: edited(s, 1, 1)[:4 + 20],
    "bias flag on an unbiased stream": lambda i, s, rows: edited(s, 1, 1),
    "flags bit 1 set": lambda i, s, rows: edited(s, 1, s[1] | 2),
    "precision 5": lambda i, s, rows: edited(s, 2, 5),
    "precision 13": lambda i, s, rows: edited(s, 2, 13),
    "row-length bits 32": lambda i, s, rows: edited(s, 3, 32),
    "alphabet past TOKENS(8)": lambda i, s, rows: edited(s, 4, 25),
    "table set cut short": lambda i, s, rows: s[:6],
    "frequencies not summing to 2**P": lambda i, s, rows: edited(s, 2, s[2] - 1),
    "row-length table cut short": lambda i, s, rows: s[:kind10_layout(s, 8, rows)["lengths"] + 1],
    "bytes after the last row": lambda i, s, rows: s + b"\0\0",
    "last row stream one byte short": lambda i, s, rows: s[:-1],
    "row 3 damaged": lambda i, s, rows: flipped_row(s, rows, 3),
    "second band's row 34 damaged": lambda i, s, rows: flipped_row(s, rows, 34),
    "row 2 and 3 lengths swapped": lambda i, s, rows: swapped_rows(s, rows, 2),
}


def flipped_row(stream, rows, row):
    """Four bits of row `row`'s first byte (its final state's low byte) flipped."""
    at = row_at(stream, rows, row)
    return edited(stream, at, stream[at] ^ 0x5A)


def swapped_rows(stream, rows, row):
    """Rows row and row + 1's streams exchanged (the length table too): each row reads the other's bytes."""
    layout = kind10_layout(stream, 8, rows)
    a = row_at(stream, rows, row)
    b = a + layout["row_lengths"][row]
    c = b + layout["row_lengths"][row + 1]
    return stream[:a] + stream[b:c] + stream[a:b] + stream[c:]


FAULT_TILE = (40, 16)  # one 8-bit 1-channel tile of two bands


def fault_files() -> dict:
    """{fault name: (a file of one FAULT_TILE tile, a kind-10 stream (unbiased, so its table set starts at
    byte 4) with that fault, the damaged stream)}."""
    image = make_image("smooth_noise", *FAULT_TILE, 1, np.uint8, 11)
    files = {}
    for name, damage in FAULTS.items():
        damaged = []

        def keep(index, stream, rows, damage=damage, damaged=damaged):
            damaged.append(damage(index, stream, rows))
            return damaged[-1]

        data = with_kind10_streams(image, FAULT_TILE[1], 64, CHOICES["all"], damage=keep, bias="off")
        (stream,) = damaged
        files[name] = (data, stream)
    return files


def cpu_stream_status(stream: bytes) -> int:
    """The CPU decoder's status of a FAULT_TILE kind-10 stream (ans_cpu.decode_stream)."""
    return ans_cpu.decode_stream(stream, *FAULT_TILE, 8)[1]


def fast_file_with_kind10() -> bytes:
    """A fast file one of whose streams is kind 10 (compact mode's only: STATUS_BAD_KIND)."""
    image = make_image("smooth_noise", 9, 20, 1, np.uint8, 5)
    return with_kind10_streams(image, 16, 8, lambda index, kind: index == 1, mode="fast")


def fuzzed_files(count: int = 12, seed: int = 10) -> list:
    """Files of a two-channel 16-bit image (two bands, a partial tile) whose streams are all kind 10 with a
    bias table, each with 1-3 random bit flips in one kind-10 stream, checksums resealed."""
    image = make_image("smooth_noise", 40, 20, 2, np.uint16, 7)
    data = with_kind10_streams(image, 16, 64, CHOICES["all"], bias="on")
    parsed = fmt.parse(np.frombuffer(data, np.uint8))
    rng = np.random.default_rng(seed)
    damaged = []
    for _ in range(count):
        stream = int(rng.integers(len(parsed.stream_starts)))
        start, end = int(parsed.stream_starts[stream]), int(parsed.stream_ends[stream])
        bad = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(start, end))] ^= 1 << int(rng.integers(8))
        damaged.append(reseal(bytes(bad)))
    return damaged
