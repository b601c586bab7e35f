"""Remote datasets end to end (docs/REMOTE.md): a packed dataset and WebDataset tars served over loopback by
nginx (HTTP, range requests), by moto's S3 emulator (with SigV4 authentication on), and through a fault proxy
that injects latency, resets, 503/429 answers and truncated bodies. Every remote run is compared with the
same dataset read from local disk: the same seed gives byte-identical batches. Every wait is bounded (the
loader's own timeouts, subprocess timeouts); no assertion depends on timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.fault_proxy import FaultProxy
from support.remote_data import assert_same, labels, make, run, write_tars

import chute
from chute import _native, remote
from chute.bench.loopback import Nginx
from chute.cache import open_shard_cache

N, PER_TAR = 160, 40  # samples; 4 tars of 40
TIMEOUT = 600  # seconds, for subprocesses (torchrun starts 3 Pythons importing torch): generous under load
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRETx"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """root/tars/train-000{0..3}.tar (WebDataset: %06d.jpg + %06d.cls, label = the sample's number) and
    root/packed/ (the same samples packed into many small shards)."""
    root = tmp_path_factory.mktemp("remote-data")
    tars = [str(p) for p in write_tars(root / "tars", N, PER_TAR)]
    summary = chute.pack(
        chute.TarDataset(tars, cache_dir=root / "tar-cache"), root / "packed", shard_size=8192, num_threads=1
    )
    assert summary.samples == N and summary.shards >= 8, summary
    return root


@pytest.fixture(scope="module")
def nginx(data):
    with Nginx(data) as base:
        yield base


@pytest.fixture(autouse=True)
def fresh_store():
    """Each test gets a new process-level object store (its own counters, the environment read anew)."""
    remote._store = None
    yield
    remote.configure()
    remote._store = None


def local(data, **kw):
    """The local dataset's batches for epochs 0 and 1: what every remote run must reproduce."""
    return run(make(chute.open(data / "packed"), **kw), (0, 1))


def shard_gets(proxy: FaultProxy) -> list[str]:
    return [r.path for r in proxy.requests if r.method == "GET" and r.path.endswith(".chute")]


# ---- 1. HTTP ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["shards", "samples"])
def test_http_batches_equal_local_and_cache_serves_the_second_open(data, nginx, tmp_path, order):
    kw = dict(order=order, shard_window=3) if order == "shards" else {}
    want = local(data, **kw)
    with FaultProxy(nginx) as proxy:
        url = f"{proxy.url}/packed/"
        ds = chute.open(url, cache_dir=tmp_path / "cache")
        loader = make(ds, **kw)
        assert_same(run(loader, (0, 1)), want)
        first = loader.stats()["remote"]
        assert first["shard_fetches"] > 0 and len(shard_gets(proxy)) > 0
        del loader, ds
        gets = len(shard_gets(proxy))
        # A second open with the same cache: no shard is downloaded again.
        ds = chute.open(url, cache_dir=tmp_path / "cache")
        loader = make(ds, **kw)
        assert_same(run(loader, (0, 1)), want)
        again = loader.stats()["remote"]
        assert again["shard_fetches"] == 0 and again["cache_hits"] > 0, again
        assert len(shard_gets(proxy)) == gets


def test_a_dataset_behind_redirects_equals_local(data, nginx, tmp_path):
    # Every request (the index's HEAD and GET, each shard's ranged GETs, the tars) answered by a 302 to the
    # file, as a hub answers with its CDN's URL.
    redirected = chute.open(nginx + "/redirect/packed/", cache_dir=tmp_path / "cache")
    assert_same(run(make(redirected), (0, 1)), local(data))
    tars = chute.open(nginx + "/redirect/tars/train-{0000..0003}.tar", cache_dir=tmp_path / "tar-cache")
    assert tars.targets == list(range(N))


def test_a_dataset_whose_head_is_refused_equals_local(data, nginx, tmp_path):
    # nginx answers HEAD under /nohead/ with 403, as a presigned GET-only URL does: the size and ETag come
    # from a GET of the first byte instead (the index; each tar, stat'ed together).
    refused = chute.open(nginx + "/nohead/packed/", cache_dir=tmp_path / "cache")
    assert_same(run(make(refused), (0, 1)), local(data))
    tars = chute.open(nginx + "/nohead/tars/train-{0000..0003}.tar", cache_dir=tmp_path / "tar-cache")
    assert tars.targets == list(range(N))
    with pytest.raises(FileNotFoundError):  # a missing object is still missing, not access denied
        chute.open(nginx + "/nohead/tars/train-9999.tar", cache_dir=tmp_path / "tar-cache")


# ---- 2. S3 -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3(data):
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    from support.s3_server import MotoServer

    with MotoServer(auth=True) as server:
        client = server.client()
        client.create_bucket(Bucket="bkt")
        for f in sorted((data / "packed").iterdir()):
            client.upload_file(str(f), "bkt", f"sets/train/{f.name}")
        yield server


def test_s3_batches_equal_local_with_sigv4(data, s3, tmp_path, monkeypatch):
    want = local(data, order="shards", shard_window=2)
    with FaultProxy(s3.endpoint) as proxy:
        for k, v in s3.env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        loader = make(chute.open("s3://bkt/sets/train/", cache_dir=tmp_path / "cache"), order="shards", shard_window=2)
        assert_same(run(loader, (0, 1)), want)
        assert proxy.requests
        for r in proxy.requests:
            auth = r.headers.get("authorization", "")
            assert auth.startswith("AWS4-HMAC-SHA256 Credential=" + s3.access_key), (r.path, auth)
            assert "x-amz-date" in r.headers and s3.secret_key not in auth


def test_s3_wrong_secret_is_a_clear_error_without_the_secret(s3, tmp_path, monkeypatch):
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with pytest.raises(OSError) as info:
        chute.open("s3://bkt/sets/train/", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert "403" in message and "s3://bkt/sets/train/" in message and "credentials" in message, message
    assert SECRET not in message and s3.secret_key not in message


# ---- 3. Faults -------------------------------------------------------------------------------------------
FAULTS = {
    "resets": dict(reset_every=5),
    "503": dict(status_every=(4, 503)),
    "429": dict(status_every=(4, 429)),
    "truncated": dict(truncate_every=5),
    "combined": dict(reset_every=7, status_every=(5, 503), truncate_every=6),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_are_retried_and_batches_stay_exact(data, nginx, tmp_path, fault):
    want = local(data, order="shards", shard_window=2)
    with FaultProxy(nginx, **FAULTS[fault]) as proxy:
        loader = make(chute.open(f"{proxy.url}/packed/", cache_dir=tmp_path / "cache"), order="shards", shard_window=2)
        got = run(loader, (0, 1))
        injected = proxy.faults.resets + proxy.faults.statuses + proxy.faults.truncations
    assert injected > 0
    assert_same(got, want)
    per_epoch = len(got) // 2
    for e in (0, 1):  # each sample exactly once per epoch (a label is its sample's number)
        assert sorted(labels(got[e * per_epoch : (e + 1) * per_epoch])) == list(range(N))
    assert loader.errors() == []
    if fault != "resets":
        # libcurl itself re-sends a request whose reused connection was reset before any answer, so a
        # reset need not reach the engine's retry count; a 503, 429 or short body always does.
        assert loader.stats()["remote"]["retries"] > 0


def test_storage_that_keeps_failing_is_a_resource_error_never_a_bad_sample(data, nginx, tmp_path):
    remote.configure(max_retries=1)
    with FaultProxy(nginx) as proxy:
        url = f"{proxy.url}/packed/"
        ds = chute.open(url, cache_dir=tmp_path / "cache")  # the index is fetched while the proxy works
        quarantine = tmp_path / "bad.jsonl"
        loader = make(ds, order="shards", shard_window=2, quarantine=quarantine, on_error="skip")
        proxy.fail_all = True
        with pytest.raises(chute.ResourceError) as info:
            run(loader)
    message = str(info.value)
    assert f"{proxy.url}/packed/" in message and ".chute" in message and "503" in message, message
    assert loader.errors() == []
    assert not quarantine.exists() or quarantine.read_text() == ""


# ---- 4. Exact resume -------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["shards", "samples"])
def test_remote_loader_resumes_exactly(nginx, tmp_path, order):
    kw = dict(order=order, shard_window=2) if order == "shards" else {}
    url = f"{nginx}/packed/"
    whole = make(chute.open(url, cache_dir=tmp_path / "cache"), **kw)
    whole.set_epoch(1)
    want = [(x.clone(), y.clone()) for x, y in whole]
    first = make(chute.open(url, cache_dir=tmp_path / "cache"), **kw)
    first.set_epoch(1)
    it = iter(first)
    head = [tuple(t.clone() for t in next(it)) for _ in range(4)]
    state = first.state_dict()
    del it, first
    remote._store = None  # a new process-level store, as a restarted job has
    second = make(chute.open(url, cache_dir=tmp_path / "other-cache"), **kw)
    second.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in second]
    assert_same(head + rest, want)


# ---- 5. Ranks --------------------------------------------------------------------------------------------
def test_two_ranks_share_one_cache_and_the_epoch(nginx, tmp_path):
    url = f"{nginx}/packed/"
    shares = []
    for rank in (0, 1):
        loader = make(
            chute.open(url, cache_dir=tmp_path / "cache"),
            order="shards",
            shard_window=2,
            rank=rank,
            world_size=2,
            batch_size=8,
        )
        shares.append(labels(run(loader)))
    assert len(shares[0]) == len(shares[1]) == N // 2
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == list(range(N))


def test_torchrun_two_ranks_over_http_with_a_shared_cache(data, nginx, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(
        textwrap.dedent("""
        import sys, torch.distributed as dist, chute
        from chute import _native
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        url, cache = sys.argv[1], sys.argv[2]
        source = chute.open(url, cache_dir=cache)
        local = chute.open(sys.argv[3])
        loader = chute.Loader(source, batch_size=8, shuffle=True, seed=9, order="shards", shard_window=2,
                              transforms=[chute.CenterCrop(16)], num_threads=1)
        mine = [(x.clone(), y.clone()) for x, y in loader]
        reference = chute.Loader(local, batch_size=8, shuffle=True, seed=9, order="shards", shard_window=2,
                                 transforms=[chute.CenterCrop(16)], num_threads=1, rank=rank, world_size=world)
        want = [(x.clone(), y.clone()) for x, y in reference]
        assert len(mine) == len(want) and all(
            (a == c).all() and (b == d).all() for (a, b), (c, d) in zip(mine, want)), "rank differs from local"
        everyone = [None] * world
        dist.all_gather_object(everyone, sum((y.tolist() for _, y in mine), []))
        if rank == 0:
            assert sorted(sum(everyone, [])) == list(range(len(local))), "shares are disjoint and cover the epoch"
            print("ok", [len(e) for e in everyone], flush=True)
        dist.destroy_process_group()
    """)
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(chute.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    local_dir = data / "packed"
    result = subprocess.run(
        command + [f"{nginx}/packed/", str(tmp_path / "cache"), str(local_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"ok [{N // 2}, {N // 2}]" in result.stdout
    assert _native.ShardCache(str(tmp_path / "cache" / "shards")).bytes() > 0


# ---- 6. Tar shards by URL --------------------------------------------------------------------------------
def test_tar_shards_by_url_equal_local_tars(data, nginx, tmp_path):
    tars = sorted(str(p) for p in (data / "tars").glob("*.tar"))
    local_ds = chute.open(str(data / "tars" / "*.tar"), cache_dir=tmp_path / "local-cache")
    remote_ds = chute.open(f"{nginx}/tars/train-{{0000..0003}}.tar", cache_dir=tmp_path / "cache")
    assert len(remote_ds) == len(local_ds) == N
    assert [os.path.basename(u) for u in remote_ds.paths] == [os.path.basename(t) for t in tars]
    for kw in ({}, dict(order="shards", shard_window=2)):
        assert_same(run(make(remote_ds, **kw), (0, 1)), run(make(local_ds, **kw), (0, 1)))
    assert labels(run(make(remote_ds, shuffle=False))) == list(range(N))


# ---- 7. Stats --------------------------------------------------------------------------------------------
def test_stats_report_remote_io_without_credentials(data, s3, tmp_path, monkeypatch):
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    loader = make(chute.open("s3://bkt/sets/train/", cache_dir=tmp_path / "cache"), order="shards", shard_window=2)
    run(loader)
    stats = loader.stats()
    io_stats = stats["remote"]
    for key in ("requests", "bytes", "retries", "latency_p50_s", "latency_p99_s", "shard_fetches", "cache_hits"):
        assert key in io_stats, key
    assert io_stats["requests"] > 0 and io_stats["bytes"] > 0 and io_stats["shard_fetches"] > 0
    assert 0 < io_stats["latency_p50_s"] <= io_stats["latency_p99_s"]
    text = str(stats)
    assert "remote:" in text and "requests" in text
    assert s3.secret_key not in text and s3.secret_key not in json.dumps(io_stats, default=str)


# ---- 8. A cache smaller than the dataset -----------------------------------------------------------------
def test_a_small_cache_still_completes_the_epoch_within_its_limit(data, nginx, tmp_path):
    shard_files = sorted((data / "packed").glob("*.chute"))
    assert len(shard_files) >= 8
    limit = 3 * max(_native.ShardCache.entry_bytes(f.stat().st_size) for f in shard_files) + 4096
    want = local(data, order="shards", shard_window=2)
    with FaultProxy(nginx) as proxy:
        ds = chute.open(f"{proxy.url}/packed/", cache_dir=tmp_path / "cache", cache_limit=limit)
        loader = make(ds, order="shards", shard_window=2, num_threads=1)
        got = run(loader, (0, 1))
        fetched = len(shard_gets(proxy))
    assert_same(got, want)
    assert fetched > len(shard_files)  # the second epoch had to fetch evicted shards again
    assert loader.stats()["remote"]["shard_fetches"] == fetched
    assert _native.ShardCache(str(tmp_path / "cache" / "shards")).bytes() <= limit
    # Nothing is mapped from the cache: its evicted entries hold no disk space behind the limit.
    assert str(tmp_path / "cache") not in Path("/proc/self/maps").read_text()


def test_credentials_in_a_url_never_show(nginx, tmp_path):
    """http://user:password@host/...: the password is sent (Basic auth) but never shown in a repr, the
    stats or an error."""
    remote.configure(max_retries=0)
    password = "hunter2pw"
    with FaultProxy(nginx) as proxy:
        url = proxy.url.replace("http://", f"http://alice:{password}@") + "/packed/"
        ds = chute.open(url, cache_dir=tmp_path / "cache")
        loader = make(ds, order="shards", shard_window=2)
        run(loader)
        assert all(r.headers.get("authorization", "").startswith("Basic ") for r in proxy.requests)
        texts = [repr(ds), repr(loader), str(loader.stats()), repr(dict(loader.stats()))]
        # A second dataset whose shards cannot be fetched: the error names the URL without the password.
        failing = chute.open(url, cache_dir=tmp_path / "other-cache")
        proxy.fail_all = True
        with pytest.raises(chute.ResourceError) as info:
            run(make(failing, order="shards", shard_window=2))
        texts.append(str(info.value))
        with pytest.raises(chute.ResourceError) as info:
            chute.open(url.replace("/packed/", "/elsewhere/"), cache_dir=tmp_path / "cache")
        texts.append(str(info.value))
    assert "127.0.0.1" in texts[-1] and "127.0.0.1" in texts[-2]
    # The cache's keys (shown by `chute cache ls`, stored beside each entry) hold no password either.
    keys = [e["key"] for e in open_shard_cache(tmp_path / "cache").list()]
    assert keys and any("/packed/" in k for k in keys)
    texts += keys + [p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*.key")]
    for text in texts:
        assert password not in text, text


def _thread_names() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that just ended
            pass
    return names


def test_remote_threads_are_named_and_end_with_their_dataset(nginx, tmp_path):
    import gc

    gc.collect()
    before = _thread_names().count("chute-fetch")
    dataset = chute.open(nginx + "/packed/", cache_dir=tmp_path / "cache")
    names = _thread_names()
    # What top -H, py-spy and gdb show: the prefetcher's walker and fetch threads, and the HTTP engine's.
    assert names.count("chute-fetch") == before + 8 and "chute-walk" in names and "chute-http" in names
    assert len(run(make(dataset))) > 0
    del dataset
    gc.collect()
    assert _thread_names().count("chute-fetch") == before  # joined when the dataset went (no leak)
