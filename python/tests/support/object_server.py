"""A loopback HTTP server of objects held in memory, for the tests of one version per object and of
interrupts: HEAD and GET with Range, a strong ETag per version, If-Match (412), a replacement of an object
between the ranges of one download, and stalls. Its paths are path-style S3 as well (``/bucket/key``, any
signature accepted), so ``s3://`` reads through it with ``AWS_ENDPOINT_URL`` pointing here.

    with ObjectServer() as server:
        server.put("/b/x.tar", v1)
        server.replace_after_first_range("/b/x.tar", v2)   # a writer racing the download
        ...
        server.requests    # [(method, path, {header: value})], as received

Every request is answered or stalled on a thread of its own; leaving the block releases the stalls and
stops the server. Only 127.0.0.1 is listened on.
"""

from __future__ import annotations

import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_STALL_LIMIT_S = 300.0  # a stalled request is let go at the latest after this (or when the server stops)


class QuietServer(ThreadingHTTPServer):
    """A client that drops its connection (a cancelled or retried request) is no error worth a traceback."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class ObjectServer:
    def __init__(self, honour_if_match: bool = True, require_signature: bool = False):
        self.honour_if_match = honour_if_match  # False: a server that ignores If-Match (only ETags tell)
        self.require_signature = require_signature  # True: an unsigned request gets S3's 403 AccessDenied
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._objects: dict[str, tuple[bytes, str]] = {}  # path -> (bytes, etag as sent)
        self._versions = 0
        self._replacements: dict[str, bytes] = {}  # path -> the next version, put after its first range
        self._churning: set[str] = set()  # paths that get a new version after every range
        self._stalled: dict[str, str] = {}  # path prefix -> "head" (no answer) or "body" (headers, then nothing)
        self._lock = threading.Lock()
        self._ranges = threading.Lock()  # a replacement happens before any other range is answered
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ---- the objects -----------------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> str:
        """Stores a new version of the object at `path`; returns its ETag (as sent, quoted)."""
        with self._lock:
            self._versions += 1
            etag = f'"v{self._versions}-{len(data)}"'
            self._objects[path] = (bytes(data), etag)
            return etag

    def replace_after_first_range(self, path: str, data: bytes) -> None:
        """The next ranged GET of `path` is answered from the current version; the object then becomes
        `data` before any other range is answered."""
        with self._lock:
            self._replacements[path] = bytes(data)

    def churn(self, path: str) -> None:
        """From now on, every range of `path` is followed by a new version of it (as large, other bytes): an
        object that never holds still."""
        with self._lock:
            self._churning.add(path)

    def stall(self, prefix: str, how: str = "head") -> None:
        """Requests for paths starting with `prefix` get no answer ("head"), or their headers and the
        first bytes of the body and then nothing ("body"), until the server stops."""
        assert how in ("head", "body")
        with self._lock:
            self._stalled[prefix] = how

    def etag(self, path: str) -> str:
        with self._lock:
            return self._objects[path][1]

    def signers(self, path: str) -> list[tuple[str, str]]:
        """(access key, session token) of each request for `path`, in order ("" when unsigned)."""
        out = []
        for _, _, headers in self.requests_for(path):
            found = re.search(r"Credential=([^/]+)/", headers.get("authorization", ""))
            out.append((found.group(1) if found else "", headers.get("x-amz-security-token", "")))
        return out

    def requests_for(self, path: str, method: str | None = None) -> list[tuple[str, str, dict[str, str]]]:
        with self._lock:
            return [r for r in self.requests if r[1] == path and (method is None or r[0] == method)]

    # ---- the server --------------------------------------------------------------------------------------
    def __enter__(self) -> ObjectServer:
        self._server = QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="object-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

            def _send(self, status: int, headers: dict[str, str], body: bytes = b"", head: bool = False):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _answer(self, head: bool):
                path = self.path.split("?", 1)[0]
                with server._lock:
                    server.requests.append((self.command, path, {k.lower(): v for k, v in self.headers.items()}))
                    stalled = next((how for p, how in server._stalled.items() if path.startswith(p)), None)
                if stalled == "head":
                    server._release.wait(_STALL_LIMIT_S)
                    self.close_connection = True
                    return
                if server.require_signature and "Authorization" not in self.headers:
                    self._send(
                        403, {"Content-Type": "application/xml"}, b"<Error><Code>AccessDenied</Code></Error>", head
                    )
                    return
                with server._lock:
                    found = server._objects.get(path)
                if found is None:
                    self._send(404, {"Content-Type": "application/xml"}, b"<Error><Code>NoSuchKey</Code></Error>", head)
                    return
                rng = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if head or rng is None:
                    data, etag = found
                    if stalled == "body" and not head:
                        self._stall_body(200, data, etag)
                        return
                    self._send(200, {"ETag": etag, "Accept-Ranges": "bytes"}, data, head)
                    return
                if stalled == "body":
                    data, etag = found
                    first, last = int(rng.group(1)), min(int(rng.group(2)), len(data) - 1)
                    self._stall_body(206, data[first : last + 1], etag, f"bytes {first}-{last}/{len(data)}")
                    return
                with server._ranges:  # the first range and a replacement after it, before any other range
                    with server._lock:
                        data, etag = server._objects[path]
                    first, last = int(rng.group(1)), min(int(rng.group(2)), len(data) - 1)
                    if_match = self.headers.get("If-Match")
                    if server.honour_if_match and if_match is not None and if_match != etag:
                        self._send(412, {"ETag": etag}, b"<Error><Code>PreconditionFailed</Code></Error>")
                        return
                    headers = {"ETag": etag, "Content-Range": f"bytes {first}-{last}/{len(data)}"}
                    self._send(206, headers, data[first : last + 1])
                    self.wfile.flush()
                    with server._lock:
                        replacement = server._replacements.pop(path, None)
                        if replacement is None and path in server._churning:
                            replacement = bytes(b ^ (server._versions % 255 + 1) for b in data)
                    if replacement is not None:
                        server.put(path, replacement)

            def _stall_body(self, status: int, body: bytes, etag: str, content_range: str | None = None):
                self.send_response(status)
                self.send_header("ETag", etag)
                if content_range:
                    self.send_header("Content-Range", content_range)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: min(len(body), 1024)])
                self.wfile.flush()
                server._release.wait(_STALL_LIMIT_S)
                self.close_connection = True

        return Handler
