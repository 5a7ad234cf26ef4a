"""A training script that ends with its loader's persistent workers alive exits cleanly: the workers
stop before multiprocessing's own exit handler, so the resource tracker finds nothing leaked."""

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
from l3codec.converters import convert  # noqa: E402

from dataset_trees import folder_tree  # noqa: E402

pytestmark = pytest.mark.processes

TRAINER = textwrap.dedent("""
    import sys
    from l3codec.loader import Decode, L3Dataset, Loader
    if __name__ == "__main__":
        loader = Loader(L3Dataset(sys.argv[1]), 2, decode=Decode("cpu", device="cpu"), workers=2)
        print(sum(len(batch["key"]) for batch in loader), flush=True)
""")


def test_a_script_ending_with_live_workers_leaks_nothing(tmp_path):
    folder_tree(tmp_path / "src")
    convert("folder", tmp_path / "src", tmp_path / "l3", workers=0, progress=False)
    script = tmp_path / "train.py"  # a file: forkserver workers import the main module again
    script.write_text(TRAINER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "l3")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "6"  # folder_tree: 2 classes of 3
    assert "leaked" not in done.stderr, done.stderr[-2000:]
