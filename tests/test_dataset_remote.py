"""The reader on a URL: a real S3-compatible server (moto, in-process) read through fsspec byte ranges."""

import pickle

import numpy as np
import pytest

import l3codec
from l3codec.converters import convert
from l3codec.converters.inspect import inspect
from l3codec.dataset import open_dataset

from dataset_trees import cityscapes_tree
from s3_server import S3Server

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def test_remote_reader_returns_the_same_bytes_as_the_local_one(tmp_path, s3):
    expected = cityscapes_tree(tmp_path / "src")
    convert("cityscapes", tmp_path / "src", tmp_path / "dst", workers=0, shard_size="4kB", progress=False)
    options = s3.options()
    s3.upload(tmp_path / "dst", "l3-datasets/cs")
    local = open_dataset(tmp_path / "dst", "train")
    remote = open_dataset("s3://l3-datasets/cs", "train", storage_options=options)
    assert remote.remote and len(remote) == len(local) and remote.fields == local.fields
    assert remote.manifest == local.manifest
    for i in range(len(remote)):
        for field in remote.members:
            assert remote.read(i, field).tobytes() == local.read(i, field).tobytes()
        assert np.array_equal(l3codec.decode(remote.read(i, "instanceIds")),
                              expected["train"][remote.key(i)]["instanceIds"])
    clone = pickle.loads(pickle.dumps(remote))
    assert clone.read(1, "labelIds").tobytes() == local.read(1, "labelIds").tobytes()
    assert inspect("s3://l3-datasets/cs", storage_options=options)["ok"]
    with pytest.raises(FileNotFoundError, match="not a converted l3 dataset"):
        open_dataset("s3://l3-datasets/nothing-here", storage_options=options)
