"""Round trips over shape, channels, dtype, mode, tile geometry and content."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import l3codec
from images import KINDS, make_image
from stream_census import assert_within_encoder_bound
from l3codec import cpu, fast
from l3codec import format as fmt


@st.composite
def cases(draw):
    """Every tile geometry the format allows (None: the encoder's own choice, taller or narrower tiles
    for flat content included), with images of one partial tile row and of several full ones."""
    mode = draw(st.sampled_from(["compact", "fast"]))
    tile_height = draw(st.none() | st.sampled_from(fmt.MODE_SPECS[fmt.MODES[mode]].tile_heights))
    tall = tile_height or fmt.FLAT_TILE_HEIGHT
    height = draw(st.integers(1, 80) | st.integers(max(1, tall - 8), tall + 40))  # a tall tile's bands, a partial last band
    width = draw(st.integers(1, 90))
    channels = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([np.uint8, np.uint16]))
    kind = draw(st.sampled_from(KINDS))
    tile_width = draw(st.sampled_from([None, 16, 32, 48, 512]))
    seed = draw(st.integers(0, 2**16))
    return mode, make_image(kind, height, width, channels, dtype, seed), tile_width, tile_height


@given(cases())
def test_round_trip(case):
    mode, image, tile_width, tile_height = case
    data = l3codec.encode(image, mode=mode, tile_width=tile_width, tile_height=tile_height)
    decoded = l3codec.decode(data)
    assert decoded.dtype == image.dtype and decoded.shape == image.shape
    np.testing.assert_array_equal(decoded, image)
    info = l3codec.info(data)
    assert (info.mode, info.shape, info.dtype) == (mode, image.shape, image.dtype)
    assert_within_encoder_bound(data)


@given(cases(), st.data())
def test_region_matches_full_decode(case, data):
    mode, image, tile_width, tile_height = case
    encoded = l3codec.encode(image, mode=mode, tile_width=tile_width, tile_height=tile_height)
    height, width = image.shape[:2]
    y = data.draw(st.integers(0, height - 1))
    x = data.draw(st.integers(0, width - 1))
    h = data.draw(st.integers(1, height - y))
    w = data.draw(st.integers(1, width - x))
    np.testing.assert_array_equal(l3codec.decode(encoded, region=(y, x, h, w)), image[y:y + h, x:x + w])


@pytest.mark.parametrize("mode", ["compact", "fast"])
@pytest.mark.parametrize("transform", ["none", "subtract-green", "rg-mean"])
def test_transform_choice_round_trips(transform, mode):
    for channels, dtype in ((3, np.uint8), (4, np.uint16)):
        image = make_image("smooth_noise", 40, 50, channels, dtype, seed=3)
        data = l3codec.encode(image, transform=transform, mode=mode)
        assert l3codec.info(data).transform == transform
        np.testing.assert_array_equal(l3codec.decode(data), image)


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_small_images_take_the_modes_default_transform(mode):
    """An 8 x 8 colour image is too small for the transform choice's sample (encoder_policy.TRANSFORM_MIN_SAMPLES):
    the mode's default; one channel: none."""
    data = l3codec.encode(make_image("gradient", 8, 8, 3, np.uint8), mode=mode)
    assert l3codec.info(data).transform == fmt.TRANSFORM_NAMES[fmt.DEFAULT_COLOUR_TRANSFORM[fmt.MODES[mode]]]
    assert l3codec.info(l3codec.encode(np.zeros((8, 8), np.uint8), mode=mode)).transform == "none"


@pytest.mark.parametrize("mode", ["compact", "fast"])
def test_default_transform_is_chosen_per_image(mode):
    """Without a transform asked for, a colour wheel (R, G and B each ramp their own way) takes another
    transform than the mode's default, which makes its file smaller (8-bit: none, 0.80-0.85x; 16-bit with
    alpha in compact: subtract-green); smooth noise whose channels move together keeps the default, the
    smallest of the three there. (In fast the 16-bit wheel keeps rg-mean, though none is smaller: the
    estimate misses it.) All round-trip."""
    default = fmt.TRANSFORM_NAMES[fmt.DEFAULT_COLOUR_TRANSFORM[fmt.MODES[mode]]]
    cases = [("colour_wheel", 3, np.uint8, "none"), ("smooth_noise", 3, np.uint8, default)]
    if mode == "compact":
        cases.append(("colour_wheel", 4, np.uint16, "subtract-green"))
    for kind, channels, dtype, expected in cases:
        image = make_image(kind, 256, 256, channels, dtype, seed=1)
        data = l3codec.encode(image, mode=mode)
        assert l3codec.info(data).transform == expected, kind
        np.testing.assert_array_equal(l3codec.decode(data), image)
        sizes = {name: len(l3codec.encode(image, mode=mode, transform=name)) for name in fmt.TRANSFORMS}
        assert len(data) == sizes[expected] == min(sizes.values()), (kind, sizes)
        if expected != default:
            assert len(data) < 0.9 * sizes[default], (kind, sizes)


@pytest.mark.parametrize("bits", [8, 16])
def test_transform_residual_counts_match_the_predictors(bits):
    """cpu.transform_residual_counts (the transform choice's statistics) against numpy and the plain
    fast.predict: each transform's planes, the residuals of the sampled rows given the rows above (compact:
    MED from column 1; fast: its phases, the image one tile wide), counted by value mod 2**bits."""
    from l3codec import cpu, fast

    dtype = np.uint8 if bits == 8 else np.uint16
    image = np.concatenate([make_image("noise", 20, 37, 4, dtype, seed=2), make_image("smooth_noise", 20, 37, 4, dtype)])
    rows = np.array([1, 7, 8, 39])
    compact_counts = cpu.transform_residual_counts(fmt.readonly(image), rows, bits, fmt.MODE_COMPACT)
    fast_counts = cpu.transform_residual_counts(fmt.readonly(image), rows, bits, fmt.MODE_FAST)
    for transform, name in fmt.TRANSFORM_NAMES.items():
        planes = np.empty((4, *image.shape[:2]), dtype)
        cpu.image_to_planes(fmt.readonly(image), planes, transform, bits)
        planes = planes[:3].astype(np.int64)
        w, n, nw = planes[:, rows, :-1], planes[:, rows - 1, 1:], planes[:, rows - 1, :-1]
        residuals = (planes[:, rows, 1:] - np.clip(w + n - nw, np.minimum(w, n), np.maximum(w, n))) % (1 << bits)
        expected = np.stack([np.bincount(plane.ravel(), minlength=1 << bits) for plane in residuals])
        np.testing.assert_array_equal(compact_counts[transform], expected, err_msg=name)
        fast_residuals = [[(planes[c, y, x] - fast.predict(planes[c, [y - 1, y]], 1, x, image.shape[1], bits)) % (1 << bits)
                           for y in rows for x in range(image.shape[1])] for c in range(3)]
        expected = np.stack([np.bincount(plane, minlength=1 << bits) for plane in fast_residuals])
        np.testing.assert_array_equal(fast_counts[transform], expected, err_msg=name)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_colour_transforms_invert_at_the_extremes(dtype):
    """Every combination of extreme and middle samples, and random pixels, through both transforms."""
    top = np.iinfo(dtype).max
    levels = np.array([0, 1, 2, top // 2, top // 2 + 1, top - 1, top])
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1, 1, 3)
    noise = np.random.default_rng(4).integers(0, top, (500, 1, 3), endpoint=True)
    image = np.concatenate([grid, noise]).astype(dtype)
    for transform in ("subtract-green", "rg-mean"):
        np.testing.assert_array_equal(l3codec.decode(l3codec.encode(image, transform=transform)), image)


FAST_WIDTHS = [1, 2, 3, 5, 7, 8, 9, 15, 63, 64, 65, 127, 130, 200]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("kind", ["smooth_noise", "labels", "noise", "extremes", "gradient"])
def test_fast_widths_across_groups_and_phases(kind, dtype):
    """Widths below the prediction period (8), around the group size (64) and past it; 1-4 channels;
    tiles of 8 rows (smallest) and one row."""
    for index, width in enumerate(FAST_WIDTHS):
        channels = 1 + index % 4
        for height in (1, 11):
            image = make_image(kind, height, width, channels, dtype, seed=index)
            data = l3codec.encode(image, mode="fast", tile_width=208, tile_height=8)
            np.testing.assert_array_equal(l3codec.decode(data), image, err_msg=f"{width}x{height}")


def test_fast_rows_equal_to_the_row_above_cost_one_bit():
    row = make_image("smooth_noise", 1, 256, 1, np.uint8, seed=9)
    image = np.repeat(row, 64, axis=0)
    one_row = len(l3codec.encode(row, mode="fast", tile_width=256, tile_height=64))
    all_rows = len(l3codec.encode(image, mode="fast", tile_width=256, tile_height=64))
    assert all_rows - one_row <= (63 + 7) // 8  # 63 "any" bits of 0, one more byte of padding at most
    np.testing.assert_array_equal(l3codec.decode(l3codec.encode(image, mode="fast")), image)


def test_fast_zero_groups_cost_one_flag_bit():
    """Changes confined to group 0 of a 256-wide tile: the three other groups cost their flag bit per
    row and nothing else, against the same changes in a 64-wide tile (the fast coder's streams: the
    encoder would take an LZ stream for such a tile)."""
    image = np.zeros((64, 256), np.uint8)
    image[:, 0:5] = np.arange(64)[:, None] * 3 % 256
    out = np.zeros(1 << 16, np.uint8)
    wide = cpu._encoders.encode_fast_stream(image, 8, out, 0)
    narrow = cpu._encoders.encode_fast_stream(np.ascontiguousarray(image[:, :64]), 8, out, 0)
    assert 0 < wide - narrow <= (3 * 64 + 7) // 8 + 1
    np.testing.assert_array_equal(l3codec.decode(l3codec.encode(image, mode="fast")), image)


def _cheapest_code(values, bits, extended):
    """The reference encoder's choice in one code table (docs/FORMAT.md §7.5), by brute force:
    (form, width, qsum, data bits)."""
    count = len(values)
    width = max(values).bit_length()
    options = [(count * width, 0, fast.FORM_PACKED, width, 0)]  # packing wins ties
    for k in range(fast.max_rice_k(bits) + 1):
        qsum = sum(value >> k for value in values)
        if qsum < 2 ** fast.QSUM_BITS:
            options.append((count * (k + 1) + qsum, 1, fast.FORM_RICE, k, qsum))
    nonzero = sum(value != 0 for value in values)
    value_width = width if extended else bits  # the short table's sparse values take all bits
    options.append((nonzero * (fast.POSITION_BITS + value_width), 2, fast.FORM_SPARSE, value_width, nonzero))
    if extended:
        options.append((count + nonzero * width, 3, fast.FORM_BITMAP, width, nonzero))
    cost, _, form, width, qsum = min(options)
    return form, width, qsum, cost


@pytest.mark.parametrize("bits", [8, 16])
def test_fast_encoder_takes_the_cheapest_group_code(bits):
    """choose_row_codes on rows of one group: in each table the group's code is _cheapest_code's,
    and the row's bits are its flag, header and data."""
    rng = np.random.default_rng(bits)
    forms = {table: set() for table in (fast.SHORT_TABLE, fast.EXTENDED_TABLE)}
    for trial in range(300):
        count = int(rng.integers(1, fast.GROUP_SIZE + 1))
        scale = 2.0 ** rng.uniform(0, bits - 1)
        values = np.minimum(rng.exponential(scale, count).astype(np.int64), 2**bits - 1)
        values[int(rng.integers(count))] = max(1, values.max())
        if rng.random() < 0.2:
            values[int(rng.integers(count))] = 2**bits - 1  # an outlier
        if rng.random() < 0.3:  # a label edge: a few values among zeros
            values[rng.random(count) < rng.choice([0.6, 0.9])] = 0
            values[int(rng.integers(count))] = int(rng.integers(1, 2**bits))
        if rng.random() < 0.2:  # small values: a narrow sparse or bitmap group
            values = np.minimum(values, 3)
        codes = np.empty((2, 1), np.int64)
        qsums = np.empty((2, 1), np.int64)
        row_bits = fast.choose_row_codes(values, count, bits, codes, qsums)
        for table, extended in ((fast.SHORT_TABLE, False), (fast.EXTENDED_TABLE, True)):
            form, width = fast.group_form(int(codes[table, 0]), bits, extended)
            qsum = int(qsums[table, 0])
            expected = _cheapest_code(values.tolist(), bits, extended)
            assert (form, width, qsum) == expected[:3]
            assert row_bits[table] == 2 + fast.header_bits(bits, extended) + expected[3]
            assert expected[3] == fast.group_data_bits(form, width, qsum, count)
            forms[table].add(form)
    # the trials reach every form of each table
    shared = {fast.FORM_SPARSE, fast.FORM_PACKED, fast.FORM_RICE}
    assert forms == {fast.SHORT_TABLE: shared, fast.EXTENDED_TABLE: shared | {fast.FORM_BITMAP}}


@pytest.mark.parametrize("difference", [-1, 0, 1])
def test_a_fast_stream_takes_the_extended_table_on_equal_bits(difference):
    """One row, one listed sample of 7 bits: sparse in both tables, the extended code one header
    bit longer and one value bit shorter, so both tables take the same bits (the extended one
    wins); a value one bit wider or narrower tips the choice."""
    from l3codec import cpu

    value = {-1: 25, 0: 50, 1: 100}[difference]  # mapped 2 * value: 6, 7 or 8 bits wide
    tile = np.full((1, 64), 128, np.uint8)
    tile[0, 63] += value  # row 0 is delta-coded: one non-zero residual, at the end
    mapped = np.empty((1, 64), np.int64)
    fast.fast_row_residuals(tile, 0, 64, 8, mapped[0])
    assert np.count_nonzero(mapped) == 1 and mapped[0, 63] == 2 * value
    short, extended = fast.choose_row_codes(mapped[0], 64, 8, np.empty((2, 1), np.int64), np.empty((2, 1), np.int64))
    assert extended - short == difference
    out = np.zeros(100, np.uint8)
    size = cpu.encode_fast_stream(tile, 8, out, 0)
    assert size == 1 + (min(short, extended) + 7) // 8
    assert out[0] == (fmt.KIND_CODED_EXTENDED if difference <= 0 else fmt.KIND_CODED)
    np.testing.assert_array_equal(l3codec.decode(l3codec.encode(tile, mode="fast", tile_width=64, tile_height=8)), tile)


def _fast_row_bits(mapped, bits, extended):
    """A fast row's bits in one code table, each group coded as _cheapest_code chooses."""
    groups = [mapped[i:i + fast.GROUP_SIZE].tolist() for i in range(0, len(mapped), fast.GROUP_SIZE)]
    flagged = [g for g in groups if any(g)]
    if not flagged:
        return 1
    return (1 + len(groups) + len(flagged) * fast.header_bits(bits, extended)
            + sum(_cheapest_code(g, bits, extended)[3] for g in flagged))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_fast_streams_take_the_smaller_code_table(dtype):
    """A coded fast stream is written in the code table that makes it smaller (the extended one on a
    tie), at exactly that table's bits: a photograph loses nothing to the extended table's longer
    headers, a label map gains its narrow sparse and bitmap groups."""
    bits = np.iinfo(dtype).bits
    kinds = set()
    for kind in ("smooth_noise", "gradient"):  # one stream each (one tile, one channel)
        image = make_image(kind, 40, 150, 1, dtype, seed=3)
        data = l3codec.encode(image, mode="fast", tile_width=160, tile_height=40)
        parsed = fmt.parse(data)
        start, end = int(parsed.stream_starts[0]), int(parsed.stream_ends[0])
        mapped = np.empty(image.shape, np.int64)
        for row in range(image.shape[0]):
            fast.fast_row_residuals(image, row, image.shape[1], bits, mapped[row])
        short, extended = (sum(_fast_row_bits(row, bits, table) for row in mapped) for table in (False, True))
        assert data[start] == (fmt.KIND_CODED_EXTENDED if extended <= short else fmt.KIND_CODED), kind
        assert end - start == 1 + (min(short, extended) + 7) // 8, kind
        kinds.add(data[start])
    assert kinds == {fmt.KIND_CODED, fmt.KIND_CODED_EXTENDED}


@pytest.mark.parametrize("bits", [8, 16])
def test_fast_code_tables_name_each_form_once(bits):
    """The extended codes name sparse, packed and bitmap groups of every width 1..bits and every Rice
    parameter, plus one Rice parameter too large (refused); extended_code is group_form's inverse;
    the short table's codes keep their version-3 meanings."""
    extended = [fast.group_form(code, bits, True) for code in range(2 ** fast.code_bits(bits, True))]
    assert extended == [(form, width) for form in (fast.FORM_SPARSE, fast.FORM_PACKED, fast.FORM_BITMAP)
                        for width in range(1, bits + 1)] + [(fast.FORM_RICE, k) for k in range(bits)]
    for code, (form, width) in enumerate(extended):
        assert fast.extended_code(form, width, bits) == code
    assert not fast.group_header_sound(fast.FORM_RICE, fast.max_rice_k(bits) + 1, 0, fast.GROUP_SIZE, bits)
    short = [fast.group_form(code, bits, False) for code in range(2 ** fast.code_bits(bits, False))]
    assert short == [(fast.FORM_SPARSE, bits)] + [(fast.FORM_PACKED, c) for c in range(1, bits + 1)] + [
        (fast.FORM_RICE, k) for k in range(fast.max_rice_k(bits) + 1)]


def test_taller_tiles_for_flat_content_where_smaller():
    """codec.encode's fast default: 512 x 64 tiles, or taller ones where a file of flat content (palette
    and LZ streams) is smaller so, colour in 256-wide tiles; 64 rows for photographs and an explicit
    tile_height; colour with some palette or LZ tiles in 256 x 64 where that is 1% smaller. compact's
    default is 1024 x 256 (version 10: kind 10's tables per stream) and tries no other tiling."""
    screen = make_image("coloured_text", 300, 600, 3, np.uint8, 4)
    photo = make_image("smooth_noise", 300, 600, 3, np.uint8, 4)
    data = l3codec.encode(screen, mode="fast")
    assert (l3codec.info(data).tile_width, l3codec.info(data).tile_height) == (fmt.FLAT_COLOUR_TILE_WIDTH,
                                                                               fmt.FLAT_TILE_HEIGHT)
    assert len(data) < len(l3codec.encode(screen, mode="fast", tile_height=64))
    np.testing.assert_array_equal(l3codec.decode(data), screen)
    np.testing.assert_array_equal(l3codec.decode(data, region=(100, 30, 50, 300)), screen[100:150, 30:330])
    page = make_image("text", 300, 600, 1, np.uint8, 4)
    data = l3codec.encode(page, mode="fast")
    assert (l3codec.info(data).tile_width, l3codec.info(data).tile_height) == (512, fmt.FLAT_TILE_HEIGHT)
    assert len(data) < len(l3codec.encode(page, mode="fast", tile_height=64))
    np.testing.assert_array_equal(l3codec.decode(data, region=(10, 250, 200, 300)), page[10:210, 250:550])
    assert (l3codec.info(l3codec.encode(photo, mode="fast")).tile_width,
            l3codec.info(l3codec.encode(photo, mode="fast")).tile_height) == (512, 64)
    assert l3codec.info(l3codec.encode(screen, mode="fast", tile_height=64)).tile_height == 64
    # colour with palette or LZ tiles also tries 256 x 64, kept where 1% smaller: text beside a photograph,
    # which a 512-wide tile mixes (so no LZ stream pays there); not the screen, whose tiles are all text
    mixed = np.concatenate([screen[:200, :256], photo[:200, :344]], axis=1)
    for image, width in ((mixed, 256), (screen, 512)):
        wide, narrow = (len(l3codec.encode(image, mode="fast", tile_width=w, tile_height=64)) for w in (512, 256))
        chosen = l3codec.encode(image, mode="fast", tile_height=64)
        assert l3codec.info(chosen).tile_width == width and len(chosen) == (narrow if width == 256 else wide)
        assert (narrow < 0.99 * wide) == (width == 256)
        np.testing.assert_array_equal(l3codec.decode(chosen), image)
    assert l3codec.info(l3codec.encode(screen, mode="fast", tile_width=512)).tile_width == 512
    tall = l3codec.encode(screen, mode="compact")
    assert (l3codec.info(tall).tile_width, l3codec.info(tall).tile_height) == (1024, fmt.FLAT_TILE_HEIGHT)
    np.testing.assert_array_equal(l3codec.decode(tall), screen)
    np.testing.assert_array_equal(l3codec.decode(tall, region=(40, 100, 200, 300)), screen[40:240, 100:400])
    assert (l3codec.info(l3codec.encode(photo, mode="compact")).tile_width,
            l3codec.info(l3codec.encode(photo, mode="compact")).tile_height) == (1024, 256)


def test_region_decodes_only_intersecting_tiles():
    """A corrupt stream outside the region must not matter to a region decode."""
    image = make_image("smooth_noise", 64, 64, 1, np.uint8, seed=1)
    data = bytearray(l3codec.encode(image, tile_width=32, tile_height=32))
    parsed = l3codec.format.parse(data)
    last = int(parsed.stream_starts[-1])  # the bottom-right tile's stream
    data[last] = 0xEE  # an invalid stream kind
    region = (0, 0, 32, 32)
    np.testing.assert_array_equal(l3codec.decode(bytes(data), region=region, verify=False), image[:32, :32])
    with pytest.raises(l3codec.L3Error, match="tile 3"):
        l3codec.decode(bytes(data), verify=False)


def test_out_argument_receives_pixels():
    image = make_image("gradient", 21, 35, 3, np.uint16)
    out = np.zeros_like(image)
    result = l3codec.decode(l3codec.encode(image), out=out)
    assert result is out
    np.testing.assert_array_equal(out, image)
    with pytest.raises(l3codec.L3Error, match="out must be"):
        l3codec.decode(l3codec.encode(image), out=np.zeros((21, 35, 3), np.uint8))


def test_non_contiguous_input_is_encoded_by_value():
    image = make_image("noise", 40, 40, 3, np.uint8)[::2, ::-1]
    np.testing.assert_array_equal(l3codec.decode(l3codec.encode(image)), image)


def test_incompressible_tiles_fall_back_to_raw_within_bound():
    image = make_image("noise", 100, 100, 3, np.uint8, seed=5)
    for mode in ("compact", "fast"):
        data = l3codec.encode(image, mode=mode)
        info = l3codec.info(data)
        streams = info.tiles_x * info.tiles_y * info.channels
        assert len(data) <= image.nbytes + 44 + 5 * streams
        assert_within_encoder_bound(data)
        np.testing.assert_array_equal(l3codec.decode(data), image)


def test_flat_content_costs_far_below_one_bit_per_pixel():
    blocks = make_image("labels", 4, 4, 1, np.uint8, seed=2)
    image = np.repeat(np.repeat(blocks, 64, axis=0), 64, axis=1)
    data = l3codec.encode(image)
    assert len(data) * 8 < 0.25 * image.size
    np.testing.assert_array_equal(l3codec.decode(data), image)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "best"}, "mode"),
        ({"tile_width": 20}, "tile width"),
        ({"mode": "compact", "tile_height": 48}, "multiple of 32"),
        ({"mode": "compact", "tile_height": 288}, "multiple of 32"),
        ({"mode": "fast", "tile_height": 12}, "tile height"),
        ({"transform": "ycocg"}, "transform"),
        ({"tile_width": "x"}, "integer"),
    ],
)
def test_bad_encode_options_raise(kwargs, message):
    with pytest.raises(l3codec.L3Error, match=message):
        l3codec.encode(np.zeros((8, 8, 3), np.uint8), **kwargs)


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((4, 4), np.float32), "dtype"),
        (np.zeros((4, 4, 5), np.uint8), "channels"),
        (np.zeros((0, 4), np.uint8), "size"),
        (np.zeros((2, 2, 2, 2), np.uint8), "HW or HWC"),
    ],
)
def test_bad_arrays_raise(array, message):
    with pytest.raises(l3codec.L3Error, match=message):
        l3codec.encode(array)


@pytest.mark.parametrize("transform", ["subtract-green", "rg-mean"])
def test_colour_transforms_need_colour(transform):
    with pytest.raises(l3codec.L3Error, match="3 or 4 channels"):
        l3codec.encode(np.zeros((4, 4), np.uint8), transform=transform)


@pytest.mark.parametrize(
    "region", [(0, 0, 0, 1), (-1, 0, 1, 1), (0, 0, 11, 1), (5, 5, 1, 6), (1, 2, 3), 5, "abcd", (1.5, 0, 3, 3)]
)
def test_bad_region_raises(region):
    data = l3codec.encode(np.zeros((10, 10), np.uint8))
    with pytest.raises(l3codec.L3Error, match="region"):
        l3codec.decode(data, region=region)


def test_check_and_io(tmp_path):
    image = make_image("labels", 30, 31, 1, np.uint16)
    path = tmp_path / "x.l3"
    l3codec.imwrite(path, image, mode="fast")
    np.testing.assert_array_equal(l3codec.imread(path), image)
    data = path.read_bytes()
    assert l3codec.check(data)
    assert not l3codec.check(data[:-1])
    assert not l3codec.check(b"not an image at all, clearly not an image")
