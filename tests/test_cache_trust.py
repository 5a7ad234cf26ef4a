"""The sample cache against another user and against accidents (issue #36, items 6-10, 18, 19;
#37.7): a directory planted by `nobody` (uid 65534) with forged entries and symbolic links, the
modes of what the cache writes under umask 022, entries copied between splits and fields, a
source read that fails its check once, what SIGKILLed jobs leave, a full cache that must refuse
before writing, the cost of LRU eviction, and `l3 cache` on a directory that is not a cache.

The other user is a real process run as nobody through /usr/bin/python3 (standard library only):
those tests need root and skip, saying so, without it."""

import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from dataset_trees import converted_folder

from l3codec import L3Error
from l3codec.cache import SampleCache, cache_report
from l3codec.cli import main as l3
from l3codec.dataset import open_dataset, shard_name

SAMPLES = 12
NOBODY = 65534
OTHER_PYTHON = "/usr/bin/python3"  # one that nobody may run (the test's venv may be private)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
    reason="needs root (to run a second user, nobody, uid 65534) and /usr/bin/python3")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return converted_folder(tmp_path_factory.mktemp("cache-trust-src"), SAMPLES)


@pytest.fixture
def shared(tmp_path):
    """A folder like /tmp or /dev/shm (1777: anyone creates, only owners remove); pytest's own are 0700."""
    folder = Path(tempfile.mkdtemp(prefix="l3-cache-trust-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def as_nobody(code: str, *args) -> subprocess.CompletedProcess:
    def become_nobody():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    done = subprocess.run([OTHER_PYTHON, "-c", textwrap.dedent(code), *map(str, args)], preexec_fn=become_nobody,
                          check=False, capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return done


def old_format_entry(dataset_id: str, index: int, data: bytes) -> bytes:
    """An entry as the cache before this change wrote it (valid to it): magic, crc, size, id, sample."""
    return struct.pack("<4sIQ8sQ", b"L3C1", zlib.crc32(data), len(data), bytes.fromhex(dataset_id), index) + data


# -- 6: the directory and symbolic links --------------------------------------------------------------
@needs_root
def test_a_cache_directory_made_by_another_user_is_refused_and_its_forged_sample_never_served(dataset, shared):
    local = open_dataset(dataset, "train")
    size = int(local.index["image_size"][0])
    forged = bytes([0x5A]) * size
    (shared / "forged").write_bytes(old_format_entry(local.dataset_id, 0, forged))
    directory = shared / "cache"
    as_nobody("""
        import os, sys
        directory, dataset_id, forged = sys.argv[1:4]
        os.makedirs(os.path.join(directory, dataset_id, "train"))
        for parent, _, _ in os.walk(directory):
            os.chmod(parent, 0o777)
        with open(os.path.join(directory, dataset_id, "train", "0.image"), "wb") as out:
            out.write(open(forged, "rb").read())
        with open(os.path.join(directory, "l3-cache.json"), "w") as out:
            out.write('{"l3codec": "sample cache", "version": 2}')
    """, directory, local.dataset_id, shared / "forged")
    planted = sorted(str(p) for p in directory.rglob("*"))
    with pytest.raises(L3Error, match="uid 65534"):
        open_dataset(dataset, "train", cache=SampleCache(directory, "10MB")).read(0, "image")  # served the forgery
    assert sorted(str(p) for p in directory.rglob("*")) == planted  # root wrote nothing there


@needs_root
def test_symbolic_links_planted_in_another_users_directory_write_and_unlink_nothing(dataset, shared):
    """The attacks of #36.6: usage.<pid>.partial and .lock links to root's paths, and a split folder
    linked to a folder of root's files that LRU eviction would delete."""
    victim = shared / "victim"
    victim.write_bytes(b"precious")
    victim.chmod(0o600)
    victims = shared / "victims"
    victims.mkdir(mode=0o700)
    for n in range(5):
        (victims / f"{n}.image").write_bytes(b"root's file %d" % n)
        os.utime(victims / f"{n}.image", (946684800, 946684800))  # the oldest: evicted first
    lock_target = shared / "created-through-lock"
    local = open_dataset(dataset, "train")
    directory = shared / "cache"
    as_nobody("""
        import os, sys
        directory, dataset_id, pid, victim, victims, lock_target = sys.argv[1:7]
        os.makedirs(os.path.join(directory, dataset_id))
        os.chmod(directory, 0o777)
        os.chmod(os.path.join(directory, dataset_id), 0o777)
        os.symlink(victim, os.path.join(directory, f"usage.{pid}.partial"))
        os.symlink(lock_target, os.path.join(directory, ".lock"))
        os.symlink(victims, os.path.join(directory, dataset_id, "val"))
    """, directory, local.dataset_id, os.getpid(), victim, victims, lock_target)
    capacity = int(local.index["image_size"][:3].sum()) + 3 * 64  # full after three: eviction
    try:
        reader = open_dataset(dataset, "train", cache=SampleCache(directory, capacity, policy="lru"))
        for i in range(SAMPLES):
            assert reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
        refused = False
    except L3Error as error:
        refused = "uid 65534" in str(error)
    assert victim.read_bytes() == b"precious"
    assert not lock_target.exists()
    assert sorted(os.listdir(victims)) == [f"{n}.image" for n in range(5)]
    assert refused


@needs_root
def test_a_group_member_planting_links_in_a_shared_cache_redirects_nothing(dataset, shared):
    """In a cache shared with a group, members may write entries (the trust model says so), but a
    symbolic link one plants is never followed: not for reading, writing or eviction."""
    local = open_dataset(dataset, "train")
    directory = shared / "cache"
    capacity = int(local.index["image_size"][:4].sum()) + 4 * 64
    cache = SampleCache(directory, capacity, policy="lru", group=NOBODY)
    reader = open_dataset(dataset, "train", cache=cache)
    for i in range(3):
        reader.read(i, "image")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o2770 and directory.stat().st_gid == NOBODY
    victims = shared / "victims"
    victims.mkdir(mode=0o755)
    for n in range(5):
        (victims / f"{n}.image").write_bytes(b"root's file %d" % n)
        os.utime(victims / f"{n}.image", (946684800, 946684800))
    secret = shared / "secret"
    secret.write_bytes(b"root's secret")
    secret.chmod(0o644)
    as_nobody("""
        import os, sys
        directory, dataset_id, victims, secret = sys.argv[1:5]
        os.symlink(victims, os.path.join(directory, dataset_id, "val"))
        entry = os.path.join(directory, dataset_id, "train", "1.image")
        os.unlink(entry)
        os.symlink(secret, entry)
        os.unlink(os.path.join(directory, "usage"))
        os.symlink(secret, os.path.join(directory, "usage"))
    """, directory, local.dataset_id, victims, secret)
    for i in range(SAMPLES):  # inserts past the capacity: evictions
        assert reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    reader.cache.flush_counters()
    assert reader.cache.stats()["datasets"][local.dataset_id]["evicted"] > 0
    assert sorted(os.listdir(victims)) == [f"{n}.image" for n in range(5)]
    assert secret.read_bytes() == b"root's secret"


def posix_acl(*entries) -> bytes:
    """A system.posix_acl_* value: version 2, then (tag, perm, id) entries; id -1 for the owner's."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid & 0xFFFFFFFF)
                                           for tag, perm, uid in entries)


NOBODY_RWX_DEFAULT = posix_acl((0x01, 7, -1), (0x02, 7, NOBODY), (0x04, 7, -1), (0x10, 7, -1), (0x20, 7, -1))


@needs_root
def test_a_parents_default_acl_planted_by_another_user_lets_nobody_into_a_group_cache(dataset, shared):
    """nobody makes the cache's parent and gives it a default ACL naming nobody: what the cache then
    creates would inherit rwx for nobody while its mode bits still read 02770 (they show the ACL's
    mask). The cache strips inherited ACLs, so nobody can write no entry."""
    parent = shared / "team"
    as_nobody("""
        import os, sys
        os.mkdir(sys.argv[1], 0o777)
        os.chmod(sys.argv[1], 0o777)
        try:
            os.setxattr(sys.argv[1], "system.posix_acl_default", bytes.fromhex(sys.argv[2]))
        except OSError as error:
            print("no acl", error)
    """, parent, NOBODY_RWX_DEFAULT.hex())
    try:
        os.getxattr(parent, "system.posix_acl_default")
    except OSError:
        pytest.skip("this file system keeps no POSIX ACLs")
    local = open_dataset(dataset, "train")
    reader = open_dataset(dataset, "train", cache=SampleCache(parent / "cache", "10MB", group=0))
    reader.read(0, "image")
    split = parent / "cache" / local.dataset_id / "train"
    answer = as_nobody("""
        import sys
        try:
            open(sys.argv[1] + "/5.image", "wb").write(b"forged")
            print("written")
        except PermissionError:
            print("denied")
    """, split)
    assert answer.stdout.strip() == "denied"
    assert reader.read(5, "image").tobytes() == local.read(5, "image").tobytes()


def test_a_cache_directory_with_an_acl_naming_another_user_is_refused(dataset, tmp_path):
    """Mode 0750 with its mask r-x: no one else can write, yet nobody could read every entry."""
    directory = tmp_path / "cache"
    SampleCache(directory, "10MB")
    try:
        os.setxattr(directory, "system.posix_acl_access",
                    posix_acl((0x01, 7, -1), (0x02, 5, NOBODY), (0x04, 0, -1), (0x10, 5, -1), (0x20, 0, -1)))
    except OSError:
        pytest.skip("this file system keeps no POSIX ACLs")
    with pytest.raises(L3Error, match="access control list"):
        SampleCache(directory, "10MB")


def test_a_fifo_planted_as_an_entry_is_a_miss_not_a_hang(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "cache", "10MB"))
    reader.read(0, "image")
    entry = tmp_path / "cache" / local.dataset_id / "train" / "0.image"
    entry.unlink()
    os.mkfifo(entry, 0o600)

    class Hung(BaseException):  # not an OSError, which the cache would take for a miss
        pass

    def hung(*_):
        raise Hung("the cache's read of a FIFO entry blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        assert reader.read(0, "image").tobytes() == local.read(0, "image").tobytes()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- 7: who may read -------------------------------------------------------------------------------
@needs_root
def test_under_umask_022_another_user_cannot_read_cached_samples(dataset, shared):
    local = open_dataset(dataset, "train")
    directory = shared / "cache"
    previous = os.umask(0o022)
    try:
        reader = open_dataset(dataset, "train", cache=SampleCache(directory, "10MB"))
        for i in range(SAMPLES):
            reader.read(i, "image")
        reader.cache.flush_counters()
    finally:
        os.umask(previous)
    entry = directory / local.dataset_id / "train" / "0.image"
    assert entry.exists()
    modes = {path.relative_to(directory).as_posix(): stat.S_IMODE(path.lstat().st_mode)
             for path in [directory, *directory.rglob("*")]}
    assert {mode for name, mode in modes.items() if (directory / name).is_dir()} == {0o700}, modes
    assert {mode for name, mode in modes.items() if not (directory / name).is_dir()} == {0o600}, modes
    answer = as_nobody("""
        import sys
        try:
            open(sys.argv[1], "rb").read()
            print("read")
        except PermissionError:
            print("denied")
    """, entry)
    assert answer.stdout.strip() == "denied"


# -- 8: split and field ----------------------------------------------------------------------------
def test_an_entry_copied_to_another_split_or_field_is_refused(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "10MB")
    data = local.read(0, "image")
    size = len(data)
    assert cache.put(local.dataset_id, "train", 0, "image", data)
    folder = tmp_path / "c" / local.dataset_id
    (folder / "val").mkdir(mode=0o700)
    shutil.copyfile(folder / "train" / "0.image", folder / "val" / "0.image")
    shutil.copyfile(folder / "train" / "0.image", folder / "train" / "0.labelIds")
    assert cache.get(local.dataset_id, "val", 0, "image", size) is None
    assert cache.get(local.dataset_id, "train", 0, "labelIds", size) is None
    assert cache.get(local.dataset_id, "train", 0, "image", size).tobytes() == data.tobytes()
    cache.flush_counters()
    assert cache.stats()["datasets"][local.dataset_id]["corrupt"] == 2
    assert not (folder / "val" / "0.image").exists()  # removed, and read from the source again


def test_a_damaged_entry_replaced_by_another_process_before_its_removal_is_kept(dataset, tmp_path, monkeypatch):
    """Between reading a damaged entry and unlinking it, another process may have put a good one
    under the same name: the removal must not take that one (nor count its size twice)."""
    import l3codec.cache as cache_module

    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "10MB")
    data, other = local.read(0, "image"), SampleCache(tmp_path / "c", "10MB")
    size = len(data)
    assert cache.put(local.dataset_id, "train", 0, "image", data)
    entry = tmp_path / "c" / local.dataset_id / "train" / "0.image"
    good = entry.read_bytes()
    entry.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # damaged
    judge = cache_module._entry_data

    def judged_then_replaced(raw, *args):
        verdict = judge(raw, *args)
        entry.unlink()  # the other process: its insert of the same member lands now
        assert other.put(local.dataset_id, "train", 0, "image", data)
        return verdict

    monkeypatch.setattr(cache_module, "_entry_data", judged_then_replaced)
    assert cache.get(local.dataset_id, "train", 0, "image", size) is None  # the damaged one: a miss
    monkeypatch.setattr(cache_module, "_entry_data", judge)
    assert entry.read_bytes() == good  # the other process's entry stays
    assert cache.get(local.dataset_id, "train", 0, "image", size).tobytes() == data.tobytes()


def test_a_full_disk_skips_one_insert_and_later_ones_are_made(dataset, tmp_path, monkeypatch):
    import errno

    import l3codec.cache as cache_module

    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "10MB")
    write = cache_module._write_temp
    calls = []

    def full_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(*args)

    monkeypatch.setattr(cache_module, "_write_temp", full_once)
    with pytest.warns(RuntimeWarning, match="No space left on device; this access skipped"):
        assert not cache.put(local.dataset_id, "train", 0, "image", local.read(0, "image"))
    assert cache.put(local.dataset_id, "train", 1, "image", local.read(1, "image"))
    assert cache.put(local.dataset_id, "train", 0, "image", local.read(0, "image"))
    cache.flush_counters()
    counts = cache.stats()["datasets"][local.dataset_id]
    assert (counts["refused"], counts["inserts"]) == (1, 2)


# -- 9: bad reads never enter ------------------------------------------------------------------------
def test_a_source_read_that_fails_its_check_once_is_read_again_and_never_cached(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "c", "10MB"))
    real_read, reads = reader._read_source, []

    def corrupt_first_read(shard, offset, size, sample, member):  # one damaged response
        data = np.array(real_read(shard, offset, size, sample, member))
        if not reads:
            data[size // 2] ^= 0x10
        reads.append(sample)
        return data

    reader._read_source = corrupt_first_read
    assert reader.read(0, "image").tobytes() == local.read(0, "image").tobytes()
    assert reads == [0, 0]  # read again from the source
    reader._read_source = real_read
    reader.cache.flush_counters()
    facts = reader.cache.stats()["datasets"][local.dataset_id]
    assert facts["unverified"] == 1 and facts["inserts"] == 1
    assert reader.read(0, "image").tobytes() == local.read(0, "image").tobytes()  # the cache's whole bytes


def test_a_remote_member_damaged_at_its_source_is_not_cached_and_read_whole_once_repaired(dataset, tmp_path):
    pytest.importorskip("aiohttp")
    from l3codec.netsim import RangeServer

    copy = tmp_path / "l3"
    shutil.copytree(dataset, copy)
    local = open_dataset(copy, "train")
    row = local.index[0]
    shard = copy / "train" / shard_name(int(row["shard"]))
    offset = int(row["image_offset"]) + int(row["image_size"]) // 2
    whole = shard.read_bytes()
    good = local.read(0, "image").tobytes()
    damaged = bytearray(whole)
    damaged[offset] ^= 0x10
    server = RangeServer(copy)
    try:
        shard.write_bytes(bytes(damaged))
        remote = open_dataset(server.url, "train", cache=SampleCache(tmp_path / "c", "10MB"))
        assert remote.read(0, "image").tobytes() != good  # what the source said, not cached
        shard.write_bytes(whole)  # the source reads fine again
        assert remote.read(0, "image").tobytes() == good
        assert remote.read_many([(0, "image")])[0].tobytes() == good
    finally:
        server.close()


def test_a_full_disk_after_an_entry_is_linked_turns_inserts_off_and_leaves_the_recount_marker(dataset, tmp_path,
                                                                                            monkeypatch):
    """The entry is in place but the usage could not be written: later inserts would count from a
    wrong usage, so this process stops inserting and keeps its temporary, which makes the next
    process to open the cache after this one recount."""
    import errno

    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "10MB")

    def full(self, value):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SampleCache, "_set_usage", full)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        assert not cache.put(local.dataset_id, "train", 0, "image", local.read(0, "image"))
    monkeypatch.undo()
    folder = tmp_path / "c" / local.dataset_id
    assert (folder / "train" / "0.image").exists() and list(folder.glob(".tmp-*"))
    assert not cache.put(local.dataset_id, "train", 1, "image", local.read(1, "image"))


def test_files_of_a_process_in_another_pid_namespace_are_judged_by_age_not_by_a_pid_of_ours(dataset, tmp_path):
    """A cache folder shared by containers: a pid written by another pid namespace names nothing
    here (dead here, it may be writing there), so its temporaries and counters stay for a day."""
    import l3codec.cache as cache_module

    directory = tmp_path / "c"
    local = open_dataset(dataset, "train")
    cache = SampleCache(directory, "10MB")
    assert cache.put(local.dataset_id, "train", 0, "image", local.read(0, "image"))
    folder = directory / local.dataset_id
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    foreign = "0badf00d" if cache_module._namespace() != "0badf00d" else "0badf00e"
    writing = folder / f".tmp-{dead}-{foreign}-0123456789ab"  # its insert, being written there
    counting = folder / f"counters@{foreign}-{dead}.json"
    abandoned = folder / f".tmp-{dead}-{foreign}-ba9876543210"
    ours_dead = folder / f".tmp-{dead}-{cache_module._namespace()}-00aa00aa00aa"
    for path in (writing, counting, abandoned, ours_dead):
        path.write_bytes(b"{}")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(abandoned, (two_days_ago, two_days_ago))

    SampleCache(directory, "10MB")  # the next process to open the cache cleans up
    assert writing.exists() and counting.exists()
    assert not abandoned.exists() and not ours_dead.exists()
    assert not (folder / "counters.json").exists()  # the foreign counters not folded while it may run


def test_the_previous_release_reads_a_tagged_temporary_by_its_pid_and_skips_tagged_counters(dataset, tmp_path):
    """A cache shared with processes of the previous release (a rolling upgrade): they read the pid
    of .tmp-<pid>-... as the second field and fold counters-<pid>.json; a tagged name must give
    them this live process's pid, and tagged counters must not match their pattern."""
    import l3codec.cache as cache_module

    local = open_dataset(dataset, "train")
    cache = SampleCache(tmp_path / "c", "10MB")
    folder = cache._dir(local.dataset_id)
    temp = cache_module._write_temp(folder, b"x", cache._layout)
    assert int(temp.split("-")[1]) == os.getpid()  # the previous release: alive, kept
    cache._count(local.dataset_id, "hits")
    cache.flush_counters()
    names = os.listdir(tmp_path / "c" / local.dataset_id)
    assert [n for n in names if n.startswith("counters")] and not [n for n in names if n.startswith("counters-")]


# -- 10: what killed jobs leave -------------------------------------------------------------------
KILLED_INSIDE_USAGE = textwrap.dedent("""
    import os, sys, time
    from l3codec.cache import SampleCache
    from l3codec.dataset import open_dataset

    root, directory, marker = sys.argv[1:4]
    reader = open_dataset(root, "train", cache=SampleCache(directory, "10MB"))
    real_replace = os.replace
    def replace_then_wait(source, target, *args, **kwargs):
        if os.path.basename(str(target)) == "usage":  # the entry linked, its bytes not yet counted
            open(marker, "w").close()
            time.sleep(600)
        return real_replace(source, target, *args, **kwargs)
    os.replace = replace_then_wait
    reader.read(len(reader) - 1, "image")
""")

READ_FLUSH_AND_WAIT = textwrap.dedent("""
    import os, sys, time
    from l3codec.cache import SampleCache
    from l3codec.dataset import open_dataset

    root, directory, go = sys.argv[1:4]
    reader = open_dataset(root, "train", cache=SampleCache(directory, "10MB"))
    for i in range(4):
        reader.read(i, "image")
    reader.cache.flush_counters()
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.02)
""")


def wait_for(condition, process_list, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert all(p.poll() is None for p in process_list) and time.monotonic() < deadline
        time.sleep(0.02)


def test_opening_the_cache_cleans_what_sigkilled_inserts_and_ended_processes_left(dataset, tmp_path):
    """Three readers flush their counters and end; a job is SIGKILLed after linking an entry and
    before counting it. A process that then only looks samples up must find all of it cleaned."""
    directory, marker, go = tmp_path / "c", tmp_path / "inside", tmp_path / "go"
    local = open_dataset(dataset, "train")
    folder = directory / local.dataset_id
    SampleCache(directory, "10MB")
    readers = [subprocess.Popen([sys.executable, "-c", READ_FLUSH_AND_WAIT, str(dataset), str(directory), str(go)])
               for _ in range(3)]
    wait_for(lambda: len(list(folder.glob("counters@*.json"))) == 3, readers)
    killed = subprocess.Popen([sys.executable, "-c", KILLED_INSIDE_USAGE, str(dataset), str(directory), str(marker)])
    wait_for(marker.exists, [killed])
    go.touch()
    assert [reader.wait(timeout=60) for reader in readers] == [0, 0, 0]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    entries_bytes = sum(p.stat().st_size for p in (folder / "train").iterdir())
    leftovers = [p for p in [*directory.iterdir(), *folder.iterdir()] if p.name.startswith(".tmp-")
                 or p.name.endswith(".partial")]
    assert leftovers and len(list(folder.glob("counters@*.json"))) == 3
    assert int((directory / "usage").read_text()) != entries_bytes  # drifted: the last entry not counted

    reader = open_dataset(dataset, "train", cache=SampleCache(directory, "10MB"))
    assert reader.read(0, "image").tobytes() == local.read(0, "image").tobytes()  # a lookup only: no insert

    assert not [p for p in [*directory.iterdir(), *folder.iterdir()] if p.name.startswith(".tmp-")
                or p.name.endswith(".partial")]
    assert int((directory / "usage").read_text()) == entries_bytes
    assert not list(folder.glob("counters@*.json"))
    folded = json.loads((folder / "counters.json").read_text())
    assert folded["hits"] + folded["misses"] == 3 * 4 and folded["inserts"] == 4
    facts = cache_report(directory)["datasets"][local.dataset_id]
    assert facts["hits"] + facts["misses"] == 12 and facts["entries"] == 5


# -- 18: a full cache refuses before writing -------------------------------------------------------
HOLD_THE_LOCKS = textwrap.dedent("""
    import fcntl, os, sys, time
    directory, ready = sys.argv[1:3]
    held = []
    for path in (directory, os.path.join(directory, ".lock")):  # this cache's lock, and the old one's
        fd = os.open(path, os.O_RDONLY if os.path.isdir(path) else os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    open(ready, "w").close()
    time.sleep(600)
""")

READ_THE_REST = textwrap.dedent("""
    import sys
    from l3codec.cache import SampleCache
    from l3codec.dataset import open_dataset

    root, directory, capacity, first = sys.argv[1:5]
    reader = open_dataset(root, "train", cache=SampleCache(directory, int(capacity)))
    for i in range(int(first), reader.__len__()):
        reader.read(i, "image")
""")


@pytest.mark.processes
def test_a_full_cache_refuses_an_insert_before_writing_or_locking(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    directory = tmp_path / "c"
    capacity = int(local.index["image_size"][:4].sum()) + 4 * 64
    reader = open_dataset(dataset, "train", cache=SampleCache(directory, capacity))
    for i in range(4):
        reader.read(i, "image")
    folder = directory / local.dataset_id
    before = folder.stat().st_mtime_ns, sorted(os.listdir(folder))
    ready = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCKS, str(directory), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        # the rest of the epoch with the lock held elsewhere: refused at once, without waiting for it
        done = subprocess.run([sys.executable, "-c", READ_THE_REST, str(dataset), str(directory), str(capacity), "4"],
                              check=False, timeout=20, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    finally:
        holder.kill()
        holder.wait()
    assert (folder.stat().st_mtime_ns, sorted(os.listdir(folder))) == before  # no temporary made and removed


# -- 19: LRU eviction ----------------------------------------------------------------------------------
def test_lru_eviction_does_not_scan_every_entry_on_every_insert(dataset, tmp_path, monkeypatch):
    local = open_dataset(dataset, "train")
    sizes = local.index["image_size"].astype(np.int64) + 64
    capacity = int(sizes[:SAMPLES // 2].sum())
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "c", capacity, policy="lru"))
    for i in range(SAMPLES // 2):
        reader.read(i, "image")
    real_scandir, scans = os.scandir, []

    def counting_scandir(*args, **kwargs):
        scans.append(args)
        return real_scandir(*args, **kwargs)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    for i in range(SAMPLES // 2, SAMPLES):  # each insert evicts
        assert reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    monkeypatch.undo()
    reader.cache.flush_counters()
    facts = reader.cache.stats()["datasets"][local.dataset_id]
    assert facts["evicted"] >= SAMPLES // 2 - 1 and facts["bytes"] <= capacity
    assert len(scans) <= 6, f"{len(scans)} folder scans for {SAMPLES // 2} evicting inserts"
    assert (tmp_path / "c" / local.dataset_id / "train" / f"{SAMPLES - 1}.image").exists()  # the newest stays


# -- #37.7: `l3 cache` -----------------------------------------------------------------------------
def test_l3_cache_refuses_a_directory_that_is_not_a_cache_and_writes_nothing(tmp_path, capsys):
    ordinary = tmp_path / "photos"
    ordinary.mkdir()
    (ordinary / "holiday.jpg").write_bytes(b"jpeg")
    for argv in (["cache", str(ordinary)], ["cache", str(ordinary), "--clear"], ["cache", str(tmp_path / "none")]):
        assert l3(argv) != 0
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and "not" in error and "cache" in error
        assert sorted(os.listdir(ordinary)) == ["holiday.jpg"]
    assert not (tmp_path / "none").exists()


def test_l3_cache_counts_entries_not_samples_and_labels_its_hit_rate(dataset, tmp_path, capsys):
    local = open_dataset(dataset, "train")
    reader = open_dataset(dataset, "train", cache=SampleCache(tmp_path / "c", "10MB"))
    for i in range(3):
        reader.read(i, "image")
        reader.read(i, "image")
    reader.cache.flush_counters()
    assert l3(["cache", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert f"{local.dataset_id}" in out and "3 entries" in out and "samples" not in out.replace("per sample", "")
    assert "all epochs" in out and "3 hits / 6 lookups (50%)" in out


# -- the guarantee kept: SIGKILLs at any moment of inserting damage nothing ------------------------
INSERT_FOREVER = textwrap.dedent("""
    import sys
    from l3codec.cache import SampleCache
    from l3codec.dataset import open_dataset

    root, directory, capacity, started = sys.argv[1:5]
    reader = open_dataset(root, "train", cache=SampleCache(directory, int(capacity), policy="lru"))
    open(started, "w").close()
    while True:  # LRU at a third of the dataset: every read inserts and evicts
        for i in range(len(reader)):
            reader.read(i, "image")
""")


@pytest.mark.processes
def test_ten_sigkills_at_random_moments_of_inserting_leave_every_entry_whole_and_the_usage_exact(dataset, tmp_path):
    local = open_dataset(dataset, "train")
    directory = tmp_path / "c"
    capacity = int(local.index["image_size"].sum()) // 3
    rng = np.random.default_rng(7)
    for kill in range(10):
        started = tmp_path / f"started-{kill}"
        job = subprocess.Popen([sys.executable, "-c", INSERT_FOREVER, str(dataset), str(directory), str(capacity),
                                str(started)])
        wait_for(started.exists, [job])
        time.sleep(rng.uniform(0.0, 0.3))
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
    reader = open_dataset(dataset, "train", cache=SampleCache(directory, capacity, policy="lru"))
    for i in range(SAMPLES):
        assert reader.cache.get(local.dataset_id, "train", i, "image", int(local.index["image_size"][i])) is None \
            or reader.read(i, "image").tobytes() == local.read(i, "image").tobytes()
    reader.cache.flush_counters()
    report = cache_report(directory)
    assert report["datasets"][local.dataset_id]["corrupt"] == 0
    assert int((directory / "usage").read_text()) == report["bytes"] <= capacity
    assert not [p for p in directory.rglob(".tmp-*")]
