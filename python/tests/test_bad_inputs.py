"""The corrupt-data corpus (bad_inputs.py) against both error policies: 'raise' names every bad sample
(index, path, reason) after the batches before it and the loader stays usable; 'skip' leaves each out,
records it in errors() and the quarantine file, and keeps batches full. Never a crash, hang or partial
batch. `python bench/robustness_table.py` prints the same runs as a table."""

from __future__ import annotations

import bad_inputs
import pytest
from bad_inputs import BATCH, CASES


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case_outcomes(request):
    return request.param, bad_inputs.run_case(request.param)


def test_raise_names_each_bad_sample_and_the_loader_stays_usable(case_outcomes):
    case, outcomes = case_outcomes
    o = outcomes["raise"]
    bad = sorted(o.expected_paths)
    assert o.second_epoch_same  # the next epoch yields the same batches, then the same errors
    if case.decodes:
        assert o.raised == [] and o.labels == list(range(o.num_samples)) and o.sizes == [4, 4, 2]
        return
    assert [index for index, _, _ in o.raised] == bad  # each one, resuming past the previous
    for index, path, reason in o.raised:
        assert path == o.expected_paths[index]
        assert case.reason in reason and reason.split(":")[0] in (
            "CorruptData",
            "Unsupported",
            "IoError",
            "NotFound",
            "ResourceExhausted",
        )
    # Every batch before the first bad sample's batch arrived, full; nothing after it.
    assert o.before_first_error == bad[0] // BATCH * BATCH
    assert o.labels == sorted(set(o.labels)) and not set(o.labels) & set(bad)
    assert all(size == BATCH for size in o.sizes)  # raise delivers only whole batches before an error
    assert [(q["index"], q["path"], q["reason"]) for q in o.quarantined] == o.raised


def test_skip_records_each_bad_sample_and_keeps_batches_full(case_outcomes):
    case, outcomes = case_outcomes
    o = outcomes["skip"]
    bad = sorted(o.expected_paths)
    good = list(range(o.num_samples)) if case.decodes else [i for i in range(o.num_samples) if i not in bad]
    assert o.raised == []
    assert o.second_epoch_same
    if case.decodes:
        assert o.errors == [] and o.quarantined == []
    else:
        assert [e[0] for e in o.errors] == bad
        for index, path, reason in o.errors:
            assert path == o.expected_paths[index] and case.reason in reason
        # One quarantine line per bad sample, though the second epoch failed on them again.
        assert [(q["index"], q["path"], q["reason"], q["epoch"]) for q in o.quarantined] == [e + (0,) for e in o.errors]
    assert o.labels == good  # exactly the good samples, in order
    assert o.sizes[:-1] == [BATCH] * (len(o.sizes) - 1) and sum(o.sizes) == len(good)


def test_truncation_offsets_cover_headers_scan_and_the_end_marker():
    n = len(bad_inputs.good_jpeg(2))
    offsets = bad_inputs.truncation_offsets(n)
    assert len(offsets) == 17 and offsets[0] == 1 and offsets[-1] == n - 1


def test_caught_sample_errors_do_not_hold_batch_buffers(tmp_path, capfd):
    """A training loop that catches SampleError and goes on must not pin a batch buffer per error. The
    generator frame that raised it held the previous batch, and the raised exception kept that frame in a
    reference cycle, so each caught error kept a buffer until the garbage collector ran, and the ring
    grew (this test failed so). With the collector off, 8 raising epochs must fit in the initial ring."""
    import gc

    import chute

    bad = bad_inputs.build(CASES[1], tmp_path / "d")  # zero-byte file at index 5
    loader = chute.Loader(
        chute.ImageFolder(tmp_path / "d"),
        batch_size=BATCH,
        prefetch=1,
        num_threads=1,
        transforms=[chute.CenterCrop(16)],
    )
    gc.collect()
    gc.disable()
    try:
        for _ in range(8):
            try:
                for x, y in loader:
                    del x, y
            except chute.SampleError as err:
                assert err.index == bad[0]
    finally:
        gc.enable()
    assert "growing the batch ring" not in capfd.readouterr().err
