"""What staging reserves for a batch's launch tables against what batch.py builds, per geometry: the
sizing rules (batch.most_streams, most_tasks, table_bytes) are those the packed layout follows, so the
two cannot drift apart again (the staging bound once counted a task per stream, not per compact band)."""

import numpy as np
import pytest

import l3codec
from images import make_image
from l3codec import batch as batching
from l3codec import format as fmt
from l3codec.staging import staging_bytes
from stream_census import stream_census

# (image kind, height, width, channels, dtype, mode, tile width, tile height, LZ stream kind it must hold)
GEOMETRIES = [
    ("noise", 70, 90, 3, np.uint8, "compact", 16, 32, None),
    ("constant", 600, 300, 1, np.uint8, "compact", 16, 256, None),  # 8 bands per tile, 6-byte streams
    ("constant", 300, 260, 1, np.uint8, "compact", 64, 256, None),
    ("smooth_noise", 200, 100, 2, np.uint16, "compact", 32, 96, None),
    ("constant", 100, 90, 1, np.uint8, "fast", 16, 8, None),  # the smallest tiles
    ("gradient", 90, 300, 4, np.uint16, "fast", 64, 24, None),
    ("text", 40, 256, 1, np.uint8, "fast", 256, 8, "lz"),
    ("text", 64, 128, 1, np.uint16, "compact", 128, 32, "lz"),
    ("coloured_text", 40, 128, 3, np.uint8, "compact", 64, 32, "pixel_lz"),
]


def _encode(kind, height, width, channels, dtype, mode, tile_width, tile_height, lz_kind):
    image = make_image(kind, height, width, channels, dtype, 1)
    data = l3codec.encode(image, mode=mode, tile_width=tile_width, tile_height=tile_height)
    if lz_kind is not None:
        assert stream_census(data)[lz_kind], "the geometry is meant to hold LZ streams"
    return data


class _IndexReader:
    """What staging_bytes reads of a dataset: its length and the index's size and shape columns."""

    def __init__(self, files):
        infos = [l3codec.info(data) for data in files]
        self.index = {"image_size": np.array([len(data) for data in files]),
                      "image_height": np.array([info.height for info in infos]),
                      "image_width": np.array([info.width for info in infos]),
                      "image_channels": np.array([info.channels for info in infos])}

    def __len__(self):
        return len(self.index["image_size"])


def _packed_tables(prepared) -> int:
    layout = batching.packed_layout(prepared)
    return layout.size - (prepared.data.size + 7) // 8 * 8  # the tables follow the data, 8-byte aligned


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[5]}-{g[0]}-{g[6]}x{g[7]}")
def test_the_packed_tables_follow_the_sizing_rules_and_stay_within_the_staging_bound(geometry):
    data = _encode(*geometry)
    info = l3codec.info(data)
    prepared = batching.prepare([data])
    streams, tasks = len(prepared.stream_starts), sum(len(launch.tasks) for launch in prepared.launches)
    expansions = 0 if prepared.lz is None else len(prepared.lz.records)
    ans_tables = 0 if prepared.ans is None else len(prepared.ans.records)  # kind-10 streams' table stage
    assert _packed_tables(prepared) == batching.table_bytes(1, streams, tasks, expansions, ans_tables)
    assert streams <= batching.most_streams(len(data), info.height, info.width, info.channels)
    assert tasks <= batching.most_tasks(info.height, info.width, streams)
    assert expansions + ans_tables <= streams
    most = batching.most_table_bytes(len(data), info.height, info.width, info.channels)
    assert _packed_tables(prepared) <= most
    if geometry[7] > fmt.COMPACT_BAND_ROWS and geometry[5] == "compact":
        assert tasks > streams  # the case the staging bound once missed: a task per band


def test_staging_bytes_hold_every_batch_of_a_mixed_split():
    """A split of every geometry: any batch (the largest items, repeats) packs within staging_bytes."""
    files = [_encode(*geometry) for geometry in GEOMETRIES]
    reader = _IndexReader(files)
    for batch_size in (1, 3, len(files)):
        reserved = staging_bytes(reader, ("image",), batch_size)
        for first in range(len(files)):
            chosen = [files[(first + i) % len(files)] for i in range(batch_size)]
            assert batching.packed_layout(batching.prepare(chosen)).size <= reserved
        largest = max(files, key=len)  # a sample repeated fills the batch: its tables once per appearance
        assert batching.packed_layout(batching.prepare([largest] * batch_size)).size <= reserved
