"""Spectra of every weight matrix of a checkpoint — the first step of the paper's Section 6 (Chapter 6).

:func:`compute_spectra` reads a model (:mod:`bounds_lib.checkpoints`) one part of a layer at a time and
returns a :class:`ModelSpectra`: for every head's ``QK_h`` and ``Ṽ_h`` and every layer's ``M_in``
and ``M_out`` all singular values plus the (2,1) and (1,1) norms. Scoring them is a separate step
(:func:`bounds_lib.analysis.scoring.score`), so that re-scoring never repeats an SVD.

The work is in three layers: the kernel (:mod:`bounds_lib.analysis.kernel`: one part's spectra, in the
``"clean"`` or ``"paper"`` mode, :data:`~bounds_lib.analysis.kernel.MODES`), the scheduler
(:mod:`bounds_lib.analysis.parallel`: the units in process, in threads, in worker processes or on a
Dask cluster, with a resume folder) and this module, which validates the model, runs the scheduler
and assembles the result. An explicit :class:`~bounds_lib.analysis.cache.SpectraCache` (keyed by the
bytes of the weights, the mode and the dtype) makes a second pass over the same weights free; it never
changes a result.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..checkpoints import ArchitectureSpec, detect_architecture, open_checkpoint
from ..core.validation import check_scalar
from .cache import SpectraCache
from .cluster import SCHEDULER_TIMEOUT_S
from .devices import resolve_device
from .kernel import MODES
from .parallel import run_units
from .threads import blas_threads
from .units import unit_steps, work_units

__all__ = [
    "ModelSpectra",
    "check_spectra",
    "compute_spectra",
]


def select_matrices(matrices, matrix_type=None, layer=None) -> list:
    """The entries of ``matrices`` of one ``matrix_type`` and/or one ``layer``, in their order."""
    return [m for m in matrices
            if (matrix_type is None or m.matrix_type == matrix_type) and (layer is None or m.layer == layer)]


class _ArchitectureSizes:
    """``L`` (layers) and ``N`` (hidden size) of the ``arch`` field."""

    @property
    def L(self) -> int:
        return self.arch.n_layers

    @property
    def N(self) -> int:
        return self.arch.hidden


@dataclass(frozen=True)
class ModelSpectra(_ArchitectureSizes):
    """Spectra of every matrix of a model (:func:`compute_spectra`), plus what produced them."""

    arch: ArchitectureSpec
    mode: str
    dtype: str
    matrices: tuple
    source: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def select(self, matrix_type=None, layer=None) -> list:
        """Matrices of one ``matrix_type`` and/or one ``layer`` (in stored order)."""
        return select_matrices(self.matrices, matrix_type, layer)

    def prefix(self, k: int) -> "ModelSpectra":
        """The first ``k`` layers as a depth-``k`` model (a *prefix of one trained model*, not a model
        trained at depth ``k``): used for depth curves when only one checkpoint is at hand.

        Raises :class:`TypeError` for a non-integer ``k`` and :class:`ValueError` outside ``1..L``.

        >>> from bounds_lib.checkpoints import random_bert_state_dict
        >>> sd, cfg = random_bert_state_dict(n_layers=3, hidden=8, n_heads=2, d_ff=16)
        >>> sp = compute_spectra(sd, config=cfg).prefix(2)
        >>> sp.L, len(sp.matrices), sp.meta["prefix_of"]
        (2, 12, 3)
        """
        k = check_scalar(k, "prefix length k", int, min_val=1, max_val=self.L)
        arch = replace(self.arch, n_layers=k)
        mats = tuple(m for m in self.matrices if m.layer < k)
        return replace(self, arch=arch, matrices=mats, meta={**self.meta, "prefix_of": self.L})


def check_spectra(spectra, name: str = "spectra") -> ModelSpectra:
    """``spectra`` itself; :class:`TypeError` unless it is a :class:`ModelSpectra` (from :func:`compute_spectra`)."""
    if not isinstance(spectra, ModelSpectra):
        raise TypeError(f"{name} must be a bounds_lib.analysis.spectra.ModelSpectra (from compute_spectra), "
                        f"got {type(spectra).__name__}")
    return spectra


def compute_spectra(model, *, mode: str = "clean", dtype="float64", n_layers: int | None = None,
                    cache: SpectraCache | None = None, entrywise: bool = True, progress=None,
                    allow_download: bool | None = None, config=None, jobs: int = 1,
                    download_timeout: float | None = None, layers: int | None = None,
                    prefix: str | None = None, scheduler=None, resume=None, device=None,
                    scheduler_timeout: float | None = None, unit_timeout: float | None = None,
                    threads: int = 1) -> ModelSpectra:
    """Spectra of every ``QK_h``, ``Ṽ_h``, ``M_in``, ``M_out`` of ``model`` (Chapter 6; see the module docstring).

    The whole model is validated (layout, shapes) before any SVD; then each part of a layer
    (:func:`~bounds_lib.checkpoints.layers.layer_parts`) is read, decomposed and released in turn, here, in
    worker processes or on a Dask cluster (:mod:`bounds_lib.analysis.parallel`). Weights of extreme magnitude
    are scaled by powers of two before any product (exact).

    Parameters
    ----------
    model : str, path, mapping or TensorSource
        Anything :func:`~bounds_lib.checkpoints.hub.open_checkpoint` accepts: a model folder, a Hub id, a
        ``{name: array}`` mapping (with ``config``), or an opened source.
    mode : {"clean", "paper"}
        QR-core spectra with exact zeros, or the released explicit N×N products
        (see :data:`~bounds_lib.analysis.kernel.MODES`).
    dtype : {"float64", "float32"}
        Precision of the products and SVDs.
    n_layers : int, optional
        Keep only the first ``n_layers`` layers (a prefix of the model; default: all).
    cache : bounds_lib.analysis.cache.SpectraCache, optional
        Reuse spectra of identical weights (never changes a result).
    entrywise : bool
        Also compute the (1,1) norms of the head products (explicit N×N products); ``NaN`` otherwise
        (default ``True``; the command's default is ``--no-entrywise``, about 15 % sooner).
    progress : callable, optional
        ``progress(done, total)`` after each matrix group (``QK``, ``V``, ``M_in``, ``M_out``) of every layer.
    allow_download, config, download_timeout
        Passed to :func:`~bounds_lib.checkpoints.hub.open_checkpoint` (downloads are off by default; the
        timeout is in seconds).
    threads : int
        BLAS threads of the decompositions here and in every worker (default 1, as the command's
        ``--threads``; ``0`` leaves the BLAS default): :func:`bounds_lib.analysis.threads.blas_threads`.
    jobs : int
        Workers (``0``: chosen — one per free CPU core where :func:`bounds_lib.analysis.pool.plan_pool`
        estimates that starting them pays, else this process; default 1: in this process — the
        command's default is 0, but a notebook's or a script's own process is the API's usual caller, and
        worker processes started from it would each import the library again). For a checkpoint on disk they
        are processes that each reopen it and read only their unit's tensors; for weights in memory,
        or with ``cache``, threads. Their number is also limited by memory
        (:func:`bounds_lib.analysis.pool.choose_workers`; ``meta["parallel"]`` says how it was chosen).
        The result is identical for every value.
    scheduler : str or distributed.Client, optional
        Dispatch the units through Dask distributed (``"tcp://host:port"``); the weight files must be
        at the same path on every worker. ``jobs`` is then unused.
    resume : str or path, optional
        A folder where every finished unit is stored at once; units found there (same checkpoint,
        layer, part, mode, dtype, ``entrywise``, device) are loaded instead of computed.
    device : str, optional
        Where the dense SVDs run (``bounds_lib.analysis.devices.resolve_device``: ``"cpu"``, ``"cuda"``,
        ``"auto"``; default: NumPy on the CPU), in every unit, here and in every worker.
    scheduler_timeout : float, optional
        Seconds to wait for the scheduler, for its first worker and at most without a worker (default
        :data:`bounds_lib.analysis.cluster.SCHEDULER_TIMEOUT_S`).
    unit_timeout : float, optional
        With ``scheduler``: seconds without a finished unit before giving up (default: no limit while
        the cluster has workers).
    layers : int, optional
        Old name of ``n_layers`` (kept for existing callers).
    prefix : str, optional
        The tensor-name prefix of the layer stack to analyse, when the weights hold several
        (:func:`~bounds_lib.checkpoints.layouts.detect_architecture` refuses to guess).

    Returns
    -------
    ModelSpectra
        One :class:`~bounds_lib.analysis.kernel.MatrixSpectrum` per matrix, in layer order: H ``QK``,
        H ``V``, ``M_in``, ``M_out`` (a mixture-of-experts layer: every expert's ``M_in`` and ``M_out``,
        expert by expert).

    Raises
    ------
    TypeError
        ``n_layers`` or ``jobs`` is not an integer.
    ValueError
        An unknown ``mode`` or ``dtype``, ``n_layers`` outside ``1..L``, ``jobs < 0``, or singular
        values beyond the float64 range (instead of returning ``inf`` or ``NaN``).
    bounds_lib.checkpoints.formats.CheckpointError
        The model cannot be read (see :func:`~bounds_lib.checkpoints.hub.open_checkpoint`).
    bounds_lib.analysis.cluster.ClusterError
        ``scheduler`` is given but Dask distributed is not installed, the scheduler does not answer
        within ``scheduler_timeout``, or a worker cannot open the checkpoint's files.

    Examples
    --------
    A two-layer model of hidden size 4 with two heads, from arrays in memory:

    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> state_dict, config = random_bert_state_dict(n_layers=2, hidden=4, n_heads=2, d_ff=8)
    >>> sp = compute_spectra(state_dict, config=config)
    >>> (sp.L, sp.N, len(sp.matrices))
    (2, 4, 12)
    >>> sp.select("QK", layer=0)[0].rank   # a head product has rank <= d_h = 2
    2
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    if layers is not None:
        if n_layers is not None:
            raise TypeError("give n_layers only (layers is its old name)")
        n_layers, n_layers_name = layers, "layers"
    else:
        n_layers_name = "n_layers"
    jobs = check_scalar(jobs, "jobs (workers; 0: one per CPU core)", int, min_val=0)
    threads = check_scalar(threads, "threads (BLAS threads; 0: the BLAS default)", int, min_val=0)
    if device is not None and scheduler is None:  # fail before reading anything (cuda missing, a typo)
        resolve_device(device)
    t0 = time.perf_counter()
    source = open_checkpoint(model, config=config, allow_download=allow_download, download_timeout=download_timeout)
    arch = detect_architecture(source, allow_extra_layers=n_layers is not None, prefix=prefix)
    if n_layers is not None:
        n_layers = check_scalar(n_layers, f"{n_layers_name} (a prefix length; the model has {arch.n_layers} layers)",
                                int, min_val=1, max_val=arch.n_layers)
        arch = replace(arch, n_layers=n_layers)
    total = sum(len(unit_steps(part)) for _, part in work_units(arch))
    done = [0]
    lock = threading.Lock()

    def step(_):
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], total)

    t_open = time.perf_counter() - t0
    with blas_threads(threads):
        mats, parallel = run_units(source, arch, mode=mode, dtype=dtype, entrywise=entrywise, jobs=jobs,
                                   cache=cache, scheduler=scheduler, resume=resume, device=device, on_step=step,
                                   scheduler_timeout=SCHEDULER_TIMEOUT_S if scheduler_timeout is None
                                   else scheduler_timeout, unit_timeout=unit_timeout)
    meta = {"seconds_open": t_open, "seconds_total": time.perf_counter() - t0, "source_kind": source.storage,
            "parallel": parallel}
    return ModelSpectra(arch, mode, dtype.name, tuple(mats), source.description, meta)
