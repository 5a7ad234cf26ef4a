"""Concurrent remote reads (DatasetReader.read_many): a real S3 server (moto) behind a proxy that
adds latency per request, an HTTP range server that fails or stalls on demand for the retries and
timeouts, and a server that accepts connections and never answers."""

import socket
import threading
import time

import numpy as np
import pytest
from dataset_trees import converted_folder
from s3_server import S3Server

from l3codec.dataset import open_dataset
from l3codec.format import L3Error
from l3codec.netsim import LatencyProxy, RangeServer

pytestmark = pytest.mark.processes

SAMPLES = 24


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return converted_folder(tmp_path_factory.mktemp("remote-src"), SAMPLES, shard_size="8kB")


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


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a hung store)."""

    def __init__(self):
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self._held.append(self._listener.accept()[0])
            except OSError:
                return

    def close(self):
        self._listener.close()
        for connection in self._held:
            connection.close()


TIMEOUT_S = 0.3  # short timeouts passed as options: the 30 s default is never waited out here


def test_a_silent_server_gives_an_l3error_naming_the_url_within_the_timeout():
    pytest.importorskip("aiohttp")
    server = SilentServer()
    try:
        started = time.monotonic()
        with pytest.raises(L3Error, match=f"^{server.url}/manifest.json: no answer within 0.3 s "
                                          r"\(after 2 attempts\)$"):
            open_dataset(server.url, "train", timeout=TIMEOUT_S, retries=1)
        assert time.monotonic() - started < 3  # two 0.3 s attempts and a 0.2 s pause
    finally:
        server.close()


def test_a_stalled_range_is_retried_then_reported_by_read_and_read_many_alike(dataset):
    pytest.importorskip("aiohttp")
    server = RangeServer(dataset)
    try:
        local = open_dataset(dataset, "train")
        remote = open_dataset(server.url, "train", timeout=TIMEOUT_S, retries=1)
        server.stall_next(1)  # transient: one request unanswered, then answers
        assert remote.read(3, "image").tobytes() == local.read(3, "image").tobytes()
        server.fail_next(1)  # a 503, then answers
        assert remote.read(4, "image").tobytes() == local.read(4, "image").tobytes()
        server.stall_next(10**6)
        started = time.monotonic()
        with pytest.raises(L3Error) as raised:
            remote.read(0, "image")
        [got] = remote.read_many([(0, "image")])
        assert time.monotonic() - started < 6
        for error in (raised.value, got):
            assert isinstance(error, L3Error)
            assert str(error).startswith(f"{server.url}/train/shard-000000.tar: bytes 0-")
            assert str(error).endswith("no answer within 0.3 s (after 2 attempts)")
    finally:
        server.close()


def test_read_raises_l3error_after_the_default_retries_as_read_many(dataset):
    pytest.importorskip("aiohttp")
    server = RangeServer(dataset)
    try:
        remote = open_dataset(server.url, "train")
        server.fail_next(10**6)
        with pytest.raises(L3Error, match=f"^{server.url}/train/shard-000000.tar: bytes 0-.*503.*"
                                          r"\(after 4 attempts\)$"):
            remote.read(0, "image")
    finally:
        server.close()


def test_lost_and_wrong_s3_endpoints_give_one_l3error_naming_url_and_range(dataset):
    with S3Server() as server:
        options = server.options(skip_instance_cache=True)
        server.upload(dataset, "lost/l3", options)
        remote = open_dataset("s3://lost/l3", "train", storage_options=options, timeout=TIMEOUT_S, retries=1)
        assert remote.read(0, "image").size
    started = time.monotonic()  # the server is gone
    with pytest.raises(L3Error, match=r"^s3://lost/l3/train/shard-000000.tar: bytes \d+-\d+: .*\(after 2 attempts\)$"):
        remote.read(1, "image")
    with socket.create_server(("127.0.0.1", 0)) as closed:
        wrong = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with pytest.raises(L3Error, match=r"^s3://lost/l3/manifest.json: .*\(after 2 attempts\)$"):
        open_dataset("s3://lost/l3", "train", storage_options=server.options(wrong, skip_instance_cache=True),
                     timeout=TIMEOUT_S, retries=1)
    assert time.monotonic() - started < 10


def test_a_filesystem_without_coroutines_is_bounded_by_the_timeout_too(dataset):
    """A synchronous fsspec filesystem (ftp, sftp, a user's own): one reading thread, each request
    bounded by the timeout, the same L3Error as an async one; a stalled server holds one thread,
    not one per request."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.local import LocalFileSystem

    stalled = threading.Event()

    class StallingFileSystem(LocalFileSystem):
        protocol = "l3stall"

        def cat_file(self, path, start=None, end=None, **kwargs):
            if stalled.is_set():
                time.sleep(5)
            return super().cat_file(path, start=start, end=end, **kwargs)

        @classmethod
        def _strip_protocol(cls, path):
            return super()._strip_protocol(str(path).removeprefix("l3stall://"))

    fsspec.register_implementation("l3stall", StallingFileSystem, clobber=True)
    local = open_dataset(dataset, "train")
    remote = open_dataset(f"l3stall://{dataset}", "train", timeout=0.3, retries=1)
    assert not getattr(remote._filesystem(), "async_impl", False)
    wanted = [(i, "image") for i in range(6)]
    expected = [local.read(i, "image").tobytes() for i, _ in wanted]
    assert [g.tobytes() for g in remote.read_many(wanted)] == expected
    stalled.set()
    started = time.monotonic()
    with pytest.raises(L3Error, match=r"shard-000000\.tar: bytes 0-\d+: no answer within 0.3 s "
                                      r"\(after 2 attempts\)$"):
        remote.read(0, "image")
    assert time.monotonic() - started < 2  # two 0.3 s waits and a 0.2 s pause, not 2 x 5 s
    got = remote.read_many(wanted)  # every range fails at once while the stalled request runs
    assert all(isinstance(g, L3Error) for g in got)
    assert sum(t.name == "l3-remote-read" for t in threading.enumerate()) == 1
    stalled.clear()
