"""The remote store of ``chute bench --remote``, on 127.0.0.1: nginx serving a directory (a real HTTP origin:
ranges, keep-alive), and a relay that adds a latency to every request. A benchmark component, shipped with
``chute bench``; it needs nginx (Debian's ``nginx-light``). chute's tests use it too, beside their own fault
proxy and S3 emulator (python/tests/support/), which stay out of the wheel.

    with Nginx(root) as base_url, RelayProcess(base_url, latency_s=0.02) as relay:
        chute.open(relay.url + "/train/")

Nothing here listens beyond loopback; every wait is bounded and every process and thread is stopped on exit.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

NGINX = "/usr/sbin/nginx"
_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    """A port nothing listens on now (the OS's choice); a server started on it may still lose a race."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.02)
    return False


class Nginx:
    """nginx (Debian's nginx-light) serving `root_dir` on 127.0.0.1, with range requests and keep-alive.

    A context manager: entering starts it and returns its base URL ("http://127.0.0.1:PORT"); leaving stops
    it and waits for it to exit. Its config, pid file and temp paths live in a temp dir of its own.
    `connections()` is not available (nginx's access log is off): count connections with FaultProxy.
    """

    def __init__(self, root_dir: str | os.PathLike, nginx: str = NGINX):
        self.root_dir = Path(root_dir).resolve()
        self.nginx = nginx
        self.url = ""
        self._dir: str | None = None
        self._proc: subprocess.Popen | None = None

    def _config(self, port: int) -> str:
        d = self._dir
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers read root_dir as its owner does
        temps = "\n".join(
            f"  {kind}_temp_path {d}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        return f"""{user}worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
{temps}
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 65;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port};
    root {self.root_dir};
    # /redirect/<path> answers 302 to /<path> (a hub's URL for a file on its CDN); /loop/ never ends.
    location /redirect/ {{ rewrite ^/redirect/(.*)$ /$1 redirect; }}
    location /loop/ {{ rewrite ^/loop/(.*)$ /loop/$1 redirect; }}
    # /nohead/<path> is /<path> for GET, and 403 for HEAD (as a presigned GET-only URL answers).
    location /nohead/ {{
      if ($request_method = HEAD) {{ return 403; }}
      alias {self.root_dir}/;
    }}
  }}
}}
"""

    def __enter__(self) -> str:
        if not os.access(self.nginx, os.X_OK):
            raise RuntimeError(f"{self.nginx} not found: apt-get install nginx-light (scripts/setup.sh --dev)")
        self._dir = tempfile.mkdtemp(prefix="chute-nginx-")
        last_error = ""
        for _ in range(5):  # a free port can be taken between choosing it and binding it: try another
            port = free_port()
            conf = Path(self._dir) / "nginx.conf"
            conf.write_text(self._config(port))
            self._proc = subprocess.Popen(
                [self.nginx, "-c", str(conf), "-p", self._dir, "-e", f"{self._dir}/error.log"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            if _wait_listening(port, self._proc, _START_TIMEOUT_S):
                self.url = f"http://127.0.0.1:{port}"
                return self.url
            last_error = self._stop_process()
        shutil.rmtree(self._dir, ignore_errors=True)
        raise RuntimeError(f"nginx did not start: {last_error}")

    @property
    def pid(self) -> int | None:
        """The nginx master's process id while it runs (its workers are its children)."""
        return self._proc.pid if self._proc is not None else None

    def _stop_process(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # graceful: finish the open responses, then exit
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_TIMEOUT_S)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        return err.strip()

    def __exit__(self, *exc) -> None:
        self._stop_process()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


class LatencyRelay:
    """A TCP relay on 127.0.0.1 in front of ``upstream_url`` that delays what clients send by ``latency_s``
    (so every request reaches the server that much later) and passes responses back unparsed, in large
    reads: the added latency of a remote store at a small fraction of :class:`FaultProxy`'s CPU, which
    matters to a benchmark whose readers share the machine's cores with the relay. HTTP/1.1 without
    pipelining (what libcurl and urllib send) sees exactly one added latency per request.

        with Nginx(root) as base_url, LatencyRelay(base_url, latency_s=0.02) as relay:
            chute.open(relay.url + "/train/")
    """

    def __init__(self, upstream_url: str, latency_s: float):
        parsed = urllib.parse.urlsplit(upstream_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"LatencyRelay: upstream must be an http:// URL, got {upstream_url!r}")
        self.upstream = (parsed.hostname, parsed.port or 80)
        self.latency_s = float(latency_s)
        self.url = ""
        self.connections = 0
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def __enter__(self) -> LatencyRelay:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._spawn(self._accept)
        return self

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=_START_TIMEOUT_S)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._sockets += [client, server]
            self._spawn(self._upstream, client, server)
            self._spawn(self._downstream, server, client)

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server: each read waits until latency_s after it arrived (order kept)."""
        try:
            while data := client.recv(1 << 16):
                due = time.monotonic() + self.latency_s
                while (left := due - time.monotonic()) > 0:
                    if self._stop.wait(left):
                        return
                server.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket) -> None:
        """Server to client, undelayed: through a pipe with splice(2) where the platform has it, so the
        bytes never enter this process (a benchmark's cores are shared with the relay: copying 200 MB
        through Python buffers cost a large part of one core), else by recv/sendall."""
        try:
            if hasattr(os, "splice"):
                read_end, write_end = os.pipe()
                try:
                    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
                except OSError:
                    pass  # the default pipe size (64 KiB) works, in more calls
                try:
                    while (n := os.splice(server.fileno(), write_end, 1 << 20)) > 0:
                        while n > 0 and (sent := os.splice(read_end, client.fileno(), n)) > 0:
                            n -= sent
                finally:
                    os.close(read_end)
                    os.close(write_end)
            else:
                while data := server.recv(1 << 20):
                    client.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, server)

    @staticmethod
    def _close(*sockets: socket.socket) -> None:
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        self._close(*sockets)
        for thread in threads:
            thread.join(timeout=_STOP_TIMEOUT_S)
        for s in sockets:
            s.close()


class RelayProcess:
    """A :class:`LatencyRelay` in a process of its own: its CPU and its threads' hold on the GIL stay out of
    the process under measurement (a benchmark's CPU time then counts the reader's work alone)."""

    def __init__(self, upstream_url: str, latency_s: float):
        self.upstream_url, self.latency_s = upstream_url, latency_s
        self.url = ""
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> RelayProcess:
        import sys

        code = (
            "import sys\n"
            "from chute.bench.loopback import LatencyRelay\n"
            "with LatencyRelay(sys.argv[1], float(sys.argv[2])) as relay:\n"
            "    print(relay.url, flush=True)\n"
            "    sys.stdin.read()\n"
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, self.upstream_url, str(self.latency_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")])),
            },
        )
        self.url = self._proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.__exit__()
            raise RuntimeError("the latency relay process did not start")
        return self

    @property
    def pid(self) -> int | None:
        """The relay process's id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def __exit__(self, *exc) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.stdin.close()
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _package_root() -> str:
    """The directory holding the chute package this module belongs to."""
    return str(Path(__file__).resolve().parents[2])


__all__ = ["LatencyRelay", "Nginx", "RelayProcess", "free_port"]
