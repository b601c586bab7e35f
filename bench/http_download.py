"""Throughput of chute's HTTP engine: HttpEngine.download() of one file from nginx on loopback, directly and
through chute's FaultProxy adding a latency per request, with the I/O depth autotuned (max_in_flight=0)
against one request at a time (max_in_flight=1), in one run.

The configurations run alternately (interleaved repeats); the figure is the median MB/s (10^6 bytes per
second) of the byte-exact downloads. The file is served from the page cache (hot) and written to /dev/shm.
The proxy is Python (a thread per connection), so its figures are bounded by the proxy's own CPU, not the
engine's; the comparison that matters there is auto vs 1 at the same latency.

    python bench/http_download.py                          # 200 MB, 8 MiB chunks, 20 ms, 3 repeats
    python bench/http_download.py --mb 50 --latency-ms 50
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from chute import _native
from chute.bench.loopback import Nginx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))  # the fault proxy (not in the wheel)
from support.fault_proxy import FaultProxy  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=200, help="file size in MB (10^6 bytes)")
    p.add_argument("--chunk-mib", type=int, default=8, help="ranged GET size in MiB")
    p.add_argument("--latency-ms", type=float, default=20.0, help="the proxy's added latency per request")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    size = args.mb * 1000 * 1000
    with (
        tempfile.TemporaryDirectory(prefix="chute-http-bench-") as served,
        tempfile.TemporaryDirectory(
            prefix="chute-http-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        ) as out_dir,
    ):
        src = Path(served) / "data.bin"
        with open(src, "wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(1000 * 1000))
        want = hashlib.blake2b(src.read_bytes()).hexdigest()
        out = Path(out_dir) / "data.out"
        with Nginx(served) as base, FaultProxy(base, latency_s=args.latency_ms / 1000) as proxy:
            configs = [
                ("nginx", base, 0),
                ("nginx", base, 1),
                (f"proxy +{args.latency_ms:g} ms", proxy.url, 0),
                (f"proxy +{args.latency_ms:g} ms", proxy.url, 1),
            ]
            rates: dict[tuple[str, int], list[float]] = {(name, n): [] for name, _, n in configs}
            limits: dict[tuple[str, int], list[int]] = {(name, n): [] for name, _, n in configs}
            for _ in range(args.repeats):
                for name, url, max_in_flight in configs:
                    engine = _native.HttpEngine(max_in_flight=max_in_flight)
                    t0 = time.perf_counter()
                    engine.download(url + "/data.bin", size, out, chunk_bytes=args.chunk_mib << 20)
                    dt = time.perf_counter() - t0
                    if hashlib.blake2b(out.read_bytes()).hexdigest() != want:
                        raise SystemExit(f"{name}: the downloaded bytes differ")
                    rates[(name, max_in_flight)].append(size / dt / 1e6)
                    limits[(name, max_in_flight)].append(engine.stats()["in_flight_limit"])
                    del engine
    print(f"download() of {args.mb} MB in {args.chunk_mib} MiB ranged GETs, median of {args.repeats} (MB/s):")
    for name, _, n in configs:
        r = rates[(name, n)]
        depth = "auto" if n == 0 else str(n)
        print(
            f"  {name:<18} max_in_flight={depth:<4} {statistics.median(r):8.1f}  "
            f"(range {min(r):.1f}-{max(r):.1f}; final in_flight_limit {limits[(name, n)]})"
        )
    for name in dict.fromkeys(c[0] for c in configs):
        ratio = statistics.median(rates[(name, 0)]) / statistics.median(rates[(name, 1)])
        print(f"  {name}: auto / 1 = {ratio:.2f}x")


if __name__ == "__main__":
    main()
