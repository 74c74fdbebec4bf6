"""The ways :func:`bounds_lib.analysis.parallel.run_units` runs, with the machinery replaced by recorders: the Dask
path on a stand-in client (tasks, keys, release, deadlines; the units computed here), the choice of workers, the
waits between two stopping checks, and what a run records of its rate and its workers' start-up. The real
clusters and pools are in tests/test_parallel.py and tests/test_stopping.py (seconds each); here each call is
seen and each number compared."""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pytest

from bounds_lib.analysis import parallel as PAR
from bounds_lib.checkpoints import detect_architecture, open_checkpoint
from tiny_checkpoints import bert_encoder_weights, write_tiny_bert


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = write_tiny_bert(tmp_path_factory.mktemp("m") / "bert", hidden=16, layers=2, heads=2, intermediate=32,
                             weights=bert_encoder_weights(hidden=16, intermediate=32, layers=2))
    source = open_checkpoint(folder)
    return source, detect_architecture(source)


def _run(bert, **kw):
    source, arch = bert
    return PAR.run_units(source, arch, mode="clean", dtype="float64", entrywise=False, **kw)


# --- Dask, on a stand-in client --------------------------------------------------------------------------


class _Future:
    def __init__(self, fn, task, key, log):
        self.fn, self.task, self.key, self.log = fn, task, key, log

    def release(self):
        self.log.append(("release", self.key))


@pytest.fixture
def dask(monkeypatch):
    """``dask_session`` and ``dask_results`` replaced: tasks are recorded, then computed here in order."""
    log = []

    class Client:
        scheduler = SimpleNamespace(address="tcp://fake:8786")

        def scheduler_info(self):
            return {"workers": {"w1": {}, "w2": {}, "w3": {}}}

        def submit(self, fn, task, pure, key):
            log.append(("submit", task.layer, task.part, pure, key))
            return _Future(fn, task, key, log)

    @contextmanager
    def session(scheduler, timeout, what):
        log.append(("session", scheduler, timeout, what))
        futures = {}
        yield Client(), futures
        log.append(("left", dict(futures)))

    def results(client, futures, *, timeout, unit_timeout):
        assert isinstance(client, Client)  # the session's own client
        log.append(("results", len(futures), timeout, unit_timeout))
        for fut in reversed(futures):  # finishing in another order than submitted
            yield fut, fut.fn(fut.task)

    monkeypatch.setattr(PAR, "dask_session", session)
    monkeypatch.setattr(PAR, "dask_results", results)
    return log


def test_the_dask_path_submits_one_keyed_task_per_unit_and_releases_each_result(bert, dask):
    here, _ = _run(bert)
    got, meta = _run(bert, scheduler="tcp://fake:8786", scheduler_timeout=7.0, unit_timeout=30.0)
    assert [(m.layer, m.head, m.matrix_type) for m in got] == [(m.layer, m.head, m.matrix_type) for m in here]
    for a, b in zip(got, here):
        np.testing.assert_array_equal(a.sigma, b.sigma)
    session = next(e for e in dask if e[0] == "session")
    submits = [e for e in dask if e[0] == "submit"]
    results = next(e for e in dask if e[0] == "results")
    assert dask.index(results) == len(submits) + 1  # every task submitted before the first wait
    assert session == ("session", "tcp://fake:8786", 7.0, "scheduler= (--scheduler)")
    assert results == ("results", len(submits), 7.0, 30.0)
    keys = [s[4] for s in submits]
    tag = re.fullmatch(r"bounds-lib-([0-9a-f]{12})-L(\d+)-(.+)", keys[0]).group(1)
    assert all(k.startswith(f"bounds-lib-{tag}-L") for k in keys) and len(set(keys)) == len(keys)
    assert [(s[1], s[3]) for s in submits] == [(t.layer, False) for t in PAR._Run(
        bert[0], bert[1], PAR._opener(bert[0]), mode="clean", dtype="float64", entrywise=False, device=None,
        resume=None, on_step=None).tasks]
    assert sorted(e[1] for e in dask if e[0] == "release") == sorted(keys)
    assert dask[-1] == ("left", {})  # every future fetched and taken out of the session's dict
    assert (meta["backend"], meta["scheduler"], meta["workers"]) == ("dask", "tcp://fake:8786", 3)
    assert meta["units_computed"] == len(submits) and meta["units_resumed"] == 0
    _run(bert, scheduler="tcp://fake:8786")
    assert dask[-1] == ("left", {}) and ("session", "tcp://fake:8786", 10.0, "scheduler= (--scheduler)") in dask


# --- what run_units refuses ------------------------------------------------------------------------------


def test_bad_arguments_are_named(bert):
    from bounds_lib.analysis.cache import SpectraCache

    with pytest.raises(ValueError, match=r"^jobs \(workers; 0: one per CPU core\) == -1, must be >= 0$"):
        _run(bert, jobs=-1)
    with pytest.raises(ValueError, match=r"^scheduler_timeout \(seconds\) == 0"):
        _run(bert, scheduler_timeout=0)
    with pytest.raises(ValueError, match=r"^unit_timeout \(seconds\) == 0"):
        _run(bert, unit_timeout=0)
    with pytest.raises(ValueError) as e:
        _run(bert, scheduler="tcp://fake:1", cache=SpectraCache())
    assert str(e.value) == "cache= keeps spectra in this process; it cannot be combined with scheduler="
    state = {k: bert[0].read(k) for k in bert[0].names()}
    from bounds_lib.checkpoints.formats import StateDictSource

    with pytest.raises(ValueError) as e:
        PAR.run_units(StateDictSource(state, bert[0].config), bert[1], mode="clean", dtype="float64",
                      entrywise=False, scheduler="tcp://fake:1")
    assert str(e.value) == ("a Dask scheduler needs a checkpoint on disk (workers reopen it by path); weights in "
                            "memory are analysed here (leave out scheduler=)")


# --- how many workers ------------------------------------------------------------------------------------


@pytest.fixture
def choice(monkeypatch):
    """``choose_workers`` and ``plan_pool`` recorded; the pool chosen with ``state.k`` workers, paying or not."""
    state = SimpleNamespace(k=3, pays=True, calls=[])

    def choose(jobs, n, estimate):
        state.calls.append(("choose", jobs, n, estimate))
        return state.k, {"workers": state.k, "limited_by": ["cores"]}

    def plan(flops, k):
        state.calls.append(("plan", flops, k))
        return state.pays, {"decision": "x"}

    monkeypatch.setattr(PAR, "choose_workers", choose)
    monkeypatch.setattr(PAR, "plan_pool", plan)
    return state


def _fake_run(todo=(0, 1, 2), opener="opener", device=None):
    return SimpleNamespace(todo=list(todo), estimate=123, opener=opener, device=device, flops=lambda i: 10.0 * (i + 1))


def test_one_job_or_one_unit_is_one_worker_without_asking(choice):
    assert PAR._workers(_fake_run(), 1, None) == (1, {"workers": 1, "limited_by": ["jobs asked"]})
    assert PAR._workers(_fake_run(todo=[4]), 8, None) == (1, {"workers": 1, "limited_by": ["units"]})
    assert PAR._workers(_fake_run(todo=[]), 0, None) == (1, {"workers": 1, "limited_by": ["units"]})
    assert choice.calls == []


def test_jobs_0_asks_whether_the_pool_pays_for_the_units_left(choice):
    assert PAR._workers(_fake_run(), 0, None) == (3, {"workers": 3, "limited_by": ["cores"], "cost": {"decision": "x"}})
    assert choice.calls == [("choose", 0, 3, 123), ("plan", 60.0, 3)]
    choice.pays = False
    assert PAR._workers(_fake_run(), 0, None) == (1, {"workers": 1, "limited_by": ["cost"], "cost": {"decision": "x"}})
    choice.k, choice.calls[:] = 2, []  # two workers, two units, the CPU named: the cost is still asked
    assert PAR._workers(_fake_run(todo=[0, 1], device="cpu"), 0, None)[0] == 1
    assert choice.calls == [("choose", 0, 2, 123), ("plan", 30.0, 2)]
    choice.pays, choice.calls[:] = True, []
    assert PAR._workers(_fake_run(todo=[0, 1]), 8, None)[0] == 2 and choice.calls == [("choose", 8, 2, 123)]


@pytest.mark.parametrize("run, jobs, cache", [
    (_fake_run(), 4, None),                    # jobs asked: no cost model
    (_fake_run(opener=None), 0, None),         # weights in memory: threads, nothing to start
    (_fake_run(), 0, object()),                # a cache of this process: threads
    (_fake_run(device="torch-cpu"), 0, None),  # a device other than the CPU's LAPACK
])
def test_the_cost_model_decides_only_for_jobs_0_on_a_checkpoint_on_disk_on_the_cpu(choice, run, jobs, cache):
    assert PAR._workers(run, jobs, cache) == (3, {"workers": 3, "limited_by": ["cores"]})
    assert [c[0] for c in choice.calls] == ["choose"]


def test_jobs_0_with_one_worker_chosen_does_not_ask_the_cost(choice):
    choice.k = 1
    assert PAR._workers(_fake_run(device="cpu"), 0, None) == (1, {"workers": 1, "limited_by": ["cores"]})
    assert [c[0] for c in choice.calls] == ["choose"]


# --- the waits between two stopping checks -----------------------------------------------------------------


def test_each_wait_is_one_poll_between_two_stopping_checks(monkeypatch):
    log = []
    monkeypatch.setattr(PAR, "raise_pending", lambda: log.append("check"))

    def wait(pending, timeout, return_when):
        log.append(("wait", len(pending), timeout, return_when))
        first = sorted(pending)[0]
        return {first}, pending - {first}

    monkeypatch.setattr(PAR, "wait", wait)
    assert sorted(PAR._finished(["a", "b"])) == ["a", "b"]
    assert log == ["check", ("wait", 2, 0.2, PAR.FIRST_COMPLETED), "check",
                   "check", ("wait", 1, 0.2, PAR.FIRST_COMPLETED), "check"]
    assert PAR._POLL_S == 0.2 and list(PAR._finished([])) == []


# --- what a run records of itself ----------------------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch):
    log = []
    monkeypatch.setattr(PAR, "_record", lambda **k: log.append(k))
    return log


def _machine_run(device=None, seconds=0.1):
    run = SimpleNamespace(todo=[0, 1], tasks=["t0", "t1"], source="src", device=device, meta={}, timed=[0.0, 0.0],
                          opener="opener", got=[])

    def finished(i, res):
        run.got.append((i, res))
        run.timed[0] += 2e9
        run.timed[1] += seconds

    run.finished = finished
    return run


@pytest.mark.parametrize("device", [None, "cpu"])
def test_an_in_process_run_records_the_rate_its_units_ran_at(monkeypatch, recorded, device):
    monkeypatch.setattr(PAR, "_workers", lambda run, jobs, cache: (1, {"workers": 1}))
    monkeypatch.setattr(PAR, "run_unit", lambda task, source, cache: f"{task} in {source}")
    run = _machine_run(device=device)
    PAR._on_this_machine(run, 1, None)
    assert run.got == [(0, "t0 in src"), (1, "t1 in src")]
    assert run.meta == {"chosen": {"workers": 1}, "workers": 1, "backend": "in process",
                        "svd_rate_measured_GFLOPs": 20.0}
    assert recorded == [{"svd_rate": 2e10}]


def test_the_rate_is_reported_in_gflops_to_two_decimals(monkeypatch, recorded):
    monkeypatch.setattr(PAR, "_workers", lambda run, jobs, cache: (1, {"workers": 1}))
    monkeypatch.setattr(PAR, "run_unit", lambda task, source, cache: task)
    run = _machine_run(seconds=2e9 / 2.8575000015e10)  # 28.575000015 GFLOP/s: 28.58 (28.57 at 1e9 + 1 flops a GFLOP)
    PAR._on_this_machine(run, 1, None)
    assert run.meta["svd_rate_measured_GFLOPs"] == 28.58 and recorded == [{"svd_rate": run.timed[0] / run.timed[1]}]


@pytest.mark.parametrize("device, seconds", [("torch-cpu", 0.1), (None, 0.025)])
def test_no_rate_is_recorded_off_the_cpu_or_from_units_too_short_to_time(monkeypatch, recorded, device, seconds):
    monkeypatch.setattr(PAR, "_workers", lambda run, jobs, cache: (1, {"workers": 1}))
    monkeypatch.setattr(PAR, "run_unit", lambda task, source, cache: task)
    run = _machine_run(device=device, seconds=seconds)  # 0.05 s in all: not more than 0.05
    PAR._on_this_machine(run, 1, None)
    assert "svd_rate_measured_GFLOPs" not in run.meta and recorded == []


@pytest.mark.parametrize("opener, cache, backend", [(None, None, "threads"), ("opener", object(), "threads"),
                                                    ("opener", None, "processes")])
def test_threads_for_weights_in_memory_or_a_cache_else_processes(monkeypatch, recorded, opener, cache, backend):
    seen = []
    monkeypatch.setattr(PAR, "_workers", lambda r, jobs, c: seen.append(("workers", r is run, jobs, c)) or (
        2, {"workers": 2}))
    monkeypatch.setattr(PAR, "_in_threads", lambda r, k, c: seen.append(("threads", r is run, k, c)))
    monkeypatch.setattr(PAR, "_in_processes", lambda r, k: seen.append(("processes", r is run, k)))
    run = _machine_run()
    run.opener = opener
    PAR._on_this_machine(run, 2, cache)
    assert run.meta["backend"] == backend and run.meta["workers"] == 2
    assert seen == [("workers", True, 2, cache)] + (
        [("threads", True, 2, cache)] if backend == "threads" else [("processes", True, 2)])


def test_a_pool_records_its_workers_median_start_up(monkeypatch, recorded):
    from concurrent.futures import ThreadPoolExecutor

    made = []

    @contextmanager
    def pool(k):
        made.append(k)
        with ThreadPoolExecutor(k) as ex:
            yield ex

    started = {"t0": 100.5, "t1": 101.0, "t2": None}
    monkeypatch.setattr(PAR, "process_pool", pool)
    monkeypatch.setattr(PAR, "run_unit", lambda task: {"first_task_started": started[task], "task": task})
    monkeypatch.setattr(PAR.time, "time", lambda: 100.0)
    run = _machine_run()
    run.tasks, run.todo = ["t0", "t1", "t2"], [0, 1, 2]
    PAR._in_processes(run, 2)
    assert made == [2] and sorted(i for i, _ in run.got) == [0, 1, 2]
    assert {i: res["task"] for i, res in run.got} == {0: "t0", 1: "t1", 2: "t2"}
    assert run.meta == {"worker_start_measured_s": 0.75} and recorded == [{"worker_start_s": 0.75}]
    started.update(t0=100.12345, t1=100.5)  # a median of 0.311725 s: reported to the millisecond
    run = _machine_run()
    run.tasks, run.todo = ["t0", "t1", "t2"], [0, 1, 2]
    PAR._in_processes(run, 2)
    assert run.meta == {"worker_start_measured_s": 0.312}
    recorded.pop()
    started.update(t0=100.5, t1=101.0)
    started.update(t0=None, t1=None)
    run = _machine_run()
    run.tasks, run.todo = ["t0", "t1", "t2"], [0, 1, 2]
    PAR._in_processes(run, 2)
    assert run.meta == {} and recorded == [{"worker_start_s": 0.75}]  # no start-up measured: nothing recorded


def _real_run(bert, **kw):
    source, arch = bert
    args = dict(mode="clean", dtype="float64", entrywise=False, device=None, resume=None, on_step=None)
    args.update(kw)
    return PAR._Run(source, arch, PAR._opener(source), **args)


def test_a_finished_unit_counts_its_workers_peak_and_in_process_its_rate(bert):
    run = _real_run(bert)
    run.meta["backend"] = "in process"
    res = dict(matrices=["m0"], computed=True, stored=True, seconds=0.5, maxrss=300, host="h", pid=1)
    run.finished(0, res)
    run.finished(1, dict(res, matrices=["m1"], maxrss=200))              # a lower peak keeps the higher
    run.finished(2, dict(res, matrices=["m2"], maxrss=100, pid=2))       # another worker
    run.finished(3, dict(res, matrices=["m3"], computed=False, maxrss=None))  # resumed by a worker
    assert run.peaks == {"h:1": 300, "h:2": 100}
    assert run.counts == {"computed": 3, "resumed": 1} and run.results[:4] == [["m0"], ["m1"], ["m2"], ["m3"]]
    assert run.timed == [run.flops(0) + run.flops(1) + run.flops(2), 1.5]
    pooled = _real_run(bert)
    pooled.meta["backend"] = "processes"  # units side by side: their seconds are no rate
    pooled.finished(0, res)
    assert pooled.timed == [0.0, 0.0] and pooled._flops == {}


def test_a_lean_unit_adds_nothing_to_the_rate(bert, monkeypatch):
    run = _real_run(bert)
    run.meta["backend"] = "in process"
    run.tasks[0] = PAR.replace(run.tasks[0], lean=True)
    run.finished(0, dict(matrices=[], computed=True, stored=True, seconds=9.0, maxrss=None))
    assert run.timed == [0.0, 0.0]


def test_the_steps_of_a_finished_unit_are_reported_in_order(bert):
    steps = []
    run = _real_run(bert, on_step=steps.append)
    run.finished(1, dict(matrices=[], computed=True, stored=True, seconds=0.0, maxrss=None))
    assert steps == list(PAR.unit_steps(run.tasks[1].part)) and steps


def test_a_flop_count_is_asked_once_per_unit(bert, monkeypatch):
    calls = []
    monkeypatch.setattr(PAR, "unit_flops", lambda arch, part, mode, entrywise, source, layer: calls.append(
        (part, mode, entrywise, layer, source)) or 7.0)
    run = _real_run(bert, mode="paper", entrywise=True)
    assert run.flops(2) == 7.0 == run.flops(2)
    assert calls == [(run.tasks[2].part, "paper", True, run.tasks[2].layer, bert[0])]


# --- what a run plans, resumes and reports -----------------------------------------------------------------


def test_a_run_plans_each_unit_with_its_settings_and_says_so(bert, monkeypatch, tmp_path):
    source, arch = bert
    budget = 5 * 2**30 + 98_765_432  # 5214.19 MB: one decimal kept, not two
    lean, est = [], []
    monkeypatch.setattr(PAR, "_blas_threads", lambda: 3)
    monkeypatch.setattr(PAR, "memory_budget", lambda s: budget if s is source else None)
    monkeypatch.setattr(PAR, "lean_unit", lambda *a, **k: lean.append((a, k)) or k["layer"] == 1)
    monkeypatch.setattr(PAR, "unit_memory_estimate", lambda *a, **k: est.append((a, k)) or 123_456_789 + k["layer"])
    folder = tmp_path / "r"
    run = _real_run(bert, mode="paper", entrywise=True, device="cpu", resume=folder)
    units = list(PAR.work_units(arch))
    assert lean == [((arch, part, "float64"), dict(source=source, layer=layer, device="cpu", budget=budget))
                    for layer, part in units]
    assert est == [((arch, part, "float64"), dict(entrywise=True, mode="paper", lean=layer == 1, source=source,
                                                  layer=layer)) for layer, part in units]
    for t, (layer, part) in zip(run.tasks, units):
        assert (t.layer, t.part, t.mode, t.dtype, t.entrywise, t.device) == (layer, part, "paper", "float64", True,
                                                                              "cpu")
        assert (t.blas_threads, t.lean, t.chunk_bytes, t.resume) == (3, layer == 1, PAR._CHUNK_BYTES,
                                                                      str(folder.resolve()))
        assert t.key == PAR._unit_key(source, PAR.replace(t, resume=None, key=None))
    top = max(123_456_789 + layer for layer, _ in units)
    assert run.estimate == PAR.WORKER_BASE_BYTES + top
    assert run.meta == {"units": len(units), "per_worker_estimate_MB": round((PAR.WORKER_BASE_BYTES + top) / PAR.MB, 1),
                        "budget_MB": 5214.2, "blas_threads_per_worker": 3,
                        "units_factored_lean": sum(layer == 1 for layer, _ in units), "resume_folder": str(folder)}
    assert run.meta["per_worker_estimate_MB"] != round((PAR.WORKER_BASE_BYTES + top) / PAR.MB, 2)
    assert run.counts == {"computed": 0, "resumed": 0} and run.todo == list(range(len(units)))


def test_resumed_units_are_taken_here_and_never_handed_to_a_unit_runner(bert, tmp_path, monkeypatch):
    first, _ = _run(bert, resume=tmp_path / "r")
    monkeypatch.setattr(PAR, "run_unit", lambda *a: pytest.fail("a resumed unit was run again"))
    steps = []
    got, meta = _run(bert, resume=tmp_path / "r", on_step=steps.append)
    assert [m.sigma.tolist() for m in got] == [m.sigma.tolist() for m in first]
    assert meta["resume_folder"] == str(tmp_path / "r") and meta["units_resumed"] == meta["units"]
    assert meta["units_computed"] == 0 and "resume_entries_mismatched" not in meta
    assert steps == [g for _, part in PAR.work_units(bert[1]) for g in PAR.unit_steps(part)]


def test_mismatched_resume_entries_are_listed_and_each_warned_at_the_callers_line(bert, tmp_path, monkeypatch):
    class Folder(PAR._ResumeFolder):
        def __init__(self, folder):
            super().__init__(folder)
            self.mismatched = ["entry a names layer 9", "entry b names layer 8"]

    monkeypatch.setattr(PAR, "_ResumeFolder", Folder)
    with pytest.warns(UserWarning) as caught:
        line = sys._getframe().f_lineno + 1  # the next line calls run_units: each warning points there
        _, meta = PAR.run_units(*bert, mode="clean", dtype="float64", entrywise=False, resume=tmp_path / "r")
    assert meta["resume_entries_mismatched"] == ["entry a names layer 9", "entry b names layer 8"]
    assert [str(w.message) for w in caught] == [f"--resume {tmp_path / 'r'}: entry a names layer 9",
                                                f"--resume {tmp_path / 'r'}: entry b names layer 8"]
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut's trampolines add frames between the caller and the warning
        assert {(w.filename, w.lineno) for w in caught} == {(__file__, line)}


def test_a_finished_unit_is_stored_under_its_key_and_every_resumed_one_counted(bert, tmp_path, monkeypatch):
    run = _real_run(bert, resume=tmp_path / "r")
    stored = []
    monkeypatch.setattr(run.store, "store", lambda key, task, res: stored.append((key, task, res)))
    res = dict(matrices=["m"], computed=False, stored=False, seconds=0.0, maxrss=0, host="h", pid=3)
    run.finished(0, res)
    run.finished(1, dict(res, stored=True))
    assert stored == [(run.tasks[0].key, run.tasks[0], res)]
    assert run.counts["resumed"] == 2 and run.peaks == {"h:3": 0}  # a peak of 0 bytes is 0, not a default


def test_run_units_defaults_to_one_job_and_accepts_timeouts_under_a_second(bert, monkeypatch):
    seen = []
    def here(run, jobs, cache):
        seen.append((jobs, cache))
        run.results = [[] for _ in run.results]

    monkeypatch.setattr(PAR, "_on_this_machine", here)
    _run(bert)
    _run(bert, scheduler_timeout=0.5, unit_timeout=0.25)
    assert seen == [(1, None), (1, None)]


def test_each_workers_peak_is_reported_in_mb_to_one_decimal(bert, monkeypatch):
    def here(run, jobs, cache):
        for i in run.todo:
            run.finished(i, dict(matrices=[], computed=True, stored=True, seconds=0.0, host="h", pid=i % 2,
                                 maxrss=123_456_789 + 1_000_000 * i))

    monkeypatch.setattr(PAR, "_on_this_machine", here)
    _, meta = _run(bert)
    n = meta["units"]
    peak = {p: 123_456_789 + 1_000_000 * max(i for i in range(n) if i % 2 == p) for p in (0, 1)}
    assert meta["worker_peak_MB"] == {f"h:{p}": round(b / PAR.MB, 1) for p, b in peak.items()}
    assert list(meta["worker_peak_MB"]) == ["h:0", "h:1"]
    assert all(round(b / PAR.MB, 1) != round(b / PAR.MB, 2) for b in peak.values())


class _Pool:
    """A stand-in ``ThreadPoolExecutor``: each task run at once; its size, tasks and shutdowns recorded."""

    log = []

    def __init__(self, max_workers):
        self.log.append(("pool", max_workers))

    def submit(self, fn, *args):
        from concurrent.futures import Future

        self.log.append(("submit",) + args[1:])
        fut = Future()
        fut.set_result(fn(*args))
        return fut

    def shutdown(self, **kw):
        self.log.append(("shutdown", kw))


@pytest.mark.parametrize("fails", [False, True])
def test_threads_get_the_pool_size_the_source_and_the_cache_and_are_shut_down(monkeypatch, fails):
    _Pool.log = []
    monkeypatch.setattr(PAR, "ThreadPoolExecutor", _Pool)
    monkeypatch.setattr(PAR, "run_unit", lambda task, source, cache: (task, source, cache))
    run = _machine_run()
    cache = object()
    if fails:
        def finished(i, res):
            raise RuntimeError("unit failed")
        run.finished = finished
        with pytest.raises(RuntimeError, match="unit failed"):
            PAR._in_threads(run, 3, cache)
    else:
        PAR._in_threads(run, 3, cache)
        assert sorted(run.got) == [(0, ("t0", "src", cache)), (1, ("t1", "src", cache))]
    assert _Pool.log[:3] == [("pool", 3), ("submit", "src", cache), ("submit", "src", cache)]
    assert _Pool.log[3:] == [("shutdown", {"wait": False, "cancel_futures": True} if fails else {"wait": True})]
