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
from corruption import mutate_payload, status_cases  # noqa: E402
from gpu_cases import crop_regions, encoded_images  # noqa: E402
from images import make_image  # noqa: E402
from l3codec import gpu  # noqa: E402
from l3codec.format import STATUS_MESSAGES  # noqa: E402


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
    for i in range(6):
        damaged = mutate_payload(datas[1 if i % 2 else 7], rng)  # compact and fast v2 (Rice groups)
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
    results["staged in strips and bands"] = staging_cases()
    results["status cases"] = case_statuses()
    results["status cases, tasks reversed"] = reversed_task_case_statuses()
    results["fast at 128 threads"] = fast_at_full_block()
    results["out and device items"] = out_and_device_item_cases(images, datas)
    print(json.dumps(results))


def out_and_device_item_cases(images, datas):
    """out= must be a contiguous device array; device items are verified like host ones."""
    from numba import cuda

    outcomes = {}
    same = [datas[0], datas[0]]
    stacked = cuda.device_array((2, *images[0].shape), images[0].dtype)
    decoded = gpu.decode_batch(same, backend="numba", out=stacked)
    outcomes["stacked out"] = all(np.array_equal(host(d), images[0]) for d in decoded) and bool(
        np.array_equal(stacked.copy_to_host()[1], images[0])
    )
    for name, out in [("host out", np.empty((2, *images[0].shape), images[0].dtype)),
                      ("strided out", cuda.device_array((2, *images[0].shape, 2), images[0].dtype)[..., 0])]:
        try:
            gpu.decode_batch(same, backend="numba", out=out)
            outcomes[name] = "accepted"
        except l3codec.L3Error as error:
            outcomes[name] = str(error)
    damaged = bytearray(datas[0])
    damaged[-3] ^= 0x40
    device_item = cuda.to_device(np.frombuffer(bytes(damaged), np.uint8))
    try:
        gpu.decode_batch([datas[1], device_item], backend="numba")
        outcomes["corrupt device item"] = "accepted"
    except l3codec.L3Error as error:
        outcomes["corrupt device item"] = str(error)
    decoded = gpu.decode_batch(cuda.to_device(np.frombuffer(datas[0], np.uint8)), backend="numba")
    outcomes["device item"] = bool(np.array_equal(host(decoded), images[0]))
    return outcomes


def batch_status(items, *, reverse_tasks: bool = False) -> int:
    """The status decode_batch reports for a one-item batch: 0, or the code its L3Error names.
    reverse_tasks: each launch's blocks in reverse order (the simulator runs them in grid order)."""
    prepared = gpu.prepare(items)
    if reverse_tasks:
        for launch in prepared.launches:
            launch.tasks = launch.tasks[::-1].copy()
    try:
        gpu.decode_prepared(prepared, backend="numba")
    except l3codec.L3Error as error:
        codes = [code for code, message in STATUS_MESSAGES.items() if message in str(error)]
        assert len(codes) == 1 and "item 0" in str(error), str(error)
        return codes[0]
    return 0


def case_statuses():
    """{case name: status} for corruption.status_cases, each through decode_batch on its own."""
    return {name: batch_status([data]) for name, (data, _) in status_cases().items()}


def reversed_task_case_statuses():
    """The same for the cases of several blocks (a tile's bands), their blocks in reverse order."""
    return {name: batch_status([data], reverse_tasks=True) for name, (data, _) in status_cases().items()
            if sum(len(launch.tasks) for launch in gpu.prepare([data]).launches) > 1}


def fast_at_full_block():
    """The fast kernel at its real block of 128 threads (the simulator otherwise uses 32): a tile
    wider than 2 * 128 columns, so every thread has a column pair and some threads two."""
    from l3codec.kernels import numba_kernels

    image = make_image("smooth_noise", 5, 300, 3, np.uint8, 8)
    data = l3codec.encode(image, mode="fast", tile_width=288, tile_height=8)
    saved = numba_kernels.FAST_THREADS
    numba_kernels.FAST_THREADS = 128
    try:
        assert numba_kernels.launch_geometry(gpu.prepare([data]).launches[0])[2] == (128,)
        return bool(np.array_equal(host(gpu.decode_batch(data, backend="numba")), image))
    finally:
        numba_kernels.FAST_THREADS = saved


def staging_cases():
    """Tiles wider than the compact ring (written in strips) and fast tiles taller than the ring
    of rows (written in bands, the budget shrunk so that tiny images need several)."""
    from l3codec.kernels import cuda_c

    cuda_c.FAST_STAGE_BUDGET = 3 * 3 * 32 * 2  # 3 rows of 3 channels, 32 wide: bands of 2 rows
    cases = [
        (make_image("smooth_noise", 33, 170, 1, np.uint8, 5), "compact", 160, 32),
        (make_image("gradient", 7, 150, 3, np.uint16, 6), "compact", 144, 32),
        (make_image("smooth_noise", 19, 40, 3, np.uint8, 7), "fast", 32, 16),
    ]
    datas = [l3codec.encode(image, mode=mode, tile_width=tw, tile_height=th) for image, mode, tw, th in cases]
    regions = [None, (1, 20, 5, 125), (3, 5, 13, 30)]
    outcomes = []
    for region in (None, regions):
        decoded = gpu.decode_batch(datas, backend="numba", regions=region)
        for index, (d, x) in enumerate(zip(decoded, datas)):
            expected = l3codec.decode(x, region=None if region is None else region[index])
            outcomes.append(bool(np.array_equal(host(d), expected)))
    return outcomes


if __name__ == "__main__":
    main()
