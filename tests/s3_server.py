"""A real S3-compatible server for tests (moto, in this process) and uploading a dataset to it."""

import os

import pytest


class S3Server:
    """moto's threaded server on a free port; a context manager that stops it on exit."""

    def __init__(self):
        moto_server = pytest.importorskip("moto.server")
        pytest.importorskip("s3fs")
        self._server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)

    def __enter__(self):
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.host_and_port = (host, port)
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc):
        self._server.stop()

    def options(self, endpoint: str | None = None, **extra) -> dict:
        """fsspec storage options reaching the server (or a proxy in front of it at endpoint)."""
        return {"key": "testing", "secret": "testing", **extra,
                "client_kwargs": {"endpoint_url": endpoint or self.endpoint, "region_name": "us-east-1"}}

    def upload(self, folder, url: str, options: dict | None = None) -> None:
        """Every file under folder to s3://url (bucket/prefix), creating the bucket."""
        import boto3
        import s3fs

        options = options or self.options()
        bucket = url.split("/", 1)[0]
        boto3.client("s3", endpoint_url=options["client_kwargs"]["endpoint_url"], region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket=bucket)
        fs = s3fs.S3FileSystem(**options)
        for parent, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(parent, name)
                fs.put_file(path, f"{url}/{os.path.relpath(path, folder)}")
