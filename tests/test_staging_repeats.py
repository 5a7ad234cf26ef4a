"""GPU staging of a batch that repeats samples (a batch larger than the dataset, a sampler drawing
with replacement, skip-substitutions): it fits the buffer staging_bytes sizes, and every item
decodes to its sample's pixels."""

import numpy as np
import pytest
from PIL import Image

import l3codec
from images import make_image
from l3codec import dataset

torch = pytest.importorskip("torch")
from l3codec.converters import convert  # noqa: E402
from l3codec.dataset import open_dataset  # noqa: E402
from l3codec.geometry import Full  # noqa: E402
from l3codec.loader import host_decode_step  # noqa: E402
from l3codec.loader.finish import region_view  # noqa: E402
from l3codec.staging import stage_for_gpu, staging_bytes  # noqa: E402


def test_sixteen_items_over_six_samples_fit_and_decode(tmp_path):
    images = {}
    for i in range(6):  # sizes differ, so the largest samples' bytes differ from the others'
        image = make_image("smooth_noise", 16 + 4 * i, 24 + 8 * i, 3, np.uint8, i)
        Image.fromarray(image).save(tmp_path / f"img{i}.png")
        images[f"img{i}"] = image
    convert("folder", tmp_path, tmp_path / "l3", workers=0, progress=False)
    reader = open_dataset(tmp_path / "l3", "train")
    indices = [i % 6 for i in range(16)]
    buffer = np.empty(staging_bytes(reader, ("image",), len(indices)), np.uint8)
    staged = stage_for_gpu(reader, indices, ("image",), Full(), buffer, seed=0, epoch=0)
    assert staged.indices.tolist() == indices

    out = torch.zeros(staged.out_size, dtype=torch.uint8)
    status = torch.zeros(len(staged.batch.infos), dtype=torch.int32)
    host_decode_step(staged, torch.from_numpy(buffer), out, status, None)
    assert not status.any()
    layout = staged.fields[0]
    for item, key in enumerate(staged.keys):
        expected = images[key]
        h, w = expected.shape[:2]
        decoded = region_view(out.numpy(), layout.offsets[item], layout.pitches[item], h, w, 3, np.dtype(np.uint8))
        np.testing.assert_array_equal(decoded, expected)



def test_a_sample_of_tall_compact_tiles_fits(tmp_path):
    """A compact file of 256-row tiles (format 9) has a GPU task per band of 32 rows, 8 per tile: a
    blank page in such tiles (the encoder keeps a blank page in 32-row tiles; another writer may not),
    whose constant streams cost 6 bytes each, needs more task records than one per stream."""
    page = np.full((2048, 4096), 255, np.uint8)
    data = l3codec.encode(page, mode="compact", tile_height=256)
    split = tmp_path / "train"
    split.mkdir()
    writer = dataset.ShardWriter(str(split), 0, ("image",), key_width=4)
    writer.add("page", {"image": data}, infos={"image": l3codec.info(data)}, label=0)
    record = writer.close()
    dataset.write_index(str(split), record["rows"])
    dataset.write_manifest(str(tmp_path), {"splits": {"train": {"samples": 1, "shards": [
        {k: record[k] for k in ("name", "bytes", "sha256", "samples")}]}}})
    reader = open_dataset(tmp_path, "train")
    buffer = np.empty(staging_bytes(reader, ("image",), 2), np.uint8)
    staged = stage_for_gpu(reader, [0, 0], ("image",), Full(), buffer, seed=0, epoch=0)
    out = torch.zeros(staged.out_size, dtype=torch.uint8)
    status = torch.zeros(len(staged.batch.infos), dtype=torch.int32)
    host_decode_step(staged, torch.from_numpy(buffer), out, status, None)
    assert not status.any()
    layout = staged.fields[0]
    decoded = region_view(out.numpy(), layout.offsets[0], layout.pitches[0], 2048, 4096, 1, np.dtype(np.uint8))
    np.testing.assert_array_equal(decoded.reshape(2048, 4096), page)
