"""One work unit in this process: how a worker reopens a checkpoint, computes, times and stores a unit.

A worker process is handed an ``_Opener`` (storage kind, absolute file paths, config, description,
identity), never the open source. It opens each checkpoint once per process and keeps it; it refuses a
file it cannot see with one error that names the worker's machine and the file. The tests in
``tests/test_parallel.py`` run this inside worker processes, where a mutation test cannot trace it;
these call it directly.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

from bounds_lib.analysis import units as UNITS
from bounds_lib.analysis.cache import SpectraCache
from bounds_lib.analysis.cluster import ClusterError
from bounds_lib.checkpoints import open_checkpoint
from bounds_lib.checkpoints.formats import SafetensorsSource, TorchBinSource

from test_parallel import write_tiny


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``{"safetensors": folder, "pytorch-bin": folder}``: one tiny BERT stored both ways."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    base = tmp_path_factory.mktemp("opener")
    st = write_tiny(base / "st", "bert", seed=2)
    binary = base / "bin"
    binary.mkdir()
    tensors = load_file(st / "model.safetensors")
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, binary / "pytorch_model.bin")
    (binary / "config.json").write_text((st / "config.json").read_text())
    return {"safetensors": st, "pytorch-bin": binary}


@pytest.fixture(autouse=True)
def fresh_worker(monkeypatch):
    """Each test starts as a fresh worker process: nothing opened yet."""
    monkeypatch.setattr(UNITS, "_OPENED", {})


@pytest.mark.parametrize("storage, cls", [("safetensors", SafetensorsSource), ("pytorch-bin", TorchBinSource)])
def test_a_worker_opens_the_checkpoint_it_is_handed_once(checkpoints, storage, cls):
    source = open_checkpoint(checkpoints[storage])
    opener = UNITS._opener(source)
    assert opener.storage == storage
    opened = opener.open()
    assert type(opened) is cls
    assert opened.config == source.config and opened.description == source.description
    assert [str(f) for f in opened.files] == [str(f) for f in source.files]
    for name in source.names():
        np.testing.assert_array_equal(opened.read(name), source.read(name))
    assert UNITS._OPENED == {opener: opened}
    assert opener.open() is opened  # kept for the next task
    again = UNITS._Opener(opener.storage, opener.files, opener.config_json, opener.description, opener.identity)
    assert again.open() is opened  # an equal opener is the same checkpoint
    named = UNITS._Opener(opener.storage, opener.files, opener.config_json, "the model as the user named it")
    assert named.open().description == "the model as the user named it"  # errors in the worker say it so


def test_weights_in_memory_have_no_opener(checkpoints):
    from bounds_lib.checkpoints.formats import StateDictSource

    source = open_checkpoint(checkpoints["safetensors"])
    arrays = StateDictSource({n: source.read(n) for n in source.names()}, source.config)
    assert UNITS._opener(arrays) is None


def test_a_file_the_worker_cannot_see_is_one_error_naming_the_machine_and_the_file(checkpoints, tmp_path):
    source = open_checkpoint(checkpoints["safetensors"])
    opener = UNITS._opener(source)
    gone = str(tmp_path / "elsewhere" / "model.safetensors")
    moved = UNITS._Opener(opener.storage, (gone, *opener.files), opener.config_json, opener.description)
    with pytest.raises(ClusterError) as err:
        moved.open()
    assert str(err.value) == (f"worker on {UNITS._hostname()}: cannot open {gone}: the checkpoint must be at the "
                              "same path on every worker (a shared file system)")
    assert UNITS._OPENED == {}
    assert json.loads(opener.config_json) == source.config


# --------------------------------------------------------------------------------------------
# One unit: what it is computed with, where it is stored, what it reports
# --------------------------------------------------------------------------------------------


def _task(source, **kw):
    from bounds_lib.checkpoints import detect_architecture

    fields = dict(opener=UNITS._opener(source), arch=detect_architecture(source), layer=1, part="M_in",
                  mode="clean", dtype="float64", entrywise=True)
    return UNITS.UnitTask(**{**fields, **kw})


def test_a_unit_is_computed_with_every_setting_of_its_task(checkpoints, monkeypatch):
    source = open_checkpoint(checkpoints["safetensors"])
    seen = []

    def spy(src, arch, layer, part, **kw):
        seen.append((src, arch, layer, part, kw))
        return []

    monkeypatch.setattr(UNITS, "part_spectra", spy)
    task = _task(source, part="attention", mode="paper", dtype="float32", entrywise=False, device="torch-cpu",
                 lean=True, chunk_bytes=4096)
    cache = object()
    UNITS.run_unit(task, source, cache)
    assert seen == [(source, task.arch, 1, "attention", dict(mode="paper", dtype="float32", entrywise=False,
                                                             device="torch-cpu", lean=True, chunk_bytes=4096,
                                                             cache=cache))]


def test_only_a_worker_processes_first_unit_is_timed_from_its_start(checkpoints, monkeypatch):
    """``first_task_started`` (what ``plan_pool`` learns a worker's start-up from) is the wall time at which
    a worker process began its first unit; later units and units run in the caller's process have none."""
    import time

    source = open_checkpoint(checkpoints["safetensors"])
    task = _task(source)
    monkeypatch.setattr(UNITS, "_STARTED", [])
    assert UNITS.run_unit(task, source)["first_task_started"] is None  # in the caller's process
    assert UNITS._STARTED == []
    before = time.time()
    first = UNITS.run_unit(task)  # a worker: opens the checkpoint itself
    assert before <= first["first_task_started"] <= time.time()
    assert UNITS.run_unit(task)["first_task_started"] is None
    assert first["computed"] and not first["stored"]


def test_a_worker_stores_only_into_a_resume_folder_it_can_see(checkpoints, tmp_path):
    source = open_checkpoint(checkpoints["safetensors"])
    assert UNITS._worker_store(_task(source)) is None
    assert UNITS._worker_store(_task(source, resume=str(tmp_path / "not made"))) is None
    (tmp_path / "made" / "units").mkdir(parents=True)
    (tmp_path / "bare").mkdir()
    store = UNITS._worker_store(_task(source, resume=str(tmp_path / "made")))
    assert isinstance(store, UNITS._ResumeFolder) and store.folder == tmp_path / "made"
    assert UNITS._worker_store(_task(source, resume=str(tmp_path / "bare"))) is None  # no units/ in it


def test_a_resume_folder_that_cannot_be_made_or_written_is_one_clear_error(tmp_path, monkeypatch):
    (tmp_path / "a file").write_text("")
    with pytest.raises(ValueError) as err:
        UNITS._ResumeFolder(tmp_path / "a file" / "resume")
    assert str(err.value) == f"resume folder {tmp_path / 'a file' / 'resume'}: cannot be created (Not a directory)"
    monkeypatch.setattr(UNITS.os, "access", lambda path, mode: False)
    with pytest.raises(ValueError) as err:
        UNITS._ResumeFolder(tmp_path / "read-only")
    assert str(err.value) == f"resume folder {tmp_path / 'read-only'}: is not writable"


def test_the_peak_memory_is_vmhwm_in_bytes_or_getrusage_without_proc(monkeypatch):
    import resource
    from pathlib import Path

    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("no /proc/self/status here")
    before = [int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmHWM:")][0]
    got = UNITS._maxrss_bytes()
    after = [int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmHWM:")][0]
    assert type(got) is int and before * 1024 <= got <= after * 1024

    class NoProc:
        def __init__(self, *a):
            pass

        def read_text(self):
            raise OSError("no /proc")

    monkeypatch.setattr(UNITS, "Path", NoProc)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = UNITS._maxrss_bytes()
    assert type(got) is int and peak * 1024 <= got <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_unit_stored_by_a_worker_is_served_from_its_resume_folder_with_every_field(checkpoints, tmp_path,
                                                                                      monkeypatch):
    """A worker that reaches the resume folder stores each unit it computes and reports it stored; asked for
    that unit again (Dask reruns a task whose worker died) it loads it and reports it loaded — the same
    matrices, nothing computed, no timing. Both results hold exactly the fields the caller reads."""
    import os
    import time

    source = open_checkpoint(checkpoints["safetensors"])
    (tmp_path / "units").mkdir()
    monkeypatch.setattr(UNITS, "_STARTED", [True])  # a worker past its first unit
    task = _task(source, part="attention", resume=str(tmp_path))
    task = replace(task, key=UNITS._unit_key(source, task))  # the key of the bytes it computes from
    t0 = time.perf_counter()
    done = UNITS.run_unit(task)
    elapsed = time.perf_counter() - t0
    assert set(done) == {"matrices", "computed", "stored", "seconds", "cpu_seconds", "host", "pid", "maxrss",
                         "first_task_started"}
    assert (done["computed"], done["stored"], done["first_task_started"]) == (True, True, None)
    assert 0 < done["seconds"] <= elapsed and 0 <= done["cpu_seconds"] <= elapsed
    assert (done["host"], done["pid"], type(done["maxrss"])) == (UNITS._hostname(), os.getpid(), int)
    assert (tmp_path / "units" / f"{task.key}.npz").is_file()

    def no_compute(*a, **k):
        raise AssertionError("a stored unit was computed again")

    monkeypatch.setattr(UNITS, "_compute", no_compute)
    again = UNITS.run_unit(task)
    assert set(again) == {"matrices", "computed", "stored", "first_task_started"}
    assert (again["computed"], again["stored"], again["first_task_started"]) == (False, True, None)
    assert [m.label() for m in again["matrices"]] == [m.label() for m in done["matrices"]]
    for a, b in zip(again["matrices"], done["matrices"]):
        assert (a.layer, a.head, a.matrix_type, a.shape, a.expert) == (b.layer, b.head, b.matrix_type, b.shape, None)
        np.testing.assert_array_equal(a.sigma, b.sigma)
        assert (a.norm_21, a.norm_11) == (b.norm_21, b.norm_11)


def test_the_unit_log_has_one_line_per_computed_unit(checkpoints, tmp_path, monkeypatch):
    import os

    source = open_checkpoint(checkpoints["safetensors"])
    log = tmp_path / "units.jsonl"
    monkeypatch.setenv("BOUNDS_LIB_UNIT_LOG", str(log))
    outs = [UNITS.run_unit(_task(source, layer=layer, part=part), source)
            for layer, part in ((0, "M_out"), (1, "attention"))]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [{"layer": 0, "part": "M_out", "host": UNITS._hostname(), "pid": os.getpid(),
                      "seconds": round(outs[0]["seconds"], 4), "maxrss": outs[0]["maxrss"]},
                     {"layer": 1, "part": "attention", "host": UNITS._hostname(),
                      "pid": os.getpid(), "seconds": round(outs[1]["seconds"], 4), "maxrss": outs[1]["maxrss"]}]
    monkeypatch.delenv("BOUNDS_LIB_UNIT_LOG")
    UNITS.run_unit(_task(source), source)
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize("in_worker, threads", [(True, 2), (True, None), (False, 2)])
def test_a_worker_process_limits_blas_to_its_share_of_the_cores(checkpoints, monkeypatch, in_worker, threads):
    """Only a worker process (no source shared by the caller) with a thread count sets BLAS's limit."""
    import contextlib

    import threadpoolctl

    source = open_checkpoint(checkpoints["safetensors"])
    limits, caches = [], []

    @contextlib.contextmanager
    def spy_limits(*a, **k):
        limits.append((a, k))
        yield

    compute = UNITS._compute

    def spy_compute(src, task, cache=None):
        caches.append(cache)
        return compute(src, task, cache)

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", spy_limits)
    monkeypatch.setattr(UNITS, "_compute", spy_compute)
    cache = SpectraCache()
    UNITS.run_unit(_task(source, blas_threads=threads), None if in_worker else source, cache)
    assert limits == ([((2,), {})] if in_worker and threads else [])  # blas_threads(2): BLAS and OpenMP
    assert caches == [cache]


# --------------------------------------------------------------------------------------------
# What a unit is: its steps, whether it goes lean, its cost, the identity of its checkpoint
# --------------------------------------------------------------------------------------------


def _calls(monkeypatch, name):
    """The ``(args, kwargs)`` of every call of ``UNITS.<name>`` from now on (the calls still go through)."""
    calls, real = [], getattr(UNITS, name)

    def spy(*a, **k):
        calls.append((a, k))
        return real(*a, **k)

    monkeypatch.setattr(UNITS, name, spy)
    return calls


def test_the_steps_of_a_unit_are_the_groups_it_reports():
    assert UNITS.unit_steps("attention") == ("QK", "V")
    assert UNITS.unit_steps("M_in") == ("M_in",) and UNITS.unit_steps(("M_out", 2)) == ("M_out",)


def test_going_lean_is_decided_on_the_units_own_estimate(checkpoints, monkeypatch):
    """The estimate asked for is the unit's own (its part, working precision, stored tensors, layer); the
    attention goes lean on any device, a feed-forward matrix only on the CPU (TSQR runs there)."""
    from bounds_lib.checkpoints import detect_architecture

    source = open_checkpoint(checkpoints["safetensors"])
    spec = detect_architecture(source)
    asked = _calls(monkeypatch, "unit_memory_estimate")
    assert UNITS.lean_unit(spec, "M_out", "float32", source=source, layer=1, budget=1)
    assert asked == [((spec, "M_out", "float32"), {"source": source, "layer": 1})]
    for device in (None, "cpu"):
        assert UNITS.lean_unit(spec, "M_in", "float64", device=device, budget=1)
    for device in ("cuda", "torch-cpu"):
        assert not UNITS.lean_unit(spec, "M_in", "float64", device=device, budget=1)
        assert UNITS.lean_unit(spec, "attention", "float64", device=device, budget=1)


def test_a_feed_forward_units_cost_is_read_from_its_stored_tensors(checkpoints, monkeypatch):
    from bounds_lib.checkpoints import detect_architecture

    source = open_checkpoint(checkpoints["safetensors"])
    spec = detect_architecture(source)
    asked = _calls(monkeypatch, "_ffn_size")
    UNITS.unit_flops(spec, "M_in", source=source, layer=1)
    assert asked == [((spec, "M_in", "float64", source, 1), {})]


def test_the_checkpoint_identity_changes_with_a_files_time_or_size_alone(checkpoints, tmp_path):
    """A worker keeps the checkpoints it opened; one re-saved with the same first MiB (a change past the
    header of a large file) is told apart by its size or modification time."""
    import os
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(checkpoints["safetensors"], folder)
    weights = folder / "model.safetensors"
    source = open_checkpoint(folder)  # the identity reads each file's state when it is asked
    first = UNITS._checkpoint_identity(source)
    assert UNITS._checkpoint_identity(source) == first
    st = os.stat(weights)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    moved = UNITS._checkpoint_identity(source)
    assert moved != first
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert UNITS._checkpoint_identity(source) == first
    with open(weights, "ab") as fh:
        fh.write(b" ")
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert UNITS._checkpoint_identity(source) != first


def test_the_opener_keeps_the_sources_own_description(checkpoints):
    source = open_checkpoint(checkpoints["safetensors"])
    named = SafetensorsSource(source.files, source.config, "my fine-tune (from the Hub)")
    assert UNITS._opener(named).description == "my fine-tune (from the Hub)"


def test_a_lean_estimate_from_stored_tensors_counts_their_precision_capped_by_the_working_one(checkpoints, tmp_path):
    """A float64 checkpoint factored lean in float32 is read as float32 (the working precision caps the
    stored one); the estimate is a whole number of bytes."""
    from safetensors.numpy import load_file, save_file

    from bounds_lib.checkpoints import detect_architecture

    folder = tmp_path / "f64"
    folder.mkdir()
    tensors = load_file(checkpoints["safetensors"] / "model.safetensors")
    save_file({k: v.astype(np.float64) for k, v in tensors.items()}, folder / "model.safetensors")
    (folder / "config.json").write_text((checkpoints["safetensors"] / "config.json").read_text())
    source = open_checkpoint(folder)
    spec = detect_architecture(source)
    N, F = spec.hidden, spec.d_ff
    k = min(N, F)
    for dtype, stored in (("float32", 4), ("float64", 8)):
        s = np.dtype(dtype).itemsize
        got = UNITS.unit_memory_estimate(spec, "M_in", dtype, lean=True, source=source, layer=1)
        assert type(got) is int and got == int(1.5 * stored * N * F) + 3 * s * k * k + UNITS._CHUNK_BYTES
        dense = UNITS.unit_memory_estimate(spec, "M_in", dtype, source=source, layer=1)
        assert type(dense) is int and dense == s * (2 * N * F + k * k)
