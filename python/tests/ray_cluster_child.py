"""Run by test_ray.py::test_actors_on_cpu_only_nodes against scripts/ray_cluster.sh's cluster (RAY_ADDRESS):
RemoteLoader actors placed on the worker nodes by their custom resource, batches equal to chute.Loader's.
Prints one line: 'ok <actor nodes> <head node>' or raises."""

import sys

import ray
import torch

import chute

ray.init(log_to_driver=False)
import chute.ray  # noqa: E402

root = sys.argv[1]
kw = dict(batch_size=5, shuffle=True, seed=3, transforms=[chute.RandomResizedCrop(24), chute.RandomHorizontalFlip()])
expected = [(i.clone(), y) for i, y in chute.Loader(root, **kw)]
with chute.ray.RemoteLoader(
    root, num_actors=1, actor_options={"resources": {"cpu_node": 1}}, timeout_s=120, **kw
) as remote:
    got = list(remote)
    assert len(got) == len(expected)
    for (ei, el), (gi, gl) in zip(expected, got):
        assert torch.equal(ei, gi) and torch.equal(el, gl)
    nodes = ray.get(
        [a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()) for a in remote._pool.actors],
        timeout=120,
    )
head = ray.get_runtime_context().get_node_id()
assert head not in nodes, "an actor ran on the head node despite its cpu_node resource"
print("ok", len(set(nodes)), "worker nodes")
