"""The ANS table stage's host side (l3codec/ans_stage.py, batch.py): which streams get a table block, where
the blocks lie, and the stream tables the kernels then read. Kind-10 streams are made here by relabelling
a compact file's coded streams (the stage's plan reads kinds and P only; the kernels check the rest)."""

import numpy as np
import pytest

import l3codec
from images import make_image
from l3codec import ans_stage
from l3codec import batch as batching
from l3codec import format as fmt


def _relabelled(precisions, *, mode="compact", channels=3, tile=(32, 64)):
    """A file whose streams s (a dict s: P) are kind 10 with header byte P, and its parsed stream table."""
    image = make_image("noise", 100, 70, channels, np.uint8, 1)
    data = bytearray(l3codec.encode(image, mode=mode, tile_width=tile[0], tile_height=tile[1]))
    parsed = fmt.parse(np.frombuffer(bytes(data), np.uint8))
    for stream, precision in precisions.items():
        start = int(parsed.stream_starts[stream])
        data[start] = ans_stage.KIND_CODED_ANS
        data[start + 2] = precision
    return np.frombuffer(bytes(data), np.uint8), parsed


def test_the_stage_plans_a_block_per_kind_10_stream_sized_by_its_precision():
    data, parsed = _relabelled({0: 11, 4: 6, 7: 13, 8: 12})
    prepared = batching.prepare([data], verify=False)
    tables = prepared.ans
    assert tables is not None and tables.streams.tolist() == [0, 4, 7, 8]
    records = tables.records
    assert records["slot_bytes"].tolist() == [15 << 11, 15 << 6, 0, 15 << 12]  # P 13 is out of range: no room
    assert (records["source"] == parsed.stream_starts[[0, 4, 7, 8]]).all()
    assert (records["prefix_bytes"] == 0).all() and (records["bits"] == 8).all()
    assert records["rows"].tolist() == [64, 64, 64, 64]  # the first tile row
    assert (records["target"] % 8 == 0).all()
    block_ends = records["target"] + ans_stage.BLOCK_SLOTS + records["slot_bytes"]
    assert (block_ends[:-1] <= records["target"][1:]).all() and block_ends[-1] <= tables.scratch_size
    starts, ends, _ = batching.expanded_tables(prepared, 1000)
    assert (starts[[0, 4, 7, 8]] == 1000 + records["target"]).all()
    assert (ends[[0, 4, 7, 8]] == 1000 + block_ends).all()
    others = np.setdiff1d(np.arange(len(starts)), [0, 4, 7, 8])
    assert (starts[others] == prepared.stream_starts[others]).all()


def test_a_crop_plans_only_its_tiles_and_fast_files_none():
    data, _ = _relabelled({0: 11, 3 * 3: 11})  # tile 0 channel 0 and tile 3 channel 0 (tiles_x = 3)
    crop = batching.prepare([data], [(0, 0, 10, 10)], verify=False)
    assert crop.ans.streams.tolist() == [0]
    fast, _ = _relabelled({0: 11}, mode="fast", tile=(32, 8))
    assert batching.prepare([fast], verify=False).ans is None  # fast mode: kind 10 is BAD_KIND


def test_the_packed_layout_holds_the_stage_records_and_its_stream_tables():
    data, _ = _relabelled({2: 10, 5: 12})
    prepared = batching.prepare([data], verify=False)
    layout = batching.packed_layout(prepared)
    assert layout.staged and layout.ans_count == 2 and layout.expansion_count == 0
    assert layout.scratch_size == prepared.ans.scratch_size
    buffer = np.zeros(layout.device_size, np.uint8)
    batching.write_packed(prepared, layout, buffer)
    records = batching.packed_ans_records(layout, buffer)
    expected = prepared.ans.kernel_records(layout.size)
    np.testing.assert_array_equal(records, expected.view(np.int64).reshape(2, -1))
    kernel_data, starts, ends, _, _ = batching.packed_views(layout, prepared.launches, buffer)
    assert kernel_data.size == layout.device_size
    assert (starts[[2, 5]] == layout.size + prepared.ans.starts).all()
    assert (ends[[2, 5]] == layout.size + prepared.ans.ends).all()
    streams = len(prepared.stream_starts)
    tasks = sum(len(launch.tasks) for launch in prepared.launches)
    tables = layout.size - (prepared.data.size + 7) // 8 * 8
    assert tables == batching.table_bytes(1, streams, tasks, 0, 2)


def test_the_table_blocks_have_a_budget_of_max_pixels_bytes():
    """A block is up to 65 KB whatever its stream's size: a batch of them is refused like one that decodes
    too many pixels, before anything is allocated; but against a budget of their own, so that the pixels
    and the tables of a large legal image do not add up to a refusal."""
    data, _ = _relabelled({s: 12 for s in range(0, 9, 3)})  # three streams, P = 12: 3 x 65,504 bytes
    prepared = batching.prepare([data], verify=False)
    needed = prepared.ans.scratch_size
    assert needed == 3 * (4064 + (15 << 12)) and needed > 100 * 70  # the tables outweigh the pixels
    assert batching.prepare([data], verify=False, max_pixels=needed).ans.scratch_size == needed
    with pytest.raises(l3codec.L3Error, match="bytes of rANS tables"):
        batching.prepare([data], verify=False, max_pixels=needed - 1)


def test_a_legal_image_at_the_pixel_budget_is_not_refused_for_its_tables():
    """1024 x 256 tiles of kind 10 (the reference encoder's) at exactly max_pixels pixels: the tables
    (about 35 KB a tile-channel) came on top of the pixels and refused it."""
    image = make_image("smooth_noise", 512, 2048, 3, np.uint8, 5)
    data = l3codec.encode(image, mode="compact")
    info = l3codec.info(data)
    assert (info.tile_width, info.tile_height) == (1024, 256)
    prepared = batching.prepare([data], max_pixels=512 * 2048)
    assert prepared.ans is not None and len(prepared.ans.records) == 12
