"""A converted dataset damaged after the fact: each damage is one L3Error naming the file, and a
loader with on_error="skip" carries on past an empty shard. Keys are safe for DALI's index."""

import json

import numpy as np

import pytest

from l3codec.converters import convert
from l3codec.converters.layouts import find_layout
from l3codec.dataset import open_dataset
from l3codec.format import L3Error

from dataset_trees import folder_tree, save_png


@pytest.fixture
def converted(tmp_path):
    folder_tree(tmp_path / "src", per_class=3)
    convert("folder", tmp_path / "src", tmp_path / "l3", workers=0, shard_size="2kB", progress=False)
    return tmp_path / "l3"


def test_an_empty_shard_is_named_and_the_loader_skips_its_samples(converted):
    torch = pytest.importorskip("torch")  # noqa: F841
    from l3codec.loader import Decode, L3Dataset, Loader

    empty = sorted((converted / "train").glob("*.tar"))[0]
    empty.write_bytes(b"")
    with pytest.raises(L3Error, match=f"{empty}.*empty or damaged shard"):
        open_dataset(converted, "train").read(0)
    loader = Loader(L3Dataset(converted), 6, shuffle=False, decode=Decode("cpu", device="cpu"),
                    on_error="skip")
    with pytest.warns(UserWarning):
        batches = list(loader)
    assert batches and batches[0]["skipped"]  # the samples of the empty shard, replaced


def test_a_damaged_index_or_a_string_version_is_named(converted):
    manifest = json.loads((converted / "manifest.json").read_text())
    (converted / "manifest.json").write_text(json.dumps({**manifest, "version": "1"}))
    with pytest.raises(L3Error, match='"version" must be an integer'):
        open_dataset(converted, "train")
    (converted / "manifest.json").write_text(json.dumps(manifest))
    (converted / "train" / "index.npy").write_bytes(b"not an index")
    with pytest.raises(L3Error, match="index.npy is not a readable l3 dataset index"):
        open_dataset(converted, "train")


def test_keys_hold_no_whitespace_or_control_characters(tmp_path):
    import numpy as np

    save_png(str(tmp_path / "src" / "a photo\tof me.png"), np.zeros((4, 4), np.uint8))
    layout = find_layout("folder", str(tmp_path / "src"))
    assert [sample.key for sample in layout.splits["train"]] == ["a_photo_of_me"]


def test_inspect_deep_checks_the_index_shapes_against_the_files(converted):
    import numpy as np

    from l3codec.converters.inspect import inspect

    index = np.load(converted / "train" / "index.npy")
    index["image_height"][1] += 1
    np.save(converted / "train" / "index.npy", index)
    report = inspect(converted, deep=True)
    assert not report["ok"] and any("the index says" in problem for problem in report["problems"])


def test_a_loader_batch_over_max_pixels_is_refused_before_decoding(converted):
    pytest.importorskip("torch")
    from l3codec.loader import Decode, L3Dataset, Loader, host_decode_step

    for decode in (Decode("cpu", device="cpu"), Decode("gpu", device="cpu", step=host_decode_step)):
        loader = Loader(L3Dataset(converted, max_pixels=2000), 3, shuffle=False, decode=decode)
        with pytest.raises(L3Error, match="max_pixels|pixels"):
            next(iter(loader))  # three 24x40 images: 2880 pixels
        small = Loader(L3Dataset(converted, max_pixels=2000), 2, shuffle=False, decode=decode)
        assert len(next(iter(small))["key"]) == 2  # 1920 pixels pass
    with pytest.raises(L3Error, match="exceed max_pixels"):
        L3Dataset(converted, max_pixels=100)[0]


def _point_sample_at_another(converted):
    """The index row of sample 1 now points at sample 0's image (same shape): no checksum or size
    notices, only the tar header before the bytes names the other sample."""
    index = np.load(converted / "train" / "index.npy")
    for column in ("shard", "image_offset", "image_size", "image_height", "image_width", "image_channels", "image_bits"):
        index[column][1] = index[column][0]
    np.save(converted / "train" / "index.npy", index)
    return bytes(index["key"][1]).decode(), bytes(index["key"][0]).decode()


def test_an_index_row_pointing_at_another_samples_member_is_named(converted):
    from l3codec.converters.inspect import inspect

    key, other = _point_sample_at_another(converted)
    reader = open_dataset(converted, "train")
    with pytest.raises(L3Error, match=f"{key}.l3 at byte .*the tar member there is '{other}.l3'"):
        reader.read(1)
    assert reader.read(0).size and reader.read(2).size  # the other samples still read
    good, bad = reader.read_many([(0, "image"), (1, "image")])
    assert isinstance(good, np.ndarray) and isinstance(bad, L3Error)
    report = inspect(converted, deep=True)
    assert not report["ok"] and any(f"the tar member there is '{other}.l3'" in p for p in report["problems"])


def test_a_remote_index_row_pointing_at_another_samples_member_is_named(converted):
    from s3_server import S3Server

    key, other = _point_sample_at_another(converted)
    with S3Server() as server:
        server.upload(converted, "damaged/l3")
        reader = open_dataset("s3://damaged/l3", "train", storage_options=server.options())
        with pytest.raises(L3Error, match=f"{key}.l3 at byte .*the tar member there is '{other}.l3'"):
            reader.read(1)
        results = reader.read_many([(0, "image"), (1, "image"), (2, "image")])
        assert isinstance(results[1], L3Error) and "the tar member there is" in str(results[1])
        local = open_dataset(converted, "train")
        assert results[0].tobytes() == local.read(0).tobytes() and results[2].tobytes() == local.read(2).tobytes()


@pytest.mark.parametrize("name", ["short/key.l3", "a" * 150 + ".l3", "dir/" * 30 + "x.l3", "ünïcode/key.l3",
                                  "x" * 99 + "é.l3"])
def test_the_member_check_reads_tarfiles_own_headers_long_and_non_ascii_names_included(name):
    import io
    import tarfile

    from l3codec.dataset import member_header_problem

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
        data_at = tar.offset - 512  # the one block of data, after its header
    header = buffer.getvalue()[data_at - 512:data_at]
    assert member_header_problem(header, name, 3) is None
    assert "holds 3 bytes" in member_header_problem(header, name, 4)
    assert "the tar member there is" in member_header_problem(header, "other" + name, 3)
