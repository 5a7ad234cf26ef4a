"""Imported once by the pool's forkserver, before it forks any worker: one Numba thread per process
and the codec imported once, so every worker forked from the server starts with it. What the tasks
compile is compiled by the workers themselves, one function per worker at a time
(executors._compile_ahead). Importing this module is its whole job."""

import os

os.environ["NUMBA_NUM_THREADS"] = "1"  # before numba is imported: no helper threads to fork
# GNU OpenMP (Numba's usual layer here) aborts a forked child; the workqueue layer survives fork, and one
# thread per process never needs the others' thread safety
os.environ["NUMBA_THREADING_LAYER"] = "workqueue"

import l3codec  # noqa: E402
