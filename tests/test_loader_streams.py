"""The GPU path's stream, event and pinned-memory choreography, checked without a GPU.

A recording stand-in for torch.cuda's streams, events, device contexts and cudart logs every
call in order; the loader runs its real GPU path on CPU tensors (the host decode step), so the
log is what a device would have been asked to do. Tests marked `cuda` in test_loader.py run the
same path on a real device.
"""

import gc
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from dataset_trees import cityscapes_tree  # noqa: E402

from l3codec.converters import convert  # noqa: E402
from l3codec.format import L3Error  # noqa: E402
from l3codec.loader import Decode, L3Dataset, Loader, host_decode_step  # noqa: E402
from l3codec.loader import loader as loader_module  # noqa: E402
from l3codec.loader.device import HOST_REGISTER_PORTABLE, LOWEST_PRIORITY, _Device  # noqa: E402


class Recorder:
    """torch.cuda as the loader uses it, logging (what, stream or event name, ...) in call order."""

    def __init__(self):
        self.log, self.current, self.device_context = [], "training", None
        self.streams = 0

    def install(self, monkeypatch):
        recorder = self

        class Stream:
            def __init__(self, device, priority=0):
                recorder.streams += 1
                self.name = ("copy", "decode")[recorder.streams - 1] if recorder.streams <= 2 else "other"
                recorder.log.append(("stream", self.name, priority))

            def wait_event(self, event):
                recorder.log.append(("wait", self.name, event.name))

        class Event:
            count = 0

            def __init__(self, blocking=False):
                Event.count += 1
                self.name, self.blocking = f"e{Event.count}", blocking

            def record(self, stream=None):
                recorder.log.append(("record", recorder.current, self.name, self.blocking))

            def synchronize(self):
                recorder.log.append(("synchronize", self.name))

        class StreamContext:
            def __init__(self, stream):
                self.stream, self.outer = stream, None

            def __enter__(self):
                self.outer, recorder.current = recorder.current, self.stream.name

            def __exit__(self, *exc):
                recorder.current = self.outer

        class DeviceContext:
            def __init__(self, device):
                self.device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)

            def __enter__(self):
                recorder.device_context = self.device

            def __exit__(self, *exc):
                recorder.device_context = None

        class Runtime:
            def cudaHostRegister(self, pointer, size, flags):
                recorder.log.append(("register", size, flags, recorder.device_context))
                return 0

            def cudaHostUnregister(self, pointer):
                recorder.log.append(("unregister",))
                return 0

        def current_stream(device=None):
            return SimpleNamespace(name=recorder.current, wait_event=lambda event: recorder.log.append(
                ("wait", recorder.current, event.name)))

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", StreamContext)
        monkeypatch.setattr(torch.cuda, "device", DeviceContext)
        monkeypatch.setattr(torch.cuda, "cudart", Runtime)
        monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
        return self


class CpuBackedDevice(_Device):
    """The loader's _Device on CUDA, with its tensors on the CPU: the decode is the host step and
    record_stream (CUDA tensors only) is logged instead."""

    def __init__(self, recorder):
        super().__init__(torch.device("cuda:1"))
        self.recorder = recorder

    def hand_over(self, event, tensors):
        self.recorder.log.append(("hand_over", self.recorder.current, event.name))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    cityscapes_tree(root / "src", per_city=3, test_images=0)
    convert("cityscapes", root / "src", root / "dst", workers=0, progress=False)
    return root / "dst"


def _gpu_path_loader(root, recorder, **options):
    loader = Loader(L3Dataset(root, fields=("image", "labelIds")), 2, shuffle=False,
                    decode=Decode("gpu", device="cpu", step=host_decode_step, prefetch=1), **options)
    loader._device = CpuBackedDevice(recorder)
    return loader


def test_copies_and_decodes_go_to_their_own_streams_ordered_by_blocking_events(converted, monkeypatch):
    recorder = Recorder().install(monkeypatch)
    batches = list(_gpu_path_loader(converted, recorder))
    assert len(batches) == 3
    log = recorder.log
    assert ("stream", "decode", LOWEST_PRIORITY) in log
    copies = [entry for entry in log if entry[0] == "record" and entry[1] == "copy"]
    assert len(copies) == 3 and all(entry[3] for entry in copies)  # blocking: host waits sleep
    for copied in (entry[2] for entry in copies):  # each decode waits on the GPU for its copy
        assert ("wait", "decode", copied) in log
        assert log.index(("wait", "decode", copied)) > log.index(next(e for e in copies if e[2] == copied))
    # the third batch's copy reuses the first batch's device buffer: it waits for that decode's end
    decode_records = [entry[2] for entry in log if entry[0] == "record" and entry[1] == "decode"]
    assert ("wait", "copy", decode_records[0]) in log
    # the training stream waits for each batch's last decode event before using it
    done_events = decode_records[1::2]
    assert [entry for entry in log if entry[0] == "hand_over"] == [("hand_over", "training", e) for e in done_events]
    # prefetch: batch 2's copy and decode are queued before batch 1 is handed over
    second_copy = log.index(copies[1])
    first_hand_over = log.index(("hand_over", "training", done_events[0]))
    assert second_copy < first_hand_over


def test_bad_samples_are_replaced_on_the_consuming_stream_after_it_waits(converted, monkeypatch):
    recorder = Recorder().install(monkeypatch)
    replaced = []

    def corrupt_first(staged, buffer, out, status, stream):
        host_decode_step(staged, buffer, out, status, stream)
        status.numpy()[0] = 1  # the batch's first item fails

    real_replace = loader_module.replace_bad_samples

    def watched_replace(staged, images, bad):
        replaced.append((recorder.current, len(recorder.log)))
        real_replace(staged, images, bad)

    monkeypatch.setattr(loader_module, "replace_bad_samples", watched_replace)
    loader = _gpu_path_loader(converted, recorder, on_error="skip")
    loader.decode_step = corrupt_first
    with pytest.warns(UserWarning, match="replaced bad samples"):
        batch = next(iter(loader))
    stream, position = replaced[0]
    hand_over = next(i for i, entry in enumerate(recorder.log) if entry[0] == "hand_over")
    assert stream == "training" and position > hand_over  # not queued on the decode stream after `done`
    assert batch["index"].tolist() == [1, 1] and batch["skipped"][0][1] == "failed to decode"
    assert torch.equal(batch["image"][0], batch["image"][1])


def test_the_ring_is_registered_within_the_loader_device_as_portable_and_unregistered_when_freed(monkeypatch):
    recorder = Recorder().install(monkeypatch)
    device = _Device(torch.device("cuda:3"))
    ring = torch.empty(4096, dtype=torch.uint8).share_memory_()
    device.pin(ring)
    assert recorder.log[-1] == ("register", 4096, HOST_REGISTER_PORTABLE, torch.device("cuda:3"))
    del ring
    gc.collect()
    assert recorder.log[-1] == ("unregister",)


def test_a_staging_ring_larger_than_free_shared_memory_is_refused_with_what_to_do(converted, monkeypatch):
    real_statvfs = os.statvfs

    def small_shm(path):
        stats = real_statvfs(path)
        if path != "/dev/shm":
            return stats
        return SimpleNamespace(f_bavail=1, f_blocks=1, f_frsize=4096, f_bsize=4096)  # 4 KiB, all free

    monkeypatch.setattr(loader_module.os, "statvfs", small_shm)
    loader = Loader(L3Dataset(converted), 2, decode=Decode("gpu", device="cpu", step=host_decode_step))
    with pytest.raises(L3Error, match="--shm-size"):
        next(iter(loader))
    assert loader._ring is None  # refused before anything was allocated



def _fake_cupy(log):
    """The parts of CuPy the bridge uses, logging whether each view is made inside the stream."""
    state = {"stream": None, "device": None}

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            state["device"] = self.index

        def __exit__(self, *exc):
            state["device"] = None

    class ExternalStream:
        def __init__(self, pointer, device_id=-1):
            self.pointer, self.device_id = pointer, device_id

        def __enter__(self):
            state["stream"] = self

        def __exit__(self, *exc):
            state["stream"] = None

    def from_dlpack(tensor):
        stream = state["stream"]
        log.append(("view", stream and (stream.pointer, stream.device_id), state["device"]))
        return tensor

    return SimpleNamespace(cuda=SimpleNamespace(Device=Device, ExternalStream=ExternalStream), from_dlpack=from_dlpack)


@pytest.mark.parametrize("backend", ["cupy", "numba"])
def test_the_decode_step_views_tensors_on_the_loader_stream_and_device_without_syncing(backend, monkeypatch):
    import sys

    from l3codec import gpu
    from l3codec.loader import gpu_decode_step

    log = []
    Recorder().install(monkeypatch)
    if backend == "cupy":
        monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    else:
        from numba import cuda

        class Gpu:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                log.append(("context", self.index))

            def __exit__(self, *exc):
                log.append(("context", None))

        monkeypatch.setattr(cuda, "gpus", {2: Gpu(2)})
        monkeypatch.setattr(cuda, "external_stream", lambda pointer: ("external", pointer))
        monkeypatch.setattr(cuda, "as_cuda_array", lambda tensor, sync=True: log.append(("view", sync)) or tensor)
    launches = []
    monkeypatch.setattr(gpu, "launch_packed", lambda batch, packed, *arrays, backend, stream: launches.append(stream))
    stream = SimpleNamespace(device=torch.device("cuda:2"), cuda_stream=1234)
    staged = SimpleNamespace(batch=None, packed=None)
    tensors = [torch.zeros(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8), torch.zeros(1, dtype=torch.int32)]
    gpu_decode_step(backend)(staged, *tensors, stream)
    assert len(launches) == 1
    if backend == "cupy":
        assert log == [("view", (1234, 2), 2)] * 3  # inside the loader's stream, on its device
        assert (launches[0].pointer, launches[0].device_id) == (1234, 2)
    else:
        assert log == [("context", 2), ("view", False), ("view", False), ("view", False), ("context", None)]
        assert launches[0] == ("external", 1234)
