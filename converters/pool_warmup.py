"""Imported once by the pool's forkserver, before it forks any worker: one Numba thread per process,
and the codec's compiled functions loaded (from Numba's cache) once, so that every worker forked from
the server starts with them instead of loading them again. Importing this module is its whole job."""

import os

os.environ["NUMBA_NUM_THREADS"] = "1"  # before numba is imported: no helper threads to fork
# GNU OpenMP (Numba's usual layer here) aborts a forked child; the workqueue layer survives fork, and one
# thread per process never needs the others' thread safety
os.environ["NUMBA_THREADING_LAYER"] = "workqueue"

import numpy as np  # noqa: E402

import l3codec  # noqa: E402

for _mode in ("compact", "fast"):
    for _image in (np.zeros((8, 16, 3), np.uint8), np.zeros((8, 16), np.uint8), np.zeros((8, 16), np.uint16),
                   np.zeros((8, 16, 4), np.uint8)):
        l3codec.decode(l3codec.encode(_image, mode=_mode))
