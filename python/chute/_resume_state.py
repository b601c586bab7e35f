"""The resume state of chute.Loader and chute.ray.RemoteLoader: one format, written and checked here, so
that a state taken by either loader resumes the other.

A state is a small JSON-serialisable dict: where the next batch starts (``epoch`` and ``position``, the
samples of this rank's epoch before it) and the settings that shape the batches. chute.Loader adds its
``order`` and ``shard_window``; a state without them (RemoteLoader's, or an older chute's) was taken in
the sample order. ``loader`` below is either loader: it has ``seed``, ``shuffle``, ``drop_last``,
``batch_size``, ``rank``, ``world_size``, ``even_split``, ``num_samples`` and ``source``.
"""

from __future__ import annotations

FORMAT_VERSION = 1
_SETTINGS = ("seed", "shuffle", "drop_last", "batch_size", "even_split")  # must match for the same batches


def received(epoch: int, position: int, num_samples: int) -> tuple[int, int]:
    """Where an iteration of ``epoch`` whose consumer has received ``position`` samples resumes: an epoch
    received whole resumes at the start of the next."""
    return (epoch + 1, 0) if position >= num_samples else (epoch, position)


def make(loader, epoch: int, position: int, **extra) -> dict:
    """The state of ``loader`` whose next batch starts ``position`` samples into this rank's ``epoch``;
    ``extra`` (chute.Loader's ``order`` and ``shard_window``) is appended."""
    return {
        "format_version": FORMAT_VERSION,
        "epoch": epoch,
        "position": position,
        "seed": loader.seed,
        "shuffle": loader.shuffle,
        "drop_last": loader.drop_last,
        "batch_size": loader.batch_size,
        "dataset_size": len(loader.source),
        "rank": loader.rank,
        "world_size": loader.world_size,
        "even_split": loader.even_split,
        **extra,
    }


def check(state: dict, loader, order: str = "sample", shard_window: int | None = None) -> tuple[int, int]:
    """The ``(epoch, position)`` at which ``state`` resumes ``loader``, which visits ``order`` (with
    ``shard_window`` in the shard order); a ValueError naming the difference where the state was taken
    with other settings, which would give other batches."""
    version = state.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported loader state format_version {version!r} (this chute reads {FORMAT_VERSION})")
    dataset_size = len(loader.source)
    if state["dataset_size"] != dataset_size:
        raise ValueError(
            f"the state is for a dataset of {state['dataset_size']} samples, this source has {dataset_size}"
        )
    if state["world_size"] != loader.world_size:
        raise ValueError(
            f"the state was taken with world_size={state['world_size']}, this loader has "
            f"world_size={loader.world_size}; resuming on another number of ranks is not supported"
        )
    taken = state.get("order", "sample")
    if taken != order:
        raise ValueError(
            f"the state was taken with order={taken!r}, this loader has order={order!r}: "
            "its epochs visit the samples in another order"
        )
    settings = {key: getattr(loader, key) for key in _SETTINGS}
    if order == "shards":
        settings["shard_window"] = shard_window
    for key, value in settings.items():
        if state.get(key) != value:
            raise ValueError(
                f"the state was taken with {key}={state.get(key)!r}, this loader has "
                f"{key}={value!r}: build the loader with the same {key}"
            )
    if not 0 <= state["position"] <= loader.num_samples:
        raise ValueError(f"position {state['position']} is outside this rank's epoch of {loader.num_samples}")
    return int(state["epoch"]), int(state["position"])
