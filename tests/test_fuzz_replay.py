"""Replay every saved fuzz input (tests/fuzz.py): a stream-* file was saved because a stream decoder
rejected it and must still be rejected; a crash-* file must no longer crash."""

import pathlib
import re

import pytest

from fuzz import outcome
from l3codec import format as fmt

CORPUS = sorted((pathlib.Path(__file__).parent / "fuzz_corpus").glob("*.l3"))
# every stream decoder of both modes, and an unknown kind byte
DECODERS = {(mode, kind) for mode in ("compact", "fast")
            for kind in (fmt.KIND_CODED, fmt.KIND_PALETTE, fmt.KIND_LZ, fmt.KIND_PIXEL_LZ, fmt.KIND_LZ_CODED,
                         fmt.KIND_PIXEL_LZ_CODED)} | {("fast", fmt.KIND_CODED_EXTENDED), ("fast", "unknown")}


def rejecting_decoder(data: bytes) -> tuple:
    """(mode, kind byte of the stream the rejection names, or "unknown" past its mode's last kind)."""
    tile, channel = map(int, re.search(r"tile (\d+), channel (\d+)", outcome(data)).groups())
    parsed = fmt.parse(data, verify=False)
    kind = data[parsed.stream_starts[tile * parsed.info.channels + channel]]
    last = fmt.KIND_CODED_ANS if parsed.info.mode == "compact" else fmt.KIND_PIXEL_LZ_CODED  # kind 10: compact's
    return parsed.info.mode, kind if kind <= last else "unknown"


def test_corpus_reaches_every_stream_decoder():
    """The saved rejections exercise each decoder's checks, not just some: a corpus regenerated after a
    format change must still reach them all."""
    reached = {rejecting_decoder(path.read_bytes()) for path in CORPUS if path.name.startswith("stream-")}
    assert DECODERS <= reached, sorted(map(str, DECODERS - reached))


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_replay(path):
    result = outcome(path.read_bytes())
    if path.name.startswith("stream-"):  # saved as a stream decoder's rejection
        assert result.startswith("error: corrupt stream"), result
    else:  # crash-*: saved as a bug; once fixed, an image or an L3Error
        assert not result.startswith("bug"), result
