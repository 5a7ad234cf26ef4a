"""l3convert's trust features: pool and Dask runs, resume after SIGKILL, verify, bad sources, full disks,
and shards read unchanged by tar, webdataset and DALI."""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

import l3codec
from l3codec import first_use
from l3codec.converters import ConvertError, convert
from l3codec.converters.cli import STOPPED
from l3codec.converters.cli import main as l3convert
from l3codec.converters.inspect import inspect
from l3codec.dataset import open_dataset, read_manifest

from dataset_trees import folder_tree, save_png


def tree_files(root):
    """{relative path: sha256} of every file under root."""
    digests = {}
    for parent, _, files in os.walk(root):
        for name in files:
            path = os.path.join(parent, name)
            digests[os.path.relpath(path, root)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return digests


def assert_matches_source(dst, expected, split="train"):
    reader = open_dataset(dst, split)
    assert sorted(reader.key(i) for i in range(len(reader))) == sorted(expected)
    for i in range(len(reader)):
        label, pixels = expected[reader.key(i)]
        assert reader.label(i) == label
        assert np.array_equal(l3codec.decode(reader.read(i)), pixels)


@pytest.mark.processes
def test_process_pool_gives_the_same_bytes_as_in_process(tmp_path):
    expected = folder_tree(tmp_path / "src", per_class=4)
    convert("folder", tmp_path / "src", tmp_path / "inline", workers=0, shard_size="2kB", progress=False)
    summary = convert("folder", tmp_path / "src", tmp_path / "pool", workers=2, shard_size="2kB",
                      verify=True, progress=False)
    assert summary.samples == 8 and summary.shards > 2 and summary.verified
    assert tree_files(tmp_path / "pool") == tree_files(tmp_path / "inline")
    assert_matches_source(tmp_path / "pool", expected)


@pytest.mark.processes
def test_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    expected = folder_tree(tmp_path / "src")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env={"NUMBA_NUM_THREADS": "1"}) as cluster:
        summary = convert("folder", tmp_path / "src", tmp_path / "dst", scheduler=cluster.scheduler_address,
                          shard_size="2kB", progress=False)
    assert summary.samples == len(expected) and summary.shards > 1
    assert_matches_source(tmp_path / "dst", expected)
    convert("folder", tmp_path / "src", tmp_path / "inline", workers=0, shard_size="2kB", progress=False)
    assert tree_files(tmp_path / "dst") == tree_files(tmp_path / "inline")


def test_resume_after_sigkill_is_identical_to_an_uninterrupted_run(tmp_path):
    expected = folder_tree(tmp_path / "src", per_class=5)
    convert("folder", tmp_path / "src", tmp_path / "whole", workers=0, shard_size="1", progress=False)
    # The killed run blocks opening shard 6's temporary file (a FIFO nobody reads): a deterministic
    # point partway, with shards 0-5 finished.
    dst = tmp_path / "killed"
    (dst / "train").mkdir(parents=True)
    blocker = dst / "train" / "shard-000006.tar.tmp"
    os.mkfifo(blocker)
    command = [sys.executable, "-m", "l3codec.converters.cli", "folder", str(tmp_path / "src"), str(dst),
               "--workers", "0", "--shard-size", "1", "--resume", "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    record = dst / ".l3convert" / "train" / "shard-000005.json"
    deadline = time.monotonic() + 120
    while not record.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert record.exists() and process.poll() is None, process.stderr.read() if process.poll() else "timeout"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (dst / "manifest.json").exists()
    # what a kill mid-write leaves: a half-written temporary shard
    blocker.unlink()
    blocker.write_bytes(b"half a shard")
    finished_before = {name: os.stat(dst / "train" / name).st_mtime_ns for name in os.listdir(dst / "train")
                       if name.endswith(".tar")}
    assert len(finished_before) == 6
    with pytest.raises(ConvertError, match="interrupted conversion"):
        convert("folder", tmp_path / "src", dst, workers=0, shard_size="1", progress=False)
    summary = convert("folder", tmp_path / "src", dst, workers=0, shard_size="1", resume=True, progress=False)
    assert summary.shards_reused == 6 and summary.samples == 10
    assert summary.converted_samples == 4 and "images/s" in str(summary)  # rates count this run's work only
    for name, mtime in finished_before.items():  # finished shards were not redone
        assert os.stat(dst / "train" / name).st_mtime_ns == mtime
    assert tree_files(dst) == tree_files(tmp_path / "whole")
    assert_matches_source(dst, expected)
    again = convert("folder", tmp_path / "src", dst, workers=0, shard_size="1", resume=True, progress=False)
    assert again.shards_reused == again.shards == 10 and tree_files(dst) == tree_files(tmp_path / "whole")
    assert again.converted_samples == 0 and "nothing left to convert" in str(again)
    with pytest.raises(ConvertError, match="finished conversion of other sources or options"):
        convert("folder", tmp_path / "src", dst, workers=0, mode="fast", resume=True, progress=False)
    with pytest.raises(ConvertError, match="already holds a converted dataset"):
        convert("folder", tmp_path / "src", dst, workers=0, shard_size="1", progress=False)


def test_resume_refuses_changed_sources(tmp_path):
    folder_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    (dst / ".l3convert").mkdir(parents=True)
    (dst / ".l3convert" / "plan.json").write_text(json.dumps({"fingerprint": "another plan"}))
    with pytest.raises(ConvertError, match="changed since the interrupted conversion"):
        convert("folder", tmp_path / "src", dst, workers=0, resume=True, progress=False)


@pytest.mark.parametrize("workers", ["0", "2"])  # the pool's errors name the source themselves
def test_corrupt_truncated_and_unreadable_sources_are_reported_and_skipped(tmp_path, capsys, workers):
    expected = folder_tree(tmp_path / "src", per_class=3)
    cat = tmp_path / "src" / "cat"
    png = (cat / "0.png").read_bytes()
    jpeg = (cat / "2.jpg").read_bytes()
    (cat / "truncated.png").write_bytes(png[: len(png) // 2])
    (cat / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (cat / "garbage.png").write_bytes(b"not an image at all" * 10)
    os.symlink(tmp_path / "nowhere.png", cat / "dangling.png")
    code = l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--workers", workers, "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    failures = read_manifest(tmp_path / "dst")["failures"]
    # truncated.jpg sorts first and keeps the key; truncated.png gets a suffix
    assert {failure["key"]: os.path.basename(failure["source"]) for failure in failures} == {
        "cat/truncated": "truncated.jpg", "cat/truncated~1": "truncated.png",
        "cat/garbage": "garbage.png", "cat/dangling": "dangling.png"}
    assert len(failures) == 4 and all(failure["kind"] == "source" for failure in failures)
    assert any("unreadable" in failure["error"] for failure in failures)
    assert "skipped train/cat/garbage" in printed
    for failure in failures:  # each skip names its source, once
        [line] = [line for line in printed.splitlines() if f"skipped train/{failure['key']}:" in line]
        assert line.count(failure["source"]) == 1, line
    assert printed.splitlines()[1].split()[:3] == ["train", str(len(expected)), "4"]
    assert_matches_source(tmp_path / "dst", expected)


def test_full_disk_is_a_clear_error(tmp_path):
    folder_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    (dst / "train").mkdir(parents=True)
    # the first shard's temporary file is /dev/full: every write to it fails with ENOSPC
    os.symlink("/dev/full", dst / "train" / "shard-000000.tar.tmp")
    with pytest.raises(ConvertError, match="the disk is full.*--resume"):
        convert("folder", tmp_path / "src", dst, workers=0, resume=True, progress=False)


def test_unwritable_destination_is_a_clear_error(tmp_path):
    folder_tree(tmp_path / "src")
    target = "/sys/l3convert-test"  # sysfs: nobody, root included, creates directories there
    try:
        os.mkdir(target)
    except OSError as error:
        expected = {errno.EROFS: "read-only filesystem", errno.EPERM: "permission denied",
                    errno.EACCES: "permission denied"}.get(error.errno)
    else:
        os.rmdir(target)
        expected = None
    if expected is None:
        pytest.skip("/sys is writable or absent here")
    with pytest.raises(ConvertError, match=f"cannot write the dataset to {target}: {expected}"):
        convert("folder", tmp_path / "src", target, workers=0, progress=False)


def test_wrong_layout_on_the_command_line(tmp_path, capsys):
    folder_tree(tmp_path / "src")
    assert l3convert(["cityscapes", str(tmp_path / "src"), str(tmp_path / "dst"), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "expected a Cityscapes tree" in error and "leftImg8bit" in error and "found cat/, dog/" in error


def test_shards_read_unchanged_by_tar_and_webdataset(tmp_path):
    wds = pytest.importorskip("webdataset")
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, shard_size="2kB", progress=False)
    reader = open_dataset(tmp_path / "dst")
    shards = sorted(str(path) for path in (tmp_path / "dst" / "train").glob("*.tar"))
    listed = subprocess.run(["tar", "tf", shards[0]], capture_output=True, text=True, check=True).stdout.split()
    assert listed[:2] == [f"{reader.key(0)}.l3", f"{reader.key(0)}.cls"]
    samples = list(wds.WebDataset(shards, shardshuffle=False, empty_check=False))
    assert [sample["__key__"] for sample in samples] == [reader.key(i) for i in range(len(reader))]
    for i, sample in enumerate(samples):
        assert sample["l3"] == reader.read(i).tobytes()
        assert int(sample["cls"]) == reader.label(i)
    with tarfile.open(shards[-1]) as tar:
        assert all(member.isfile() for member in tar.getmembers())


def test_dali_webdataset_reader_returns_our_bytes_from_the_idx_files(tmp_path):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, shard_size="2kB", progress=False)
    reader = open_dataset(tmp_path / "dst")
    split = tmp_path / "dst" / "train"
    tars = sorted(str(path) for path in split.glob("*.tar"))
    indexes = [path[:-4] + ".idx" for path in tars]

    @pipeline_def(batch_size=len(reader), num_threads=1, device_id=None)
    def pipeline():
        images, labels = fn.readers.webdataset(paths=tars, index_paths=indexes, ext=["l3", "cls"],
                                               missing_component_behavior="error", random_shuffle=False)
        return images, labels

    dali = pipeline()
    dali.build()
    images, labels = dali.run()
    for i in range(len(reader)):
        assert np.array(images.at(i)).tobytes() == reader.read(i).tobytes()
        assert int(np.array(labels.at(i)).tobytes()) == reader.label(i)


def test_inspect_says_how_many_shapes_it_leaves_out(tmp_path, capsys):
    for n in range(7):  # seven sizes: the report shows the five commonest and counts the rest
        save_png(os.path.join(tmp_path, "src", "cls", f"{n}.png"), np.full((4 + n, 5, 3), n, np.uint8))
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    assert inspect(tmp_path / "dst")["splits"]["train"]["distinct_shapes"] == 7
    assert l3convert(["inspect", str(tmp_path / "dst")]) == 0
    assert "... (7 distinct shapes)" in capsys.readouterr().out


def test_inspect_checks_checksums_and_decodes_deeply(tmp_path, capsys):
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    report = inspect(tmp_path / "dst", deep=True)
    assert report["ok"] and report["splits"]["train"]["decoded"] == 6
    assert report["splits"]["train"]["per_class"] == {"cat": 3, "dog": 3}
    assert l3convert(["inspect", str(tmp_path / "dst")]) == 0
    assert "all shard checksums match" in capsys.readouterr().out
    reader = open_dataset(tmp_path / "dst")
    shard = tmp_path / "dst" / "train" / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    data[int(reader.index["image_offset"][1]) + 60] ^= 0xFF  # a payload byte of sample 1
    shard.write_bytes(bytes(data))
    report = inspect(tmp_path / "dst", deep=True)
    assert not report["ok"]
    assert any("checksum mismatch" in problem for problem in report["problems"])
    assert any(reader.key(1) in problem for problem in report["problems"])
    assert l3convert(["inspect", str(tmp_path / "dst")]) == 1


def _blocked_pool_run(tmp_path):
    """A 2-worker l3convert child (SIGINT at its default whatever this process has) with 9 shards
    finished and one worker blocked on shard 6 until stopped; (process, dst, expected)."""
    expected = folder_tree(tmp_path / "src", per_class=5)
    dst = tmp_path / "dst"
    (dst / "train").mkdir(parents=True)
    blocker = dst / "train" / "shard-000006.tar.tmp"
    os.mkfifo(blocker)  # one worker blocks on shard 6 until interrupted
    command = [sys.executable, "-m", "l3codec.converters.cli", "folder", str(tmp_path / "src"), str(dst),
               "--workers", "2", "--shard-size", "1", "--resume", "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    records = dst / ".l3convert" / "train"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and not (
            records.is_dir() and len(list(records.glob("*.json"))) == 9):
        time.sleep(0.05)
    return process, dst, expected


def _descendants(pid):
    import psutil

    return psutil.Process(pid).children(recursive=True)


def _alive(processes):
    import psutil

    return [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.processes
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_a_pool_run_cleanly_and_resume_finishes_it(tmp_path, stop):
    process, dst, expected = _blocked_pool_run(tmp_path)
    try:
        assert process.poll() is None, process.stderr.read()
        helpers = _descendants(process.pid)
        if stop == "ctrl-c":
            os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
        else:
            process.send_signal(signal.SIGTERM)  # what schedulers and `docker stop` send: the coordinator alone
        _, error = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == (130 if stop == "ctrl-c" else 143)
    # the one line and nothing else: no traceback from a worker or the forkserver, no resource
    # tracker warning of leaked semaphores (which the workers' Numba made) after it
    compiling = first_use.NOTICE.split("{what}")[0]
    lines = [line for line in error.decode().splitlines() if not line.startswith(compiling)]
    assert lines == [STOPPED.format(how="interrupted" if stop == "ctrl-c" else "terminated")], error.decode()
    deadline = time.monotonic() + 15
    while _alive(helpers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(helpers)
    assert not (dst / "manifest.json").exists()
    (dst / "train" / "shard-000006.tar.tmp").unlink()
    summary = convert("folder", tmp_path / "src", dst, workers=0, shard_size="1", resume=True, progress=False)
    assert summary.shards_reused == 9 and summary.samples == 10
    assert_matches_source(dst, expected)


def test_a_stop_signal_while_the_pool_starts_a_worker_arrives_after_it():
    """Ctrl-C during a pool's submit waits for its end: a worker forked but not yet recorded by the
    pool would escape the shutdown (and print a traceback on the queues removed under it)."""
    from l3codec.converters.executors import _stop_signals_held

    finished = False
    with pytest.raises(KeyboardInterrupt):
        with _stop_signals_held():
            signal.raise_signal(signal.SIGINT)
            finished = True
    assert finished
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_and_sigterm_held_together_deliver_sigterm_and_both_handlers_come_back():
    from l3codec.converters.executors import _stop_signals_held

    class Terminated(Exception):
        pass

    def terminated(number, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        with pytest.raises(Terminated):
            with _stop_signals_held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is terminated
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.processes
def test_a_coordinator_killed_outright_leaves_no_process_behind(tmp_path):
    """SIGKILL gives the coordinator no chance to stop anything: the pool's processes (children of
    the forkserver) watch it and exit; the forkserver and the resource tracker follow."""
    process, _, _ = _blocked_pool_run(tmp_path)
    try:
        assert process.poll() is None, process.stderr.read()
        helpers = _descendants(process.pid)
        assert len(helpers) >= 3  # the forkserver, the resource tracker, the workers
        process.kill()
        process.wait(timeout=30)  # not communicate: the survivors would hold its pipes open
        deadline = time.monotonic() + 20
        while _alive(helpers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(helpers)
    finally:
        for pid in _alive(helpers if "helpers" in locals() else []):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.processes
def test_a_second_run_into_the_same_destination_is_refused_naming_the_first(tmp_path, capsys):
    process, dst, _ = _blocked_pool_run(tmp_path)
    try:
        assert process.poll() is None, process.stderr.read()
        code = l3convert(["folder", str(tmp_path / "src"), str(dst), "--workers", "0", "--shard-size", "1",
                          "--resume", "--no-progress"])
        assert code == 2
        assert f"another l3convert run (pid {process.pid}) is writing to" in capsys.readouterr().err
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.processes
def test_an_unreachable_scheduler_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import socket

    from l3codec.converters import executors

    folder_tree(tmp_path / "src")
    monkeypatch.setattr(executors, "SCHEDULER_CONNECT_TIMEOUT_S", 2.0)
    with socket.socket() as unused:  # bound, never listening: held so that nothing else takes the port
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        code = l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--scheduler",
                          f"tcp://127.0.0.1:{port}", "--no-progress"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1, error
    assert f"no Dask scheduler answered at tcp://127.0.0.1:{port}" in error
    assert not (tmp_path / "dst").exists()


def test_a_destination_that_is_a_file_is_refused_without_advice_to_resume(tmp_path, capsys):
    folder_tree(tmp_path / "src")
    (tmp_path / "dst").write_text("not a directory")
    code = l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--workers", "0", "--no-progress"])
    error = capsys.readouterr().err
    assert code == 2 and "exists and is not a directory; nothing was written" in error
    assert "--resume" not in error


def test_inspect_into_a_closed_pipe_prints_no_traceback(tmp_path):
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    child = subprocess.Popen([sys.executable, "-m", "l3codec.converters.cli", "inspect", str(tmp_path / "dst")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # as `| head` does once it has read enough: here before the first write
    error = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141 and "Traceback" not in error and "BrokenPipe" not in error, error


def test_verify_reports_a_sample_whose_l3_pixels_differ_and_writes_nothing_for_it(tmp_path, monkeypatch, capsys):
    expected = folder_tree(tmp_path / "src")
    real_decode = l3codec.decode
    target = None

    def faulty_decode(data, **options):  # stands in for a codec fault on one sample
        nonlocal target
        pixels = real_decode(data, **options)
        if target is None:
            target = True
            pixels = pixels.copy()
            pixels.flat[7] ^= 1
        return pixels

    monkeypatch.setattr(l3codec, "decode", faulty_decode)
    code = l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--workers", "0", "--verify",
                      "--no-progress"])
    monkeypatch.setattr(l3codec, "decode", real_decode)
    assert code == 1
    [failure] = read_manifest(tmp_path / "dst")["failures"]
    assert failure["kind"] == "verify" and failure["key"] == "cat/0" and "differ" in failure["error"]
    assert "skipped train/cat/0" in capsys.readouterr().out
    del expected["cat/0"]
    assert_matches_source(tmp_path / "dst", expected)
