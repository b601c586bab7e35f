"""The GPU check's delivery checks (bench/gpu_check.sh, docs/GPU.md), at a realistic batch (256 x 224^2 by default)
on generated photos. Each check is PASS or FAIL with its detail; the figures go to ``--json``.

  device_bytes   device='cuda' batches, uint8 and bf16 (Normalize on the device), channels_last, consumed on a
                 lagging side stream: uint8 equal to the CPU loader's bytes; bf16 equal to the same conversion of
                 those bytes on the GPU (and within bf16 rounding of the CPU's float path)
  pinned_bytes   pin_memory=True (chute.Loader, and chute.DataLoader's pin thread), each batch copied by the
                 user's .cuda(non_blocking=True) behind a lagging stream, current and side stream, and dropped at
                 once: every copy equal to the unpinned batches
  one_runtime    one libcudart mapped after torch and chute both used CUDA
  contexts       a process that runs chute on the CPU creates no CUDA context; one given cuda:N creates one on N
                 only (primary-context state read through the driver in fresh processes)
  kernels        what runs on the GPU per batch of device='cuda' bf16 + Normalize, and where the host blocks,
                 from torch.profiler: kernels, copies, synchronising calls (docs/GPU.md fills its figure in)
  pinned_blocks  torch's pinned blocks are powers of two (host_memory_stats), and chute counts that
                 (stats()["batch_buffer_held_bytes"])

    python bench/gpu_delivery.py --data DIR --json OUT [--batch-size 256] [--batches 3] [--smoke]

``--smoke`` runs every check's code without a GPU (the dry run): chute's simulated device for device='cuda', CPU
tensors for the user's copies, no streams; checks that need CUDA itself say "no GPU".
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time

import torch

import chute
from chute.bench.torch_peer import IMAGENET_MEAN, IMAGENET_STD

NORM = chute.Normalize(IMAGENET_MEAN, IMAGENET_STD)


class Gpu:
    """The real device, or (smoke) the stand-ins that let every line run without one."""

    def __init__(self, smoke: bool):
        self.smoke = smoke
        self.chute_device = "sim" if smoke else "cuda"
        self.torch_device = torch.device("cpu" if smoke else "cuda")

    def side_stream(self):
        return None if self.smoke else torch.cuda.Stream()

    def use(self, stream):
        return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)

    def lag(self, cycles: int = 20_000_000) -> None:  # ~10 ms of work queued ahead on the current stream
        if not self.smoke:
            torch.cuda._sleep(cycles)

    def sync(self) -> None:
        if not self.smoke:
            torch.cuda.synchronize()


class Report:
    def __init__(self):
        self.checks: list[dict] = []
        self.figures: dict = {}

    def check(self, name: str, ok: bool | None, detail: str) -> None:
        status = "SKIP" if ok is None else "PASS" if ok else "FAIL"
        self.checks.append({"name": name, "status": status, "detail": detail})
        print(f"{status} {name}: {detail}", flush=True)


def loader(folder, gpu: Gpu, bs: int, **kw):
    kw.setdefault("transforms", [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()])
    return chute.Loader(chute.ImageFolder(folder), batch_size=bs, shuffle=True, seed=11, drop_last=True, **kw)


def endless(loader):
    """Batches across epochs, for as many as are asked."""
    while True:
        yield from loader


def first(batches, n: int) -> list:
    out = []
    for x, y in batches:
        out.append((x, y))
        if len(out) == n:
            break
    return out


def check_device_bytes(r: Report, gpu: Gpu, folder, bs: int, n: int) -> None:
    from chute.delivery import DeviceConversion

    cl = torch.channels_last
    with loader(folder, gpu, bs, dtype=torch.uint8, memory_format=cl, device="cpu", pin_memory=False) as cpu:
        reference = [(x.clone(), y.clone()) for x, y in first(cpu, n)]
    for dtype in (torch.uint8, torch.bfloat16):
        transforms = [chute.RandomResizedCrop(224), chute.RandomHorizontalFlip()] + (
            [NORM] if dtype != torch.uint8 else []
        )
        convert = DeviceConversion(dtype, NORM if dtype != torch.uint8 else None, gpu.torch_device)
        side, bad = gpu.side_stream(), []
        with loader(
            folder, gpu, bs, dtype=dtype, memory_format=cl, transforms=transforms, device=gpu.chute_device
        ) as dev:
            got = []
            with gpu.use(side):
                for x, y in first(dev, n):
                    gpu.lag()  # the consumer's stream lags: chute's copy must still come before this work
                    got.append((x * 1 if dtype != torch.uint8 else x.clone(), y.clone()))
            gpu.sync()
        for k, ((x, y), (ex, ey)) in enumerate(zip(got, reference)):
            want = convert(ex.to(gpu.torch_device)) if dtype != torch.uint8 else ex
            if not (x.is_contiguous(memory_format=cl) and x.dtype == dtype and x.shape == ex.shape):
                bad.append(f"batch {k}: {x.dtype} {tuple(x.shape)} channels_last={x.is_contiguous(memory_format=cl)}")
            elif not torch.equal(x.cpu(), want.cpu()) or not torch.equal(y.cpu(), ey):
                diff = (x.float().cpu() - want.float().cpu()).abs().max().item()
                bad.append(f"batch {k}: bytes differ (max |diff| {diff:g})")
        name = str(dtype).removeprefix("torch.")
        r.check(
            f"device_bytes_{name}",
            len(got) == n and not bad,
            f"{len(got)} batches of {bs} x 3 x 224^2 {name} channels_last on a lagging side stream"
            + (
                f": {bad[:3]}"
                if bad
                else ": equal to the CPU loader's bytes" + (" converted on the GPU" if name != "uint8" else "")
            ),
        )


def _to_device(gpu: Gpu, images, labels):
    return images.to(gpu.torch_device, non_blocking=True), labels.to(gpu.torch_device, non_blocking=True)


def check_pinned_bytes(r: Report, gpu: Gpu, folder, bs: int, n: int) -> None:
    kw = dict(dtype=torch.float32, transforms=[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), NORM])
    with loader(folder, gpu, bs, pin_memory=False, **kw) as plain:
        expected = [(x.clone(), y.clone()) for x, y in first(plain, n)]
    for where in ("current", "side"):
        stream = gpu.side_stream() if where == "side" else None
        copies, pinned = [], 0
        with loader(folder, gpu, bs, pin_memory=not gpu.smoke, **kw) as pin, gpu.use(stream):
            for images, labels in first(pin, n):
                pinned += images.is_pinned()
                gpu.lag()  # the copy queues behind ~10 ms of work; the CPU batch is dropped at once
                copies.append(_to_device(gpu, images, labels))
                del images, labels
        gpu.sync()
        same = len(copies) == n and all(
            torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey) for (x, y), (ex, ey) in zip(copies, expected)
        )
        r.check(
            f"pinned_bytes_loader_{where}_stream",
            same and (gpu.smoke or pinned == n),
            f"chute.Loader(pin_memory=True): {n} float32 batches of {bs} x 3 x 224^2, {pinned} pinned, .cuda(non_blocking=True) "
            f"on the {where} stream behind a lag, CPU batch dropped: "
            + ("equal to the unpinned batches" if same else "DIFFER"),
        )
    # The drop-in: torchvision's ImageFolder and transforms (its native fast path where torchvision is there),
    # batches pinned by chute.DataLoader's pin thread, against the same DataLoader unpinned.
    from chute.bench.torch_peer import make_peer_dataset

    def dataloader(pin: bool):
        return chute.DataLoader(
            make_peer_dataset(folder), batch_size=bs, shuffle=True, generator=torch.Generator().manual_seed(5),
            num_workers=min(8, os.cpu_count() or 1), pin_memory=pin, drop_last=True,
        )  # fmt: skip

    expected = [(x.clone(), y.clone()) for x, y in first(dataloader(False), n)]
    for where in ("current", "side"):
        stream = gpu.side_stream() if where == "side" else None
        copies, pinned, dl = [], 0, dataloader(not gpu.smoke)
        with gpu.use(stream):
            for images, labels in first(dl, n):
                pinned += images.is_pinned()
                gpu.lag()
                copies.append(_to_device(gpu, images, labels))
                del images, labels
        gpu.sync()
        same = len(copies) == n and all(
            torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey) for (x, y), (ex, ey) in zip(copies, expected)
        )
        stats = dl.stats()
        r.check(
            f"pinned_bytes_dataloader_{where}_stream",
            same and (gpu.smoke or pinned == n),
            f"chute.DataLoader({stats['path']}, pinning: {stats['pinning']}): {n} batches, {pinned} pinned, copied on the "
            f"{where} stream behind a lag: " + ("equal to the unpinned batches" if same else "DIFFER"),
        )


def check_one_runtime(r: Report, gpu: Gpu, folder) -> None:
    if gpu.smoke:
        return r.check("one_runtime", None, "no GPU")
    torch.zeros(1, device="cuda")  # torch's runtime, in use
    with loader(folder, gpu, 8, device="cuda") as dev:
        first(dev, 1)
    maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line})
    r.figures["libcudart"] = maps
    r.check("one_runtime", len(maps) == 1, f"libcudart mapped: {maps}")


_CONTEXTS = """
import ctypes, json, sys
import chute
given = sys.argv[2]
with chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=8, transforms=[chute.CenterCrop(64)], num_threads=2,
                  device=given, pin_memory=False) as loader:
    if given == "cpu":
        n = sum(1 for _ in zip(range(4), loader))
    else:  # the native delivery alone: no torch.cuda call in this process, only chute's
        native = loader._driver.native
        native.start_epoch(0)
        n = sum(1 for _ in range(4) if native.next(0) is not None)
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
count = ctypes.c_int()
cuda.cuDeviceGetCount(ctypes.byref(count))
active = []
for i in range(count.value):
    dev, flags, state = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), i)
    cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(state))
    active.append(bool(state.value))
print(json.dumps({"batches": n, "devices": count.value, "active": active}))
"""


def check_contexts(r: Report, gpu: Gpu, folder) -> None:
    if gpu.smoke:
        return r.check("contexts", None, "no GPU")
    last = torch.cuda.device_count() - 1
    for given, want in (("cpu", None), (f"cuda:{last}", last)):
        out = subprocess.run(
            [sys.executable, "-c", _CONTEXTS, str(folder), given], capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            r.check(f"contexts_{given}", False, out.stderr.strip()[-500:])
            continue
        got = json.loads(out.stdout.strip().splitlines()[-1])
        ok = got["batches"] == 4 and all(a == (i == want) for i, a in enumerate(got["active"]))
        r.check(
            f"contexts_{given.replace(':', '')}",
            ok,
            f"chute given {given}: primary contexts active on {[i for i, a in enumerate(got['active']) if a]} of "
            f"{got['devices']} device(s)",
        )


def _profile_batches(gpu: Gpu, folder, bs: int, n: int, dtype) -> dict:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([] if gpu.smoke else [ProfilerActivity.CUDA])
    with loader(folder, gpu, bs, dtype=dtype, memory_format=torch.channels_last,
                transforms=[chute.RandomResizedCrop(224), chute.RandomHorizontalFlip(), NORM],
                device=gpu.chute_device) as dev:  # fmt: skip
        it = endless(dev)
        for _ in range(2):  # warm: device buffers, the conversion's first kernels
            next(it)
        gpu.sync()
        time.sleep(0.5)  # the next batches are ready: what is measured is delivery, not decoding
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(n):
                x, y = next(it)
                del x, y
            host_s = time.perf_counter() - t0
            gpu.sync()
    events = prof.events()
    on_gpu = [e for e in events if e.device_type.name == "CUDA"]
    copies = [e for e in on_gpu if "Memcpy" in e.name or "memcpy" in e.name]
    kernels = [e for e in on_gpu if e not in copies and "Memset" not in e.name]
    blocking = [
        e
        for e in events
        if e.device_type.name == "CPU"
        and e.name in ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize")
    ]
    aten = [e for e in events if e.device_type.name == "CPU" and e.name.startswith("aten::")]
    names: dict[str, int] = {}
    for e in kernels + copies:
        names[e.name[:80]] = names.get(e.name[:80], 0) + 1
    return {
        "batches": n,
        "kernels_per_batch": len(kernels) / n,
        "copies_per_batch": len(copies) / n,
        "gpu_us_per_batch": sum(e.time_range.elapsed_us() for e in kernels) / n,
        "blocking_calls_per_batch": len(blocking) / n,
        "blocking_ms_per_batch": sum(e.cpu_time_total for e in blocking) / 1e3 / n,
        "aten_ops_per_batch": len(aten) / n,
        "host_ms_per_next": 1e3 * host_s / n,
        "on_gpu": names,
    }


def check_kernels(r: Report, gpu: Gpu, folder, bs: int, n: int) -> None:
    out = {}
    for dtype in (torch.bfloat16, torch.float32, torch.uint8):
        out[str(dtype).removeprefix("torch.")] = p = _profile_batches(gpu, folder, bs, n, dtype)
        print(f"  {dtype}: {p['kernels_per_batch']:.1f} kernels, {p['copies_per_batch']:.1f} copies, "
              f"{p['blocking_calls_per_batch']:.1f} blocking calls ({p['blocking_ms_per_batch']:.2f} ms) per batch; "
              f"{p['host_ms_per_next']:.2f} ms in next(); {p['aten_ops_per_batch']:.1f} aten ops", flush=True)  # fmt: skip
    r.figures["per_batch_on_device"] = out
    bf16 = out["bfloat16"]
    r.check(
        "kernels",
        gpu.smoke or bf16["kernels_per_batch"] > 0,
        "counted (smoke: aten ops only)" if gpu.smoke else
        f"bf16 + Normalize: {bf16['kernels_per_batch']:.1f} kernels and {bf16['copies_per_batch']:.1f} copies per batch, "
        f"{bf16['gpu_us_per_batch']:.0f} us of kernels, host blocked {bf16['blocking_calls_per_batch']:.1f} times",
    )  # fmt: skip


def check_pinned_blocks(r: Report, gpu: Gpu, folder, bs: int) -> None:
    if gpu.smoke:
        return r.check("pinned_blocks", None, "no GPU")
    stats = getattr(torch.cuda, "host_memory_stats", None)
    rounding = {}
    # Bytes of the blocks handed out (active_bytes; older torch: allocated_bytes), by their rounded size.
    key = (
        next((k for k in ("active_bytes.current", "allocated_bytes.current") if k in stats()), None) if stats else None
    )
    if key is not None:
        for nbytes in (19_267_584 + 8 * 128, 77_070_336 + 8 * 256):  # batches of 128 uint8 and 256 bf16 224^2
            before = stats()[key]
            block = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            rounding[nbytes] = stats()[key] - before
            del block
    with loader(folder, gpu, bs, dtype=torch.float32, pin_memory=True) as pin:
        first(pin, 1)
        s = pin.stats()
    held, size = s["batch_buffer_held_bytes"], s["batch_buffer_bytes"]
    r.figures["pinned_blocks"] = {"torch_block_bytes": rounding, "chute_buffer_bytes": size, "chute_held_bytes": held}
    pow2 = all(v == 1 << (k - 1).bit_length() for k, v in rounding.items())
    r.check(
        "pinned_blocks",
        held == 1 << (size - 1).bit_length() and (pow2 or not rounding),
        f"torch's blocks for {list(rounding)} bytes: {list(rounding.values()) or 'no host_memory_stats figure'}; chute "
        f"counts {held} held for a {size}-byte batch buffer",
    )


def main() -> int:
    from gpu_check import step_arguments, without_gpu

    p = step_arguments(__doc__, "chute's simulated device")
    p.add_argument("--batches", type=int, default=3)
    args = p.parse_args()
    if without_gpu(args, "gpu_delivery.py"):
        return 2
    gpu, r = Gpu(args.smoke), Report()
    steps = {
        "device_bytes": lambda: check_device_bytes(r, gpu, args.data, args.batch_size, args.batches),
        "pinned_bytes": lambda: check_pinned_bytes(r, gpu, args.data, args.batch_size, args.batches),
        "one_runtime": lambda: check_one_runtime(r, gpu, args.data),
        "contexts": lambda: check_contexts(r, gpu, args.data),
        "kernels": lambda: check_kernels(r, gpu, args.data, args.batch_size, 4),
        "pinned_blocks": lambda: check_pinned_blocks(r, gpu, args.data, args.batch_size),
    }
    walls = {}
    for name, run in steps.items():
        t0 = time.perf_counter()
        try:
            run()
        except Exception as e:  # noqa: BLE001  (a check that breaks is a FAIL with its reason, the rest still run)
            r.check(name, False, f"{type(e).__name__}: {textwrap.shorten(str(e), 400)}")
        walls[name] = round(time.perf_counter() - t0, 2)
    r.figures["wall_s"] = walls
    args.json.write_text(json.dumps({"checks": r.checks, "figures": r.figures}, indent=2, default=str))
    return 1 if any(c["status"] == "FAIL" for c in r.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
