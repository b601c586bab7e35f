"""Remote shards streamed through memory (docs/REMOTE.md, "The cold epoch", "Tar shards"): the cache a policy
(none writes nothing to disk), tar shards opened from their indexes and streamed, a tar dataset ten times
larger than the disk cache, cached tars damaged on disk, presigned tar URLs, and the shards' memory counted in
the loader's max_memory. nginx serves the data on loopback; FaultProxy counts the requests. Every remote run is
compared with the same tars read from local disk. No assertion depends on timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.remote_data import assert_same, labels, make, run, write_tars

import chute
from chute import _native
from chute.bench.loopback import Nginx
from chute.resolve import _names_tars

N, PER_TAR = 120, 20  # samples; 6 tars of 20
TIMEOUT = 600  # seconds, for the subprocess (it imports torch): generous under load


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """root/plain/*.tar (no index beside them), root/indexed/*.tar (with the <tar>.chidx `chute index`
    writes), root/packed/ (the same samples packed), root/big/*.tar (10 tars of 4 samples with 1 MB of filler
    each: 40 MB) with their indexes."""
    root = tmp_path_factory.mktemp("stream-data")
    plain = write_tars(root / "plain", N, PER_TAR)
    indexed = write_tars(root / "indexed", N, PER_TAR)
    _native.write_tar_indexes([str(p) for p in indexed])
    chute.pack(
        chute.TarDataset([str(p) for p in plain], cache_dir=root / "tar-cache"),
        root / "packed",
        shard_size=8192,
        num_threads=1,
    )
    big = write_tars(root / "big", 40, 4, filler=1 << 20)
    _native.write_tar_indexes([str(p) for p in big])
    return root


@pytest.fixture(scope="module")
def nginx(root):
    with Nginx(root) as base:
        yield base


TARS = "train-{0000..0005}.tar"


def local_tars(root: Path, kind: str = "plain", **kw):
    """The local tars' batches for epochs 0 and 1: what every remote run must reproduce."""
    ds = chute.open(str(root / kind / "*.tar"), cache_dir=root / "tar-cache")
    return run(make(ds, **kw), (0, 1))


def tar_gets(proxy: FaultProxy) -> list[str]:
    return [r.path for r in proxy.requests if r.method == "GET" and r.path.split("?")[0].endswith(".tar")]


def files_under(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.exists() else []


# ---- cache="none" ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["packed", "tars"])
def test_cache_none_writes_nothing_to_disk_and_equals_local(root, nginx, tmp_path, kind):
    kw = dict(order="shards", shard_window=2)
    if kind == "packed":
        want = run(make(chute.open(root / "packed"), **kw), (0, 1))
        url = f"{nginx}/packed/"
    else:
        want = local_tars(root, **kw)
        url = f"{nginx}/plain/{TARS}"
    ds = chute.open(url, cache_dir=tmp_path / "cache", cache="none")
    loader = make(ds, **kw)
    assert_same(run(loader, (0, 1)), want)
    io = loader.stats()["remote"]
    assert io["cache"] == "none" and io["cache_hits"] == 0 and io["shard_fetches"] > 0
    assert files_under(tmp_path / "cache") == []  # no shard, no index, no lock


def test_cache_must_be_none_or_disk(root, nginx):
    with pytest.raises(ValueError, match="cache must be one of 'disk', 'none', got 'ram'"):
        chute.open(f"{nginx}/packed/", cache="ram")


# ---- tar shards: opened from their indexes, streamed --------------------------------------------------------
def test_tars_with_indexes_open_without_fetching_a_tar(root, nginx, tmp_path):
    want = local_tars(root, "indexed", order="shards", shard_window=2)
    with FaultProxy(nginx) as proxy:
        ds = chute.open(f"{proxy.url}/indexed/{TARS}", cache_dir=tmp_path / "cache")
        assert len(ds) == N and tar_gets(proxy) == []  # the sidecars said it all
        sidecars = [r.path for r in proxy.requests if r.method == "GET" and r.path.endswith(".chidx")]
        assert len(sidecars) == 6
        assert_same(run(make(ds, order="shards", shard_window=2), (0, 1)), want)


def test_tars_without_an_index_are_streamed_once_and_the_node_keeps_what_it_learnt(root, nginx, tmp_path, capfd):
    with FaultProxy(nginx) as proxy:
        url = f"{proxy.url}/plain/{TARS}"
        ds = chute.open(url, cache_dir=tmp_path / "cache")
        assert sorted(tar_gets(proxy)) == sorted(f"/plain/train-{t:04d}.tar" for t in range(6))  # one stream each
        assert "6 of the 6 tars have no index" in capfd.readouterr().err
        assert labels(run(make(ds, shuffle=False))) == list(range(N))
        del ds
        before = len(tar_gets(proxy))
        again = chute.open(url, cache_dir=tmp_path / "cache")
        assert len(tar_gets(proxy)) == before and len(again) == N  # the learnt indexes: nothing fetched
        assert "have no index" not in capfd.readouterr().err


@pytest.mark.parametrize("order", ["shards", "sample"])
def test_remote_tars_give_the_local_tars_batches_and_resume_exactly(root, nginx, tmp_path, order):
    kw = dict(order=order, shard_window=2) if order == "shards" else {}
    want = local_tars(root, "indexed", **kw)
    url = f"{nginx}/indexed/{TARS}"
    assert_same(run(make(chute.open(url, cache_dir=tmp_path / "cache"), **kw), (0, 1)), want)
    first = make(chute.open(url, cache="none"), **kw)
    first.set_epoch(1)
    it = iter(first)
    head = [tuple(t.clone() for t in next(it)) for _ in range(3)]
    state = first.state_dict()
    del it, first
    second = make(chute.open(url, cache="none"), **kw)
    second.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in second]
    assert_same(head + rest, want[len(want) // 2 :])


def test_two_ranks_take_equal_shares_of_remote_tars(root, nginx):
    url = f"{nginx}/indexed/{TARS}"
    shares = [
        labels(run(make(chute.open(url, cache="none"), order="shards", shard_window=2, rank=r, world_size=2)))
        for r in (0, 1)
    ]
    assert len(shares[0]) == len(shares[1]) == N // 2
    assert sorted(shares[0] + shares[1]) == list(range(N))


def test_a_tar_dataset_ten_times_the_cache_streams_an_epoch_within_max_memory(root, nginx, tmp_path):
    """42 MB of tars through a disk cache of a tenth of that and a loader with max_memory of 24 MB: the epoch completes,
    every sample once, and the process's resident memory grows by at most max_memory and a constant."""
    script = tmp_path / "big.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys, threading, time
        import torch, chute

        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

        url, cache, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
        base = rss()
        source = chute.open(url, cache_dir=cache, cache_limit=limit)
        loader = chute.Loader(source, batch_size=4, shuffle=True, seed=3, order="shards", shard_window=1,
                              transforms=[chute.CenterCrop(16)], num_threads=1, max_memory=24 << 20)
        peak, done = [rss()], []

        def watch():
            while not done:
                peak.append(rss())
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        seen = [int(v) for _, y in loader for v in y]
        done.append(1)
        watcher.join()
        cache_bytes = chute._native.ShardCache(cache + "/shards").bytes()
        print(json.dumps({"seen": sorted(seen), "grew": max(peak) - base, "cache_bytes": cache_bytes,
                          "io": source.remote_stats()}), flush=True)
    """)
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(chute.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    tars = sorted((root / "big").glob("*.tar"))
    big, limit = sum(p.stat().st_size for p in tars), sum(p.stat().st_size for p in tars) // 10
    assert big >= 40 << 20
    result = subprocess.run(
        [sys.executable, str(script), f"{nginx}/big/train-{{0000..0009}}.tar", str(tmp_path / "cache"), str(limit)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["seen"] == list(range(40))
    # Within the limit, or one tar alone (an entry larger than the limit is kept alone: shard_cache.h).
    assert out["cache_bytes"] <= max(limit, _native.ShardCache.entry_bytes(max(p.stat().st_size for p in tars)))
    assert out["io"]["memory_limit"] <= 24 << 20 and out["io"]["shard_fetches"] >= 10
    # max_memory, and a constant for the allocator, decode scratch and thread stacks; the dataset is 40 MB.
    assert out["grew"] < (24 << 20) + (12 << 20), out["grew"]


# ---- the disk cache: damaged entries ------------------------------------------------------------------------
def test_a_cached_tar_damaged_on_disk_is_named_and_fetched_again(root, nginx, tmp_path, capfd):
    want = local_tars(root, "indexed")
    url = f"{nginx}/indexed/{TARS}"
    assert_same(run(make(chute.open(url, cache_dir=tmp_path / "cache")), (0, 1)), want)  # fills the cache
    [entry] = [e for e in _native.ShardCache(tmp_path / "cache" / "shards").list() if "train-0001.tar" in e["key"]]
    with tarfile.open(root / "indexed" / "train-0001.tar") as tar:
        image = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    with open(entry["path"], "r+b") as f:  # one byte of an image changes on disk: same size
        f.seek(image.offset_data + image.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x55]))
    capfd.readouterr()
    ds = chute.open(url, cache_dir=tmp_path / "cache")
    assert_same(run(make(ds), (0, 1)), want)  # never the damaged pixels
    err = capfd.readouterr().err
    assert f"the cache entry {entry['path']} fails its checksum" in err and "train-0001.tar" in err, err
    io = ds.remote_stats()
    assert io["shard_fetches"] == 1 and io["damaged"] == 1  # that tar alone came from storage again


# ---- URLs ---------------------------------------------------------------------------------------------------
SIGNED = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Signature=abc123"


def test_a_presigned_tar_url_is_a_tar(root, nginx, tmp_path):
    assert _names_tars("https://b.s3.amazonaws.com/shards/train-0000.tar" + SIGNED)
    assert not _names_tars("https://b.s3.amazonaws.com/train/" + SIGNED)
    assert _names_tars("s3://b/train-000?.tar") and not _names_tars("s3://b/train.tar?")  # keys are literal
    local = make(chute.open(str(root / "plain" / "train-0002.tar"), cache_dir=root / "tar-cache"))
    ds = chute.open(f"{nginx}/plain/train-0002.tar{SIGNED}", cache_dir=tmp_path / "cache")
    assert isinstance(ds, chute.TarDataset) and len(ds) == PER_TAR
    assert_same(run(make(ds), (0, 1)), run(local, (0, 1)))
    assert "abc123" not in repr(ds.paths) and all("abc123" not in e["key"] for e in _cache_list(tmp_path))
    with pytest.raises(ValueError, match="query string"):  # a packed dataset is a prefix, never a signed object
        chute.PackedDataset(f"{nginx}/packed/index.chidx{SIGNED}")


def _cache_list(tmp_path: Path) -> list[dict]:
    return _native.ShardCache(tmp_path / "cache" / "shards").list()


# ---- memory -------------------------------------------------------------------------------------------------
def test_the_loader_counts_the_shards_memory_in_max_memory(root, nginx):
    ds = chute.open(f"{nginx}/packed/", cache="none")
    loader = make(ds, order="shards", shard_window=2, max_memory=64 << 20)
    assert 0 < ds.remote_stats()["memory_limit"] <= 64 << 20
    run(loader)
    assert 0 < ds.remote_stats()["buffers"] <= 6  # two windows of two shards being read, one ahead
    shard = max(p.stat().st_size for p in (root / "packed").glob("*.chute"))
    with pytest.raises(ValueError, match="does not hold both prefetch 1's batch buffers"):
        make(ds, order="shards", shard_window=2, max_memory=shard)
