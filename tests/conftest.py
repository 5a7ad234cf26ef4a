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


# The quick tier (`pytest --quick`) leaves out tests carrying one of these markers; CI runs everything.
HEAVY_MARKERS = ("processes", "emulator", "compile")
QUICK_TEST_LIMIT_S = 2.0  # a quick-tier test slower than this is named at the end, to be marked


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help=f"leave out the tests marked {', '.join(HEAVY_MARKERS)} (the full suite is CI's)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--quick"):
        heavy = [item for item in items if any(marker in item.keywords for marker in HEAVY_MARKERS)]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            light = [item for item in items if not any(marker in item.keywords for marker in HEAVY_MARKERS)]
            items[:] = light
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


_slow_quick_tests = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > QUICK_TEST_LIMIT_S:
        _slow_quick_tests.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.getoption("--quick") and _slow_quick_tests:
        markers = "/".join(HEAVY_MARKERS)
        terminalreporter.section(f"quick tier: tests over {QUICK_TEST_LIMIT_S:.0f} s (mark them {markers})")
        for duration, nodeid in sorted(_slow_quick_tests, reverse=True):
            terminalreporter.write_line(f"{duration:6.1f} s  {nodeid}")
