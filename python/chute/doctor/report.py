"""What ``chute.doctor`` returns: the findings (``findings.py``, the model) with their views, the terminal
summary (``report_term.py``) and the HTML report (``report_html.py``). Only this module knows both views:
the HTML report embeds the terminal summary, handed to it from here."""

from __future__ import annotations

from pathlib import Path

from chute.doctor.findings import Findings
from chute.doctor.report_html import write_html
from chute.doctor.report_term import render, render_text


class Diagnosis(Findings):
    """The doctor's findings for one loader. ``print(d)`` gives the terminal summary, ``d.save_html(path)``
    the self-contained report with plots, ``d.to_json()`` a plain dict."""

    def __str__(self) -> str:
        return render_text(self)

    def print(self, console=None) -> None:
        """The summary on a rich console (stdout by default), with colour where the terminal has it."""
        render(self, console)

    def save_html(self, path: str | Path) -> Path:
        """Writes the text diagnosis beside ``path`` (``.txt``) first, so that nothing measured is lost, then
        the HTML report (with plots where matplotlib is installed, else with a note saying so)."""
        path = Path(path)
        summary = render_text(self)
        path.with_suffix(".txt").write_text(summary, encoding="utf-8")
        return write_html(self, path, summary)
