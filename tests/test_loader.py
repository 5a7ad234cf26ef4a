"""l3codec.loader on tiny datasets converted here: order, pixels, crops, ranks, resume, workers, S3, bad data.

The GPU path (staging into a shared buffer, one packed buffer of bytes and launch tables,
canvas layout with row pitches, regions, flips, statuses, prefetch) runs without a GPU with
its decode step replaced: by the CUDA C kernels under the host emulator (l3codec.kernels.emulation)
or by the CPU decoder honouring the same tables (loader.host_decode_step). Tests marked
`cuda` run the real path where a GPU exists.
"""

import gc
import warnings
import weakref

import numpy as np
import pytest
from PIL import Image

import l3codec
from images import make_image
from s3_server import S3Server
from l3codec import format as fmt
from stream_census import plane_streams

torch = pytest.importorskip("torch")
from l3codec import batch as batching  # noqa: E402
from l3codec import resize  # noqa: E402
from l3codec.converters import convert  # noqa: E402
from l3codec.loader import (  # noqa: E402
    CenterCrop, Decode, Full, L3Dataset, Loader, RandomCrop, RandomResizedCrop, host_decode_step,
)

SIZE = (40, 56)  # every cityscapes frame here; tiles of 16 so crops touch a few of many tiles


def _write_png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


@pytest.fixture(scope="module")
def cityscapes(tmp_path_factory):
    """A converted Cityscapes-like split of 7 frames: RGB images, 8-bit labelIds, 16-bit instanceIds.
    Returns (dataset root, {frame name: (image, labelIds, instanceIds)})."""
    src = tmp_path_factory.mktemp("cityscapes")
    frames = {}
    for i in range(7):
        city = "aachen" if i < 4 else "bonn"
        name = f"{city}_{i:06d}_000019"
        image = make_image("smooth_noise", *SIZE, 3, np.uint8, i)
        labels = make_image("labels", *SIZE, 1, np.uint8, 10 + i)
        instances = make_image("labels", *SIZE, 1, np.uint16, 20 + i)
        _write_png(src / "leftImg8bit" / "train" / city / f"{name}_leftImg8bit.png", image)
        _write_png(src / "gtFine" / "train" / city / f"{name}_gtFine_labelIds.png", labels)
        _write_png(src / "gtFine" / "train" / city / f"{name}_gtFine_instanceIds.png", instances)
        frames[name] = (image, labels, instances)
    dst = tmp_path_factory.mktemp("converted") / "cityscapes-l3"
    convert("cityscapes", src, dst, tile_width=16, workers=0, progress=False)
    return dst, frames


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder split whose images differ in size (and one is grayscale): lists, not tensors."""
    src = tmp_path_factory.mktemp("folder")
    images = {}
    for i in range(5):
        klass = ("cat", "dog")[i % 2]
        channels = 1 if i == 3 else 3
        image = make_image("gradient", 20 + 3 * i, 30 + i, channels, np.uint8, i)
        _write_png(src / klass / f"img{i}.png", image)
        images[f"img{i}"] = (image, i % 2)
    dst = tmp_path_factory.mktemp("converted") / "folder-l3"
    convert("folder", src, dst, mode="fast", workers=0, progress=False)
    return dst, images


def _source(frames, key):
    matches = [value for name, value in frames.items() if name in key]
    assert len(matches) == 1, key
    return matches[0]


def emulated_decode_step(staged, buffer, out, status, stream):
    """The loader's decode step through the CUDA C kernels under the host emulator, launched on the
    packed buffer's own tables exactly as gpu.launch_packed launches them on a device."""
    from l3codec.kernels import emulation
    from l3codec.kernels import cuda_c

    lib = emulation.kernel_library()
    packed = staged.packed
    device = np.zeros(packed.device_size, np.uint8)  # the device buffer: the slot's bytes, then the LZ scratch area
    device[:packed.size] = buffer.numpy()[:packed.size]
    data, starts, ends, tables, expansions = batching.packed_views(packed, staged.batch.launches, device)
    flat, statuses, first = out.numpy(), status.numpy(), 0
    emulation.expand_emulated(data, expansions, statuses, "shuffled", 7, lib=lib)
    ans_tables = batching.packed_ans_records(packed, device)
    if len(ans_tables):  # then the kind-10 streams' table blocks, as gpu.launch_packed builds them
        emulation.build_ans_tables_emulated(data, ans_tables, "shuffled", 7, lib=lib)
    for launch, (items, tasks) in zip(staged.batch.launches, tables):
        launch_status = statuses[first:first + len(launch.items)]
        result = lib.l3emu_launch(
            emulation.KERNEL_INDEX[launch.mode], len(tasks), *cuda_c.block_shape(launch),
            cuda_c.shared_memory_bytes(launch), emulation.ORDERS["shuffled"], 7, data.ctypes.data, data.size,
            starts.ctypes.data, ends.ctypes.data, items.ctypes.data, tasks.ctypes.data, len(tasks),
            flat.ctypes.data, launch_status.ctypes.data,
        )
        assert result == 0, lib.l3emu_last_error()
        first += len(launch.items)


PATHS = {  # where the loader decodes, its batches on the CPU
    "cpu": Decode("cpu", device="cpu"),
    "gpu-emulated": Decode("gpu", device="cpu", step=emulated_decode_step),
    "gpu-host": Decode("gpu", device="cpu", step=host_decode_step),
}


def _loader(root, path, batch_size=3, fields=("image", "labelIds", "instanceIds"), workers=0, **options):
    dataset = L3Dataset(root, fields=fields)
    return Loader(dataset, batch_size, decode=PATHS[path], workers=workers, **options)


def _hwc(tensor):
    return tensor.permute(1, 2, 0).numpy() if tensor.ndim == 3 else tensor.numpy()


@pytest.mark.parametrize("path", list(PATHS))
def test_unshuffled_batches_are_the_source_pixels_in_order(cityscapes, path):
    root, frames = cityscapes
    batches = list(_loader(root, path, shuffle=False))
    assert [len(b["key"]) for b in batches] == [3, 3, 1]
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(7))
    for batch in batches:
        assert batch["image"].shape[1:] == (3, *SIZE) and batch["image"].dtype == torch.uint8
        assert batch["image"].is_contiguous(memory_format=torch.channels_last)
        assert batch["labelIds"].shape[1:] == SIZE and batch["instanceIds"].dtype == torch.uint16
        for n, key in enumerate(batch["key"]):
            image, labels, instances = _source(frames, key)
            np.testing.assert_array_equal(_hwc(batch["image"][n]), image)
            np.testing.assert_array_equal(batch["labelIds"][n].numpy(), labels)
            np.testing.assert_array_equal(batch["instanceIds"][n].numpy(), instances)


def test_dataset_items_on_the_cpu_and_as_bytes(cityscapes):
    root, frames = cityscapes
    dataset = L3Dataset(root)
    assert dataset.fields == ("image", "labelIds") and len(dataset) == 7
    sample = dataset[2]
    image, labels, _ = _source(frames, sample["key"])
    np.testing.assert_array_equal(_hwc(sample["image"]), image)
    np.testing.assert_array_equal(sample["labelIds"][0].numpy(), labels)
    raw = L3Dataset(root, compressed=True, transform=lambda s: {**s, "seen": True})[2]
    np.testing.assert_array_equal(l3codec.decode(raw["image"]), image)
    assert raw["seen"]
    with pytest.raises(l3codec.L3Error, match="fields"):
        L3Dataset(root, fields=("image", "color"))
    with pytest.raises(IndexError):
        dataset[7]


@pytest.mark.parametrize("path", ["cpu", "gpu-host"])
def test_two_ranks_read_every_sample_once_per_epoch_with_equal_batch_counts(cityscapes, path):
    root, _ = cityscapes
    for drop_last in (False, True):
        loaders = [_loader(root, path, batch_size=2, seed=3, rank=r, world_size=2, drop_last=drop_last)
                   for r in range(2)]
        seen_by_epoch = []
        for epoch in (0, 1):
            per_rank = []
            for loader in loaders:
                loader.set_epoch(epoch)
                per_rank.append([b["index"].tolist() for b in loader])
            assert len(per_rank[0]) == len(per_rank[1]) == len(loaders[0])
            seen = [i for rank in per_rank for batch in rank for i in batch]
            if drop_last:
                assert len(seen) == len(set(seen)) == 4  # 1 whole batch of 2 per rank; 3 dropped: no repeats
            else:
                assert set(seen) == set(range(7)) and len(seen) == 8  # one sample repeated to even the ranks
            seen_by_epoch.append(seen)
        assert seen_by_epoch[0] != seen_by_epoch[1]  # a new global order each epoch


def _expected_crop(array, crop):
    y, x, h, w = crop
    return array[y:y + h, x:x + w]


@pytest.mark.parametrize("path", list(PATHS))
def test_random_crops_and_flips_agree_between_image_and_label_maps(cityscapes, path):
    root, frames = cityscapes
    loader = _loader(root, path, batch_size=4, crop=RandomCrop((18, 21), flip=0.5), seed=11)
    flips = []
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 18, 21) and batch["labelIds"].shape[1:] == (18, 21)
        for n, key in enumerate(batch["key"]):
            region, flip = batch["region"][n].tolist(), bool(batch["flip"][n])
            flips.append(flip)
            for got, source in zip((_hwc(batch["image"][n]), batch["labelIds"][n].numpy(),
                                    batch["instanceIds"][n].numpy()), _source(frames, key)):
                expected = _expected_crop(source, region)
                np.testing.assert_array_equal(got, expected[:, ::-1] if flip else expected)
    assert any(flips) and not all(flips)


@pytest.mark.parametrize("path", ["cpu", "gpu-emulated"])
def test_resized_crops_resize_images_bilinear_and_labels_nearest(cityscapes, path):
    root, frames = cityscapes
    loader = _loader(root, path, batch_size=4, crop=RandomResizedCrop((24, 20), scale=(0.1, 0.9), flip=0.5))
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 24, 20) and batch["labelIds"].shape[1:] == (24, 20)
        for n, key in enumerate(batch["key"]):
            region, flip = batch["region"][n].tolist(), bool(batch["flip"][n])
            image, labels, _ = (_expected_crop(a, region) for a in _source(frames, key))
            reference = torch.nn.functional.interpolate(
                torch.from_numpy(image.copy()).permute(2, 0, 1)[None].float(), size=(24, 20), mode="bilinear",
                align_corners=False, antialias=True,
            )[0].round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
            rows = np.minimum(((np.arange(24) + 0.5) * region[2] / 24).astype(int), region[2] - 1)
            cols = np.minimum(((np.arange(20) + 0.5) * region[3] / 20).astype(int), region[3] - 1)
            nearest = labels[rows][:, cols]
            if flip:
                reference, nearest = reference[:, ::-1], nearest[:, ::-1]
            difference = np.abs(_hwc(batch["image"][n]).astype(int) - reference.astype(int))
            assert difference.max() <= 1  # float rounding of the two resamplers; the same filter
            np.testing.assert_array_equal(batch["labelIds"][n].numpy(), nearest)


def test_bilinear_resize_is_torchs_antialiased_filter_and_its_uint8_path_within_one():
    generator = torch.Generator().manual_seed(3)
    canvas = torch.randint(0, 256, (5, 60, 52, 3), dtype=torch.uint8, generator=generator)
    regions = torch.tensor([[60, 52], [12, 9], [60, 5], [7, 52], [38, 19]])  # shrinking and enlarging
    floats = resize.bilinear(canvas, regions, (11, 13))
    for item, (h, w) in enumerate(regions.tolist()):
        chw = canvas[item, :h, :w].permute(2, 0, 1)[None].float()
        expected = torch.nn.functional.interpolate(chw, size=(11, 13), mode="bilinear", align_corners=False,
                                                   antialias=True)[0].permute(1, 2, 0)
        torch.testing.assert_close(floats[item], expected)
    rounded = resize.bilinear(canvas, regions, (11, 13), rounded=True)
    assert rounded.dtype == torch.uint8
    assert (rounded.int() - floats.round().int()).abs().max() <= 1


def test_centre_crop_and_normalised_float_images(cityscapes):
    root, frames = cityscapes
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    for path in ("cpu", "gpu-host"):
        batch = next(iter(_loader(root, path, crop=CenterCrop(16), normalize=(mean, std), shuffle=False)))
        assert batch["image"].dtype == torch.float32 and batch["image"].shape == (3, 3, 16, 16)
        image = _source(frames, batch["key"][0])[0][12:28, 20:36]
        expected = (image / 255.0 - np.array(mean)) / np.array(std)
        np.testing.assert_allclose(_hwc(batch["image"][0]), expected, rtol=1e-5, atol=1e-5)
        assert not batch["flip"].any()


@pytest.mark.parametrize("path", list(PATHS))
def test_pages_of_text_read_through_their_lz_streams(tmp_path, path):
    """A folder of rendered text (LZ streams, docs/FORMAT.md §5.2; coloured: pixel LZ streams, §5.3;
    both Huffman-coded, §5.4) through every path, whole and cropped: the GPU path expands the LZ planes of each batch's tiles
    before decoding them (the host path reads them where they lie in the batch's bytes)."""
    pages = {}
    for i in range(4):
        page = make_image("coloured_text", 48, 256, 3, np.uint8, i) if i % 2 else make_image("text", 48, 256, 1, np.uint8, i)
        _write_png(tmp_path / "src" / "page" / f"p{i}.png", page)
        pages[f"p{i}"] = page
    convert("folder", tmp_path / "src", tmp_path / "l3", mode="fast", tile_width=128, workers=0,
            progress=False)
    dataset = L3Dataset(tmp_path / "l3", fields=("image",))
    kinds = {data[start] for data in (dataset.reader.read(i, "image").tobytes() for i in range(4))
             for _, start, _ in plane_streams(data)}
    assert {fmt.KIND_LZ_CODED, fmt.KIND_PIXEL_LZ_CODED} <= kinds
    for crop in (None, RandomCrop((20, 100))):
        loader = Loader(dataset, 2, shuffle=False, crop=crop, decode=PATHS[path], seed=3)
        seen = 0
        for batch in loader:
            for tensor, key, region in zip(batch["image"], batch["key"], batch["region"].tolist()):
                y, x, h, w = region
                page = next(page for name, page in pages.items() if name in key)
                np.testing.assert_array_equal(_hwc(tensor).reshape(h, w, -1), page.reshape(48, 256, -1)[y:y + h, x:x + w])
                seen += 1
        assert seen == 4


@pytest.mark.parametrize("path", ["cpu", "gpu-host"])
def test_images_of_different_sizes_come_as_lists(folder, path):
    root, images = folder
    loader = Loader(L3Dataset(root, fields=("image",)), 5, shuffle=False, crop=Full(flip=1.0),
                    decode=PATHS[path])
    batch = next(iter(loader))
    assert isinstance(batch["image"], list) and len(batch["image"]) == 5
    for tensor, key, label in zip(batch["image"], batch["key"], batch["label"].tolist()):
        image, klass = next(v for name, v in images.items() if name in key)
        np.testing.assert_array_equal(_hwc(tensor).reshape(image.shape), image[:, ::-1])
        assert label == klass


@pytest.mark.parametrize("path, workers", [("cpu", 0), ("gpu-host", 0), ("gpu-host", 2)])
def test_state_dict_resumes_with_exactly_the_remaining_samples(cityscapes, path, workers):
    root, _ = cityscapes
    options = dict(batch_size=2, crop=RandomCrop(16, flip=0.5), seed=5)
    whole = _loader(root, path, **options)
    whole.set_epoch(2)
    expected = [(b["index"].tolist(), b["image"].clone()) for b in whole]
    first = _loader(root, path, **options)
    first.set_epoch(2)
    iterator = iter(first)
    for _ in range(2):
        next(iterator)
    state = first.state_dict()
    assert state["batches"] == 2 and state["epoch"] == 2
    resumed = _loader(root, path, workers=workers, **options)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the usual loop calls set_epoch for the resumed epoch: the resume point stays
    rest = [(b["index"].tolist(), b["image"]) for b in resumed]
    assert [i for i, _ in rest] == [i for i, _ in expected[2:]]
    for (_, a), (_, b) in zip(rest, expected[2:]):
        assert torch.equal(a, b)  # the same crops and flips too
    with pytest.raises(l3codec.L3Error, match="resume"):
        _loader(root, path, batch_size=3).load_state_dict(state)


@pytest.mark.parametrize("path", ["cpu", "gpu-host"])
def test_two_workers_give_the_same_batches_as_none(cityscapes, path):
    root, _ = cityscapes
    options = dict(batch_size=3, crop=RandomResizedCrop(12, flip=0.5), seed=9)
    alone = list(_loader(root, path, **options))
    pooled = list(_loader(root, path, workers=2, **options))
    assert len(alone) == len(pooled) == 3
    for a, b in zip(alone, pooled):
        assert a["key"] == b["key"]
        for name in ("image", "labelIds", "instanceIds"):
            assert torch.equal(a[name], b[name])


def _corrupt_member(root, dataset, index, field):
    """Flip a payload byte of one sample's member inside its shard file."""
    member = bytes(dataset.reader.read(index, field))
    for shard in sorted((root / "train").glob("*.tar")):
        content = bytearray(shard.read_bytes())
        at = content.find(member)
        if at >= 0:
            content[at + len(member) - 2] ^= 0x5A
            shard.write_bytes(bytes(content))
            return dataset.reader.key(index)
    raise AssertionError("member not found")


@pytest.fixture
def damaged(cityscapes, tmp_path):
    """A copy of the converted dataset with sample 4's labelIds corrupted."""
    import shutil

    root = tmp_path / "damaged"
    shutil.copytree(cityscapes[0], root)
    key = _corrupt_member(root, L3Dataset(root), 4, "labelIds")
    return root, key


@pytest.mark.parametrize("path", ["cpu", "gpu-host"])
def test_a_corrupt_sample_raises_with_its_key_or_is_replaced(damaged, path):
    root, key = damaged
    with pytest.raises(l3codec.L3Error, match=key):
        list(_loader(root, path, shuffle=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(_loader(root, path, shuffle=False, on_error="skip"))
    assert any(key in str(w.message) for w in caught)
    batch = batches[1]  # samples 3, 4, 5: 4 is replaced by 3
    assert batch["index"].tolist() == [3, 3, 5] and batch["skipped"][0][0] == key
    assert torch.equal(batch["labelIds"][1], batch["labelIds"][0])
    assert [b["index"].tolist() for b in batches][::2] == [[0, 1, 2], [6]]


def test_decode_failures_past_the_checksum_are_caught_by_the_status(cityscapes):
    """A decode step that reports a corrupt item (as a kernel would) never yields its pixels."""
    root, _ = cityscapes

    def failing_step(staged, buffer, out, status, stream):
        host_decode_step(staged, buffer, out, status, stream)
        status[1] = l3codec.format.STATUS_CORRUPT  # entry 1 in status order: an item of sample 0 or 1

    def loader(**options):
        return Loader(L3Dataset(root), 3, shuffle=False, drop_last=True,
                      decode=Decode("gpu", device="cpu", step=failing_step), **options)

    with pytest.raises(l3codec.L3Error, match="failed to decode"):
        list(loader())
    with pytest.warns(UserWarning, match="replaced"):
        batches = list(loader(on_error="skip"))
    assert all(len(b["skipped"]) == 1 for b in batches)


@pytest.mark.processes
def test_reads_a_dataset_from_an_s3_server(cityscapes):
    """The converted dataset uploaded to a real S3-compatible server (moto, on 127.0.0.1) and read
    through fsspec/s3fs byte ranges, with two workers."""
    root, frames = cityscapes
    with S3Server() as server:  # on a port it chose: a port picked beforehand can be taken meanwhile
        server.upload(root, "data/cityscapes")
        options = server.options()
        for decode in ("cpu", "gpu"):
            dataset = L3Dataset("s3://data/cityscapes", storage_options=options)
            loader = Loader(dataset, 4, shuffle=False, decode=PATHS["gpu-host" if decode == "gpu" else "cpu"],
                            workers=2 if decode == "gpu" else 0)
            keys = []
            for batch in loader:
                for n, key in enumerate(batch["key"]):
                    np.testing.assert_array_equal(_hwc(batch["image"][n]), _source(frames, key)[0])
                    np.testing.assert_array_equal(batch["labelIds"][n].numpy(), _source(frames, key)[1])
                keys += batch["key"]
            assert len(keys) == 7


def test_gpu_decode_without_a_gpu_says_what_to_do(cityscapes):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(l3codec.L3Error, match="decode='cpu'"):
        Loader(L3Dataset(cityscapes[0]), 2, decode=Decode("gpu", device="cpu"))


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["cupy", "numba"])
def test_gpu_batches_match_the_cpu_path(cityscapes, backend):
    root, _ = cityscapes
    options = dict(batch_size=3, crop=RandomCrop(16, flip=0.5), seed=4)
    on_gpu = Loader(L3Dataset(root), decode=Decode("gpu", device="cuda", backend=backend), workers=2,
                    **options)
    on_cpu = Loader(L3Dataset(root), decode=PATHS["cpu"], **options)
    gpu_batches, cpu_batches = list(on_gpu), list(on_cpu)
    assert len(gpu_batches) == len(cpu_batches) == len(on_cpu) > 0
    for a, b in zip(gpu_batches, cpu_batches):
        assert a["image"].is_cuda and a["key"] == b["key"]
        assert torch.equal(a["image"].cpu(), b["image"]) and torch.equal(a["labelIds"].cpu(), b["labelIds"])


@pytest.mark.parametrize("path", ["cpu", "gpu-host"])
def test_a_dropped_loader_is_freed_at_once_with_its_workers(cityscapes, path):
    """Without a collection: a Loader left in a reference cycle would be collected later, possibly
    inside the next loader's forked workers, which cannot stop its workers from there."""
    root, _ = cityscapes
    loader = _loader(root, path, workers=2)
    batches = iter(loader)
    next(batches)
    freed = weakref.ref(loader)
    gc.disable()
    try:
        del batches, loader
        assert freed() is None
    finally:
        gc.enable()
