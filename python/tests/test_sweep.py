"""chute bench --sweep: the grid, the knee, the head-to-head, JSON and the plot."""

from __future__ import annotations

import json

import pytest

from chute import cli
from chute.bench.run import available_cores
from chute.bench.sweep import Config, SweepResult, grid, worker_counts


def test_grid_is_the_one_users_search():
    assert worker_counts(2) == [0, 1, 2, 4]
    assert worker_counts(3) == [0, 1, 2, 3, 6]
    g = grid(2)
    dl = [c for c in g if c.family == "dataloader"]
    # workers=0 has no prefetch_factor: 2 pin settings; 1, 2, 4 workers: 2 pin x 2 prefetch_factor.
    assert len(dl) == 2 + 3 * 4
    assert {(c.pin_memory, c.prefetch) for c in dl if c.workers == 0} == {(False, None), (True, None)}
    assert {(c.pin_memory, c.prefetch) for c in dl if c.workers == 4} == {(p, f) for p in (False, True) for f in (2, 4)}
    ch = [c for c in g if c.family == "chute"]
    assert {(c.workers, c.prefetch) for c in ch} == {(t, p) for t in (1, 2, 4) for p in (2, 4)} | {("auto", "auto")}


def _result(rates: dict[tuple[str, object, object], float]) -> SweepResult:
    configs = [Config(f, w, None, p, rates=[r]) for (f, w, p), r in rates.items()]
    auto = next(c for c in configs if c.workers == "auto")
    manual = max((c for c in configs if c.family == "chute" and c.workers != "auto"), key=lambda c: c.rate)
    return SweepResult(
        "train", 100, 8, 2, 0.0, configs, manual, auto, {"manual": 100.0, "auto": 96.0, "manual_config": manual.name}
    )


def test_knee_is_the_fewest_workers_within_95_percent_of_the_best():
    r = _result(
        {
            ("dataloader", 0, None): 100,
            ("dataloader", 1, 2): 300,
            ("dataloader", 1, 4): 380,
            ("dataloader", 2, 2): 400,
            ("dataloader", 4, 2): 390,
            ("chute", 1, 2): 700,
            ("chute", 2, 2): 1300,
            ("chute", 4, 2): 1240,
            ("chute", "auto", "auto"): 1290,
        }
    )
    assert r.best("dataloader").rate == 400
    assert r.knee("dataloader") == 1  # 380 >= 0.95 * 400, with prefetch_factor=4
    assert r.knee("chute") == 2  # 700 is not within 95% of 1300
    assert r.best("chute").workers == 2  # auto is not a manual setting
    assert r.auto_ratio() == pytest.approx(0.96)


def test_sweep_cli_json_and_plot(folder, tmp_path, capsys):
    png = tmp_path / "sweep.png"
    rc = cli.main(
        ["bench", "--root", str(folder), "--sweep", "--rounds", "1", "--batch-size", "8", "--json", "--plot", str(png)]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["configs"]]
    assert len(names) == len(set(names)) == len(grid(out["cores"]))
    assert all(c["img_per_s"] > 0 and len(c["rates"]) == 1 for c in out["configs"])
    counts = worker_counts(out["cores"])
    assert out["knee"]["dataloader"] in counts and out["knee"]["chute"] in counts
    h = out["head_to_head"]
    assert h["manual"] > 0 and h["auto"] > 0 and out["auto_vs_best_manual"] == pytest.approx(h["auto"] / h["manual"])
    assert 1 <= h["auto_active_threads"] <= out["cores"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chute_only_sweep_with_a_slow_consumer(folder, capsys):
    rc = cli.main(
        [
            "bench",
            "--root",
            str(folder),
            "--sweep",
            "--chute-only",
            "--rounds",
            "1",
            "--batch-size",
            "12",
            "--consumer-ms",
            "20",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    table = out.split("knee")[0]
    assert "consumer step 20 ms" in table and "DataLoader" not in table
    assert "knee (fewest workers within 95% of the family's best): chute" in out
    rows = [line for line in table.splitlines() if line.startswith("│ chute")]
    assert len(rows) == len([c for c in grid(available_cores()) if c.family == "chute"])


def test_sweep_options_need_sweep(folder, capsys):
    assert cli.main(["bench", "--root", str(folder), "--plot", "x.png"]) == 2
    assert cli.main(["bench", "--root", str(folder), "--consumer-ms", "5"]) == 2
    assert cli.main(["bench", "--root", str(folder), "--chute-only"]) == 2
    assert "go with --sweep" in capsys.readouterr().out
