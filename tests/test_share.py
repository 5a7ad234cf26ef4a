"""One producer, several trainers (l3codec.share) with real processes: every consumer of an
epoch gets its batches once in the producer's order, one consumer killed with SIGKILL mid-epoch
stalls nobody, one joining late starts with the next epoch, and the producer holds at most
`slots` batches."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")
from l3codec.converters import convert  # noqa: E402
from l3codec.loader import Decode, L3Dataset, Loader, RandomCrop  # noqa: E402

from dataset_trees import folder_tree  # noqa: E402

pytestmark = pytest.mark.processes

EPOCHS, BATCH, SLOTS = 2, 2, 2

SERVER = textwrap.dedent("""
    import json, sys
    from l3codec.loader import Decode, L3Dataset, Loader, RandomCrop
    from l3codec.share import BatchServer
    root, path, report = sys.argv[1:4]
    loader = Loader(L3Dataset(root), %d, crop=RandomCrop(16, flip=0.5), seed=3,
                    decode=Decode("cpu", device="cpu"))
    server = BatchServer(loader, path, slots=%d, min_consumers=2)
    server.run(epochs=%d)
    json.dump({"most_outstanding": server.most_outstanding, "served": server.served}, open(report, "w"))
""" % (BATCH, SLOTS, EPOCHS))

CONSUMER = textwrap.dedent("""
    import hashlib, json, os, signal, sys, time
    from l3codec.share import SharedLoader
    path, join, out, die_after, epochs, start = sys.argv[1:4] + [int(v) for v in sys.argv[4:6]] + sys.argv[6:7]
    while start != "-" and not os.path.exists(start):  # started early (imports take seconds), joins on cue
        time.sleep(0.01)
    shared = SharedLoader(path, join=join)
    taken = 0
    with open(out, "w") as log:
        for _ in range(epochs):
            for batch in shared:
                images = batch["image"] if isinstance(batch["image"], list) else [batch["image"]]
                digest = hashlib.sha256(b"".join(i.contiguous().numpy().tobytes() for i in images)).hexdigest()
                log.write(json.dumps({"epoch": shared.epoch, "keys": batch["key"], "image": digest}) + "\\n")
                log.flush()
                taken += 1
                if taken == die_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(0.2)  # a training step
""")


def record(batch, epoch):
    images = batch["image"] if isinstance(batch["image"], list) else [batch["image"]]  # grey and RGB: a list
    digest = hashlib.sha256(b"".join(i.contiguous().numpy().tobytes() for i in images)).hexdigest()
    return {"epoch": epoch, "keys": batch["key"], "image": digest}


def lines(path):
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def test_consumers_get_every_batch_once_in_order_and_one_crash_stalls_nobody(tmp_path):
    folder_tree(tmp_path / "src", per_class=5)
    convert("folder", tmp_path / "src", tmp_path / "l3", workers=0, progress=False)
    direct = Loader(L3Dataset(tmp_path / "l3"), BATCH, crop=RandomCrop(16, flip=0.5), seed=3,
                    decode=Decode("cpu", device="cpu"))
    expected = []
    for epoch in range(EPOCHS):
        direct.set_epoch(epoch)
        expected += [record(batch, epoch) for batch in direct]

    path = str(tmp_path / "share.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path / "l3"), path, str(tmp_path / "report")])
    processes = [server]
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)

        def consumer(name, join, die_after, epochs, start="-"):
            processes.append(subprocess.Popen([sys.executable, "-c", CONSUMER, path, join, str(tmp_path / name),
                                               str(die_after), str(epochs), start]))
            return processes[-1]

        steady = consumer("steady", "epoch", 0, EPOCHS)
        crashing = consumer("crashing", "epoch", 2, EPOCHS)
        late = consumer("late", "epoch", 0, 1, start=str(tmp_path / "join now"))
        while len(lines(tmp_path / "steady")) < 1:  # epoch 0 under way
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        (tmp_path / "join now").touch()
        assert steady.wait(timeout=120) == 0 and late.wait(timeout=120) == 0
        assert crashing.wait(timeout=120) == -9
        assert server.wait(timeout=60) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert lines(tmp_path / "steady") == expected
    assert lines(tmp_path / "crashing") == expected[:2]
    assert lines(tmp_path / "late") == [r for r in expected if r["epoch"] == 1]
    report = json.load(open(tmp_path / "report"))
    assert report["served"] == len(expected) and 1 <= report["most_outstanding"] <= SLOTS
