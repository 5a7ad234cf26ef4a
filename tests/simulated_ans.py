"""Runs the Numba CUDA kernels on kind-10 (compact v2) streams under NUMBA_ENABLE_CUDASIM=1 and prints JSON.

Called by tests/test_numba_ans.py in a subprocess (the simulator is chosen when numba is imported): batches
mixing kind-1 and kind-10 tile-channels decoded by decode_batch(backend="numba"), against the source images.
"""

import json
import os
import sys

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

import l3codec  # noqa: E402

from ans_streams import kind10_layout, with_kind10_streams  # noqa: E402
from images import make_image  # noqa: E402
from l3codec import gpu  # noqa: E402
from l3codec.format import STATUS_MESSAGES  # noqa: E402

# (kind, height, width, channels, dtype, tile_width, tile_height, which streams are kind 10)
MIXED = [
    ("smooth_noise", 13, 21, 3, np.uint8, 16, 32, "every other"),
    ("smooth_noise", 40, 17, 1, np.uint16, 16, 64, "all"),  # two bands, a partial tile
    ("noise", 5, 18, 2, np.uint8, 16, 32, "all"),
    ("gradient", 9, 20, 4, np.uint16, 16, 32, "every other"),
]
CHOICES = {"all": lambda index, kind: kind == 1, "every other": lambda index, kind: kind == 1 and index % 2 == 0}


def host(array):
    return np.asarray(array.copy_to_host())


def mixed_images():
    images, datas = [], []
    for seed, (kind, h, w, c, dtype, tw, th, which) in enumerate(MIXED):
        image = make_image(kind, h, w, c, dtype, seed)
        images.append(image)
        datas.append(with_kind10_streams(image, tw, th, CHOICES[which]))
    return images, datas


def edited(stream: bytes, position: int, value: int) -> bytes:
    return stream[:position] + bytes([value]) + stream[position + 1:]


def row_at(stream, rows, row):
    layout = kind10_layout(stream, 8, rows)
    return layout["rows"] + sum(layout["row_lengths"][:row])


# damage to a kind-10 stream (index, stream bytes, tile rows) -> bytes, in the order the checks meet it
FAULTS = {
    "header cut short": lambda i, s, rows: s[:3],
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
    "row 3 damaged": lambda i, s, rows: edited(s, row_at(s, rows, 3), s[row_at(s, rows, 3)] ^ 0x5A),
    "second band's row 34 damaged": lambda i, s, rows: edited(s, row_at(s, rows, 34), s[row_at(s, rows, 34)] ^ 0x5A),
    "row 2 and 3 lengths swapped": lambda i, s, rows: swapped_rows(s, rows, 2),
}


def swapped_rows(stream, rows, row):
    """Rows row and row + 1's streams exchanged (the length table too): each row reads the other's bytes."""
    layout = kind10_layout(stream, 8, rows)
    a = row_at(stream, rows, row)
    b = a + layout["row_lengths"][row]
    c = b + layout["row_lengths"][row + 1]
    return stream[:a] + stream[b:c] + stream[a:b] + stream[c:]


def fault_files():
    """{fault name: a 1-channel 8-bit file of one tile of two bands, every stream kind 10 (unbiased, so the
    table set starts at byte 4), that fault in it}."""
    image = make_image("smooth_noise", 40, 16, 1, np.uint8, 11)
    return {name: with_kind10_streams(image, 16, 64, CHOICES["all"], damage=damage, bias="off")
            for name, damage in FAULTS.items()}


def batch_status(data, *, reverse_tasks=False) -> int:
    """The status decode_batch reports for a one-item batch: 0, or the code its L3Error names."""
    prepared = gpu.prepare([data])
    if reverse_tasks:
        for launch in prepared.launches:
            launch.tasks = launch.tasks[::-1].copy()
    try:
        gpu.decode_prepared(prepared, backend="numba")
    except l3codec.L3Error as error:
        codes = [code for code, message in STATUS_MESSAGES.items() if message in str(error)]
        assert len(codes) == 1 and "item 0" in str(error), str(error)
        return codes[0]
    return 0


def main():
    results = {}
    images, datas = mixed_images()
    decoded = gpu.decode_batch(datas, backend="numba")
    results["mixed batch matches source"] = [bool(np.array_equal(host(d), i)) for d, i in zip(decoded, images)]
    files = fault_files()
    results["fault statuses"] = {name: batch_status(data) for name, data in files.items()}
    results["fault statuses, tasks reversed"] = {name: batch_status(data, reverse_tasks=True)
                                                 for name, data in files.items()}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
