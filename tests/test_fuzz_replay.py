"""Replay every saved fuzz input: each must decode to its declared shape or raise L3Error."""

import pathlib

import pytest

from fuzz import outcome

CORPUS = sorted((pathlib.Path(__file__).parent / "fuzz_corpus").glob("*.l3"))


def test_corpus_is_present():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_replay(path):
    result = outcome(path.read_bytes())
    assert not result.startswith("bug"), result
