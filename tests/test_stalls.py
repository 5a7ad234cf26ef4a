"""l3codec.stalls: the stall analyzer measures four real rates on a dataset and predicts by difference."""

import json

import pytest
from dataset_trees import folder_tree

from l3codec.converters import convert

pytest.importorskip("torch")
from l3codec import stalls  # noqa: E402


@pytest.mark.processes
def test_the_analyzer_measures_every_stage_and_writes_its_predictions(tmp_path, capsys):
    folder_tree(tmp_path / "src", per_class=7)
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    out = tmp_path / "stalls.json"
    code = stalls.main([str(tmp_path / "dst"), "--batch-size", "2", "--workers", "1", "--batches", "2",
                        "--repeats", "2", "--crop", "16", "--step-ms", "0", "1000", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result["rates"]) == {"fetch, cold", "fetch, warm", "loader, cold", "loader, warm"}
    assert all(rate["images"] == 4 and rate["images_per_s"] > 0 for rate in result["rates"].values())
    for name, (slowest, fastest) in result["spread"].items():
        assert slowest <= result["rates"][name]["images_per_s"] <= fastest
    assert not result["remote"]
    free, slow = result["predictions"]
    assert free["stall_fraction"] == 1.0  # a step of no time always waits
    assert slow["bottleneck"].startswith("none")  # 2 images a second suffice: only the hand-over waits
    handoff = result["handoff_ms"]
    assert 0 < handoff < 1000 and slow["stall_fraction"] == pytest.approx(handoff / (1000 + handoff))
    printed = capsys.readouterr()
    assert "| loader, warm |" in printed.out and "slowest-fastest" in printed.out
    # progress while it measures: each run of each stage, as it ends
    assert printed.err.count("l3 stalls: loader, warm (") == 2 and "fetch, cold (1/2)" in printed.err


def test_a_small_split_is_measured_and_a_too_small_one_names_the_minimum(tmp_path, capsys):
    folder_tree(tmp_path / "src", per_class=3)  # 6 samples: 3 batches of 2, read over several epochs
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    out = tmp_path / "stalls.json"
    assert stalls.main([str(tmp_path / "dst"), "--batch-size", "2", "--workers", "2", "--batches", "6",
                        "--repeats", "1", "--json", str(out)]) == 0
    assert all(rate["images"] == 12 for rate in json.loads(out.read_text())["rates"].values())
    assert stalls.main([str(tmp_path / "dst"), "--batch-size", "8", "--repeats", "1"]) == 1
    assert "needs one whole batch of 8 at least" in capsys.readouterr().err


def test_the_batches_timed_are_whole_rounds_of_the_workers_after_their_start():
    assert stalls.plan_batches(12, 2, 2, batches=1) == (3, 2, stalls.HANDOFFS)  # the split of 12
    assert stalls.plan_batches(2, 2, 0) == (1, stalls.MAX_TIMED, stalls.HANDOFFS)  # one batch, read 24 times
    assert stalls.plan_batches(400, 4, 3) == (4, 18, stalls.HANDOFFS)  # whole rounds of 3, at most 20
    with pytest.raises(stalls.L3Error, match="one whole batch of 2"):
        stalls.plan_batches(1, 2, 1)


def test_storage_options_are_json_values_or_strings():
    assert stalls.storage_options(["anon=true", "endpoint_url=http://127.0.0.1:9000", 'client_kwargs={"a": 1}']) \
        == {"anon": True, "endpoint_url": "http://127.0.0.1:9000", "client_kwargs": {"a": 1}}
    with pytest.raises(stalls.L3Error, match="KEY=VALUE"):
        stalls.storage_options(["anon"])


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


@pytest.mark.processes
def test_a_remote_dataset_is_fetched_in_whole_batches_with_the_storage_options_given(tmp_path, capsys, monkeypatch):
    from s3_server import S3Server

    from l3codec.dataset import DatasetReader

    folder_tree(tmp_path / "src", per_class=4)
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    requests = []
    read_many = DatasetReader.read_many

    def counted(self, wanted):
        requests.append(len(wanted))
        return read_many(self, wanted)

    with S3Server() as s3:
        s3.upload(tmp_path / "dst", "l3-stalls/folder")
        options = s3.options()
        monkeypatch.setattr(DatasetReader, "read_many", counted)  # workers=0: the reads happen here
        out = tmp_path / "stalls.json"
        code = stalls.main(["s3://l3-stalls/folder", "--batch-size", "2", "--workers", "0", "--repeats", "1",
                            "--storage-option", f"key={options['key']}", "--storage-option",
                            f"secret={options['secret']}", "--storage-option",
                            f"client_kwargs={json.dumps(options['client_kwargs'])}", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["remote"] and not result["fits_in_memory"]
    assert "remote: every epoch reads from storage" in capsys.readouterr().out
    assert requests and set(requests) == {2}  # a whole batch of 2 samples (one field) per request
