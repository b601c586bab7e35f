# A training script of a common shape, run as a script by test_fork.py: no `if __name__ == "__main__":` guard
# (normal on Linux, where torch's DataLoader forks its workers), a training DataLoader that falls back to
# worker processes, and a validation DataLoader on chute's native fast path whose threads stay alive
# between epochs. Each epoch starts the training workers again (no persistent_workers) while the
# validation loader's threads run: they must fork as torch's would. A worker that re-ran this script (as a
# forkserver or spawn worker does without a guard) would print a second "start" line.
#
#   python fork_script_child.py ROOT {chute|torch}
import sys

import torch

import chute
from chute.bench.pil_reference import as_torchvision, real_torchvision

T = real_torchvision() or as_torchvision()
root, which = sys.argv[1], sys.argv[2]
Loader = chute.DataLoader if which == "chute" else torch.utils.data.DataLoader
print("start", flush=True)


class Rows(torch.utils.data.Dataset):
    """A dataset of the user's own: chute.DataLoader has no fast path for it (worker processes run it)."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i


train = Loader(Rows(), batch_size=8, shuffle=True, num_workers=2)
val = Loader(
    T.ImageFolder(root, transform=T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])),
    batch_size=8,
)
if which == "chute":
    assert train.stats()["path"] == "generic" and val.stats()["path"] == "fast:imagefolder"
seen, workers = [], set()
for _epoch in range(3):
    batches = iter(train)
    workers |= {w._popen.method for w in batches._workers}  # how the workers were started
    labels = torch.cat([y for _, y in batches])
    assert sorted(labels.tolist()) == list(range(48))
    seen.append(sum(len(y) for _, y in val))
print("done", seen, sorted(workers), flush=True)
