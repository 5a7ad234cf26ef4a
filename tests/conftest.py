import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", deadline=None, max_examples=400)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def gpu_present() -> bool:
    """A real CUDA device (never the simulator)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver, no toolkit: no GPU
        return False


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow sweep: set L3_RUN_SLOW=1")
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU")
    has_gpu = None
    for item in items:
        if "slow" in item.keywords and not os.environ.get("L3_RUN_SLOW"):
            item.add_marker(skip_slow)
        if "cuda" in item.keywords:
            has_gpu = gpu_present() if has_gpu is None else has_gpu
            if not has_gpu:
                item.add_marker(skip_cuda)
