"""The loader workers' staging CPU per frame (GPU path: read, validate, pack) and the bytes staged
per frame (what goes to the device: only the streams of the crop's tiles), whole frames,
RandomResizedCrop(512) and RandomCrop(256), checksums on and off.

    python bench/staging.py DATASET      # a dataset converted by l3convert
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l3codec.dataset import open_dataset  # noqa: E402
from l3codec.format import crc32  # noqa: E402
from l3codec.geometry import Full, RandomCrop, RandomResizedCrop  # noqa: E402
from l3codec.staging import stage_for_gpu, staging_bytes  # noqa: E402

if __name__ == "__main__":
    reader = open_dataset(sys.argv[1], "train")
    indices = list(range(len(reader)))
    buffer = np.empty(staging_bytes(reader, ("image",), len(indices)), np.uint8)
    print(f"{len(reader)} samples; CRC-32 from {crc32.__module__}\n")
    file_bytes = int(reader.index["image_size"].astype(np.int64).sum()) / len(reader)
    print(f"files: {file_bytes / 1e6:.2f} MB per frame\n")
    print("| frames | checksums | CPU ms per frame | MB staged per frame |\n|---|---|---|---|")
    for name, geometry in (("whole", Full()), ("RandomResizedCrop(512)", RandomResizedCrop(512)),
                           ("RandomCrop(256)", RandomCrop(256))):
        for verify in (True, False):
            stage_for_gpu(reader, indices, ("image",), geometry, buffer, seed=0, epoch=0, verify=verify)
            start, frames, staged_bytes = time.process_time(), 0, 0
            for epoch in range(10):
                staged = stage_for_gpu(reader, indices, ("image",), geometry, buffer, seed=0, epoch=epoch,
                                       verify=verify)
                frames += len(indices)
                staged_bytes += staged.packed.data_size
            print(f"| {name} | {'on' if verify else 'off'} | {1e3 * (time.process_time() - start) / frames:.2f} "
                  f"| {staged_bytes / frames / 1e6:.3f} |")
