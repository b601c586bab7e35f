"""chute on Ray: cluster-wide packing and preprocessing on other machines' CPUs.

>>> import chute.ray
>>> chute.ray.pack("/shared/imagenet/train", "/shared/train.chute")        # parts as Ray tasks, then the merge
>>> loader = chute.ray.RemoteLoader("/shared/train.chute", batch_size=256, shuffle=True, seed=0,
...                                 transforms=[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()],
...                                 num_actors=8, num_cpus_per_actor=4)
>>> for images, labels in loader:   # the same batches, in the same order, as chute.Loader on one machine
...     ...
>>> on_gpu = chute.ray.RemoteLoader(..., device="cuda")  # copied from the object store on chute's stream

Ray is an optional dependency (``pip install chute[ray]``): ``import chute`` never imports it, and this
package raises an ImportError naming the extra when Ray is missing. The source path must be readable from
every node that runs a task or an actor (shared storage), as with ``chute pack --part``.

Each actor's engine works ahead of the driver's calls on its share of the epoch (actor.py), and
``device=`` delivers batches to a GPU through chute.Loader's delivery protocol with the object-store
buffer as the copy's source (device.py). docs/SCALE.md has the model, the measurements and the limits.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without ray
    raise ImportError("chute.ray needs Ray: pip install 'chute[ray]' (or pip install ray)") from e

from chute.ray.loader import RemoteLoader
from chute.ray.pack import pack

__all__ = ["RemoteLoader", "pack"]
