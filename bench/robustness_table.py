"""The bad-input table of issue #6: every input of the corrupt-data corpus (python/tests/bad_inputs.py)
against each error policy, from the same runs that python/tests/test_bad_inputs.py asserts on.

    .venv/bin/python bench/robustness_table.py          # a Markdown table on stdout

Each case: 10 good JPEGs with the bad file(s) among them, batch_size 4, two epochs per policy. 'raise'
resumes past each SampleError (load_state_dict) to show that every bad sample is reported; the second
epoch must repeat the first. A second table lists the reason given for each truncation offset.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
import bad_inputs  # noqa: E402


def main() -> None:
    print("| bad input | on_error='raise' | on_error='skip' (+ quarantine file) |")
    print("|---|---|---|")
    truncations = None
    start = time.perf_counter()
    for case in bad_inputs.CASES:
        outcomes = bad_inputs.run_case(case)
        print(f"| {case.name} | {outcomes['raise'].summary()} | {outcomes['skip'].summary()} |")
        if case.plant is bad_inputs._plant_truncations:
            truncations = outcomes["skip"]
    print(
        f"\n{len(bad_inputs.CASES)} inputs x 2 policies in {time.perf_counter() - start:.1f} s; no crash, hang or "
        "partial batch (a partial batch or a wrong sample would show in the batch sizes above).\n"
    )
    offsets = bad_inputs.truncation_offsets(len(bad_inputs.good_jpeg(2)))
    print(f"| truncated at byte (of {len(bad_inputs.good_jpeg(2))}) | reason |")
    print("|---|---|")
    for offset, (_, _, reason) in zip(offsets, truncations.errors):
        print(f"| {offset} | {reason} |")


if __name__ == "__main__":
    main()
