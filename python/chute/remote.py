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
# Where a remote dataset's shards are kept between uses (docs/REMOTE.md, "The cache"): "disk" also in the
# node's disk cache, so that later epochs (and the other ranks and jobs of the node) read them locally;
# "none" in memory only, nothing written to disk.
CACHE_POLICIES = ("disk", "none")
DEFAULT_CACHE = "disk"

_lock = threading.Lock()
_store = None
_store_options: dict = {}


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


def configure(*, max_retries: int | None = None) -> None:
    """Options of the process's object store, for datasets opened from now on (those already open keep
    theirs). ``max_retries``: how often one request is retried (resets, timeouts, truncated bodies, 5xx,
    429) before it fails; default 8. A small value makes storage that is down fail fast, e.g. in a test or
    an interactive session. ``configure()`` restores the defaults."""
    global _store, _store_options
    if max_retries is not None and (
        isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
    ):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    with _lock:
        _store_options = {} if max_retries is None else {"max_retries": max_retries}
        _store = None


def store():
    """The process's object store (one HTTP engine and its connections, shared by every remote dataset);
    a forked child makes its own (the parent's engine thread is not in the child). Its ``s3://``
    credentials come from botocore when it is installed (:mod:`chute.credentials`), else from the native
    chain (environment, profiles, web identity, container and instance roles)."""
    global _store
    with _lock:
        if _store is None or _store[0] != os.getpid():
            from chute import credentials

            botocore = credentials.botocore_installed()
            objects = _native.ObjectStore(credential_feed=botocore, **_store_options)
            if botocore:
                credentials.serve(objects.credential_feed)
            _store = (os.getpid(), objects)
        return _store[1]


def check_cache_policy(cache) -> str:
    """``cache=`` as given, when it is one of :data:`CACHE_POLICIES`; else a ValueError naming them."""
    if cache not in CACHE_POLICIES:
        raise ValueError(f"cache must be one of {', '.join(map(repr, CACHE_POLICIES))}, got {cache!r}")
    return cache


def cache(cache_dir=None, cache_limit=None, policy: str = DEFAULT_CACHE):
    """The node's shard cache under ``cache_dir`` (:func:`chute.cache.shard_cache_dir`), with a byte limit
    (an int or a size string such as ``"200GB"``; default 50 GB); None for ``policy="none"`` (nothing on
    disk)."""
    from chute.cache import open_shard_cache

    if check_cache_policy(policy) == "none":
        return None
    limit = DEFAULT_CACHE_LIMIT if cache_limit is None else cache_limit
    return open_shard_cache(cache_dir, limit)


def expand(pattern: str) -> list[str]:
    """The URLs a pattern names: bash braces (``train-{0000..0127}.tar``), then globs (listed, for s3://
    and gs://), or every object under a prefix ending in ``/``."""
    return [info.url for info in store().expand(pattern)]


def stats() -> dict:
    """This process's remote I/O: requests, bytes, in flight, latency p50/p99, retries (the HTTP engine)."""
    return dict(store().stats())
