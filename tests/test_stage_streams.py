"""GPU staging keeps only the streams a crop's tiles use (batch.stage_streams): fewer bytes, the
same pixels as decoding the whole file, and the other streams empty."""

import numpy as np
import pytest

import l3codec
from images import make_image
from l3codec import batch as batching
from l3codec import format as fmt


@pytest.mark.parametrize("mode", ["compact", "fast"])
@pytest.mark.parametrize("region", [(0, 0, 96, 160), (40, 70, 20, 30), (95, 159, 1, 1), (10, 0, 60, 160)])
def test_a_crop_stages_its_tiles_streams_and_decodes_the_same(mode, region):
    image = make_image("smooth_noise", 96, 160, 3, np.uint8, 3)
    data = l3codec.encode(image, mode=mode, tile_width=32, tile_height=32 if mode == "compact" else 16)
    plan = batching.plan_item(data, region)
    out = np.full(len(data) + 64, 0xEE, np.uint8)
    staged = batching.stage_streams(plan, np.frombuffer(data, np.uint8), out)
    assert staged.size < len(data) and np.all(out[staged.size:] == 0xEE)  # no header; nothing past its end
    used = staged.stream_ends > staged.stream_starts
    assert used.sum() == len(plan.tiles) * 3 and np.all(staged.stream_starts[~used] == staged.size)
    if region == (0, 0, 96, 160):
        assert staged.size == len(data) - plan.stream_starts[0]  # all but the header and table
    parsed = fmt.Parsed(plan.info, None, staged.stream_starts, staged.stream_ends, 0)
    y, x, h, w = region
    decoded = l3codec.codec.decode_parsed(out[:staged.size], parsed, region=region)
    assert np.array_equal(decoded, image[y:y + h, x:x + w])


def test_a_buffer_too_small_for_the_crops_streams_is_refused():
    data = l3codec.encode(make_image("smooth_noise", 64, 64, 1, np.uint8, 1), mode="fast", tile_width=16,
                          tile_height=16)
    plan = batching.plan_item(data, (0, 0, 64, 64))
    with pytest.raises(l3codec.L3Error, match="too small"):
        batching.stage_streams(plan, np.frombuffer(data, np.uint8), np.empty(10, np.uint8))
