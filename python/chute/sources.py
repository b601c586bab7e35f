"""Sources: where samples come from."""

from __future__ import annotations

import os

from chute import _native, _validate


class NativeSource:
    """What every chute source shares: its native ``chute._native.Source`` in ``_native``, a length, and
    ``samples`` / ``targets`` as torchvision's datasets have them."""

    _native: _native.Source

    def __len__(self) -> int:
        return len(self._native)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``(path, label)`` pairs, as in torchvision (for packed and tar sources, the stored key)."""
        return list(zip(self._native.names(), self._native.labels()))

    @property
    def targets(self) -> list[int]:
        return list(self._native.labels())


class ImageFolder(NativeSource):
    """A directory in torchvision's ``ImageFolder`` layout: ``root/<class>/**/<image>``.

    Listing follows torchvision: class folders sorted by name become labels ``0..C-1``; files are
    walked recursively in sorted order and kept when their name has an image extension. The scan runs
    natively, without the GIL.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = _validate.path("root", root)
        self._native = _native.ImageFolder.open(self.root)
        self.classes: list[str] = list(self._native.classes)
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}

    def __repr__(self) -> str:
        return f"chute.ImageFolder({self.root!r}, samples={len(self)}, classes={len(self.classes)})"
