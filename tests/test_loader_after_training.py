"""The Loader's workers after the main process has trained: what every training script does (a
validation loader built after an epoch, a resume, a warm-up step before the loader).

A training step starts torch's OpenMP intra-op pool; workers forked from that process inherited
its locks without its threads and hung forever on their first parallel torch operation (a flip,
a resize). Each scenario runs in a fresh interpreter under a watchdog, so a regression fails here
instead of hanging the test run.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from dataset_trees import cityscapes_tree

from l3codec.converters import convert

pytestmark = pytest.mark.processes

pytest.importorskip("torch")

WATCHDOG_S = 300  # the whole child: conversion, first-use loads, 8 loaders with 2 workers each

TRAIN_THEN_LOAD = textwrap.dedent('''
    import sys
    import numpy as np
    import torch

    from l3codec.loader import (CenterCrop, Decode, Full, L3Dataset, Loader, RandomCrop, RandomResizedCrop,
                                Workers, host_decode_step)

    def train(steps=3):
        """A small conv net's forward and backward passes: starts torch's intra-op thread pool."""
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 4, 3))
        optimiser = torch.optim.SGD(net.parameters(), lr=0.01)
        for _ in range(steps):
            loss = net(torch.randn(8, 3, 64, 64)).square().mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()

    def epoch(root, path, crop, workers):
        decode = {"cpu": Decode("cpu", device="cpu"),
                  "gpu-host": Decode("gpu", device="cpu", step=host_decode_step)}
        loader = Loader(L3Dataset(root, fields=("image", "labelIds")), 2, decode=decode[path], crop=crop,
                        workers=Workers(workers, timeout=60), seed=3)
        return [{name: batch[name].clone() for name in ("image", "labelIds", "flip")} for batch in loader]

    if __name__ == "__main__":
        root = sys.argv[1]  # converted by the test: no codec has run in this process
        train()
        crops = {"full-flip": Full(flip=0.5), "random-flip": RandomCrop((16, 24), flip=0.5),
                 "resized": RandomResizedCrop((20, 20)), "resized-flip": RandomResizedCrop((20, 20), flip=0.5),
                 "center": CenterCrop((16, 16))}
        scenarios = [(path, name) for path in ("cpu", "gpu-host") for name in crops
                     if not (path == "gpu-host" and name == "resized")]  # same finishing as resized-flip there
        # every loader with workers first: a decode in this process would start Numba's thread pool
        got = {(path, name): epoch(root, path, crops[name], workers=2) for path, name in scenarios}
        for path, name in scenarios:
            expected = epoch(root, path, crops[name], workers=0)
            assert len(got[path, name]) == len(expected) == 3, (path, name, len(got[path, name]))
            flips = 0
            for mine, theirs in zip(got[path, name], expected):
                for field in mine:
                    assert torch.equal(mine[field], theirs[field]), (path, name, field)
                flips += int(mine["flip"].sum())
            print(path, name, "flips", flips, flush=True)
        print("all loaders finished", flush=True)
''')


def _run_watched(script: str, *args, timeout: float = WATCHDOG_S) -> subprocess.CompletedProcess:
    """Run a Python child in its own process group; kill the whole group (workers included) if the
    watchdog fires, and fail naming what it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        pytest.fail(f"the child hung for {timeout} s; its output:\n{output}")
    return subprocess.CompletedProcess(child.args, child.returncode, output, None)


@pytest.fixture
def converted(tmp_path):
    """A tiny Cityscapes-like split (RGB frames and 8-bit label maps), converted in this process."""
    cityscapes_tree(tmp_path / "src", per_city=3, test_images=0)
    convert("cityscapes", tmp_path / "src", tmp_path / "dst", tile_width=16, workers=0, progress=False)
    return str(tmp_path / "dst")


def test_loaders_built_after_training_steps_yield_every_batch(converted):
    """CPU path and GPU-path staging, with every crop, flips included, 2 workers each: the same
    batches as without workers."""
    result = _run_watched(TRAIN_THEN_LOAD, converted)
    assert result.returncode == 0, result.stdout
    assert "all loaders finished" in result.stdout
    # the flipped crops did flip something, so the workers ran torch's flip after training
    flipped = [line for line in result.stdout.splitlines() if "flip flips" in line]
    assert len(flipped) == 6 and all(int(line.split()[-1]) > 0 for line in flipped), result.stdout


STUCK_WORKER = textwrap.dedent('''
    import glob, os, sys
    from l3codec.loader import Decode, L3Dataset, Loader, Workers, WorkerStalled

    if __name__ == "__main__":
        root = sys.argv[1]
        dataset = L3Dataset(root, fields=("image",))
        for shard in glob.glob(root + "/train/*.tar"):
            os.remove(shard)
            os.mkfifo(shard)  # opening it for reading waits for a writer that never comes
        try:
            next(iter(Loader(dataset, 1, decode=Decode("cpu", device="cpu"), workers=Workers(1, timeout=5))))
        except WorkerStalled as error:
            print("stalled:", error, flush=True)
''')


def test_a_stuck_worker_raises_naming_the_cause_instead_of_hanging(converted):
    result = _run_watched(STUCK_WORKER, converted, timeout=120)
    # the first batch is the main process's own (while the workers start), and stalls the same way
    assert "stalled: the first batch, prepared in the main process while the 1 workers start, did not come in 5 s" \
        in result.stdout, result.stdout
    assert "a source that never answers" in result.stdout


NO_MAIN_GUARD = textwrap.dedent('''
    import sys
    from l3codec.loader import Decode, L3Dataset, Loader, WorkerExited

    # no __main__ guard: every worker the forkserver starts imports this file again and fails
    dataset = L3Dataset(sys.argv[1], fields=("image",))
    try:
        batches = iter(Loader(dataset, 1, decode=Decode("cpu", device="cpu"), workers=1))
        next(batches), next(batches)  # the first from the main process, the second from the workers
    except WorkerExited as error:
        print("exited:", error, flush=True)
''')


def test_a_script_without_a_main_guard_fails_fast_naming_the_guard(converted, tmp_path):
    """Workers start from a forkserver, which imports the user's script: without the guard they die
    at start. The loader waited its whole timeout (600 s) before torch noticed (the workers are not
    its children, so no SIGCHLD); now it polls and names the guard."""
    script = tmp_path / "train.py"  # a file, not -c: multiprocessing imports the main module's file
    script.write_text(NO_MAIN_GUARD)
    child = subprocess.Popen([sys.executable, str(script), converted], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        pytest.fail(f"the loader waited for workers that had died; its output:\n{output}")
    assert "exited: DataLoader worker" in output, output
    assert "if __name__ == \"__main__\":" in output
