"""l3codec.stalls: the stall analyzer measures four real rates on a dataset and predicts by difference."""

import json

import pytest
from dataset_trees import folder_tree

from l3codec.converters import convert

pytest.importorskip("torch")
from l3codec import stalls  # noqa: E402


def test_the_analyzer_measures_every_stage_and_writes_its_predictions(tmp_path, capsys):
    folder_tree(tmp_path / "src", per_class=7)
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    out = tmp_path / "stalls.json"
    code = stalls.main([str(tmp_path / "dst"), "--batch-size", "2", "--workers", "1", "--batches", "2",
                        "--crop", "16", "--step-ms", "0", "1000", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result["rates"]) == {"fetch, cold", "fetch, warm", "loader, cold", "loader, warm"}
    assert all(rate["images"] == 4 and rate["images_per_s"] > 0 for rate in result["rates"].values())
    free, slow = result["predictions"]
    assert free["stall_fraction"] == 1.0  # a step of no time always waits
    assert slow["bottleneck"].startswith("none")  # 2 images a second suffice: only the hand-over waits
    handoff = result["handoff_ms"]
    assert 0 < handoff < 1000 and slow["stall_fraction"] == pytest.approx(handoff / (1000 + handoff))
    assert "| loader, warm |" in capsys.readouterr().out


def _rates(fetch, loader):
    return {f"{stage}, {t}": stalls.Rate(f"{stage}, {t}", images, 1.0)
            for stage, images in (("fetch", fetch), ("loader", loader)) for t in ("cold", "warm")}


def test_the_prediction_is_the_overlapped_wait_and_names_the_slower_stage():
    # 10 images/s in batches of 4: 400 ms of data per batch against a 100 ms step waits 300 of 400 ms
    decode_bound = stalls.predict(_rates(fetch=100, loader=10), 4, 100.0, fits_in_memory=True)
    assert decode_bound.data_ms_per_batch == pytest.approx(400.0)
    assert decode_bound.stall_fraction == pytest.approx(0.75)
    assert decode_bound.bottleneck.startswith("CPU decode")
    storage_bound = stalls.predict(_rates(fetch=11, loader=10), 4, 100.0, fits_in_memory=False)
    assert storage_bound.bottleneck.startswith("storage") and storage_bound.rate_used == "loader, cold"
    staging_bound = stalls.predict(_rates(fetch=100, loader=10), 4, 100.0, True, decode="gpu")
    assert staging_bound.bottleneck.startswith("host-side staging")


def test_a_ready_batch_still_costs_its_hand_over():
    step_bound = stalls.predict(_rates(fetch=100, loader=100), 4, 100.0, True, handoff_ms=10.0)
    assert step_bound.stall_fraction == pytest.approx(10 / 110)
