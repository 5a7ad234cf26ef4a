"""The README's main job (`l3convert demo`): generated scenes converted, read back through the
loader and compared with their sources, run exactly as the README's quick start writes it."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from l3codec import demo, first_use, warmup
from l3codec.dataset import read_manifest

README = Path(__file__).parent.parent / "README.md"


def quick_start_command() -> str:
    block = README.read_text().split("<!-- quick-start -->", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", block, re.S).group(1).strip()


def test_scenes_are_deterministic_and_labelled_where_drawn():
    image, labels, instances = demo.street_scene(np.random.default_rng(3))
    again = demo.street_scene(np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip((image, labels, instances), again))
    assert image.shape == (demo.HEIGHT, demo.WIDTH, 3) and image.dtype == np.uint8
    assert {demo.SKY, demo.ROAD, demo.CAR} <= set(np.unique(labels).tolist())
    cars = instances >= demo.CAR * 1000
    assert np.array_equal(cars, labels == demo.CAR) and instances.dtype == np.uint16


def test_the_demo_reads_back_every_pixel_in_this_process(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    exercise = warmup.exercise

    def compiling(*kind):  # as on an empty cache, whatever this process's cache holds
        exercise(*kind)
        first_use.coordinator.misses += 1

    monkeypatch.setattr(warmup, "exercise", compiling)
    assert demo.run(str(tmp_path / "demo"), workers=0) == 0
    out, err = capsys.readouterr()
    assert "every sample verified" in out and "every pixel equal to its source" in out
    assert "where the time went" in out
    # while it compiles (minutes on a busy machine) it says what is ready, one line each
    ready = [line for line in err.splitlines() if line.endswith(" s)") and " is ready (" in line]
    assert [line.split(" is ready (")[0] for line in ready] == [
        f"l3codec: the {first_use.described((verb, 'compact', bits, channels))}"
        for verb in warmup.VERBS for channels, bits in ((3, 8), (1, 8), (1, 16))]


@pytest.mark.processes
def test_the_readmes_quick_start_runs_as_written_on_nothing_but_the_checkout(tmp_path):
    pytest.importorskip("torch")
    command = quick_start_command()
    assert command.startswith("l3convert demo ") and "../" not in command
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "every pixel equal to its source" in done.stdout, done.stdout
    assert any(tmp_path.rglob("manifest.json"))  # written where the command said, nothing outside


def test_the_demo_refuses_a_directory_it_already_used(tmp_path):
    (tmp_path / "demo" / "cityscapes-l3").mkdir(parents=True)
    with pytest.raises(ValueError, match="exists"):
        demo.run(str(tmp_path / "demo"))


def readme_training_script(dataset: str, cache: str) -> str:
    """README's 'Training from it' block as a user would first run it: on the CPU, two epochs."""
    block = README.read_text().split("Training from it:", 1)[1]
    code = re.search(r"```python\n(.+?)\n```", block, re.S).group(1)
    for old, new in (('"/data/cs-l3"', repr(dataset)), ('Decode("gpu", device="cuda")', 'Decode("cpu")'),
                     ('"/dev/shm/l3-cache"', repr(cache)), ("epochs=10", "epochs=2"),
                     ("Workers(4)", "Workers(2)")):
        assert old in code, old
        code = code.replace(old, new)
    shapes = "            print(epoch, tuple(images.shape), tuple(labels.shape))\n"
    return code.replace(" uint8\n", " uint8\n" + shapes)


@pytest.mark.processes
def test_the_readmes_training_snippet_runs_as_a_script(tmp_path):
    """Saved as a script, the snippet's workers import it again (a forkserver): without its
    `if __name__ == "__main__":` every worker failed at start."""
    pytest.importorskip("torch")
    assert demo.run(str(tmp_path / "demo"), workers=0, out=io.StringIO()) == 0
    dataset = tmp_path / "demo" / "cityscapes-l3"
    code = readme_training_script(str(dataset), str(tmp_path / "cache"))
    (tmp_path / "train.py").write_text(code)
    done = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    samples = read_manifest(dataset)["splits"]["train"]["samples"]
    batch = int(re.search(r"batch_size=(\d+)", code).group(1))
    size = int(re.search(r"RandomResizedCrop\((\d+)", code).group(1))
    batches = [min(batch, samples - first) for first in range(0, samples, batch)]
    assert done.stdout.splitlines() == [f"{epoch} ({n}, 3, {size}, {size}) ({n}, {size}, {size})"
                                        for epoch in (0, 1) for n in batches]
