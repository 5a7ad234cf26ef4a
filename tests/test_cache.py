"""The sample cache (l3codec.cache) with real parts: processes inserting at once, one killed with
SIGKILL inside an insert, damaged and foreign entries, an unwritable directory, an S3 server
stopped after the first epoch, the loader's workers, and `l3 cache`."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from l3codec import L3Error
from l3codec.cache import ENTRY_HEADER, SampleCache, cache_report
from l3codec.cli import main as l3
from l3codec.converters import convert
from l3codec.dataset import open_dataset

from dataset_trees import converted_folder, folder_tree
from s3_server import S3Server

SAMPLES = 24


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return converted_folder(tmp_path_factory.mktemp("cache-src"), SAMPLES)


def member_bytes(reader) -> np.ndarray:
    return reader.index["image_size"].astype(np.int64) + ENTRY_HEADER.size + len("trainimage")  # each header


def epoch_order(epoch: int) -> np.ndarray:
    return np.random.default_rng(epoch).permutation(SAMPLES)


def read_epochs(reader, epochs: int) -> list:
    """Hits per epoch, each epoch in its own random order."""
    hits = []
    for epoch in range(epochs):
        before = reader.cache.stats()["datasets"]
        for i in epoch_order(epoch):
            reader.read(int(i), "image")
        reader.cache.flush_counters()
        after = reader.cache.stats()["datasets"][reader.dataset_id]
        hits.append(after["hits"] - before.get(reader.dataset_id, {}).get("hits", 0))
    return hits


def test_minio_keeps_what_entered_where_lru_thrashes(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    capacity = int(member_bytes(local).sum() // 2)  # half the dataset
    minio = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "minio", capacity))
    lru = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "lru", capacity, policy="lru"))
    minio_hits, lru_hits = read_epochs(minio, 4), read_epochs(lru, 4)
    entries = cache_report(tmp_path / "minio")["datasets"][minio.dataset_id]["entries"]
    assert minio_hits[0] == 0 and lru_hits[0] == 0
    # every later epoch hits exactly what entered in the first, about half of the dataset
    assert minio_hits[1:] == [entries] * 3 and SAMPLES // 3 <= entries < SAMPLES
    assert sum(lru_hits[1:]) < sum(minio_hits[1:])
    for i in range(SAMPLES):  # and what the cache returns is the source's bytes
        assert minio.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    report = cache_report(tmp_path / "minio")
    assert report["bytes"] <= capacity and report["datasets"][minio.dataset_id]["refused"] > 0


INSERTER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from l3codec.cache import SampleCache
    from l3codec.dataset import open_dataset

    root, directory, capacity, seed, marker = sys.argv[1:6]
    reader = open_dataset(root, "train", cache=SampleCache(directory, int(capacity)))
    if marker != "-":  # stop inside an insert: its bytes written, the lock held, not yet linked
        real_link = os.link
        def link_then_wait(*args, **kwargs):
            open(marker, "w").close()
            time.sleep(600)
        os.link = link_then_wait
    for i in np.random.default_rng(int(seed)).permutation(len(reader)):
        reader.read(int(i), "image")
    reader.cache.flush_counters()
""")


PAUSED_INSERTER = textwrap.dedent("""
    import glob, os, sys, time
    from l3codec import cache
    from l3codec.dataset import open_dataset

    root, directory, capacity, marker, go = sys.argv[1:6]
    real_enter = cache._Lock.__enter__
    def enter_when_told(lock):  # an insert waits with its bytes written, before taking the lock
        if glob.glob(os.path.join(directory, "*", f".tmp-{os.getpid()}-*")) and not os.path.exists(go):
            open(marker, "w").close()
            while not os.path.exists(go):
                time.sleep(0.01)
        return real_enter(lock)
    cache._Lock.__enter__ = enter_when_told
    reader = open_dataset(root, "train", cache=cache.SampleCache(directory, int(capacity)))
    for i in range(4):
        reader.read(i, "image")
""")


def test_a_recount_while_another_job_is_inserting_counts_its_entry_once(dataset, tmp_path):
    """A job that finds what a killed job left recounts the usage while another job's insert is
    written but not yet linked: that insert adds its own bytes when it links, so the recount must not
    count them too (usage drifted above the entries' bytes, and the cache filled early)."""
    local = open_dataset(dataset, "train")
    directory, capacity = tmp_path / "shared", int(member_bytes(local).sum() * 2)
    marker, go = tmp_path / "paused", tmp_path / "go"
    inserter = subprocess.Popen([sys.executable, "-c", PAUSED_INSERTER, str(dataset), str(directory), str(capacity),
                                 str(marker), str(go)])
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert inserter.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = directory / local.dataset_id / f".tmp-{int(dead.stdout)}-1"  # what a killed job left
    stale.write_bytes(b"x" * 100)
    reader = open_dataset(dataset, "train", cache=SampleCache(directory, capacity))
    reader.read(SAMPLES - 1, "image")  # finds the stale insert: removes it and recounts
    assert not stale.exists()
    go.touch()
    assert inserter.wait(timeout=60) == 0
    report = cache_report(directory)
    assert report["datasets"][local.dataset_id]["entries"] == 5
    assert int((directory / "usage").read_text()) == report["bytes"]


def test_two_jobs_insert_at_once_and_one_killed_inside_an_insert_leaves_it_usable(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    directory, capacity = tmp_path / "shared", int(member_bytes(local).sum() * 2 // 3)
    marker = tmp_path / "inside-insert"
    killed = subprocess.Popen([sys.executable, "-c", INSERTER, str(dataset), str(directory), str(capacity), "9",
                               str(marker)])
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(killed.pid, signal.SIGKILL)  # holding the lock, its entry written under a temporary name
    killed.wait()
    leftovers = [name for folder in directory.iterdir() if folder.is_dir() for name in os.listdir(folder)
                 if name.startswith(".tmp-")]
    assert leftovers
    jobs = [subprocess.Popen([sys.executable, "-c", INSERTER, str(dataset), str(directory), str(capacity), str(seed),
                              "-"]) for seed in (1, 2)]
    assert [job.wait(timeout=120) for job in jobs] == [0, 0]

    report = cache_report(directory)
    facts = report["datasets"][local.dataset_id]
    assert not [name for name in os.listdir(directory / local.dataset_id) if name.startswith(".tmp-")]
    assert int((directory / "usage").read_text()) == report["bytes"] <= capacity
    assert facts["entries"] > 0 and facts["inserts"] == facts["entries"]  # no sample inserted twice
    reader = open_dataset(dataset, "train", cache=SampleCache(directory, capacity))
    for i in range(SAMPLES):
        assert reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    assert reader.cache.stats()["datasets"][local.dataset_id]["corrupt"] == 0


def test_damaged_or_foreign_entries_are_refetched_never_returned(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "100MB")
    reader = open_dataset(dataset, "train", cache=cache)
    for i in range(SAMPLES):
        reader.read(i, "image")
    entry = tmp_path / "c" / local.dataset_id / "train" / "3.image"
    damaged = bytearray(entry.read_bytes())
    damaged[-1] ^= 0x40
    entry.write_bytes(bytes(damaged))
    (tmp_path / "c" / local.dataset_id / "train" / "4.image").write_bytes(entry.with_name("5.image").read_bytes())
    assert reader.read(3, "image").tobytes() == local.read(3, "image").tobytes()
    assert reader.read(4, "image").tobytes() == local.read(4, "image").tobytes()  # sample 5's entry, refused
    cache.flush_counters()
    assert cache.stats()["datasets"][local.dataset_id]["corrupt"] == 2
    assert reader.read(3, "image").tobytes() == local.read(3, "image").tobytes()  # inserted again, whole
    assert entry.read_bytes() != bytes(damaged)


def test_a_cache_that_cannot_be_written_warns_once_and_reads_from_the_source(dataset, tmp_path):
    (tmp_path / "a-file").write_bytes(b"")
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "a-file" / "cache", "1GB"))
    local = open_dataset(dataset, "train")
    with pytest.warns(RuntimeWarning, match="cannot write") as caught:
        for i in range(SAMPLES):
            assert reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    assert len([w for w in caught if "cannot write" in str(w.message)]) == 1


def test_two_datasets_never_share_entries(dataset, tmp_path):
    folder_tree(tmp_path / "other-src", seed=5, per_class=SAMPLES // 2)
    convert("folder", tmp_path / "other-src", tmp_path / "other", workers=0, progress=False)
    cache = SampleCache(tmp_path / "c", "100MB")
    first, second = open_dataset(dataset, "train", cache=cache), open_dataset(tmp_path / "other", "train", cache=cache)
    assert first.dataset_id != second.dataset_id
    for i in range(SAMPLES):
        first.read(i, "image")
        assert second.read(i, "image").tobytes() == open_dataset(tmp_path / "other").read(i, "image").tobytes()
    assert len(cache_report(tmp_path / "c")["datasets"]) == 2


@pytest.mark.processes
def test_a_remote_dataset_is_read_from_the_cache_once_the_server_is_gone(dataset, tmp_path):
    with S3Server() as server:
        server.upload(dataset, "cached/l3")
        remote = open_dataset("s3://cached/l3", "train", storage_options=server.options(),
                              cache=SampleCache(tmp_path / "c", "100MB"))
        for i in epoch_order(0):
            remote.read(int(i), "image")
    local = open_dataset(dataset, "train")
    for i in epoch_order(1):  # the second epoch, with no server
        assert remote.read(int(i), "image").tobytes() == local.read(int(i), "image").tobytes()


@pytest.mark.processes
def test_the_loader_workers_share_the_cache_and_l3_cache_shows_and_clears_it(dataset, tmp_path, capsys):
    torch = pytest.importorskip("torch")  # noqa: F841
    from l3codec.loader import Decode, L3Dataset, Loader, SampleCache as exported

    cache = exported(tmp_path / "c", "100MB")
    on_cpu = Decode("cpu", device="cpu")
    plain = [batch["image"] for batch in Loader(L3Dataset(dataset), 4, shuffle=False, decode=on_cpu)]
    loader = Loader(L3Dataset(dataset), 4, shuffle=False, decode=on_cpu, workers=2, cache=cache)
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = [batch["image"] for batch in loader]
        assert len(batches) == len(plain)
        for got, expected in zip(batches, plain):
            assert all(torch.equal(a, b) for a, b in zip(got, expected))
    facts = cache_report(tmp_path / "c")["datasets"][loader.dataset.reader.dataset_id]
    assert facts["entries"] == SAMPLES and facts["hits"] == SAMPLES and facts["misses"] == SAMPLES

    assert l3(["cache", str(tmp_path / "c"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["datasets"][loader.dataset.reader.dataset_id]["entries"] == SAMPLES
    assert l3(["cache", str(tmp_path / "c"), "--clear"]) == 0
    assert "0.0 MB in 0 dataset(s)" in capsys.readouterr().out
    assert cache_report(tmp_path / "c")["bytes"] == 0


def test_a_clear_by_another_process_is_seen_by_a_cache_already_open(dataset, tmp_path):
    """The cache holds its folders open: after a clear elsewhere it must insert into the new
    folders, not into the removed ones (lost entries, and a usage counting them)."""
    local = open_dataset(dataset, "train")
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "c", "100MB"))
    reader.read(0, "image")
    assert l3(["cache", str(tmp_path / "c"), "--clear"]) == 0
    assert reader.read(1, "image").tobytes() == local.read(1, "image").tobytes()
    report = cache_report(tmp_path / "c")
    assert report["datasets"][local.dataset_id]["entries"] == 1
    assert int((tmp_path / "c" / "usage").read_text()) == report["bytes"]


def test_a_new_cache_directory_caught_while_another_job_writes_its_marker_is_accepted(tmp_path):
    """The job that made the directory writes its marker under a temporary name first; one that
    finds the directory then must not refuse it as 'not a cache' (nor one holding files but no
    marker: that is refused, naming the marker)."""
    (tmp_path / "c").mkdir(mode=0o700)
    (tmp_path / "c" / f".tmp-{os.getpid()}-0123456789ab").write_bytes(b"{")  # the marker, half written
    SampleCache(tmp_path / "c", "1MB")
    assert json.loads((tmp_path / "c" / "l3-cache.json").read_text())["version"] == 2
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "d" / "notes.txt").write_text("mine")
    with pytest.raises(L3Error, match="l3-cache.json"):
        SampleCache(tmp_path / "d", "1MB")
    assert os.listdir(tmp_path / "d") == ["notes.txt"]
