"""Runs the Numba CUDA kernels on kind-10 (compact v2) streams under NUMBA_ENABLE_CUDASIM=1 and prints JSON.

Called by tests/test_numba_ans.py in a subprocess (the simulator is chosen when numba is imported): batches
mixing kind-1 and kind-10 tile-channels decoded by decode_batch(backend="numba") (the test compares them
with the CPU decoder's and their sources), and the statuses of tests/ans_cases.py's faults (it compares
them with the CPU decoder's).
"""

import json
import os
import sys

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from ans_cases import fast_file_with_kind10, fault_files, fuzzed_files, mixed_images
from corruption import first_cpu_status
from gpu_cases import crop_regions
from simulated_gpu import batch_status, host  # one item's status; a device array's values

import l3codec
from l3codec import gpu


def kind10_sorts(data) -> dict:
    """What the batch's table stage finds in an item: its kind-10 streams, those with a bias table, those
    that are a palette's index plane; and whether the item has LZ streams as well."""
    prepared = gpu.prepare([data])
    records = prepared.ans.records
    flags = prepared.data[records["source"] + 1]
    return {"streams": len(records), "biased": int(np.sum(flags & 1)),
            "palette": int(np.sum(records["prefix_bytes"] > 0)), "lz": prepared.lz is not None}


def main():
    results = {}
    images, datas = mixed_images()
    decoded = gpu.decode_batch(datas, backend="numba")
    results["mixed batch matches source"] = [bool(np.array_equal(host(d), image))
                                             for d, image in zip(decoded, images)]
    results["mixed batch"] = [bool(np.array_equal(host(d), l3codec.decode(x)))
                              for d, x in zip(decoded, datas)]
    regions = crop_regions(images)
    decoded = gpu.decode_batch(datas, backend="numba", regions=regions)
    results["regions"] = [bool(np.array_equal(host(d), l3codec.decode(x, region=r)))
                          for d, x, r in zip(decoded, datas, regions)]
    results["kind-10 streams"] = [kind10_sorts(data) for data in datas]
    files = fault_files()
    results["fault statuses"] = {name: batch_status([data]) for name, (data, _) in files.items()}
    # the CPU decoder's, in this fresh process (see test_numba_ans)
    results["cpu fault statuses"] = {name: first_cpu_status(data) for name, (data, _) in files.items()}
    results["fault statuses, tasks reversed"] = {name: batch_status([data], reverse_tasks=True)
                                                 for name, (data, _) in files.items()}
    results["fast file with a kind-10 stream"] = batch_status([fast_file_with_kind10()])
    results["fuzzed statuses"] = [batch_status([data], reverse_tasks=True) for data in fuzzed_files()]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
