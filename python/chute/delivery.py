"""GPU delivery for chute.Loader: device parsing, pinned buffers, and the on-device dtype conversion.

``device='cuda'`` batches travel as uint8 (4x fewer bytes over PCIe than float32) through chute's
DeviceLoader (cpp/include/chute/delivery.h): pinned ring buffers, ``cudaMemcpyAsync`` on chute's own
stream, an event the consumer's current stream waits on. A float dtype is then made on the device by
torch ops issued on the consumer's current stream, after that wait: ``x.float() / 255``, ``Normalize``'s
``(x - mean) / std``, then ``.to(dtype)``, the same float32 arithmetic as the CPU path. The uint8 batch
is released right after, and its release is recorded on the same stream, so chute reuses its device
buffer only once those kernels have read it.

``device='sim'`` runs the same protocol against chute's simulated device (host memory standing in for
device memory, copies finishing late on another thread, with checks for early reuse). It is for chute's
tests only.
"""

from __future__ import annotations

import torch

from chute import _native
from chute.transforms import Normalize

_SIM_MAX_DELAY_US = 300  # the simulated device's per-half copy delay (test-only)


def cuda_availability() -> tuple[bool, int, str]:
    """(usable, device count, reason) as chute's own CUDA loader sees it (libcudart loaded at run time)."""
    return _native.cuda_availability()


def parse_device(device) -> tuple[str, int]:
    """'cpu' | 'cuda' | 'cuda:N' | torch.device | 'sim' -> (kind, index)."""
    if isinstance(device, str) and device == "sim":
        return "sim", 0
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from e
    if d.type == "cpu":
        return "cpu", 0
    if d.type == "cuda":
        return "cuda", d.index if d.index is not None else (torch.cuda.current_device()
                                                             if torch.cuda.is_available() else 0)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def open_device(kind: str, index: int, seed: int):
    if kind == "sim":
        return _native.Device.simulated(seed=seed, max_delay_us=_SIM_MAX_DELAY_US)
    return _native.Device.cuda(index)  # ValueError/RuntimeError naming why CUDA is unusable


def split_normalize(transforms) -> tuple[list, Normalize | None]:
    """The transforms without Normalize (applied on the device instead), and that Normalize."""
    items = list(getattr(transforms, "transforms", transforms))
    norms = [t for t in items if isinstance(t, Normalize)]
    if len(norms) > 1:
        raise ValueError("at most one Normalize")
    return [t for t in items if not isinstance(t, Normalize)], (norms[0] if norms else None)


class Delivery:
    """Drives a native DeviceLoader and turns its uint8 device batches into the requested dtype."""

    def __init__(self, native_loader, device, kind: str, index: int, dtype: torch.dtype,
                 normalize: Normalize | None, device_prefetch: int, max_device_memory: int):
        self.kind = kind
        self.torch_device = torch.device("cuda", index) if kind == "cuda" else torch.device("cpu")
        self.device = device
        self.native = _native.DeviceLoader(native_loader, device, device_prefetch, max_device_memory)
        self.dtype = dtype
        self.mean = self.std = None
        if normalize is not None and dtype != torch.uint8:
            self.mean = torch.tensor(normalize.mean, dtype=torch.float32, device=self.torch_device).view(1, 3, 1, 1)
            self.std = torch.tensor(normalize.std, dtype=torch.float32, device=self.torch_device).view(1, 3, 1, 1)

    def start_epoch(self, epoch: int, start: int = 0) -> None:
        self.native.start_epoch(epoch, start)

    def position(self) -> int:
        return self.native.position()

    def close(self) -> None:
        self.native.close()

    def next(self):
        stream = torch.cuda.current_stream(self.torch_device).cuda_stream if self.kind == "cuda" else 0
        batch = self.native.next(stream)
        if batch is None:
            return batch
        images, labels = batch
        del batch
        # The labels in their own small allocation (on the consumer's stream, after the copy): a kept label
        # tensor (targets.append(y)) must not hold the device batch buffer.
        labels = labels.clone()
        if self.dtype == torch.uint8:
            return images, labels
        # On the consumer's stream, which already waits for the copy; the uint8 buffer is released after.
        x = images.to(torch.float32).div_(255)
        if self.mean is not None:
            x.sub_(self.mean).div_(self.std)
        if self.dtype != torch.float32:
            x = x.to(self.dtype)
        del images
        return x, labels
