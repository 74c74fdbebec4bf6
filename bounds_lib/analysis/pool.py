"""Worker processes for the units of a checkpoint: how many, whether they pay, and a pool that stops when
told (Chapter 6, at scale).

:func:`choose_workers` sizes a pool by cores *and* memory: ``min(cores, jobs, units, available memory /
per-unit estimate)``, the memory being the process's own cgroup's where it has a limit
(:func:`available_memory`). :func:`plan_pool` estimates whether the pool finishes sooner than this
process alone: the units' SVD flops at this machine's measured rate (:func:`svd_rate`) against a
worker's measured start-up (:func:`worker_start_seconds`), on cores shared with the processes runnable
at that moment (``_busy_cores``); both are learnt from earlier runs (:func:`machine_record`), and a
pool is chosen only where it is estimated clearly sooner (:data:`POOL_MARGIN`). A small model such as
all-MiniLM-L6-v2 (0.7 s of SVDs on the 2-core reference machine, where an idle worker starts in about
0.25 s: a pool of 2 is estimated at 0.82–0.87× this process alone, outside that margin) is analysed in
process; a 1.1B model's layers are spread over the cores.
:func:`process_pool` spawns the workers: a signal or a unit's error cancels the units not started and
ends the workers, workers die with their parent, and a worker that dies (most often by the kernel's
out-of-memory killer) is one :class:`~bounds_lib.analysis.cluster.ClusterError`.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .cluster import ClusterError
from .kernel import MB
from .threads import blas_threads
from .units import _hostname

__all__ = [
    "available_memory",
    "choose_workers",
    "plan_pool",
    "process_pool",
    "machine_record",
    "svd_rate",
    "worker_start_seconds",
    "tune_allocator",
    "WORKER_START_S",
    "POOL_MARGIN",
    "MALLOC_SETTINGS",
]

#: Seconds a spawned worker needs before its first unit (start Python, import the library, unpickle
#: the task), used until this machine has measured its own (:func:`worker_start_seconds`): measured
#: 0.33 s for one worker and 0.45-0.53 s for two started at once on the 2-core reference machine
#: (``benchmarks/bench_analyze.py --pool``).
WORKER_START_S = 0.5
#: The error of a worker process that died (the pool cannot say why; the kernel's OOM killer is the usual one).
_WORKER_DIED = ("a worker process died before it finished its part (ended by a signal — most often the kernel's "
                "out-of-memory killer); run with fewer workers (--jobs 1: in this process), and with --resume "
                "DIR to keep the parts already finished")
#: Seconds between checks of a parent's life in a worker (:func:`_worker_init`'s watchdog).
_WATCHDOG_S = 0.5


# --------------------------------------------------------------------------------------------
# How many workers
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Whether they pay: this machine's measured rate and start-up
# --------------------------------------------------------------------------------------------

_RATE: list = []  # per process: the calibrated SVD rate (flop/s), measured once


def svd_rate() -> tuple:
    """``(flop/s, where)``: how fast one core of this machine decomposes — the median rate of the last
    runs' units (:func:`machine_record`; flops per CPU second of the thread that ran them, so a run
    under load records the core's speed, not its share of it), else the best of three values-only SVDs
    of a 512×256 float64 matrix now, timed in CPU seconds of this thread (about 10 ms each; small
    matrices run slower than a model's, so this errs towards the pool)."""
    rates = machine_record().get("svd_rate", [])
    if rates:
        return _median(rates), f"measured on this machine (median of the last {len(rates)} runs' units)"
    if not _RATE:
        A = _uniform_matrix(512, 256)
        best = math.inf
        with blas_threads(1):  # one core's rate, whatever the caller's BLAS threads
            for _ in range(3):
                t = time.thread_time()
                np.linalg.svd(A, compute_uv=False)
                best = min(best, time.thread_time() - t)
        _RATE.append((4 * 512 * 256**2 - 4 * 256**3 / 3) / max(best, 1e-6))
    return _RATE[0], "a 512×256 SVD timed now (no run measured on this machine yet)"


def _uniform_matrix(m: int, n: int) -> np.ndarray:
    """An m×n matrix of pseudo-random entries in [-1/2, 1/2) (SplitMix64 of the indices): full rank, as
    fast to decompose as a Gaussian one, and made without importing ``numpy.random`` (10 ms, and
    :mod:`hashlib` with it) for a machine's first calibration."""
    z = np.arange(m * n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return ((z >> np.uint64(11)).astype(np.float64) / 2.0**53 - 0.5).reshape(m, n)


def _machine_file() -> Path:
    if os.environ.get("BOUNDS_LIB_MACHINE_RECORD"):  # another file (the tests use their own)
        return Path(os.environ["BOUNDS_LIB_MACHINE_RECORD"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bounds-lib" / "machine.json"


def _machine_key() -> str:
    return f"{_hostname()}/{_cores()} cores"


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
        return _median(starts), f"measured on this machine (median of the last {len(starts)} pools)"
    return WORKER_START_S, "bounds_lib.analysis.pool.WORKER_START_S (not yet measured on this machine)"


#: Where the processes runnable at this moment are counted (Linux; elsewhere the load average stands in).
_LOADAVG = "/proc/loadavg"
#: Reads of ``_LOADAVG`` whose median ``_busy_cores`` takes, and the seconds between two.
_RUNNABLE_READS, _RUNNABLE_GAP_S = 5, 0.005
#: How many more busy processes than the first read of the runnable count shows ``_busy_cores`` allows
#: for before it stops at that read (:func:`_out_of_reach`): two more would have to become runnable within
#: the next reads' 20 ms, and stay so, to change the decision.
_RUNNABLE_SLACK = 2


def _median(values) -> float:
    """The median of ``values`` as ``float(np.median(values))`` gives it, bit for bit (the mean of the two
    middle values for an even count; NaN where one is NaN), without the 17 ms that ``np.median`` spends
    importing ``numpy.ma`` on its first call — a fiftieth of what analysing all-MiniLM-L6-v2 takes."""
    s = sorted(float(v) for v in values)
    if not s:
        raise ValueError("the median of no values")
    if any(math.isnan(v) for v in s):
        return math.nan
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def _busy_cores(settled=None) -> tuple:
    """``(busy, reads)``: cores other processes keep busy now — the processes runnable at this moment (the
    fourth field of ``/proc/loadavg``, the median of :data:`_RUNNABLE_READS` reads :data:`_RUNNABLE_GAP_S` s
    apart), less this one, which is running while it reads — and how many reads it took. Not the one-minute
    load average: it lags by a minute (after a burst it reports busy cores on an idle machine) and still
    counts this user's just-finished runs. Where ``/proc`` is missing (not Linux) the load average stands
    in (``reads`` 0); where neither exists, 0.

    ``settled(busy)``: whether the first read's count already decides (:func:`plan_pool` asks whether no
    pool could be chosen up to :data:`_RUNNABLE_SLACK` more busy); then that read is the answer, without
    the other reads' 20 ms of sleeping."""
    try:
        counts = []
        for i in range(_RUNNABLE_READS):
            if i:
                time.sleep(_RUNNABLE_GAP_S)
            with open(_LOADAVG) as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
            if i == 0 and settled is not None and settled(max(0.0, counts[0] - 1.0)):
                break
        return max(0.0, _median(counts) - 1.0), len(counts)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.getloadavg()[0]), 0
    except (OSError, AttributeError):
        return 0.0, 0


def _core_share(runnable: float, cores: int) -> float:
    """The fraction of a core each of ``runnable`` processes gets from a fair scheduler on ``cores`` cores."""
    return min(1.0, cores / runnable) if runnable > 0 else 1.0


#: The largest fraction of the in-process estimate at which a pool is chosen. The two estimates are
#: often within 15 % of each other (all-MiniLM-L6-v2 on 2 cores), where a slightly wrong count of busy
#: cores would flip a bare "sooner", and a pool that loses costs up to 1.6×.
POOL_MARGIN = 0.8


def _rule(work: float, start: float, workers: int, busy: float, cores: int) -> tuple:
    """``(use, worth, serial, pooled)``: :func:`plan_pool`'s rule for ``work`` seconds of SVDs on an idle
    core, beside ``busy`` other runnable processes."""
    worth = workers * _core_share(workers + busy, cores)  # the pool's cores' worth beside the busy processes
    serial = work / _core_share(1 + busy, cores)
    pooled = start + work / worth
    return workers > 1 and pooled <= POOL_MARGIN * serial, worth, serial, pooled


def _out_of_reach(work: float, start: float, workers: int, cores: int, upto: float) -> bool:
    """Whether :func:`_rule` chooses no pool beside any busy count from 0 to ``upto``: whether it chooses
    none beside 0 or ``upto``.

    How much sooner the pool is, ``POOL_MARGIN·T₁ − pooled``, is constant while the pool's workers fit the
    free cores (busy ≤ ``c − w``), falls while this process alone still has a core (up to ``c − 1``: ``T₁``
    constant, the pool's share shrinking), and grows after (both slow down, the pool ``1/w`` as fast, and
    ``POOL_MARGIN > 1/w`` for ``w ≥ 2``). So it is largest at an end of any range of counts."""
    return not (_rule(work, start, workers, 0.0, cores)[0] or _rule(work, start, workers, float(upto), cores)[0])


def plan_pool(flops: float, workers: int, *, rate: tuple | None = None, start: tuple | None = None,
              busy: float | None = None) -> tuple:
    """``(use_pool, cost)``: whether ``workers`` spawned processes finish ``flops`` of decompositions sooner
    than this process alone.

    The kernel shares the ``c`` cores fairly among the runnable processes: ``busy`` others (runnable now,
    ``_busy_cores``) and ours. In process the work takes ``T₁ = flops / rate / min(1, c / (1 + busy))``; a
    pool of ``w`` workers gets ``e = w·min(1, c / (w + busy))`` cores' worth (``effective_workers``) and
    takes about ``s + flops / rate / e`` (``s``: a worker's start-up, :func:`worker_start_seconds`; the
    workers start at once). So a machine whose cores other processes keep busy gives a pool less than
    its size, but not nothing: two workers beside one busy process on two cores get 4/3 of a core, one
    process alone one core. The pool is chosen when it is estimated sooner. ``cost`` states every
    number. The pool is chosen only where it is estimated clearly sooner: ``pooled ≤ POOL_MARGIN·T₁``
    (:data:`POOL_MARGIN`). ``busy`` defaults to the processes runnable now (``_busy_cores``);
    ``rate`` and ``start`` (each ``(value, where it comes from)``) default to :func:`svd_rate` and
    :func:`worker_start_seconds`."""
    rate, rate_from = svd_rate() if rate is None else rate
    s, where = worker_start_seconds() if start is None else start
    cores = _cores()
    work = flops / rate  # seconds of SVDs on an idle core
    busy_from = "given"
    if busy is None:
        busy, reads = _busy_cores(lambda first: _out_of_reach(work, s, workers, cores, first + _RUNNABLE_SLACK))
        busy_from = (f"processes runnable now, this one not counted (_busy_cores): {reads} read(s)"
                     + (f"; no pool up to {_RUNNABLE_SLACK} more busy" if reads == 1 else ""))
    busy = max(0.0, busy)
    use, worth, serial, pooled = _rule(work, s, workers, busy, cores)
    return use, {"svd_flops": flops, "svd_rate_GFLOPs": round(rate / 1e9, 2), "svd_rate_from": rate_from,
                 "serial_estimate_s": round(serial, 3), "busy_cores": round(busy, 2),
                 "effective_workers": round(worth, 2), "worker_start_s": round(s, 3), "worker_start_from": where,
                 "workers": workers, "pool_estimate_s": round(pooled, 3), "margin": POOL_MARGIN,
                 "busy_from": busy_from,
                 "decision": (f"a pool of {workers}" if use else "in process") + (
                     f": {pooled:.2f} s estimated with {workers} workers ({worth:.2f} cores' worth beside "
                     f"{busy:.2f} busy) against {serial:.2f} s in process (a pool needs ≤ {POOL_MARGIN:g}×)")}


# --------------------------------------------------------------------------------------------
# The allocator of the processes that run the units
# --------------------------------------------------------------------------------------------

#: glibc ``mallopt`` settings of :func:`tune_allocator` — ``M_MMAP_THRESHOLD`` (-3) 32 MiB and
#: ``M_TRIM_THRESHOLD`` (-1) 64 MiB.
MALLOC_SETTINGS = ((-3, 32 * MB), (-1, 64 * MB))


def tune_allocator() -> bool:
    """Keep the memory of freed arrays for the next unit's arrays (glibc only); whether it was set.

    A unit allocates and frees arrays of a few MB (the widened weights, QR and SVD work space, the
    norms' temporaries). glibc's default returns such memory to the kernel (``munmap``, or trimming the
    heap's top) and the next unit's arrays fault it in again, page by page: on all-MiniLM-L6-v2 that
    was 41 000 page faults, about a tenth of the whole run, against 8 600 with
    :data:`MALLOC_SETTINGS` (arrays below 32 MiB come from the heap, and at most 64 MiB of freed
    heap is kept; larger arrays are mapped and unmapped as before, and the peak memory is unchanged).
    Set by the ``bounds-lib`` command and in each worker process, never in a caller's process
    (a notebook's kernel keeps its allocator). Left alone where the user tunes malloc
    (``MALLOC_*`` variables, ``GLIBC_TUNABLES``) and on other C libraries.
    """
    if not sys.platform.startswith("linux") or "GLIBC_TUNABLES" in os.environ \
            or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        os.confstr("CS_GNU_LIBC_VERSION")  # glibc (musl has no such name: ValueError)
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):
        return False
    return all([mallopt(param, value) == 1 for param, value in MALLOC_SETTINGS])


# --------------------------------------------------------------------------------------------
# A process pool that stops when told
# --------------------------------------------------------------------------------------------


def _worker_init(parent_pid: int, initializer=None):
    """Run in each spawned worker first: it dies with its parent. On Linux the kernel sends it SIGKILL when
    the parent dies (``prctl(PR_SET_PDEATHSIG)``); everywhere a daemon thread checks every
    :data:`_WATCHDOG_S` s that the parent is still its parent and ends the worker otherwise (a worker
    blocked in BLAS is still ended: ``os._exit`` does not wait for it). The worker's allocator is tuned
    (:func:`tune_allocator`), and the objects of its start-up (the imported modules) are frozen
    (``gc.freeze``): the pool's shutdown waits for every worker's exit, which then frees them without a
    last traversal by the cyclic garbage collector (20-30 ms each)."""
    import gc
    import signal as _signal

    tune_allocator()
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
    gc.freeze()


def _stop_pool(pool, grace: float = 3.0):
    """Cancel every task not started, end the workers now (SIGTERM, SIGKILL after ``grace`` s) and return."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    calls = getattr(pool, "_call_queue", None)
    if calls is not None:  # its feeder thread, blocked on a pipe no worker reads, must not hold the exit
        calls.cancel_join_thread()
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
def process_pool(workers: int, initializer=None, died: str = _WORKER_DIED):
    """A ``ProcessPoolExecutor`` of ``workers`` spawned processes (no fork of a process that may hold threads)
    that stops when told: on any exception in the ``with`` block — a unit's error, a signal's exception,
    ``KeyboardInterrupt`` — the tasks not started are cancelled and the workers ended at once (the
    executor's own exit would wait for every pending task); its workers die with this process
    (a parent-death signal and a watchdog thread). ``initializer`` (a module-level function) runs in
    each worker after that. A worker that died (the pool is broken: ended by a signal, most often the
    kernel's out-of-memory killer) is :class:`~bounds_lib.analysis.cluster.ClusterError` with the
    message ``died``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), initializer))
    try:
        yield pool
    except BrokenProcessPool:
        _stop_pool(pool)
        raise ClusterError(died) from None
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)
