"""Native fast paths for chute.DataLoader (placeholder until the dlfast branch lands).

The seam (see docs/ARCHITECTURE.md, "Drop-in DataLoader"): ``plan(loader)`` is called once per DataLoader, at its
first ``__iter__``, and returns either a ``Plan`` (a native path that yields collated batches exactly as torch's
DataLoader would) or a ``Fallback`` whose ``str()`` is the one-line reason the generic path runs instead.
This file only provides the API; no native path is built on this branch, so every loader falls back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Fallback:
    """Why no fast path applies; ``str()`` is the one-line explanation."""

    reason: str

    def __str__(self) -> str:
        return self.reason


class Plan:
    """A native path: ``batches(index_batches)`` yields collated batches for each list of indices."""

    kind: str = ""

    def batches(self, index_batches: Iterable[list[int]]) -> Iterator:
        raise NotImplementedError

    def close(self) -> None:
        pass


def plan(loader) -> Plan | Fallback:
    return Fallback("native fast paths not built")
