"""A remote store lost mid-epoch, read by the Loader's workers: one L3Error naming the URL and the
byte range, raised in the main process as it is (not torch's 'Caught ... in DataLoader worker
process' with the worker's traceback), within the reader's timeout and retries."""

import time

import pytest

from l3codec.converters import convert
from l3codec.format import L3Error

from dataset_trees import folder_tree
from s3_server import S3Server

pytestmark = pytest.mark.processes


def test_a_lost_s3_server_gives_one_l3error_in_the_main_process(tmp_path):
    pytest.importorskip("torch")
    from l3codec.loader import Decode, L3Dataset, Loader, Workers

    folder_tree(tmp_path / "src", per_class=4)
    convert("folder", tmp_path / "src", tmp_path / "dst", workers=0, progress=False)
    with S3Server() as server:
        options = server.options(skip_instance_cache=True)
        server.upload(tmp_path / "dst", "lost/l3", options)
        dataset = L3Dataset("s3://lost/l3", storage_options=options)
    dataset.reader.timeout, dataset.reader.retries = 0.5, 1  # short, as options: the defaults are 30 s and 3
    loader = Loader(dataset, 4, shuffle=False, decode=Decode("cpu", device="cpu"),
                    workers=Workers(1, timeout=60))
    started = time.monotonic()
    with pytest.raises(L3Error) as raised:
        next(iter(loader))
    message = str(raised.value)
    assert "s3://lost/l3/train/shard-000000.tar: bytes " in message and "(after 2 attempts)" in message
    assert "Caught" not in message and "Traceback" not in message and "\n" not in message
    assert raised.value.__cause__ is None  # nothing of the worker's stack
    assert time.monotonic() - started < 30
