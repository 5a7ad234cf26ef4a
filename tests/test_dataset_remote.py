"""The reader on a URL: a real S3-compatible server (moto, in-process) read through fsspec byte ranges."""

import os
import pickle

import numpy as np
import pytest

import l3codec
from l3codec.converters import convert
from l3codec.converters.inspect import inspect
from l3codec.dataset import open_dataset

from dataset_trees import cityscapes_tree

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")


@pytest.fixture(scope="module")
def s3_endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_remote_reader_returns_the_same_bytes_as_the_local_one(tmp_path, s3_endpoint):
    expected = cityscapes_tree(tmp_path / "src")
    convert("cityscapes", tmp_path / "src", tmp_path / "dst", workers=0, shard_size="4kB", progress=False)
    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_endpoint,
                                                                          "region_name": "us-east-1"}}
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="l3-datasets")
    fs = s3fs.S3FileSystem(**options)
    for parent, _, files in os.walk(tmp_path / "dst"):
        for name in files:
            local = os.path.join(parent, name)
            fs.put_file(local, "l3-datasets/cs/" + os.path.relpath(local, tmp_path / "dst"))
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
