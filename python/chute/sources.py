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


class RecordSource(NativeSource):
    """A source whose records can be read back as they were stored: ``dataset[i]`` is ``(bytes, label)``."""

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        """The sample's encoded bytes (exactly as stored) and its label."""
        return _native.read_sample(self._native, index), self._native.label(index)


class ImageFolder(NativeSource):
    """A directory in torchvision's ``ImageFolder`` layout: ``root/<class>/**/<image>``.

    Listing follows torchvision: class folders sorted by name become labels ``0..C-1``; files are
    walked recursively in sorted order and kept when their name has the extension of a format chute
    decodes: ``.jpg``, ``.jpeg``, ``.png``, ``.webp`` (any case). Files torchvision would also list but
    chute cannot decode (``.bmp``, ``.tif``, ``.tiff``, ``.ppm``, ``.pgm``) are left out, with a warning
    that counts them; :attr:`left_out` lists them. The scan runs natively, without the GIL.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = _validate.path("root", root)
        self._native = _native.ImageFolder.open(self.root)
        self.classes: list[str] = list(self._native.classes)
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        self.left_out: list[str] = list(self._native.left_out)
        if self.left_out:
            import collections
            import warnings

            counts = collections.Counter(os.path.splitext(p)[1].lower() for p in self.left_out)
            kinds = ", ".join(f"{n} {ext}" for ext, n in sorted(counts.items()))
            warnings.warn(
                f"chute.ImageFolder({self.root!r}) left out {len(self.left_out)} files in formats chute "
                f"cannot decode ({kinds}), e.g. {self.left_out[0]!r}; torchvision's ImageFolder would "
                "list them. Convert them to JPEG, PNG or WebP to train on them.",
                stacklevel=2,
            )

    def __repr__(self) -> str:
        return f"chute.ImageFolder({self.root!r}, samples={len(self)}, classes={len(self.classes)})"
