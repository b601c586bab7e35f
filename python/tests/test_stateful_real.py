"""chute.DataLoader's state_dict() against torchdata's StatefulDataLoader (the real-torchvision tier,
scripts/test_torchvision.sh, which installs torchdata): for the same sampler and seed, a state taken after any
batch of an epoch resumes the same sequence of indices in both, and both equal torch's uninterrupted
DataLoader (but for torchdata's own RandomSampler with workers, where StatefulDataLoader's order is not torch's
DataLoader's even uninterrupted). On the tensor fast path and on the ImageFolder fast path (one image per class: a label is its
sample's index), with 0 and 2 workers.

In a later epoch chute goes on matching torch's uninterrupted run; StatefulDataLoader fast-forwards a plain
sampler from a fresh iterator, which gives the first epoch's order again, so it is compared in the first
epoch only."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_folder
from torch.utils.data import RandomSampler, SequentialSampler, TensorDataset

import chute

stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is installed in .venv-tv only")
torchvision = pytest.importorskip("torchvision")
N = 22


def samplers(dataset):
    """name -> a fresh sampler (its own generator, seeded), made anew for each loader."""
    return {
        "torch RandomSampler": lambda: RandomSampler(dataset, generator=torch.Generator().manual_seed(5)),
        "torchdata RandomSampler": lambda: stateful.sampler.RandomSampler(
            dataset, generator=torch.Generator().manual_seed(5)
        ),
        "SequentialSampler": lambda: SequentialSampler(dataset),
    }


def indices(batch) -> list[int]:
    return batch[1].tolist()


def resumed_sequence(cls, dataset, make_sampler, cut: int, num_workers: int) -> list[int]:
    """Indices of epoch 0: `cut` batches, then state_dict() (through JSON for chute), a new loader, the rest."""
    kw = dict(batch_size=3, num_workers=num_workers)
    first = cls(dataset, sampler=make_sampler(), **kw)
    it = iter(first)
    head = [i for _ in range(cut) for i in indices(next(it))]
    state = first.state_dict()
    if cls is chute.DataLoader:
        state = json.loads(json.dumps(state))
    del it, first
    second = cls(dataset, sampler=make_sampler(), **kw)
    second.load_state_dict(state)
    return head + [i for b in second for i in indices(b)]


def datasets(tmp_path):
    tensor = TensorDataset(torch.zeros(N, 2), torch.arange(N))
    folder = make_folder(tmp_path / "folder", N, 1)  # class k holds one image: its label is its index
    transform = torchvision.transforms.Compose(
        [torchvision.transforms.RandomResizedCrop(16), torchvision.transforms.PILToTensor()]
    )
    images = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return {"tensor": tensor, "imagefolder": images}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("path", ["tensor", "imagefolder"])
def test_same_indices_as_statefuldataloader_after_any_batch(tmp_path, path, num_workers):
    dataset = datasets(tmp_path)[path]
    assert chute.DataLoader(dataset, batch_size=3).stats()["path"] == f"fast:{path}"
    for name, make_sampler in samplers(dataset).items():
        expected = [
            i for b in torch.utils.data.DataLoader(dataset, sampler=make_sampler(), batch_size=3) for i in indices(b)
        ]
        for cut in (1, 4, 7, 8):  # after the first batch, mid-way, after the last (8 of 8)
            ours = resumed_sequence(chute.DataLoader, dataset, make_sampler, cut, num_workers)
            assert ours == expected, f"{name}, state after batch {cut}"
            if name == "torchdata RandomSampler" and num_workers:
                # torchdata's own: with workers its iterator is made twice, and its RandomSampler draws an order
                # each time, so StatefulDataLoader's epoch is not torch's DataLoader's even uninterrupted.
                continue
            theirs = resumed_sequence(stateful.StatefulDataLoader, dataset, make_sampler, cut, num_workers)
            assert theirs == ours, f"{name}, state after batch {cut}: torchdata's"


@pytest.mark.parametrize("path", ["tensor", "imagefolder"])
def test_a_later_epoch_resumes_torchs_order(tmp_path, path):
    dataset = datasets(tmp_path)[path]
    make = lambda: chute.DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(9))  # noqa: E731
    reference = torch.utils.data.DataLoader(
        dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(9)
    )
    expected = [[i for b in reference for i in indices(b)] for _ in range(3)]
    first = make()
    [indices(b) for b in first]  # epoch 0
    it = iter(first)
    head = [i for _ in range(3) for i in indices(next(it))]
    state = json.loads(json.dumps(first.state_dict()))
    second = make()
    second.load_state_dict(state)
    assert head + [i for b in second for i in indices(b)] == expected[1]
    assert [i for b in second for i in indices(b)] == expected[2]
