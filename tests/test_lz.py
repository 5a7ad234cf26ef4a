"""LZ streams (kind 6, docs/FORMAT.md §5.2) and pixel LZ streams (kind 7, §5.3): LZ4 blocks that lz4
itself reads and writes, their Huffman-coded forms (kinds 8 and 9, §5.4), the encoder's choice, and
the GPU batch's expansion tables."""

import imagecodecs
import numpy as np
import pytest

import l3codec
from l3codec import batch as batching
from l3codec import cpu, huffman, lz
from l3codec import format as fmt
from l3codec.regions import region_streams
from images import make_image
from stream_census import plane_streams

_encoders = cpu._encoders


def _blocks_inputs():
    """Bytes an LZ4 block must carry: no repeats, runs, repeats at many distances, tiny sizes."""
    rng = np.random.default_rng(5)
    inputs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (1, 5, 12, 13, 17, 300)]
    inputs.append(np.zeros(5000, np.uint8))  # one long run: offset 1, long length bytes
    word = rng.integers(0, 256, 37, dtype=np.uint8)
    inputs.append(np.tile(word, 400))  # a 37-byte period
    text = make_image("text", 64, 256, 1, np.uint8, 2).reshape(-1)
    inputs.append(text)
    inputs.append(make_image("text", 32, 128, 1, np.uint16, 3).reshape(-1).view(np.uint8))
    mixed = rng.integers(0, 256, 20000, dtype=np.uint8)
    for start in rng.integers(0, 19000, 60):  # literal runs longer than 15 and matches between them
        length = int(rng.integers(4, 600))
        source = int(rng.integers(0, max(1, start - 1)))
        mixed[start:start + length] = np.resize(mixed[source:source + length], length)[:len(mixed[start:start + length])]
    inputs.append(mixed)
    return inputs


def _expand(block: bytes, size: int):
    out = np.zeros(size, np.uint8)
    buf = np.frombuffer(bytes([fmt.KIND_LZ]) + block, np.uint8)
    return _encoders.expand_lz(buf, 1, buf.size, out, 0, size), out


@pytest.mark.parametrize("index", range(len(_blocks_inputs())))
def test_lz4_reads_our_blocks_and_we_read_its_blocks(index):
    raw = np.ascontiguousarray(_blocks_inputs()[index])
    head, chain = np.empty(1 << lz.HASH_BITS, np.int32), np.empty(raw.size, np.int32)
    ours = np.zeros(raw.size * 2 + 64, np.uint8)
    end = _encoders.encode_lz_block(raw, raw.size, ours, 0, ours.size, head, chain)
    assert end > 0
    block = ours[:end].tobytes()
    assert imagecodecs.lz4_decode(block, header=False, out=raw.size) == raw.tobytes()  # lz4 reads ours
    status, out = _expand(block, raw.size)
    assert status == fmt.STATUS_OK and np.array_equal(out, raw)
    for hc in (False, True):  # and we read lz4's, fast and high-compression
        theirs = imagecodecs.lz4_encode(raw.tobytes(), hc=hc, header=False)
        status, out = _expand(theirs, raw.size)
        assert status == fmt.STATUS_OK and np.array_equal(out, raw), hc


def _coded(block: np.ndarray, kind: int = fmt.KIND_LZ_CODED) -> bytes:
    """An LZ4 block (our encoder's) as a coded stream, through the compiled encoder."""
    padded = np.concatenate([np.zeros(1, np.uint8), block])  # the block at 1.., as the encoder holds it
    counts = np.zeros((huffman.TABLES, huffman.SYMBOLS), np.int64)
    lengths = np.zeros_like(counts)
    size = _encoders.coded_size(padded, 1, padded.size, counts, lengths)
    out = np.zeros(size + 8, np.uint8)
    end = _encoders.write_coded_lz(padded, 1, padded.size, lengths, kind, out, 0)
    assert end == size
    assert lengths.max() <= huffman.MAX_CODE_BITS
    return out[:end].tobytes()


def _expand_coded(stream: bytes, size: int):
    out = np.zeros(size, np.uint8)
    buf = np.frombuffer(stream, np.uint8)
    tables = np.zeros((huffman.TABLES, huffman.TABLE_SIZE), np.int32)
    return _encoders.expand_lz_stream(buf, 0, buf.size, tables, out, 0, size), out


@pytest.mark.parametrize("index", range(len(_blocks_inputs())))
def test_coded_blocks_make_the_bytes_of_their_plain_blocks(index):
    """A block's Huffman-coded form expands to the same bytes; every cut of it, and a byte added, is
    corrupt, never a fault."""
    raw = np.ascontiguousarray(_blocks_inputs()[index])
    head, chain = np.empty(1 << lz.HASH_BITS, np.int32), np.empty(raw.size, np.int32)
    block = np.zeros(raw.size * 2 + 64, np.uint8)
    block = block[:_encoders.encode_lz_block(raw, raw.size, block, 0, block.size, head, chain)]
    stream = _coded(block)
    status, out = _expand_coded(stream, raw.size)
    assert status == fmt.STATUS_OK and np.array_equal(out, raw)
    assert _expand_coded(stream + b"\0", raw.size)[0] == fmt.STATUS_CORRUPT
    assert _expand_coded(stream, raw.size + 1)[0] == fmt.STATUS_CORRUPT
    for cut in range(1, len(stream), max(1, len(stream) // 97)):
        assert _expand_coded(stream[:cut], raw.size)[0] == fmt.STATUS_CORRUPT, cut


def test_code_lengths_stay_within_a_nibble():
    """Counts in a Fibonacci sequence make the deepest Huffman tree (29 levels for 30 symbols): the
    encoder flattens it to at most 15, and the code stays complete (its lengths fill the code space)."""
    counts = np.zeros((huffman.TABLES, huffman.SYMBOLS), np.int64)
    fibonacci = [1, 1]
    while len(fibonacci) < 30:
        fibonacci.append(fibonacci[-1] + fibonacci[-2])
    counts[0, :30] = fibonacci
    counts[1, 7] = 5  # a lone symbol: one bit
    lengths = np.zeros_like(counts)
    for table in range(2):
        _encoders.code_lengths(counts, lengths, table)
    assert 0 < lengths[0, :30].min() and lengths[0, :30].max() <= huffman.MAX_CODE_BITS and (lengths[0, 30:] == 0).all()
    assert sum(2.0 ** -int(n) for n in lengths[0, :30]) == 1.0
    assert lengths[1].tolist() == [0] * 7 + [1] + [0] * 248


def test_a_block_that_makes_other_than_its_bytes_is_corrupt():
    raw = np.tile(np.arange(10, dtype=np.uint8), 30)
    block = imagecodecs.lz4_encode(raw.tobytes(), header=False)
    assert _expand(block, raw.size + 1)[0] == fmt.STATUS_CORRUPT  # one byte short
    assert _expand(block, raw.size - 1)[0] == fmt.STATUS_CORRUPT  # one byte too many
    for cut in range(len(block)):  # every cut of the block: never the bytes, never a fault
        status, _ = _expand(block[:cut], raw.size)
        assert status == fmt.STATUS_CORRUPT, cut


@pytest.mark.parametrize("mode", ["compact", "fast"])
@pytest.mark.parametrize("channels, dtype", [(1, np.uint8), (1, np.uint16)])
def test_text_takes_lz_streams_each_smaller_than_its_coded_stream(mode, channels, dtype):
    image = make_image("text", 40, 256, channels, dtype, 1)
    data = l3codec.encode(image, mode=mode, tile_width=256, tile_height=32 if mode == "compact" else 16)
    np.testing.assert_array_equal(l3codec.decode(data), image)
    np.testing.assert_array_equal(l3codec.decode(data, region=(3, 50, 30, 100)), image[3:33, 50:150])
    parsed = fmt.parse(data)
    lz_streams = [(stream, start, end) for stream, start, end in plane_streams(data) if lz.is_lz(data[start])]
    assert lz_streams, "no LZ stream in a page of repeated glyphs"
    assert fmt.KIND_LZ_CODED in {data[start] for _, start, _ in lz_streams}, "no coded LZ stream"
    coded = _coded_streams(image, data, mode)
    plain = [(stream, start, end) for stream, start, end in lz_streams if start == parsed.stream_starts[stream]]
    for stream, start, end in plain:  # (an LZ index plane's rival is the palette's coded index plane)
        assert end - start < coded[stream]


def _coded_streams(image, data, mode):
    """The size of each stream's plane coded by the mode's own coder (an LZ stream's rival)."""
    info = fmt.parse(data).info
    planes = np.empty((info.channels, info.height, info.width), info.dtype)
    cpu.image_to_planes(image.reshape(info.height, info.width, -1), planes, fmt.TRANSFORMS[info.transform], info.bits)
    encode = _encoders.encode_compact_stream if mode == "compact" else _encoders.encode_fast_stream
    out = np.zeros(1 << 20, np.uint8)
    sizes = np.zeros(info.tiles_x * info.tiles_y * info.channels, np.int64)
    for stream in range(sizes.size):
        tile, channel = divmod(stream, info.channels)
        ty, tx = divmod(tile, info.tiles_x)
        plane = planes[channel, ty * info.tile_height:(ty + 1) * info.tile_height,
                       tx * info.tile_width:(tx + 1) * info.tile_width]
        sizes[stream] = encode(np.ascontiguousarray(plane), info.bits, out, 0)
    return sizes


@pytest.mark.parametrize("mode", ["compact", "fast"])
@pytest.mark.parametrize("channels, dtype", [(3, np.uint8), (4, np.uint16)])
def test_coloured_text_takes_pixel_lz_streams_smaller_than_its_planes(mode, channels, dtype):
    """Text in several colours: the tile's pixels as one block (kind 7) and members, smaller together
    than the tile's planes coded one by one; crops decode through it."""
    image = make_image("coloured_text", 40, 256, channels, dtype, 1)
    data = l3codec.encode(image, mode=mode, tile_width=128, tile_height=32 if mode == "compact" else 16)
    np.testing.assert_array_equal(l3codec.decode(data), image)
    np.testing.assert_array_equal(l3codec.decode(data, region=(3, 50, 30, 100)), image[3:33, 50:150])
    parsed = fmt.parse(data)
    starts, ends = parsed.stream_starts, parsed.stream_ends
    pixel_tiles = [stream // channels for stream in range(0, starts.size, channels) if lz.is_pixel_lz(data[starts[stream]])]
    assert pixel_tiles, "no pixel LZ stream in a page of coloured glyphs"
    coded = _coded_streams(image, data, mode)
    for tile in pixel_tiles:
        streams = range(tile * channels, (tile + 1) * channels)
        assert [data[starts[s]] for s in streams[1:]] == [fmt.KIND_PALETTE_MEMBER] * (channels - 1)
        assert sum(int(ends[s] - starts[s]) for s in streams) < coded[streams].sum()


def sky_plane(shape, common_share, low, high, seed):
    """One value in common_share of the samples, the rest spread over [low, high): a sky's plane."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < common_share, 120, rng.integers(low, high, shape)).astype(np.uint8)


def test_fast_colour_planes_take_lz_only_where_it_gains_the_gpu_margin():
    """In fast mode a colour image's plane becomes an LZ stream only where that is
    FAST_COLOUR_LZ_GAIN_PERCENT smaller than its coded stream (an expansion costs a GPU more than the
    decode); the same plane as a one-channel image takes any gain."""
    planes = [sky_plane((64, 256), 0.25, 117, 124, 0), sky_plane((64, 256), 0.9, 118, 123, 1),
              sky_plane((64, 256), 0.5, 119, 122, 2)]
    image = np.stack(planes, axis=-1)
    data = l3codec.encode(image, mode="fast", tile_width=256, tile_height=64, transform="none")
    np.testing.assert_array_equal(l3codec.decode(data), image)
    coded = _coded_streams(image, data, "fast")
    raw, block, head, chain = cpu.lz_scratch(256, 64, 8)
    out = np.zeros(1 << 17, np.uint8)
    starts = fmt.parse(data).stream_starts
    taken = {}
    for channel, plane in enumerate(planes):
        lz_size = _encoders.smaller_as_lz(plane, 8, out, 0, int(coded[channel]), raw, block, head, chain, False, 0)
        assert lz_size < coded[channel]  # an LZ stream is smaller for every one of them ...
        wanted = lz_size < coded[channel] - coded[channel] * lz.FAST_COLOUR_LZ_GAIN_PERCENT // 100
        assert lz.is_lz(data[starts[channel]]) == wanted, channel  # ... and taken in colour where it gains the margin
        taken[channel] = wanted
        alone = l3codec.encode(plane, mode="fast", tile_width=256, tile_height=64)
        assert lz.is_lz(alone[fmt.parse(alone).stream_starts[0]])  # alone: any gain
    assert set(taken.values()) == {True, False}


def test_photographs_pay_no_match_search():
    """lz_may_pay turns photographs away before the search (their streams would not shrink)."""
    image = make_image("smooth_noise", 64, 256, 3, np.uint8, 2)
    for mode in ("compact", "fast"):
        data = l3codec.encode(image, mode=mode)
        assert not [s for s, start, _ in plane_streams(data) if lz.is_lz(data[start]) or lz.is_pixel_lz(data[start])]
    histogram = np.empty(1 << lz.HASH_BITS, np.int32)
    assert not _encoders.lz_may_pay(image[:, :, 1], histogram, True)
    assert _encoders.lz_may_pay(make_image("text", 64, 256, 1, np.uint8, 2), histogram, False)


def contour_map(height, width):
    """Bands of 40 ids across a smooth field, none of them a quarter of the samples (as the level sets
    of bench/make_corpus.py's label maps): each row repeats the row above, shifted at the bands' edges."""
    yy, xx = np.mgrid[0:height, 0:width]
    field = yy * 0.7 + xx * 0.5 + 12 * np.sin(xx / 23.0) + 9 * np.cos(yy / 17.0)
    return (field // 6 % 40).astype(np.uint8)


def test_label_maps_of_many_regions_are_searched_for_matches(monkeypatch):
    """lz_may_pay lets through a one-channel image's plane whose samples mostly repeat their left
    neighbour though no value dominates, and the match search then shrinks its streams in both modes
    (compact's kind-1 streams: its kind 10 codes these maps smaller than an LZ stream does)."""
    from l3codec import encoder_policy

    monkeypatch.setattr(encoder_policy, "COMPACT_CODER", "rice")
    labels = contour_map(64, 256)
    assert np.bincount(labels.ravel()).max() * lz.DOMINANT_SHARE < labels.size
    histogram = np.empty(1 << lz.HASH_BITS, np.int32)
    assert _encoders.lz_may_pay(labels, histogram, True)
    assert not _encoders.lz_may_pay(labels, histogram, False)  # as a colour plane: the dominant-value test alone
    for mode in ("compact", "fast"):
        data = l3codec.encode(labels, mode=mode, tile_height=32 if mode == "compact" else None)
        assert [s for s, start, _ in plane_streams(data) if lz.is_lz(data[start])]
        np.testing.assert_array_equal(l3codec.decode(data), labels)


def test_gpu_batches_expand_lz_streams_and_palette_index_planes_into_scratch():
    """batch.prepare lists every LZ plane stream of the tiles a region needs, a palette's LZ index
    plane with its header and table as the prefix it keeps; expansions do not overlap."""
    plain = l3codec.encode(make_image("text", 40, 256, 1, np.uint8, 1), mode="fast", tile_width=256, tile_height=8)
    palette = l3codec.encode(make_image("text", 32, 128, 1, np.uint16, 1), mode="compact", tile_width=128)
    regions = [None, None, (9, 0, 8, 256)]
    prepared = batching.prepare([plain, palette, plain], regions)
    expansions = prepared.lz.records
    expected = []
    for item, (data, region) in enumerate(zip((plain, palette, plain), regions)):
        info = l3codec.info(data)
        needed = set(region_streams(info, region or (0, 0, info.height, info.width))[0].tolist())
        expected += [(item, start != fmt.parse(data).stream_starts[stream]) for stream, start, _ in plane_streams(data)
                     if lz.is_lz(data[start]) and stream in needed]
    assert sorted(zip(expansions["status_index"].tolist(), (expansions["prefix_bytes"] > 0).tolist())) == sorted(expected)
    assert (True in [palette for _, palette in expected]) and len(expected) > 3  # plain LZ planes and an LZ index plane
    assert (expansions["prefix_bytes"][expansions["status_index"] == 1] == 2 + 4 * 2).all()  # 4 colours of 16 bits
    assert np.isin(prepared.data[expansions["source"]], (fmt.KIND_LZ, fmt.KIND_LZ_CODED)).all()
    spans = expansions["prefix_bytes"] + 1 + expansions["plane_bytes"]
    order = np.argsort(expansions["target"])
    assert (expansions["target"][order][1:] >= (expansions["target"] + spans)[order][:-1]).all()
    assert prepared.lz.scratch_size >= int((expansions["target"] + spans).max())
    starts, ends, _ = batching.expanded_tables(prepared, 1000)
    assert (starts[prepared.lz.streams] == expansions["target"] + 1000).all()
    assert (ends - starts)[prepared.lz.streams].tolist() == spans.tolist()


def test_the_lz_stage_changes_the_kernels_stream_tables_only_where_a_batch_has_lz_streams():
    """A batch without LZ streams has no LZ stage: the kernels read its own packed stream tables. With
    one, the kernels' tables (packed_views) differ from the items' own (packed_streams) exactly at the
    expanded streams, which then lie in the scratch area after the packed bytes."""
    plain = l3codec.encode(make_image("noise", 40, 64, 3, np.uint8, 1), mode="compact")
    text_image = make_image("text", 40, 256, 1, np.uint8, 1)
    text = l3codec.encode(text_image, mode="fast", tile_width=256, tile_height=8)
    for files in ([plain, plain], [plain, text]):
        prepared = batching.prepare(files)
        layout = batching.packed_layout(prepared)
        buffer = np.zeros(layout.device_size, np.uint8)
        batching.write_packed(prepared, layout, buffer)
        data, starts, ends, _, records = batching.packed_views(layout, prepared.launches, buffer)
        own_data, own_starts, own_ends = batching.packed_streams(layout, buffer)
        np.testing.assert_array_equal(own_data, prepared.data)
        np.testing.assert_array_equal(own_starts, prepared.stream_starts)
        np.testing.assert_array_equal(own_ends, prepared.stream_ends)
        if prepared.lz is None:
            assert files == [plain, plain] and len(records) == 0 and data.size == prepared.data.size
            np.testing.assert_array_equal(starts, own_starts)
            continue
        assert data.size == layout.size + prepared.lz.scratch_size
        assert len(records) == len(prepared.lz.records)
        moved = np.flatnonzero((starts != own_starts) | (ends != own_ends))
        np.testing.assert_array_equal(moved, np.sort(prepared.lz.streams))
        assert (starts[moved] >= layout.size).all() and (ends[moved] <= data.size).all()


def test_the_lz_planes_a_batch_expands_count_against_its_pixel_budget():
    """A 1x1 crop of an LZ tile expands the whole plane on the device: those samples count against
    max_pixels, checked before anything is allocated, so tiny crops cannot ask for a huge scratch area."""
    data = l3codec.encode(make_image("text", 40, 256, 1, np.uint8, 1), mode="fast", tile_width=256, tile_height=8)
    crops = [(0, 0, 1, 1)] * 8
    expanded = batching.prepare([data] * 8, crops).lz.records["plane_bytes"].sum()  # 8-bit: a byte per sample
    assert expanded == 8 * 256 * 8
    batching.prepare([data] * 8, crops, max_pixels=8 + expanded)
    with pytest.raises(l3codec.L3Error, match=f"batch decodes 8 pixels and expands {expanded} samples of LZ streams"):
        batching.prepare([data] * 8, crops, max_pixels=7 + expanded)
