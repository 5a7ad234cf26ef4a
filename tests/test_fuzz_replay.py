"""Replay every saved fuzz input (tests/fuzz.py): a stream-* file was saved because a stream decoder
rejected it and must still be rejected; a crash-* file must no longer crash."""

import pathlib

import pytest

from fuzz import outcome

CORPUS = sorted((pathlib.Path(__file__).parent / "fuzz_corpus").glob("*.l3"))


def test_corpus_is_present():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_replay(path):
    result = outcome(path.read_bytes())
    if path.name.startswith("stream-"):  # saved as a stream decoder's rejection
        assert result.startswith("error: corrupt stream"), result
    else:  # crash-*: saved as a bug; once fixed, an image or an L3Error
        assert not result.startswith("bug"), result
