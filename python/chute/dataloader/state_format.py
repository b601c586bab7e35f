"""The format of ``chute.DataLoader``'s resume state (state.py records and resumes it): RNG states as JSON,
what a state must agree on with the DataLoader that loads it (:func:`describe`), and the checks of a loaded
state (:func:`check`), each naming what is malformed or differs.

RNG states travel as base64 of their bytes: torch's (a CPU generator's 5056 bytes), Python ``random``'s (its
625 words, little-endian uint32) and numpy's legacy ``MT19937`` (624 words, position, cached Gaussian). A
worker's are :data:`SEEDED` while they are as seeding and ``worker_init_fn`` left them, so a dataset that draws
no random numbers costs nothing in the state.
"""

from __future__ import annotations

import base64
import random
import struct

import torch
from torch.utils.data import IterableDataset

FORMAT_VERSION = 1
SEEDED = "seeded"  # a worker's RNG states as seeding (and worker_init_fn) left them


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, AttributeError) as e:
        raise ValueError(f"the state's {what} is not base64 ({e})") from None


def worker_rng():
    """This process's RNG states as a worker sends them: (torch's bytes, random's state, numpy's or None)."""
    import sys

    numpy = sys.modules.get("numpy")
    return (
        torch.get_rng_state().numpy().tobytes(),
        random.getstate(),
        numpy.random.get_state() if numpy is not None else None,
    )


def set_worker_rng(state: dict) -> None:
    """Sets this process's RNG states from :func:`encode_worker_rng`'s form."""
    torch.set_rng_state(torch.frombuffer(bytearray(unb64(state["torch"], "worker torch RNG")), dtype=torch.uint8))
    version, words, gauss = state["random"]
    words = unb64(words, "worker random state")
    random.setstate((version, struct.unpack(f"<{len(words) // 4}I", words), gauss))
    if state["numpy"] is not None:
        import numpy as np

        words, pos, has_gauss, gauss = state["numpy"]
        keys = np.frombuffer(unb64(words, "worker numpy state"), dtype="<u4").astype(np.uint32)
        np.random.set_state(("MT19937", keys, pos, has_gauss, gauss))


def same_worker_rng(a, b) -> bool:
    """Whether two :func:`worker_rng` states are the same (numpy's holds an array)."""
    if a[0] != b[0] or a[1] != b[1] or (a[2] is None) != (b[2] is None):
        return False
    if a[2] is None:
        return True
    import numpy as np

    return a[2][0] == b[2][0] and np.array_equal(a[2][1], b[2][1]) and tuple(a[2][2:]) == tuple(b[2][2:])


def encode_worker_rng(raw) -> dict | str:
    """A worker's RNG states as JSON: SEEDED (as seeding left them), or torch's, random's and numpy's."""
    if raw is None or raw == SEEDED:
        return SEEDED
    if isinstance(raw, dict):
        return raw  # encoded already (a loaded state's)
    torch_state, (version, words, gauss), numpy_state = raw
    out = {"torch": b64(torch_state), "random": [version, b64(struct.pack(f"<{len(words)}I", *words)), gauss]}
    out["numpy"] = None
    if numpy_state is not None:
        _, keys, pos, has_gauss, cached = numpy_state
        out["numpy"] = [b64(keys.astype("<u4").tobytes()), int(pos), int(has_gauss), float(cached)]
    return out


def generators(loader) -> list[torch.Generator]:
    """The torch generators an epoch's order draws from besides the global one: ``loader.generator``, and
    each ``generator`` along the sampler chain (``batch_sampler.sampler.generator``, ...), once each."""
    found: list[torch.Generator] = []

    def add(g):
        if isinstance(g, torch.Generator) and g is not torch.default_generator and all(g is not h for h in found):
            found.append(g)

    add(loader.generator)
    obj = loader._index_sampler
    for _ in range(4):  # batch sampler -> sampler -> ...; a chain, not a graph
        if obj is None:
            break
        add(getattr(obj, "generator", None))
        obj = getattr(obj, "sampler", None)
    return found


def generator_states(loader) -> list[str]:
    return [b64(g.get_state().numpy().tobytes()) for g in generators(loader)]


def set_generator_states(loader, states: list[str]) -> None:
    for g, s in zip(generators(loader), states):
        g.set_state(torch.frombuffer(bytearray(unb64(s, "generator state")), dtype=torch.uint8))


def describe(loader, path: str) -> dict:
    """What a state must agree on with the DataLoader that loads it (:func:`check` compares each)."""
    try:
        size = len(loader.dataset)
    except TypeError:
        size = None  # an iterable dataset without __len__
    # len(loader) of an iterable dataset is torch's estimate, and asking makes torch warn when more come.
    batches = len(loader) if not isinstance(loader.dataset, IterableDataset) else None
    return {
        "format_version": FORMAT_VERSION,
        "loader": "chute.DataLoader",
        "path": path,
        "dataset_size": size,
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "num_batches": batches,
        "samplers": [type(s).__name__ for s in (loader.batch_sampler, loader.sampler) if s is not None],
        "generator_seeds": [g.initial_seed() for g in generators(loader)],
        "num_workers": loader.num_workers,
        "persistent_workers": bool(loader.persistent_workers),
    }


# ---- checking a loaded state ------------------------------------------------------------------------

_AGREE = (  # what must match, and what it is called in the message
    ("path", "the {!r} path"),
    ("batch_size", "batch_size={!r}"),
    ("drop_last", "drop_last={!r}"),
    ("num_batches", "{!r} batches per epoch"),
    ("samplers", "samplers {!r}"),
    ("generator_seeds", "generator seeds {!r}"),
    ("persistent_workers", "persistent_workers={!r}"),
)


def check(state, loader, path: str) -> dict:
    """``state`` checked against ``loader`` key by key: a ValueError naming what is malformed or differs (the
    other DataLoader would yield other batches), a TypeError for what is no state at all."""
    if not isinstance(state, dict):
        raise TypeError(
            f"chute.DataLoader.load_state_dict() takes the dict state_dict() returned, got "
            f"{'None' if state is None else type(state).__name__}"
        )
    if state.get("loader") != "chute.DataLoader" or state.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"not a chute.DataLoader state of format_version {FORMAT_VERSION} (loader={state.get('loader')!r}, "
            f"format_version={state.get('format_version')!r}); a chute.Loader state goes to chute.Loader"
        )
    expected = describe(loader, path)
    missing = sorted((set(expected) | {"epochs", "epoch", "rng"}) - set(state))
    if missing:
        raise ValueError(f"the state has no {', '.join(map(repr, missing))}: it is not a chute.DataLoader state")
    if state["dataset_size"] != expected["dataset_size"]:
        raise ValueError(
            f"the state is for a dataset of {state['dataset_size']} samples, this DataLoader's has "
            f"{expected['dataset_size']}"
        )
    for key, words in _AGREE:
        if state[key] != expected[key]:
            raise ValueError(
                f"the state was taken with {words.format(state[key])}, this DataLoader has "
                f"{words.format(expected[key])}: build it the same way to resume"
            )
    _integer(state, "epochs", state["epochs"])
    rng = state["rng"]
    if not (isinstance(rng, dict) and isinstance(rng.get("generators"), list)):
        raise ValueError(f"the state's rng is {rng!r}, not {{'global': ..., 'generators': [...]}}")
    if len(rng["generators"]) != len(expected["generator_seeds"]):
        raise ValueError(
            f"the state holds {len(rng['generators'])} generator states for {len(expected['generator_seeds'])} generators"
        )
    for i, g in enumerate(rng["generators"]):
        _rng_bytes(g, f"rng.generators[{i}]")
    if rng.get("global") is not None:
        _rng_bytes(rng["global"], "rng.global")
    epoch_of_sampler = rng.get("sampler_epoch")
    if epoch_of_sampler is not None and (not isinstance(epoch_of_sampler, int) or isinstance(epoch_of_sampler, bool)):
        raise ValueError(f"the state's rng.sampler_epoch is {epoch_of_sampler!r}, not None or an integer")
    if rng.get("process") is not None:
        _worker_rng(rng["process"], "rng.process")
    epoch = state["epoch"]
    if epoch is None:
        return state
    if not isinstance(epoch, dict):
        raise ValueError(f"the state's epoch is {epoch!r}, not None or a dict")
    for key in ("base_seed", "consumed", "ended", "snapshot", "start_workers", "workers"):
        if key not in epoch:
            raise ValueError(f"the state's epoch has no {key!r}")
    if rng.get("global") is None:
        raise ValueError("the state's epoch has no rng.global, the global RNG its order began with")
    _integer(state, "epoch.base_seed", epoch["base_seed"], low=-(2**63))
    _integer(state, "epoch.consumed", epoch["consumed"])
    if state["num_batches"] is not None and epoch["consumed"] > state["num_batches"]:
        raise ValueError(f"the state's epoch.consumed {epoch['consumed']} is beyond its {state['num_batches']} batches")
    _integer(state, "epoch.snapshot", epoch["snapshot"])
    if epoch["snapshot"] > epoch["consumed"]:
        raise ValueError(f"the state's epoch.snapshot {epoch['snapshot']} is beyond its {epoch['consumed']} batches")
    if not isinstance(epoch["ended"], bool):
        raise ValueError(f"the state's epoch.ended is {epoch['ended']!r}, not True or False")
    random_workers = False
    for key in ("start_workers", "workers"):
        workers = epoch[key]
        if workers is None:
            continue
        if not isinstance(workers, list) or len(workers) != state["num_workers"]:
            raise ValueError(f"the state's epoch.{key} is not one entry per worker of {state['num_workers']}")
        for w, rng_w in enumerate(workers):
            if rng_w != SEEDED:
                _worker_rng(rng_w, f"epoch.{key}[{w}]")
                random_workers = True
    if random_workers and state["num_workers"] != loader.num_workers:
        raise ValueError(
            f"the state was taken with num_workers={state['num_workers']}, whose datasets drew random numbers, "
            f"this DataLoader has num_workers={loader.num_workers}: each worker's random draws go on from where "
            "they were, so build it with the same num_workers"
        )
    return state


def _integer(state, key: str, value, low: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"the state's {key} is {value!r}, not an integer >= {low}")


def _rng_bytes(text, what: str) -> None:
    size = torch.default_generator.get_state().numel()
    if not isinstance(text, str) or len(unb64(text, what)) != size:
        raise ValueError(f"the state's {what} is not a torch CPU generator state ({size} bytes, base64)")


def _worker_rng(state, what: str) -> None:
    ok = isinstance(state, dict) and {"torch", "random", "numpy"} <= set(state)
    if ok:
        _rng_bytes(state["torch"], what + ".torch")
        r, n = state["random"], state["numpy"]
        ok = isinstance(r, list) and len(r) == 3 and isinstance(r[1], str)
        ok = ok and (n is None or (isinstance(n, list) and len(n) == 4 and isinstance(n[0], str)))
    if not ok:
        raise ValueError(f"the state's {what} is not a worker's RNG states ({SEEDED!r} or torch, random, numpy)")
