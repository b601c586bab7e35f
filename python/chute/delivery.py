"""GPU delivery for chute.Loader: device parsing, pinned buffers, and the on-device dtype conversion.

``device='cuda'`` batches travel as uint8 (4x fewer bytes over PCIe than float32) through chute's
DeviceLoader (cpp/include/chute/gpu/delivery.h): pinned ring buffers, ``cudaMemcpyAsync`` on chute's own
stream, an event the consumer's current stream waits on. A float dtype is then made on the device by
torch ops issued on the consumer's current stream, after that wait: ``x.float() / 255``, ``Normalize``'s
``(x - mean) / std``, then ``.to(dtype)``, the same float32 arithmetic as the CPU path. The uint8 batch
is released right after, and its release is recorded on the same stream, so chute reuses its device
buffer only once those kernels have read it.

``pin_memory`` (pinned CPU batches for the user's own ``.to("cuda", non_blocking=True)``) takes its batch
buffers from torch's caching host allocator (``torch.empty(n, pin_memory=True)``) and hands each one over
with its batch: the user's tensors are views of torch's block, torch records an event on every stream
that copies out of it (``CachingHostAllocator_recordEvent``), and lends the block again only once those
events have completed. chute never writes a block after handing it over. So dropping the CPU tensor right
after ``.cuda(non_blocking=True)``, on any stream, cannot let a worker refill memory a copy still reads,
which it could when chute recycled its own pinned buffers (docs/ARCHITECTURE.md, "Pinned CPU batches").

``device='sim'`` runs the same protocol against chute's simulated device (host memory standing in for
device memory, copies finishing late on another thread, with checks for early reuse). It is for chute's
tests only.
"""

from __future__ import annotations

import torch

from chute import _native
from chute.transforms import Normalize

_SIM_MAX_DELAY_US = 300  # the simulated device's per-half copy delay (test-only)


def _cudart_next_to_torch() -> list[str]:
    """The libcudart files torch's wheels ship (nvidia/*/lib, torch/lib), newest soname first."""
    import glob
    import os
    import site

    roots = {os.path.dirname(os.path.dirname(torch.__file__))}
    roots.update(p for p in site.getsitepackages() + [site.getusersitepackages()] if isinstance(p, str))
    found = []
    for root in sorted(roots):
        for pattern in ("nvidia/*/lib/libcudart.so*", "nvidia/cu*/lib/libcudart.so*", "torch/lib/libcudart*.so*"):
            found.extend(glob.glob(os.path.join(root, pattern)))
    return sorted(set(found), reverse=True)


def cuda_availability() -> tuple[bool, int, str]:
    """(usable, device count, reason) as chute's own CUDA loader sees it: the libcudart already loaded in the
    process (torch's), else the one next to torch, else the system's (cpp/src/gpu/detail/cudart_api.h)."""
    _native.set_cudart_candidates(_cudart_next_to_torch())
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
        return "cuda", d.index if d.index is not None else (
            torch.cuda.current_device() if torch.cuda.is_available() else 0
        )
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def open_device(kind: str, index: int, seed: int):
    if kind == "sim":
        return _native.Device.simulated(seed=seed, max_delay_us=_SIM_MAX_DELAY_US)
    cuda_availability()  # the same library choice
    return _native.Device.cuda(index)  # ValueError/RuntimeError naming why CUDA is unusable


def host_pinning(pin_memory: bool | None) -> HostBlocks | None:
    """The pinned-buffer lender for ``device='cpu'``: torch's host allocator when torch can pin (CUDA), else
    None; ``pin_memory=True`` without CUDA warns as torch's DataLoader does and runs unpinned."""
    if pin_memory is False:
        return None
    if not torch.cuda.is_available():
        if pin_memory:  # as torch's DataLoader: say so, carry on unpinned
            import warnings

            why = cuda_availability()[2] or "torch.cuda.is_available() is False"
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, then device "
                f"pinned memory won't be used (chute: {why})",
                UserWarning,
                stacklevel=3,
            )
        return None
    return HostBlocks(lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=True))


class HostBlocks:
    """Pinned blocks lent to a loader's ring (a native BlockPool), one per batch, from ``allocate(nbytes)``
    (torch's caching host allocator; the simulated device's in tests). Runs on the consumer's thread.

    torch's caching host allocator rounds every request up to a power of two (its size classes: a freed
    block serves any request of its class), so a block holds more than the batch: a 19.3 MB batch a 32 MiB
    block. The pool says so (``power_of_two_blocks``), and the loader counts the blocks' real size against
    ``max_memory`` (``stats()["batch_buffer_held_bytes"]``)."""

    _SPARE = 1  # blocks kept ready beyond what the ring asks for, so a worker rarely waits for one

    def __init__(self, allocate):
        self._allocate = allocate
        self.pool = _native.BlockPool(power_of_two_blocks=True)
        self._blocks: dict[int, torch.Tensor] = {}  # address -> block, lent to the pool or the ring

    def stock(self, native_loader) -> None:
        for address in self.pool.take_returned():  # given back unused (a closed ring)
            self._blocks.pop(address, None)
        wanted = native_loader.host_blocks_wanted()
        if wanted <= 0:
            return
        nbytes = native_loader.host_block_bytes
        for _ in range(wanted + self._SPARE):
            block = self._allocate(nbytes)
            self._blocks[block.data_ptr()] = block
            self.pool.donate(block.data_ptr(), nbytes)
        native_loader.host_blocks_added()

    def adopt(self, batch):
        """(images, labels) over a handed-over block -> the images as the same view of torch's block, and the
        labels in a small pinned block of their own, so that kept labels hold no image memory (the binding
        copied them out of the ring) and still copy to the device asynchronously."""
        images, labels = batch
        block = self._blocks.pop(images.data_ptr())
        view = torch.empty((0,), dtype=images.dtype).set_(block.untyped_storage(), 0, images.shape, images.stride())
        pinned = self._allocate(max(labels.numel(), 1) * labels.element_size()).view(labels.dtype)[: labels.numel()]
        return view, pinned.copy_(labels)

    def clear(self) -> None:
        """After the ring's threads stopped: blocks not handed over go back to torch."""
        self._blocks.clear()


class HandOver:
    """Drives a native loader whose ring is lent by HostBlocks: stocks it before each batch, and turns each
    batch into views of its torch block (the DLPack views, and with them the ring's claim, go at once)."""

    def __init__(self, native_loader, blocks: HostBlocks):
        self.native = native_loader
        self.blocks = blocks

    def start_epoch(self, epoch: int, start: int = 0, splits=()) -> None:
        self.blocks.stock(self.native)
        self.native.start_epoch(epoch, start, splits=splits)

    def position(self) -> int:
        return self.native.position()

    def close(self) -> None:
        self.native.close()  # joins the workers: nothing writes a block after this
        self.blocks.clear()

    def next(self):
        self.blocks.stock(self.native)
        batch = self.native.next(hand_over=True)
        return None if batch is None else self.blocks.adopt(batch)


def split_normalize(transforms) -> tuple[list, Normalize | None]:
    """The transforms without Normalize (applied on the device instead), and that Normalize."""
    items = list(getattr(transforms, "transforms", transforms))
    norms = [t for t in items if isinstance(t, Normalize)]
    if len(norms) > 1:
        raise ValueError("at most one Normalize")
    return [t for t in items if not isinstance(t, Normalize)], (norms[0] if norms else None)


class DeviceConversion:
    """uint8 device batches -> the requested dtype, by torch ops on the consumer's current stream (which
    already waits for the copy): ``x.float() / 255``, ``Normalize``'s ``(x - mean) / std``, then
    ``.to(dtype)``. Shared by chute.Loader's delivery and chute.ray's."""

    def __init__(self, dtype: torch.dtype, normalize: Normalize | None, torch_device: torch.device):
        self.dtype = dtype
        self.mean = self.std = None
        if normalize is not None and dtype != torch.uint8:
            self.mean = torch.tensor(normalize.mean, dtype=torch.float32, device=torch_device).view(1, 3, 1, 1)
            self.std = torch.tensor(normalize.std, dtype=torch.float32, device=torch_device).view(1, 3, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if self.dtype == torch.uint8:
            return images
        x = images.to(torch.float32).div_(255)
        if self.mean is not None:
            x.sub_(self.mean).div_(self.std)
        return x if self.dtype == torch.float32 else x.to(self.dtype)


def consumer_stream(kind: str, torch_device: torch.device) -> int:
    """The stream a device batch is delivered to: torch's current one on CUDA (0 on the simulated device)."""
    return torch.cuda.current_stream(torch_device).cuda_stream if kind == "cuda" else 0


class Delivery:
    """Drives a native DeviceLoader and turns its uint8 device batches into the requested dtype."""

    def __init__(
        self, native_loader, device, kind: str, index: int, dtype: torch.dtype, normalize: Normalize | None, options
    ):
        self.kind = kind
        self.torch_device = torch.device("cuda", index) if kind == "cuda" else torch.device("cpu")
        self.device = device
        self.native = _native.DeviceLoader(native_loader, device, options)  # options: _native.DeliveryOptions
        self.convert = DeviceConversion(dtype, normalize, self.torch_device)

    def start_epoch(self, epoch: int, start: int = 0, splits=()) -> None:
        self.native.start_epoch(epoch, start, splits=splits)

    def position(self) -> int:
        return self.native.position()

    def close(self) -> None:
        self.native.close()

    def next(self):
        batch = self.native.next(consumer_stream(self.kind, self.torch_device))
        if batch is None:
            return batch
        images, labels = batch
        del batch
        # The labels in their own small allocation (on the consumer's stream, after the copy): a kept label
        # tensor (targets.append(y)) must not hold the device batch buffer.
        labels = labels.clone()
        # On the consumer's stream, which already waits for the copy; the uint8 buffer is released after.
        return self.convert(images), labels
