"""Where a map-style dataset's ``__getitem__`` spends its time: read, decode, transform, other.

A DataLoader's workers are other processes, so the doctor cannot see their stages directly. Instead it
calls ``dataset[i]`` for a few samples in this process under ``sys.setprofile`` and charges every
interval to the innermost call on the stack that has a category:

- **read** (the storage layer): ``open``, and any ``read``/``readinto``/``read_bytes``/``pread`` call,
  whether a C method of a file object, ``os.read``, or a Python method of a file-like wrapper (a network
  filesystem client's file object, say). Time spent blocked inside such a call is storage time.
- **decode**: Pillow (``PIL.*``) other than its geometric operations, and ``torchvision.io`` decoders.
- **transform**: the dataset's ``transform``/``target_transform`` callables (and each of a ``Compose``'s
  transforms), ``torchvision.transforms``, and Pillow's ``resize``, ``crop``, ``transpose``, ... .
- **other**: everything else in ``__getitem__`` (the dataset's own Python code).

The profiler slows Python code down, so the shares matter more than the absolute times.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

CATEGORIES = ("read", "decode", "transform", "other")
_READ_NAMES = frozenset({"read", "readinto", "readall", "read_bytes", "pread", "preadv", "readinto1", "read1"})
_OPEN_NAMES = frozenset({"open", "io.open"})
_PIL_GEOMETRY = frozenset(
    {
        "resize",
        "crop",
        "transpose",
        "rotate",
        "transform",
        "reduce",
        "thumbnail",
        "filter",
        "__array_interface__",
        "tobytes",
        "getdata",
        "point",
        "paste",
    }
)


@dataclass
class DatasetProfile:
    samples: int
    seconds: dict[str, float] = field(default_factory=dict)  # per category, summed over the samples
    wall_s: float = 0.0  # unprofiled time for the same samples

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def share(self, category: str) -> float:
        return self.seconds.get(category, 0.0) / self.total_s if self.total_s > 0 else 0.0

    def ms_per_sample(self, category: str) -> float:
        """A category's share of the unprofiled per-sample time, in ms."""
        return 1e3 * self.share(category) * self.wall_s / max(self.samples, 1)

    @property
    def dominant(self) -> str:
        return max(CATEGORIES, key=self.share)


def _transform_codes(dataset) -> set:
    codes = set()
    for name in ("transform", "target_transform", "transforms"):
        pending = [getattr(dataset, name, None)]
        while pending:
            t = pending.pop()
            if t is None:
                continue
            if isinstance(t, (list, tuple)):
                pending.extend(t)
                continue
            pending.extend(getattr(t, "transforms", None) or [])
            for attr in ("__call__", "forward"):
                fn = getattr(type(t), attr, None)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    codes.add(code)
            if getattr(t, "__code__", None) is not None:  # a plain function
                codes.add(t.__code__)
    return codes


class _Classifier:
    def __init__(self, dataset):
        self.transform_codes = _transform_codes(dataset)
        self.cache: dict = {}

    def python(self, frame) -> str | None:
        code = frame.f_code
        hit = self.cache.get(code, "")
        if hit != "":
            return hit
        module = frame.f_globals.get("__name__", "") or ""
        name = code.co_name
        if code in self.transform_codes or module.startswith("torchvision.transforms"):
            cat = "transform"
        elif name in _READ_NAMES or (name == "open" and not module.startswith("PIL")):
            cat = "read"
        elif module.startswith("PIL"):
            cat = "transform" if name in _PIL_GEOMETRY else "decode"
        elif module.startswith("torchvision.io"):
            cat = "decode"
        else:
            cat = None
        self.cache[code] = cat
        return cat

    @staticmethod
    def builtin(fn) -> str | None:
        name = getattr(fn, "__name__", "")
        if name in _READ_NAMES or (
            name == "open" and getattr(fn, "__module__", "") in ("builtins", "io", "_io", "posix", "os")
        ):
            return "read"
        return None


def profile_dataset(dataset, indices: list[int]) -> DatasetProfile:
    """Profiles ``dataset[i]`` for each index (and times the same calls unprofiled for scale)."""
    if not indices:
        raise ValueError("no indices to profile")
    classify = _Classifier(dataset)
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    stack: list[str] = []  # the effective category of each open call
    last = [0.0]

    def charge(now: float) -> None:
        seconds[stack[-1] if stack else "other"] += now - last[0]
        last[0] = now

    def hook(frame, event, arg):
        now = time.perf_counter()
        charge(now)
        if event == "call":
            stack.append(classify.python(frame) or (stack[-1] if stack else "other"))
        elif event == "c_call":
            stack.append(classify.builtin(arg) or (stack[-1] if stack else "other"))
        elif event in ("return", "c_return", "c_exception") and stack:
            stack.pop()
        last[0] = time.perf_counter()  # the hook's own time is charged to no one

    previous = sys.getprofile()
    last[0] = time.perf_counter()
    sys.setprofile(hook)
    try:
        for i in indices:
            dataset[i]
    finally:
        sys.setprofile(previous)
    # The profile's entries and exits around our own loop leave a little in "other"; it is small.
    start = time.perf_counter()
    for i in indices:
        dataset[i]
    wall = time.perf_counter() - start
    return DatasetProfile(samples=len(indices), seconds=seconds, wall_s=wall)
