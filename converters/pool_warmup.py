"""Imported once by the pool's forkserver, before it forks any worker: the codec imported once, so
every worker forked from the server starts with it. It sets nothing: each worker sets its own
Numba thread count and threading layer when it starts (executors._one_numba_thread), in its own
process, before it imports Numba; what the tasks compile is compiled by the workers themselves,
one function per worker at a time (executors._compile_ahead)."""

import l3codec  # noqa: F401 - imported for the workers to inherit
