"""The container (l3codec.dataset): writer, index, manifest and reader, without the converter."""

import json
import os
import pickle
import tarfile

import numpy as np
import pytest

import l3codec
from l3codec import dataset


def write_tiny(root, count=5, fields=("image", "labelIds")):
    """A hand-written one-shard split; returns {key: {field: L3 bytes}}."""
    rng = np.random.default_rng(1)
    split = os.path.join(root, "train")
    os.makedirs(split)
    writer = dataset.ShardWriter(split, 0, fields, key_width=8, has_json=True)
    written = {}
    for n in range(count):
        images = {field: l3codec.encode(rng.integers(0, 255, (8 + n, 16, 3 if field == "image" else 1), np.uint8))
                  for field in fields}
        key = f"s{n}"
        writer.add(key, images, infos={f: l3codec.info(b) for f, b in images.items()}, label=n % 2,
                   json_bytes=json.dumps({"n": n}).encode())
        written[key] = images
    record = writer.close()
    dataset.write_index(split, record["rows"])
    dataset.write_manifest(root, {"splits": {"train": {"samples": count, "shards": [
        {k: record[k] for k in ("name", "bytes", "sha256", "samples")}]}}, "class_names": ["even", "odd"]})
    return written, record


def test_reader_returns_exact_member_bytes_and_facts(tmp_path):
    written, record = write_tiny(tmp_path)
    reader = dataset.open_dataset(tmp_path)
    assert len(reader) == 5 and reader.fields == ("image", "labelIds")
    assert reader.class_names == ["even", "odd"]
    for i in range(len(reader)):
        key = reader.key(i)
        assert reader.label(i) == i % 2
        for field in reader.fields:
            assert reader.read(i, field).tobytes() == written[key][field]
        assert reader.shape(i) == (8 + i, 16, 3) and reader.shape(i, "labelIds") == (8 + i, 16, 1)
        assert reader.dtype(i) == np.uint8
        assert json.loads(reader.read(i, "json").tobytes()) == {"n": i}
    assert isinstance(reader.index, np.memmap) or isinstance(reader.index.base, np.memmap)
    with pytest.raises(KeyError, match="instanceIds"):
        reader.read(0, "instanceIds")
    with pytest.raises(IndexError):
        reader.read(5)


def test_shard_is_a_plain_tar_in_webdataset_layout_with_a_matching_idx(tmp_path):
    written, _ = write_tiny(tmp_path)
    shard = tmp_path / "train" / "shard-000000.tar"
    with tarfile.open(shard) as tar:
        names = tar.getnames()
        assert names[:4] == ["s0.l3", "s0.labelIds.l3", "s0.cls", "s0.json"]
        assert tar.extractfile("s3.labelIds.l3").read() == written["s3"]["labelIds"]
        assert tar.extractfile("s3.cls").read() == b"1"
    lines = (tmp_path / "train" / "shard-000000.idx").read_text().splitlines()
    assert lines[0] == "v1.2 5"
    data = shard.read_bytes()
    for line in lines[1:]:
        parts = line.split()
        for ext, offset, size, name in zip(parts[0::4], parts[1::4], parts[2::4], parts[3::4]):
            key = name.split(".", 1)[0]
            member = data[int(offset):int(offset) + int(size)]
            assert name == f"{key}.{ext}"
            if ext in ("l3", "labelIds.l3"):
                assert member == written[key]["image" if ext == "l3" else "labelIds"]


def test_unfinished_shard_leaves_only_a_temporary_file(tmp_path):
    writer = dataset.ShardWriter(tmp_path, 3, ("image",), key_width=4)
    data = l3codec.encode(np.zeros((4, 4), np.uint8))
    writer.add("a", {"image": data}, infos={"image": l3codec.info(data)})
    assert not (tmp_path / "shard-000003.tar").exists()
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_reader_pickles_and_reads_after_fork(tmp_path):
    written, _ = write_tiny(tmp_path)
    reader = dataset.open_dataset(str(tmp_path))
    reader.read(1)  # maps the shard in this process
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.read(2).tobytes() == written["s2"]["image"]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the inherited reader must reopen its own mapping
        os.close(read_fd)
        ok = reader.read(4, "labelIds").tobytes() == written["s4"]["labelIds"]
        os.write(write_fd, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_fd)
    assert os.read(read_fd, 1) == b"1"
    os.waitpid(pid, 0)


def test_not_a_dataset_missing_split_and_newer_version_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a converted l3 dataset"):
        dataset.open_dataset(tmp_path)
    write_tiny(tmp_path)
    with pytest.raises(l3codec.L3Error, match="no split 'val'; it has \\['train'\\]"):
        dataset.open_dataset(tmp_path, "val")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["version"] = dataset.DATASET_VERSION + 1
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(l3codec.L3Error, match="upgrade l3codec"):
        dataset.open_dataset(tmp_path)


def test_keys_with_dots_or_too_long_are_refused(tmp_path):
    writer = dataset.ShardWriter(tmp_path, 0, ("image",), key_width=4)
    data = l3codec.encode(np.zeros((4, 4), np.uint8))
    with pytest.raises(l3codec.L3Error, match="no '.'"):
        writer.add("a.b", {"image": data}, infos={"image": l3codec.info(data)})
    with pytest.raises(l3codec.L3Error, match="longer than the index's 4 bytes"):
        writer.add("abcde", {"image": data}, infos={"image": l3codec.info(data)})
    writer.abort()
