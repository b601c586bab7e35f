"""One rank of test_ray.py::test_torchrun_two_ranks (python -m torch.distributed.run --nproc_per_node=2):
its RemoteLoader takes rank and world_size from torchrun's environment, as chute.Loader does, and must
yield exactly chute.Loader's batches for that rank. Each rank runs its own local Ray instance."""

import os
import sys

import ray
import torch

import chute

ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
import chute.ray  # noqa: E402

root = sys.argv[1]
kw = dict(
    batch_size=4,
    shuffle=True,
    seed=5,
    even_split=False,
    transforms=[chute.RandomResizedCrop(24), chute.RandomHorizontalFlip()],
)
expected = [(i.clone(), y.clone()) for i, y in chute.Loader(root, num_threads=1, **kw)]
with chute.ray.RemoteLoader(root, num_actors=1, num_cpus_per_actor=1, timeout_s=120, **kw) as remote:
    assert (remote.rank, remote.world_size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    got = list(remote)
assert len(got) == len(expected) > 0
for (ei, el), (gi, gl) in zip(expected, got):
    assert torch.equal(ei, gi) and torch.equal(el, gl)
labels = sorted(torch.cat([y for _, y in got]).tolist())
print(f"rank {remote.rank} ok {len(got)} batches {len(labels)} samples", flush=True)
