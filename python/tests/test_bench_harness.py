"""chute.bench.harness, the one timing loop of the benchmarks and the doctor: epochs, interleaving, medians
and ranges. A fake clock drives every figure, so nothing here depends on the machine's speed or load."""

from __future__ import annotations

import pytest
import torch

from chute._batches import batch_samples
from chute.bench.harness import Contender, Summary, Timing, interleave, time_call, time_epoch


class FakeClock:
    """Advances only when told: ``tick(s)`` from inside the code under test."""

    def __init__(self, start: float = 100.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


def batches(clock: FakeClock, sizes, seconds_each: float):
    """A loader whose every batch takes ``seconds_each`` of fake time to arrive; ``(images, labels)``."""
    for n in sizes:
        clock.tick(seconds_each)
        yield torch.zeros(n, 3), torch.arange(n)


def test_time_epoch_counts_the_samples_received_over_the_fake_seconds():
    clock, cpu = FakeClock(), FakeClock(5.0)
    t = time_epoch(batches(clock, [4, 4, 2], 0.5), clock=clock, cpu_clock=cpu, on_batch=lambda b: cpu.tick(0.25))
    assert (t.items, t.batches, t.seconds, t.cpu_seconds) == (10, 3, 1.5, 0.75)
    assert t.rate == pytest.approx(10 / 1.5)
    assert t.rate_per_cpu_second == pytest.approx(10 / 0.75)


def test_time_epoch_times_the_consumer_step_and_starts_at_iter():
    clock = FakeClock()

    class Loader:  # its iter() pays start-up, which the epoch includes
        def __iter__(self):
            clock.tick(2.0)
            return batches(clock, [8, 8], 1.0)

    t = time_epoch(Loader(), clock=clock, on_batch=lambda b: clock.tick(0.5))
    assert (t.items, t.seconds) == (16, 2.0 + 2 * 1.0 + 2 * 0.5)


def test_time_epoch_keeps_the_first_batch_apart_from_the_rest_of_the_pass():
    clock, cpu = FakeClock(), FakeClock(5.0)

    def opened_then_read():  # a pass that opens its dataset first: the opening is its start-up
        clock.tick(3.0)
        cpu.tick(1.0)
        for n in (4, 4, 2):
            clock.tick(0.5)
            cpu.tick(0.25)
            yield torch.zeros(n, 3), torch.arange(n)

    t = time_epoch(opened_then_read(), clock=clock, cpu_clock=cpu)
    assert (t.items, t.batches, t.seconds, t.cpu_seconds) == (10, 3, 4.5, 1.75)
    assert (t.first.items, t.first.batches, t.first.seconds, t.first.cpu_seconds) == (4, 1, 3.5, 1.25)
    rest = t.after_first()
    assert (rest.items, rest.batches, rest.seconds, rest.cpu_seconds) == (6, 2, 1.0, 0.5)
    assert time_epoch(batches(clock, [2], 1.0), clock=clock).after_first().cpu_seconds is None
    with pytest.raises(ValueError, match="no first batch"):
        time_epoch([], clock=clock).after_first()


def test_time_epoch_skips_warm_up_batches_before_the_clock_starts():
    clock = FakeClock()
    t = time_epoch(batches(clock, [4, 4, 2, 2], 1.0), skip=2, clock=clock)
    assert (t.items, t.batches, t.seconds) == (4, 2, 2.0)
    assert time_epoch(batches(clock, [4], 1.0), skip=3, clock=clock).batches == 0  # fewer than skip: nothing


def test_time_epoch_stops_after_max_batches_without_taking_another():
    clock = FakeClock()
    taken = []

    def source():
        for i in range(10):
            taken.append(i)
            clock.tick(1.0)
            yield torch.zeros(3, 1), torch.zeros(3)

    t = time_epoch(source(), max_batches=4, clock=clock)
    assert (t.batches, t.items, t.seconds, taken) == (4, 12, 4.0, [0, 1, 2, 3])
    assert time_epoch(source(), max_batches=0, clock=clock).batches == 0


def test_time_epoch_counts_with_the_given_function_and_empty_epochs_have_no_rate():
    clock = FakeClock()
    t = time_epoch(batches(clock, [5, 5], 1.0), clock=clock, count=lambda b: 1)
    assert (t.items, t.batches) == (2, 2)
    empty = time_epoch([], clock=clock)
    assert (empty.items, empty.seconds, empty.rate) == (0, 0.0, 0.0)
    assert empty.rate_per_cpu_second != empty.rate_per_cpu_second  # nan: no CPU clock


@pytest.mark.parametrize(
    "batch, n",
    [
        (torch.zeros(7, 2), 7),
        ((torch.zeros(3, 2), torch.zeros(3)), 3),
        ({"x": torch.zeros(5), "y": [torch.zeros(9)]}, 5),
        ([[torch.zeros(2, 2)]], 2),
        (torch.tensor(1.0), 1),
        ("text", 1),
    ],
)
def test_batch_samples_is_the_leading_dimension_of_the_first_tensor(batch, n):
    assert batch_samples(batch) == n


def test_time_call_times_one_call_and_keeps_its_count():
    clock = FakeClock()

    def scan():
        clock.tick(0.25)
        return 1000

    t = time_call(scan, clock=clock)
    assert (t.items, t.seconds, t.rate) == (1000, 0.25, 4000)


def test_summary_is_the_median_and_the_range():
    s = Summary.of([3.0, 1.0, 10.0, 2.0])
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)
    assert Summary.of([4.0]) == Summary(4.0, 4.0, 4.0, 1)
    assert s.range_text(".1f") == "1.0-10.0"
    empty = Summary.of([])
    assert empty.n == 0 and empty.median != empty.median


def test_interleave_warms_each_contender_up_then_alternates_round_by_round():
    order, steps = [], []

    def contender(name, rates, warm=True):
        rates = iter(rates)

        def measure():
            order.append(name)
            return Timing.of_rate(next(rates))

        return Contender(name, measure, warm=warm)

    a = contender("a", [0.0, 10.0, 30.0, 20.0])  # first value: the warm-up, discarded
    b = contender("b", [0.0, 5.0, 6.0, 4.0])
    ref = contender("ref", [1.0, 2.0, 3.0], warm=False)
    interleave([a, b, ref], rounds=3, on_step=steps.append)
    assert order == ["a", "b", "a", "b", "ref", "a", "b", "ref", "a", "b", "ref"]
    assert steps[:3] == ["warm-up: a", "warm-up: b", "round 1/3: a"] and steps[-1] == "round 3/3: ref"
    assert a.rates == [10.0, 30.0, 20.0] and a.summary == Summary(20.0, 10.0, 30.0, 3) and a.rate == 20.0
    assert b.rate == 5.0 and ref.rate == 2.0
    assert a.summarize(lambda t: t.rate * 2).median == 40.0


def test_interleave_with_several_warmups_and_bad_arguments():
    order = []
    c = Contender("c", lambda: order.append("c") or Timing(1, 1.0))
    d = Contender("d", lambda: order.append("d") or Timing(2, 1.0))
    interleave([c, d], rounds=1, warmup=2)
    assert order == ["c", "d", "c", "d", "c", "d"] and c.seconds.median == 1.0 and d.rate == 2.0
    with pytest.raises(ValueError, match="rounds"):
        interleave([c], rounds=0)
    with pytest.raises(ValueError, match="warmup"):
        interleave([c], rounds=1, warmup=-1)


def test_chute_bench_rows_are_medians_of_interleaved_rounds(folder, tmp_path, capsys):
    """``chute bench`` end to end on the harness: every row (loaders, decode references, reads of a packed
    copy) has one rate per round and reports their median."""
    import json

    import chute
    from chute import cli

    packed = tmp_path / "packed"
    chute.pack(chute.ImageFolder(folder), packed)
    rc = cli.main(
        [
            "bench",
            "--root",
            str(folder),
            "--rounds",
            "2",
            "--batch-size",
            "8",
            "--workers",
            "0",
            "--threads",
            "1",
            "--source",
            str(packed),
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    kinds = [r["kind"] for r in out["results"]]
    assert kinds == ["chute", "chute", "dataloader", "reference", "reference", "read", "read"]
    for r in out["results"]:
        assert len(r["rates"]) == 2 and all(x > 0 for x in r["rates"]), r
        assert r["img_per_s"] == pytest.approx(Summary.of(r["rates"]).median)
    assert out["results"][2]["ratio_to_best_dataloader"] == pytest.approx(1.0)


def test_chute_bench_remote_rows_and_cpu_accounting(folder, capsys):
    """``chute bench --remote`` end to end on a small folder (nginx and the latency relay on loopback): every
    row has a rate per round, and each cold round reports its first batch and the CPU spent beside the
    decode (chute's I/O threads, the servers, the cache's writeback)."""
    import json
    import os

    from chute import cli
    from chute.bench.loopback import NGINX

    if not os.access(NGINX, os.X_OK):
        pytest.skip("nginx is not installed (scripts/setup.sh --dev)")
    rc = cli.main(
        ["bench", "--remote", "--root", str(folder), "--rounds", "2", "--batch-size", "8", "--threads", "1"]
        + ["--latency-ms", "5", "--json"]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in out["rows"]]
    assert names[:9] == (
        [
            "chute, local shards",
            "chute, remote shards, cold",
            "chute, remote shards, cold, after its first batch",
            "chute, remote shards, cold, cache='none'",
            "chute, remote shards, cold, cache='none', after its first batch",
            "chute, remote shards, warm disk cache",
            "chute, local tars",
            "chute, remote tars, cold",
            "chute, remote tars, cold, after its first batch",
        ]
    )
    assert names[9:] in ([], ["WebDataset + DataLoader, remote"])  # that row needs webdataset
    for r in out["rows"]:
        assert len(r["rates"]) == 2 and all(x > 0 for x in r["rates"]), r
    assert out["images"] == 36 and out["latency_ms"] == 5
    for kind in ("shards", "tars", "shards, cache=none"):
        for key in ("first_batch_s", "first_batch_fetched", "servers_cpu_s", "writeback_cpu_s"):
            assert len(out[key][kind]) == 2 and all(v >= 0 for v in out[key][kind]), (key, out[key])
        # All the bytes received, the indexes' too: here one batch needs every shard, so a little over 1.
        assert all(0 < f < 1.1 for f in out["first_batch_fetched"][kind]), (kind, out["first_batch_fetched"])
        assert len(out["thread_cpu_s"][kind]) == 2 and "chute-worker" in out["thread_cpu_s"][kind][0]
        assert out["same_batches"][kind.split(",")[0]] is True
    assert out["io"]["requests"] > 0 and out["io"]["retries"] == 0


def test_chute_bench_remote_without_nginx_says_so_in_one_line(folder, capsys, monkeypatch):
    """``chute bench --remote`` serves the dataset with nginx (chute.bench.loopback): without it, one line
    naming what to install, and nothing packed."""
    from chute import cli
    from chute.bench import loopback

    monkeypatch.setattr(loopback, "NGINX", str(folder / "no-nginx-here"))
    assert cli.main(["bench", "--remote", "--root", str(folder)]) == 2
    out = capsys.readouterr().out
    assert "nginx" in out and "apt-get install nginx-light" in out and len(out.strip().splitlines()) == 1
