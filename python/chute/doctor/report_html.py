"""The HTML report: one self-contained file (plots as base64 PNG data URIs, no scripts, no external files)
with the verdict, the stall/utilisation timeline, per-stage bars and the throughput of every loader
measured. Plots are drawn with matplotlib's Agg backend."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from chute.doctor.findings import WORTH_IT, Findings

STALL_COLOUR = "#d62728"  # matplotlib's tab:red: the consumer waiting for data
STEP_COLOUR = "#1f77b4"  # tab:blue: the step's own time
CPU_COLOUR = "#2ca02c"  # tab:green
WORKER_COLOUR = "#ff7f0e"  # tab:orange
GPU_COLOUR = "#9467bd"  # tab:purple


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def timeline_png(d: Findings) -> str:
    """Each batch as a red (waiting for data) and a blue (step) segment over time; below, the cores in use
    and, with a GPU, its utilisation."""
    import matplotlib.pyplot as plt

    run = d.run
    rows = 3 if d.device is not None and d.device.available and d.device.timeline.t else 2
    fig, axes = plt.subplots(rows, 1, figsize=(10, 2.4 * rows + 0.8), sharex=True, layout="constrained")
    ax = axes[0]
    ax.broken_barh([(s.start, s.wait_s) for s in run.steps], (0.55, 0.4), color=STALL_COLOUR, label="waiting for data")
    ax.broken_barh(
        [(s.start + s.wait_s, max(s.step_s, 1e-4)) for s in run.steps],
        (0.05, 0.4),
        color=STEP_COLOUR,
        label="step" if run.with_step else "consumer (does nothing)",
    )
    if run.warmup and len(run.steps) > run.warmup:
        ax.axvspan(0, run.measured_start, color="#bbbbbb", alpha=0.3, label="warm-up")
    ax.set_yticks([0.25, 0.75], ["step", "stall"])
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1.0), fontsize=8, ncol=3, frameon=False)
    fig.suptitle(f"stall timeline: waiting for data {100 * run.stall_fraction:.0f}% of the measured time")
    cpu = run.cpu
    axes[1].plot(cpu.t, cpu.process, color=CPU_COLOUR, label="this process (step + chute threads)")
    axes[1].plot(cpu.t, cpu.children, color=WORKER_COLOUR, label="worker processes")
    axes[1].plot(cpu.t, cpu.main_thread, color="#555555", linestyle=":", label="main thread")
    if d.cpu is not None:
        axes[1].axhline(d.cpu.cores, color="black", linewidth=0.8, linestyle="--", label=f"{d.cpu.cores} cores")
    axes[1].set_ylabel("cores busy")
    axes[1].legend(loc="lower right", bbox_to_anchor=(1, 1.0), fontsize=8, ncol=4, frameon=False)
    axes[1].set_ylim(bottom=0)
    if rows == 3:
        g = d.device.timeline
        axes[2].plot(g.t, g.util, color=GPU_COLOUR, drawstyle="steps-post", label=f"GPU utilisation ({d.device.name})")
        axes[2].set_ylim(0, 105)
        axes[2].set_ylabel("GPU %")
        axes[2].legend(loc="lower right", bbox_to_anchor=(1, 1.0), fontsize=8, frameon=False)
    axes[-1].set_xlabel("seconds")
    return _png(fig)


def stages_png(d: Findings) -> str | None:
    import matplotlib.pyplot as plt

    ms, _, where = d.stage_shares()
    if not ms:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(ms) + 1.2))
    names = list(ms)
    colours = {"read": "#8c564b", "decode": STEP_COLOUR, "transform": WORKER_COLOUR, "other": "#7f7f7f"}
    ax.barh(names, [ms[n] for n in names], color=[colours.get(n, STEP_COLOUR) for n in names])
    for i, n in enumerate(names):
        ax.text(ms[n], i, f" {ms[n]:.2f} ms", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("ms per sample (summed over workers)")
    ax.set_title(f"per-stage time ({where})")
    return _png(fig)


def throughput_png(d: Findings) -> str:
    import matplotlib.pyplot as plt

    runs = [d.run, *d.comparisons]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(runs) + 1.2))
    labels = [r.label + (" (yours)" if i == 0 else "") for i, r in enumerate(runs)]
    rates = [r.rate for r in runs]
    colours = [
        STALL_COLOUR if i == 0 else (CPU_COLOUR if r.label.startswith("chute") else WORKER_COLOUR)
        for i, r in enumerate(runs)
    ]
    ax.barh(labels, rates, color=colours)
    for i, r in enumerate(rates):
        ax.text(r, i, f" {r:,.0f}" + (f" ({r / rates[0]:.1f}x)" if i and rates[0] else ""), va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("samples per second received by the step")
    ax.set_title(f"throughput sweep: {len(runs)} configuration(s), {len(d.run.measured)} measured batches each")
    return _png(fig)


_CSS = """
body { font-family: 'DejaVu Sans', sans-serif; margin: 24px auto; max-width: 1040px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ccc; }
.verdict { background: #f4f4f0; border-left: 6px solid #333; padding: 10px 16px; }
.verdict .headline { font-weight: bold; font-size: 16px; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 3px 10px; border-bottom: 1px solid #e4e4e4; }
th { text-align: left; } td.num { text-align: right; } img { max-width: 100%; display: block; margin: 8px 0; }
pre { font-size: 11px; background: #fafafa; padding: 8px; overflow-x: auto; }
"""


def _img(b64: str | None, alt: str) -> str:
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">' if b64 else ""


def render_html(d: Findings, summary: str, plots: bool = True) -> str:
    """The report's page: the verdict and changes, the plots (with ``plots``), and ``summary``, the terminal
    summary's text, in full at the end."""
    e = html.escape
    v = d.verdict
    out = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>chute doctor report</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>chute doctor: {e(d.target)}</h1>",
    ]
    if v is not None:
        out.append(f"<div class='verdict'><div class='headline'>verdict ({e(v.layer)}): {e(v.headline)}</div><ul>")
        out += [f"<li>{e(x)}</li>" for x in v.evidence]
        out.append("</ul></div><h2>Changes, ranked by expected gain</h2>")
        if v.recommendations:
            out.append("<table><tr><th>#</th><th>change</th><th>gain</th><th>kind</th><th>based on</th></tr>")
            for i, r in enumerate(v.recommendations, 1):
                out.append(
                    f"<tr><td>{i}</td><td>{e(r.action)}</td><td class='num'>{r.gain:.1f}x</td>"
                    f"<td>{'measured' if r.measured else 'estimate, at most'}</td><td>{e(r.basis)}</td></tr>"
                )
            out.append("</table>")
        elif v.layer == "consumer":
            out.append("<p>No change to the input pipeline is called for.</p>")
        else:
            out.append(f"<p>No change found that gains {100 * (WORTH_IT - 1):.0f}% or more.</p>")
    if d.remote is not None:
        out.append(f"<h2>Remote actors (chute.ray.RemoteLoader, over {d.remote.batches} batches)</h2><table>")
        out += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in d.remote.rows()]
        out.append("</table>")
    if plots:
        out.append("<h2>Stall and utilisation timeline</h2>" + _img(timeline_png(d), "stall and utilisation timeline"))
        stages = stages_png(d)
        if stages:
            out.append("<h2>Per-stage time</h2>" + _img(stages, "per-stage time"))
        out.append("<h2>Throughput</h2>" + _img(throughput_png(d), "throughput by configuration"))
    else:
        out.append(
            "<p class='note'>No plots: they are drawn with matplotlib, which is not installed "
            "(pip install 'chute[plot]'). Every figure is in the summary below.</p>"
        )
    if d.sweep_png:
        out.append("<h2>chute bench --sweep</h2>" + _img(base64.b64encode(d.sweep_png).decode(), "throughput sweep"))
    out.append(f"<h2>Full summary</h2><pre>{e(summary)}</pre></body></html>")
    return "\n".join(out)


def have_matplotlib() -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    return True


def write_html(d: Findings, path: Path, summary: str) -> Path:
    """The report, with plots where matplotlib is installed; without it, the same report less the plots,
    with a note (the doctor checks this before measuring and says so in the diagnosis's notes)."""
    path.write_text(render_html(d, summary, plots=have_matplotlib()), encoding="utf-8")
    return path


def chromium() -> str | None:
    """The headless browser used to render the report (Debian's ``chromium``), if installed."""
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(
    html_path: Path, png_path: Path, *, width: int = 1100, height: int = 5000, timeout: float = 120.0
) -> Path:
    """Renders the HTML report to a PNG in headless Chromium, then trims the blank page below it."""
    import os
    import subprocess
    import tempfile

    from PIL import Image, ImageChops

    browser = chromium()
    if browser is None:
        raise FileNotFoundError("rendering the report needs Chromium (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            browser,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={Path(png_path).resolve()}",
            Path(html_path).resolve().as_uri(),
        ]
        if os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        subprocess.run(cmd, check=True, timeout=timeout, capture_output=True)
    image = Image.open(png_path).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    if box is not None:
        image.crop((0, 0, width, min(height, box[3] + 24))).save(png_path)
    return Path(png_path)
