"""How long ObjectStore.expand() takes to find 128 shards named by braces, behind 20 ms of latency per
request (the tests' FaultProxy, python/tests/support/, in front of moto's S3 emulator on loopback), against 128
stat() calls one after another and a glob's listing, in the same run; median of 3.

moto is an emulator, not S3: the figures show request counts and latency hiding, not S3's speed.

    .venv/bin/python bench/object_store_expand.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from chute import _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))  # test servers (not in the wheel)
from support.fault_proxy import FaultProxy  # noqa: E402
from support.s3_server import MotoServer  # noqa: E402

SHARDS = 128
LATENCY_S = 0.02


def timed(f) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main() -> None:
    with MotoServer() as s3:
        client = s3.client()
        client.create_bucket(Bucket="bench")
        for i in range(SHARDS):
            client.put_object(Bucket="bench", Key=f"train-{i:04d}.tar", Body=b"x" * 100)
        with FaultProxy(s3.endpoint, latency_s=LATENCY_S) as proxy:
            store = _native.ObjectStore(env=dict(s3.env, AWS_ENDPOINT_URL=proxy.url))
            braces = f"s3://bench/train-{{0000..{SHARDS - 1:04d}}}.tar"
            names = [f"s3://bench/train-{i:04d}.tar" for i in range(SHARDS)]
            runs = {"expand(braces)": [], "stat() x 128, one after another": [], "expand(glob)": []}
            for _ in range(3):  # interleaved
                assert len(store.expand(braces)) == SHARDS
                runs["expand(braces)"].append(timed(lambda: store.expand(braces)))
                runs["stat() x 128, one after another"].append(timed(lambda: [store.stat(n) for n in names]))
                runs["expand(glob)"].append(timed(lambda: store.expand("s3://bench/train-*.tar")))
    for name, times in runs.items():
        print(f"{name:34s} median {statistics.median(times):6.3f} s   ({', '.join(f'{t:.3f}' for t in times)})")


if __name__ == "__main__":
    main()
