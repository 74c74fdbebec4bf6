"""One checkpoint's spectra spread over worker processes or a Dask cluster (Chapter 6, at scale).

:func:`bounds_lib.analysis.spectra.compute_spectra` hands the work to :func:`run_units`. The work unit is a
*part* of a layer (:func:`bounds_lib.checkpoints.layer_parts`: the attention projections, ``M_in``,
``M_out``): a worker reads only the tensors of its unit, widens them, factors them and releases them,
so it never holds more than one unit. What a worker receives is small — the weight files' paths, the
config, the layout, the layer and the part (:class:`UnitTask`); it opens the checkpoint itself and
reads its tensors by offset. Results come back as the unit's :class:`~bounds_lib.analysis.spectra.MatrixSpectrum`
list and are put in the order of the units, whatever order they finish in.

Four ways to run, the same numbers from each (bit for bit on one machine, with the same number of
BLAS threads: a worker uses the caller's):

* **in process** (``jobs=1``): the units one after another;
* **worker processes** (``jobs`` > 1, or ``jobs=0`` where it pays; a checkpoint on disk): a pool whose
  size is chosen by cores *and* memory (:func:`choose_workers`): ``min(cores, jobs, units, available
  memory / per-unit estimate)``, the memory being the process's own cgroup's where it has a limit.
  With ``jobs=0`` the pool is used only when :func:`plan_pool` estimates that it finishes sooner than
  this process alone (the units' SVD flops at this machine's measured rate against a worker's measured
  start-up): a small model such as all-MiniLM-L6-v2 is analysed in process. How it was chosen is
  recorded in ``ModelSpectra.meta["parallel"]``. The pool stops when told (:func:`process_pool`): a
  signal or a unit's error cancels the units not started and ends the workers, and workers die with
  their parent;
* **threads** (the same ``jobs``, when the weights are in memory — a state dict or a module cannot be
  reopened by a process — or a :class:`~bounds_lib.analysis.spectra.SpectraCache` is given, which lives in
  this process);
* **Dask distributed** (``scheduler=``: an address ``tcp://host:port`` or a ``distributed.Client``):
  one task per unit; the weight files must be at the same path on every worker (a shared file
  system). Every wait has a deadline (:func:`dask_client`, :func:`dask_results`). The ``resume``
  folder need not be: this process stores every result it receives, and a worker that can reach the
  folder also stores its unit before returning it.

A unit that would not fit the per-worker budget (:func:`memory_budget`) is computed lean
(:func:`lean_unit`): a feed-forward matrix by TSQR from its stored precision, the attention part in
two halves (``QK``, then ``V``). A script that calls this with ``jobs`` > 1 needs the
``if __name__ == "__main__":`` guard of ``multiprocessing`` (workers are spawned).

Resuming (``resume=DIR``): each finished unit is written to ``DIR`` at once (atomically) under a key of
what its numbers depend on: the bytes of the tensors it reads, the layer, the part,
the mode, the dtype, the (1,1)-norm switch, the device, the lean choice and the layout — not the file's
times, not the activation, not the number of layers (a prefix run's units serve the whole model). Each
entry names its key and unit and is checked when it is loaded (a file copied over another is recomputed).
A later call with the same ``DIR`` loads the units found there instead of computing them —
after an interrupted run, or a cluster that lost its workers. Within one Dask run a result is
fetched as soon as it is finished and released on the cluster, so a worker that dies afterwards
loses nothing that has to be recomputed (checked by killing one: tests/test_parallel.py).
``DIR/journal.jsonl`` gets one line per unit computed (where it ran, its seconds, the worker's
peak memory). When the environment variable
``BOUNDS_LIB_UNIT_LOG`` names a file, every computation of a unit also appends a line to it, from the
process that computed it (a diagnostic that counts computations on a cluster with a shared disk).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..checkpoints import (
    ArchitectureSpec,
    CheckpointError,
    SafetensorsSource,
    TensorSource,
    TorchBinSource,
    _read_layer,
    layer_parts,
    part_kind,
    part_tensor_names,
)
from ..core.validation import check_scalar

__all__ = [
    "ClusterError",
    "UnitTask",
    "work_units",
    "unit_steps",
    "unit_memory_estimate",
    "lean_unit",
    "memory_budget",
    "available_memory",
    "choose_workers",
    "unit_flops",
    "plan_pool",
    "run_unit",
    "run_units",
    "process_pool",
    "dask_client",
    "dask_results",
    "machine_record",
    "svd_rate",
    "worker_start_seconds",
    "SCHEDULER_TIMEOUT_S",
    "WORKER_START_S",
]

#: Seconds to wait for a Dask scheduler to answer before giving up (``--scheduler-timeout``).
SCHEDULER_TIMEOUT_S = 10.0
#: Resident memory of a worker process besides its unit (Python, NumPy, the library, a safetensors
#: header): measured 43 MB for a spawned worker on Linux with OpenBLAS; 150 MB leaves room.
WORKER_BASE_BYTES = 150 * 2**20
#: Seconds a spawned worker needs before its first unit (start Python, import the library, unpickle
#: the task), used until this machine has measured its own (:func:`worker_start_seconds`): measured
#: 0.33 s for one worker and 0.45-0.53 s for two started at once on the 2-core reference machine
#: (``benchmarks/bench_analyze.py --pool``).
WORKER_START_S = 0.5
#: Bumped whenever the stored form of a unit's results changes (old ``resume`` folders are then not read).
_RESUME_FORMAT = 2  # 2: keyed by content; each entry names its key and unit
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


def _ffn_size(spec: ArchitectureSpec, part, dtype, source=None, layer: int = 0, stored=None) -> tuple:
    """``(m, n, stored itemsize)`` of a feed-forward unit's matrix (``m = N`` rows), from the stored tensors
    when ``source`` is given, else from the layout (stored in ``stored``, default ``dtype``)."""
    s = np.dtype(dtype).itemsize
    N = spec.hidden
    if source is not None:
        names = list(part_tensor_names(spec, layer, part).values())
        elements = sum(math.prod(source.shape(n)) for n in names)
        return N, elements // N, _stored_dtype(source, names, np.dtype(dtype)).itemsize
    wide = part_kind(part) == "M_in" and spec.gated_ffn
    return N, (2 if wide else 1) * spec.d_ff, s if stored is None else np.dtype(stored).itemsize


def unit_memory_estimate(spec: ArchitectureSpec, part, dtype="float64", *, entrywise: bool = False,
                         mode: str = "clean", lean: bool = False, source=None, layer: int = 0,
                         stored=None) -> int:
    """Bytes a worker holds at most while it computes ``part`` (its base memory excluded).

    A dense feed-forward matrix of m×n entries is held widened (``m·n`` in ``dtype``), LAPACK
    decomposes a copy of it (``m·n`` more) in a workspace of about ``min(m, n)²``. Factored lean
    (``_lean_dense``) it is held as stored (``m·n`` in the stored precision, half as much again
    while a gated ``M_in`` is filled), plus ``R``, the SVD's copy of ``R`` and its workspace
    (``3·min(m, n)²``) and one 16 MB block. The sizes are the stored tensors' (``source``, ``layer``) or
    the layout's, stored in ``stored`` (default ``dtype``). The attention part holds its four projections, their
    per-head stacks and the key-side products (three times the projections), plus the 64 MB chunks of
    the (1,1) norms, plus an N×N product and its copy per head in paper mode. Compared with measured
    peaks by ``benchmarks/bench_scale_llama.py``.
    """
    s = np.dtype(dtype).itemsize
    N, H, Hk, d = spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim
    if part_kind(part) == "attention":
        proj = s * (2 * H * d * N + 2 * Hk * d * N)
        extra = (64 * MB if entrywise else 0) + (3 * s * N * N if mode == "paper" else 0)
        return (3 * proj if lean else 4 * proj) // 2 + extra
    m, n, stored = _ffn_size(spec, part, dtype, source, layer, stored)
    k = min(m, n)
    if lean:
        return int(1.5 * stored * m * n) + 3 * s * k * k + _CHUNK_BYTES
    return s * (2 * m * n + k * k)


def lean_unit(spec: ArchitectureSpec, part, dtype, *, source=None, layer: int = 0, device=None,
              budget: int | None = None) -> bool:
    """Whether a unit is computed lean: when it would not fit ``budget`` otherwise
    (:func:`unit_memory_estimate` plus a worker's base). A feed-forward matrix on the CPU is then
    factored by TSQR from its stored precision (``_lean_dense``); the attention part computes its
    ``QK`` heads and its ``V`` heads one after the other, each with only its two projections read."""
    if budget is None or (part_kind(part) != "attention" and device not in (None, "cpu")):
        return False
    return WORKER_BASE_BYTES + unit_memory_estimate(spec, part, dtype, source=source, layer=layer) > budget


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


def _cgroup_memory_left(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")):
    """Bytes this process's own cgroup may still use, or ``None`` without a limit.

    The cgroup is the process's (``/proc/self/cgroup``: a Slurm job step, a container, a systemd
    slice), not the root of the hierarchy: cgroup v2 (``0::/path`` → ``memory.max``,
    ``memory.current``) or v1 (``N:memory:/path`` → ``memory.limit_in_bytes``,
    ``memory.usage_in_bytes``). Every ancestor's limit also binds, so the least room left along the
    path is returned."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        lines = []
    places = []  # (folder of the process's cgroup, limit file, usage file)
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            # the unified hierarchy: at the root, or under unified/ beside v1's controllers (hybrid)
            base = root / "unified" if (root / "unified").is_dir() and (root / "memory").is_dir() else root
            places.append((base / path.lstrip("/"), base, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            base = root / "memory"
            places.append((base / path.lstrip("/"), base, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    if not places:  # no /proc/self/cgroup: the hierarchy's root, as seen from here
        places = [(root, root, "memory.max", "memory.current"),
                  (root / "memory", root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")]
    best = None
    for folder, top, limit_f, usage_f in places:
        d = folder
        while True:
            try:
                limit = (d / limit_f).read_text().strip()
                usage = int((d / usage_f).read_text().strip())
            except (OSError, ValueError):
                limit = None
            if limit is not None and limit.isdigit() and int(limit) < 2**60:
                left = max(0, int(limit) - usage)
                best = left if best is None else min(best, left)
            if d == top or d.parent == d or top not in d.parents:
                break
            d = d.parent
    return best


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
    if avail is None:  # no /proc/meminfo: the free pages POSIX reports, where the system has them
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            where = "sysconf(SC_AVPHYS_PAGES)"
        except (ValueError, OSError, AttributeError):
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


def unit_flops(spec: ArchitectureSpec, part, mode: str = "clean", *, entrywise: bool = False, source=None,
               layer: int = 0) -> float:
    """Floating-point operations of one unit, to compare the work with a worker's start-up (:func:`plan_pool`).

    A dense m×n singular-value decomposition (values only, ``K = max(m, n)``, ``k = min(m, n)``) costs
    ``4Kk² − 4k³/3`` (Golub–Kahan bidiagonalisation; Golub & Van Loan, Alg. 5.4.2). The attention part
    in clean mode costs, per head and per group (``QK``, ``V``), two QR factorizations of N×d_h
    (``2Nd_h²`` each) and the d_h×d_h core (``≈ 3d_h³``); with the (1,1) norms each head product is also
    formed (``2N²d_h``); in paper mode each head's N×N product is formed and decomposed
    (``2N²d_h + 8N³/3``). An estimate of the order, not a count: only its ratio to a measured rate is used.
    """
    N, H, d = spec.hidden, spec.n_heads, spec.head_dim
    if part_kind(part) == "attention":
        if mode == "paper":
            per_head = 2 * N * N * d + 8 * N**3 / 3
        else:
            per_head = 4 * N * d * d + 3 * d**3 + (2 * N * N * d if entrywise else 0)
        return float(2 * H * per_head)
    m, n, _ = _ffn_size(spec, part, "float64", source, layer)
    K, k = max(m, n), min(m, n)
    return float(4 * K * k * k - 4 * k**3 / 3)


_RATE: list = []  # per process: the calibrated SVD rate (flop/s), measured once


def svd_rate() -> tuple:
    """``(flop/s, where)``: how fast this machine decomposes — the median rate of the last runs' units
    (:func:`machine_record`), else the best of three values-only SVDs of a
    512×256 float64 matrix now (about 10 ms each; small matrices run slower than a model's, so this
    errs towards the pool)."""
    rates = machine_record().get("svd_rate", [])
    if rates:
        return float(np.median(rates)), f"measured on this machine (median of the last {len(rates)} runs' units)"
    if not _RATE:
        A = np.random.default_rng(0).standard_normal((512, 256))
        best = math.inf
        for _ in range(3):
            t = time.perf_counter()
            np.linalg.svd(A, compute_uv=False)
            best = min(best, time.perf_counter() - t)
        _RATE.append((4 * 512 * 256**2 - 4 * 256**3 / 3) / max(best, 1e-6))
    return _RATE[0], "a 512×256 SVD timed now (no run measured on this machine yet)"


def _machine_file() -> Path:
    if os.environ.get("BOUNDS_LIB_MACHINE_RECORD"):  # another file (the tests use their own)
        return Path(os.environ["BOUNDS_LIB_MACHINE_RECORD"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bounds-lib" / "machine.json"


def _machine_key() -> str:
    return f"{socket.gethostname()}/{_cores()} cores"


def machine_record() -> dict:
    """``{"worker_start_s": [...], "svd_rate": [...]}``: what earlier runs measured on this machine (the
    last 10 of each; ``$XDG_CACHE_HOME/bounds-lib/machine.json`` or the file ``BOUNDS_LIB_MACHINE_RECORD``
    names; one entry per host and core count).
    A missing or unreadable file is an empty record (it only informs :func:`plan_pool`'s choice)."""
    try:
        entry = json.loads(_machine_file().read_text())[_machine_key()]
        return {k: [float(x) for x in entry[k] if 0 < float(x) < 1e15]
                for k in ("worker_start_s", "svd_rate") if isinstance(entry.get(k), list)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _record(**values):
    """Append measurements to this machine's record (the last 10 of each kept); best effort, atomic."""
    f = _machine_file()
    try:
        try:
            data = json.loads(f.read_text())
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        entry = data.get(_machine_key()) if isinstance(data.get(_machine_key()), dict) else {}
        for k, v in values.items():
            old = entry.get(k) if isinstance(entry.get(k), list) else []
            entry[k] = (old + [float(f"{v:.4g}")])[-10:]
        data[_machine_key()] = entry
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, f)
    except OSError:
        pass


def worker_start_seconds() -> tuple:
    """``(seconds, where)``: a spawned worker's start-up on this machine — the median of the last pools'
    measurements (:func:`machine_record`), else :data:`WORKER_START_S`."""
    starts = machine_record().get("worker_start_s", [])
    if starts:
        return float(np.median(starts)), f"measured on this machine (median of the last {len(starts)} pools)"
    return WORKER_START_S, "bounds_lib.analysis.parallel.WORKER_START_S (not yet measured on this machine)"


def _busy_cores() -> float:
    """Cores other processes keep busy: the one-minute load average (0 where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


def plan_pool(flops: float, workers: int, *, rate: tuple | None = None, start: tuple | None = None,
              busy: float | None = None) -> tuple:
    """``(use_pool, cost)``: whether ``workers`` spawned processes finish ``flops`` of decompositions sooner
    than this process alone. In process the work takes ``T₁ = flops / rate``; a pool takes about
    ``s + T₁ / w`` (``s``: a worker's start-up, :func:`worker_start_seconds`; the workers start at
    once), where ``w = min(workers, cores − busy)``, at least 1: a machine whose cores other processes
    keep busy (``busy``: the one-minute load average) gives a pool less than its size. The pool is
    chosen when ``s + T₁/w < T₁``. ``cost`` states every number. ``rate`` and ``start`` (each ``(value,
    where it comes from)``) default to :func:`svd_rate` and :func:`worker_start_seconds`."""
    rate, rate_from = svd_rate() if rate is None else rate
    s, where = worker_start_seconds() if start is None else start
    busy = _busy_cores() if busy is None else busy
    free = max(1, min(workers, round(_cores() - busy)))  # the cores other processes leave to the pool
    serial = flops / rate
    pooled = s + serial / free
    use = workers > 1 and pooled < serial
    return use, {"svd_flops": flops, "svd_rate_GFLOPs": round(rate / 1e9, 2), "svd_rate_from": rate_from,
                 "serial_estimate_s": round(serial, 3), "busy_cores": round(busy, 2), "effective_workers": free,
                 "worker_start_s": round(s, 3), "worker_start_from": where, "workers": workers,
                 "pool_estimate_s": round(pooled, 3),
                 "decision": (f"a pool of {workers}" if use else "in process") + (
                     f": {pooled:.2f} s estimated with {workers} workers ({free} cores free) against "
                     f"{serial:.2f} s in process")}


# --------------------------------------------------------------------------------------------
# One unit, in whatever process runs it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Opener:
    """How a worker reopens the checkpoint: the storage kind, the weight files (absolute paths), the config,
    and the checkpoint's identity when the run started (:func:`_checkpoint_identity`): a worker keeps what
    it opened for later tasks, and a checkpoint re-saved at the same path is then opened again."""

    storage: str
    files: tuple
    config_json: str
    description: str
    identity: str = ""

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


_STARTED: list = []  # per process: whether this process has begun a unit (a worker's first one is timed)
_OPENED: dict = {}  # per process: a worker opens each checkpoint once (headers only)


def _opener(source: TensorSource):
    """An ``_Opener`` for a file-backed source, ``None`` for weights in memory."""
    if source.storage not in ("safetensors", "pytorch-bin") or not hasattr(source, "files"):
        return None
    return _Opener(source.storage, tuple(str(Path(f).resolve()) for f in source.files),
                   json.dumps(source.config, sort_keys=True), source.description, _checkpoint_identity(source))


@dataclass(frozen=True)
class UnitTask:
    """What a worker needs for one unit — a few hundred bytes, never an array."""

    opener: object  # the private ``_Opener`` of a checkpoint on disk; None for weights in memory
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
    lean: bool = False
    chunk_bytes: int = 16 * MB


def _blas_threads():
    """The caller's BLAS thread count (what a worker uses, so that its numbers are the caller's)."""
    try:
        from threadpoolctl import threadpool_info

        counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
        return min(counts) if counts else None
    except Exception:  # pragma: no cover - threadpoolctl is a dependency
        return None


def _maxrss_bytes() -> int | None:
    """This process's peak resident memory: ``VmHWM`` of ``/proc/self/status`` on Linux.

    Not ``getrusage``: a process started by fork and exec (a spawned worker, a benchmark's child)
    reports there the larger of its own peak and its parent's resident memory at the fork.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
    except Exception:  # pragma: no cover - not POSIX
        return None


#: Rows of the tall matrix widened at a time by ``_lean_dense`` (at most this many bytes).
_CHUNK_BYTES = 16 * MB
_EXACT = {"F16": "float16", "float16": "float16", "BF16": "float32", "bfloat16": "float32", "F32": "float32",
          "float32": "float32"}


def _stored_dtype(source: TensorSource, names, working: np.dtype) -> np.dtype:
    """The narrowest dtype that holds the stored tensors ``names`` exactly and is no wider than ``working``
    (float16 for F16, float32 for BF16 and F32; ``working`` for anything else)."""
    kinds = {_EXACT.get(str(source.dtype(n)).replace("torch.", ""), working.name) for n in names}
    dt = max((np.dtype(k) for k in kinds), key=lambda d: d.itemsize)
    return dt if dt.itemsize <= working.itemsize else working


def _lean_dense(source: TensorSource, task: UnitTask, cache=None):
    """The :class:`~bounds_lib.analysis.spectra.MatrixSpectrum` of a large ``M_in``/``M_out`` unit, factored lean.

    ``W`` is read in its stored precision (float16 stays float16: a quarter of float64), and the tall
    orientation ``Z`` (``W`` or ``Wᵀ``, more rows than columns) is widened a block of rows at a time into a
    triangular-pentagonal QR (LAPACK ``tpqrt``) that updates one n×n factor ``R``: ``[R; Z_block] = Q R'``.
    The singular values of ``R`` are those of ``Z``, hence of ``W``; the norms are accumulated block by
    block on the same scaled entries as the dense path (the power of two of
    ``bounds_lib.theory.norms._pow2_scaled``). Peak: ``W`` as stored + ``R`` + one block, instead of ``W``
    widened + LAPACK's copy. The numbers agree with the dense SVD within
    ``bounds_lib.analysis.devices.spectra_agree`` (tested), not bit for bit. ``None`` unless the caller chose
    the lean path for this unit (``task.lean``: its dense factorization would not fit the per-worker
    budget, :func:`lean_unit`).
    """
    from types import SimpleNamespace

    from ..checkpoints import part_expert
    from .spectra import MatrixSpectrum, SpectraCache, _check_finite

    kind = part_kind(task.part)
    if not task.lean or kind == "attention":
        return None
    working = np.dtype(task.dtype)
    names = list(part_tensor_names(task.arch, task.layer, task.part).values())
    lw = _read_layer(source, task.arch, task.layer, _stored_dtype(source, names, working), (task.part,))
    W = lw.matrix(task.part)
    del lw
    if cache is None:
        s, a, b = _tsqr_spectrum(W, working, task.chunk_bytes)
    else:
        key = SpectraCache.digest(W, tag=f"{kind}|tsqr|{working.name}|{task.chunk_bytes}")
        s, a, b = cache.get_or_compute(key, lambda: _tsqr_spectrum(W, working, task.chunk_bytes))
    _check_finite([(s, a, b)], SimpleNamespace(layer=task.layer), kind, working.name)
    return [MatrixSpectrum(task.layer, -1, kind, tuple(W.shape), s, a, b, part_expert(task.part))]


def _tsqr_spectrum(W: np.ndarray, working: np.dtype, chunk_bytes: int | None = None) -> tuple:
    """``(sigma, norm_21, norm_11)`` of ``W`` by blocked TSQR in ``working`` precision (see ``_lean_dense``);
    blocks of at most ``chunk_bytes`` (default ``_CHUNK_BYTES``; the caller's, so that every worker
    blocks alike and gives the same bits)."""
    from scipy.linalg import lapack

    from .devices import svdvals
    from ..theory.norms import _SAFE_EXPONENT
    from .spectra import _unscale

    m = max(float(W.max()), -float(W.min())) if W.size else 0.0
    e = 0 if (m == 0.0 or 2.0 ** -_SAFE_EXPONENT <= m <= 2.0 ** _SAFE_EXPONENT) else math.frexp(m)[1]
    tall = W.shape[0] >= W.shape[1]
    rows, n = W.shape if tall else W.shape[::-1]
    tpqrt, = lapack.get_lapack_funcs(("tpqrt",), dtype=working)
    R = np.zeros((n, n), dtype=working, order="F")
    step = max(1, (chunk_bytes or _CHUNK_BYTES) // (n * working.itemsize))
    colsq = np.zeros(n, dtype=working)  # tall (Z = W): the column norms of W accumulate over its row blocks
    n21 = n11 = 0.0
    for i in range(0, rows, step):
        # always a copy: tpqrt overwrites its block, and a one-row slice or a whole Wᵀ is Fortran-ordered already
        block = np.array(W[i:i + step] if tall else W[:, i:i + step].T, dtype=working, order="F", copy=True)
        if e:
            np.ldexp(block, -e, out=block)
        if tall:
            colsq += np.einsum("ij,ij->j", block, block)
        else:  # Z = Wᵀ: its rows are the columns of W
            n21 += float(np.sum(np.linalg.norm(block, axis=1)))
        n11 += float(np.sum(np.abs(block)))
        R, block, _, info = tpqrt(0, min(n, 64), R, block, overwrite_a=True, overwrite_b=True)
        if info != 0:  # pragma: no cover - LAPACK reports only argument errors here
            raise RuntimeError(f"LAPACK tpqrt failed (info={info})")
    if tall:
        n21 = float(np.sum(np.sqrt(colsq)))
    s, a, b = _unscale(svdvals(np.triu(R)), n21, n11, e)
    s.flags.writeable = False
    return s, a, b


def _compute(source: TensorSource, task: UnitTask, cache=None) -> list:
    from .spectra import layer_spectra

    lean = _lean_dense(source, task, cache)
    if lean is not None:
        return lean
    if task.lean and part_kind(task.part) == "attention":
        # in halves: the QK heads with only Wq, Wk held, then the V heads with only Wv, Wo (read again)
        out = []
        for group, drop in (("QK", ("Wv", "Wo")), ("V", ("Wq", "Wk"))):
            lw = _read_layer(source, task.arch, task.layer, np.dtype(task.dtype), (task.part,))
            lw = replace(lw, **dict.fromkeys(drop))
            kw = {} if task.device is None else {"device": task.device}
            out += layer_spectra(lw, task.mode, entrywise=task.entrywise, cache=cache, attention=(group,), **kw)
            del lw
        return out
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
    first = None
    if source is None and not _STARTED:  # this worker process's first unit: when it began (for plan_pool)
        _STARTED.append(True)
        first = time.time()
    store = _worker_store(task)
    if store is not None:
        mats = store.load(task.key, task.layer, task.part)
        if mats is not None:
            return {"matrices": mats, "computed": False, "stored": True, "first_task_started": first}
    src = source if source is not None else task.opener.open()
    if task.blas_threads and source is None:  # a worker process (threads share the caller's limit)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(task.blas_threads, user_api="blas"):
            mats = _compute(src, task, cache)
    else:
        mats = _compute(src, task, cache)
    out = {"matrices": mats, "computed": True, "stored": False, "seconds": time.perf_counter() - t0,
           "host": socket.gethostname(), "pid": os.getpid(), "maxrss": _maxrss_bytes(), "first_task_started": first}
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


#: Fields of the layout a unit's numbers do not depend on (the activation enters only the scores' L_φ;
#: the number of layers only says how many units there are).
_KEY_IGNORES = ("activation", "n_layers")


def _unit_key(source, task: UnitTask) -> str:
    """The resume key of a unit: a digest of what its numbers depend on and nothing else — the bytes,
    names, shapes and stored dtypes of the tensors the unit reads, the layer and part, the extraction
    settings (mode, dtype, the (1,1)-norm switch, device, lean choice and block size) and the layout
    (family, prefix, sizes, head split; not the activation). A checkpoint re-saved, copied with its
    times kept, or replaced by another fine-tune at the same path keys by its content."""
    h = hashlib.blake2b(digest_size=20)
    layout = {k: v for k, v in task.arch.to_dict().items() if k not in _KEY_IGNORES}
    h.update(repr((_RESUME_FORMAT, task.layer, _part_label(task.part), task.mode, task.dtype, task.entrywise,
                   task.device or "cpu", task.lean, task.chunk_bytes, sorted(layout.items()))).encode())
    for role, name in sorted(part_tensor_names(task.arch, task.layer, task.part).items()):
        h.update(repr((role, name, tuple(source.shape(name)), str(source.dtype(name)))).encode())
        h.update(_tensor_digest(source, name))
    return h.hexdigest()


def _tensor_digest(source: TensorSource, name: str) -> bytes:
    """SHA-256 of a tensor's bytes: as stored, through a memory map, for a safetensors file (no copy, no
    widening; SHA-256 runs at ~1.8 GB/s on CPUs with SHA instructions); else of the array it reads as."""
    where = getattr(source, "_where", None)
    if isinstance(source, SafetensorsSource) and where and name in where:
        import mmap

        f, start, e = where[name]
        b, end = e["offsets"]
        with open(f, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if start + end > size:
                raise CheckpointError(f"{f}: could not read tensor {name!r} (file truncated)")
            if end == b:
                return hashlib.sha256(b"").digest()
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)[start + b:start + end]
                try:
                    return hashlib.sha256(view).digest()
                finally:
                    view.release()
    A = np.ascontiguousarray(source.read_raw(name))
    h = hashlib.sha256(repr((A.shape, A.dtype.str)).encode())
    h.update(A.view(np.uint8).reshape(-1))
    return h.digest()


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
        self.mismatched = []

    def _path(self, key):
        return self.folder / "units" / f"{key}.npz"

    def load(self, key, layer, part=None):
        """The stored matrices of unit ``key``, or ``None``: absent, unreadable, of an older format, or an
        entry that names another key or unit (a file copied over another) — then the unit is recomputed
        (and rewritten); a mismatch is also listed in ``self.mismatched``."""
        from .spectra import MatrixSpectrum

        p = self._path(key)
        if not p.is_file():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                entry = json.loads(str(z["entry"]))
                want = {"format": _RESUME_FORMAT, "key": key, "layer": layer,
                        "part": None if part is None else _part_label(part)}
                got = {k: entry.get(k) for k in want}
                if part is None:
                    got["part"] = None
                if got != want:
                    self.mismatched.append(f"layer {layer} {want['part']}: the stored entry {p.name} holds "
                                           f"layer {entry.get('layer')} {entry.get('part')} (key "
                                           f"{str(entry.get('key'))[:12]}…); recomputed")
                    return None
                meta = json.loads(str(z["meta"]))
                norms = z["norms"]
                return [MatrixSpectrum(layer, m["head"], m["matrix_type"], tuple(m["shape"]), z[f"sigma{i}"],
                                       float(norms[i, 0]), float(norms[i, 1]),
                                       **({} if m.get("expert") is None else {"expert": m["expert"]}))
                        for i, m in enumerate(meta)]
        except Exception:  # a damaged or old-format file is recomputed (and rewritten), never trusted
            return None

    def store(self, key, task: UnitTask, res: dict):
        mats = res["matrices"]
        meta = [{"head": m.head, "matrix_type": m.matrix_type, "shape": list(m.shape),
                 "expert": getattr(m, "expert", None)} for m in mats]
        arrays = {f"sigma{i}": np.asarray(m.sigma) for i, m in enumerate(mats)}
        norms = np.array([[m.norm_21, m.norm_11] for m in mats], dtype=np.float64).reshape(-1, 2)
        entry = {"format": _RESUME_FORMAT, "key": key, "layer": task.layer, "part": _part_label(task.part)}
        tmp = self.folder / "units" / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
        np.savez(tmp, entry=np.array(json.dumps(entry)), meta=np.array(json.dumps(meta)), norms=norms, **arrays)
        os.replace(tmp, self._path(key))
        line = {"layer": task.layer, "part": _part_label(task.part), "key": key, "host": res.get("host"),
                "pid": res.get("pid"), "seconds": round(res.get("seconds", 0.0), 4), "maxrss": res.get("maxrss")}
        with self._lock, open(self.folder / "journal.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")


# --------------------------------------------------------------------------------------------
# All units of a checkpoint
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Process pools and Dask clients that stop when told
# --------------------------------------------------------------------------------------------

#: The error of a worker process that died (the pool cannot say why; the kernel's OOM killer is the usual one).
_WORKER_DIED = ("a worker process died before it finished its part (ended by a signal — most often the kernel's "
                "out-of-memory killer); run with fewer workers (--jobs 1: in this process), and with --resume "
                "DIR to keep the parts already finished")
#: Seconds between checks of a parent's life in a worker (:func:`_worker_init`'s watchdog).
_WATCHDOG_S = 0.5


def _worker_init(parent_pid: int, initializer=None):
    """Run in each spawned worker first: it dies with its parent. On Linux the kernel sends it SIGKILL when
    the parent dies (``prctl(PR_SET_PDEATHSIG)``); everywhere a daemon thread checks every
    :data:`_WATCHDOG_S` s that the parent is still its parent and ends the worker otherwise (a worker
    blocked in BLAS is still ended: ``os._exit`` does not wait for it)."""
    import signal as _signal

    if hasattr(_signal, "SIGKILL"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(_signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(_WATCHDOG_S)

    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="bounds-lib-parent-watchdog").start()
    if initializer is not None:
        initializer()


def _stop_pool(pool, grace: float = 3.0):
    """Cancel every task not started, end the workers now (SIGTERM, SIGKILL after ``grace`` s) and return."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


@contextmanager
def process_pool(workers: int, initializer=None):
    """A ``ProcessPoolExecutor`` of ``workers`` spawned processes (no fork of a process that may hold threads)
    that stops when told: on any exception in the ``with`` block — a unit's error, a signal's exception,
    ``KeyboardInterrupt`` — the tasks not started are cancelled and the workers ended at once (the
    executor's own exit would wait for every pending task); its workers die with this process
    (a parent-death signal and a watchdog thread). ``initializer`` (a module-level function) runs in
    each worker after that."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), initializer))
    try:
        yield pool
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def dask_client(scheduler, timeout: float, what: str = "--scheduler", hint: str = "leave out --scheduler to run here"):
    """``(client, ours)``: a ``distributed.Client`` for an address (ours to close) or the one given, connected
    *and* with at least one worker within ``timeout`` seconds, else :class:`ClusterError`. The client is
    made in a separate thread whose wait is bounded here: ``distributed.Client(timeout=…)`` alone waits
    without end on a listener that accepts and never answers."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(f"{what} needs Dask distributed, which is not installed: "
                           "pip install 'bounds_lib[grid]'") from None
    if isinstance(scheduler, Client):
        client, ours = scheduler, False
    else:
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise TypeError(f"scheduler must be a Dask scheduler address ('tcp://host:port') or a "
                            f"distributed.Client, got {type(scheduler).__name__} {scheduler!r}")
        box = {}

        def connect():
            try:
                box["client"] = Client(scheduler, timeout=f"{timeout}s")
            except BaseException as exc:  # noqa: BLE001 - reported below, in the caller's thread
                box["error"] = exc

        t = threading.Thread(target=connect, daemon=True, name="bounds-lib-dask-connect")
        t.start()
        t.join(timeout)
        if "client" not in box:
            exc = box.get("error")
            why = ("it accepted the connection but did not complete Dask's handshake" if exc is None
                   else " ".join(str(exc).split()) or type(exc).__name__)
            raise ClusterError(f"cannot reach a Dask scheduler at {scheduler!r} within {timeout:g} s ({why}); start "
                               "one with 'dask scheduler' and workers with 'dask worker ADDRESS --nthreads 1', or "
                               f"{hint}")
        client, ours = box["client"], True
    address = scheduler if isinstance(scheduler, str) else client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        if ours:
            client.close(timeout=2)
        raise ClusterError(f"the Dask scheduler at {address} has no workers (none joined within {timeout:g} s); "
                           f"start some with 'dask worker {address} --nthreads 1', or {hint}") from None
    return client, ours


def dask_results(client, futures, *, timeout: float, unit_timeout: float | None = None):
    """Yield each of ``futures`` with its result as it finishes, every wait bounded: when the scheduler has
    had no worker for ``timeout`` s, or no result came for ``unit_timeout`` s (``None``: no limit while
    workers are alive), :class:`ClusterError`. A task's own error is raised as it is."""
    from distributed import wait

    pending = set(futures)
    last = time.monotonic()
    alone_since = None
    while pending:
        try:
            done, pending = wait(pending, timeout=min(1.0, timeout), return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        for fut in done:
            yield fut, fut.result()
            last = time.monotonic()
        if done:
            alone_since = None
            continue
        now = time.monotonic()
        if unit_timeout is not None and now - last > unit_timeout:
            raise ClusterError(f"no result from the Dask cluster for {unit_timeout:g} s ({len(pending)} tasks "
                               "pending): a worker is stuck or too slow (--unit-timeout)")
        try:
            workers = len(client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - an unreachable scheduler counts as having no worker
            workers = 0
        if workers:
            alone_since = None
        elif alone_since is None:
            alone_since = now
        elif now - alone_since > timeout:
            raise ClusterError(f"the Dask scheduler has had no workers for {timeout:g} s with {len(pending)} tasks "
                               "pending (they were lost or stopped); start workers or run without --scheduler")


def run_units(source: TensorSource, arch: ArchitectureSpec, *, mode: str, dtype, entrywise: bool, jobs: int = 1,
              cache=None, scheduler=None, resume=None, device=None, on_step=None,
              scheduler_timeout: float = SCHEDULER_TIMEOUT_S, unit_timeout: float | None = None) -> tuple:
    """``(matrices, meta)``: the spectra of every unit of ``arch``'s layers, in unit order (see the module
    docstring for the four ways to run and for ``resume``). ``meta`` says how it ran.

    ``jobs=0`` chooses: worker processes (one per core, fewer if memory is short) only when
    :func:`plan_pool` estimates that they finish sooner than this process alone; ``jobs`` > 1 asks for
    that many (still limited by cores, memory and units). On any exception — a unit's error, a
    signal's, ``KeyboardInterrupt`` — the units not started are cancelled and the workers ended at
    once. With ``scheduler``, ``scheduler_timeout`` bounds the connection, the wait for a first worker
    and any time without a worker; ``unit_timeout`` (seconds, default none) any time without a result."""
    dtype = np.dtype(dtype).name
    units = work_units(arch)
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
    store = None if resume is None else _ResumeFolder(resume)
    threads = _blas_threads()
    tasks = []
    budget = memory_budget(source)
    for layer, part in units:
        lean = lean_unit(arch, part, dtype, source=source, layer=layer, device=device, budget=budget)
        t = UnitTask(opener, arch, layer, part, mode, dtype, entrywise, device, threads, lean=lean,
                     chunk_bytes=_CHUNK_BYTES)
        if store is not None:
            t = replace(t, resume=str(store.folder.resolve()), key=_unit_key(source, t))
        tasks.append(t)
    estimate = WORKER_BASE_BYTES + max(
        unit_memory_estimate(arch, t.part, dtype, entrywise=entrywise, mode=mode, lean=t.lean, source=source,
                             layer=t.layer) for t in tasks)
    meta = {"units": len(units), "per_worker_estimate_MB": round(estimate / MB, 1),
            "budget_MB": round(budget / MB, 1), "blas_threads_per_worker": threads,
            "units_factored_lean": sum(t.lean for t in tasks)}
    results = [None] * len(units)
    todo = list(range(len(units)))
    if store is not None:
        for i in todo:
            results[i] = store.load(tasks[i].key, tasks[i].layer, tasks[i].part)
        todo = [i for i in todo if results[i] is None]
        meta["resume_folder"] = str(store.folder)
        if store.mismatched:  # entries that name another unit: recomputed, and said so
            meta["resume_entries_mismatched"] = list(store.mismatched)
            import warnings

            for line in store.mismatched:
                warnings.warn(f"--resume {store.folder}: {line}", stacklevel=2)
    counts = {"computed": 0, "resumed": len(units) - len(todo)}
    for i in range(len(units)):
        if results[i] is not None and on_step:  # resumed units count as done
            for g in unit_steps(tasks[i].part):
                on_step(g)

    peaks = {}
    timed = [0.0, 0.0]  # flops, seconds of the units computed here or in worker processes

    @functools.cache
    def flops(i):  # a unit's count, once: the pool's cost estimate and the measured rate both use it
        return unit_flops(arch, tasks[i].part, mode, entrywise=entrywise, source=source, layer=tasks[i].layer)

    def finished(i, res):
        if res.get("maxrss") is not None:  # each worker's peak memory so far (what the budget is about)
            w = f"{res['host']}:{res['pid']}"
            peaks[w] = max(peaks.get(w, 0), res["maxrss"])
        if res["computed"]:
            counts["computed"] += 1
            if not tasks[i].lean and meta.get("backend") == "in process":  # units one after another: the rate
                timed[0] += flops(i)
                timed[1] += res["seconds"]
        else:
            counts["resumed"] += 1
        if store is not None and not res["stored"]:
            store.store(tasks[i].key, tasks[i], res)
        results[i] = res["matrices"]
        if on_step:
            for g in unit_steps(tasks[i].part):
                on_step(g)

    if scheduler is not None:
        client, ours = dask_client(scheduler, scheduler_timeout, what="scheduler= (--scheduler)")
        futures = {}
        try:
            meta.update(backend="dask", scheduler=str(client.scheduler.address),
                        workers=len(client.scheduler_info().get("workers", {})))
            run = os.urandom(6).hex()  # task keys unique to this call
            futures = {client.submit(run_unit, tasks[i], pure=False,
                                     key=f"bounds-lib-{run}-L{tasks[i].layer}-{_part_label(tasks[i].part)}"): i
                       for i in todo}
            for fut, res in dask_results(client, list(futures), timeout=scheduler_timeout, unit_timeout=unit_timeout):
                i = futures.pop(fut)
                fut.release()  # fetched: the cluster may forget it (a worker that dies later loses nothing)
                finished(i, res)
        except BaseException:
            if futures and not ours:  # a client of the caller's: its cluster stops our pending tasks
                try:
                    client.cancel(list(futures), force=True)
                except Exception:  # noqa: BLE001 - the scheduler may be gone; the error that got here matters
                    pass
            raise
        finally:
            if ours:
                client.close(timeout=min(5.0, scheduler_timeout))  # its tasks are released with it
    else:
        if jobs == 1 or len(todo) <= 1:
            k, why = 1, {"workers": 1, "limited_by": ["jobs asked" if jobs == 1 else "units"]}
        else:
            k, why = choose_workers(jobs, len(todo), estimate)
            if jobs == 0 and k > 1 and opener is not None and cache is None and device in (None, "cpu"):
                # automatic: worker processes only where the work pays for starting them
                use, why["cost"] = plan_pool(sum(flops(i) for i in todo), k)
                if not use:
                    k = why["workers"] = 1
                    why["limited_by"] = ["cost"]
        meta.update(chosen=why, workers=k)
        if k == 1:
            meta["backend"] = "in process"
            for i in todo:
                finished(i, run_unit(tasks[i], source, cache))  # one unit in memory at a time
        elif opener is None or cache is not None:  # weights in memory, or a cache of this process
            meta["backend"] = "threads"
            pool = ThreadPoolExecutor(max_workers=k)
            try:
                futures = {pool.submit(run_unit, tasks[i], source, cache): i for i in todo}
                for fut in as_completed(futures):
                    finished(futures[fut], fut.result())
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)  # the running units end with their SVD
                raise
            pool.shutdown(wait=True)
        else:
            meta["backend"] = "processes"
            starts = []
            t_pool = time.time()
            from concurrent.futures.process import BrokenProcessPool  # (imports multiprocessing: only here)

            try:
                with process_pool(k) as pool:
                    futures = {pool.submit(run_unit, tasks[i]): i for i in todo}
                    for fut in as_completed(futures):
                        res = fut.result()
                        if res.get("first_task_started") is not None:
                            starts.append(res["first_task_started"] - t_pool)
                        finished(futures[fut], res)
            except BrokenProcessPool:
                raise ClusterError(_WORKER_DIED) from None
            if starts:  # each worker's start-up, as the next automatic choice will read it
                meta["worker_start_measured_s"] = round(float(np.median(starts)), 3)
                _record(worker_start_s=float(np.median(starts)))
        if device in (None, "cpu") and timed[1] > 0.05:  # the rate this process's units ran at
            meta["svd_rate_measured_GFLOPs"] = round(timed[0] / timed[1] / 1e9, 2)
            _record(svd_rate=timed[0] / timed[1])
    meta.update(units_computed=counts["computed"], units_resumed=counts["resumed"],
                worker_peak_MB={w: round(b / MB, 1) for w, b in sorted(peaks.items())})
    return [m for r in results for m in r], meta
