"""A converted dataset's manifest is checked against its schema once, when it is read: wrong types
and names that would leave the dataset's root give one-line L3Errors (l3convert inspect, the
reader), and inspect bounds what a hostile index or shard costs it."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from l3codec.converters import convert
from l3codec.converters.cli import main as l3convert
from l3codec.converters.inspect import inspect
from l3codec.dataset import INDEX_NAME, open_dataset, read_manifest
from l3codec.format import L3Error

from dataset_trees import folder_tree


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("schema")
    folder_tree(root / "src", per_class=2)
    convert("folder", root / "src", root / "dst", workers=0, progress=False)
    return root / "dst"


@pytest.fixture
def dataset(converted, tmp_path):
    shutil.copytree(converted, tmp_path / "dst")
    return tmp_path / "dst"


def rewrite_manifest(root, change):
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


HOSTILE = [
    (lambda m: m.update(class_names=5), "'class_names' must be a list of strings, not int 5"),
    (lambda m: m.update(splits=["train"]), "'splits' must be an object of split name -> split object"),
    (lambda m: m["splits"]["train"].update(shards="shard-000000.tar"), "split 'train': 'shards' must be a list"),
    (lambda m: m["splits"]["train"]["shards"][0].update(name="/etc/passwd"),
     "split 'train': shard 0: 'name' must be a file name shard-NNNNNN.tar, not str \"/etc/passwd\""),
    (lambda m: m["splits"]["train"]["shards"][0].update(name="../../outside.tar"), "'name' must be a file name"),
    (lambda m: m["splits"].update({"../..": m["splits"]["train"]}), "split name '../..' is not a plain directory"),
    (lambda m: m.update(failures=[3]), "failure 0 must be an object of strings"),
]


@pytest.mark.parametrize("change, message", HOSTILE)
def test_a_hostile_manifest_gives_one_line_errors_everywhere(dataset, capsys, change, message):
    rewrite_manifest(dataset, change)
    with pytest.raises(L3Error, match=f"^{dataset}/manifest.json: ") as raised:
        inspect(dataset)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(L3Error, match="manifest.json: "):
        read_manifest(dataset)
    with pytest.raises(L3Error, match="manifest.json: "):
        open_dataset(dataset, "train")
    assert l3convert(["inspect", str(dataset)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"l3convert: {dataset}/manifest.json: ")


def test_inspect_counts_a_huge_label_without_allocating_for_it(dataset):
    """Labels counted per label present: bincount would allocate 16 GiB for 2**31 - 1. Run in a
    child limited to 2 GiB of address space."""
    index_path = dataset / "train" / INDEX_NAME
    index = np.load(index_path)
    index["label"][0] = 2**31 - 1
    np.save(index_path, index)
    script = ("import json, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
              "from l3codec.converters.inspect import inspect; r = inspect(sys.argv[1]); "
              "print(json.dumps([r['splits']['train']['per_class'], r['problems']]))")
    done = subprocess.run([sys.executable, "-c", script, str(dataset)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    per_class, problems = json.loads(done.stdout)
    assert per_class == {"2147483647": 1, "cat": 1, "dog": 2}
    assert problems == ["train: 1 label beyond the 2 class names (largest 2147483647)"]


def test_inspect_deep_reports_a_shard_that_is_a_directory(dataset, capsys):
    shard = dataset / "train" / "shard-000000.tar"
    os.remove(shard)
    shard.mkdir()
    report = inspect(dataset, deep=True)
    assert not report["ok"]
    assert any("shard-000000.tar: unreadable" in problem for problem in report["problems"])
    assert any("cannot be read" in problem for problem in report["problems"])
    assert l3convert(["inspect", "--deep", str(dataset)]) == 1
    assert "Traceback" not in capsys.readouterr().err
