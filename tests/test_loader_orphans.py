"""A training process killed outright (SIGKILL) leaves no loader worker behind: the workers are
a forkserver's children, so torch's check of their parent cannot see it die; they watch it."""

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

TRAINER = textwrap.dedent("""
    import sys, time
    from l3codec.loader import L3Dataset, Loader
    if __name__ == "__main__":
        loader = Loader(L3Dataset(sys.argv[1], decode="cpu"), 2, device="cpu", num_workers=2)
        batches = iter(loader)
        next(batches)
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
