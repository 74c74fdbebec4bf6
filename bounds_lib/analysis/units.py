"""The units of work of a checkpoint's spectra, what each costs, and the folder that keeps finished ones
(Chapter 6, at scale).

The work unit is a *part* of a layer (:func:`~bounds_lib.checkpoints.layers.layer_parts`: the attention
projections, ``M_in``, ``M_out``): a worker reads only the tensors of its unit, widens them, factors
them (:func:`bounds_lib.analysis.kernel.part_spectra`) and releases them, so it never holds more than one
unit. What a worker receives is small — the weight files' paths, the config, the layout, the layer and
the part (:class:`UnitTask`); it opens the checkpoint itself and reads its tensors by offset
(:func:`run_unit`). :func:`unit_memory_estimate` and :func:`unit_flops` say what a unit costs in memory
and in work; a unit that would not fit the per-worker budget (:func:`memory_budget`) is computed lean
(:func:`lean_unit`).

Resuming (``resume=DIR``): each finished unit is written to ``DIR`` at once (atomically) under a key of
what its numbers depend on: the bytes of the tensors it reads, the layer, the part,
the mode, the dtype, the (1,1)-norm switch, the device, the lean choice and the layout — not the file's
times, not the activation, not the number of layers (a prefix run's units serve the whole model). The
tensors are hashed again once the unit is computed: a checkpoint that changed while it was being analysed
is an error and nothing of that unit is stored (``_check_unchanged``). Each entry names its key and
unit and records a digest of its own arrays; on load the digest, the key, the unit, every matrix's type,
head and shape, and each σ's length (``min(m, n)``), order (non-increasing), sign and finiteness are
checked (``_entry_problem``): an entry that fails any of them is recomputed, and listed.
A later call with the same ``DIR`` loads the units found there instead of computing them —
after an interrupted run, or a cluster that lost its workers.
``DIR/journal.jsonl`` gets one line per unit computed (where it ran, its seconds, the worker's
peak memory). When the environment variable
``BOUNDS_LIB_UNIT_LOG`` names a file, every computation of a unit also appends a line to it, from the
process that computed it (a diagnostic that counts computations on a cluster with a shared disk).
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checkpoints import (
    ArchitectureSpec,
    CheckpointError,
    SafetensorsSource,
    TensorSource,
    TorchBinSource,
    layer_parts,
    part_tensor_names,
)
from ..checkpoints.layers import part_expert, part_kind
from .cluster import ClusterError
from .kernel import _CHUNK_BYTES, MB, MatrixSpectrum, _stored_dtype, part_spectra

__all__ = [
    "UnitTask",
    "work_units",
    "unit_steps",
    "unit_memory_estimate",
    "unit_flops",
    "lean_unit",
    "memory_budget",
    "run_unit",
    "WORKER_BASE_BYTES",
]

#: Resident memory of a worker process besides its unit (Python, NumPy, the library, a safetensors
#: header): measured 43 MB for a spawned worker on Linux with OpenBLAS; 150 MB leaves room.
WORKER_BASE_BYTES = 150 * 2**20
#: Bumped whenever the stored form of a unit's results changes (old ``resume`` folders are then not read).
_RESUME_FORMAT = 3  # 2: keyed by content; each entry names its key and unit; 3: and a digest of its arrays


# --------------------------------------------------------------------------------------------
# Units and what they cost
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
    (:func:`bounds_lib.analysis.kernel.part_spectra` with ``lean``) it is held as stored (``m·n`` in
    the stored precision, half as much again while a gated ``M_in`` is filled), plus ``R``, the SVD's
    copy of ``R`` and its workspace
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
    factored by TSQR from its stored precision (:func:`bounds_lib.analysis.kernel.part_spectra`); the
    attention part computes its ``QK`` heads and its ``V`` heads one after the other, each with only its
    two projections read."""
    if budget is None or (part_kind(part) != "attention" and device not in (None, "cpu")):
        return False
    return WORKER_BASE_BYTES + unit_memory_estimate(spec, part, dtype, source=source, layer=layer) > budget


def memory_budget(source: TensorSource) -> int:
    """The per-worker budget: 2 × the largest stored tensor (as stored) + 400 MB."""
    largest = 0
    for name in source.names():
        try:
            itemsize = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "float64": 8, "float32": 4, "float16": 2,
                        "bfloat16": 2}.get(source.dtype(name), 4)
            largest = max(largest, itemsize * math.prod(source.shape(name)))
        except Exception:  # a tensor the analysis does not read (odd dtype): not part of the budget
            continue
    return 2 * largest + 400 * MB


def unit_flops(spec: ArchitectureSpec, part, mode: str = "clean", *, entrywise: bool = False, source=None,
               layer: int = 0) -> float:
    """Floating-point operations of one unit, to compare the work with a worker's start-up
    (:func:`bounds_lib.analysis.pool.plan_pool`).

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
            raise ClusterError(f"worker on {_hostname()}: cannot open {missing[0]}: the checkpoint "
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


def _hostname() -> str:
    """This machine's name as ``socket.gethostname()`` gives it (``os.uname``, where there is one, reads the
    same name without importing :mod:`socket`)."""
    try:
        return os.uname().nodename
    except AttributeError:  # pragma: no cover - Windows
        import socket

        return socket.gethostname()


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


def _compute(source: TensorSource, task: UnitTask, cache=None) -> list:
    """The unit's spectra: :func:`bounds_lib.analysis.kernel.part_spectra` with the task's settings."""
    return part_spectra(source, task.arch, task.layer, task.part, mode=task.mode, dtype=task.dtype,
                        entrywise=task.entrywise, device=task.device, lean=task.lean,
                        chunk_bytes=task.chunk_bytes, cache=cache)


def _check_unchanged(source: TensorSource, task: UnitTask):
    """With a resume key: the unit's tensors hashed again after it was computed must give the key they gave
    when the run started — else the numbers are of other bytes than the key says, and are neither stored
    nor returned (a weight rewritten in place during a run would otherwise poison the store)."""
    if task.key is not None and _unit_key(source, task) != task.key:
        raise CheckpointError(f"layer {task.layer} {_part_label(task.part)}: the checkpoint changed while it was "
                              "being analysed (its tensors' bytes differ from those at the start of the run); "
                              "nothing of this part was stored — run again once the checkpoint is no longer "
                              "being written")


def _worker_store(task: UnitTask):
    """The resume folder as this worker sees it, or ``None`` (none asked, or not reachable from here)."""
    if task.resume is None or not os.path.isdir(os.path.join(task.resume, "units")):
        return None
    try:
        return _ResumeFolder(task.resume)
    except ValueError:
        return None


def run_unit(task: UnitTask, source: TensorSource | None = None, cache=None) -> dict:
    """One unit, in whatever process runs it: ``{"matrices", "computed", "stored", "seconds", "cpu_seconds",
    "host", "pid", "maxrss"}`` (``cpu_seconds``: of the thread that ran it).

    ``source`` is the open checkpoint when the caller shares one (in process, threads); a worker
    process opens ``task.opener`` itself (once per process) and runs BLAS on ``task.blas_threads``
    threads. With a resume folder the worker can reach, a unit stored there is loaded instead of
    computed, and a computed one is stored before it is returned (so a task that Dask reruns after its
    worker died finds it).
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    first = None
    if source is None and not _STARTED:  # this worker process's first unit: when it began (for plan_pool)
        _STARTED.append(True)
        first = time.time()
    store = _worker_store(task)
    if store is not None:
        mats = store.load(task.key, task.layer, task.part, task.arch)
        if mats is not None:
            return {"matrices": mats, "computed": False, "stored": True, "first_task_started": first}
    src = source if source is not None else task.opener.open()
    if task.blas_threads and source is None:  # a worker process (threads share the caller's limit)
        from .threads import blas_threads

        with blas_threads(task.blas_threads):
            mats = _compute(src, task, cache)
    else:
        mats = _compute(src, task, cache)
    out = {"matrices": mats, "computed": True, "stored": False, "seconds": time.perf_counter() - t0,
           "cpu_seconds": time.thread_time() - c0, "host": _hostname(), "pid": os.getpid(),
           "maxrss": _maxrss_bytes(), "first_task_started": first}
    _check_unchanged(src, task)  # after the timing: the unit's seconds are its computation's
    log = os.environ.get("BOUNDS_LIB_UNIT_LOG")
    if log:  # before the unit is stored: a process killed in between has then computed it, and says so
        line = json.dumps({"layer": task.layer, "part": _part_label(task.part), "host": out["host"],
                           "pid": out["pid"], "seconds": round(out["seconds"], 4), "maxrss": out["maxrss"]})
        with open(log, "a") as fh:
            fh.write(line + "\n")
    if store is not None:
        try:
            store.store(task.key, task, out)
            out["stored"] = True
        except OSError:  # the parent stores it then
            pass
    return out


# --------------------------------------------------------------------------------------------
# Resume folder
# --------------------------------------------------------------------------------------------


def _blake2b(**kw):
    """``hashlib.blake2b`` — the very constructor, from CPython's ``_blake2`` module: importing :mod:`hashlib`
    loads OpenSSL first (3 ms of every run, for a digest of one MiB)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - a Python built without its own BLAKE2
        from hashlib import blake2b
    return blake2b(**kw)


def _checkpoint_identity(source: TensorSource) -> str:
    """A digest that changes when the weights may have: each file's name, size, mtime and header bytes."""
    h = _blake2b(digest_size=20)
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
    import hashlib

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
    import hashlib

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


def _expected_matrices(arch: ArchitectureSpec, part) -> list:
    """``[(matrix_type, head, expert, shape)]`` of the matrices a unit gives, in the kernel's order
    (:func:`bounds_lib.analysis.kernel.layer_spectra`): every head's ``QK`` then every head's ``V`` (N×N),
    or the one feed-forward matrix (``M_in`` N×n, ``M_out`` n×N)."""
    kind, N = part_kind(part), arch.hidden
    if kind == "attention":
        return [(t, h, None, (N, N)) for t in ("QK", "V") for h in range(arch.n_heads)]
    m, n, _ = _ffn_size(arch, part, "float64")
    return [(kind, -1, part_expert(part), (m, n) if kind == "M_in" else (n, m))]


def _entry_digest(key: str, meta_json: str, norms: np.ndarray, sigmas: list) -> str:
    """A digest of what an entry serves — its key, its matrices' description, norms and σ arrays, in order."""
    h = _blake2b(digest_size=20)
    h.update(repr((_RESUME_FORMAT, key, meta_json)).encode())
    for A in (norms, *sigmas):
        A = np.ascontiguousarray(A)
        h.update(repr((A.shape, A.dtype.str)).encode())
        h.update(A.view(np.uint8).reshape(-1))
    return h.hexdigest()


def _entry_problem(entry: dict, meta_text: str, norms: np.ndarray, sigmas: list, expected) -> str | None:
    """What is wrong with an entry whose key and unit are right, or ``None``: its digest, its matrices
    (type, head, expert, shape: ``expected``, :func:`_expected_matrices`, when given), and each σ
    (``min(m, n)`` values, non-increasing, non-negative, finite) and its norms."""
    if entry.get("digest") != _entry_digest(entry["key"], meta_text, norms, sigmas):
        return "does not match its digest (its arrays were changed after it was written)"
    meta = json.loads(meta_text)
    got = [(m["matrix_type"], m["head"], m.get("expert"), tuple(m["shape"])) for m in meta]
    if expected is not None and got != expected:
        return f"holds the matrices {got}, not the part's"
    if norms.shape != (len(meta), 2):
        return f"holds {norms.shape[0]} norm pairs for {len(meta)} matrices"
    for m, s, (n21, n11) in zip(meta, sigmas, norms):
        what = f"{m['matrix_type']} head {m['head']}"
        if s.dtype != np.float64 or s.shape != (min(m["shape"]),):
            return f"holds {s.shape} {s.dtype} singular values of {what} ({m['shape'][0]}×{m['shape'][1]})"
        if not (np.all(np.isfinite(s)) and np.all(s >= 0) and np.all(np.diff(s) <= 0)):
            return f"holds singular values of {what} that are not finite, non-negative and non-increasing"
        if not (math.isfinite(n21) and n21 >= 0 and (math.isnan(n11) or 0 <= n11 < math.inf)):
            return f"holds norms of {what} that are not finite and non-negative"
    return None


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

    def load(self, key, layer, part=None, arch=None):
        """The stored matrices of unit ``key``, or ``None``: absent, of an older format, or an entry that
        fails a check (:func:`_entry_problem`; another key or unit: a file copied over another; unreadable)
        — then the unit is recomputed (and rewritten), and the entry listed in ``self.mismatched``."""
        p = self._path(key)
        if not p.is_file():
            return None
        label = "?" if part is None else _part_label(part)
        try:
            with np.load(p, allow_pickle=False) as z:
                entry = json.loads(str(z["entry"])) if "entry" in z.files else {}
                if entry.get("format") != _RESUME_FORMAT:
                    return None  # an older run's entry: recomputed and rewritten
                if (entry.get("key"), entry.get("layer")) != (key, layer) or \
                        (part is not None and entry.get("part") != label):
                    problem = (f"holds layer {entry.get('layer')} {entry.get('part')} (key "
                               f"{str(entry.get('key'))[:12]}…)")
                else:
                    meta_text, norms = str(z["meta"]), z["norms"]
                    meta = json.loads(meta_text)
                    sigmas = [z[f"sigma{i}"] for i in range(len(meta))]
                    expected = None if arch is None or part is None else _expected_matrices(arch, part)
                    problem = _entry_problem(entry, meta_text, norms, sigmas, expected)
        except Exception as exc:  # a damaged file is recomputed (and rewritten), never trusted
            problem = f"is unreadable ({type(exc).__name__})"
        if problem is not None:
            self.mismatched.append(f"layer {layer} {label}: the stored entry {p.name} {problem}; recomputed")
            return None
        return [MatrixSpectrum(layer, m["head"], m["matrix_type"], tuple(m["shape"]), s, float(n[0]), float(n[1]),
                               **({} if m.get("expert") is None else {"expert": m["expert"]}))
                for m, s, n in zip(meta, sigmas, norms)]

    def store(self, key, task: UnitTask, res: dict):
        mats = res["matrices"]
        meta = [{"head": m.head, "matrix_type": m.matrix_type, "shape": list(m.shape),
                 "expert": getattr(m, "expert", None)} for m in mats]
        meta_text = json.dumps(meta)
        sigmas = [np.asarray(m.sigma, dtype=np.float64) for m in mats]
        norms = np.array([[m.norm_21, m.norm_11] for m in mats], dtype=np.float64).reshape(-1, 2)
        entry = {"format": _RESUME_FORMAT, "key": key, "layer": task.layer, "part": _part_label(task.part),
                 "digest": _entry_digest(key, meta_text, norms, sigmas)}
        tmp = self.folder / "units" / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
        np.savez(tmp, entry=np.array(json.dumps(entry)), meta=np.array(meta_text), norms=norms,
                 **{f"sigma{i}": s for i, s in enumerate(sigmas)})
        os.replace(tmp, self._path(key))
        line = {"layer": task.layer, "part": _part_label(task.part), "key": key, "host": res.get("host"),
                "pid": res.get("pid"), "seconds": round(res.get("seconds", 0.0), 4), "maxrss": res.get("maxrss")}
        with self._lock, open(self.folder / "journal.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")
