"""`chute pack`'s destination across runs (cpp/src/pack/detail/pack_destination.h): a rerun after a kill
leaves only the new pack, and a second pack into the same directory is refused while the first runs.

The kill is real: ``kill_at_rename.c`` (LD_PRELOAD, compiled here) SIGKILLs the packing process at its Nth
rename, between the renames of its shards and its index. The concurrent run is paused in its progress
callback (a file tells the test it is there, another lets it go on), so nothing here depends on timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import chute
from chute import cli

HERE = Path(__file__).resolve().parent
GUARD_S = 120  # a bound that fails a hung child, never a timing claim


@pytest.fixture(scope="module")
def kill_at_rename() -> Path:
    out = Path(tempfile.mkdtemp()) / "libkill_at_rename.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "kill_at_rename.c"), "-ldl"], check=True
    )
    return out


def _pack_in_child(src: Path, dst: Path, *, env: dict | None = None, pause: Path | None = None, **options):
    """chute.pack(src, dst, **options) in a child process, which prints the number of shards it wrote; with
    `pause`, the child writes `pause`.here at its first progress report and waits there until `pause`.go exists."""
    code = textwrap.dedent(f"""
        import os, sys, time
        import chute
        pause = {str(pause) if pause else None!r}
        def progress(samples, nbytes, total):
            if pause and not os.path.exists(pause + ".here"):
                open(pause + ".here", "w").close()
                while not os.path.exists(pause + ".go"):
                    time.sleep(0.01)
        summary = chute.pack({str(src)!r}, {str(dst)!r}, num_threads=1, progress=progress, **{options!r})
        print(summary.shards)
    """)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _pack_files(shards: int) -> set[str]:
    return {"index.chidx", *(f"shard-{i:05d}.chute" for i in range(shards))}


def test_a_pack_killed_at_a_rename_leaves_nothing_after_a_rerun_with_another_shard_size(
    folder, tmp_path, kill_at_rename
):
    dst = tmp_path / "packed"
    killed = _pack_in_child(
        folder, dst, env={"LD_PRELOAD": str(kill_at_rename), "CHUTE_KILL_AT_RENAME": "3"}, shard_size=4096
    )
    killed.communicate(timeout=GUARD_S)
    assert killed.returncode == -9, killed.stderr
    left = {p.name for p in dst.iterdir()}
    assert {"shard-00000.chute", "shard-00001.chute"} <= left and "index.chidx" not in left, left
    assert any(".tmp-" in name for name in left), left  # the killed run's temporaries
    (dst / "notes.txt").write_text("the user's own file")

    summary = chute.pack(folder, dst, shard_size="1MB", num_threads=1)
    assert summary.shards < 3  # fewer shards than the killed run had renamed and started
    assert {p.name for p in dst.iterdir()} == _pack_files(summary.shards) | {"notes.txt"}
    assert len(chute.open(str(dst))) == 36


def test_a_second_pack_into_the_same_directory_is_refused_naming_the_first(folder, tmp_path, capsys):
    dst = tmp_path / "packed"
    pause = tmp_path / "pause"
    first = _pack_in_child(folder, dst, pause=pause, shard_size=4096)
    deadline = time.monotonic() + GUARD_S
    while not Path(str(pause) + ".here").exists():
        assert first.poll() is None, first.communicate()[1]
        assert time.monotonic() < deadline, "the first pack never reported progress"
        time.sleep(0.01)

    # The CLI and the library: refused while the first holds the directory; nothing of the first touched.
    assert cli.main(["pack", str(folder), str(dst), "--shard-size", "1MB"]) == 2
    captured = capsys.readouterr()
    message = " ".join((captured.out + captured.err).split())  # as the terminal wrapped it
    assert f"is being written by chute pack (pid {first.pid} on " in message, message
    with pytest.raises(ValueError, match=rf"being written by chute pack \(pid {first.pid} on .*pack elsewhere"):
        chute.pack(folder, dst, num_threads=1)

    Path(str(pause) + ".go").touch()
    stdout, stderr = first.communicate(timeout=GUARD_S)
    assert first.returncode == 0, stderr
    shards = int(stdout.split()[-1])
    assert {p.name for p in dst.iterdir()} == _pack_files(shards)  # the first's pack, whole; no lock file
    assert len(chute.open(str(dst))) == 36
