"""GPU decode kernels (CUDA C and Numba CUDA); installed as ``l3codec.kernels``."""
