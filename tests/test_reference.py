"""The uncompiled Python (NUMBA_DISABLE_JIT=1) is the readable reference: it must agree bit for bit."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

import l3codec
from images import make_image
from stream_census import stream_census

CASES = [
    ("smooth_noise", 9, 37, 3, "uint8", "compact", 32, 32),
    ("labels", 33, 20, 1, "uint16", "compact", 16, 32),
    ("smooth_noise", 17, 35, 4, "uint16", "fast", 16, 8),
    ("gradient", 10, 18, 1, "uint8", "fast", 16, 8),
    ("flat_graphics", 12, 40, 3, "uint8", "compact", 32, 32),  # palette tiles
    ("flat_graphics", 10, 40, 2, "uint16", "fast", 16, 8),
]

SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
import l3codec
from images import make_image
results = []
for kind, h, w, c, dtype, mode, tw, th in json.loads(sys.argv[1]):
    image = make_image(kind, h, w, c, np.dtype(dtype).type, seed=5)
    data = l3codec.encode(image, mode=mode, tile_width=tw, tile_height=th)
    assert np.array_equal(l3codec.decode(data), image)
    results.append(data.hex())
print(json.dumps(results))
"""


def test_uncompiled_reference_matches_compiled_codec():
    tests = str(pathlib.Path(__file__).parent)
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(tests=tests), json.dumps(CASES)],
        env=env, capture_output=True, text=True, timeout=600, check=True,
    )
    reference = json.loads(completed.stdout)
    for (kind, h, w, c, dtype, mode, tw, th), ref_hex in zip(CASES, reference):
        image = make_image(kind, h, w, c, np.dtype(dtype).type, seed=5)
        assert l3codec.encode(image, mode=mode, tile_width=tw, tile_height=th).hex() == ref_hex
        if kind == "flat_graphics":
            assert stream_census(bytes.fromhex(ref_hex))["palette"], kind
