"""l3convert on tiny trees built here: every pixel and label comes back exactly, for each layout."""

import json
import os
import sys

import numpy as np
import pytest

import l3codec
from l3codec.converters import LayoutError, convert
from l3codec.dataset import open_dataset, read_manifest

from dataset_trees import cityscapes_tree, folder_tree, imagenet_tree


def decoded(reader, i, field="image"):
    return l3codec.decode(reader.read(i, field))


def test_folder_every_pixel_and_label(tmp_path):
    expected = folder_tree(tmp_path / "src")
    summary = convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    assert summary.samples == len(expected) and not summary.failures
    reader = open_dataset(tmp_path / "dst")
    assert reader.class_names == ["cat", "dog"]
    assert len(reader) == len(expected)
    for i in range(len(reader)):
        label, pixels = expected[reader.key(i)]
        assert reader.label(i) == label
        assert np.array_equal(decoded(reader, i), pixels)
        assert reader.shape(i) == (pixels.shape[0], pixels.shape[1], 1 if pixels.ndim == 2 else pixels.shape[2])
        assert reader.dtype(i) == np.uint8


def test_folder_plain_images_are_unlabelled_under_the_named_split(tmp_path):
    expected = folder_tree(tmp_path / "nested")
    for relative, (_, pixels) in expected.items():
        name = relative.replace("/", "-")
        (tmp_path / "src").mkdir(exist_ok=True)
        from PIL import Image

        Image.fromarray(pixels).save(tmp_path / "src" / f"{name}.png")
    convert("folder", tmp_path / "src", tmp_path / "dst", split="val", workers=0, progress=False)
    reader = open_dataset(tmp_path / "dst", "val")
    assert len(reader) == len(expected)
    for i in range(len(reader)):
        assert reader.label(i) == -1
        assert np.array_equal(decoded(reader, i), expected[reader.key(i).replace("-", "/")][1])
    with pytest.raises(l3codec.L3Error, match="no split 'train'"):
        open_dataset(tmp_path / "dst", "train")


def test_cityscapes_every_pixel_16bit_instances_and_unlabelled_test(tmp_path):
    expected = cityscapes_tree(tmp_path / "src")
    summary = convert("cityscapes", tmp_path / "src", tmp_path / "dst", workers=0, mode="fast", progress=False)
    assert summary.samples == sum(len(split) for split in expected.values())
    manifest = read_manifest(tmp_path / "dst")
    assert manifest["options"]["mode"] == "fast" and manifest["options"]["label_mode"] == "compact"
    train = open_dataset(tmp_path / "dst", "train")
    assert train.fields == ("image", "labelIds", "instanceIds", "color")
    for i in range(len(train)):
        sample = expected["train"][train.key(i)]
        for field in train.fields:
            assert np.array_equal(decoded(train, i, field), sample[field]), field
        assert l3codec.info(train.read(i, "image")).mode == "fast"
        assert l3codec.info(train.read(i, "labelIds")).mode == "compact"
        assert train.dtype(i, "instanceIds") == np.uint16 and train.shape(i, "instanceIds")[2] == 1
        assert train.read(i, "json").tobytes() == sample["json"]
        assert train.label(i) == -1
    test = open_dataset(tmp_path / "dst", "test")
    assert test.fields == ("image",)
    assert [test.key(i) for i in range(len(test))] == sorted(expected["test"])
    for i in range(len(test)):
        assert np.array_equal(decoded(test, i), expected["test"][test.key(i)]["image"])
    with pytest.raises(KeyError):
        test.read(0, "labelIds")


def test_imagenet_train_and_flat_val(tmp_path):
    expected = imagenet_tree(tmp_path / "src")
    convert("imagenet", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    manifest = read_manifest(tmp_path / "dst")
    assert manifest["class_ids"] == ["n01440764", "n01443537"]
    assert manifest["class_names"] == ["class 0, a name", "class 1, a name"]
    for split in ("train", "val"):
        reader = open_dataset(tmp_path / "dst", split)
        assert len(reader) == len(expected[split])
        for i in range(len(reader)):
            label, pixels = expected[split][reader.key(i)]
            assert reader.label(i) == label
            assert np.array_equal(decoded(reader, i), pixels)


def test_imagenet_val_in_wnid_folders(tmp_path):
    expected = imagenet_tree(tmp_path / "src", flat_val=False)
    (tmp_path / "src" / "LOC_val_solution.csv").unlink()
    convert("imagenet", tmp_path / "src", tmp_path / "dst", split="val", workers=0, progress=False)
    reader = open_dataset(tmp_path / "dst", "val")
    assert {reader.key(i): reader.label(i) for i in range(len(reader))} == {
        key: label for key, (label, _) in expected["val"].items()}


@pytest.mark.parametrize(
    "layout, make, message",
    [
        ("cityscapes", lambda root: folder_tree(root), "expected a Cityscapes tree.*found cat/, dog/"),
        ("imagenet", lambda root: folder_tree(root), "expected an ImageNet tree.*found cat/, dog/"),
        ("folder", lambda root: root.mkdir(), "expected image files.*found an empty directory"),
    ],
)
def test_wrong_layout_says_what_was_expected_and_found(tmp_path, layout, make, message):
    make(tmp_path / "src")
    with pytest.raises(LayoutError, match=message):
        convert(layout, tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    assert not (tmp_path / "dst").exists()


def test_folder_with_both_files_and_class_dirs_is_refused(tmp_path):
    folder_tree(tmp_path / "src")
    (tmp_path / "src" / "stray.png").write_bytes((tmp_path / "src" / "cat" / "0.png").read_bytes())
    with pytest.raises(LayoutError, match="found both"):
        convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)


def test_manifest_records_counts_and_checksums(tmp_path):
    import hashlib

    folder_tree(tmp_path / "src", per_class=4)
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, shard_size="3kB", progress=False)
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) > 1 and sum(shard["samples"] for shard in shards) == 8
    for shard in shards:
        data = (tmp_path / "dst" / "train" / shard["name"]).read_bytes()
        assert len(data) == shard["bytes"] and hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert not (tmp_path / "dst" / ".l3convert").exists()


def test_cityscapes_takes_the_label_kinds_present_and_reports_samples_missing_one(tmp_path):
    expected = cityscapes_tree(tmp_path / "src")
    for path in (tmp_path / "src" / "gtFine").rglob("*"):
        if path.name.endswith(("_color.png", "_polygons.json")):
            path.unlink()
    missing = next((tmp_path / "src" / "gtFine").rglob("*_instanceIds.png"))
    missing.unlink()
    summary = convert("cityscapes", tmp_path / "src", tmp_path / "dst", split="train", workers=0, progress=False)
    train = open_dataset(tmp_path / "dst", "train")
    assert train.fields == ("image", "labelIds", "instanceIds") and train.members == train.fields
    assert len(train) == len(expected["train"]) - 1
    [failure] = summary.failures
    assert failure["key"] == missing.name.replace("_gtFine_instanceIds.png", "")
    assert "instanceIds" in failure["error"] and "unreadable" in failure["error"]
    for i in range(len(train)):
        for field in train.fields:
            assert np.array_equal(decoded(train, i, field), expected["train"][train.key(i)][field])


def test_shard_sizes_parse_and_bad_options_are_refused(tmp_path):
    from l3codec.converters.pipeline import parse_size

    assert parse_size("256MB") == 256_000_000 and parse_size("1MiB") == 2**20 and parse_size("500k") == 500_000
    assert parse_size(4096) == 4096 and parse_size("1.5GB") == 1_500_000_000
    for bad in ("lots", "-1MB", "0", "12XB"):
        with pytest.raises(ValueError, match="shard size"):
            parse_size(bad)
    folder_tree(tmp_path / "src")
    with pytest.raises(ValueError, match="mode must be one of"):
        convert("folder", tmp_path / "src", tmp_path / "dst", mode="tiny", workers=0, progress=False)
    with pytest.raises(ValueError, match="max_side must be a positive integer"):
        convert("folder", tmp_path / "src", tmp_path / "dst", max_side=0, workers=0, progress=False)
    with pytest.raises(LayoutError, match="layout must be one of"):
        convert("coco", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)


@pytest.mark.processes
def test_a_pool_gets_the_shards_largest_first(tmp_path, monkeypatch):
    """A pool's workers get the shards largest first by the plan's estimate (source bytes, JPEGs
    weighted), so the last to finish are small ones; each shard still lands under its own number,
    in sample order. In process, shards go in plan order."""
    from l3codec.converters import executors, pipeline

    expected = folder_tree(tmp_path / "src", per_class=6)
    submitted = []
    submits = {cls: cls.submit for cls in (executors.PoolExecutor, executors.InlineExecutor)}

    def recording(self, fn, task, *args):
        submitted.append(task)
        return submits[type(self)](self, fn, task, *args)

    monkeypatch.setattr(executors.PoolExecutor, "submit", recording)
    monkeypatch.setattr(executors.InlineExecutor, "submit", recording)
    convert("folder", tmp_path / "src", tmp_path / "inline", workers=0, shard_size=3000, progress=False)
    assert [task.number for task in submitted] == list(range(len(submitted)))
    submitted.clear()
    summary = convert("folder", tmp_path / "src", tmp_path / "dst", workers=2, shard_size=3000, progress=False)
    assert summary.shards == len(submitted) >= 4
    for task in submitted:
        sizes = [(tmp_path / "src" / path).stat().st_size * (pipeline.LOSSY_EXPANSION if path.endswith(".jpg") else 1)
                 for sample in task.samples for _, path in sample.files]
        assert task.estimated_bytes == sum(sizes)
    estimates = [task.estimated_bytes for task in submitted]
    in_plan_order = [task.estimated_bytes for task in sorted(submitted, key=lambda task: task.number)]
    assert estimates == sorted(estimates, reverse=True) and estimates != in_plan_order
    reader = open_dataset(tmp_path / "dst")
    assert [reader.key(i) for i in range(len(reader))] == sorted(expected)
    for i in range(len(reader)):
        assert np.array_equal(decoded(reader, i), expected[reader.key(i)][1])


def test_the_progress_bar_times_the_conversion_not_the_workers_start():
    """The bar's clock restarts at the first images: compiling on an empty cache (most of a minute
    before them) no longer inflates the rate's time left."""
    import time

    from l3codec.converters.pipeline import _Progress

    progress = _Progress(10, True, None)
    try:
        time.sleep(0.3)
        progress.advance(1, 100)
        assert progress.bar.n == 1 and progress.bar.format_dict["elapsed"] < 0.3
        progress.advance(2, 100)
        assert progress.bar.n == 3
    finally:
        progress.close()


def test_while_the_workers_compile_the_bar_clock_moves_and_says_what_they_compiled(capsys, monkeypatch):
    """On an empty cache a pool's workers compile for a minute or more before the first image: the
    bar's clock moves meanwhile, and the first-use notice and each compiled function come as lines
    above the bar (a worker printing the notice itself had it drawn over by the bar)."""
    import queue
    import time

    from l3codec import first_use
    from l3codec.converters.pipeline import _Progress

    notice = first_use.notice(("encode", "compact", 8, 3))
    for enabled, tqdm_installed in ((True, True), (True, False), (False, True)):
        if not tqdm_installed:  # the user install has no tqdm: no bar, the lines still come
            monkeypatch.setitem(sys.modules, "tqdm", None)
        messages = queue.Queue()
        progress = _Progress(10, enabled, messages)
        monkeypatch.undo()
        try:
            if enabled and tqdm_installed:
                progress.bar.start_t -= 2  # as if the workers had been compiling for 2 s
                time.sleep(0.5)  # no message: the drain waits 0.2 s for one, then redraws the bar
                assert "0/10 [00:02<" in capsys.readouterr().err
            messages.put(("notice", notice))
            messages.put(("compiled", ("encode", "compact", 8, 3), 61.04))
            messages.put((1, 100, 50))
        finally:
            progress.close()
        lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
        assert notice in lines
        compiled = "l3codec: compiled the compact encoder for 8-bit images of 3 channels in 61.0 s"
        assert (compiled in lines) == enabled  # progress, which --no-progress leaves out
        assert progress.source_bytes == 100


def test_the_summary_rate_leaves_out_the_pools_start_and_says_how_long_it_took():
    """A small run on an empty cache spends most of its wall time starting and compiling: the rate is
    the conversion's, the start reported beside it (it said 0.2 images/s where the workers did 50)."""
    from l3codec.converters.pipeline import Summary

    summary = Summary(dst="d", samples=10, wall_seconds=12.0, starting_seconds=10.0, converted_samples=10,
                      converted_source_bytes=10_000_000, shards=1, workers=1)
    text = str(summary)
    assert "5.0 images/s, 5.0 MB/s after the first 10.0 s (the workers' start, compiling on first use)" in text
    assert "0.8 images/s" not in text
    assert "after the first" not in str(Summary(dst="d", samples=10, wall_seconds=2.0, converted_samples=10,
                                                converted_source_bytes=1, shards=1, workers=1))


LOADER_THEN_POOL = """
import sys
from l3codec.converters import convert
from l3codec.loader import Decode, L3Dataset, Loader, Workers

if __name__ == "__main__":
    src, first, second = sys.argv[1:4]
    convert("folder", src, first, workers=0, progress=False)
    assert len(list(Loader(L3Dataset(first), 2, decode=Decode("cpu"), workers=Workers(1)))) > 0
    convert("folder", src, second, workers=2, shard_size=3000, progress=False)
    print("converted after the loader")
"""


@pytest.mark.processes
@pytest.mark.compile
def test_a_pool_after_a_loader_in_one_process_compiles_in_its_workers(tmp_path):
    """The Loader starts the process's one forkserver with its own preloads (numba imported with the
    machine's thread count); a pool started after it, compiling on an empty cache, failed every
    worker with 'Cannot set NUMBA_NUM_THREADS ... once the threads have been launched'."""
    import subprocess
    import sys

    folder_tree(tmp_path / "src", per_class=6)
    (tmp_path / "script.py").write_text(LOADER_THEN_POOL)
    (tmp_path / "numba-cache").mkdir()
    done = subprocess.run([sys.executable, str(tmp_path / "script.py"), str(tmp_path / "src"), str(tmp_path / "a"),
                           str(tmp_path / "b")], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")})
    assert done.returncode == 0 and "converted after the loader" in done.stdout, done.stderr[-3000:]


POOL_SETTINGS = """
import json, os
from l3codec.converters import executors

if __name__ == "__main__":  # each worker imports this file again, as l3convert's: without numba
    import numba

    before = dict(os.environ)
    pool = executors.PoolExecutor(2)
    futures = [pool.submit(os.getenv, "NUMBA_NUM_THREADS"), pool.submit(os.getenv, "NUMBA_THREADING_LAYER"),
               pool.submit(numba.get_num_threads)]
    workers = [future.result(timeout=120) for future in futures]
    pool.shutdown()
    print(json.dumps({"workers": workers, "coordinator_env_unchanged": dict(os.environ) == before}))
"""


@pytest.mark.processes
def test_each_pool_worker_sets_its_own_numba_thread_and_the_coordinator_nothing(tmp_path):
    """The settings are made in the worker, before its Numba starts (executors._one_numba_thread), not
    on an import of the forkserver's preload, which once set them wherever pool_warmup was imported."""
    import json
    import subprocess
    import sys

    (tmp_path / "pool_settings.py").write_text(POOL_SETTINGS)
    env = {key: value for key, value in os.environ.items()
           if key not in ("NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER")}
    done = subprocess.run([sys.executable, str(tmp_path / "pool_settings.py")], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env, check=True)
    assert json.loads(done.stdout) == {"workers": ["1", "workqueue", 1], "coordinator_env_unchanged": True}


def test_importing_the_pools_preload_changes_no_environment(monkeypatch):
    import importlib

    from l3codec.converters import executors

    before = dict(os.environ)
    importlib.reload(importlib.import_module(f"{executors.__package__}.pool_warmup"))
    assert dict(os.environ) == before
