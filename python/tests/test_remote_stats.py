"""The remote figures in a loader's statistics and in the doctor: which side of remote storage limits
(latency or bandwidth), the counters over a measured span, and the files the doctor probes."""

from __future__ import annotations

import os

import pytest

import chute
from chute.doctor.measure import stats_since
from chute.doctor.storage import dataset_files
from chute.stats import remote_evidence, remote_limit

IO = {
    "requests": 10,
    "bytes": 10_000_000,
    "retries": 1,
    "failures": 0,
    "in_flight": 2,
    "in_flight_limit": 8,
    "latency_p50_s": 0.040,
    "latency_p99_s": 0.100,
    "shard_fetches": 4,
    "cache_hits": 2,
    "reader_waits": 4,
    "reader_wait_s": 0.2,
}


def test_a_wait_of_about_one_request_is_latency():
    assert remote_limit({**IO, "reader_waits": 4, "reader_wait_s": 4 * 0.05}) == "latency"


def test_a_wait_of_many_requests_transfer_is_bandwidth():
    assert remote_limit({**IO, "reader_waits": 4, "reader_wait_s": 4 * 0.5}) == "bandwidth"


def test_no_waits_or_no_latency_measured_reads_as_latency():
    assert remote_limit({**IO, "reader_waits": 0, "reader_wait_s": 0.0}) == "latency"
    assert remote_limit({**IO, "latency_p50_s": 0.0}) == "latency"


def test_evidence_gives_the_figures():
    text = remote_evidence(IO)
    assert "4 reads waited for a shard (mean 50 ms)" in text
    assert "p50 40 ms" in text and "p99 100 ms" in text and "1 retries" in text


def _engine_snapshot(remote: dict) -> dict:
    return {
        "samples": 100,
        "samples_delivered": 100,
        "batches": 10,
        "elapsed_s": 1.0,
        "read_s": 0.9,
        "decode_s": 0.05,
        "transform_s": 0.05,
        "batch_s": 0.0,
        "worker_cpu_s": 0.1,
        "worker_idle_s": 0.0,
        "wait_s": 0.9,
        "fill_wait_s": 0.0,
        "consumer_s": 0.1,
        "threads": 2,
        "active_threads": 2,
        "prefetch": 2,
        "remote": remote,
    }


def test_stats_since_differences_the_remote_counters_and_keeps_the_figures_of_the_moment():
    before = _engine_snapshot(IO)
    later = {
        **IO,
        "requests": 30,
        "bytes": 50_000_000,
        "shard_fetches": 9,
        "reader_waits": 10,
        "reader_wait_s": 2.2,
        "latency_p50_s": 0.05,
        "in_flight": 5,
    }
    after = _engine_snapshot(later)
    for k in ("samples", "samples_delivered", "batches", "elapsed_s", "read_s", "decode_s", "transform_s"):
        after[k] = 2 * before[k]
    after["wait_s"], after["consumer_s"] = 1.8, 0.2
    out = stats_since(before, after)
    remote = out["remote"]
    assert remote["requests"] == 20 and remote["bytes"] == 40_000_000 and remote["shard_fetches"] == 5
    assert remote["reader_waits"] == 6 and remote["reader_wait_s"] == pytest.approx(2.0)
    assert remote["latency_p50_s"] == 0.05 and remote["in_flight"] == 5  # of the moment: as at the end
    if out.get("limit") == "storage":  # reads dominate: the engine's verdict names storage, then the remote side
        assert out["remote_limit"] == "bandwidth"  # 2.0 s over 6 waits against 50 ms requests
        assert "remote bandwidth" in out["verdict"]


def test_the_doctor_probes_a_packed_datasets_shards_not_its_keys(tmp_path):
    from PIL import Image

    for c in range(2):
        (tmp_path / "src" / f"c{c}").mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (16, 16), (c * 100, i * 50, 0)).save(tmp_path / "src" / f"c{c}" / f"{i}.jpg")
    chute.pack(str(tmp_path / "src"), str(tmp_path / "packed"), shard_size=4096)
    dataset = chute.open(str(tmp_path / "packed"))
    files = dataset_files(chute.Loader(dataset, batch_size=2, transforms=[chute.CenterCrop(8)]))
    assert files and all(os.path.isfile(f) for f in files)
    assert sorted(os.path.basename(f) for f in files) == sorted(name for name, *_ in dataset._native.shards())
