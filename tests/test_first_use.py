"""First use with an empty Numba cache: a verb compiles in its own process and starts none; the
warm-up's processes (warmup.py) compile ahead, and a first call waits for one compiling its kind
(first_use.py); whatever goes wrong with a warm-up process, the round trip still works."""

import fcntl
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from l3codec import first_use

# a fresh process: the test's change, then one round trip, then where each driver came from and
# how many processes the round trip started
ROUND_TRIP = """
import json, subprocess, sys
import numpy as np
import l3codec
from l3codec import cpu, first_use, warmup

exec(sys.argv[1])  # the test's change, if any
started = []
popen_init = subprocess.Popen.__init__
subprocess.Popen.__init__ = lambda self, *args, **kw: started.append(args) or popen_init(self, *args, **kw)
y, x = np.mgrid[:40, :70]
image = np.stack([(x + y) % 256, (3 * x) % 256, y], -1).astype(np.uint8)
data = l3codec.encode(image, mode="fast", tile_width=32, tile_height=16)
assert np.array_equal(l3codec.decode(data), image)
stats = {name: [sum(getattr(cpu, name).stats.cache_hits.values()), sum(getattr(cpu, name).stats.cache_misses.values())]
         for name in ("_image_to_planes", "_encode_fast_streams", "_decode_fast_streams", "_planes_to_image")}
warmed = globals().get("warming")
print(json.dumps({"stats": stats, "started_by_verbs": len(started),
                  "warmup_exit": None if warmed is None else warmed.poll()}))
"""


def _round_trip(cache, change=""):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP, change], env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout), done.stderr


LOADED, COMPILED = [1, 0], [0, 1]
DRIVERS = ("_image_to_planes", "_encode_fast_streams", "_decode_fast_streams", "_planes_to_image")


@pytest.mark.compile
@pytest.mark.processes
def test_the_verbs_compile_in_the_calling_process_and_start_none(tmp_path):
    first, err = _round_trip(tmp_path)
    assert first == {"stats": dict.fromkeys(DRIVERS, COMPILED), "started_by_verbs": 0, "warmup_exit": None}
    assert err.count("l3codec: compiling the CPU codec's fast encoder for 8-bit images of 3 channels") == 1
    again, err = _round_trip(tmp_path)  # the cache now holds both verbs
    assert again["stats"] == dict.fromkeys(DRIVERS, LOADED) and again["started_by_verbs"] == 0
    assert "compiling" not in err


@pytest.mark.compile
@pytest.mark.processes
def test_a_warmup_started_on_purpose_compiles_the_decoder_beside_the_encoder(tmp_path):
    result, _ = _round_trip(tmp_path, "warming = warmup.start('decode', 'fast', 8, 3)")
    assert result["stats"] == {"_image_to_planes": COMPILED, "_encode_fast_streams": COMPILED,
                               "_decode_fast_streams": LOADED, "_planes_to_image": LOADED}
    assert result["warmup_exit"] == 0 and result["started_by_verbs"] == 0  # ended and reaped


@pytest.mark.compile
@pytest.mark.processes
def test_a_warmup_process_that_dies_leaves_the_decoder_to_this_process(tmp_path):
    dies = ("first_use.CHILD_PROGRAM = 'import os; os._exit(3)'\n"
            "warming = warmup.start('decode', 'fast', 8, 3)")
    result, _ = _round_trip(tmp_path, dies)
    assert result["stats"] == dict.fromkeys(DRIVERS, COMPILED)
    assert result["warmup_exit"] == 3


def test_no_warmup_process_without_a_writable_cache_folder(tmp_path, monkeypatch):
    from l3codec import cpu, warmup

    (tmp_path / "file").write_text("")
    monkeypatch.setattr(cpu, "cache_path", lambda: str(tmp_path / "file" / "cache"))
    assert warmup.start("decode", "fast", 8, 3) is None


def test_the_notice_names_the_verb_of_its_own_call():
    # another thread decoding meanwhile must not make this encode's miss look like a decode
    coordinator = first_use.FirstUse()
    lines = []
    coordinator.share_notice(None, write=lines.append)
    coordinator.starting("encode", "compact", 16, 1, cache_path=lambda: None)
    other = threading.Thread(target=coordinator.starting, args=("decode", "fast", 8, 3, lambda: None))
    other.start()
    other.join()
    coordinator.cache_missed("unused")
    assert lines == [first_use.notice(("encode", "compact", 16, 1))]


def test_a_first_call_waits_for_a_process_compiling_its_kind(tmp_path):
    """A warm-up process holds the lock of what it compiles: a first call of that verb and type
    waits until it is released (then loads); a later call, or the lock's own holder, does not wait."""
    hold_s = 0.5
    lock = first_use.lock_path(tmp_path, "decode", "fast", 8)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as warmup.child_main does
        threading.Timer(hold_s, held.close).start()
        coordinator = first_use.FirstUse()
        began = time.monotonic()
        coordinator.starting("decode", "fast", 8, 3, cache_path=lambda: str(tmp_path))
        waited = time.monotonic() - began
    assert waited >= hold_s * 0.9
    holder = first_use.FirstUse()
    holder.holding("decode", "fast", 8)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        began = time.monotonic()
        holder.starting("decode", "fast", 8, 3, cache_path=lambda: str(tmp_path))  # its own lock: no wait
        coordinator.starting("decode", "fast", 8, 3, cache_path=lambda: str(tmp_path))  # waited once already
        assert time.monotonic() - began < hold_s


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


@pytest.mark.compile
@pytest.mark.processes
def test_the_warmup_command_fills_the_cache(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-m", "l3codec.warmup", "--mode", "fast", "--bits", "8", "16"], env=env,
                   capture_output=True, timeout=600, check=True)
    result, _ = _round_trip(tmp_path)
    assert result["stats"] == dict.fromkeys(result["stats"], LOADED)
    assert result["started_by_verbs"] == 0
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
    coordinator = first_use.FirstUse()
    lines = []
    coordinator.share_notice(None, write=lines.append)
    coordinator.cache_missed(str(tmp_path))
    coordinator.cache_missed(str(tmp_path))
    assert lines == [first_use.notice(None)] and coordinator.misses == 2
    assert capsys.readouterr().err == ""


@pytest.mark.processes
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
