"""First use with an empty Numba cache: the decoder compiles in a sibling process beside the
encoder (first_use.py, warmup.py), and whatever goes wrong with the sibling, the round trip still works."""

import json
import os
import subprocess
import sys
import threading

import pytest

from l3codec import first_use

# each test compiles the codec into an empty cache, in processes of its own
pytestmark = [pytest.mark.compile, pytest.mark.processes]

# a fresh process: one round trip, then where each driver came from and what became of the sibling
ROUND_TRIP = """
import json, sys
import numpy as np
import l3codec
from l3codec import cpu, first_use

exec(sys.argv[1])  # the test's change, if any
y, x = np.mgrid[:40, :70]
image = np.stack([(x + y) % 256, (3 * x) % 256, y], -1).astype(np.uint8)
data = l3codec.encode(image, mode="fast", tile_width=32, tile_height=16)
sibling = first_use.coordinator.started().get(("fast", 8))
assert np.array_equal(l3codec.decode(data), image)
stats = {name: [sum(getattr(cpu, name).stats.cache_hits.values()), sum(getattr(cpu, name).stats.cache_misses.values())]
         for name in ("_image_to_planes", "_encode_fast_streams", "_decode_fast_streams", "_planes_to_image")}
print(json.dumps({"stats": stats, "siblings": len(first_use.coordinator.started()),
                  "sibling_exit": None if sibling is None else sibling.process.poll()}))
"""


def _round_trip(cache, change=""):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP, change], env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout)


LOADED, COMPILED = [1, 0], [0, 1]


def test_the_decoder_compiles_in_a_sibling_and_loads_from_the_cache(tmp_path):
    first = _round_trip(tmp_path)
    assert first["stats"] == {"_image_to_planes": COMPILED, "_encode_fast_streams": COMPILED,
                              "_decode_fast_streams": LOADED, "_planes_to_image": LOADED}
    assert first["siblings"] == 1 and first["sibling_exit"] == 0  # ended and reaped
    again = _round_trip(tmp_path)  # the cache now holds both verbs, and no sibling starts
    assert again["stats"] == dict.fromkeys(first["stats"], LOADED)
    assert again["siblings"] == 0


def test_a_sibling_that_dies_leaves_the_decoder_to_this_process(tmp_path):
    dies = "first_use.coordinator.program = 'import os; os._exit(3)'"
    result = _round_trip(tmp_path, dies)
    assert result["stats"] == dict.fromkeys(result["stats"], COMPILED)
    assert result["sibling_exit"] == 3


def test_no_sibling_without_a_writable_cache_folder(tmp_path):
    (tmp_path / "file").write_text("")
    coordinator = first_use.FirstUse()
    coordinator.starting("encode", "fast", 8, 3, cache_path=None)
    coordinator.cache_missed(str(tmp_path / "file" / "cache"))
    assert coordinator.started() == {("fast", 8): None}


def test_a_cache_miss_reads_the_verb_of_its_own_call(tmp_path):
    # another thread decoding meanwhile must not make this encode's miss look like a decode
    coordinator = first_use.FirstUse(program="pass")
    coordinator.starting("encode", "compact", 16, 1, cache_path=None)
    other = threading.Thread(target=coordinator.starting, args=("decode", "fast", 8, 3, lambda: None))
    other.start()
    other.join()
    coordinator.cache_missed(str(tmp_path))
    (sibling,) = coordinator.started().values()
    assert list(coordinator.started()) == [("compact", 16)] and sibling.process.wait(60) == 0


# what a converter and a loader pass: Pillow's read-only arrays, bytes and bytearrays, 8- and
# 16-bit single planes, crops into views of a larger batch buffer
AS_USED = """
import json
import numpy as np
from PIL import Image
import l3codec
from l3codec import cpu

rng = np.random.default_rng(0)
label = np.asarray(Image.fromarray(rng.integers(0, 40, (40, 70), dtype=np.uint16)))
photo = np.asarray(Image.fromarray(rng.integers(0, 256, (64, 600, 3), dtype=np.uint8)))  # sampled for its transform
assert not label.flags.writeable and not photo.flags.writeable
batch = np.zeros((2, 20, 30, 3), np.uint8)
for image in (label, photo, photo.copy()):
    data = l3codec.encode(image, mode="fast")
    for buffer in (data, bytearray(data)):
        assert np.array_equal(l3codec.decode(buffer), image)
        assert np.array_equal(l3codec.decode(buffer, region=(5, 7, 20, 30)), image[5:25, 7:37])
    if image.dtype == np.uint8:
        l3codec.decode(data, region=(5, 7, 20, 30), out=batch[1, :, :, :3 if image.ndim == 3 else 1].squeeze())
misses = {name: sum(driver.stats.cache_misses.values()) for name, driver in vars(cpu).items()
          if hasattr(driver, "stats") and hasattr(driver, "_cache")}
print(json.dumps(misses))
"""


def test_the_warmup_command_fills_the_cache(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-m", "l3codec.warmup", "--mode", "fast", "--bits", "8", "16"], env=env,
                   capture_output=True, timeout=600, check=True)
    result = _round_trip(tmp_path)
    assert result["stats"] == dict.fromkeys(result["stats"], LOADED)
    assert result["siblings"] == 0
    used = subprocess.run([sys.executable, "-c", AS_USED], env=env, capture_output=True, text=True, timeout=600,
                          check=True)
    misses = json.loads(used.stdout)
    assert misses and set(misses.values()) == {0}, misses


POOL_MEMBER = """
import multiprocessing, sys
from l3codec import first_use

def member(flag):
    if flag is not None:
        first_use.coordinator.share_notice(flag)
    first_use.coordinator.cache_missed(sys.argv[1])  # what a cache miss while compiling calls
    first_use.coordinator.cache_missed(sys.argv[1])

if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    flag = context.Value("b", 0) if sys.argv[2] == "shared" else None
    members = [context.Process(target=member, args=(flag,)) for _ in range(3)]
    for process in members:
        process.start()
    for process in members:
        process.join()
"""


def test_a_pools_notice_goes_where_it_is_told_and_its_misses_are_counted(tmp_path, capsys):
    """The converter's pool sends the notice to its progress bar (which would draw over it on
    stderr), and tells a compile from a cache load by the misses."""
    coordinator = first_use.FirstUse(siblings=False)
    lines = []
    coordinator.share_notice(None, write=lines.append)
    coordinator.cache_missed(str(tmp_path))
    coordinator.cache_missed(str(tmp_path))
    assert lines == [first_use.notice(None)] and coordinator.misses == 2
    assert capsys.readouterr().err == ""


def test_the_processes_of_a_pool_say_they_compile_once(tmp_path):
    """The converter's and the loader's pools share a flag (executors._init_pool_process,
    loader.workers._worker_init): the first of their processes to miss the cache prints the notice."""
    script = tmp_path / "pool_member.py"
    script.write_text(POOL_MEMBER)
    printed = {}
    for sharing in ("shared", "alone"):
        done = subprocess.run([sys.executable, str(script), str(tmp_path), sharing], capture_output=True, text=True,
                              timeout=120, check=True)
        printed[sharing] = done.stderr.count("compiling the CPU codec")
    assert printed == {"shared": 1, "alone": 3}
