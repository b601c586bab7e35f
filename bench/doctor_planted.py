"""chute doctor on planted bottlenecks: each case x loader, several runs, and the table of verdicts.

    python bench/doctor_planted.py [--runs 5] [--cases consumer,decode,...] [--loaders chute,dataloader,torch]

Each run is a separate process (a fresh loader, the storage case's read shim, a clean CPU hog). Cases:

* consumer:  a step that sleeps 100 ms per batch of 8 small JPEGs: expect consumer-bound.
* decode:    1600x1200 JPEGs centre-cropped to 224, a 1 ms step: expect input-bound, decode.
* transform: 200x150 JPEGs resized up to 1024 and centre-cropped, uint8, a 1 ms step: expect transform.
* storage:   small JPEGs whose every read() waits 30 ms (an LD_PRELOAD shim, bench/slow_read.c): expect storage.
* prefetch:  the decode case's images with prefetch=1 set by hand (prefetch_factor=1 for the DataLoaders,
             with num_workers=1 on chute.DataLoader: one batch ahead, as for chute.Loader)
             and a bursty step: 0 ms, then 1 s every 6th batch. The loader could keep up on average, but
             with one batch ahead the quick steps wait: expect prefetch (workers idle while the step waits,
             with cores to spare; for torch's DataLoader the doctor reads its workers' sleep from /proc).
* cores:     the decode case with two CPU-spinning processes beside it: expect cores (contended).

Loaders: ``chute`` (chute.Loader), ``dataloader`` (chute.DataLoader over torchvision's ImageFolder, which
takes the native fast path; needs torchvision), ``torch`` (torch's DataLoader, 2 workers, same dataset).
The expected verdict is (bound, stage) from chute.doctor's Verdict; a run counts as right when both match.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = ("consumer", "decode", "transform", "storage", "prefetch", "cores")
LOADERS = ("chute", "dataloader", "torch")
EXPECTED = {
    "consumer": ("consumer", "step"),
    "decode": ("input", "decode"),
    "transform": ("input", "transform"),
    "storage": ("input", "read"),
    "prefetch": ("input", "prefetch"),
    "cores": ("input", "cores"),
}


def _jpeg(rng, w, h, quality=92) -> bytes:
    import io

    from PIL import Image

    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [
            128 + 90 * np.sin((c + 1) * x / w * 6.28 + rng.uniform(0, 6)) * np.cos(y / h * 6.28 * (c + 1))
            for c in range(3)
        ],
        -1,
    ) + rng.normal(0, 8, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality, subsampling=0)
    return buf.getvalue()


def datasets(cache: Path) -> dict[str, Path]:
    """Two ImageFolder trees, made once: big (480 of 1600x1200) and small (800 of 200x150)."""
    out = {}
    rng = np.random.default_rng(0)
    for name, (n, w, h, q) in {"big": (480, 1600, 1200, 95), "small": (800, 200, 150, 90)}.items():
        root = cache / (name if name == "small" else f"{name}{n}")  # a new size, a new tree
        out[name] = root
        if (root / ".done").exists():
            continue
        images = [_jpeg(rng, w, h, q) for _ in range(6)]
        for c in range(2):
            (root / f"class_{c}").mkdir(parents=True, exist_ok=True)
            for i in range(n // 2):
                (root / f"class_{c}" / f"{i:04d}.jpg").write_bytes(images[(i + c) % 6])
        (root / ".done").write_text("")
    return out


def build(case: str, loader_kind: str, roots: dict[str, Path], **change):
    """The case's loader and step. ``change`` applies a recommendation: prefetch (chute's ``prefetch``, the
    DataLoaders' ``prefetch_factor``), threads (chute's ``num_threads``, the DataLoaders' ``num_workers``),
    persistent_workers, kind (another loader kind) or root (another dataset: a pack of the same images)."""
    import torch
    from torch.utils.data import DataLoader

    import chute

    loader_kind = change.get("kind", loader_kind)
    big = case in ("decode", "cores", "prefetch")
    root = change.get("root") or (roots["big"] if big else roots["small"])
    geometry = {"transform": (1024, 1024)}.get(case, (224, 224) if big else (64, 64))
    resize = case == "transform"
    batch = 4 if case == "transform" else 8
    step = {"consumer": lambda b: time.sleep(0.1)}.get(case, lambda b: time.sleep(0.001))
    if case == "prefetch":
        calls = [0]

        def step(b):  # noqa: F811  (bursty: quiet, then a long step)
            calls[0] += 1
            if calls[0] % 6 == 0:
                time.sleep(1.0)

    if loader_kind == "chute":
        transforms = ([chute.Resize(geometry[0])] if resize else []) + [chute.CenterCrop(geometry[0])]
        kwargs = {"prefetch": 1, "num_threads": 2} if case == "prefetch" else {}
        if "prefetch" in change:
            kwargs["prefetch"] = change["prefetch"]
        if "threads" in change:
            kwargs["num_threads"] = change["threads"]
        loader = chute.Loader(str(root), batch_size=batch, shuffle=True, transforms=transforms, **kwargs)
    else:
        from torchvision import datasets as tv_datasets
        from torchvision import transforms as T

        tf = T.Compose(([T.Resize(geometry[0])] if resize else []) + [T.CenterCrop(geometry[0]), T.PILToTensor()])
        dataset = tv_datasets.ImageFolder(str(root), transform=tf)
        cls = chute.DataLoader if loader_kind == "dataloader" else DataLoader
        # prefetch_factor * num_workers batches ahead: one, as chute's case (torch's DataLoader keeps 2 workers,
        # so 2 ahead: with one it would be decode-bound)
        kwargs = {"prefetch_factor": 1} if case == "prefetch" else {}
        workers = 1 if case == "prefetch" and loader_kind == "dataloader" else 2
        if "prefetch" in change:
            kwargs.pop("prefetch_factor", None)
            if change["prefetch"] is not None:
                kwargs["prefetch_factor"] = change["prefetch"]
        if "persistent_workers" in change:
            kwargs["persistent_workers"] = True
        loader = cls(dataset, batch_size=batch, shuffle=True, num_workers=change.get("threads", workers), **kwargs)
    torch.set_num_threads(1)
    return loader, step


def applied(action: str, case: str, loader_kind: str, roots: dict[str, Path], cache: Path) -> dict | None:
    """The change a recommendation names, as ``build`` arguments; None for one this bench cannot apply."""
    import re

    m = re.match(r"raise prefetch_factor to (\d+)", action)  # chute.DataLoader's fast path, set by hand
    if m:
        return {"prefetch": int(m.group(1))}
    m = re.match(r"raise prefetch to (\d+)", action)  # chute.Loader, set by hand
    if m:
        return {"prefetch": int(m.group(1))}
    m = re.match(r"raise threads to (\d+)", action) or re.match(r"set num_workers=(\d+)", action)
    if m:
        return {"threads": int(m.group(1))}
    if action.startswith("set persistent_workers=True"):
        return {"persistent_workers": True}
    if action.startswith("switch to chute"):
        return {"kind": "chute"}
    if action.startswith("pack the dataset") and loader_kind == "chute":
        import chute

        big = case in ("decode", "cores", "prefetch")
        packed = cache / f"packed-{'big' if big else 'small'}"  # outside the slow-read shim's prefix
        if not (packed / "index.chidx").exists():
            chute.pack(str(roots["big" if big else "small"]), str(packed))
        return {"root": packed}
    return None


def one_run(case: str, loader_kind: str, roots: dict[str, Path], cache: Path) -> dict:
    """In this process: build the case's loader and step, run chute.doctor, return its verdict and the top
    recommendation's gain: the doctor's own figure when it measured it, else measured here by applying it
    (the same step, a fresh loader with the change, rate against a fresh loader without it)."""
    import chute

    loader, step = build(case, loader_kind, roots)
    d = chute.doctor(loader, step, steps=12, warmup=4, storage=case == "storage", compare=True)
    v = d.verdict
    lo, hi = d.run.stall_interval()
    rec = v.recommendations[0] if v.recommendations else None
    gain, how = None, ""
    if rec is not None and rec.measured:
        gain, how = rec.gain, "measured by the doctor"
    elif rec is not None:
        change = applied(rec.action, case, loader_kind, roots, cache)
        if change is None:
            how = "not applied by this bench"
        else:
            rates = []
            for c in ({}, change):  # the same step and measurement, without and with the change
                other, other_step = build(case, loader_kind, roots, **c)
                rates.append(
                    chute.doctor(
                        other, other_step, steps=12, warmup=4, storage=False, compare=False, profile=False
                    ).run.rate
                )
            gain, how = rates[1] / rates[0], f"measured here: {rates[1]:.0f} vs {rates[0]:.0f} samples/s"
    return {
        "figures": _figures(d.run.loader_stats),
        "bound": v.bound,
        "stage": v.stage,
        "headline": v.headline,
        "stall": d.run.stall_fraction,
        "interval": [lo, hi],
        "steps": len(d.run.measured),
        "recommendation": str(rec) if rec else "",
        "gain": gain,
        "gain_basis": how,
        "path": d.dataloader.path if d.dataloader else None,
    }


def _figures(s: dict | None) -> str:
    """The engine figures the verdict's rules read (chute/stats.h), for a run on chute's engine: the workers'
    CPU per busy second, their idle share, the process's cores busy of its cores, the measured seconds."""
    if not s or not s.get("samples"):
        return ""
    busy = s["read_s"] + s["decode_s"] + s["transform_s"]
    idle = s["worker_idle_s"] / max(busy + s["worker_idle_s"], 1e-9)
    used = s["process_cpu_s"] / max(s["elapsed_s"], 1e-9)
    return (
        f"cpu/busy {s['worker_cpu_s'] / max(busy, 1e-9):.2f}, idle {100 * idle:.0f}%, "
        f"{used:.2f}/{s['cores']} cores, prefetch {s['prefetch']}{' auto' if s.get('auto_prefetch') else ''}, "
        f"{s['elapsed_s']:.2f} s"
    )


def spawn(case: str, loader_kind: str, cache: Path, shim: Path | None) -> dict:
    env = dict(os.environ)
    if case == "storage" and shim is not None:
        env.update(LD_PRELOAD=str(shim), CHUTE_SLOW_READ_PREFIX=str(cache / "small"), CHUTE_SLOW_READ_MS="30")
    hogs = []
    if case == "cores":
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--one", case, loader_kind, "--cache", str(cache)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "chute-planted")
    p.add_argument("--one", nargs=2, metavar=("CASE", "LOADER"), help=argparse.SUPPRESS)
    args = p.parse_args()
    roots = datasets(args.cache)
    if args.one:
        print(json.dumps(one_run(args.one[0], args.one[1], roots, args.cache)))
        return 0
    try:
        import torchvision  # noqa: F401

        have_tv = True
    except Exception:  # noqa: BLE001  (torchvision fails to import beside some torch builds)
        have_tv = False
    shim = args.cache / "libslow_read.so"
    if not shim.exists():
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(HERE / "slow_read.c"), "-ldl"], check=True
        )
    print(f"{'case':10} {'loader':11} {'expected':20} right  verdicts (bound/stage, stall interval, steps)")
    for case in args.cases.split(","):
        for kind in args.loaders.split(","):
            if kind != "chute" and not have_tv:
                print(f"{case:10} {kind:11} skipped: needs torchvision (it does not import here)")
                continue
            results = [spawn(case, kind, args.cache, shim) for _ in range(args.runs)]
            want = EXPECTED[case]
            right = sum((r.get("bound"), r.get("stage")) == want for r in results)
            cells = [
                r["error"]
                if "error" in r
                else f"{r['bound']}/{r['stage']} [{100 * r['interval'][0]:.0f}-{100 * r['interval'][1]:.0f}%, {r['steps']}]"
                for r in results
            ]
            print(f"{case:10} {kind:11} {'/'.join(want):20} {right}/{len(results)}  " + "; ".join(cells))
            for r in results:  # what the engine's rules read, for each wrong verdict on chute's engine
                if "error" not in r and (r["bound"], r["stage"]) != want and r.get("figures"):
                    print(f"{'':43}{r['bound']}/{r['stage']}: {r['figures']}")
            recs = {r["recommendation"].split(":")[0] for r in results if r.get("recommendation")}
            gains = sorted(r["gain"] for r in results if r.get("gain") is not None)
            if recs:
                spread = (
                    f"gain median {gains[len(gains) // 2]:.2f}x, range {gains[0]:.2f}-{gains[-1]:.2f}x over "
                    f"{len(gains)} runs"
                    if gains
                    else "gain not measured"
                )
                bases = sorted({r["gain_basis"].split(":")[0] for r in results if r.get("gain_basis")})
                print(f"{'':43}top recommendation: {' | '.join(sorted(recs))}; {spread} ({', '.join(bases)})")
            else:
                print(f"{'':43}no recommendation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
