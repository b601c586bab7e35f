"""Sources: where samples come from. Each wraps a native ``chute._native.Source`` (the reading is native,
without the GIL); this module resolves paths and options. What a path given to ``chute.open`` or
``chute.Loader`` names is decided in :mod:`chute.resolve`.

They are torchvision-style map datasets too: with ``transform=`` / ``target_transform=`` (``chute.ImageFolder(root,
transform=...)``, ``chute.open(path, transform=...)``), ``dataset[i]`` is what torchvision's ImageFolder returns,
``(transform(PIL image), target_transform(label))``, so torch's DataLoader reads them, and ``chute.DataLoader``
runs the same pipeline natively from the source itself (``chute/dataloader/source_path.py``): pack once, keep the
DataLoader code."""

from __future__ import annotations

import io
import os

from chute import _native, _validate
from chute.cache import resolve_cache_dir

INDEX_FILE = "index.chidx"  # a packed dataset's index, in its directory (docs/FORMAT.md)


class NativeSource:
    """What every chute source shares: its native ``chute._native.Source`` in ``_native``, a length, and
    ``samples`` / ``targets`` as torchvision's datasets have them."""

    _native: _native.Source
    # torchvision's dataset attributes: applied by dataset[i] to the sample's PIL image and to its label.
    transform = None
    target_transform = None
    # How to open the same dataset again, (callable, keyword arguments): a pickled dataset (a spawned
    # DataLoader worker's) is opened anew in the other process; the native source itself does not pickle.
    _reopen: tuple | None = None

    def __reduce__(self):
        if self._reopen is None:
            raise TypeError(f"cannot pickle {self!r}: open it with chute.open() or its class to make it picklable")
        opener, keywords = self._reopen
        return _reopened, (opener, keywords, self.transform, self.target_transform)

    def __len__(self) -> int:
        return len(self._native)

    def with_transforms(self, transform=None, target_transform=None):
        """Sets ``transform`` and ``target_transform`` (torchvision's meaning) and returns the dataset."""
        self.transform, self.target_transform = transform, target_transform
        return self

    def _pair(self, image, index: int) -> tuple:
        """``(transform(image), target_transform(label))``, as torchvision's DatasetFolder returns a sample."""
        label = self._native.label(index)
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``(path, label)`` pairs, as in torchvision (for packed and tar sources, the stored key)."""
        return list(zip(self._native.names(), self._native.labels()))

    @property
    def targets(self) -> list[int]:
        return list(self._native.labels())


class RecordSource(NativeSource):
    """A source whose records can be read back as they were stored: ``dataset[i]`` is ``(bytes, label)``, or,
    with a ``transform`` or ``target_transform``, ``(transform(image), target_transform(label))`` where the
    image is the record decoded as torchvision's loader decodes a file (PIL, ``.convert("RGB")``; a raw
    record of ``chute pack --raw``, which PIL cannot read, by chute's decoder)."""

    def __getitem__(self, index: int) -> tuple:
        """The sample's encoded bytes (exactly as stored) and its label; with transforms, torchvision's sample."""
        data = _native.read_sample(self._native, index)
        if self.transform is None and self.target_transform is None:
            return data, self._native.label(index)
        return self._pair(_decoded(data), index)

    def remote_stats(self) -> dict | None:
        """For a remote dataset, its I/O so far: shards received from storage and read back from the disk
        cache, reads that waited for a shard (and how long), the memory its shards may take, and the
        process's HTTP figures (requests, bytes, retries, in flight, latency p50/p99); None for a local one."""
        shards = self._native.remote_stats()
        if shards is None:
            return None
        from chute import remote

        return {**shards, **remote.stats()}


class ImageFolder(NativeSource):
    """A directory in torchvision's ``ImageFolder`` layout: ``root/<class>/**/<image>``; as a dataset,
    torchvision's ImageFolder: ``dataset[i]`` is ``(transform(PIL image), target_transform(label))``.

    Listing follows torchvision: class folders sorted by name become labels ``0..C-1``; files are
    walked recursively in sorted order and kept when their name has the extension of a format chute
    decodes: ``.jpg``, ``.jpeg``, ``.png``, ``.webp`` (any case). Files torchvision would also list but
    chute cannot decode (``.bmp``, ``.tif``, ``.tiff``, ``.ppm``, ``.pgm``) are left out, with a warning
    that counts them; :attr:`left_out` lists them. The scan runs natively, without the GIL.
    """

    def __init__(self, root: str | os.PathLike, transform=None, target_transform=None):
        self.root = _validate.path("root", root)
        self.with_transforms(transform, target_transform)
        self._reopen = (ImageFolder, {"root": self.root})
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

    def __getitem__(self, index: int) -> tuple:
        """``(transform(image), target_transform(label))``, the image opened as torchvision's default loader
        opens it (PIL, ``.convert("RGB")``): torchvision's ImageFolder's sample."""
        from PIL import Image

        if index < 0:
            index += len(self)
        with open(self._native.name(index), "rb") as f:
            image = Image.open(f).convert("RGB")
        return self._pair(image, index)

    def __repr__(self) -> str:
        return f"chute.ImageFolder({self.root!r}, samples={len(self)}, classes={len(self.classes)})"


class FileList(NativeSource):
    """Samples listed in a text file, one ``<path> <label>`` per line; relative paths are relative to the
    list file's directory. Usable by :class:`chute.Loader` and :func:`chute.pack`."""

    def __init__(self, path: str | os.PathLike):
        self.path = _validate.path("path", path)
        self._native = _native.FileList.open(self.path)
        self.classes: list[str] = []

    def __repr__(self) -> str:
        return f"chute.FileList({self.path!r}, samples={len(self)})"


class PackedDataset(RecordSource):
    """A dataset written by :func:`chute.pack`: same samples, labels, classes and order as its source.
    Reads go through one memory mapping per shard; each record's XXH3 checksum is checked on every read
    unless ``verify=False``.

    ``path`` may be a URL (``s3://bucket/train/``, ``gs://...``, ``https://host/train/``): the index is
    fetched at open, and shards are streamed whole into memory, ahead of the loader's order, and read there
    (docs/REMOTE.md). ``cache="disk"`` (the default) also keeps them in the node's disk cache (``cache_dir``,
    ``cache_limit``) for later epochs; ``cache="none"`` writes nothing to disk. Use ``order="shards"`` in
    :class:`chute.Loader` so that readers move through a few shards at a time."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        verify: bool = True,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        cache: str = "disk",
    ):
        from chute import remote

        self.path = remote.local_path(path) if isinstance(path, str) else _validate.path("path", path)
        if remote.is_url(self.path):
            self._native = _native.PackedSource.open_remote(
                self.path, remote.store(), remote.cache(cache_dir, cache_limit, cache), bool(verify)
            )
        else:
            self.path = _validate.path("path", self.path)
            self._native = _native.PackedSource.open(self.path, bool(verify))
        self.classes: list[str] = list(self._native.classes)
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}

    def __repr__(self) -> str:
        from chute import remote

        # A URL's user:password@ never shows (a Loader's repr, a log line, a traceback print this).
        path = _native.redact_url(self.path) if remote.is_url(self.path) else self.path
        return f"chute.PackedDataset({path!r}, samples={len(self)}, classes={len(self.classes)})"


class TarDataset(RecordSource):
    """Plain tar or WebDataset shards, read in place.

    WebDataset shards (members sharing a key with an image: ``.cls``, ``.json``...) are grouped by
    WebDataset's rule: the key is the path up to the first dot of the file name, and consecutive members
    with one key are a sample; its image is the jpg/jpeg/png/... member and its label the integer in its
    ``.cls`` member (-1 without one). A tar of an image tree (no such companion) has one sample per image
    file, as :class:`chute.ImageFolder` lists the tree, and is labelled by class directory when no tar has
    a ``.cls``. Hard and symbolic links inside the archive read their target's bytes. Members left out
    are listed, by reason, in :attr:`skipped` (and by ``chute inspect``).

    Each tar's index is built on first open and cached in :func:`resolve_cache_dir` (``cache_dir=`` overrides
    it), never beside the tar unless ``chute index`` wrote it there; an index is reused only while the
    tar's name, size, mtime, inode, ctime and content fingerprint match."""

    def __init__(self, paths: list[str], *, cache_dir: str | os.PathLike | None = None):
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]  # one tar file, not a list of its name's characters
        self.paths = [os.fsdecode(_validate.path("paths", p)) for p in paths]
        self.url = None  # a remote dataset's URL pattern (from_urls)
        self._native = _native.TarSource.open(self.paths, resolve_cache_dir(cache_dir))
        self.classes: list[str] = list(self._native.classes)

    @classmethod
    def from_urls(
        cls,
        pattern: str,
        *,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        cache: str = "disk",
    ) -> TarDataset:
        """Tar shards in object storage (a URL with braces or globs), streamed: the open reads the list of
        tars and each tar's index (its ``<tar>.chidx`` sidecar, as ``chute index`` writes it, or the one this
        node learned from an earlier stream of it), not the tars; samples are then read from tars streamed
        into memory ahead of the loader's order (``cache="disk"``, the default, also keeps them in the node's
        disk cache; ``cache="none"`` writes nothing to disk). Tars without an index are streamed once at
        open, to count their samples (docs/REMOTE.md, "Tar shards")."""
        from chute import remote

        store, shard_cache = remote.store(), remote.cache(cache_dir, cache_limit, cache)
        index_dir = resolve_cache_dir(cache_dir) if shard_cache is not None else ""
        dataset = cls.__new__(cls)
        dataset._native = _native.TarSource.open_remote(store, [pattern], shard_cache, index_dir)
        dataset.paths = list(dataset._native.tar_paths())  # the tars' URLs, without credentials
        dataset.url = pattern
        dataset.classes = list(dataset._native.classes)
        return dataset

    @property
    def skipped(self) -> list[dict]:
        """Members of the tars that are in no sample: ``{"reason", "count", "examples"}`` per reason
        (examples are ``"<tar>:<member>"``, at most 5 per tar)."""
        return [{"reason": r, "count": n, "examples": list(e)} for r, n, e in self._native.skipped()]

    def __repr__(self) -> str:
        return f"chute.TarDataset({len(self.paths)} tar files, samples={len(self)})"


def _decoded(data: bytes):
    """A record's image as a PIL RGB image: PIL's own decode (what torchvision's loader does with the file),
    or, for a raw record (``chute pack --raw``: pixels, no image format), chute's."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.convert("RGB")
    except UnidentifiedImageError:
        rgb, width, height = _native.decode_rgb(data)  # raises naming the format when it is no raw record either
        return Image.frombytes("RGB", (width, height), rgb)


def _reopened(opener, keywords: dict, transform, target_transform):
    """A pickled chute dataset, opened again in this process (NativeSource.__reduce__)."""
    return opener(**keywords).with_transforms(transform, target_transform)
