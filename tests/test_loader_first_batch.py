"""The first batch while the workers start: the main process prepares it, the workers the rest, and the
batches are those of a loader without workers, in the same order (resumed epochs too)."""

import multiprocessing
import os
import subprocess
import sys

import pytest
from dataset_trees import folder_tree

from l3codec.converters import convert

torch = pytest.importorskip("torch")
from l3codec.loader import Decode, L3Dataset, Loader, RandomCrop, Workers, host_decode_step  # noqa: E402
from l3codec.loader import workers as loader_workers  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    src = tmp_path_factory.mktemp("first-batch-src")
    folder_tree(src, per_class=4)  # 8 images of 24x40, RGB and grey
    dst = tmp_path_factory.mktemp("first-batch") / "l3"
    convert("folder", src, dst, workers=0, progress=False)
    return dst


@pytest.fixture
def prepared_here(monkeypatch):
    """(epoch, batch number) of each request the main process prepares itself."""
    requests = []
    original = loader_workers._BatchSource.__getitem__

    def recorded(self, request):
        requests.append(tuple(request[:2]))
        return original(self, request)

    monkeypatch.setattr(loader_workers._BatchSource, "__getitem__", recorded)  # the workers keep their own
    return requests


def _loader(root, decode, workers, **options):
    place = Decode("gpu", device="cpu", step=host_decode_step) if decode == "gpu" else \
        Decode("cpu", device="cpu")
    return Loader(L3Dataset(root, fields=("image",)), 3, crop=RandomCrop(16, flip=0.5), seed=4, decode=place,
                  workers=Workers(workers, **options))


def _pixels(images):
    """One flat tensor of a batch's images (a list where grey and colour images mix)."""
    return torch.cat([image.flatten() for image in (images if isinstance(images, list) else [images])])


def _epochs(loader, epochs):
    batches = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        batches += [(epoch, b["index"].tolist(), _pixels(b["image"]), b["flip"].tolist()) for b in loader]
    return batches


def _assert_same(a, b):
    assert [(e, i, f) for e, i, _, f in a] == [(e, i, f) for e, i, _, f in b]
    for (_, _, x, _), (_, _, y, _) in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_the_main_process_prepares_the_first_batch_while_the_workers_start(converted, decode, prepared_here):
    alone = _epochs(_loader(converted, decode, 0), (0, 1))
    prepared_here.clear()
    pooled = _epochs(_loader(converted, decode, 2), (0, 1))
    _assert_same(pooled, alone)
    assert len(pooled) == 6
    assert prepared_here == [(0, 0)]  # epoch 1: the persistent workers are running, they prepare it all


def test_a_resumed_loader_prepares_its_resume_point_first(converted, prepared_here):
    whole = _epochs(_loader(converted, "cpu", 0), (3,))
    state = {**_loader(converted, "cpu", 0).state_dict(), "epoch": 3, "batches": 1}
    resumed = _loader(converted, "cpu", 2)
    resumed.load_state_dict(state)
    prepared_here.clear()
    _assert_same(_epochs(resumed, (3,)), whole[1:])
    assert prepared_here == [(3, 1)]


def test_workers_stopped_by_a_failure_start_again_with_the_first_batch_here(converted, prepared_here):
    loader = _loader(converted, "cpu", 1)
    expected = _epochs(_loader(converted, "cpu", 0), (0,))
    loader.set_epoch(0)
    next(iter(loader))
    loader_workers._stop_workers(loader._batches_loader)
    prepared_here.clear()
    _assert_same(_epochs(loader, (0,)), expected)
    assert prepared_here == [(0, 0)]


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_workers_forked_from_this_process_prepare_every_batch(converted, prepared_here):
    """A fork while a thread of this process prepared a batch could copy a lock that thread holds."""
    expected = _epochs(_loader(converted, "cpu", 0), (0,))
    prepared_here.clear()
    _assert_same(_epochs(_loader(converted, "cpu", 2, context="fork"), (0,)), expected)
    assert prepared_here == []


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="no forkserver")
def test_the_forkserver_preloads_the_workers_modules_and_runs_no_thread(converted):
    from multiprocessing import forkserver

    started_before = forkserver._forkserver._forkserver_pid is not None  # by another test's loader or pool
    loader = _loader(converted, "cpu", 1)
    assert len(list(loader)) == 3  # the workers have started: the forkserver has imported its preloads
    pid = forkserver._forkserver._forkserver_pid
    assert pid is not None
    # no thread beyond numpy's (OpenBLAS's pool, which forks safely): torch's and Numba's pools
    # started there would deadlock its children
    numpy_alone = subprocess.run([sys.executable, "-c", "import os, numpy; print(len(os.listdir('/proc/self/task')))"],
                                 capture_output=True, text=True, check=True)
    assert len(os.listdir(f"/proc/{pid}/task")) <= int(numpy_alone.stdout)
    if not started_before:  # else its preloads are its starter's (l3convert's pool preloads its own)
        assert set(loader_workers.WORKER_MODULES) <= set(forkserver._forkserver._preload_modules)
