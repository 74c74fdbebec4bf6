"""One checkpoint's spectra spread over worker processes or a Dask cluster (Chapter 6, at scale).

:func:`bounds_lib.analysis.spectra.compute_spectra` hands the work to :func:`run_units`: one task per unit
(:mod:`bounds_lib.analysis.units`: a part of a layer), each computed by the kernel
(:func:`bounds_lib.analysis.kernel.part_spectra`) wherever it runs. Results come back as the unit's
:class:`~bounds_lib.analysis.kernel.MatrixSpectrum` list and are put in the order of the units, whatever
order they finish in.

Four ways to run, the same numbers from each (bit for bit on one machine, with the same number of
BLAS threads: a worker uses the caller's):

* **in process** (``jobs=1``): the units one after another;
* **worker processes** (``jobs`` > 1, or ``jobs=0`` where it pays; a checkpoint on disk): a pool whose
  size is chosen by cores *and* memory (:func:`bounds_lib.analysis.pool.choose_workers`). With ``jobs=0``
  the pool is used only when :func:`bounds_lib.analysis.pool.plan_pool` estimates that it finishes sooner
  than this process alone. How it was chosen is recorded in ``ModelSpectra.meta["parallel"]``. The
  pool stops when told (:func:`bounds_lib.analysis.pool.process_pool`); a stopping signal is held while
  the pool is made and fed, and raised between two waits (``_finished``), never inside the
  executor's own locks;
* **threads** (the same ``jobs``, when the weights are in memory — a state dict or a module cannot be
  reopened by a process — or a :class:`~bounds_lib.analysis.cache.SpectraCache` is given, which lives in
  this process);
* **Dask distributed** (``scheduler=``: an address ``tcp://host:port`` or a ``distributed.Client``):
  one task per unit; the weight files must be at the same path on every worker (a shared file
  system). Every wait has a deadline (:mod:`bounds_lib.analysis.cluster`). The ``resume``
  folder need not be: this process stores every result it receives, and a worker that can reach the
  folder also stores its unit before returning it. A result is fetched as soon as it is finished and
  released on the cluster, so a worker that dies afterwards loses nothing that has to be recomputed
  (checked by killing one: tests/test_parallel.py).

A unit that would not fit the per-worker budget (:func:`bounds_lib.analysis.units.memory_budget`) is
computed lean (:func:`bounds_lib.analysis.units.lean_unit`). A script that calls this with ``jobs`` > 1
needs the ``if __name__ == "__main__":`` guard of ``multiprocessing`` (workers are spawned). With
``resume=DIR`` finished units are stored and loaded (:mod:`bounds_lib.analysis.units`).
"""
from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import replace

import numpy as np

from ..checkpoints import ArchitectureSpec, TensorSource
from ..core.interrupts import raise_pending, signals_held
from ..core.validation import check_scalar
from .cluster import SCHEDULER_TIMEOUT_S, dask_results, dask_session
from .kernel import _CHUNK_BYTES, MB
from .pool import _median, _record, choose_workers, plan_pool, process_pool
from .threads import _blas_threads
from .units import (
    WORKER_BASE_BYTES,
    UnitTask,
    _opener,
    _part_label,
    _ResumeFolder,
    _unit_key,
    lean_unit,
    memory_budget,
    run_unit,
    unit_flops,
    unit_memory_estimate,
    unit_steps,
    work_units,
)

__all__ = ["run_units"]


class _Run:
    """One :func:`run_units` call: its tasks, their results as they come, and what the run measured
    (``meta``: how it ran, the units computed and resumed, each worker's peak memory)."""

    def __init__(self, source, arch, opener, *, mode, dtype, entrywise, device, resume, on_step):
        self.source, self.arch, self.opener, self.mode = source, arch, opener, mode
        self.entrywise, self.device, self.on_step = entrywise, device, on_step
        self.store = None if resume is None else _ResumeFolder(resume)
        threads = _blas_threads()
        budget = memory_budget(source)
        self.tasks = []
        for layer, part in work_units(arch):
            lean = lean_unit(arch, part, dtype, source=source, layer=layer, device=device, budget=budget)
            t = UnitTask(opener, arch, layer, part, mode, dtype, entrywise, device, threads, lean=lean,
                         chunk_bytes=_CHUNK_BYTES)
            if self.store is not None:
                t = replace(t, resume=str(self.store.folder.resolve()), key=_unit_key(source, t))
            self.tasks.append(t)
        self.estimate = WORKER_BASE_BYTES + max(
            unit_memory_estimate(arch, t.part, dtype, entrywise=entrywise, mode=mode, lean=t.lean, source=source,
                                 layer=t.layer) for t in self.tasks)
        self.meta = {"units": len(self.tasks), "per_worker_estimate_MB": round(self.estimate / MB, 1),
                     "budget_MB": round(budget / MB, 1), "blas_threads_per_worker": threads,
                     "units_factored_lean": sum(t.lean for t in self.tasks)}
        self.results = [None] * len(self.tasks)
        self.counts = {"computed": 0, "resumed": 0}
        self.peaks = {}
        self.timed = [0.0, 0.0]  # flops, (CPU) seconds of the units computed in this process, one after another
        self._flops = {}
        self.todo = self._resume()

    def _resume(self) -> list:
        """Load the units the resume folder holds (each counts as done); the indices of the others."""
        todo = list(range(len(self.tasks)))
        if self.store is not None:
            for i in todo:
                t = self.tasks[i]
                self.results[i] = self.store.load(t.key, t.layer, t.part, t.arch)
            todo = [i for i in todo if self.results[i] is None]
            self.meta["resume_folder"] = str(self.store.folder)
            if self.store.mismatched:  # entries that name another unit: recomputed, and said so
                self.meta["resume_entries_mismatched"] = list(self.store.mismatched)
                for line in self.store.mismatched:  # stacklevel 4: the line that called run_units
                    warnings.warn(f"--resume {self.store.folder}: {line}", stacklevel=4)
        self.counts["resumed"] = len(self.tasks) - len(todo)
        for i in range(len(self.tasks)):
            if self.results[i] is not None:
                self._steps(i)
        return todo

    def _steps(self, i):
        if self.on_step:
            for g in unit_steps(self.tasks[i].part):
                self.on_step(g)

    def flops(self, i) -> float:
        """A unit's count, once: the pool's cost estimate and the measured rate both use it."""
        if i not in self._flops:
            t = self.tasks[i]
            self._flops[i] = unit_flops(self.arch, t.part, self.mode, entrywise=self.entrywise, source=self.source,
                                        layer=t.layer)
        return self._flops[i]

    def finished(self, i, res: dict):
        """Take unit ``i``'s result (:func:`bounds_lib.analysis.units.run_unit`): count it, store it, report it."""
        if res.get("maxrss") is not None:  # each worker's peak memory so far (what the budget is about)
            w = f"{res['host']}:{res['pid']}"
            self.peaks[w] = max(self.peaks.get(w, 0), res["maxrss"])
        if res["computed"]:
            self.counts["computed"] += 1
            if not self.tasks[i].lean and self.meta.get("backend") == "in process":  # one after another: the rate
                self.timed[0] += self.flops(i)
                # CPU seconds of the thread that ran it where BLAS ran on that one thread: a run under load
                # records the core's speed, not its share of the core (wall seconds otherwise)
                one = self.meta.get("blas_threads_per_worker") == 1 and "cpu_seconds" in res
                self.timed[1] += res["cpu_seconds"] if one else res["seconds"]
        else:
            self.counts["resumed"] += 1
        if self.store is not None and not res["stored"]:
            self.store.store(self.tasks[i].key, self.tasks[i], res)
        self.results[i] = res["matrices"]
        self._steps(i)


def _on_dask(run: _Run, scheduler, timeout: float, unit_timeout: float | None):
    """Every unit not resumed as one Dask task; each result fetched, released on the cluster and taken."""
    with dask_session(scheduler, timeout, what="scheduler= (--scheduler)") as (client, futures):
        run.meta.update(backend="dask", scheduler=str(client.scheduler.address),
                        workers=len(client.scheduler_info().get("workers", {})))
        tag = os.urandom(6).hex()  # task keys unique to this call
        futures.update({client.submit(run_unit, run.tasks[i], pure=False,
                                      key=f"bounds-lib-{tag}-L{run.tasks[i].layer}-{_part_label(run.tasks[i].part)}"): i
                        for i in run.todo})
        for fut, res in dask_results(client, list(futures), timeout=timeout, unit_timeout=unit_timeout):
            i = futures.pop(fut)
            fut.release()  # fetched: the cluster may forget it (a worker that dies later loses nothing)
            run.finished(i, res)


def _workers(run: _Run, jobs: int, cache) -> tuple:
    """``(workers, why)`` on this machine: ``jobs``, limited by cores, memory and units; with ``jobs=0``
    worker processes only where :func:`bounds_lib.analysis.pool.plan_pool` finds that they pay."""
    if jobs == 1 or len(run.todo) <= 1:
        return 1, {"workers": 1, "limited_by": ["jobs asked" if jobs == 1 else "units"]}
    k, why = choose_workers(jobs, len(run.todo), run.estimate)
    if jobs == 0 and k > 1 and run.opener is not None and cache is None and run.device in (None, "cpu"):
        # automatic: worker processes only where the work pays for starting them
        use, why["cost"] = plan_pool(sum(run.flops(i) for i in run.todo), k)
        if not use:
            k = why["workers"] = 1
            why["limited_by"] = ["cost"]
    return k, why


#: Seconds between two checks for a stopping signal while the units run (:func:`_finished`).
_POLL_S = 0.2


def _finished(futures):
    """The futures as they finish, waiting in steps of :data:`_POLL_S` s; a stopping signal that came
    meanwhile is raised between two steps. Called inside
    :func:`~bounds_lib.core.interrupts.signals_held`, so the signal never lands inside the executor's
    locks or a ``submit`` (there it could leave a lock held that the executor's own thread then waits for
    at exit: the process printed that it stopped and never ended)."""
    pending = set(futures)
    while pending:
        raise_pending()
        done, pending = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
        raise_pending()
        yield from done


def _in_threads(run: _Run, k: int, cache):
    with signals_held():
        pool = ThreadPoolExecutor(max_workers=k)
        try:
            futures = {pool.submit(run_unit, run.tasks[i], run.source, cache): i for i in run.todo}
            for fut in _finished(futures):
                run.finished(futures[fut], fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)  # the running units end with their SVD
            raise
        pool.shutdown(wait=True)


def _in_processes(run: _Run, k: int):
    """The units in ``k`` spawned workers; their measured start-up is recorded for the next choice."""
    starts = []
    t_pool = time.time()
    with signals_held(), process_pool(k) as pool:  # a worker that dies: ClusterError
        futures = {pool.submit(run_unit, run.tasks[i]): i for i in run.todo}
        for fut in _finished(futures):
            res = fut.result()
            if res.get("first_task_started") is not None:
                starts.append(res["first_task_started"] - t_pool)
            run.finished(futures[fut], res)
    if starts:  # each worker's start-up, as the next automatic choice will read it
        run.meta["worker_start_measured_s"] = round(_median(starts), 3)
        _record(worker_start_s=_median(starts))


def _on_this_machine(run: _Run, jobs: int, cache):
    """The units in process, in threads or in worker processes (see the module docstring)."""
    k, why = _workers(run, jobs, cache)
    run.meta.update(chosen=why, workers=k)
    if k == 1:
        run.meta["backend"] = "in process"
        for i in run.todo:
            run.finished(i, run_unit(run.tasks[i], run.source, cache))  # one unit in memory at a time
    elif run.opener is None or cache is not None:  # weights in memory, or a cache of this process
        run.meta["backend"] = "threads"
        _in_threads(run, k, cache)
    else:
        run.meta["backend"] = "processes"
        _in_processes(run, k)
    if run.device in (None, "cpu") and run.timed[1] > 0.05:  # the rate this process's units ran at
        run.meta["svd_rate_measured_GFLOPs"] = round(run.timed[0] / run.timed[1] / 1e9, 2)
        _record(svd_rate=run.timed[0] / run.timed[1])


def run_units(source: TensorSource, arch: ArchitectureSpec, *, mode: str, dtype, entrywise: bool, jobs: int = 1,
              cache=None, scheduler=None, resume=None, device=None, on_step=None,
              scheduler_timeout: float = SCHEDULER_TIMEOUT_S, unit_timeout: float | None = None) -> tuple:
    """``(matrices, meta)``: the spectra of every unit of ``arch``'s layers, in unit order (see the module
    docstring for the four ways to run, and :mod:`bounds_lib.analysis.units` for ``resume``). ``meta``
    says how it ran.

    ``jobs=0`` chooses: worker processes (one per core, fewer if memory is short) only when
    :func:`bounds_lib.analysis.pool.plan_pool` estimates that they finish sooner than this process alone;
    ``jobs`` > 1 asks for that many (still limited by cores, memory and units). On any exception — a
    unit's error, a signal's, ``KeyboardInterrupt`` — the units not started are cancelled and the
    workers ended at once. With ``scheduler``, ``scheduler_timeout`` bounds the connection, the wait
    for a first worker and any time without a worker; ``unit_timeout`` (seconds, default none) any
    time without a result."""
    dtype = np.dtype(dtype).name
    jobs = check_scalar(jobs, "jobs (workers; 0: one per CPU core)", int, min_val=0)
    scheduler_timeout = check_scalar(scheduler_timeout, "scheduler_timeout (seconds)", float, min_val=0,
                                     include_boundaries="neither")
    if unit_timeout is not None:
        unit_timeout = check_scalar(unit_timeout, "unit_timeout (seconds)", float, min_val=0,
                                    include_boundaries="neither")
    opener = _opener(source)
    if scheduler is not None and opener is None:
        raise ValueError("a Dask scheduler needs a checkpoint on disk (workers reopen it by path); weights in "
                         "memory are analysed here (leave out scheduler=)")
    if scheduler is not None and cache is not None:
        raise ValueError("cache= keeps spectra in this process; it cannot be combined with scheduler=")
    run = _Run(source, arch, opener, mode=mode, dtype=dtype, entrywise=entrywise, device=device, resume=resume,
               on_step=on_step)
    if scheduler is not None:
        _on_dask(run, scheduler, scheduler_timeout, unit_timeout)
    else:
        _on_this_machine(run, jobs, cache)
    run.meta.update(units_computed=run.counts["computed"], units_resumed=run.counts["resumed"],
                    worker_peak_MB={w: round(b / MB, 1) for w, b in sorted(run.peaks.items())})
    return [m for r in run.results for m in r], run.meta
