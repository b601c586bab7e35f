"""What a path or URL names: a packed dataset, tar / WebDataset shards, or an image folder. ``chute.open`` and
the path ``chute.Loader`` takes are resolved here; the sources themselves are in :mod:`chute.sources`."""

from __future__ import annotations

import glob as _glob
import os

from chute import _native, _validate
from chute.sources import INDEX_FILE, ImageFolder, PackedDataset, TarDataset


def is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def tar_paths(path: str) -> list[str] | None:
    """The tar files ``path`` names (a glob, a .tar file, or a directory of them), or None."""
    if is_glob(path):
        matches = sorted(p for p in _glob.glob(path) if os.path.isfile(p) and not p.endswith(".chidx"))
        if not matches:
            raise FileNotFoundError(f"no file matches {path!r}")
        return matches
    if os.path.isfile(path) and path.endswith(".tar"):
        return [path]
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, INDEX_FILE)):
        tars = sorted(
            p for p in (os.path.join(path, f) for f in os.listdir(path) if f.endswith(".tar")) if os.path.isfile(p)
        )  # a class folder may be named "x.tar"
        return tars or None
    return None


def open(
    path_or_glob: str | os.PathLike,
    *,
    verify: bool = True,  # noqa: A001
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    image_key: str | None = None,
    label_key: str | None = None,
    labels=None,
    cache: str = "disk",
    transform=None,
    target_transform=None,
) -> PackedDataset | TarDataset:
    """Opens a packed dataset (its directory, or its ``index.chidx``), or tar / WebDataset shards (a
    ``.tar`` file, a glob such as ``"shards/train-*.tar"``, or a directory of tars), or a dataset in a
    format it already lives in (:mod:`chute.formats`: TFRecord files, an LMDB environment; ``image_key``,
    ``label_key`` and ``labels`` where detection needs help, docs/FORMATS.md). The result works with
    :class:`chute.Loader` like :class:`chute.ImageFolder`.

    URLs work too: ``s3://bucket/train/`` or ``https://host/data/train/`` (a packed dataset's prefix),
    ``https://host/data/train-{0000..0127}.tar`` or ``s3://bucket/shards/*.tar`` (tar shards: braces,
    and globs listed for s3:// and gs://; a URL whose path ends in ``.tar`` is a tar whatever its query
    string, so presigned URLs work), ``file:///data/train``. Remote shards are streamed into memory ahead of
    the loader's order; ``cache``: ``"disk"`` (default) also keeps them in the node's disk cache for later
    epochs, ``"none"`` writes nothing to disk. ``cache_dir``: where tar indexes and remote shards are cached
    (default :func:`resolve_cache_dir`); ``cache_limit``: the shard cache's size (default 50 GB; least
    recently used shards are evicted). docs/REMOTE.md.

    ``transform`` / ``target_transform``: torchvision's; ``dataset[i]`` is then ``(transform(PIL image),
    target_transform(label))`` (without them, the record's bytes as stored and its label), so the dataset
    replaces a torchvision ImageFolder under torch's DataLoader, and chute.DataLoader runs the pipeline natively.
    """
    dataset = _open(path_or_glob, verify, cache_dir, cache_limit, image_key, label_key, labels, cache)
    reopen = dict(verify=verify, cache_dir=cache_dir, cache_limit=cache_limit, image_key=image_key, cache=cache)
    dataset._reopen = (open, dict(path_or_glob=path_or_glob, label_key=label_key, labels=labels, **reopen))
    return dataset.with_transforms(transform, target_transform)


def _open(path_or_glob, verify, cache_dir, cache_limit, image_key, label_key, labels, cache):
    from chute import remote

    if isinstance(path_or_glob, str) and path_or_glob.startswith("file://"):
        path_or_glob = remote.local_path(path_or_glob)
    remote.check_cache_policy(cache)
    if remote.is_url(path_or_glob):
        if _names_tars(path_or_glob):
            return TarDataset.from_urls(path_or_glob, cache_dir=cache_dir, cache_limit=cache_limit, cache=cache)
        return PackedDataset(path_or_glob, verify=verify, cache_dir=cache_dir, cache_limit=cache_limit, cache=cache)
    path = os.fsdecode(_validate.path("path_or_glob", path_or_glob))
    from chute import formats

    found = formats.recognise(
        path, cache_dir=cache_dir, verify=verify, image_key=image_key, label_key=label_key, labels=labels
    )
    if found is not None:
        return found
    tars = tar_paths(path)
    if tars is not None:
        return TarDataset(tars, cache_dir=cache_dir)
    return PackedDataset(path, verify=verify)


def source_from_path(path: str | os.PathLike) -> ImageFolder | PackedDataset | TarDataset:
    """What a path given to :class:`chute.Loader` means: a packed dataset (a directory holding
    ``index.chidx``), tar shards (a .tar, a glob, or a directory of tars), else an ImageFolder tree.

    A directory that reads both ways (tar files beside class folders of images) is an error naming both
    readings: chute never guesses which one the user meant."""
    from chute import remote

    if remote.is_url(path) or (isinstance(path, str) and path.startswith("file://")):
        return open(path)
    path = os.fspath(path)
    from chute import formats

    if is_glob(path) or path.endswith((".tar", ".chidx")) or os.path.exists(os.path.join(path, INDEX_FILE)):
        return open(path)
    if formats.names_a_format(path):  # TFRecord files, an LMDB environment
        return open(path)
    if os.path.isdir(path):
        tars = tar_paths(path)
        if tars is not None:
            tree = _image_tree_below(path)
            if tree is not None:
                names = ", ".join(os.path.basename(t) for t in tars[:3]) + (", ..." if len(tars) > 3 else "")
                raise ValueError(
                    f"{path!r} is ambiguous: it holds {len(tars)} tar file(s) ({names}), readable as tar / "
                    f"WebDataset shards, and class folders of images (such as {tree!r}), readable as an "
                    f"ImageFolder. Say which: chute.ImageFolder({path!r}) for the image folders, or "
                    f"chute.open({path!r}) (or chute.open({os.path.join(path, '*.tar')!r})) for the tars."
                )
            return open(path)
    return ImageFolder(path)


def native_source(src) -> tuple[_native.Source, list[str]]:
    """What ``chute.pack`` reads from ``src``, as the native source and its class names: a chute source object,
    an ImageFolder directory, a packed dataset, tar shards, or a file list."""
    if hasattr(src, "_native") and isinstance(src._native, _native.Source):
        return src._native, list(getattr(src, "classes", []))
    path = os.fsdecode(_validate.path("src", src))
    from chute import formats

    if is_glob(path) or os.path.isdir(path) or path.endswith((".tar", ".chidx")) or formats.names_a_format(path):
        source = source_from_path(path)  # an ambiguous directory is an error here too
        return source._native, list(source.classes)
    if os.path.isfile(path):
        return _native.FileList.open(path), []
    raise FileNotFoundError(f"no such file or directory: {path!r}")


def _names_tars(url: str) -> bool:
    """Whether a URL (or URL pattern) names tar files rather than a packed dataset's prefix: its path ends in
    ``.tar`` (or a brace group of them). An http(s) URL's query string is not its path (a presigned URL's
    signature follows the ``?``); an s3:// or gs:// key is taken literally, ``?`` being a glob there."""
    if url.startswith(("http://", "https://")):
        url = url.split("#", 1)[0].split("?", 1)[0]
    last = url.rstrip("/").rsplit("/", 1)[-1]
    return not url.endswith("/") and (last.endswith(".tar") or ".tar}" in last or ".tar," in last)


def _image_tree_below(directory: str) -> str | None:
    """A subdirectory of ``directory`` with an image file somewhere below it (links followed, each
    directory once), or None: what makes ``directory`` readable as an ImageFolder root."""
    extensions = tuple(_native.IMAGE_EXTENSIONS)
    seen: set[tuple[int, int]] = set()

    def holds_image(d: str) -> bool:
        try:
            st = os.stat(d)
            if (st.st_dev, st.st_ino) in seen:
                return False
            seen.add((st.st_dev, st.st_ino))
            entries = list(os.scandir(d))
        except OSError:
            return False
        if any(e.name.lower().endswith(extensions) and not e.is_dir() for e in entries):
            return True
        return any(holds_image(e.path) for e in entries if e.is_dir())

    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir() and holds_image(entry.path):
            return entry.name
    return None
