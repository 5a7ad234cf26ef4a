"""Concurrent remote reads (DatasetReader.read_many): a real S3 server (moto) behind a proxy that
adds latency per request, and an HTTP range server that fails on demand for the retries."""

import numpy as np
import pytest

from l3codec.converters import convert
from l3codec.dataset import open_dataset
from l3codec.format import L3Error
from l3codec.netsim import LatencyProxy, RangeServer

from dataset_trees import folder_tree
from s3_server import S3Server

SAMPLES = 24


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-src")
    folder_tree(root / "src", per_class=SAMPLES // 2)
    convert("folder", root / "src", root / "l3", workers=0, shard_size="8kB", progress=False)
    return root / "l3"


@pytest.fixture(scope="module")
def s3_behind_latency(dataset):
    with S3Server() as server:
        proxy = LatencyProxy(server.host_and_port, latency=0.05)
        options = server.options(proxy.endpoint, skip_instance_cache=True)
        server.upload(dataset, "slow/l3", options)
        yield proxy, options
        proxy.close()


def test_a_batch_is_fetched_concurrently_in_merged_ranges(dataset, s3_behind_latency):
    proxy, options = s3_behind_latency
    local = open_dataset(dataset, "train")
    remote = open_dataset("s3://slow/l3", "train", storage_options=options)
    remote.max_in_flight = 4
    order = np.random.default_rng(0).permutation(SAMPLES).tolist()
    requests = [(i, "image") for i in order]
    remote.read_many(requests[:1])  # the connection set up
    proxy.reset_counts()
    got = remote.read_many(requests)
    assert [g.tobytes() for g in got] == [local.read(i, "image").tobytes() for i in order]
    shards = len(np.unique(local.index["shard"]))
    assert 2 <= shards < SAMPLES
    assert proxy.requests == shards  # one request per shard: its members lie back to back
    assert 2 <= proxy.most_in_flight <= 4  # concurrent, and never more than asked
    proxy.reset_counts()
    for i in order[:6]:
        remote.read(i, "image")  # one at a time, for comparison
    assert proxy.requests == 6 and proxy.most_in_flight == 1


def test_failed_requests_are_retried_then_reported_with_the_url(dataset):
    pytest.importorskip("aiohttp")
    server = RangeServer(dataset)
    try:
        local = open_dataset(dataset, "train")
        remote = open_dataset(server.url, "train")
        server.fail_next(2)  # transient: two 503s, then answers
        got = remote.read_many([(i, "image") for i in range(SAMPLES)])
        assert [g.tobytes() for g in got] == [local.read(i, "image").tobytes() for i in range(SAMPLES)]
        server.fail_next(10**6)
        got = remote.read_many([(0, "image")])
        assert isinstance(got[0], L3Error)
        assert f"{server.url}/train/shard-" in str(got[0]) and "after 4 attempts" in str(got[0])
    finally:
        server.close()
