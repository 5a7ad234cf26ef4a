"""l3convert against hostile sources and places, each run a real l3convert process with a bound on
its wait: a FIFO named like an image, a run from the checkout's parent directory, and images over
the pixel budget."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

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


EDITABLE_FINDER = '''\
import importlib.machinery, importlib.util, os, sys

class CheckoutFinder:
    """l3codec from the checkout, as `pip install -e .` finds it: after sys.path's own entries."""
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "l3codec":
            return None
        package = os.path.join({checkout!r}, "l3codec")
        return importlib.util.spec_from_file_location(name, os.path.join(package, "__init__.py"),
                                                      submodule_search_locations=[package])

sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder) + 1, CheckoutFinder)
'''


@pytest.mark.processes
@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python 3.11")
def test_l3convert_runs_from_the_checkouts_parent_directory(tmp_path):
    """A checkout named l3codec installed editable, l3convert run beside it: the pool's forkserver
    (python -c, the current directory first on its path) must not take the checkout's root for the
    l3codec package (a namespace package without the codec: ImportError, BrokenProcessPool)."""
    import l3codec

    checkout = os.path.dirname(os.path.dirname(os.path.abspath(l3codec.__file__)))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EDITABLE_FINDER.format(checkout=checkout))
    script = tmp_path / "bin" / "l3convert"  # as the console script: python puts its folder on the path
    script.parent.mkdir()
    script.write_text("import sys\nfrom l3codec.converters.cli import main\n"
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    parent = tmp_path / "parent"
    parent.mkdir()
    os.symlink(checkout, parent / "l3codec")
    expected = folder_tree(tmp_path / "src", per_class=2)
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, str(script), "folder", str(tmp_path / "src"), str(tmp_path / "dst"),
                           "--workers", "2", "--shard-size", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=parent, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "BrokenProcessPool" not in done.stderr
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["samples"] == len(expected) and not manifest["failures"]


def test_l3convert_skips_a_source_over_the_pixel_budget_unless_raised(tmp_path):
    from l3codec.converters.cli import main as l3convert

    folder_tree(tmp_path / "src", per_class=2)  # 24 x 40 images
    save_png(tmp_path / "src" / "cat" / "big.png", np.zeros((30, 40), np.uint8))
    assert l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "dst"), "--workers", "0",
                      "--max-pixels", "1199", "--no-progress"]) == 0
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["samples"] == 4
    [failure] = manifest["failures"]
    assert failure["key"] == "cat/big" and "40x30 is more than the 1199 pixels allowed" in failure["error"]
    assert l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "all"), "--workers", "0",
                      "--max-pixels", "1200", "--no-progress"]) == 0
    assert not json.loads((tmp_path / "all" / "manifest.json").read_text())["failures"]
    bomb = tmp_path / "src" / "dog" / "bomb.png"
    bomb.write_bytes(_zeros_png(8200, 8200))  # a few kilobytes, 67.2 million pixels: over the default
    assert l3convert(["folder", str(tmp_path / "src"), str(tmp_path / "default"), "--workers", "0",
                      "--no-progress"]) == 0
    failures = json.loads((tmp_path / "default" / "manifest.json").read_text())["failures"]
    assert [f["key"] for f in failures] == ["dog/bomb"]
    assert "8200x8200 is more than the 67108864 pixels allowed" in failures[0]["error"]


def _zeros_png(height, width) -> bytes:
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = zlib.compress(b"".join(b"\0" * (width + 1) for _ in range(height)), 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
