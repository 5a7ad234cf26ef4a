"""Stand-ins for a remote store, for tests and benchmarks of remote reads (no network needed).

LatencyProxy: a TCP proxy that holds each chunk a client sends (a request) for `latency`
seconds before passing it on, as a store across a network would; it counts requests and the
most it held at once (requests in flight). Put it in front of moto's S3 server.

RangeServer: an HTTP server of a directory that honours Range requests, and can fail the
next N requests with 503, or leave them unanswered, to exercise retries and timeouts.
"""

from __future__ import annotations

import http.server
import os
import socket
import socketserver
import threading
import time


class LatencyProxy:
    """127.0.0.1:port -> upstream (host, port), each client chunk delayed by latency seconds."""

    def __init__(self, upstream: tuple, latency: float):
        self.upstream, self.latency = upstream, latency
        self.requests = self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source, target, delayed: bool) -> None:
        try:
            while chunk := source.recv(1 << 16):
                if delayed:
                    with self._lock:
                        self.requests += 1
                        self.in_flight += 1
                        self.most_in_flight = max(self.most_in_flight, self.in_flight)
                    time.sleep(self.latency)
                    with self._lock:
                        self.in_flight -= 1
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = self.most_in_flight = 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()


class RangeServer:
    """HTTP GET/HEAD of files under root, with Range; fail_next(n) answers the next n with 503,
    stall_next(n) never answers them (until close)."""

    def __init__(self, root):
        self.root = os.fspath(root)
        self.failures_left = self.stalls_left = 0
        self.requests = 0
        self._closing = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body: bool):
                owner.requests += 1
                if owner.stalls_left > 0:
                    owner.stalls_left -= 1
                    owner._closing.wait()
                    return
                if owner.failures_left > 0:
                    owner.failures_left -= 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = os.path.join(owner.root, self.path.split("?")[0].lstrip("/"))
                if not os.path.isfile(path):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with open(path, "rb") as file:
                    data = file.read()
                start, end = 0, len(data)
                ranged = self.headers.get("Range", "")
                if ranged.startswith("bytes="):
                    first, _, last = ranged[6:].partition("-")
                    start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(200)
                    self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                if body:
                    self.wfile.write(data[start:end])

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, count: int) -> None:
        self.failures_left = count

    def stall_next(self, count: int) -> None:
        self.stalls_left = count

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
