"""The Loader's API: a field the user declares (a 16-bit depth map), where decoding happens
(Decode), the worker settings (Workers), the deprecated keywords, and Loader(cache=) leaving its
dataset as it was. The dataset is written here with the container's ShardWriter, as a user's
own converter would write a field l3convert does not know."""

import numpy as np
import pytest

import l3codec
from images import make_image
from l3codec import dataset as container

torch = pytest.importorskip("torch")
from l3codec.loader import (  # noqa: E402
    Decode, Field, L3Dataset, Loader, RandomCrop, RandomResizedCrop, SampleCache, Workers, host_decode_step,
)

SIZE = (40, 56)
SAMPLES = 5
DEPTH = Field("depth", kind="label", dtype="uint16")
PATHS = {"cpu": Decode("cpu", device="cpu"), "gpu-host": Decode("gpu", device="cpu", step=host_decode_step)}


def _depth_map(seed: int) -> np.ndarray:
    """Depths over the whole 16-bit range, so a wrong pixel or an interpolated one shows."""
    return np.random.default_rng(seed).integers(0, 65536, SIZE, dtype=np.uint16)


@pytest.fixture(scope="module")
def with_depth(tmp_path_factory):
    """A split of RGB images with a 16-bit depth map each; (root, {key: (image, depth)})."""
    root = tmp_path_factory.mktemp("depth-l3")
    split = root / "train"
    split.mkdir()
    fields = ("image", DEPTH)
    writer = container.ShardWriter(split, 0, fields, key_width=8)
    sources = {}
    for i in range(SAMPLES):
        key = f"frame{i}"
        image, depth = make_image("smooth_noise", *SIZE, 3, np.uint8, i), _depth_map(100 + i)
        members = {"image": l3codec.encode(image, mode="fast", tile_width=16),
                   "depth": l3codec.encode(depth, mode="compact", tile_width=16)}
        infos = {name: l3codec.info(data) for name, data in members.items()}
        writer.add(key, members, infos=infos, label=i % 2)
        sources[key] = (image, depth)
    record = writer.close()
    container.write_index(split, container.concatenate_rows([record]))
    container.write_manifest(root, {"splits": {"train": {"samples": SAMPLES, "fields": ["image", "depth"]}}})
    return root, sources


def _expected_crop(source: np.ndarray, region, size, flip: bool) -> np.ndarray:
    """The source under a crop: the region, resized nearest-exact (the source pixel under each
    output pixel's centre) when its size differs, mirrored when flipped."""
    y, x, h, w = (int(v) for v in region)
    rows = np.minimum(((np.arange(size[0]) + 0.5) * h / size[0]).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(size[1]) + 0.5) * w / size[1]).astype(np.int64), w - 1)
    crop = source[y:y + h, x:x + w][rows][:, cols]
    return crop[:, ::-1] if flip else crop


def _epochs(loader, count=3):
    for epoch in range(count):
        loader.set_epoch(epoch)
        yield from loader


@pytest.mark.parametrize("path", list(PATHS))
def test_a_declared_depth_map_comes_through_crops_and_flips_pixel_for_pixel(with_depth, path):
    root, sources = with_depth
    dataset = L3Dataset(root, fields=("image", DEPTH))
    assert dataset.fields == ("image", "depth") and dataset.reader.fields == ("image", "depth")
    loader = Loader(dataset, 2, crop=RandomCrop((16, 24), flip=0.5), seed=1, decode=PATHS[path])
    flips = []
    for batch in _epochs(loader):
        assert batch["depth"].dtype == torch.uint16 and batch["depth"].shape[1:] == (16, 24)
        for n, key in enumerate(batch["key"]):
            image, depth = sources[key]
            region, flip = batch["region"][n].tolist(), bool(batch["flip"][n])
            expected = _expected_crop(depth, region, (16, 24), flip)
            np.testing.assert_array_equal(batch["depth"][n].numpy(), expected)
            got_image = batch["image"][n].permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(got_image, _expected_crop(image, region, (16, 24), flip))
            flips.append(flip)
    assert any(flips) and not all(flips)  # both orientations were checked


@pytest.mark.parametrize("path", list(PATHS))
def test_a_declared_label_field_is_resized_nearest_neighbour(with_depth, path):
    root, sources = with_depth
    loader = Loader(L3Dataset(root, fields=("image", DEPTH)), 2, crop=RandomResizedCrop(12, flip=0.5), seed=2,
                    decode=PATHS[path])
    resized = 0
    for batch in _epochs(loader, 2):
        for n, key in enumerate(batch["key"]):
            region, flip = batch["region"][n].tolist(), bool(batch["flip"][n])
            expected = _expected_crop(sources[key][1], region, (12, 12), flip)
            np.testing.assert_array_equal(batch["depth"][n].numpy(), expected)
            resized += tuple(region[2:]) != (12, 12)
    assert resized  # the nearest-neighbour resize was exercised, not only a plain crop


def test_fields_are_declared_checked_and_named(with_depth):
    root, _ = with_depth
    with pytest.raises(l3codec.L3Error, match=r"declared: l3codec.fields.Field\('depth'"):
        L3Dataset(root, fields=("image", "depth"))  # an unknown name: how to declare it
    with pytest.raises(l3codec.L3Error, match="declared uint8.*16-bit"):
        L3Dataset(root, fields=(Field("depth", kind="label", dtype="uint8"),))
    for name in ("label", "json", "2nd", "a.b", ""):
        with pytest.raises(l3codec.L3Error, match="field name"):
            Field(name)
    with pytest.raises(l3codec.L3Error, match="kind"):
        Field("depth", kind="depth")
    with pytest.raises(l3codec.L3Error, match="dtype"):
        Field("depth", dtype="float32")
    dataset = L3Dataset(root, fields=(DEPTH,))
    sample = dataset[0]
    np.testing.assert_array_equal(sample["depth"][0].numpy(), _depth_map(100))
    assert L3Dataset(root, fields=(DEPTH,), compressed=True)[0]["depth"].dtype == np.uint8  # the bytes


def test_the_cache_is_held_by_the_loader_and_the_dataset_is_left_as_it_was(with_depth, tmp_path):
    root, _ = with_depth
    dataset = L3Dataset(root, fields=("image", DEPTH))
    cache = SampleCache(tmp_path / "cache", "10MB")
    loader = Loader(dataset, 2, shuffle=False, decode=Decode("cpu", device="cpu"), cache=cache)
    assert dataset.reader.cache is None and loader.dataset.reader.cache is cache
    cached = [batch["depth"] for batch in loader]
    plain = [batch["depth"] for batch in Loader(dataset, 2, shuffle=False, decode="cpu")]
    assert all(torch.equal(a, b) for a, b in zip(cached, plain)) and len(cached) == len(plain)
    assert loader.dataset.reader.cache.get(loader.dataset.reader.dataset_id, "train", 0, "depth",
                                           int(dataset.reader.index[0]["depth_size"])) is not None


def test_where_decoding_happens_is_said_once(with_depth):
    root, _ = with_depth
    dataset = L3Dataset(root, fields=("image", DEPTH))
    assert Loader(dataset, 2, decode=Decode(device="cpu")).place == "cpu"  # on=None and a CPU device
    host = Loader(dataset, 2, decode=Decode("gpu", device="cpu", step=host_decode_step, prefetch=3),
                  workers=Workers(2, context="spawn"))  # spawn: nothing starts until the first batch
    assert host.place == "gpu" and host.prefetch == 3 and host.num_workers == 2
    with pytest.raises(l3codec.L3Error, match="on="):
        Decode("tpu")
    with pytest.raises(l3codec.L3Error, match="backend"):
        Decode(backend="opencl")
    with pytest.raises(l3codec.L3Error, match="step"):
        Decode("cpu", step=host_decode_step)
    with pytest.raises(l3codec.L3Error, match="count"):
        Workers(-1)
    with pytest.raises(l3codec.L3Error, match="workers must be"):
        Loader(dataset, 2, decode="cpu", workers="4")


def test_the_old_keywords_still_work_for_one_version_with_a_warning(with_depth):
    root, _ = with_depth
    with pytest.warns(DeprecationWarning, match=r"L3Dataset\(decode='gpu'\)"):
        legacy = L3Dataset(root, fields=("image", DEPTH), decode="gpu")
    assert legacy.compressed
    moved = r"device=.*Decode\(device=\).*num_workers=.*Workers\(count=\)"
    with pytest.warns(DeprecationWarning, match=moved):
        loader = Loader(legacy, 2, device="cpu", decode_step=host_decode_step, num_workers=0, timeout=7)
    assert loader.decode == Decode("gpu", device="cpu", step=host_decode_step)
    assert loader.workers == Workers(0, timeout=7)
    with pytest.raises(TypeError, match="unexpected keyword"):
        Loader(legacy, 2, devices="cpu")


def test_inspect_deep_names_a_damaged_member_of_a_declared_field(with_depth, tmp_path):
    import shutil

    from l3codec.converters.inspect import inspect

    root, _ = with_depth
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    reader = container.open_dataset(copy, "train")
    row = reader.index[1]
    shard = copy / "train" / container.shard_name(int(row["shard"]))
    damaged = bytearray(shard.read_bytes())
    damaged[int(row["depth_offset"]) + int(row["depth_size"]) // 2] ^= 0x40
    shard.write_bytes(bytes(damaged))
    problems = inspect(copy, deep=True)["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"train/{reader.key(1)}.depth.l3: "), problems
