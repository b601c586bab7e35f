"""A process sharing a shard cache with the test (test_cache.py): one rank of a job on the node.

    python cache_child.py one DIR LIMIT KEY SIZE FILLS_FILE [--block]
        get(KEY): its fill appends a line to FILLS_FILE, prints "filling", writes half the bytes and
        (--block) waits for a line on stdin before writing the rest. Then prints the result as JSON.
    python cache_child.py many DIR LIMIT PREFIX COUNT SIZE
        get() of COUNT keys PREFIX0, PREFIX1, ..., each checked; prints the stats as JSON.

Every shard's bytes are payload(key, size).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def payload(key: str, size: int) -> bytes:
    """The bytes of the shard named `key`: a deterministic function of it."""
    block = hashlib.sha256(key.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def one(cache, key: str, size: int, fills_file: str, block: bool) -> dict:
    data = payload(key, size)

    def fill(view: memoryview) -> None:
        with open(fills_file, "a") as f:
            f.write(f"{os.getpid()}\n")
        view[: size // 2] = data[: size // 2]
        print("filling", flush=True)
        if block and sys.stdin.readline().strip() != "go":
            raise RuntimeError("the test closed stdin without saying go")
        view[size // 2 :] = data[size // 2 :]

    read = cache.get(key, size, fill).read()
    return {"sha256": hashlib.sha256(read).hexdigest(), "complete": read == data, "stats": cache.stats()}


def many(cache, prefix: str, count: int, size: int) -> dict:
    for i in range(count):
        key = f"{prefix}{i}"
        data = payload(key, size)

        def fill(view: memoryview, data=data) -> None:
            view[:] = data

        if cache.get(key, size, fill).read() != data:
            raise AssertionError(f"{key}: torn or wrong bytes served")
    return {"stats": cache.stats()}


def main(argv: list[str]) -> None:
    from chute import _native

    mode, directory, limit = argv[0], argv[1], int(argv[2])
    cache = _native.ShardCache(directory, limit)
    if mode == "one":
        result = one(cache, argv[3], int(argv[4]), argv[5], "--block" in argv)
    else:
        result = many(cache, argv[3], int(argv[4]), int(argv[5]))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
