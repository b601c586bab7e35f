"""Drop-in ``torch.utils.data.DataLoader``: ``from chute import DataLoader``.

``get_worker_info`` is torch's own: chute's workers set torch's worker info, so both
``chute.get_worker_info()`` and ``torch.utils.data.get_worker_info()`` work inside them.
"""

from torch.utils.data import default_collate, get_worker_info

from chute.dataloader.loader import DataLoader

__all__ = ["DataLoader", "default_collate", "get_worker_info"]
