"""Remote reads and the sample cache, against a real S3-compatible server (moto) behind a proxy
that adds latency to every request.

    python bench/remote.py ../shared/corpus --latency-ms 20 50 --out bench/results

1. Requests in flight: a dataset converted from SRC is uploaded to moto; each epoch reads every
   sample's image bytes in a random order, in batches of --batch-size, one request at a time
   (reader.read) and through reader.read_many with 1, 8 and 32 requests in flight. Fetch only:
   images/s of bytes arriving, no decoding.
2. The cache: capacity half the dataset's bytes, three epochs, MinIO and LRU policies, on the
   local dataset and on the remote one: hit rate per epoch and images/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l3codec.cache import SampleCache  # noqa: E402
from l3codec.converters import convert  # noqa: E402
from l3codec.dataset import open_dataset  # noqa: E402
from l3codec.netsim import LatencyProxy  # noqa: E402


def upload(dataset: Path, latency_s: float):
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = LatencyProxy(server.get_host_and_port(), latency_s)
    options = {"key": "bench", "secret": "bench", "skip_instance_cache": True,
               "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"}}
    boto3.client("s3", endpoint_url=f"http://{server.get_host_and_port()[0]}:{server.get_host_and_port()[1]}",
                 region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket="bench")
    direct = dict(options, client_kwargs={"endpoint_url": f"http://{server.get_host_and_port()[0]}:"
                                                          f"{server.get_host_and_port()[1]}",
                                          "region_name": "us-east-1"})
    fs = s3fs.S3FileSystem(**direct)
    for parent, _, files in os.walk(dataset):
        for name in files:
            path = os.path.join(parent, name)
            fs.put_file(path, "bench/l3/" + os.path.relpath(path, dataset))
    return server, proxy, options


def epoch(reader, batch_size: int, seed: int, in_flight: int | None) -> tuple:
    """(images, seconds) of one epoch of fetches in a random order."""
    order = np.random.default_rng(seed).permutation(len(reader)).tolist()
    start = time.perf_counter()
    for first in range(0, len(order), batch_size):
        batch = order[first:first + batch_size]
        if in_flight is None:
            for i in batch:
                reader.read(i, "image")
        else:
            reader.max_in_flight = in_flight
            for got in reader.read_many([(i, "image") for i in batch]):
                if isinstance(got, BaseException):
                    raise got
    return len(order), time.perf_counter() - start


def cache_epochs(reader, cache: SampleCache, batch_size: int, epochs: int) -> list:
    rows = []
    for number in range(epochs):
        before = cache.stats()["datasets"].get(reader.dataset_id, {}).get("hits", 0)
        images, seconds = epoch(reader, batch_size, 100 + number, None if not reader.remote else 8)
        cache.flush_counters()
        hits = cache.stats()["datasets"][reader.dataset_id]["hits"] - before
        rows.append({"epoch": number + 1, "hit_rate": hits / images, "images_per_s": images / seconds})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="a folder of images (converted here with l3convert folder)")
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[20, 50])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="/tmp/l3-bench")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="l3-remote-"))
    convert("folder", args.src, work / "l3", mode="fast", progress=False)
    local = open_dataset(work / "l3", "train")
    total = int(local.index["image_size"].sum())
    results = {"src": args.src, "samples": len(local), "bytes": total, "batch_size": args.batch_size,
               "in_flight": [], "cache": []}
    for latency in args.latency_ms:
        server, proxy, options = upload(work / "l3", latency / 1e3)
        try:
            remote = open_dataset("s3://bench/l3", "train", storage_options=options)
            epoch(remote, args.batch_size, 0, 8)  # connections and the index warm
            for in_flight in (None, 1, 8, 32):
                images, seconds = epoch(remote, args.batch_size, 1, in_flight)
                results["in_flight"].append({"latency_ms": latency, "in_flight": in_flight or "one read at a time",
                                             "images_per_s": images / seconds})
            if latency == args.latency_ms[-1]:
                for policy in ("minio", "lru"):
                    for where, root, storage in (("local", work / "l3", None), ("remote", "s3://bench/l3", options)):
                        cache = SampleCache(work / f"cache-{policy}-{where}", total // 2, policy=policy)
                        reader = open_dataset(root, "train", storage_options=storage, cache=cache)
                        for row in cache_epochs(reader, cache, args.batch_size, args.epochs):
                            results["cache"].append({"policy": policy, "dataset": where,
                                                     "latency_ms": latency if where == "remote" else 0, **row})
        finally:
            proxy.close()
            server.stop()
    os.makedirs(args.out, exist_ok=True)
    lines = [f"# Remote reads and the sample cache: `python bench/remote.py {args.src} --latency-ms "
             f"{' '.join(f'{v:g}' for v in args.latency_ms)}`", "",
             f"{len(local)} samples, {total / 1e6:.1f} MB of L3 (fast); batches of {args.batch_size}; moto S3 behind "
             "a proxy that holds every request for the latency; fetch only (no decode); "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs.", "",
             "| latency ms | requests in flight | images/s |", "|---|---|---|"]
    lines += [f"| {r['latency_ms']:g} | {r['in_flight']} | {r['images_per_s']:.1f} |" for r in results["in_flight"]]
    lines += ["", "Cache with half the dataset's bytes of capacity, 3 epochs in new random orders (remote: 8 in "
              "flight on a miss):", "", "| policy | dataset | epoch | hit rate | images/s |", "|---|---|---|---|---|"]
    lines += [f"| {r['policy']} | {r['dataset']} | {r['epoch']} | {r['hit_rate']:.0%} | {r['images_per_s']:.1f} |"
              for r in results["cache"]]
    Path(args.out, "remote.md").write_text("\n".join(lines) + "\n")
    Path(args.out, "remote.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
