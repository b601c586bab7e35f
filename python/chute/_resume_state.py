"""The resume state of chute.Loader and chute.ray.RemoteLoader: one format, written and checked here, so
that a state taken by either loader resumes the other (docs/ORDER.md, "Resume").

A rank's state is a small JSON-serialisable dict: where its next batch starts (``epoch`` and ``position``,
the samples of this rank's epoch before it), the settings that shape the batches, and ``splits``: how the
epoch in progress was split before, when it is the rest of an epoch interrupted on another number of ranks
(``[{"world_size": W, "received": [per rank]}, ...]``, order/remainder.h; ``[]`` for a whole epoch).

A merged state (:func:`merge`, or ``load_state_dict([state_rank0, state_rank1, ...])``) is every rank's
in one: no ``rank`` or ``position`` but ``received``, each old rank's count. It resumes any world size:
the same one continues each rank where it was; another splits what no old rank received among the new
ranks (the epoch's rest, exactly once; under even_split the last ``R % W`` of the ``R`` left are left
out, fewer than the new world size, so that every rank runs the same number of steps).

Format 1 (chute before elastic resume) had no ``splits``: such states load as whole-epoch states.
``loader`` below is either loader: it has ``seed``, ``shuffle``, ``drop_last``, ``batch_size``, ``rank``,
``world_size``, ``even_split``, ``num_samples``, ``source``, and chute.Loader's ``order`` and
``shard_window`` (RemoteLoader has both).
"""

from __future__ import annotations

from typing import NamedTuple

from chute import _native

FORMAT_VERSION = 2
_READS = (1, FORMAT_VERSION)  # format 1: no splits
_SETTINGS = ("seed", "shuffle", "drop_last", "batch_size", "even_split")  # must match for the same batches


class Resume(NamedTuple):
    """Where a loader resumes: ``position`` samples into its share of ``epoch``, which is the rest of an
    interrupted epoch when ``splits`` (``[(world_size, [received per rank]), ...]``, as the engine takes them)."""

    epoch: int
    position: int
    splits: list


def received(epoch: int, position: int, num_samples: int) -> tuple[int, int]:
    """Where an iteration of ``epoch`` whose consumer has received ``position`` samples resumes: an epoch
    received whole resumes at the start of the next."""
    return (epoch + 1, 0) if position >= num_samples else (epoch, position)


def shares(loader, splits: list) -> list[int]:
    """Each of ``loader``'s world's ranks' samples in its epoch, or in the rest of one after ``splits``."""
    return _native.epoch_shares(len(loader.source), loader.world_size, loader.even_split, splits)


def make(loader, resume: Resume) -> dict:
    """The state of ``loader`` whose next batch starts at ``resume``."""
    return {
        "format_version": FORMAT_VERSION,
        "epoch": resume.epoch,
        "position": resume.position,
        "seed": loader.seed,
        "shuffle": loader.shuffle,
        "drop_last": loader.drop_last,
        "batch_size": loader.batch_size,
        "dataset_size": len(loader.source),
        "rank": loader.rank,
        "world_size": loader.world_size,
        "even_split": loader.even_split,
        "order": _order(loader),
        "shard_window": loader.shard_window if _order(loader) == "shards" else None,
        "splits": _unparse(resume.splits),
    }


def check(state, loader) -> Resume:
    """Where ``state`` (one rank's state, a list of every rank's, or a merged state) resumes ``loader``; a
    ValueError (TypeError for what is no state at all) naming what is wrong or differs."""
    if isinstance(state, (list, tuple)):
        state = merge(state)
    raw, state = state, _parse(state, "the state")
    _check_settings(state, loader)
    epoch, splits = state["epoch"], state["splits"]
    if "received" not in state:  # one rank's
        if state["world_size"] == loader.world_size:
            if state["rank"] != loader.rank:
                raise ValueError(
                    f"the state is rank {state['rank']}'s, this loader is rank {loader.rank} (of "
                    f"{loader.world_size}): each rank loads its own state, or give every rank's "
                    "(load_state_dict([state_rank0, state_rank1, ...]))"
                )
            share = _checked_shares(len(loader.source), loader.world_size, loader.even_split, splits)[loader.rank]
            if state["position"] > share:
                raise ValueError(f"position {state['position']} is outside this rank's epoch of {share} samples")
            return Resume(epoch, state["position"], splits)
        if state["world_size"] != 1:  # a one-rank job's state is every rank's
            raise ValueError(
                f"the state was taken by rank {state['rank']} of world_size={state['world_size']}, this loader "
                f"has world_size={loader.world_size}: to resume on another number of ranks, give every old "
                "rank's state (load_state_dict([state_rank0, state_rank1, ...])) or chute.merge_state_dicts() of them"
            )
        state = _parse(merge([raw]), "the state")
    got = state["received"]
    after = [*splits, (state["world_size"], got)]
    _checked_shares(len(loader.source), loader.world_size, loader.even_split, after)  # counts within shares
    if state["world_size"] == loader.world_size:  # the same world: each rank goes on where it was
        return Resume(epoch, got[loader.rank], splits)
    # Another world: its ranks split what the old ranks left (all of it when they received nothing: then
    # the epoch is this world's own).
    return Resume(epoch, 0, after if any(got) else splits)


def merge(states) -> dict:
    """Every rank's state (a list, in any order) as one merged state, which resumes any world size. The
    ranks may stand on either side of an epoch's end: a rank that received its whole share is at the start of
    the next epoch, and counts as having received that share."""
    if not isinstance(states, (list, tuple)) or not states:
        raise ValueError("merging needs a non-empty list of every rank's state_dict()")
    parsed = [_parse(s, f"state {i} of the list") for i, s in enumerate(states)]
    first = parsed[0]
    if any("received" in s for s in parsed):
        if len(parsed) == 1:
            return {**first, "splits": _unparse(first["splits"])}
        raise ValueError("a merged state is every rank's already: give it alone, not in a list")
    world = first["world_size"]
    for i, s in enumerate(parsed):
        for key in ("dataset_size", "world_size", "order", "shard_window", *_SETTINGS):
            if s[key] != first[key]:
                raise ValueError(
                    f"the states differ in {key}: {first[key]!r} (rank {first['rank']}) and {s[key]!r} (rank "
                    f"{s['rank']}, state {i} of the list): they are not the ranks of one job"
                )
    ranks = sorted(s["rank"] for s in parsed)
    if ranks != list(range(world)):
        missing = sorted(set(range(world)) - set(ranks))
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        raise ValueError(
            f"the states are of ranks {ranks} of world_size={world}: every rank's state is needed once"
            + (f"; missing: {missing}" if missing else "")
            + (f"; given twice: {twice}" if twice else "")
        )
    by_rank = sorted(parsed, key=lambda s: s["rank"])
    epoch = min(s["epoch"] for s in by_rank)
    running = [s for s in by_rank if s["epoch"] == epoch]
    splits = running[0]["splits"]
    for s in by_rank:
        if s["epoch"] == epoch:
            if s["splits"] != splits:
                raise ValueError(
                    f"ranks {running[0]['rank']} and {s['rank']} are both in epoch {epoch} but state different "
                    f"earlier splits of it ({_describe(splits)} against {_describe(s['splits'])})"
                )
        elif s["epoch"] != epoch + 1 or s["position"] != 0 or s["splits"]:
            raise ValueError(
                f"rank {s['rank']} is at epoch {s['epoch']} position {s['position']} while rank "
                f"{running[0]['rank']} is in epoch {epoch}: the states were not taken at one step of one job"
            )
    share = _checked_shares(first["dataset_size"], world, first["even_split"], splits)
    got = [s["position"] if s["epoch"] == epoch else share[s["rank"]] for s in by_rank]
    for r, (n, total) in enumerate(zip(got, share)):
        if n > total:
            raise ValueError(f"rank {r}'s position {n} is outside its epoch of {total} samples")
    if got == share:  # every rank received its whole share: the next epoch, whole
        epoch, got, splits = epoch + 1, [0] * world, []
    merged = {k: v for k, v in first.items() if k not in ("rank", "position")}
    return {**merged, "epoch": epoch, "splits": _unparse(splits), "received": got}


def _unparse(splits: list) -> list[dict]:
    return [{"world_size": w, "received": list(r)} for w, r in splits]


def _order(loader) -> str:
    return getattr(loader, "order", "sample")


def _checked_shares(dataset_size: int, world: int, even_split: bool, splits: list) -> list[int]:
    """Each rank's share of the rest of an epoch after ``splits``; a ValueError naming a split that cannot be."""
    try:
        return _native.epoch_shares(dataset_size, world, even_split, splits)
    except ValueError as e:
        raise ValueError(f"the state's splits of its epoch cannot be: {e}") from None


def _describe(splits: list) -> str:
    return "; ".join(f"{w} ranks received {r}" for w, r in splits) or "none"


def _check_settings(state: dict, loader) -> None:
    dataset_size = len(loader.source)
    if state["dataset_size"] != dataset_size:
        raise ValueError(
            f"the state is for a dataset of {state['dataset_size']} samples, this source has {dataset_size}"
        )
    order = _order(loader)
    if state["order"] != order:
        raise ValueError(
            f"the state was taken with order={state['order']!r}, this loader has order={order!r}: "
            "its epochs visit the samples in another order"
        )
    settings = {key: getattr(loader, key) for key in _SETTINGS}
    if order == "shards":
        settings["shard_window"] = loader.shard_window
    for key, value in settings.items():
        if state[key] != value:
            raise ValueError(
                f"the state was taken with {key}={state[key]!r}, this loader has "
                f"{key}={value!r}: build the loader with the same {key}"
            )


def _parse(state, what: str) -> dict:
    """``state`` checked key by key (a ValueError naming the key), format 1 upgraded: the same keys, with
    ``splits`` as the engine takes them."""
    if not isinstance(state, dict):
        raise TypeError(
            f"{what} is {'None' if state is None else 'a ' + type(state).__name__}, not a loader state: give "
            "the dict state_dict() returned (or a list of every rank's)"
        )
    version = state.get("format_version")
    if version not in _READS or isinstance(version, bool):
        raise ValueError(
            f"{what}: unsupported loader state format_version {version!r} (this chute reads "
            f"{', '.join(map(str, _READS))})"
        )
    merged = "received" in state
    out = {"format_version": FORMAT_VERSION}
    for key, check in _KEYS:
        if merged and key in ("rank", "position"):
            continue
        if key not in state:
            if key in ("order", "shard_window") or (key == "splits" and version == 1):
                out[key] = {"order": "sample", "shard_window": None, "splits": []}[key]
                continue
            raise ValueError(f"{what} has no {key!r}: it is not a chute loader state (its keys: {sorted(state)})")
        problem = check(state[key])
        if problem:
            raise ValueError(f"{what}: {key} is {state[key]!r}, {problem}")
        out[key] = state[key]
    if out["order"] == "sample":
        out["shard_window"] = None
    elif out["shard_window"] is None:
        raise ValueError(f"{what}: order='shards' needs its shard_window")
    if not merged and out["rank"] >= out["world_size"]:
        raise ValueError(f"{what}: rank {out['rank']} is outside world_size={out['world_size']}")
    splits = []
    for i, split in enumerate(state.get("splits", [])):
        if not (isinstance(split, dict) and _is_int(split.get("world_size"), 1) and _counts(split.get("received"))):
            raise ValueError(
                f"{what}: splits[{i}] is {split!r}, not {{'world_size': W >= 1, 'received': [W counts >= 0]}}"
            )
        splits.append((split["world_size"], list(split["received"])))
    out["splits"] = splits
    if merged:
        got = state["received"]
        if not _counts(got) or len(got) != out["world_size"]:
            raise ValueError(f"{what}: received is {got!r}, not one count >= 0 per rank of {out['world_size']}")
        out["received"] = list(got)
    return out


def _is_int(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _counts(value) -> bool:
    return isinstance(value, list) and all(_is_int(v, 0) for v in value)


def _integer(low: int):
    return lambda v: None if _is_int(v, low) else f"not an integer >= {low}"


def _boolean(v) -> str | None:
    return None if isinstance(v, bool) else "not True or False"


_KEYS = (  # every key of a state, in the order state_dict() writes them, and what its value must be
    ("epoch", _integer(0)),
    ("position", _integer(0)),
    ("seed", _integer(0)),
    ("shuffle", _boolean),
    ("drop_last", _boolean),
    ("batch_size", _integer(1)),
    ("dataset_size", _integer(0)),
    ("rank", _integer(0)),
    ("world_size", _integer(1)),
    ("even_split", _boolean),
    ("order", lambda v: None if v in ("sample", "shards") else "not 'sample' or 'shards'"),
    ("shard_window", lambda v: None if v is None or _is_int(v, 1) else "not None or an integer >= 1"),
    ("splits", lambda v: None if isinstance(v, list) else "not a list"),
)
