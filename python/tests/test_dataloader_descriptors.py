"""chute.DataLoader's generic path (worker processes, the shared-memory arena) out of file descriptors.

Running out of descriptors is the machine talking: whatever the moment (the arena's files, the workers'
queues, a batch's mapping), the user gets one error that names ``ulimit -n``, no worker is left running,
no descriptor is leaked, and nothing else is printed (no "Exception ignored" from a half-built iterator). A mapping the arena keeps
only for speed is given back before that: with a single spare descriptor every batch still arrives.

Each limit is set in a child process (``test_resources._child``), so that this process keeps its descriptors.
"""

from __future__ import annotations

from test_resources import FILL_DESCRIPTORS, _child

# A plain map-style dataset: the generic path. The child records what the garbage collector and __del__
# would print (sys.unraisablehook) instead of letting it go to stderr.
_PRELUDE = """
    import gc, json, multiprocessing, os, resource, sys
    import torch
    import chute

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.full((3, 8, 8), float(i)), i

    unraisable = []
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value} in {u.object!r}")
    HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def open_fds():
        return [int(fd) for fd in os.listdir("/proc/self/fd")]

    def left_running():
        # Workers still running once given a minute to exit: torch's shutdown, under load, may terminate a
        # worker and return before it is gone, so this waits (the bound fails a hang, it is no timing claim).
        for p in multiprocessing.active_children():
            p.join(60)
        return multiprocessing.active_children()
"""


def test_out_of_descriptors_at_any_point_of_start_is_one_error_naming_ulimit_and_leaves_no_worker():
    result = _child(
        _PRELUDE
        + """
    outcomes = []
    base = len(open_fds())  # dense from 0 in a fresh child: the limit counts descriptors
    for extra in range(0, 48, 2):  # every step of the start: the arena's files, each worker, the first batches
        before = set(open_fds())
        loader = chute.DataLoader(Squares(), batch_size=4, num_workers=2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (base + extra, HARD))
        try:
            outcomes.append({"extra": extra, "batches": sum(1 for _ in loader)})
        except Exception as e:  # noqa: BLE001  (the test asserts on the type and message)
            text = "\\n".join([str(e), *getattr(e, "__notes__", [])])
            outcomes.append({"extra": extra, "type": type(e).__name__, "error": text})
            del e
        resource.setrlimit(resource.RLIMIT_NOFILE, (HARD, HARD))
        del loader
        gc.collect()
        outcomes[-1]["children"] = len(left_running())
        gc.collect()  # the reaped workers' Process objects, which hold their sentinel pipes
        outcomes[-1]["leaked"] = sorted(set(open_fds()) - before)
    print(json.dumps({"outcomes": outcomes, "unraisable": unraisable}))
    """
    )
    outcomes = result["outcomes"]
    assert result["unraisable"] == [], result["unraisable"]
    summary = [(o["extra"], o.get("batches", o.get("error"))) for o in outcomes]
    assert any("error" in o for o in outcomes) and any(o.get("batches") == 16 for o in outcomes), str(summary)
    for o in outcomes:
        assert o["children"] == 0 and o["leaked"] == [], o
        if "error" in o:
            assert "ulimit -n" in o["error"], o
        else:
            assert o["batches"] == 16, o


def test_one_spare_descriptor_is_enough_once_started_and_none_is_one_error_naming_ulimit():
    result = _child(
        _PRELUDE
        + FILL_DESCRIPTORS
        + """
    def fill_to(limit):
        # Every descriptor number below `limit` in use: the process can open no other file.
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, HARD))
        return fill_descriptors()

    loader = chute.DataLoader(Squares(), batch_size=4, num_workers=2)
    it = iter(loader)
    first = next(it)  # the workers run, the first slot is mapped
    held = fill_to(max(open_fds()) + 1)
    os.close(held.pop())
    del first
    spare = {"batches": 1 + sum(1 for _ in it)}
    for fd in held:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (HARD, HARD))

    it = iter(loader)
    first = next(it)
    held = fill_to(max(open_fds()) + 1)
    none = {"batches": 1}
    try:
        for _ in it:
            none["batches"] += 1
    except Exception as e:  # noqa: BLE001
        none.update(type=type(e).__name__, error=str(e), is_oserror=isinstance(e, OSError))
        del e
    for fd in held:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (HARD, HARD))
    del it, first, loader
    gc.collect()
    print(json.dumps({"spare": spare, "none": none, "unraisable": unraisable, "children": len(left_running())}))
    """
    )
    assert result["spare"] == {"batches": 16}, result
    none = result["none"]
    assert none.get("type") == "ResourceError" and none["is_oserror"], result
    assert "ulimit -n" in none["error"] and "Too many open files" in none["error"], none
    assert result["unraisable"] == [] and result["children"] == 0, result
