"""Processes killed outright (SIGKILL). A killed training process leaves no loader worker behind:
the workers are a forkserver's children, so torch's check of their parent cannot see it die; they
watch it. Killed workers are noticed by the training process within seconds, not at the timeout."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")
from l3codec.converters import convert  # noqa: E402

from dataset_trees import folder_tree  # noqa: E402

pytestmark = pytest.mark.processes

TRAINER = textwrap.dedent("""
    import sys, time
    from l3codec.loader import Decode, L3Dataset, Loader
    if __name__ == "__main__":
        loader = Loader(L3Dataset(sys.argv[1]), 2, decode=Decode("cpu", device="cpu"), workers=2)
        batches = iter(loader)
        next(batches), next(batches)  # the first from the main process, the second from the workers
        print("ready", flush=True)
        time.sleep(600)
""")


def test_workers_of_a_killed_training_process_exit(tmp_path):
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "l3", workers=0, progress=False)
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path / "l3")], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert trainer.stdout.readline().strip() == "ready"
        descendants = psutil.Process(trainer.pid).children(recursive=True)
        assert len(descendants) >= 3  # the forkserver and two workers (at least)
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                                  for p in descendants):
            time.sleep(0.2)
        left = [p.pid for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"processes left behind: {left}"
    finally:
        for process in psutil.Process().children(recursive=True):
            if process.pid != os.getpid():
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass


KILLED_WORKERS = textwrap.dedent("""
    import os, signal, sys, time
    import psutil, torch
    from l3codec.loader import Decode, L3Dataset, Loader, WorkerExited

    def images(loader):
        return [batch["image"].clone() for batch in loader]

    if __name__ == "__main__":
        dataset = L3Dataset(sys.argv[1], fields=("image",))
        loader = Loader(dataset, 1, decode=Decode("cpu", device="cpu"), workers=2, seed=5)
        batches = iter(loader)
        next(batches), next(batches)  # the first from the main process, the second from the workers
        # the workers are the forkserver's children
        workers = [w for child in psutil.Process().children() for w in child.children()]
        for worker in workers:
            os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        try:
            received = 2 + sum(1 for _ in batches)
            print("no error after", received, "of", len(loader), "batches", flush=True)
        except WorkerExited as error:
            print(f"exited after {time.monotonic() - killed:.1f} s: {error}", flush=True)
        loader.set_epoch(1)  # the next epoch starts new workers and yields every batch
        alone = Loader(dataset, 1, decode=Decode("cpu", device="cpu"), seed=5)
        alone.set_epoch(1)
        got, expected = images(loader), images(alone)
        assert len(got) == len(expected) == len(loader), (len(got), len(expected))
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
        print("next epoch:", len(got), "batches, as without workers", flush=True)
""")


def test_killed_workers_raise_at_once_and_the_next_epoch_starts_new_ones(tmp_path):
    """Every worker killed after the first batch: the loader raises WorkerExited within a poll
    (5 s), not after its 600 s timeout, and the next epoch yields every batch, equal to a loader
    without workers."""
    folder_tree(tmp_path / "src", per_class=8)  # 16 batches of one: more than the workers prefetch
    convert("folder", tmp_path / "src", tmp_path / "l3", workers=0, progress=False)
    trainer = subprocess.run([sys.executable, "-c", KILLED_WORKERS, str(tmp_path / "l3")], capture_output=True,
                             text=True, timeout=180)
    assert trainer.returncode == 0, trainer.stdout + trainer.stderr
    exited = [line for line in trainer.stdout.splitlines() if line.startswith("exited after")]
    assert exited and "exited unexpectedly" in exited[0], trainer.stdout
    assert float(exited[0].split()[2]) < 15, exited[0]
    assert "next epoch: 16 batches, as without workers" in trainer.stdout
