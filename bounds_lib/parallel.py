"""One checkpoint's spectra spread over worker processes or a Dask cluster (issue 23).

:func:`bounds_lib.spectra.compute_spectra` hands the work to :func:`run_units`. The work unit is a
*part* of a layer (:func:`bounds_lib.checkpoints.layer_parts`: the attention projections, ``M_in``,
``M_out``): a worker reads only the tensors of its unit, widens them, factors them and releases them,
so it never holds more than one unit. What a worker receives is small — the weight files' paths, the
config, the layout, the layer and the part (:class:`UnitTask`); it opens the checkpoint itself and
reads its tensors by offset. Results come back as the unit's :class:`~bounds_lib.spectra.MatrixSpectrum`
list and are put in the order of the units, whatever order they finish in.

Four ways to run, the same numbers from each (bit for bit on one machine, with the same number of
BLAS threads: a worker uses the caller's):

* **in process** (``jobs=1``): the units one after another;
* **worker processes** (``jobs`` > 1 or 0 for one per core, a checkpoint on disk): a pool whose size
  is chosen by cores *and* memory (:func:`choose_workers`): ``min(cores, jobs, units, available
  memory / per-unit estimate)``; how it was chosen is recorded in ``ModelSpectra.meta["parallel"]``;
* **threads** (the same ``jobs``, when the weights are in memory — a state dict or a module cannot be
  reopened by a process — or a :class:`~bounds_lib.spectra.SpectraCache` is given, which lives in
  this process);
* **Dask distributed** (``scheduler=``: an address ``tcp://host:port`` or a ``distributed.Client``):
  one task per unit; the weight files must be at the same path on every worker (a shared file
  system), as the ``resume`` folder need not be (only this process writes it).

Resuming (``resume=DIR``): each finished unit is written to ``DIR`` at once (atomically) under a key of
the checkpoint's identity (every weight file's name, size, modification time and header; the tensor
bytes for weights in memory), the layer, the part, the mode, the dtype, the (1,1)-norm switch and the
device. A later call with the same ``DIR`` loads the units found there instead of computing them —
after an interrupted run, or a cluster that lost its workers. Within one Dask run a result is
fetched as soon as it is finished and released on the cluster, so a worker that dies afterwards
loses nothing that has to be recomputed. ``DIR/journal.jsonl`` gets one line per unit computed (where
it ran, its seconds, the worker's peak memory). When the environment variable
``BOUNDS_LIB_UNIT_LOG`` names a file, every computation of a unit also appends a line to it, from the
process that computed it (a diagnostic that counts computations on a cluster with a shared disk).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .checkpoints import (
    ArchitectureSpec,
    SafetensorsSource,
    TensorSource,
    TorchBinSource,
    _read_layer,
    layer_parts,
    part_kind,
    part_tensor_names,
)
from .validation import check_scalar

__all__ = [
    "ClusterError",
    "UnitTask",
    "work_units",
    "unit_steps",
    "unit_memory_estimate",
    "memory_budget",
    "available_memory",
    "choose_workers",
    "run_unit",
    "run_units",
    "SCHEDULER_TIMEOUT_S",
]

#: Seconds to wait for a Dask scheduler to answer before giving up (``--scheduler-timeout``).
SCHEDULER_TIMEOUT_S = 10.0
#: Resident memory of a worker process besides its unit (Python, NumPy, the library, a safetensors
#: header): measured 43 MB for a spawned worker on Linux with OpenBLAS; 150 MB leaves room.
WORKER_BASE_BYTES = 150 * 2**20
#: Bumped whenever the stored form of a unit's results changes (old ``resume`` folders are then not read).
_RESUME_FORMAT = 1
MB = 2**20


class ClusterError(RuntimeError):
    """Dask distributed is missing, a scheduler cannot be reached, or a worker cannot open the checkpoint."""


# --------------------------------------------------------------------------------------------
# Units and their memory
# --------------------------------------------------------------------------------------------


def work_units(spec: ArchitectureSpec) -> list:
    """``[(layer, part), ...]`` of every layer, in the order of the results (layer by layer)."""
    return [(layer, part) for layer in range(spec.n_layers) for part in layer_parts(spec, layer)]


def unit_steps(part) -> tuple:
    """The matrix groups a unit produces, as passed to ``on_step``: ``("QK", "V")`` or ``("M_in",)``…"""
    kind = part_kind(part)
    return ("QK", "V") if kind == "attention" else (kind,)


def _part_label(part) -> str:
    return part if isinstance(part, str) else ".".join(str(x) for x in part)


def unit_memory_estimate(spec: ArchitectureSpec, part, dtype="float64", *, entrywise: bool = False,
                         mode: str = "clean") -> int:
    """Bytes a worker holds at most while it computes ``part`` (its base memory excluded).

    A dense feed-forward matrix of m×n entries is held widened (``m·n`` in ``dtype``), LAPACK
    decomposes a copy of it (``m·n`` more) in a workspace of about ``min(m, n)²``; the attention part
    holds its four projections, their per-head stacks and the key-side products (three times the
    projections), plus the 64 MB chunks of the (1,1) norms, plus an N×N product and its copy per head
    in paper mode. Checked against measured peaks by ``benchmarks/bench_scale_llama.py``.
    """
    s = np.dtype(dtype).itemsize
    N, H, Hk, d, F = spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ff
    kind = part_kind(part)
    if kind == "attention":
        proj = s * (2 * H * d * N + 2 * Hk * d * N)
        return 3 * proj + (64 * MB if entrywise else 0) + (3 * s * N * N if mode == "paper" else 0)
    m, n = (N, 2 * F) if (kind == "M_in" and spec.gated_ffn) else (N, F)
    return s * (2 * m * n + min(m, n) ** 2)


def memory_budget(source: TensorSource) -> int:
    """The issue's per-worker budget: 2 × the largest stored tensor (as stored) + 400 MB."""
    largest = 0
    for name in source.names():
        try:
            itemsize = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "float64": 8, "float32": 4, "float16": 2,
                        "bfloat16": 2}.get(source.dtype(name), 4)
            largest = max(largest, itemsize * math.prod(source.shape(name)))
        except Exception:  # a tensor the analysis does not read (odd dtype): not part of the budget
            continue
    return 2 * largest + 400 * MB


def _cgroup_memory_left():
    """Bytes this process's cgroup may still use (v2 or v1), or ``None`` without a limit."""
    for limit_f, usage_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                              "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_f).read_text().strip()
            usage = int(Path(usage_f).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 2**60:
            return None
        return max(0, int(limit) - usage)
    return None


def available_memory() -> tuple:
    """``(bytes, where)``: memory new workers may use — ``MemAvailable`` of ``/proc/meminfo``, less if a
    cgroup limit leaves less; ``(None, why)`` where neither can be read (then memory does not limit)."""
    avail, where = None, "unknown (no /proc/meminfo)"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail, where = int(line.split()[1]) * 1024, "MemAvailable of /proc/meminfo"
                break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            import psutil

            avail, where = int(psutil.virtual_memory().available), "psutil.virtual_memory().available"
        except Exception:
            pass
    left = _cgroup_memory_left()
    if left is not None and (avail is None or left < avail):
        avail, where = left, "the cgroup's memory limit less its usage"
    return avail, where


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def choose_workers(jobs: int, n_units: int, per_worker_bytes: int, available=None) -> tuple:
    """``(workers, why)``: ``min(cores, jobs (0: cores), units, available memory // per-worker estimate)``,
    at least 1; ``why`` says which limit chose it and every number that entered."""
    cores = _cores()
    asked = jobs or cores
    avail, where = available_memory() if available is None else (available, "given")
    by_memory = None if avail is None else avail // max(per_worker_bytes, 1)
    limits = {"cores": cores, "jobs asked": asked, "units": n_units}
    if by_memory is not None:
        limits["memory"] = by_memory
    k = max(1, min(limits.values()))
    chosen_by = [name for name, v in limits.items() if v == min(limits.values())]
    why = {"workers": k, "limited_by": chosen_by, "cores": cores, "jobs_asked": jobs, "units": n_units,
           "per_worker_estimate_MB": round(per_worker_bytes / MB, 1),
           "available_memory_MB": None if avail is None else round(avail / MB, 1), "available_memory_from": where}
    if by_memory is not None and by_memory < 1:
        why["note"] = "less memory available than one worker's estimate: one worker anyway"
    return k, why


# --------------------------------------------------------------------------------------------
# One unit, in whatever process runs it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Opener:
    """How a worker reopens the checkpoint: the storage kind, the weight files (absolute paths), the config."""

    storage: str
    files: tuple
    config_json: str
    description: str

    def open(self) -> TensorSource:
        cached = _OPENED.get(self)
        if cached is not None:
            return cached
        missing = [f for f in self.files if not os.path.isfile(f)]
        if missing:
            raise ClusterError(f"worker on {socket.gethostname()}: cannot open {missing[0]}: the checkpoint "
                               "must be at the same path on every worker (a shared file system)")
        cls = SafetensorsSource if self.storage == "safetensors" else TorchBinSource
        src = cls([Path(f) for f in self.files], json.loads(self.config_json), self.description)
        _OPENED[self] = src
        return src


_OPENED: dict = {}  # per process: a worker opens each checkpoint once (headers only)


def _opener(source: TensorSource):
    """An :class:`_Opener` for a file-backed source, ``None`` for weights in memory."""
    if source.storage not in ("safetensors", "pytorch-bin") or not hasattr(source, "files"):
        return None
    return _Opener(source.storage, tuple(str(Path(f).resolve()) for f in source.files),
                   json.dumps(source.config, sort_keys=True), source.description)


@dataclass(frozen=True)
class UnitTask:
    """What a worker needs for one unit — a few hundred bytes, never an array."""

    opener: _Opener | None
    arch: ArchitectureSpec
    layer: int
    part: object
    mode: str
    dtype: str
    entrywise: bool
    device: str | None = None
    blas_threads: int | None = None
    resume: str | None = None
    key: str | None = None


def _blas_threads():
    """The caller's BLAS thread count (what a worker uses, so that its numbers are the caller's)."""
    try:
        from threadpoolctl import threadpool_info

        counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
        return min(counts) if counts else None
    except Exception:  # pragma: no cover - threadpoolctl is a dependency
        return None


def _maxrss_bytes() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    except Exception:  # pragma: no cover - not POSIX
        return None


def _compute(source: TensorSource, task: UnitTask, cache=None) -> list:
    from .spectra import layer_spectra

    lw = _read_layer(source, task.arch, task.layer, np.dtype(task.dtype), (task.part,))
    kw = {} if task.device is None else {"device": task.device}
    return layer_spectra(lw, task.mode, entrywise=task.entrywise, cache=cache, **kw)


def _worker_store(task: UnitTask):
    """The resume folder as this worker sees it, or ``None`` (none asked, or not reachable from here)."""
    if task.resume is None or not os.path.isdir(os.path.join(task.resume, "units")):
        return None
    try:
        return _ResumeFolder(task.resume)
    except ValueError:
        return None


def run_unit(task: UnitTask, source: TensorSource | None = None, cache=None) -> dict:
    """One unit, in whatever process runs it: ``{"matrices", "computed", "stored", "seconds", "host", "pid",
    "maxrss"}``.

    ``source`` is the open checkpoint when the caller shares one (in process, threads); a worker
    process opens ``task.opener`` itself (once per process) and runs BLAS on ``task.blas_threads``
    threads. With a resume folder the worker can reach, a unit stored there is loaded instead of
    computed, and a computed one is stored before it is returned (so a task that Dask reruns after its
    worker died finds it).
    """
    t0 = time.perf_counter()
    store = _worker_store(task)
    if store is not None:
        mats = store.load(task.key, task.layer)
        if mats is not None:
            return {"matrices": mats, "computed": False, "stored": True}
    src = source if source is not None else task.opener.open()
    if task.blas_threads and source is None:  # a worker process (threads share the caller's limit)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(task.blas_threads, user_api="blas"):
            mats = _compute(src, task, cache)
    else:
        mats = _compute(src, task, cache)
    out = {"matrices": mats, "computed": True, "stored": False, "seconds": time.perf_counter() - t0,
           "host": socket.gethostname(), "pid": os.getpid(), "maxrss": _maxrss_bytes()}
    if store is not None:
        try:
            store.store(task.key, task, out)
            out["stored"] = True
        except OSError:  # the parent stores it then
            pass
    log = os.environ.get("BOUNDS_LIB_UNIT_LOG")
    if log:
        line = json.dumps({"layer": task.layer, "part": _part_label(task.part), "host": out["host"],
                           "pid": out["pid"], "seconds": round(out["seconds"], 4), "maxrss": out["maxrss"]})
        with open(log, "a") as fh:
            fh.write(line + "\n")
    return out


# --------------------------------------------------------------------------------------------
# Resume folder
# --------------------------------------------------------------------------------------------


def _checkpoint_identity(source: TensorSource) -> str:
    """A digest that changes when the weights may have: each file's name, size, mtime and header bytes."""
    h = hashlib.blake2b(digest_size=20)
    for f in getattr(source, "files", ()):
        st = os.stat(f)
        h.update(repr((os.path.basename(f), st.st_size, st.st_mtime_ns)).encode())
        with open(f, "rb") as fh:
            h.update(fh.read(min(st.st_size, 8 + 2**20)))  # the safetensors header (or a .bin's start)
    return h.hexdigest()


def _unit_key(identity, source, task: UnitTask) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((_RESUME_FORMAT, identity, task.layer, _part_label(task.part), task.mode, task.dtype,
                   task.entrywise, task.device or "cpu", task.arch.to_dict())).encode())
    if identity is None:  # weights in memory: the bytes of the unit's tensors are their identity
        for name in part_tensor_names(task.arch, task.layer, task.part).values():
            A = np.ascontiguousarray(source.read_raw(name))
            h.update(repr((name, A.shape, A.dtype.str)).encode())
            h.update(A.view(np.uint8).reshape(-1))
    return h.hexdigest()


class _ResumeFolder:
    """Finished units of earlier runs, one ``.npz`` per unit, plus ``journal.jsonl``."""

    def __init__(self, folder):
        self.folder = Path(folder)
        try:
            (self.folder / "units").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"resume folder {self.folder}: cannot be created ({exc.strerror or exc})") from None
        if not os.access(self.folder / "units", os.W_OK):
            raise ValueError(f"resume folder {self.folder}: is not writable")
        self._lock = threading.Lock()

    def _path(self, key):
        return self.folder / "units" / f"{key}.npz"

    def load(self, key, layer):
        """The stored matrices of unit ``key``, or ``None`` (absent or unreadable: then recomputed)."""
        from .spectra import MatrixSpectrum

        p = self._path(key)
        if not p.is_file():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                norms = z["norms"]
                return [MatrixSpectrum(layer, m["head"], m["matrix_type"], tuple(m["shape"]), z[f"sigma{i}"],
                                       float(norms[i, 0]), float(norms[i, 1]),
                                       **({} if m.get("expert") is None else {"expert": m["expert"]}))
                        for i, m in enumerate(meta)]
        except Exception:  # a damaged file is recomputed (and rewritten), never trusted
            return None

    def store(self, key, task: UnitTask, res: dict):
        mats = res["matrices"]
        meta = [{"head": m.head, "matrix_type": m.matrix_type, "shape": list(m.shape),
                 "expert": getattr(m, "expert", None)} for m in mats]
        arrays = {f"sigma{i}": np.asarray(m.sigma) for i, m in enumerate(mats)}
        norms = np.array([[m.norm_21, m.norm_11] for m in mats], dtype=np.float64).reshape(-1, 2)
        tmp = self.folder / "units" / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
        np.savez(tmp, meta=np.array(json.dumps(meta)), norms=norms, **arrays)
        os.replace(tmp, self._path(key))
        line = {"layer": task.layer, "part": _part_label(task.part), "key": key, "host": res.get("host"),
                "pid": res.get("pid"), "seconds": round(res.get("seconds", 0.0), 4), "maxrss": res.get("maxrss")}
        with self._lock, open(self.folder / "journal.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")


# --------------------------------------------------------------------------------------------
# All units of a checkpoint
# --------------------------------------------------------------------------------------------


def _client(scheduler, timeout):
    """``(client, ours)``: a ``distributed.Client`` for an address (ours to close) or the one given."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("scheduler= (--scheduler) needs Dask distributed, which is not installed: "
                           "pip install 'bounds_lib[grid]'") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise TypeError(f"scheduler must be a Dask scheduler address ('tcp://host:port') or a "
                        f"distributed.Client, got {type(scheduler).__name__} {scheduler!r}")
    try:
        return Client(scheduler, timeout=f"{timeout}s"), True
    except (OSError, TimeoutError, ValueError) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise ClusterError(f"cannot reach a Dask scheduler at {scheduler!r} within {timeout:g} s ({why}); start one "
                           "with 'dask scheduler' and workers with 'dask worker ADDRESS --nthreads 1', or leave out "
                           "--scheduler to run here") from None


def run_units(source: TensorSource, arch: ArchitectureSpec, *, mode: str, dtype, entrywise: bool, jobs: int = 1,
              cache=None, scheduler=None, resume=None, device=None, on_step=None,
              scheduler_timeout: float = SCHEDULER_TIMEOUT_S) -> tuple:
    """``(matrices, meta)``: the spectra of every unit of ``arch``'s layers, in unit order (see the module
    docstring for the four ways to run and for ``resume``). ``meta`` says how it ran."""
    dtype = np.dtype(dtype).name
    units = work_units(arch)
    jobs = check_scalar(jobs, "jobs (workers; 0: one per CPU core)", int, min_val=0)
    scheduler_timeout = check_scalar(scheduler_timeout, "scheduler_timeout (seconds)", float, min_val=0,
                                     include_boundaries="neither")
    opener = _opener(source)
    if scheduler is not None and opener is None:
        raise ValueError("a Dask scheduler needs a checkpoint on disk (workers reopen it by path); weights in "
                         "memory are analysed here (leave out scheduler=)")
    if scheduler is not None and cache is not None:
        raise ValueError("cache= keeps spectra in this process; it cannot be combined with scheduler=")
    store = None if resume is None else _ResumeFolder(resume)
    identity = _checkpoint_identity(source) if (store is not None and opener is not None) else None
    threads = _blas_threads()
    tasks = []
    for layer, part in units:
        t = UnitTask(opener, arch, layer, part, mode, dtype, entrywise, device, threads)
        if store is not None:
            t = replace(t, resume=str(store.folder.resolve()), key=_unit_key(identity, source, t))
        tasks.append(t)
    estimate = WORKER_BASE_BYTES + max(unit_memory_estimate(arch, p, dtype, entrywise=entrywise, mode=mode)
                                       for p in layer_parts(arch, 0))
    meta = {"units": len(units), "per_worker_estimate_MB": round(estimate / MB, 1),
            "budget_MB": round(memory_budget(source) / MB, 1), "blas_threads_per_worker": threads}
    results = [None] * len(units)
    todo = list(range(len(units)))
    if store is not None:
        for i in todo:
            results[i] = store.load(tasks[i].key, tasks[i].layer)
        todo = [i for i in todo if results[i] is None]
        meta["resume_folder"] = str(store.folder)
    counts = {"computed": 0, "resumed": len(units) - len(todo)}
    for i in range(len(units)):
        if results[i] is not None and on_step:  # resumed units count as done
            for g in unit_steps(tasks[i].part):
                on_step(g)

    def finished(i, res):
        if res["computed"]:
            counts["computed"] += 1
        else:
            counts["resumed"] += 1
        if store is not None and not res["stored"]:
            store.store(tasks[i].key, tasks[i], res)
        results[i] = res["matrices"]
        if on_step:
            for g in unit_steps(tasks[i].part):
                on_step(g)

    if scheduler is not None:
        client, ours = _client(scheduler, scheduler_timeout)
        try:
            from distributed import as_completed

            meta.update(backend="dask", scheduler=str(client.scheduler.address),
                        workers=len(client.scheduler_info().get("workers", {})))
            run = os.urandom(6).hex()  # task keys unique to this call
            futures = {client.submit(run_unit, tasks[i], pure=False,
                                     key=f"bounds-lib-{run}-L{tasks[i].layer}-{_part_label(tasks[i].part)}"): i
                       for i in todo}
            for fut in as_completed(list(futures)):
                res = fut.result()
                i = futures.pop(fut)
                fut.release()  # fetched: the cluster may forget it (a worker that dies later loses nothing)
                finished(i, res)
        finally:
            if ours:
                client.close()
    else:
        if jobs == 1 or len(todo) <= 1:
            k, why = 1, {"workers": 1, "limited_by": ["jobs asked" if jobs == 1 else "units"]}
        else:
            k, why = choose_workers(jobs, len(todo), estimate)
        meta.update(chosen=why, workers=k)
        if k == 1:
            meta["backend"] = "in process"
            for i in todo:
                finished(i, run_unit(tasks[i], source, cache))  # one unit in memory at a time
        elif opener is None or cache is not None:  # weights in memory, or a cache of this process
            meta["backend"] = "threads"
            with ThreadPoolExecutor(max_workers=k) as pool:
                for i, res in zip(todo, pool.map(lambda i: run_unit(tasks[i], source, cache), todo)):
                    finished(i, res)
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            meta["backend"] = "processes"
            ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
            with ProcessPoolExecutor(max_workers=k, mp_context=ctx) as pool:
                futures = {pool.submit(run_unit, tasks[i]): i for i in todo}
                for fut in as_completed(futures):
                    finished(futures[fut], fut.result())
    meta.update(units_computed=counts["computed"], units_resumed=counts["resumed"])
    return [m for r in results for m in r], meta
