"""Device selection of the loader (issue #38.5, #37.6): checked with torch.cuda faked, no GPU needed."""

import pytest
import torch

from l3codec import L3Error
from l3codec.loader.device import resolve_device


def fake_cuda(monkeypatch, count: int, current: int = 0):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)


def test_cuda_without_index_is_local_ranks_gpu(monkeypatch):
    fake_cuda(monkeypatch, 4)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device(None) == torch.device("cuda", 3)
    assert resolve_device("cuda") == torch.device("cuda", 3)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)  # an explicit index wins


def test_cuda_without_local_rank_is_the_current_device(monkeypatch):
    fake_cuda(monkeypatch, 4, current=2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("cuda") == torch.device("cuda", 2)


def test_local_rank_beyond_the_gpus_raises(monkeypatch):
    fake_cuda(monkeypatch, 2)
    monkeypatch.setenv("LOCAL_RANK", "5")
    with pytest.raises(L3Error, match="LOCAL_RANK=5"):
        resolve_device("cuda")


def test_cuda_without_a_cuda_device_is_one_l3error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(L3Error, match="no CUDA device.*device='cpu'"):
        resolve_device("cuda")
    assert resolve_device(None) == torch.device("cpu")


def test_loader_with_cuda_on_a_machine_without_it_raises_l3error(monkeypatch, tmp_path):
    # the README's snippet, Decode("gpu", device="cuda"): once torch's 13-line "requires CUDA" traceback
    from l3codec.loader import loader as loader_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dataset = type("Dataset", (), {"decode": "gpu", "__len__": lambda self: 4})()
    with pytest.raises(L3Error, match="no CUDA device"):
        loader_module.Loader(dataset, batch_size=2, decode=loader_module.Decode("gpu", device="cuda"))
