"""chute.doctor's layers one at a time, its edges (empty loader, a loader or step that raises, bad
arguments, no CUDA), the NVML binding against a fake libnvidia-ml, watch(), and the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import chute
from chute.cli import main as cli_main
from chute.doctor.device import GpuSampler, Nvml, NvmlError
from chute.doctor.measure import run_loader
from chute.doctor.profile import profile_dataset
from chute.doctor.storage import mount_of, probe_storage


def tiny_batches(n: int = 6):
    return [(torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.int64)) for _ in range(n)]


# --- edges -----------------------------------------------------------------------------------------


def test_empty_loader_is_a_clear_error():
    with pytest.raises(ValueError, match="yielded no batches"):
        chute.doctor([])
    with pytest.raises(ValueError, match="yielded no batches"):
        chute.doctor(DataLoader(TensorDataset(torch.zeros(0, 3)), batch_size=4))


def test_a_loader_that_raises_propagates_naming_the_batch():
    def loader():
        yield from tiny_batches(2)
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire") as info:
        chute.doctor(loader())
    assert any("raised by the loader while fetching batch 2" in n for n in info.value.__notes__)


def test_a_step_that_raises_propagates_naming_the_batch():
    def step(batch):
        raise RuntimeError("CUDA out of memory (pretend)")

    with pytest.raises(RuntimeError, match="pretend") as info:
        chute.doctor(tiny_batches(), step)
    assert any("raised by step_fn on batch 0" in n for n in info.value.__notes__)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(loader=42), TypeError),
        (dict(loader="a/path"), TypeError),
        (dict(step_fn="not callable"), TypeError),
        (dict(steps=0), ValueError),
        (dict(steps=True), ValueError),
        (dict(warmup=-1), ValueError),
    ],
)
def test_bad_arguments_are_refused(kwargs, error):
    args = dict(loader=tiny_batches(), step_fn=None, steps=3, warmup=1) | kwargs
    with pytest.raises(error):
        chute.doctor(args.pop("loader"), **args)


def test_a_short_loader_measures_what_it_has():
    d = chute.doctor(tiny_batches(3), steps=20, warmup=5)
    assert len(d.run.steps) == 3 and len(d.run.measured) == 2


def test_tensor_dataset_without_cuda(tmp_path):
    loader = DataLoader(TensorDataset(torch.randn(64, 3, 8, 8), torch.arange(64)), batch_size=16)
    d = chute.doctor(loader, steps=3, warmup=1, device="cuda", report=tmp_path / "r.html")
    assert not d.device.available and d.device.reason.startswith("no CUDA device")
    assert d.storage is None and any("names no files" in n for n in d.notes)
    # chute.DataLoader gathers it natively: the drop-in is measured (chute.Loader reads images only)
    assert [r.label for r in d.comparisons][-1] == "chute.DataLoader drop-in (fast:tensor)"
    assert d.verdict is not None and d.run.samples == 48
    assert (tmp_path / "r.html").stat().st_size > 10_000
    d.to_json()  # plain data throughout


def test_cpu_device_is_not_a_cuda_device():
    d = chute.doctor(tiny_batches(), steps=2, warmup=1, device="cpu", storage=False)
    assert not d.device.available and "not a CUDA device" in d.device.reason


def test_compare_takes_a_module_that_says_it_reproduces_torchvision_for_torchvision(folder, monkeypatch):
    """The doctor knows no reference implementation by name (it never imports the bench): a module whose
    ImageFolder and v1 transforms reproduce torchvision's under their names says so with
    REPRODUCES_TORCHVISION = True, and the doctor then builds its chute loader from them."""
    import types

    from chute.bench import pil_reference as R
    from chute.doctor.compare import chute_equivalent

    module = types.ModuleType("elsewhere.reference")
    for cls in (R.ImageFolder, R.Compose, R.CenterCrop, R.PILToTensor):
        setattr(module, cls.__name__, type(cls.__name__, (cls,), {"__module__": module.__name__}))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    dataset = module.ImageFolder(folder, transform=module.Compose([module.CenterCrop(16), module.PILToTensor()]))
    loader, why = chute_equivalent(DataLoader(dataset, batch_size=4))
    assert loader is None and why == "chute does not recognise a ImageFolder (it reads ImageFolder trees)"
    module.REPRODUCES_TORCHVISION = True
    loader, why = chute_equivalent(DataLoader(dataset, batch_size=4))
    assert why == "" and len(loader.source) == len(dataset)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.uint8
    loader.close()


# --- measurement -------------------------------------------------------------------------------------


def test_run_records_wait_and_step_and_sees_non_blocking_copies():
    def step(batch):
        images, _ = batch
        images.to("meta", non_blocking=True)  # a device transfer torch can make without a GPU
        images.to("meta")
        time.sleep(0.02)

    run = run_loader(tiny_batches(5), step, steps=4, warmup=1, label="list")
    assert len(run.measured) == 4 and run.median_step_ms >= 20
    assert run.stall_fraction < 0.1
    # Only the first two steps are watched (a TorchFunctionMode sees every torch call).
    assert [t.non_blocking for t in run.transfers] == [True, False, True, False]
    assert run.transfers[0].target == "meta" and run.transfers[0].bytes == 2 * 3 * 4 * 4 * 4


def test_chute_loader_stats_cover_the_measured_steps_only(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(16)])
    run = run_loader(loader, None, steps=5, warmup=2, label="chute")
    assert run.loader_stats["batches"] == 5
    assert run.dtype == "uint8" and run.batch_bytes == 4 * 3 * 16 * 16 + 4 * 8


# --- a RemoteLoader's actors (no Ray: a RemoteReport as its stats_since() would give it) ---------------


def _remote_diagnosis(wait_ms: float, step_ms: float, transfer_ms: float, actor_ms: float, needed: int, gain: float):
    from chute.doctor.measure import Run, Step
    from chute.doctor.remote import RemoteReport
    from chute.doctor.report import Diagnosis
    from chute.doctor.verdict import decide

    run = Run("chute.ray.RemoteLoader num_actors=1", [], 0, True)
    run.steps = [Step(i * (wait_ms + step_ms) / 1e3, wait_ms / 1e3, step_ms / 1e3, 4) for i in range(12)]
    remote = RemoteReport(
        actors=1, cpus_per_actor=1, batches=12, actor_ms=actor_ms, transfer_ms=transfer_ms, wait_ms=wait_ms,
        consumer_ms=step_ms, stall_fraction=wait_ms / (wait_ms + step_ms), actors_needed=needed, actor_gain=gain,
        max_outstanding=2, max_inflight=2,
    )  # fmt: skip
    d = Diagnosis(target="chute.ray.RemoteLoader(...)", run=run, remote=remote)
    d.verdict = decide(d)
    return d


def test_remote_verdict_names_the_actors_and_recommends_more_as_an_estimate():
    from chute.doctor.report_html import render_html

    # The trainer waits 90 ms a batch, 1 ms of it the transfer; one actor takes 100 ms a batch.
    d = _remote_diagnosis(wait_ms=90, step_ms=10, transfer_ms=1, actor_ms=100, needed=10, gain=9.1)
    v = d.verdict
    assert (v.bound, v.layer, v.stage) == ("input", "remote", "actors")
    assert "the remote actors' time (100.0 ms per batch, 1 in parallel) limits it" in v.headline
    (rec,) = v.recommendations
    assert rec.action.startswith("add actors: num_actors=10 (now 1;")
    assert rec.gain == 9.1 and not rec.measured
    assert rec.basis.startswith("model (RemoteLoader's, docs/SCALE.md)")
    text = str(d)
    assert "add actors: num_actors=10" in text and "9.1x (estimate, at most; model" in text
    assert "remote actors (chute.ray.RemoteLoader, over 12 batches)" in text
    page = render_html(d, str(d), plots=False)  # the HTML report without matplotlib keeps the remote section
    assert "<h2>Remote actors (chute.ray.RemoteLoader, over 12 batches)</h2>" in page and "add actors" in page


def test_remote_verdict_names_the_transfer_and_does_not_add_actors():
    # 80 of the trainer's 90 ms wait is the object-store transfer: more actors would not remove it.
    d = _remote_diagnosis(wait_ms=90, step_ms=10, transfer_ms=80, actor_ms=30, needed=1, gain=1.0)
    v = d.verdict
    assert (v.bound, v.layer, v.stage) == ("input", "remote", "transfer")
    assert "the object-store transfer to the trainer (80.0 ms per batch) limits it" in v.headline
    assert not any(r.action.startswith("add actors") for r in v.recommendations)
    assert v.recommendations[0].action.startswith("make the transfer cheaper") and not v.recommendations[0].measured


def test_remote_verdict_when_the_step_is_the_limit():
    d = _remote_diagnosis(wait_ms=1, step_ms=100, transfer_ms=0.5, actor_ms=20, needed=1, gain=1.0)
    v = d.verdict
    assert (v.bound, v.layer) == ("consumer", "consumer") and v.recommendations == []
    assert "more would not help" in v.headline and "add actors" not in str(d)


# --- storage -------------------------------------------------------------------------------------------


_SPIN_ON_ONE_CORE = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # both start spinning together
end = time.process_time() + 0.6
while time.process_time() < end:
    pass
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="the kernel keeps no schedstat")
def test_cpu_sampler_sees_workers_waiting_for_a_core():
    """Two child processes that spin on the same single core: at every moment one of them is runnable
    without a core, so their run-queue delay (the doctor's "waiting for a core", which tells contended
    cores from idle workers) comes to about a core's worth, whatever else the machine runs (other load only
    adds to it); each spins until it has had 0.6 s of CPU, so both are runnable together throughout."""
    from chute.doctor.cpu import CpuSampler, cpu_report, run_delay_seconds

    assert run_delay_seconds(os.getpid()) is not None
    core = min(os.sched_getaffinity(0))
    with CpuSampler(interval=0.05) as sampler:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _SPIN_ON_ONE_CORE, str(core)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            for _ in range(2)
        ]
        for child in children:
            assert child.stdout.readline() == b"ready\n"
        for child in children:
            child.stdin.write(b"go\n")
            child.stdin.close()
        for child in children:
            assert child.wait(timeout=120) == 0
    tl = sampler.timeline
    assert len(tl.children_waiting) == len(tl.t) > 0
    report = cpu_report(tl, loader_threads=2)
    # the two got at most one core between them: while both ran, one waited. However the scheduler shared
    # the core, the first to finish had its 0.6 s only after the other waited at least that long (unless
    # the other ran too), against 1.2 s of CPU in all: fair sharing gives about 1:1, the worst case 1:2.
    assert report.mean_children_waiting is not None
    assert report.mean_children_waiting > 0.25 * report.mean_children_cores > 0


def test_mount_of_finds_network_filesystems(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 22 0:50 / /mnt/my\\040data rw,relatime shared:1 - nfs4 server:/export rw,vers=4.2\n"
        "41 22 0:51 / /mnt/bucket rw - fuse.gcsfuse bucket rw\n"
    )
    assert mount_of("/mnt/my data/train/a.jpg", str(info)).fs_type == "nfs4"
    assert mount_of("/mnt/my data/train/a.jpg", str(info)).network
    assert mount_of("/mnt/bucket/x", str(info)).network
    local = mount_of("/home/x", str(info))
    assert local.mount_point == "/" and not local.network


def test_probe_storage_reads_cold_and_hot(folder):
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))
    st = probe_storage(paths)
    assert st.files == 36 and st.directories == 3 and st.largest_directory[1] == 12
    assert st.dataset_bytes == sum(Path(p).stat().st_size for p in paths)
    assert st.cold.files == st.hot.files == 36 and st.cold.bytes == st.dataset_bytes
    assert st.cold.mb_per_s > 0 and st.hot.mb_per_s > 0 and not st.huge_directories
    assert not st.exceeds_page_cache
    estimated = probe_storage(paths, stat_limit=10)  # beyond 10 files: the mean of the sampled files x count
    assert estimated.bytes_estimated and estimated.dataset_bytes == pytest.approx(st.dataset_bytes, rel=1e-6)
    with pytest.raises(ValueError, match="no files"):
        probe_storage([])


# --- the dataset profile ----------------------------------------------------------------------------------


class _Mixed(torch.utils.data.Dataset):
    """read: a file-like read that blocks 5 ms; other: about as much CPU work in the dataset's own code
    (one C call, so the profiler adds nothing inside it)."""

    work = 0

    class _File:
        def read(self):
            time.sleep(0.005)
            return b"x"

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self._File().read()
        return sum(range(self.work))


def test_profile_charges_blocking_reads_to_storage_and_own_code_to_other():
    start = time.process_time()
    sum(range(1_000_000))
    _Mixed.work = int(1_000_000 * 0.005 / max(time.process_time() - start, 1e-4))  # ~5 ms of CPU
    p = profile_dataset(_Mixed(), list(range(8)))
    # Each half is about 5 ms; the CPU half stretches on a busy machine, hence the wide bounds.
    assert 0.2 < p.share("read") < 0.8 and 0.2 < p.share("other") < 0.8, p.seconds
    assert p.share("decode") < 0.05 and p.ms_per_sample("read") >= 4
    with pytest.raises(ValueError):
        profile_dataset(_Mixed(), [])


# --- device: NVML through ctypes ------------------------------------------------------------------------


def test_nvml_absent_is_reported_not_raised_at_import():
    with pytest.raises(NvmlError, match="NVML is not available"):
        Nvml.open("libnvidia-ml-not-here.so.1")


_FAKE_NVML = r"""
#include <string.h>
typedef struct { unsigned int gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
static unsigned calls;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { return r == 2 ? "Invalid Argument" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned* n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) { if (i != 0) return 2; *h = (void*)0x1; return 0; }
int nvmlDeviceGetName(void* h, char* buf, unsigned len) { strncpy(buf, "Fake GPU", len); return 0; }
int nvmlDeviceGetUtilizationRates(void* h, util_t* u) { u->gpu = (calls++ % 2) ? 90 : 10; u->memory = 7; return 0; }
int nvmlDeviceGetMemoryInfo(void* h, mem_t* m) {
  m->total = 80ULL << 30; m->used = 3ULL << 30; m->free = m->total - m->used; return 0;
}
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> str:
    """A stand-in libnvidia-ml with NVML's signatures: tests the ctypes binding's calls and structs."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (scripts/setup.sh installs one)")
    d = tmp_path_factory.mktemp("nvml")
    (d / "fake.c").write_text(_FAKE_NVML)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(d / "libnvidia-ml.so.1"), str(d / "fake.c")], check=True)
    return str(d / "libnvidia-ml.so.1")


def test_nvml_binding_samples_at_20_hz(fake_nvml):
    nvml = Nvml.open(fake_nvml)
    try:
        assert nvml.device_count() == 1
        with pytest.raises(NvmlError, match="Invalid Argument"):
            nvml.handle(3)
        with GpuSampler(nvml, 0) as sampler:
            time.sleep(0.5)
        tl = sampler.timeline
        assert sampler.name == "Fake GPU" and sampler.memory_total == 80 << 30
        assert len(tl.t) >= 6 and (len(tl.t) - 1) / (tl.t[-1] - tl.t[0]) >= 10  # at least 10 Hz
        assert tl.util[:4] == [10, 90, 10, 90] and set(tl.memory_used) == {3 << 30}
    finally:
        nvml.close()


def test_without_cuda_nvml_is_not_used(fake_nvml):
    d = chute.doctor(tiny_batches(), steps=2, warmup=1, storage=False, nvml_library=fake_nvml)
    assert not d.device.available and d.device.reason.startswith("no CUDA device")


# --- watch() and the CLI ------------------------------------------------------------------------------------


def test_watch_measures_the_scripts_own_loop_and_passes_every_batch(folder, capsys):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(16)])
    # max_steps=3: exactly the 3 batches asked for, even if the stall's interval has not settled by then.
    watched = chute.doctor.watch(loader, steps=3, warmup=1, storage=False, max_steps=3)
    seen = 0
    for _ in watched:
        time.sleep(0.1)  # far longer than a batch of 4 small images costs, even on a loaded machine
        seen += 1
    assert seen == len(loader) == 9
    d = watched.diagnosis
    assert len(d.run.steps) == 4 and d.run.median_step_ms >= 100
    assert d.verdict.layer == "consumer"
    assert "no input problem" in capsys.readouterr().err
    assert sum(1 for _ in watched) == 9  # later epochs pass through


def test_a_watched_loader_is_freed_with_its_watch(folder):
    """Watching the same loader again returns the same wrapper, yet once the script drops both, the loader
    (and its threads) goes: the wrapper is not kept alive by a registry keyed by the loader it holds."""
    import gc
    import weakref

    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(16)])
    watched = chute.doctor.watch(loader, steps=1, warmup=0, storage=False, max_steps=1)
    assert chute.doctor.watch(loader) is watched
    assert sum(1 for _ in watched) == 9
    gone = weakref.ref(loader)
    del loader, watched
    gc.collect()
    assert gone() is None


def test_watch_diagnoses_a_loop_that_breaks_early(folder):
    loader = chute.Loader(chute.ImageFolder(folder), batch_size=4, transforms=[chute.CenterCrop(16)])
    watched = chute.doctor.watch(loader, steps=10, warmup=1, storage=False)
    for i, _ in enumerate(watched):
        if i == 2:
            break
    del _
    assert watched.diagnosis is not None and len(watched.diagnosis.run.steps) == 3


_SCRIPT = """
import sys, time
import chute
loader = chute.Loader(chute.ImageFolder(sys.argv[1]), batch_size=4, transforms=[chute.CenterCrop(16)])
for epoch in range(2):
    for images, labels in loader:
        time.sleep(0.15)  # a consumer-bound job even on a machine loaded many times over
print("script done", sys.argv[2])
"""


def test_cli_runs_a_script_and_watches_its_first_loader(folder, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    report = tmp_path / "report.html"
    rc = cli_main(["doctor", "--steps", "3", "--warmup", "1", "--report", str(report), str(script), str(folder), "x"])
    out = capsys.readouterr()
    assert rc == 0
    assert "script done x" in out.out and "verdict: consumer" in out.err
    assert report.read_text().count("data:image/png;base64,") >= 3
    # The patch is gone afterwards: loaders iterate as usual.
    assert chute.Loader.__iter__.__qualname__ == "Loader.__iter__"


def test_cli_reports_a_script_without_loaders(tmp_path, capsys):
    script = tmp_path / "nothing.py"
    script.write_text("print('no loader here')\n")
    assert cli_main(["doctor", str(script)]) == 1
    assert "iterated no DataLoader" in capsys.readouterr().out
    assert cli_main(["doctor", str(tmp_path / "missing.py")]) == 2
    assert cli_main(["doctor", "--sweep", str(script)]) == 2
    assert cli_main(["doctor", "--screenshot", str(tmp_path / "x.png"), str(script)]) == 2


def test_cli_with_an_explicit_watch_in_the_script(folder, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        _SCRIPT.replace(
            "for images, labels in loader:", "for images, labels in chute.doctor.watch(loader, steps=2, warmup=1):"
        )
    )
    assert cli_main(["doctor", str(script), str(folder), "y"]) == 0
    out = capsys.readouterr()
    assert "script done y" in out.out and out.err.count("verdict: consumer") == 1  # once, not per epoch


def test_environment_variable_watches_a_script_the_cli_does_not_run(folder, tmp_path):
    import os
    import sys

    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    env = os.environ | {
        "CHUTE_DOCTOR": str(tmp_path / "report-{rank}.html"),
        "CHUTE_DOCTOR_STEPS": "3",
        "CHUTE_DOCTOR_WARMUP": "1",
        "RANK": "5",
    }
    done = subprocess.run(
        [sys.executable, str(script), str(folder), "z"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "script done z" in done.stdout and done.stderr.count("verdict: consumer") == 1
    assert (tmp_path / "report-5.html").stat().st_size > 10_000
