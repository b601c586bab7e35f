"""The native HTTP engine (chute._native.HttpEngine) against real servers on loopback: nginx, and chute's
FaultProxy in front of it injecting resets, 503/429 SlowDown and truncated bodies. No assertion depends on
timing; every wait is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from support.fault_proxy import FaultProxy

from chute import _native
from chute.bench.loopback import NGINX, LatencyRelay, Nginx, RelayProcess
from chute.errors import ResourceError

pytestmark = pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason="nginx is not installed (scripts/setup.sh --dev)")

SMALL = 3 * 1000 * 1000 + 17  # not a multiple of any chunk size used
BIG = 50 * 1000 * 1000
FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}  # retries without waiting


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    small = os.urandom(SMALL)
    (root / "small.bin").write_bytes(small)
    big = os.urandom(BIG)
    (root / "big.bin").write_bytes(big)
    return root, {"small.bin": small, "big.bin": big}


@pytest.fixture(scope="module")
def nginx(files):
    with Nginx(files[0]) as url:
        yield url


def engine(**kwargs):
    return _native.HttpEngine(**kwargs)


def test_get_and_ranged_get_are_byte_exact(nginx, files):
    data = files[1]["small.bin"]
    e = engine()
    status, body, headers = e.fetch(nginx + "/small.bin")
    assert status == 200 and body == data
    assert headers["content-length"] == str(len(data))
    for offset, length in [(0, 1), (1, 100), (12345, 1 << 20), (len(data) - 10, 10)]:
        status, body, headers = e.fetch(nginx + "/small.bin", offset=offset, length=length)
        assert status == 206
        assert body == data[offset : offset + length]
        assert headers["content-range"] == f"bytes {offset}-{offset + length - 1}/{len(data)}"
    status, body, headers = e.fetch(nginx + "/small.bin", method="HEAD")
    assert status == 200 and body == b"" and headers["content-length"] == str(len(data))
    s = e.stats()
    assert s["requests"] == 6 and s["failures"] == 0 and s["retries"] == 0
    assert s["bytes"] == len(data) + 1 + 100 + (1 << 20) + 10
    assert 0 < s["latency_p50_s"] <= s["latency_p99_s"]


def test_range_past_the_end_is_an_error_not_a_retry(nginx, files):
    e = engine(**FAST)
    with pytest.raises(ValueError, match=r"GET http://127\.0\.0\.1:\d+/small\.bin: .*past the end"):
        e.fetch(nginx + "/small.bin", offset=SMALL - 10, length=20)
    with pytest.raises(ValueError, match="416"):
        e.fetch(nginx + "/small.bin", offset=SMALL + 10, length=20)
    assert e.stats()["retries"] == 0


@pytest.mark.parametrize("max_in_flight", [0, 1, 8])
def test_download_of_50mb_is_byte_exact(nginx, files, tmp_path, max_in_flight):
    e = engine(max_in_flight=max_in_flight)
    out = tmp_path / "big.out"
    e.download(nginx + "/big.bin", BIG, out, chunk_bytes=1 << 20)  # 48 chunks, the last one short
    assert out.stat().st_size == BIG
    assert out.read_bytes() == files[1]["big.bin"]
    s = e.stats()
    assert s["requests"] == -(-BIG // (1 << 20)) and s["bytes"] == BIG and s["failures"] == 0
    assert s["in_flight"] == 0
    if max_in_flight:
        assert s["in_flight_limit"] == max_in_flight
    else:
        assert 4 <= s["in_flight_limit"] <= 64  # the autotuner's bounds (floor, max_auto_in_flight)


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 256 << 10])  # written while the body comes; when it ends
def test_a_sink_that_cannot_be_written_fails_at_once_naming_the_offset(nginx, chunk_bytes):
    # Bodies are staged and written in large pieces; a failed write (here ENOSPC) ends the download with
    # an OSError naming where, and is not retried as if the network had failed.
    e = engine()
    with pytest.raises(OSError, match=r"writing at \d+: No space left on device"):
        e.download(nginx + "/small.bin", SMALL, "/dev/full", chunk_bytes=chunk_bytes)
    assert e.stats()["retries"] == 0


def test_redirects_are_followed_with_the_range(nginx, files, tmp_path):
    # nginx answers /redirect/<path> with a 302 to /<path>, as a hub answers a file's URL with its CDN's.
    data = files[1]["small.bin"]
    e = engine()
    status, body, headers = e.fetch(nginx + "/redirect/small.bin")
    assert status == 200 and body == data and "location" not in headers  # the final response's headers
    status, body, _ = e.fetch(nginx + "/redirect/small.bin", offset=12345, length=1000)
    assert status == 206 and body == data[12345:13345]
    status, body, headers = e.fetch(nginx + "/redirect/small.bin", method="HEAD")
    assert status == 200 and headers["content-length"] == str(len(data))
    out = tmp_path / "small.out"
    e.download(nginx + "/redirect/small.bin", SMALL, out, chunk_bytes=256 << 10)
    assert out.read_bytes() == data
    assert e.stats()["retries"] == 0


def test_a_redirect_loop_fails_at_once(nginx):
    e = engine(**FAST)
    with pytest.raises(OSError, match="redirect"):
        e.fetch(nginx + "/loop/small.bin")
    assert e.stats()["retries"] == 0


def test_download_of_a_missing_object_names_it(nginx, tmp_path):
    e = engine()
    with pytest.raises(FileNotFoundError, match=r"GET http://127\.0\.0\.1:\d+/absent\.bin: HTTP 404"):
        e.download(nginx + "/absent.bin", 10 << 20, tmp_path / "x", chunk_bytes=1 << 20)


def test_connections_are_reused(nginx, files):
    with FaultProxy(nginx) as proxy:
        e = engine(max_in_flight=4)
        for i in range(40):
            _, body, _ = e.fetch(proxy.url + "/small.bin", offset=i * 1000, length=1000)
            assert body == files[1]["small.bin"][i * 1000 : (i + 1) * 1000]
        assert len(proxy.requests) == 40
        assert 1 <= proxy.connections <= 4  # keep-alive: one connection served them all (4 at most)


FAULTS = {
    "reset": {"reset_every": 3},
    "503": {"status_every": (3, 503)},
    "429": {"status_every": (3, 429)},
    "truncate": {"truncate_every": 3},
    "all_kinds": {"reset_every": 5, "status_every": (7, 503), "truncate_every": 4},
}


@pytest.mark.parametrize("kind", list(FAULTS))
def test_faults_are_retried_and_the_result_is_byte_exact(nginx, files, tmp_path, kind):
    data = files[1]["small.bin"]
    with FaultProxy(nginx, **FAULTS[kind]) as proxy:
        e = engine(max_retries=30, **FAST)
        for _ in range(6):  # whole-object GETs: a truncation is caught by Content-Length
            _, body, _ = e.fetch(proxy.url + "/small.bin")
            assert body == data
        out = tmp_path / "small.out"
        e.download(proxy.url + "/small.bin", SMALL, out, chunk_bytes=64 << 10)  # 46 ranged GETs
        assert out.read_bytes() == data
        s = e.stats()
        injected = proxy.faults.resets + proxy.faults.statuses + proxy.faults.truncations
        assert injected >= 10
        assert s["failures"] == 0
        # Each 503/429 and each truncation costs one attempt; libcurl itself re-sends a request whose
        # reused connection was reset before any reply, so resets need not reach the engine's count.
        assert s["retries"] >= proxy.faults.statuses + proxy.faults.truncations
        assert s["retries"] <= injected
        assert len(proxy.requests) == s["requests"] + injected


@pytest.mark.parametrize("status", [503, 429])
def test_retry_after_is_honoured_over_a_shorter_backoff(nginx, status):
    # FAST backoff would retry within 10 ms; the server's Retry-After: 1 makes the engine wait a second.
    with FaultProxy(nginx, status_every=(1, status), retry_after="1") as proxy:
        e = engine(max_retries=1, **FAST)
        start = time.monotonic()
        with pytest.raises(ResourceError, match=f"{status}.* after 2 attempts"):
            e.fetch(proxy.url + "/small.bin")
        assert time.monotonic() - start >= 1.0  # a lower bound only: the wait never ends early
        assert proxy.faults.statuses == 2


def test_retry_budget_ends_in_a_resource_error_naming_url_status_and_attempts(nginx):
    with FaultProxy(nginx, fail_all=True) as proxy:
        e = engine(max_retries=3, **FAST)
        with pytest.raises(ResourceError) as info:
            e.fetch(proxy.url + "/small.bin?partNumber=1")
        message = str(info.value)
        assert f"GET {proxy.url}/small.bin?partNumber=1: HTTP 503 SlowDown after 4 attempts over" in message
        assert len(proxy.requests) == 4
        s = e.stats()
        assert s["retries"] == 3 and s["failures"] == 1


def test_not_found_is_not_retried(nginx):
    with FaultProxy(nginx) as proxy:
        e = engine(**FAST)
        with pytest.raises(FileNotFoundError, match=rf"GET {proxy.url}/nope\.bin: HTTP 404"):
            e.fetch(proxy.url + "/nope.bin")
        assert len(proxy.requests) == 1
        assert e.stats()["retries"] == 0


def test_other_4xx_are_not_retried_and_bodies_are_sent(nginx):
    with FaultProxy(nginx) as proxy:
        e = engine(**FAST)
        with pytest.raises(OSError, match=rf"PUT {proxy.url}/small\.bin: HTTP 405"):
            e.fetch(proxy.url + "/small.bin", method="PUT", body=b"x" * 1000, headers=["Content-Type: text/plain"])
        assert len(proxy.requests) == 1
        r = proxy.requests[0]
        assert r.method == "PUT" and r.headers["content-length"] == "1000" and r.headers["content-type"] == "text/plain"


SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLETOKEN"


def test_sigv4_is_sent_and_credentials_never_appear(nginx):
    sigv4 = {"access_key": "AKIDEXAMPLE", "secret_key": SECRET, "session_token": TOKEN, "region": "eu-west-1"}
    with FaultProxy(nginx, fail_all=True) as proxy:
        e = engine(max_retries=1, **FAST)
        with pytest.raises(ResourceError) as info:
            e.fetch(proxy.url + "/small.bin", sigv4=sigv4)
        auth = proxy.requests[0].headers["authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") and "/eu-west-1/s3/aws4_request" in auth
        assert proxy.requests[0].headers["x-amz-security-token"] == TOKEN
        assert proxy.requests[0].headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
        assert SECRET not in auth
        for text in (str(info.value), repr(e.stats())):
            assert SECRET not in text and TOKEN not in text


def test_url_credentials_never_appear(nginx):
    port = nginx.rsplit(":", 1)[1]
    e = engine(max_retries=1, **FAST)
    with pytest.raises(FileNotFoundError) as info:
        e.fetch(f"http://alice:pa55w0rd-secret@127.0.0.1:{port}/nope.bin")
    assert "pa55w0rd-secret" not in str(info.value) and "alice" not in str(info.value)
    assert f"http://***@127.0.0.1:{port}/nope.bin" in str(info.value)
    presigned = f"http://127.0.0.1:{port}/nope.bin?X-Amz-Credential=AKID%2F1&X-Amz-Signature=deadbeef1234"
    with pytest.raises(FileNotFoundError) as info:
        e.fetch(presigned)
    assert "deadbeef1234" not in str(info.value) and "AKID" not in str(info.value)
    assert _native.redact_url(presigned).endswith("?X-Amz-Credential=***&X-Amz-Signature=***")
    assert "pa55" not in repr(e.stats())


def test_without_libcurl_remote_urls_fail_clearly():
    code = textwrap.dedent(
        """
        from chute import _native
        try:
            _native.HttpEngine()
        except ValueError as e:
            print("ERR", e)
        """
    )
    env = dict(os.environ, CHUTE_LIBCURL="/nonexistent/libcurl.so.4")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR remote URLs need libcurl (libcurl.so.4"), out.stdout
    assert "/nonexistent/libcurl.so.4" in out.stdout


def test_added_latency_is_measured_and_results_stay_exact(nginx, files, tmp_path):
    with FaultProxy(nginx, latency_s=0.05) as proxy:
        e = engine()
        out = tmp_path / "small.out"
        e.download(proxy.url + "/small.bin", SMALL, out, chunk_bytes=256 << 10)
        assert out.read_bytes() == files[1]["small.bin"]
        s = e.stats()
        # Each attempt waited at least the proxy's latency (a sleep never ends early): a lower bound only.
        assert s["latency_p50_s"] >= 0.05 and s["latency_p99_s"] >= s["latency_p50_s"]


@pytest.mark.parametrize("relay_kind", ["thread", "process"])
def test_latency_relay_passes_bodies_byte_exact_after_its_latency(nginx, files, tmp_path, relay_kind):
    # The bench's relay: 50 MB bodies (many times its pipe) through splice, kept-alive connections, ranges.
    relay_type = LatencyRelay if relay_kind == "thread" else RelayProcess
    with relay_type(nginx, latency_s=0.05) as relay:
        e = engine()
        out = tmp_path / "big.out"
        e.download(relay.url + "/big.bin", BIG, out, chunk_bytes=8 << 20)
        assert out.read_bytes() == files[1]["big.bin"]
        status, body, _ = e.fetch(relay.url + "/small.bin", offset=12345, length=1 << 20)
        assert status == 206 and body == files[1]["small.bin"][12345 : 12345 + (1 << 20)]
        s = e.stats()
        assert s["retries"] == 0 and s["failures"] == 0
        assert s["latency_p50_s"] >= 0.05  # every request waited the relay's latency first: a lower bound only


def test_interpreter_exit_with_a_request_in_flight_does_not_hang():
    # A server that accepts and never answers; a daemon thread's fetch is on the wire when Python exits.
    code = textwrap.dedent(
        """
        import socket, sys, threading, time
        from chute import _native
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        engine = _native.HttpEngine()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/hang"
        threading.Thread(target=lambda: engine.fetch(url), daemon=True).start()
        deadline = time.monotonic() + 60
        while engine.stats()["in_flight"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        print("in flight", engine.stats()["in_flight"], flush=True)
        sys.exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "in flight 1"


def test_download_from_a_server_that_ignores_ranges_keeps_each_chunks_part(tmp_path):
    """Python's http.server answers every ranged GET with 200 and the whole file: each chunk written into
    the file must still be its own range of it (the engine writes into the file as bytes arrive)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    data = os.urandom(3 * 1024 * 1024 + 123)
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "obj.bin").write_bytes(data)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "www")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/obj.bin"
        out = tmp_path / "out.bin"
        _native.HttpEngine().download(url, len(data), str(out), 1 << 20)
        assert out.read_bytes() == data
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
