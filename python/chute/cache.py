"""The node-local shard cache: remote shards kept whole on local disk, shared by every process on the node
(the ranks of one job). The engine is ``chute._native.ShardCache`` (cpp/include/chute/remote/shard_cache.h); this
module only says where the cache lives. Guarantees: docs/ARCHITECTURE.md, "The shard cache"."""

from __future__ import annotations

import os

from chute import _native
from chute._validate import parse_size


def resolve_cache_dir(override: str | os.PathLike | None = None) -> str:
    """Where chute caches what it derives from datasets (tar indexes) and remote shards (in ``shards/``,
    :mod:`chute.cache`): ``override``, else
    ``$CHUTE_CACHE_DIR``, else ``$XDG_CACHE_HOME/chute``, else ``~/.cache/chute``. Never the dataset's
    own directory."""
    if override is not None:
        return os.fspath(override)
    if os.environ.get("CHUTE_CACHE_DIR"):
        return os.environ["CHUTE_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "chute")
    return os.path.join(os.path.expanduser("~"), ".cache", "chute")


def shard_cache_dir(cache_dir: str | os.PathLike | None = None) -> str:
    """``<cache_dir>/shards``; ``cache_dir`` defaults as for tar indexes (:func:`resolve_cache_dir`):
    ``$CHUTE_CACHE_DIR``, else ``$XDG_CACHE_HOME/chute``, else ``~/.cache/chute``."""
    return os.path.join(resolve_cache_dir(cache_dir), "shards")


def open_shard_cache(cache_dir: str | os.PathLike | None = None, limit: int | str | None = None) -> _native.ShardCache:
    """The shard cache under ``cache_dir`` (see :func:`shard_cache_dir`), creating it. ``limit``: its size
    in bytes or as a size (``"50GB"``); None or 0 for no limit. An unwritable directory raises OSError
    naming it."""
    limit_bytes = 0 if limit is None else parse_size(limit, "cache_limit")
    return _native.ShardCache(shard_cache_dir(cache_dir), limit_bytes)


def recorded_limit(cache_dir: str | os.PathLike | None = None) -> int:
    """The limit the last job that set one opened the cache with (0: none recorded)."""
    return _native.ShardCache.recorded_limit(shard_cache_dir(cache_dir))
