"""bench/gpu_check.py's CPU side: a dry run writes its summary and JSON and names the skipped GPU steps."""

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_dry_run_skips_the_gpu_steps_and_says_so(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["steps"]["env"]["outcome"] == "ok"
    assert "python" in results["steps"]["env"]["result"]
    for name in ("smoke", "pytest_cupy", "timings", "pytest_numba"):
        assert results["steps"][name]["outcome"].startswith("skipped: no GPU")
    assert "| smoke | skipped: no GPU" in (tmp_path / "summary.md").read_text()
