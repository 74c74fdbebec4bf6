"""The ways :func:`bounds_lib.analysis.parallel.run_units` runs, with the machinery replaced by recorders: the Dask
path on a stand-in client (tasks, keys, release, deadlines; the units computed here), the choice of workers, the
waits between two stopping checks, and what a run records of its rate and its workers' start-up. The real
clusters and pools are in tests/test_parallel.py and tests/test_stopping.py (seconds each); here each call is
seen and each number compared."""
from __future__ import annotations

import re
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


def test_an_in_process_run_records_the_rate_its_units_ran_at(monkeypatch, recorded):
    monkeypatch.setattr(PAR, "_workers", lambda run, jobs, cache: (1, {"workers": 1}))
    monkeypatch.setattr(PAR, "run_unit", lambda task, source, cache: f"{task} in {source}")
    run = _machine_run()
    PAR._on_this_machine(run, 1, None)
    assert run.got == [(0, "t0 in src"), (1, "t1 in src")]
    assert run.meta == {"chosen": {"workers": 1}, "workers": 1, "backend": "in process",
                        "svd_rate_measured_GFLOPs": 20.0}
    assert recorded == [{"svd_rate": 2e10}]


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
    monkeypatch.setattr(PAR, "_workers", lambda run, jobs, cache: (2, {"workers": 2}))
    seen = []
    monkeypatch.setattr(PAR, "_in_threads", lambda run, k, c: seen.append(("threads", k, c)))
    monkeypatch.setattr(PAR, "_in_processes", lambda run, k: seen.append(("processes", k)))
    run = _machine_run()
    run.opener = opener
    PAR._on_this_machine(run, 2, cache)
    assert run.meta["backend"] == backend and run.meta["workers"] == 2
    assert seen == ([("threads", 2, cache)] if backend == "threads" else [("processes", 2)])


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
    monkeypatch.setattr(PAR, "run_unit", lambda task: {"first_task_started": started[task]})
    monkeypatch.setattr(PAR.time, "time", lambda: 100.0)
    run = _machine_run()
    run.tasks, run.todo = ["t0", "t1", "t2"], [0, 1, 2]
    PAR._in_processes(run, 2)
    assert made == [2] and sorted(i for i, _ in run.got) == [0, 1, 2]
    assert run.meta == {"worker_start_measured_s": 0.75} and recorded == [{"worker_start_s": 0.75}]
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
        (part, mode, entrywise, layer)) or 7.0)
    run = _real_run(bert, mode="paper", entrywise=True)
    assert run.flops(2) == 7.0 == run.flops(2)
    assert calls == [(run.tasks[2].part, "paper", True, run.tasks[2].layer)]
