"""What the consumer received: the tensors of a batch and how many samples it holds. One definition for
everything that counts samples at the consumer, the bench's harness (``chute.bench.harness``) and the
doctor's measured runs (``chute.doctor.measure``) alike.

torch is imported when a batch is looked at, not with this module, so that importing the harness does not
import torch.
"""

from __future__ import annotations


def batch_tensors(batch) -> list:
    """The tensors in a batch (a tensor, or tuples, lists and dicts of them), in order."""
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for item in batch for t in batch_tensors(item)]
    return []


def batch_samples(batch) -> int:
    """Samples in a batch: the leading dimension of its first tensor (1 for a batch without one)."""
    tensors = batch_tensors(batch)
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else 1
