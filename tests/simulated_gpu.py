"""Runs l3codec.gpu.decode_batch(backend="numba") under NUMBA_ENABLE_CUDASIM=1 and prints JSON.

Called by tests/test_numba_cuda.py in a subprocess (the simulator is chosen when numba is
imported). Each result compares the simulated kernels with the CPU decoder.
"""

import json
import os
import sys

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

import l3codec  # noqa: E402
from corruption import mutate_payload  # noqa: E402
from gpu_cases import crop_regions, encoded_images  # noqa: E402
from l3codec import gpu  # noqa: E402


def host(array):
    return np.asarray(array.copy_to_host())


def main():
    results = {}
    images, datas = encoded_images()
    decoded = gpu.decode_batch(datas, backend="numba")
    results["mixed batch"] = [bool(np.array_equal(host(d), l3codec.decode(x))) for d, x in zip(decoded, datas)]
    results["mixed batch matches source"] = [bool(np.array_equal(host(d), i)) for d, i in zip(decoded, images)]
    regions = crop_regions(images)
    decoded = gpu.decode_batch(datas, backend="numba", regions=regions)
    results["regions"] = [
        bool(np.array_equal(host(d), l3codec.decode(x, region=r))) for d, x, r in zip(decoded, datas, regions)
    ]
    same = [datas[0], l3codec.encode(np.flip(images[0], axis=0).copy(), mode="compact", tile_width=16)]
    stacked = gpu.decode_batch(same, backend="numba")
    results["same shape stacked"] = [bool(np.array_equal(host(d), l3codec.decode(x))) for d, x in zip(stacked, same)]
    rng = np.random.default_rng(9)
    outcomes = []
    for _ in range(6):
        damaged = mutate_payload(datas[1], rng)
        try:
            cpu_ok = l3codec.decode(damaged) is not None
        except l3codec.L3Error:
            cpu_ok = False
        try:
            gpu_out = gpu.decode_batch([datas[0], damaged], backend="numba")
            gpu_ok = True
            same_pixels = bool(np.array_equal(host(gpu_out[1]), l3codec.decode(damaged))) if cpu_ok else False
        except l3codec.L3Error as error:
            gpu_ok = False
            same_pixels = "item 1" in str(error)
        outcomes.append([cpu_ok, gpu_ok, same_pixels])
    results["corrupt item"] = outcomes
    print(json.dumps(results))


if __name__ == "__main__":
    main()
