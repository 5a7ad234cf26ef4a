"""The /dev/shm check counts every local rank's staging ring (issue #38.5)."""

import os
import types

import pytest

from l3codec import L3Error
from l3codec.loader import loader as loader_module

MIB = 2**20


def fake_statvfs(monkeypatch, size_mib: int, free_mib: int):
    stats = types.SimpleNamespace(f_frsize=MIB, f_blocks=size_mib, f_bavail=free_mib)
    monkeypatch.setattr(os, "statvfs", lambda directory: stats)


def test_one_rank_fits(monkeypatch):
    fake_statvfs(monkeypatch, 64, 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    loader_module.check_shared_memory(40 * MIB)


def test_eight_ranks_that_together_overfill_it_are_refused(monkeypatch):
    # each ring fits the free space alone; the eight of them do not: a SIGBUS later without this
    fake_statvfs(monkeypatch, 64, 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with pytest.raises(L3Error, match="8 local ranks need 320 MiB"):
        loader_module.check_shared_memory(40 * MIB)


def test_ranks_that_fit_together_pass_after_others_allocated(monkeypatch):
    fake_statvfs(monkeypatch, 1024, 800)  # two rings of 100 MiB already staged by other ranks
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    loader_module.check_shared_memory(100 * MIB)
