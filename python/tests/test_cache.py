"""The node-local shard cache (chute._native.ShardCache, chute.cache, `chute cache ls|clear`): processes
sharing one cache directory, as the ranks of a job on one node do. Every wait is bounded by TIMEOUT and
fails the test instead of hanging it; no assertion depends on timing."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cache_child import payload

import chute
from chute import _native, cli
from chute.cache import open_shard_cache, recorded_limit, shard_cache_dir

HERE = Path(__file__).resolve().parent
TIMEOUT = 120  # seconds; generous for a loaded machine
KEY = "https://example.test/data/train-0003.tar#etag-7f3a"
SIZE = 3 * 2**20 + 17


class Child:
    """A process running cache_child.py, its output lines read by a thread (so every read has a timeout)."""

    def __init__(self, *args):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(chute.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "cache_child.py"), *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.pid = self.proc.pid
        self.output: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next(self) -> str | None:
        try:
            line = self._lines.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail(f"child {self.pid} printed nothing for {TIMEOUT} s; output so far: {self.output}")
        if line is not None:
            self.output.append(line)
        return line

    def expect(self, text: str) -> None:
        line = self._next()
        assert line == text, f"child {self.pid}: expected {text!r}, got {line!r}; output: {self.output}"

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        """The JSON the child printed last, once it exited with 0."""
        while self._next() is not None:
            pass
        assert self.proc.wait(timeout=TIMEOUT) == 0, "\n".join(self.output)
        return json.loads(next(line for line in reversed(self.output) if line.startswith("{")))

    def kill9(self) -> None:
        self.proc.kill()  # SIGKILL: no handler, no cleanup
        self.proc.wait(timeout=TIMEOUT)


@pytest.fixture
def children():
    """Starts children; kills whatever is still running at the end, pass or fail."""
    started: list[Child] = []

    def start(*args) -> Child:
        started.append(Child(*args))
        return started[-1]

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.kill9()
        c.proc.stdin.close()
        c.proc.stdout.close()


def wait_until_blocked_on_a_lock(pid: int) -> None:
    """Returns once `pid` waits for a flock (a "->" line of /proc/locks): the state the test sets up,
    reached whatever the scheduling. Bounded by TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and "FLOCK" in fields and str(pid) in fields:
                return
        time.sleep(0.01)
    pytest.fail(f"process {pid} never waited for the key's lock within {TIMEOUT} s")


def files(directory: Path, pattern: str) -> list[str]:
    """The cache's per-key files matching `pattern` (the hidden cache-wide ones left out)."""
    return sorted(p.name for p in directory.glob(pattern) if not p.name.startswith("."))


needs_proc_locks = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")


@needs_proc_locks
def test_two_processes_asking_for_one_key_run_exactly_one_fill(tmp_path, children):
    d, fills = tmp_path / "cache", tmp_path / "fills"
    a = children("one", d, 0, KEY, SIZE, fills, "--block")
    a.expect("filling")  # a holds the key's lock, half its bytes written
    b = children("one", d, 0, KEY, SIZE, fills)
    wait_until_blocked_on_a_lock(b.pid)  # b waits for a's fill
    assert files(d, "*.shard") == []  # nothing is served before the fill is complete
    a.send("go")
    ra, rb = a.result(), b.result()
    assert fills.read_text().split() == [str(a.pid)]
    want = hashlib.sha256(payload(KEY, SIZE)).hexdigest()
    assert ra["sha256"] == rb["sha256"] == want
    assert ra["complete"] and rb["complete"]
    assert (ra["stats"]["misses"], ra["stats"]["hits"], ra["stats"]["bytes_fetched"]) == (1, 0, SIZE)
    assert (rb["stats"]["misses"], rb["stats"]["hits"], rb["stats"]["waits"], rb["stats"]["bytes_fetched"]) == (
        0,
        1,
        1,
        0,
    )
    [entry] = _native.ShardCache(d).list()
    name = Path(entry["path"]).stem
    assert entry["key"] == KEY and files(d, "*") == [f"{name}.key", f"{name}.shard"]  # no temp, no lock left


def test_two_processes_filling_different_keys_keep_the_limit(tmp_path, children):
    d, limit, size, count = tmp_path / "cache", 35_000, 10_000, 8
    a = children("many", d, limit, "a", count, size)
    b = children("many", d, limit, "b", count, size)
    ra, rb = a.result(), b.result()
    cache = _native.ShardCache(d)
    entries = cache.list()
    assert cache.bytes() == sum(e["size"] for e in entries) <= limit
    # Each insert evicts down to the limit, under the cache-wide lock; an entry is its bytes and a checksum.
    assert len(entries) == limit // _native.ShardCache.entry_bytes(size)
    for e in entries:
        assert Path(e["path"]).read_bytes()[:size] == payload(e["key"], size)
    # Each of the 16 distinct shards was fetched once; all but the survivors were evicted once.
    assert ra["stats"]["misses"] + rb["stats"]["misses"] == 2 * count
    assert ra["stats"]["evictions"] + rb["stats"]["evictions"] == 2 * count - len(entries)
    assert files(d, "*.tmp") == [] and files(d, "*.lock") == []
    assert recorded_limit_of(d) == limit


def test_processes_sharing_keys_under_eviction_are_only_ever_served_whole_shards(tmp_path, children):
    # Three processes ask for the same 6 keys with room for 2: entries are evicted under readers, refetched
    # and filled concurrently. Each child checks the bytes of every shard it is served (cache_child.many).
    d, limit, size, count = tmp_path / "cache", 25_000, 10_000, 6
    procs = [children("many", d, limit, "shared", count, size) for _ in range(3)]
    results = [p.result() for p in procs]
    cache = _native.ShardCache(d)
    assert cache.bytes() <= limit
    for e in cache.list():
        assert Path(e["path"]).read_bytes()[:size] == payload(e["key"], size)
    assert sum(r["stats"]["hits"] + r["stats"]["misses"] for r in results) == 3 * count
    assert files(d, "*.tmp") == [] and files(d, "*.lock") == []


def recorded_limit_of(d: Path) -> int:
    return _native.ShardCache.recorded_limit(d)


@needs_proc_locks
def test_kill_9_mid_fill_leaves_no_entry_and_the_waiter_fills_cleanly(tmp_path, children):
    d, fills = tmp_path / "cache", tmp_path / "fills"
    a = children("one", d, 0, KEY, SIZE, fills, "--block")
    a.expect("filling")  # half its bytes received, in memory: nothing of them on disk
    assert files(d, "*.shard") == [] and files(d, "*.tmp") == []
    b = children("one", d, 0, KEY, SIZE, fills)
    wait_until_blocked_on_a_lock(b.pid)
    a.kill9()  # mid-fill: the kernel drops a's lock, b takes the key over
    rb = b.result()
    assert fills.read_text().split() == [str(a.pid), str(b.pid)]
    assert rb["complete"] and rb["sha256"] == hashlib.sha256(payload(KEY, SIZE)).hexdigest()
    assert (rb["stats"]["misses"], rb["stats"]["waits"], rb["stats"]["bytes_fetched"]) == (1, 1, SIZE)
    assert files(d, "*.tmp") == [] and files(d, "*.lock") == []
    assert _native.ShardCache(d).get(KEY, SIZE, lambda view: None).read() == payload(KEY, SIZE)  # a hit


def test_kill_9_mid_fill_with_no_waiter_leaves_nothing_the_next_fill_trips_on(tmp_path, children):
    d, fills = tmp_path / "cache", tmp_path / "fills"
    a = children("one", d, 0, KEY, SIZE, fills, "--block")
    a.expect("filling")
    a.kill9()
    cache = _native.ShardCache(d)
    assert files(d, "*.tmp") == [] and cache.list() == []
    calls = []

    def fill(view):
        calls.append(1)
        view[:] = payload(KEY, SIZE)

    assert cache.get(KEY, SIZE, fill).read() == payload(KEY, SIZE)
    assert len(calls) == 1
    assert cache.stats()["misses"] == 1


def test_a_python_fill_error_names_the_key_and_leaves_nothing(tmp_path):
    cache = _native.ShardCache(tmp_path / "c")

    def fill(view):
        view[:7] = b"partial"
        raise ConnectionResetError("reset by peer")

    with pytest.raises(OSError, match=r"cache fill of 'k1' failed: ConnectionResetError: reset by peer") as info:
        cache.get("k1", 100, fill)
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert files(tmp_path / "c", "*") == []
    assert cache.stats()["bytes_fetched"] == 0


def test_ctrl_c_inside_a_fill_stays_a_keyboard_interrupt(tmp_path):
    cache = _native.ShardCache(tmp_path)

    def fill(view):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.get("k", 10, fill)
    assert cache.list() == []


def test_an_entry_damaged_on_disk_is_named_and_fetched_again(tmp_path, capfd):
    cache = _native.ShardCache(tmp_path)
    good = payload("k", 5000)

    def fill(view):
        calls.append(1)
        view[:] = good

    calls = []
    assert not cache.get("k", 5000, fill).from_cache
    path = Path(cache.list()[0]["path"])
    with open(path, "r+b") as f:  # the entry rots on disk: same size, one byte changed
        f.seek(1234)
        f.write(bytes([good[1234] ^ 0xFF]))
    again = cache.get("k", 5000, fill)
    assert again.read() == good and not again.from_cache
    assert len(calls) == 2 and cache.stats()["damaged"] == 1
    err = capfd.readouterr().err
    assert f"the cache entry {path} fails its checksum" in err and "'k'" in err
    hit = cache.get("k", 5000, fill)
    assert hit.from_cache and hit.read(10, 5) == good[10:15]  # written again, good: a hit
    assert len(calls) == 2 and cache.stats()["hits"] == 1


def test_python_threads_asking_for_one_key_share_one_fill(tmp_path):
    cache = _native.ShardCache(tmp_path)
    calls, results = [], []

    def fill(view):
        calls.append(threading.get_ident())
        view[:] = payload("shared", 2**20)

    def ask():
        results.append(cache.get("shared", 2**20, fill).read())

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive()
    assert len(calls) == 1
    assert results == [payload("shared", 2**20)] * 6
    assert cache.stats()["misses"] == 1 and cache.stats()["hits"] == 5


def test_the_default_directory_is_under_chute_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "root"))
    assert shard_cache_dir() == str(tmp_path / "root" / "shards")
    assert shard_cache_dir(tmp_path / "x") == str(tmp_path / "x" / "shards")
    cache = open_shard_cache(limit="1MB")
    assert cache.dir == str(tmp_path / "root" / "shards") and cache.limit_bytes == 10**6
    assert recorded_limit() == 10**6
    with pytest.raises(ValueError, match="cache_limit"):
        open_shard_cache(limit="lots")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OSError, match="cannot create the cache directory .*file/shards"):
        open_shard_cache(tmp_path / "file")


def test_chute_cache_ls_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    assert f"nothing cached yet: {tmp_path / 'shards'} does not exist" in capsys.readouterr().out
    assert not (tmp_path / "shards").exists()  # ls created nothing
    cache = open_shard_cache(tmp_path, limit="1MiB")
    cache.get("s3://bucket/a.tar", 1536, lambda view: view.__setitem__(slice(None), payload("a", 1536)))
    cache.get("https://host/b.tar", 100, lambda view: view.__setitem__(slice(None), payload("b", 100)))
    assert cli.main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "s3://bucket/a.tar" in out and "https://host/b.tar" in out
    assert "1.6 kB" in out and "116 B" in out  # each with its 16-byte checksum
    assert "total: 1.7 kB in 2 entries; limit: 1.0 MB" in out
    assert str(tmp_path / "shards") in out
    assert cli.main(["cache", "ls", "--cache-dir", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {e["key"] for e in listed["entries"]} == {"s3://bucket/a.tar", "https://host/b.tar"}
    assert (listed["total_bytes"], listed["limit_bytes"]) == (1668, 2**20)
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path))  # the default directory, as chute.open's
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 2 entries (1.7 kB)" in capsys.readouterr().out
    assert cache.list() == [] and cache.bytes() == 0
    assert cli.main(["cache", "ls"]) == 0
    assert "total: 0 B in 0 entries" in capsys.readouterr().out
