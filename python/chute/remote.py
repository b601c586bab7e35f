"""Datasets in object storage: ``s3://``, ``gs://``, ``http(s)://`` and ``file://`` URLs wherever chute takes
a path (docs/REMOTE.md).

The work is native: one process-wide ``ObjectStore`` over one ``HttpEngine`` (libcurl's multi interface,
keep-alive connections, many requests in flight on a thread of its own, retries with backoff), and a
``ShardCache`` on local disk shared by every process of the node. This module resolves URLs and options.
"""

from __future__ import annotations

import os
import threading

from chute import _native

REMOTE_SCHEMES = ("s3://", "gs://", "http://", "https://")
DEFAULT_CACHE_LIMIT = 50 * 10**9  # bytes; a size string such as "200GB" overrides it

_lock = threading.Lock()
_store = None
_caches: dict[tuple[str, int], object] = {}


def is_url(path) -> bool:
    """Whether ``path`` names remote storage (``file://`` is local: see :func:`local_path`)."""
    return isinstance(path, str) and path.startswith(REMOTE_SCHEMES)


def local_path(path):
    """``file:///abs/path`` -> ``/abs/path``; anything else unchanged."""
    if isinstance(path, str) and path.startswith("file://"):
        rest = path[len("file://") :]
        if rest and not rest.startswith("/"):
            raise ValueError(f"{path!r}: a file URL needs an absolute path (file:///data/train)")
        return rest
    return path


def store():
    """The process's object store (one HTTP engine and its connections, shared by every remote dataset)."""
    global _store
    with _lock:
        if _store is None or getattr(_store, "_pid", None) != os.getpid():  # a forked child makes its own
            _store = _native.ObjectStore()
            try:
                _store._pid = os.getpid()
            except AttributeError:
                pass
        return _store


def shard_cache_dir(cache_dir=None) -> str:
    """Where remote shards are cached: ``<cache_dir>/shards``, the cache directory being ``cache_dir`` or
    :func:`chute.packed.resolve_cache_dir`'s (``$CHUTE_CACHE_DIR``, ``~/.cache/chute``)."""
    from chute.packed import resolve_cache_dir

    return os.path.join(resolve_cache_dir(cache_dir), "shards")


def cache(cache_dir=None, cache_limit=None):
    """The node's shard cache at ``cache_dir`` with a byte limit (an int or a size string; default 50 GB)."""
    from chute.packed import parse_size

    directory = shard_cache_dir(cache_dir)
    limit = DEFAULT_CACHE_LIMIT if cache_limit is None else parse_size(cache_limit, "cache_limit")
    key = (os.path.abspath(directory), limit)
    with _lock:
        if key not in _caches:
            _caches[key] = _native.ShardCache(directory, limit)
        return _caches[key]


def stats() -> dict:
    """This process's remote I/O: requests, bytes, in flight, latency p50/p99, retries (the HTTP engine)."""
    return dict(store().stats())
