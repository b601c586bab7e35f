"""A reverse proxy on 127.0.0.1 for chute's tests of remote I/O: it forwards to an HTTP origin (nginx from
:mod:`chute.bench.loopback`, or moto's S3 emulator), adds latency and injects faults on a deterministic
schedule, and records the requests and connections it saw. Test infrastructure: it is not in the wheel.

    with Nginx(root) as base_url, FaultProxy(base_url, latency_s=0.02, reset_every=5) as proxy:
        engine.fetch(proxy.url + "/shard-0000.tar")

Nothing here listens beyond loopback; every wait is bounded and every thread is stopped on exit.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_STOP_TIMEOUT_S = 20.0


def slow_down_body(code: str = "SlowDown") -> bytes:
    """An S3-style XML error body."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>Please reduce your request rate.</Message>"
        "<RequestId>chute-fault-proxy</RequestId></Error>"
    ).encode()


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased


@dataclass
class FaultCounts:
    resets: int = 0
    statuses: int = 0
    truncations: int = 0


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "expect",
}


class FaultProxy:
    """An HTTP/1.1 reverse proxy on 127.0.0.1 in front of `upstream_url`, with keep-alive on both sides.

    It forwards method, path, headers (Host included, so signatures stay valid) and body, streams the
    response back, and per request (numbered 1, 2, ... in arrival order across all connections):
      - waits `latency_s` first;
      - `reset_every=N`: every Nth request, the connection is reset (RST) without a response;
      - `status_every=(N, status)`: every Nth request answers `status` (503 or 429) with an S3 SlowDown body;
      - `truncate_every=N`: every Nth request sends its headers (with the full Content-Length) and half the
        body, then closes the connection;
      - `fail_all=True`: every request answers 503 SlowDown.
    `retry_after`: a Retry-After header value those 503/429 answers carry ("2", or an HTTP-date).
    The first matching fault applies, in that order. `requests` records each request (method, path,
    headers), `faults` counts the faults injected, `connections` the connections accepted.
    """

    def __init__(
        self,
        upstream_url: str,
        latency_s: float = 0.0,
        reset_every: int = 0,
        status_every: tuple[int, int] | None = None,
        truncate_every: int = 0,
        fail_all: bool = False,
        retry_after: str | None = None,
    ):
        parsed = urllib.parse.urlsplit(upstream_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"FaultProxy: upstream must be an http:// URL, got {upstream_url!r}")
        self.upstream = (parsed.hostname, parsed.port or 80)
        self.latency_s = latency_s
        self.reset_every = reset_every
        self.status_every = status_every
        self.truncate_every = truncate_every
        self.fail_all = fail_all
        self.retry_after = retry_after
        self.requests: list[RecordedRequest] = []
        self.faults = FaultCounts()
        self.connections = 0
        self.url = ""
        self._lock = threading.Lock()
        self._count = 0
        self._sockets: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- the schedule --------------------------------------------------------------------------------
    def _next(self, method: str, path: str, headers: dict[str, str]) -> str:
        with self._lock:
            self._count += 1
            n = self._count
            self.requests.append(RecordedRequest(method, path, headers))
            if self.reset_every and n % self.reset_every == 0:
                self.faults.resets += 1
                return "reset"
            if self.fail_all or (self.status_every and n % self.status_every[0] == 0):
                self.faults.statuses += 1
                return "status"
            if self.truncate_every and n % self.truncate_every == 0:
                self.faults.truncations += 1
                return "truncate"
            return ""

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None

            def setup(self):
                super().setup()
                with proxy._lock:
                    proxy.connections += 1
                    proxy._sockets.add(self.connection)

            def finish(self):
                try:
                    super().finish()
                finally:
                    with proxy._lock:
                        proxy._sockets.discard(self.connection)
                    if self.upstream is not None:
                        self.upstream.close()

            def log_message(self, *args):  # quiet
                pass

            def _reset(self):
                # SO_LINGER 0: close() sends RST, as a dropped connection does.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            def _proxy(self):
                headers = {k.lower(): v for k, v in self.headers.items()}
                length = int(headers.get("content-length", "0") or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._next(self.command, self.path, headers)
                if proxy.latency_s:
                    time.sleep(proxy.latency_s)
                if fault == "reset":
                    return self._reset()
                if fault == "status":
                    status = 503 if proxy.fail_all or not proxy.status_every else proxy.status_every[1]
                    payload = slow_down_body()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    if proxy.retry_after is not None:
                        self.send_header("Retry-After", proxy.retry_after)
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                try:
                    response = self._forward(headers, body)
                except (OSError, http.client.HTTPException):
                    return self._reset()  # the upstream failed: the client sees a dropped connection
                self._respond(response, truncate=fault == "truncate")

            def _forward(self, headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
                for attempt in range(2):  # a kept-alive upstream connection may have been closed: reconnect once
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                    try:
                        self.upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                        for k, v in self.headers.items():
                            if k.lower() not in _HOP_BY_HOP:
                                self.upstream.putheader(k, v)
                        self.upstream.endheaders(body if body else None)
                        return self.upstream.getresponse()
                    except (OSError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            def _respond(self, response: http.client.HTTPResponse, truncate: bool) -> None:
                length = response.getheader("Content-Length")
                if length is None and self.command != "HEAD":  # chunked upstream: send it with a length
                    data = response.read()
                    length, chunks = str(len(data)), iter([data])
                else:
                    chunks = iter(lambda: response.read(1 << 16), b"")
                self.send_response_only(response.status, response.reason)
                for k, v in response.getheaders():
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if length is not None:
                    self.send_header("Content-Length", length)
                self.end_headers()
                if self.command == "HEAD":
                    response.read()
                    return
                limit = int(length) // 2 if truncate else None
                sent = 0
                for chunk in chunks:
                    if limit is not None and sent + len(chunk) >= limit:
                        self.wfile.write(chunk[: limit - sent])
                        self.wfile.flush()
                        response.close()
                        self.upstream.close()
                        self.upstream = None
                        self.close_connection = True
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                if response.will_close:
                    self.upstream.close()
                    self.upstream = None

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _proxy

        return Handler

    # ---- lifetime ------------------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()  # the accept loop; then the open connections, whose threads wait on reads
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=_STOP_TIMEOUT_S)
