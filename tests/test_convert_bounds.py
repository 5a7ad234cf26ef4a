"""l3convert against hostile sources and places, each run a real l3convert process with a bound on
its wait: a FIFO named like an image, a run from the checkout's parent directory, and images over
the pixel budget."""

import json
import os
import subprocess
import sys

import numpy as np

from dataset_trees import folder_tree, save_png

RUN_TIMEOUT_S = 60  # a hang fails the test instead of stalling the suite (a run takes seconds)


def l3convert_process(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "l3codec.converters.cli", *map(str, args), "--no-progress"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=cwd, env=env)


def test_a_fifo_named_like_an_image_is_reported_and_skipped(tmp_path):
    folder_tree(tmp_path / "src", per_class=2)
    os.mkfifo(tmp_path / "src" / "cat" / "1a.png")  # opening it for reading waits for a writer
    done = l3convert_process("folder", tmp_path / "src", tmp_path / "dst", "--workers", "0")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["samples"] == 4
    [failure] = manifest["failures"]
    assert failure["key"] == "cat/1a" and "not a regular file (a FIFO or a device): skipped" in failure["error"]
    assert "not a regular file" in done.stdout
