"""One rank of test_elastic.py::test_torchrun_restarts_on_four_two_three_then_one_rank, run by torchrun:
``elastic_child.py CHECKPOINT STEPS TAR...``.

What a training job does: it builds its loaders (rank and world size from torchrun), loads the loader states
of every old rank from the checkpoint when there is one (whatever the old world size), delivers STEPS
batches (0: the rest of the epoch), then gathers every rank's state_dict() and rank 0 writes the checkpoint.
The checkpoint also keeps the labels delivered so far (labels are sample numbers), so that the last run can
check that the epoch delivered every sample once (even_split=False), or every one but the few each restart
leaves out, with all ranks equal (even_split=True). Four loaders per run: both orders, both even_split."""

import json
import os
import sys

import torch.distributed as dist

import chute
from chute import _native

checkpoint, steps, tars = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
saved = json.load(open(checkpoint)) if os.path.exists(checkpoint) else {}
out = {}
for order in ("sample", "shards"):
    for even_split in (False, True):
        key = f"{order} even_split={even_split}"
        loader = chute.Loader(
            chute.TarDataset(tars, cache_dir=f"{checkpoint}.cache{rank}"),  # the tar indexes, one per rank
            batch_size=4,
            shuffle=True,
            seed=3,
            order=order,
            shard_window=3,
            even_split=even_split,
            transforms=[chute.CenterCrop(16)],
            num_threads=1,
        )
        assert (loader.rank, loader.world_size) == (rank, world)
        job = saved.get(key, {"states": None, "delivered": [], "lost": 0})
        if job["states"] is None:
            loader.set_epoch(1)
        else:
            loader.load_state_dict(job["states"])
            merged = chute.merge_state_dicts(job["states"])
            if merged["world_size"] != world:  # this restart splits what is left: R % world left out
                splits = [(s["world_size"], s["received"]) for s in merged["splits"]]
                splits.append((merged["world_size"], merged["received"]))
                job["lost"] += _native.epoch_shares(len(loader.source), 1, even_split, splits)[0] % world
        labels, batches = [], 0
        for _, y in loader:
            labels += y.tolist()
            batches += 1
            if batches == steps:
                break
        everyone = [None] * world
        dist.all_gather_object(everyone, (loader.state_dict(), labels))
        states = [s for s, _ in everyone]
        delivered = job["delivered"] + sum((d for _, d in everyone), [])
        out[key] = {"states": states, "delivered": delivered, "lost": job["lost"]}
        if rank == 0 and steps == 0:  # the epoch is over: check it
            n = len(loader.source)
            assert len(delivered) == len(set(delivered)), f"{key}: a sample delivered twice"
            if even_split:
                assert len(delivered) == n - n % 4 - job["lost"], (key, len(delivered), job["lost"])
                print(f"{key}: all but {n % 4 + job['lost']} samples once", flush=True)
            else:
                assert sorted(delivered) == list(range(n)), key
                print(f"{key}: every sample once", flush=True)
if rank == 0:
    with open(checkpoint + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(checkpoint + ".tmp", checkpoint)
dist.barrier()
dist.destroy_process_group()
