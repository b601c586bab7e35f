"""The device layer: GPU utilisation and memory through NVML, and the host-to-device copy.

NVML (``libnvidia-ml.so.1``, shipped with the NVIDIA driver) is loaded at run time through ctypes, so
chute neither links against it nor needs it installed: without it, or without a CUDA device, the layer
reports why and the rest of the diagnosis goes on. Utilisation is polled at 20 Hz; NVML itself averages
``utilization.gpu`` over its own sample period (1/6 s to 1 s depending on the GPU), which bounds how
sharp the curve can be.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from dataclasses import dataclass, field

from chute.doctor.sampling import BackgroundSampler

NVML_LIBRARY = "libnvidia-ml.so.1"


class NvmlError(RuntimeError):
    pass


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """The few NVML calls the doctor needs. ``Nvml.open()`` raises :class:`NvmlError` with the reason
    when the library or a device is missing; ``close()`` shuts NVML down."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        lib.nvmlErrorString.restype = ctypes.c_char_p
        self._check(lib.nvmlInit_v2(), "nvmlInit_v2")

    @classmethod
    def open(cls, library: str = NVML_LIBRARY) -> Nvml:
        try:
            lib = ctypes.CDLL(library)
        except OSError as e:
            raise NvmlError(f"NVML is not available ({library} could not be loaded: {e})") from None
        return cls(lib)

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise NvmlError(f"{call} failed: {self._lib.nvmlErrorString(code).decode()} (NVML error {code})")

    def device_count(self) -> int:
        n = ctypes.c_uint()
        self._check(self._lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "nvmlDeviceGetCount_v2")
        return n.value

    def handle(self, index: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        self._check(
            self._lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(h)),
            "nvmlDeviceGetHandleByIndex_v2",
        )
        return h

    def name(self, handle: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(96)
        self._check(self._lib.nvmlDeviceGetName(handle, buf, ctypes.c_uint(len(buf))), "nvmlDeviceGetName")
        return buf.value.decode(errors="replace")

    def utilization(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        """(GPU busy %, memory-controller busy %) over NVML's last sample period."""
        u = _Utilization()
        self._check(self._lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(u)), "nvmlDeviceGetUtilizationRates")
        return u.gpu, u.memory

    def memory(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        """(used bytes, total bytes)."""
        m = _Memory()
        self._check(self._lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(m)), "nvmlDeviceGetMemoryInfo")
        return m.used, m.total

    def close(self) -> None:
        self._lib.nvmlShutdown()


def nvml_index(cuda_index: int) -> int:
    """NVML numbers every GPU; CUDA only the visible ones: map through CUDA_VISIBLE_DEVICES when it lists
    indices (UUIDs are left as the identity mapping)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    items = [v.strip() for v in visible.split(",") if v.strip()]
    if items and all(v.isdigit() for v in items) and cuda_index < len(items):
        return int(items[cuda_index])
    return cuda_index


@dataclass
class GpuTimeline:
    t: list[float] = field(default_factory=list)
    util: list[int] = field(default_factory=list)  # %
    memory_used: list[int] = field(default_factory=list)  # bytes


class GpuSampler(BackgroundSampler):
    """Polls one GPU's utilisation and memory every ``interval`` seconds on a background thread."""

    def __init__(self, nvml: Nvml, index: int, interval: float = 0.05):
        super().__init__(interval, "chute-doctor-gpu")
        self._nvml, self._handle = nvml, nvml.handle(index)
        self.name = nvml.name(self._handle)
        self.memory_total = nvml.memory(self._handle)[1]
        self.timeline = GpuTimeline()
        self.error: str | None = None

    def _run(self) -> None:
        tl = self.timeline
        while True:
            try:
                util, _ = self._nvml.utilization(self._handle)
                used, _ = self._nvml.memory(self._handle)
            except NvmlError as e:
                self.error = str(e)
                return
            tl.t.append(time.perf_counter() - self.start_time)
            tl.util.append(util)
            tl.memory_used.append(used)
            if self._stop.wait(self.interval):
                return


@dataclass
class CopyTiming:
    bytes: int
    pageable_ms: float
    pinned_ms: float


@dataclass
class DeviceReport:
    available: bool
    reason: str = ""  # why there is no device layer
    name: str = ""
    memory_total: int = 0
    timeline: GpuTimeline = field(default_factory=GpuTimeline)
    copy: CopyTiming | None = None
    sample_hz: float = 0.0

    def util_stats(self, skip_s: float = 0.0) -> dict[str, float]:
        values = [u for t, u in zip(self.timeline.t, self.timeline.util) if t >= skip_s] or self.timeline.util
        if not values:
            return {}
        q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
        return {
            "mean": statistics.fmean(values),
            "p10": q[0],
            "p50": statistics.median(values),
            "p90": q[8],
            "idle_fraction": sum(v < 10 for v in values) / len(values),
        }


def resolve_cuda_device(device) -> tuple[int | None, str]:
    """The CUDA device index to watch, or None and the reason there is none."""
    import torch

    if device is not None:
        device = torch.device(device)
        if device.type != "cuda":
            return None, f"device={device} is not a CUDA device"
    if not torch.cuda.is_available():
        return None, "no CUDA device (torch.cuda.is_available() is False)"
    if device is None or device.index is None:
        return torch.cuda.current_device(), ""
    return device.index, ""


def time_copy(tensor, cuda_index: int, repeats: int = 5) -> CopyTiming:
    """Median host-to-device copy time of ``tensor``, from pageable and from pinned memory (CUDA events)."""
    import torch

    dev = torch.device("cuda", cuda_index)
    host = tensor.detach().cpu().contiguous()
    pinned = host.pin_memory()

    def timed(src) -> float:
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            src.to(dev, non_blocking=True)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    timed(pinned)  # warm-up: context and allocator
    return CopyTiming(host.numel() * host.element_size(), timed(host), timed(pinned))
