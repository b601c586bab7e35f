"""The GPU check's steps after the build, and its report (bench/gpu_check.sh runs it; docs/GPU.md).

  gpu_check.py record --work W --step NAME --status PASS|FAIL --wall S --detail TEXT [--figures JSON]
      a step the shell ran (unpacking, configuring, building), appended to W/steps.jsonl
  gpu_check.py run --work W --build B --deadline EPOCH_S [--smoke]
      the remaining steps in order, each a subprocess with a time limit inside the deadline: the C++ and Python
      CUDA tests (a skip fails unless its reason says the test is for the other kind of machine), the photos,
      H2D bandwidth, the delivery checks, ResNet-50 training, CPU scaling
  gpu_check.py report --work W --out OUT --budget S
      OUT/gpu_check.json (every step, check, figure and target) and OUT/gpu_check.md (the summary)

A step is PASS or FAIL; a target (README's performance claims: H2D >= 0.9 of pinned cudaMemcpyAsync, the GPU >= 95%
busy with chute device='cuda', 2 threads >= 1.8x of 1) is MET or MISSED and does not fail the check: a miss is a
finding, not a broken check. ``--smoke`` (the dry run, no GPU) runs every step's code on small sizes, chute's
simulated device standing in for the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Why a test may skip on each kind of machine (the reasons its skip marks start with); any other skip fails.
EXPECTED_SKIP = {False: "runs only without a GPU", True: "needs a CUDA GPU"}  # key: smoke (no GPU)


def step_arguments(doc: str, smoke: str) -> argparse.ArgumentParser:
    """The arguments of every measuring step (gpu_delivery.py, gpu_train.py): the photos, where its JSON goes,
    the batch size, and ``--smoke`` (no GPU: ``smoke`` says what stands in for it)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="an ImageFolder of photos (bench/gpu_check.sh makes one)")
    p.add_argument("--json", type=Path, required=True, help="where the step's checks, figures and targets go")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--smoke", action="store_true", help=f"no GPU: {smoke}, to run the code")
    return p


def without_gpu(args, program: str) -> bool:
    """True (and says so) when a step that needs a GPU has none and was not asked for ``--smoke``."""
    import torch

    if args.smoke or torch.cuda.is_available():
        return False
    print(f"{program}: needs a CUDA GPU (torch.cuda.is_available() is False); --smoke runs it without", file=sys.stderr)
    return True


def append(work: Path, record: dict) -> None:
    with open(work / "steps.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def junit(path: Path, smoke: bool) -> tuple[bool, str]:
    """(ok, summary) of a JUnit report: no failure, no error, and no skip but the expected kind."""
    try:
        cases = list(ET.parse(path).iter("testcase"))
    except (OSError, ET.ParseError) as e:
        return False, f"no report ({e})"
    failed, skipped, unexpected = [], 0, []
    for c in cases:
        name = f"{c.get('classname', '')}.{c.get('name', '')}"
        if c.find("failure") is not None or c.find("error") is not None:
            failed.append(name)
        skip = c.find("skipped")
        if skip is not None:
            skipped += 1
            reason = " ".join(filter(None, [skip.get("message", ""), skip.text or ""]))
            if EXPECTED_SKIP[smoke] not in reason:
                unexpected.append(f"{name} ({reason.strip()[:120]})")
    ok = bool(cases) and not failed and not unexpected
    summary = f"{len(cases) - skipped - len(failed)} passed, {len(failed)} failed, {skipped} skipped"
    summary += f" (each: {EXPECTED_SKIP[smoke]})" if skipped and not unexpected else ""
    if failed:
        summary += f"; failed: {failed[:5]}"
    if unexpected:
        summary += f"; skipped without cause: {unexpected[:5]}"
    return ok, summary


def steps(work: Path, build: Path, smoke: bool) -> list[dict]:
    """Each step: its command (or an in-process function), a cap on its time, and how to read its result."""
    py, photos = sys.executable, work / "photos"
    small = smoke
    gtest_filter = "Cuda*:Delivery*:DeviceSlots*:SimulatedDevice*:BatchRing*:MemoryMap*"
    if smoke:
        gtest_filter += ":JpegDecoder*:PngDecoder*:WebpDecoder*:RawImage*"
    return [
        {"step": "gtest", "cap": 120, "need": 20,
         "cmd": [str(build / "cpp" / "chute_tests"), f"--gtest_filter={gtest_filter}", f"--gtest_output=xml:{work / 'gtest.xml'}"],
         "read": lambda rc, log: junit(work / "gtest.xml", smoke)},
        {"step": "pytest", "cap": 240, "need": 40,
         "cmd": [py, "-m", "pytest", "python/tests/test_device.py", "python/tests/test_dataloader.py", "-q", "-rs",
                 "-p", "no:cacheprovider", "-k", "test_device or pin_memory", f"--junitxml={work / 'pytest.xml'}"],
         "read": lambda rc, log: junit(work / "pytest.xml", smoke)},
        {"step": "photos", "cap": 120, "need": 15,
         "cmd": [py, "-c", "import sys; from pathlib import Path; from chute.bench.dataset import ensure_dataset; "
                 "ensure_dataset(Path(sys.argv[1]), num_images=int(sys.argv[2]), progress=False)",
                 str(photos), "64" if small else "1024"],
         "read": lambda rc, log: (rc == 0, f"{'64' if small else '1024'} generated JPEGs, ~500x375, q90-96 (chute.bench.dataset)")},
        {"step": "h2d", "cap": 60, "need": 10,
         "cmd": [str(build / "cpp" / "bench" / "chute_h2d_bandwidth")] + (["8", "2", "10", "--simulated"] if small else ["256", "5", "40"]),
         "read": read_h2d},
        {"step": "delivery", "cap": 150, "need": 30, "json": "delivery.json",
         "cmd": [py, "bench/gpu_delivery.py", "--data", str(photos), "--json", str(work / "delivery.json")]
                + (["--smoke", "--batch-size", "16", "--batches", "2"] if small else [])},
        {"step": "train", "cap": 150, "need": 60, "json": "train.json",
         "cmd": [py, "bench/gpu_train.py", "--data", str(photos), "--json", str(work / "train.json")]
                + (["--smoke", "--batch-size", "8", "--steps", "3", "--warmup", "1"] if small else [])},
        {"step": "scaling", "cap": 90, "need": 30, "json": "scaling.json",
         "cmd": [py, "bench/cpu_scaling.py", "--data", str(photos), "--json", str(work / "scaling.json")]
                + (["--batch-size", "8", "--seconds", "0.5", "--counts", "1,2"] if small else [])},
    ]  # fmt: skip


def read_h2d(rc: int, log: str) -> tuple[bool, str, dict, list]:
    m = re.search(r"H2D_RATIO chute/pinned=([0-9.]+) pinned_GBps=([0-9.]+) chute_GBps=([0-9.]+)", log)
    if rc != 0 or m is None:
        return False, f"exit {rc}, no H2D_RATIO line", {}, []
    ratio, pinned, chute = (float(g) for g in m.groups())
    figures = {"ratio": ratio, "pinned_GBps": pinned, "chute_GBps": chute}
    detail = f"chute's delivery path {chute:.2f} GB/s, cudaMemcpyAsync from pinned {pinned:.2f} GB/s: ratio {ratio:.3f}"
    return (
        True,
        detail,
        figures,
        [{"name": "H2D >= 0.9 of pinned cudaMemcpyAsync", "value": ratio, "target": 0.9, "met": ratio >= 0.9}],
    )


def run(work: Path, build: Path, deadline: float, smoke: bool) -> int:
    status = 0
    for s in steps(work, build, smoke):
        left = deadline - time.time()
        if left < s["need"]:
            append(
                work,
                {
                    "step": s["step"],
                    "status": "FAIL",
                    "wall_s": 0,
                    "detail": f"budget spent ({left:.0f} s left, needs {s['need']})",
                },
            )
            print(f"FAIL {s['step']}: budget spent", flush=True)
            status = 1
            continue
        limit = min(s["cap"], left)
        print(f"\n== {s['step']} (limit {limit:.0f} s): {' '.join(s['cmd'])[:200]}", flush=True)
        t0 = time.time()
        with open(work / f"{s['step']}.log", "w") as log:
            try:
                rc = subprocess.run(s["cmd"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=limit).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        wall = round(time.time() - t0, 1)
        text = (work / f"{s['step']}.log").read_text(errors="replace")
        print("\n".join(text.splitlines()[-25:]), flush=True)
        record = {"step": s["step"], "wall_s": wall, "checks": [], "figures": {}, "targets": []}
        if "json" in s:
            try:
                record.update(json.loads((work / s["json"]).read_text()))
            except (OSError, ValueError) as e:
                record["checks"] = [{"name": s["step"], "status": "FAIL", "detail": f"exit {rc}, no figures ({e})"}]
            fails = [c for c in record["checks"] if c["status"] == "FAIL"]
            ok = rc == 0 and not fails
            record["detail"] = f"{len(record['checks']) - len(fails)} of {len(record['checks'])} checks passed" + (
                f" (exit {rc})" if rc else ""
            )
        else:
            got = s["read"](rc, text)
            ok, record["detail"] = got[0], got[1]
            if len(got) > 2:
                record["figures"], record["targets"] = got[2], got[3]
            ok = ok and rc == 0
        if rc == 124:
            record["detail"] = f"timed out after {limit:.0f} s; " + record["detail"]
        record["status"] = "PASS" if ok else "FAIL"
        status |= not ok
        append(work, record)
        print(f"{record['status']} {s['step']} ({wall} s): {record['detail']}", flush=True)
    return status


def read_steps(work: Path) -> list[dict]:
    path = work / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def report(work: Path, out: Path, budget: float, started: float, smoke: bool) -> int:
    records = read_steps(work)
    machine = next((r.get("figures", {}) for r in records if r["step"] == "machine"), {})
    failed = [r["step"] for r in records if r["status"] == "FAIL"] + [
        f"{r['step']}/{c['name']}" for r in records for c in r.get("checks", []) if c["status"] == "FAIL"
    ]
    targets = [t for r in records for t in r.get("targets", [])]
    total = round(time.time() - started, 1)
    summary = {
        "status": "FAIL" if failed else "PASS",
        "smoke": smoke,
        "failed": failed,
        "total_s": total,
        "budget_s": budget,
        "targets_missed": [t["name"] for t in targets if not t["met"]],
        "machine": machine,
        "steps": records,
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "gpu_check.md").write_text(markdown(summary, records, targets))
    print(f"\n{summary['status']}: {len(records)} steps in {total} s (budget {budget:.0f} s); failed: {failed or 'none'}; "
          f"targets missed: {summary['targets_missed'] or 'none'}")  # fmt: skip
    return 1 if failed else 0


def markdown(summary: dict, records: list[dict], targets: list[dict]) -> str:
    kind = "dry run (no GPU: simulated device, small sizes; figures mean nothing)" if summary["smoke"] else "GPU run"
    m = summary["machine"]
    lines = [
        f"# GPU check: {summary['status']} ({kind})",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; total {summary['total_s']} s of a {summary['budget_s']:.0f} s budget.",
        f"Machine: {m.get('gpu') or 'no GPU'}; {m.get('cores', '?')} cores; Python {m.get('python', '?')}, torch "
        f"{m.get('torch', '?')} (CUDA {m.get('cuda') or 'none'}); libcudart for chute's tests: {m.get('cudart') or 'none'}.",
        "",
        "| step | status | wall s | detail |",
        "| --- | --- | ---: | --- |",
    ]
    for r in records:
        lines.append(f"| {r['step']} | {r['status']} | {r.get('wall_s', 0)} | {_cell(r.get('detail', ''))} |")
        for c in r.get("checks", []):
            lines.append(f"| &nbsp;&nbsp;{c['name']} | {c['status']} | | {_cell(c['detail'])} |")
    if targets:
        lines += ["", "## Targets (README's claims)", "", "| target | value | met |", "| --- | ---: | --- |"]
        lines += [f"| {t['name']} | {t['value']} | {'MET' if t['met'] else 'MISSED'} |" for t in targets]
    figures = {r["step"]: r.get("figures", {}) for r in records}
    train = figures.get("train", {}).get("runs", {})
    if train:
        lines += [
            "",
            "## ResNet-50 training step",
            "",
            "| loader | img/s | GPU busy | loop wait per step |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, r in train.items():
            busy = "n/a" if r["gpu_busy"] is None else f"{r['gpu_busy']:.1%}"
            lines.append(f"| {name} | {r['img_s']:.0f} | {busy} | {1e3 * r['loop_wait_s_per_step']:.1f} ms |")
    rows = figures.get("scaling", {}).get("rows", [])
    if rows:
        lines += ["", "## CPU scaling (train pipeline)", "", "| threads / workers | chute img/s | efficiency | DataLoader img/s | efficiency |",
                  "| ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        lines += [f"| {r['count']} | {r['chute_img_s']:.0f} | {r['chute_efficiency']:.2f} | {r['dataloader_img_s']:.0f} | "
                  f"{r['dataloader_efficiency']:.2f} |" for r in rows]  # fmt: skip
    per_batch = figures.get("delivery", {}).get("per_batch_on_device", {})
    if per_batch:
        lines += ["", "## On the device, per batch of device='cuda' (+ Normalize)", "",
                  "| dtype | kernels | copies | kernel µs | host-blocking calls | ms blocked | ms in next() |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for dtype, p in per_batch.items():
            lines.append(f"| {dtype} | {p['kernels_per_batch']:.1f} | {p['copies_per_batch']:.1f} | {p['gpu_us_per_batch']:.0f} | "
                         f"{p['blocking_calls_per_batch']:.1f} | {p['blocking_ms_per_batch']:.2f} | {p['host_ms_per_next']:.2f} |")  # fmt: skip
    h2d = figures.get("h2d", {})
    if h2d:
        lines += [
            "",
            f"H2D: chute {h2d['chute_GBps']} GB/s, pinned cudaMemcpyAsync {h2d['pinned_GBps']} GB/s, ratio {h2d['ratio']}.",
        ]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:400]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--work", type=Path, required=True)
    rec.add_argument("--step", required=True)
    rec.add_argument("--status", choices=["PASS", "FAIL"], required=True)
    rec.add_argument("--wall", type=float, default=0)
    rec.add_argument("--detail", default="")
    rec.add_argument("--figures", default="{}", help="a JSON object")
    r = sub.add_parser("run")
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--build", type=Path, required=True)
    r.add_argument("--deadline", type=float, required=True)
    r.add_argument("--smoke", action="store_true")
    rep = sub.add_parser("report")
    rep.add_argument("--work", type=Path, required=True)
    rep.add_argument("--out", type=Path, required=True)
    rep.add_argument("--budget", type=float, required=True)
    rep.add_argument("--started", type=float, required=True)
    rep.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.what == "record":
        append(args.work, {"step": args.step, "status": args.status, "wall_s": round(args.wall, 1), "detail": args.detail,
                           "figures": json.loads(args.figures)})  # fmt: skip
        return 0
    if args.what == "run":
        os.chdir(ROOT)
        return run(args.work, args.build, args.deadline, args.smoke)
    return report(args.work, args.out, args.budget, args.started, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
