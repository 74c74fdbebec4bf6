"""Spectra of every weight matrix of a checkpoint — the first step of the paper's Section 6 (Chapter 6).

:func:`compute_spectra` reads a model (:mod:`bounds_lib.checkpoints`) one layer at a time and
returns a :class:`ModelSpectra`: for every head's ``QK_h`` and ``Ṽ_h`` and every layer's ``M_in``
and ``M_out`` all singular values plus the (2,1) and (1,1) norms. Scoring them is a separate step
(:func:`bounds_lib.analysis.scoring.score`), so that re-scoring never repeats an SVD. Two modes:

* ``"clean"`` — a head product ``P = A Bᵀ`` (``A, B`` of shape N×d_h) has the thin QR factors
  ``A = Q_A R_A``, ``B = Q_B R_B``, so ``P = Q_A (R_A R_Bᵀ) Q_Bᵀ`` and its singular values are those
  of the d_h×d_h core ``R_A R_Bᵀ`` (:func:`head_product_spectra`); the other ``N − d_h`` are exact
  zeros, and so are core values below the numerical-rank tolerance of :mod:`bounds_lib.theory.norms`.
  Column norms of ``P`` are the row norms of ``B R_Aᵀ``, so the (2,1) norm needs no N×N product;
  the (1,1) norm does.
* ``"paper"`` — the explicit N×N products and a full SVD, exactly as the authors' released code:
  ``q[hs,:]ᵀ k[hs,:]`` and ``v[hs,:]ᵀ (oᵀ)[hs,:]`` in float64. Its ``S_p`` for small ``p > 0``
  includes the ~1e-15 numerical zeros (each adds ``σ^p``, ~0.16 at ``p = 1/19``).

``M_in`` and ``M_out`` are full-rank dense matrices and have the same spectra in both modes.
An explicit :class:`SpectraCache` (keyed by the bytes of the weights, the mode and the dtype) makes
a second pass over the same weights free; it never changes a result.
"""
from __future__ import annotations

import hashlib
import math
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..checkpoints import (
    ArchitectureSpec,
    LayerWeights,
    detect_architecture,
    open_checkpoint,
    part_expert,
    part_kind,
)
from .devices import resolve_device, svdvals
from ..theory.norms import RANK_RTOL, _pow2_scaled, numerical_rank
from ..core.validation import check_scalar

__all__ = [
    "MODES",
    "MatrixSpectrum",
    "ModelSpectra",
    "check_spectra",
    "SpectraCache",
    "head_product_spectra",
    "layer_spectra",
    "compute_spectra",
]

#: Spectra conventions — ``"clean"`` (QR cores, exact zeros) and ``"paper"`` (explicit N×N, released).
MODES = ("clean", "paper")


@dataclass(frozen=True)
class MatrixSpectrum:
    """All singular values of one matrix (descending, ``min(rows, cols)`` of them) and two norms.

    ``matrix_type`` is one of :data:`bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`; ``head`` is ``-1`` for
    ``M_in`` / ``M_out``; ``expert`` is the feed-forward expert of a mixture-of-experts layer whose
    ``M_in`` / ``M_out`` this is (Mixtral), ``None`` for every other matrix. Derived quantities are
    properties so that they always agree with ``sigma``.
    """

    layer: int
    head: int
    matrix_type: str
    shape: tuple
    sigma: np.ndarray
    norm_21: float
    norm_11: float
    expert: int | None = None

    def __post_init__(self):
        # spectra are shared (SpectraCache, prefixes, rescoring): hand them out read-only
        s = np.asarray(self.sigma, dtype=np.float64).view()  # a view: its flag cannot be turned back on
        s.flags.writeable = False                                 # once the computed array is frozen too
        object.__setattr__(self, "sigma", s)

    @property
    def sigma1(self) -> float:
        """Spectral norm ``σ₁ = C₂``."""
        return float(self.sigma[0])

    @property
    def rank(self) -> int:
        """Numerical rank ``S_0`` (tolerance of the released code)."""
        return numerical_rank(self.sigma)

    @property
    def frobenius(self) -> float:
        """``‖W‖_F = σ₁·√Σ(σ_i/σ₁)²`` — scaled by ``σ₁``, so that no square overflows or underflows."""
        s0 = self.sigma[0]
        return 0.0 if s0 == 0 else float(s0 * np.sqrt(np.sum((self.sigma / s0) ** 2)))

    @property
    def nuclear(self) -> float:
        return float(np.sum(self.sigma))

    @property
    def stable_rank(self) -> float:
        """``‖W‖_F² / ‖W‖₂² = Σ(σ_i/σ₁)²`` (0 for a zero matrix)."""
        s0 = self.sigma[0]
        return 0.0 if s0 == 0 else float(np.sum((self.sigma / s0) ** 2))

    def scaled(self, s: float) -> "MatrixSpectrum":
        """The spectrum of ``s·W`` (``s > 0``): σ and both norms times ``s``."""
        return replace(self, sigma=self.sigma * s, norm_21=self.norm_21 * s, norm_11=self.norm_11 * s)

    def label(self) -> str:
        """``"L3.QK.h5"`` (layer, matrix type, head), ``"L3.M_in"``, or ``"L3.M_in.e2"`` (expert 2)."""
        return (f"L{self.layer}.{self.matrix_type}" + (f".h{self.head}" if self.head >= 0 else "")
                + (f".e{self.expert}" if self.expert is not None else ""))


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


class SpectraCache:
    """Explicit store of spectra keyed by the *content* of the weights, the mode and the dtype.

    Pass the same cache to several :func:`compute_spectra` calls: identical tensors (same bytes) are
    never decomposed twice — e.g. ``M_in``/``M_out`` when switching between clean and paper mode.
    The key is a BLAKE2b digest of the bytes, shape and dtype of every input tensor, so a hit returns
    exactly what the computation would. ``hits`` and ``misses`` count lookups.

    Examples
    --------
    Four matrix groups per layer; in paper mode only the two head-product groups are new:

    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    >>> cache = SpectraCache()
    >>> clean = compute_spectra(sd, config=cfg, cache=cache)
    >>> paper = compute_spectra(sd, config=cfg, mode="paper", cache=cache)
    >>> cache.misses, cache.hits
    (12, 4)
    """

    def __init__(self):
        self._store = {}
        self._lock = threading.Lock()  # compute_spectra(jobs > 1) looks up from worker threads
        self.hits = 0
        self.misses = 0

    @staticmethod
    def digest(*arrays, tag: str = "") -> str:
        h = hashlib.blake2b(digest_size=20)
        h.update(tag.encode())
        for A in arrays:
            A = np.ascontiguousarray(A)
            h.update(repr((A.shape, A.dtype.str)).encode())
            h.update(A.view(np.uint8).reshape(-1))
        return h.hexdigest()

    def get_or_compute(self, key, compute):
        with self._lock:
            if key in self._store:
                self.hits += 1
                return self._store[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._store.setdefault(key, value)
        return value

    def __len__(self):
        return len(self._store)


# --------------------------------------------------------------------------------------------
# Spectra
# --------------------------------------------------------------------------------------------


def _stack_heads(W, n, d):
    """``W`` (N × n·d) → (n, N, d) stack of column blocks."""
    N = W.shape[0]
    return np.ascontiguousarray(W.reshape(N, n, d).transpose(1, 0, 2))


def head_product_spectra(A, B, groups=None, *, entrywise=True):
    """Singular values and norms of ``P_h = A_h B_{g(h)}ᵀ`` through the d×d cores of thin QRs (Chapter 6).

    With ``A_h = Q_A R_A`` and ``B_g = Q_B R_B``, ``P_h = Q_A (R_A R_Bᵀ) Q_Bᵀ`` has the singular values of
    the small core ``R_A R_Bᵀ``; no N×N product is formed for them or for the (2,1) norm.

    Parameters
    ----------
    A : ndarray, shape (H, N, d)
        Query-side (or value-side) column blocks, one per head.
    B : ndarray, shape (G, N, d)
        Key-side (or output-side) column blocks, one per key/value group.
    groups : array_like of int, shape (H,), optional
        Head → index into ``B`` (default: the identity, ``G = H``; grouped-query attention repeats).
    entrywise : bool
        Also compute the (1,1) norms, which need the explicit products (in chunks of ~64 MB).

    Returns
    -------
    sigma : ndarray, shape (H, min(N, d))
        Singular values of each ``P_h``, descending (the other ``N − d`` are zero).
    norm_21 : ndarray, shape (H,)
        ``Σ_j ‖P_h[:, j]‖₂`` (row norms of ``B R_Aᵀ``).
    norm_11 : ndarray, shape (H,)
        ``Σ|P_h|``; ``NaN`` when ``entrywise=False``.

    Examples
    --------
    A rank-one product ``u vᵀ`` has one singular value ``‖u‖‖v‖`` and (2,1) norm ``‖u‖ Σ|v_j|``:

    >>> import numpy as np
    >>> u, v = np.array([[3.0], [4.0], [0.0]]), np.array([[1.0], [-2.0], [2.0]])
    >>> sigma, n21, n11 = head_product_spectra(u[None], v[None])
    >>> float(sigma[0, 0]), float(n21[0]), float(n11[0])
    (15.0, 25.0, 35.0)
    """
    H = A.shape[0]
    groups = np.arange(H) if groups is None else np.asarray(groups)
    R_A = np.linalg.qr(A, mode="r")                      # (H, r, d)
    R_B = np.linalg.qr(B, mode="r")                      # (G, r, d)
    cores = R_A @ np.swapaxes(R_B[groups], 1, 2)         # (H, r, r)
    sigma = np.linalg.svd(cores, compute_uv=False)       # (H, r)
    cols = B[groups] @ np.swapaxes(R_A, 1, 2)            # (H, N, r): row j ↦ column j of P_h
    norm_21 = np.sum(np.linalg.norm(cols, axis=2), axis=1)
    if entrywise:  # explicit products, in chunks of at most ~64 MB
        N = A.shape[1]
        step = max(1, int(2**23 // max(N * N, 1)))
        parts = []
        for i in range(0, H, step):
            P = A[i:i + step] @ np.swapaxes(B[groups[i:i + step]], 1, 2)
            parts.append(np.abs(P, out=P).sum(axis=(1, 2)))
        norm_11 = np.concatenate(parts)
    else:
        norm_11 = np.full(H, np.nan)
    return sigma, norm_21, norm_11


def _clean_sigma(core_sigma, n_full):
    """Pad core singular values with exact zeros to ``n_full`` and zero those below the rank tolerance."""
    s = np.zeros(n_full, dtype=np.float64)
    k = min(core_sigma.size, n_full)
    s[:k] = core_sigma[:k]
    tol = RANK_RTOL * n_full * max(float(s[0]), 1.0)
    s[s <= tol] = 0.0
    return s


def _unscale(sigma, n21, n11, e):
    """Spectrum and norms of ``2^e·W`` from those of ``W``, in float64; check that they are finite."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if e:
        with np.errstate(over="ignore"):  # a result beyond float64 becomes inf, caught by _check_finite
            sigma, n21, n11 = np.ldexp(sigma, e), np.ldexp(float(n21), e), np.ldexp(float(n11), e)
    return sigma, float(n21), float(n11)


def _dense_spectrum(W, device=None):
    W, e = _pow2_scaled(W)
    sigma = svdvals(W, device)
    return _unscale(sigma, np.sum(np.linalg.norm(W, axis=0)), np.sum(np.abs(W)), e)


def _check_finite(res, lw, matrix_type, dtype_name):
    for s, n21, n11 in res:
        if not (np.all(np.isfinite(s)) and math.isfinite(n21) and not math.isinf(n11)):
            raise ValueError(f"layer {lw.layer} {matrix_type}: singular values or norms exceed the float64 range "
                             f"(weights too large to analyse, computed in {dtype_name})")


def layer_spectra(lw: LayerWeights, mode: str = "clean", *, cache: SpectraCache | None = None,
                  entrywise: bool = True, on_step=None, device=None, attention=("QK", "V")) -> list:
    """All :class:`MatrixSpectrum` of the parts of one layer that ``lw`` holds, in the order of its parts.

    For a whole layer (:func:`bounds_lib.checkpoints.layer_parts`): H ``QK``, H ``Ṽ`` (the part
    ``"attention"``), then ``M_in``, ``M_out``. A :class:`~bounds_lib.checkpoints.LayerWeights` read
    with ``parts=`` gives the spectra of those parts only, the same numbers as in the whole layer.
    ``on_step(name)`` is called after each matrix group (``"QK"``, ``"V"``, ``"M_in"``, ``"M_out"``).
    ``attention`` names the attention groups to compute (``("QK",)`` needs only ``Wq``, ``Wk``;
    ``("V",)`` only ``Wv``, ``Wo``: :mod:`bounds_lib.analysis.parallel` computes a large layer's two groups one
    after the other, each with only its own projections in memory).
    ``device`` (:func:`bounds_lib.analysis.devices.resolve_device`: ``"cpu"``, ``"cuda"``, ``"auto"``, …) runs
    the dense SVDs there (``M_in``, ``M_out``, the paper mode's N×N products); the numbers agree with
    the CPU's within :func:`bounds_lib.analysis.devices.spectra_agree`.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    device = resolve_device(device)
    spec = lw.spec
    H, Hk, d, N = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.hidden
    groups = np.array([spec.kv_group(h) for h in range(H)])
    dt = lw.dtype.name
    out = []

    def cached(tag, arrays, compute, by_mode=True):
        def frozen():  # results are shared (cache, every MatrixSpectrum): make the arrays themselves read-only
            res = compute()
            for item in (res if isinstance(res, list) else [res]):
                item[0].flags.writeable = False
            return res

        if cache is None:
            return frozen()
        # the device is part of the key: a cache never changes a result, not even in the last bits
        key = f"{tag}|{mode if by_mode else '*'}|{dt}|{H}|{Hk}|{d}|{entrywise}|{device}"
        return cache.get_or_compute(SpectraCache.digest(*arrays, tag=key), frozen)

    def heads(matrix_type, A_full, B_full, explicit):
        # A_full: (N, H·d) query/value side; B_full: (N, G·d) key/output side (head-major columns)
        def compute():
            As, ea = _pow2_scaled(A_full)
            Bs, eb = _pow2_scaled(B_full)
            g = groups if matrix_type == "QK" else np.arange(H)
            if mode == "paper":
                res = []
                for h in range(H):
                    if ea == eb == 0:
                        P = explicit(h)  # the released products, bit for bit
                    else:
                        P = As[:, h * d:(h + 1) * d] @ Bs[:, g[h] * d:(g[h] + 1) * d].T
                    s, n21, n11 = _dense_spectrum(P, device)
                    res.append(_unscale(s, n21, n11, ea + eb))
                return res
            A = _stack_heads(As, H, d)
            B = _stack_heads(Bs, Bs.shape[1] // d, d)
            sig, n21, n11 = head_product_spectra(A, B, groups if matrix_type == "QK" else None, entrywise=entrywise)
            res = []
            for h in range(H):
                s_h, a, b = _unscale(sig[h], n21[h], n11[h], ea + eb)
                res.append((_clean_sigma(s_h, N), a, b))
            return res

        res = cached(matrix_type, (A_full, B_full), compute)
        _check_finite(res, lw, matrix_type, dt)
        for h, (s, n21, n11) in enumerate(res):
            out.append(MatrixSpectrum(lw.layer, h, matrix_type, (N, N), s, n21, n11))
        if on_step:
            on_step(matrix_type)

    def dense(part):
        matrix_type = part_kind(part)
        W = lw.matrix(part)
        s, n21, n11 = cached(matrix_type, (W,), lambda: _dense_spectrum(W, device), by_mode=False)
        _check_finite([(s, n21, n11)], lw, matrix_type, dt)
        out.append(MatrixSpectrum(lw.layer, -1, matrix_type, tuple(W.shape), s, n21, n11, part_expert(part)))
        if on_step:
            on_step(matrix_type)

    for part in lw.parts:
        if part_kind(part) != "attention":
            dense(part)
            continue
        if "QK" in attention:
            heads("QK", lw.Wq, lw.Wk, lw.QK)
        if "V" in attention:
            # Ṽ_h = W_{V,g(h)} W_{O,h}: A = value columns of the group (repeated per head), B = W_{O,h}ᵀ
            Wv_heads = np.concatenate([lw.W_V(h) for h in range(H)], axis=1) if Hk != H else lw.Wv
            heads("V", Wv_heads, lw.Wo.T, lw.V_tilde)
            del Wv_heads  # (GQA: an N×H·d_h copy) not held during the dense SVDs below
    return out


def compute_spectra(model, *, mode: str = "clean", dtype="float64", n_layers: int | None = None,
                    cache: SpectraCache | None = None, entrywise: bool = True, progress=None,
                    allow_download: bool | None = None, config=None, jobs: int = 1,
                    download_timeout: float | None = None, layers: int | None = None,
                    prefix: str | None = None, scheduler=None, resume=None, device=None,
                    scheduler_timeout: float | None = None, unit_timeout: float | None = None) -> ModelSpectra:
    """Spectra of every ``QK_h``, ``Ṽ_h``, ``M_in``, ``M_out`` of ``model`` (Chapter 6; see the module docstring).

    The whole model is validated (layout, shapes) before any SVD; then each part of a layer
    (:func:`bounds_lib.checkpoints.layer_parts`) is read, decomposed and released in turn, here, in
    worker processes or on a Dask cluster (:mod:`bounds_lib.analysis.parallel`). Weights of extreme magnitude
    are scaled by powers of two before any product (exact).

    Parameters
    ----------
    model : str, path, mapping or TensorSource
        Anything :func:`bounds_lib.checkpoints.open_checkpoint` accepts: a model folder, a Hub id, a
        ``{name: array}`` mapping (with ``config``), or an opened source.
    mode : {"clean", "paper"}
        QR-core spectra with exact zeros, or the released explicit N×N products (see :data:`MODES`).
    dtype : {"float64", "float32"}
        Precision of the products and SVDs.
    n_layers : int, optional
        Keep only the first ``n_layers`` layers (a prefix of the model; default: all).
    cache : SpectraCache, optional
        Reuse spectra of identical weights (never changes a result).
    entrywise : bool
        Also compute the (1,1) norms of the head products (explicit N×N products); ``NaN`` otherwise.
    progress : callable, optional
        ``progress(done, total)`` after each matrix group (``QK``, ``V``, ``M_in``, ``M_out``) of every layer.
    allow_download, config, download_timeout
        Passed to :func:`bounds_lib.checkpoints.open_checkpoint` (downloads are off by default; the
        timeout is in seconds).
    jobs : int
        Workers (``0``: chosen — one per free CPU core where :func:`bounds_lib.analysis.parallel.plan_pool`
        estimates that starting them pays, else this process; default 1: in this process). For a checkpoint on disk they
        are processes that each reopen it and read only their unit's tensors; for weights in memory,
        or with ``cache``, threads. Their number is also limited by memory
        (:func:`bounds_lib.analysis.parallel.choose_workers`; ``meta["parallel"]`` says how it was chosen).
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
        :data:`bounds_lib.analysis.parallel.SCHEDULER_TIMEOUT_S`).
    unit_timeout : float, optional
        With ``scheduler``: seconds without a finished unit before giving up (default: no limit while
        the cluster has workers).
    layers : int, optional
        Old name of ``n_layers`` (kept for existing callers).
    prefix : str, optional
        The tensor-name prefix of the layer stack to analyse, when the weights hold several
        (:func:`bounds_lib.checkpoints.detect_architecture` refuses to guess).

    Returns
    -------
    ModelSpectra
        One :class:`MatrixSpectrum` per matrix, in layer order: H ``QK``, H ``V``, ``M_in``, ``M_out``
        (a mixture-of-experts layer: every expert's ``M_in`` and ``M_out``, expert by expert).

    Raises
    ------
    TypeError
        ``n_layers`` or ``jobs`` is not an integer.
    ValueError
        An unknown ``mode`` or ``dtype``, ``n_layers`` outside ``1..L``, ``jobs < 0``, or singular
        values beyond the float64 range (instead of returning ``inf`` or ``NaN``).
    bounds_lib.checkpoints.CheckpointError
        The model cannot be read (see :func:`bounds_lib.checkpoints.open_checkpoint`).
    bounds_lib.analysis.parallel.ClusterError
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
    if device is not None and scheduler is None:  # fail before reading anything (cuda missing, a typo)
        from .devices import resolve_device as _resolve

        _resolve(device)
    t0 = time.perf_counter()
    source = open_checkpoint(model, config=config, allow_download=allow_download, download_timeout=download_timeout)
    arch = detect_architecture(source, allow_extra_layers=n_layers is not None, prefix=prefix)
    if n_layers is not None:
        n_layers = check_scalar(n_layers, f"{n_layers_name} (a prefix length; the model has {arch.n_layers} layers)",
                                int, min_val=1, max_val=arch.n_layers)
        arch = replace(arch, n_layers=n_layers)
    from .parallel import SCHEDULER_TIMEOUT_S, run_units, unit_steps, work_units

    total = sum(len(unit_steps(part)) for _, part in work_units(arch))
    done = [0]
    lock = threading.Lock()

    def step(_):
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], total)

    t_open = time.perf_counter() - t0
    mats, parallel = run_units(source, arch, mode=mode, dtype=dtype, entrywise=entrywise, jobs=jobs, cache=cache,
                               scheduler=scheduler, resume=resume, device=device, on_step=step,
                               scheduler_timeout=SCHEDULER_TIMEOUT_S if scheduler_timeout is None
                               else scheduler_timeout, unit_timeout=unit_timeout)
    meta = {"seconds_open": t_open, "seconds_total": time.perf_counter() - t0, "source_kind": source.storage,
            "parallel": parallel}
    return ModelSpectra(arch, mode, dtype.name, tuple(mats), source.description, meta)

