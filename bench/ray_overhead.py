"""chute.ray.RemoteLoader against chute.Loader, in one run, on one machine (docs/SCALE.md).

Prints, for the same source, seed and transforms:
  1. the trainer's CPU time per batch (time.process_time of the trainer process: every thread in it, chute's
     decode threads for the local loader, Ray's driver threads for the remote one);
  2. images per second at the consumer: 1 actor with 1 CPU and 1 decode thread against the local loader
     with 1 thread, interleaved rounds, medians and their ratio;
  3. with --scale: K = 1, 2, 4 actors whose batches carry an artificial per-sample cost (a sleep, which
     takes no CPU, so that 4 actors scale on 2 cores) and a trainer that does nothing: the speed-up.
Also the per-batch object-store figures (ray.get time, bytes) that docs/SCALE.md's model uses.

  python bench/ray_overhead.py [--images 256] [--rounds 3] [--scale]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))

from chute.bench.harness import Contender, interleave, time_epoch  # noqa: E402


def make_dataset(root: Path, n: int) -> Path:
    from conftest import jpeg_bytes, natural_image

    rng = np.random.default_rng(0)
    pool = [jpeg_bytes(natural_image(rng, 500, 375)) for _ in range(16)]
    (root / "a").mkdir(parents=True)
    for i in range(n):
        (root / "a" / f"{i:05d}.jpg").write_bytes(pool[i % len(pool)])
    return root


def sleeper(cost_s: float):
    def hook(epoch, indices):
        time.sleep(cost_s * len(indices))

    return hook


def scale(src: str, kw: dict) -> None:
    """K = 1, 2, 4 actors, each batch carrying an artificial per-sample cost; the trainer does nothing."""
    import chute.ray

    cost = 0.02  # s per sample, a sleep (no CPU): 0.32 s per batch of 16, several times the decode
    kw = dict(kw, batch_size=16)
    results = {}
    for k in (1, 2, 4):
        loader = chute.ray.RemoteLoader(
            src,
            num_actors=k,
            num_cpus_per_actor=1,
            num_threads=1,
            max_inflight=2 * k,
            _actor_hook=sleeper(cost),
            **kw,
        )
        results[k] = time_epoch(loader, skip=k).rate  # after each actor's first batch
        loader.close()
        print(
            f"scale: {k} actors, {cost * 1e3:.0f} ms/sample artificial cost: {results[k]:.0f} img/s "
            f"(x{results[k] / results[1]:.2f} of 1 actor; ideal x{k})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", action="store_true")
    args = ap.parse_args()

    import ray

    import chute

    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    import chute.ray

    with tempfile.TemporaryDirectory() as tmp:
        src = str(make_dataset(Path(tmp), args.images))
        kw = dict(
            batch_size=args.batch,
            shuffle=True,
            seed=0,
            transforms=[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()],
        )
        if args.scale:
            scale(src, kw)
        else:
            overhead(src, kw, args)
    ray.shutdown()


def overhead(src: str, kw: dict, args) -> None:
    import chute
    import chute.ray

    local = chute.Loader(src, num_threads=1, **kw)
    remote = chute.ray.RemoteLoader(src, num_actors=1, num_cpus_per_actor=1, num_threads=1, **kw)
    time_epoch(local), time_epoch(remote)  # warm both (page cache, actor start, allocator)
    local.reset_stats()
    actor_before = remote.actor_stats()[0]
    remote.reset_stats()
    # Each epoch after its first batch, the trainer's CPU time over the same span.
    contenders = [
        Contender(name, lambda loader=loader: time_epoch(loader, skip=1, cpu_clock=time.process_time))
        for name, loader in (("local", local), ("remote", remote))
    ]
    interleave(contenders, rounds=args.rounds, warmup=0)
    med = {c.name: c.rate for c in contenders}
    mcpu = {c.name: c.summarize(lambda t: t.cpu_seconds / t.batches).median for c in contenders}
    s = remote.stats()
    actor_after, ls = remote.actor_stats()[0], local.stats()
    actor_cpu = (actor_after["worker_cpu_s"] - actor_before["worker_cpu_s"]) / (
        actor_after["samples"] - actor_before["samples"]
    )
    batch_bytes = args.batch * 3 * 224 * 224
    print(
        f"{args.images} JPEGs 500x375, batch {args.batch}, RandomResizedCrop(224)+flip, uint8, "
        f"{args.rounds} interleaved rounds (medians), hot page cache"
    )
    print(
        f"trainer CPU per batch: local chute.Loader(1 thread) {1e3 * mcpu['local']:.1f} ms, "
        f"RemoteLoader {1e3 * mcpu['remote']:.1f} ms  ({mcpu['remote'] / mcpu['local']:.2f}x)"
    )
    print(
        f"throughput: local 1 thread {med['local']:.0f} img/s, remote 1 actor/1 CPU {med['remote']:.0f} img/s "
        f"-> ratio {med['remote'] / med['local']:.2f}"
    )
    print(
        f"decode-thread CPU per sample: local {1e3 * ls['worker_cpu_s'] / ls['samples']:.2f} ms, "
        f"actor {1e3 * actor_cpu:.2f} ms (the same engine; a lower remote rate is the actor's process "
        f"getting less of the machine's CPU)"
    )
    print(
        f"remote per batch: actor busy {1e3 * s['actor_s_per_batch']:.1f} ms, ray.get "
        f"{1e3 * s['transfer_s_per_batch']:.2f} ms for {batch_bytes / 1e6:.1f} MB, trainer wait "
        f"{1e3 * s['wait_s'] / max(s['batches'], 1):.1f} ms"
    )
    t0 = time.perf_counter()
    for _ in range(20):
        np.empty(batch_bytes, np.uint8)[:] = 1
    print(
        f"reference: writing {batch_bytes / 1e6:.1f} MB once in this process takes "
        f"{1e3 * (time.perf_counter() - t0) / 20:.2f} ms"
    )
    local.close()
    remote.close()


if __name__ == "__main__":
    main()
