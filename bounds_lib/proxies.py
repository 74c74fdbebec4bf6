"""Spectra and bound proxies of real checkpoints — the paper's Section 6 (Chapter 6).

Two steps, kept apart so that re-scoring never repeats an SVD:

1. :func:`compute_spectra` reads a model (:mod:`bounds_lib.checkpoints`) one layer at a time and
   returns a :class:`ModelSpectra`: for every head's ``QK_h`` and ``Ṽ_h`` and every layer's ``M_in``
   and ``M_out`` all singular values plus the (2,1) and (1,1) norms. Two modes:

   * ``"clean"`` — a head product ``P = A Bᵀ`` (``A, B`` of shape N×d_h) has the thin QR factors
     ``A = Q_A R_A``, ``B = Q_B R_B``, so ``P = Q_A (R_A R_Bᵀ) Q_Bᵀ`` and its singular values are those
     of the d_h×d_h core ``R_A R_Bᵀ``; the other ``N − d_h`` are exact zeros, and so are core values
     below the numerical-rank tolerance of :mod:`bounds_lib.norms`. Column norms of ``P`` are the
     row norms of ``B R_Aᵀ``, so the (2,1) norm needs no N×N product; the (1,1) norm does.
   * ``"paper"`` — the explicit N×N products and a full SVD, exactly as the authors' released code
     (the released code): ``q[hs,:]ᵀ k[hs,:]`` and ``v[hs,:]ᵀ (oᵀ)[hs,:]`` in float64. Its ``S_p`` for small
     ``p > 0`` includes the ~1e-15 numerical zeros (each adds ``σ^p``, ~0.16 at ``p = 1/19``).

   ``M_in`` and ``M_out`` are full-rank dense matrices and have the same spectra in both modes.
   An explicit :class:`SpectraCache` (keyed by the bytes of the weights, the mode and the dtype) makes
   a second pass over the same weights free; it never changes a result.

2. :func:`score` turns spectra into the proxies of the released code (Chapter 6), all in log space:
   ``Λ_k``, ``α^{(ℓ)}`` and ``γ`` (:mod:`bounds_lib.propagation`), ``K = γαL``, ``T(W;p)`` on the grid
   ``𝒫_m`` and ``p*`` (:mod:`bounds_lib.peeling`), ``B_ours`` (sum as released, and root-sum-square),
   ``B_Edelman`` exactly as released, and a (1,1)-norm analogue of ``B_Edelman`` (our extension; there is
   no released Trauger–Tewari proxy). The optional logit scale ``s`` (``1/√d_h`` in real models)
   multiplies every ``QK_h``: ``σ``, (2,1) and (1,1) all scale by ``s``, the rank does not.
"""
from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from .checkpoints import ArchitectureSpec, LayerWeights, detect_architecture, iter_layers, open_checkpoint
from .norms import RANK_RTOL, numerical_rank
from .peeling import aggregate_rss, aggregate_sum, logsumexp, posthoc_choice, posthoc_grid
from .propagation import (
    LPHI_GELU_RELEASED,
    SOFTMAX_LINF_L1_RELEASED,
    log_alpha,
    log_gamma_multihead,
    log_layer_lipschitz_multihead,
    log_scale_K,
)

__all__ = [
    "KINDS",
    "MODES",
    "MatrixSpectrum",
    "ModelSpectra",
    "SpectraCache",
    "head_product_spectra",
    "layer_spectra",
    "compute_spectra",
    "ScoringOptions",
    "MatrixScore",
    "BoundReport",
    "score",
    "analyze",
    "log10_or_value",
    "KIND_LABELS",
    "figure_spectral_decay",
    "figure_p_star_histogram",
    "figure_T_ratio",
    "figure_norms",
    "figure_prefix_depth",
    "figure_scaling",
]

#: Matrix types in the order of the paper — per-head ``QK``, per-head ``Ṽ`` ("V"), ``M_in``, ``M_out``.
KINDS = ("QK", "V", "M_in", "M_out")
#: Spectra conventions — ``"clean"`` (QR cores, exact zeros) and ``"paper"`` (explicit N×N, released).
MODES = ("clean", "paper")


@dataclass(frozen=True)
class MatrixSpectrum:
    """All singular values of one matrix (descending, ``min(rows, cols)`` of them) and two norms.

    ``head`` is ``-1`` for ``M_in`` / ``M_out``. Derived quantities are properties so that they always
    agree with ``sigma``.
    """

    layer: int
    head: int
    kind: str
    shape: tuple
    sigma: np.ndarray
    norm_21: float
    norm_11: float

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
        return f"L{self.layer}.{self.kind}" + (f".h{self.head}" if self.head >= 0 else "")


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

    def select(self, kind=None, layer=None) -> list:
        """Matrices of one ``kind`` and/or one ``layer`` (in stored order)."""
        return [m for m in self.matrices if (kind is None or m.kind == kind) and (layer is None or m.layer == layer)]

    def spectral_norms(self) -> dict:
        """``{"QK": (L,H), "V": (L,H), "M_in": (L,), "M_out": (L,)}`` arrays of ``σ₁``."""
        L, H = self.L, self.arch.n_heads
        out = {"QK": np.zeros((L, H)), "V": np.zeros((L, H)), "M_in": np.zeros(L), "M_out": np.zeros(L)}
        for m in self.matrices:
            if m.head >= 0:
                out[m.kind][m.layer, m.head] = m.sigma1
            else:
                out[m.kind][m.layer] = m.sigma1
        return out

    def prefix(self, k: int) -> "ModelSpectra":
        """The first ``k`` layers as a depth-``k`` model (a *prefix of one trained model*, not a model
        trained at depth ``k``): used for depth curves when only one checkpoint is at hand."""
        if not 1 <= k <= self.L:
            raise ValueError(f"prefix length must be in 1..{self.L}, got {k}")
        arch = replace(self.arch, n_layers=k)
        mats = tuple(m for m in self.matrices if m.layer < k)
        return replace(self, arch=arch, matrices=mats, meta={**self.meta, "prefix_of": self.L})


class SpectraCache:
    """Explicit store of spectra keyed by the *content* of the weights, the mode and the dtype.

    Pass the same cache to several :func:`compute_spectra` calls: identical tensors (same bytes) are
    never decomposed twice — e.g. ``M_in``/``M_out`` when switching between clean and paper mode.
    The key is a BLAKE2b digest of the bytes, shape and dtype of every input tensor, so a hit returns
    exactly what the computation would. ``hits`` and ``misses`` count lookups.
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
    """Singular values and norms of ``P_h = A_h B_{g(h)}ᵀ`` through the d×d cores of thin QRs.

    ``A``: (H, N, d) stack, ``B``: (G, N, d) stack, ``groups``: head → index into ``B`` (default
    identity). Returns ``(sigma (H, min(N, d)), norm_21 (H,), norm_11 (H,))`` where ``norm_21`` sums the
    column norms of ``P_h`` (row norms of ``B R_Aᵀ``) and ``norm_11 = Σ|P_h|`` (explicit product;
    ``NaN`` when ``entrywise=False``).
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


#: Matrices whose largest |entry| lies outside [2^-16, 2^16] are scaled by a power of two (exact) before
#: products, QRs, SVDs and norms, and the results scaled back in float64: in float32 a product of two
#: 1e20 entries overflows (LAPACK then prints "DLASCL ... illegal value" and returns NaN), in float64
#: entries near 1e200 do. Moderate weights — every trained model we know — are not touched.
_SAFE_EXPONENT = 16


def _pow2_scaled(W):
    """``(W·2^-e, e)`` with ``max|W·2^-e|`` in [1/2, 1) when ``W`` is outside the safe range, else ``(W, 0)``."""
    m = max(float(W.max()), -float(W.min())) if W.size else 0.0  # two reductions, no |W| temporary
    if m == 0.0 or 2.0 ** -_SAFE_EXPONENT <= m <= 2.0 ** _SAFE_EXPONENT:
        return W, 0
    e = math.frexp(m)[1]
    return np.ldexp(W, -e).astype(W.dtype, copy=False), e


def _unscale(sigma, n21, n11, e):
    """Spectrum and norms of ``2^e·W`` from those of ``W``, in float64; check that they are finite."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if e:
        with np.errstate(over="ignore"):  # a result beyond float64 becomes inf, caught by _check_finite
            sigma, n21, n11 = np.ldexp(sigma, e), np.ldexp(float(n21), e), np.ldexp(float(n11), e)
    return sigma, float(n21), float(n11)


def _dense_spectrum(W):
    W, e = _pow2_scaled(W)
    sigma = np.linalg.svd(W, compute_uv=False)
    return _unscale(sigma, np.sum(np.linalg.norm(W, axis=0)), np.sum(np.abs(W)), e)


def _check_finite(res, lw, kind, dtype_name):
    for s, n21, n11 in res:
        if not (np.all(np.isfinite(s)) and math.isfinite(n21) and not math.isinf(n11)):
            raise ValueError(f"layer {lw.layer} {kind}: singular values or norms exceed the float64 range "
                             f"(weights too large to analyse, computed in {dtype_name})")


def layer_spectra(lw: LayerWeights, mode: str = "clean", *, cache: SpectraCache | None = None,
                  entrywise: bool = True, on_step=None) -> list:
    """All :class:`MatrixSpectrum` of one layer: H ``QK``, H ``Ṽ``, then ``M_in``, ``M_out``.

    ``on_step(name)`` is called after each of the four groups (progress reporting).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    spec = lw.spec
    H, Hk, d, N = spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.hidden
    groups = np.array([spec.kv_group(h) for h in range(H)])
    dt = lw.Wq.dtype.name
    out = []

    def cached(tag, arrays, compute, by_mode=True):
        def frozen():  # results are shared (cache, every MatrixSpectrum): make the arrays themselves read-only
            res = compute()
            for item in (res if isinstance(res, list) else [res]):
                item[0].flags.writeable = False
            return res

        if cache is None:
            return frozen()
        key = f"{tag}|{mode if by_mode else '*'}|{dt}|{H}|{Hk}|{d}|{entrywise}"
        return cache.get_or_compute(SpectraCache.digest(*arrays, tag=key), frozen)

    def heads(kind, A_full, B_full, explicit):
        # A_full: (N, H·d) query/value side; B_full: (N, G·d) key/output side (head-major columns)
        def compute():
            As, ea = _pow2_scaled(A_full)
            Bs, eb = _pow2_scaled(B_full)
            g = groups if kind == "QK" else np.arange(H)
            if mode == "paper":
                res = []
                for h in range(H):
                    if ea == eb == 0:
                        P = explicit(h)  # the released products, bit for bit
                    else:
                        P = As[:, h * d:(h + 1) * d] @ Bs[:, g[h] * d:(g[h] + 1) * d].T
                    s, n21, n11 = _dense_spectrum(P)
                    res.append(_unscale(s, n21, n11, ea + eb))
                return res
            A = _stack_heads(As, H, d)
            B = _stack_heads(Bs, Bs.shape[1] // d, d)
            sig, n21, n11 = head_product_spectra(A, B, groups if kind == "QK" else None, entrywise=entrywise)
            res = []
            for h in range(H):
                s_h, a, b = _unscale(sig[h], n21[h], n11[h], ea + eb)
                res.append((_clean_sigma(s_h, N), a, b))
            return res

        res = cached(kind, (A_full, B_full), compute)
        _check_finite(res, lw, kind, dt)
        for h, (s, n21, n11) in enumerate(res):
            out.append(MatrixSpectrum(lw.layer, h, kind, (N, N), s, n21, n11))
        if on_step:
            on_step(kind)

    heads("QK", lw.Wq, lw.Wk, lw.QK)
    # Ṽ_h = W_{V,g(h)} W_{O,h}: A = value columns of the group (repeated per head), B = W_{O,h}ᵀ
    Wv_heads = np.concatenate([lw.W_V(h) for h in range(H)], axis=1) if Hk != H else lw.Wv
    heads("V", Wv_heads, lw.Wo.T, lw.V_tilde)
    del Wv_heads  # (GQA: an N×H·d_h copy) not held during the dense SVDs below
    for kind, W in (("M_in", lw.M_in), ("M_out", lw.M_out)):
        s, n21, n11 = cached(kind, (W,), lambda W=W: _dense_spectrum(W), by_mode=False)
        _check_finite([(s, n21, n11)], lw, kind, dt)
        out.append(MatrixSpectrum(lw.layer, -1, kind, tuple(W.shape), s, n21, n11))
        if on_step:
            on_step(kind)
    return out


def compute_spectra(model, *, mode: str = "clean", dtype="float64", layers=None, cache: SpectraCache | None = None,
                    entrywise: bool = True, progress=None, allow_download: bool | None = None,
                    config=None, jobs: int = 1, download_timeout: float | None = None) -> ModelSpectra:
    """Spectra of every ``QK_h``, ``Ṽ_h``, ``M_in``, ``M_out`` of ``model`` (see the module docstring).

    ``model``: anything :func:`bounds_lib.checkpoints.open_checkpoint` accepts. ``layers``: keep only
    the first ``layers`` layers (a prefix). ``progress(done, total)`` is called after each matrix group.
    The whole model is validated (layout, shapes) before any SVD; weights are read one layer at a time.
    ``jobs``: layers decomposed in worker threads while the next layer is read; at most ``jobs + 1``
    layers are in memory at once, and the result is identical to ``jobs=1`` (``0``: one job per CPU
    core). The gain is the overlap of reading, products and norms with the SVDs (measured in
    ``benchmarks/``); the SVDs themselves do not run faster in threads here. ``download_timeout``:
    deadline in seconds of a Hub download (see :func:`bounds_lib.checkpoints.resolve_hub_id`).
    Weights of extreme magnitude are scaled by powers of two before any product (exact); a result
    beyond float64 raises :class:`ValueError` instead of returning ``inf`` or ``NaN``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    t0 = time.perf_counter()
    source = open_checkpoint(model, config=config, allow_download=allow_download, download_timeout=download_timeout)
    arch = detect_architecture(source, allow_extra_layers=layers is not None)
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= arch.n_layers:
            raise ValueError(f"layers must be an integer in 1..{arch.n_layers}, got {layers!r}")
        arch = replace(arch, n_layers=layers)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs must be an integer >= 0 (0: one per CPU core), got {jobs!r}")
    jobs = jobs or (os.cpu_count() or 1)
    total = 4 * arch.n_layers
    done = [0]
    lock = threading.Lock()

    def step(_):
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], total)

    t_open = time.perf_counter() - t0
    mats = []
    layer_iter = iter_layers(source, arch, dtype=dtype)
    if jobs == 1:
        for lw in layer_iter:
            mats.extend(layer_spectra(lw, mode, cache=cache, entrywise=entrywise, on_step=step))
            del lw  # the next layer is read into this layer's memory, not next to it
    else:  # read layer k+1.. while workers decompose earlier layers; collect in layer order
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            pending = deque()
            for lw in layer_iter:
                pending.append(pool.submit(layer_spectra, lw, mode, cache=cache, entrywise=entrywise,
                                           on_step=step))
                while len(pending) >= jobs:  # ≤ jobs layers in flight, plus the one being read next
                    mats.extend(pending.popleft().result())
            while pending:
                mats.extend(pending.popleft().result())
    meta = {"seconds_open": t_open, "seconds_total": time.perf_counter() - t0, "source_kind": source.kind}
    return ModelSpectra(arch, mode, dtype.name, tuple(mats), source.description, meta)


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoringOptions:
    """Constants of the proxies. Defaults reproduce the released code.

    ``logit_scale``: a positive number, or ``"inv_sqrt_dh"`` for ``1/√d_h`` (real attention scales its
    logits; the released proxies do not). ``gamma_L_phi``: put ``L_φ`` into γ as Chapter 3 proves
    (the released γ omits it; Chapter 3).
    """

    logit_scale: float | str = 1.0
    L_phi: float = LPHI_GELU_RELEASED
    softmax_const: float = SOFTMAX_LINF_L1_RELEASED
    gamma_L_phi: bool = False

    def scale_for(self, arch: ArchitectureSpec) -> float:
        s = self.logit_scale
        if isinstance(s, str):
            if s != "inv_sqrt_dh":
                raise ValueError(f"logit_scale must be a positive number or 'inv_sqrt_dh', got {s!r}")
            return 1.0 / math.sqrt(arch.head_dim)
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and s > 0):
            raise ValueError(f"logit_scale must be a positive finite number or 'inv_sqrt_dh', got {s!r}")
        return float(s)


@dataclass(frozen=True)
class MatrixScore:
    """One matrix's spectrum summary, its scales and its post hoc term (all ``log_`` fields natural logs)."""

    layer: int
    head: int
    kind: str
    shape: tuple
    sigma1: float
    rank: int
    frobenius: float
    nuclear: float
    stable_rank: float
    norm_21: float
    norm_11: float
    log_gamma: float
    log_alpha: float
    log_K: float
    p_star: float
    log_T_star: float
    log_T: np.ndarray = field(repr=False)

    @property
    def log_T0(self) -> float:
        """``log T(W; 0) = ½ log(rank · N)``."""
        return float(self.log_T[0])

    def to_row(self) -> dict:
        return {"layer": self.layer, "head": self.head if self.head >= 0 else "", "kind": self.kind,
                "rows": self.shape[0], "cols": self.shape[1], "sigma1": self.sigma1, "rank": self.rank,
                "frobenius": self.frobenius, "nuclear": self.nuclear, "stable_rank": self.stable_rank,
                "norm_21": self.norm_21, "norm_11": self.norm_11,
                "log10_gamma": self.log_gamma / math.log(10), "log10_alpha": self.log_alpha / math.log(10),
                "log10_K": self.log_K / math.log(10), "p_star": self.p_star,
                "log10_T_star": self.log_T_star / math.log(10), "log10_T0": self.log_T0 / math.log(10)}


def log10_or_value(log_x: float) -> dict:
    """``{"log10": …, "value": x or None}`` — the value is omitted when it exceeds float range."""
    l10 = log_x / math.log(10)
    value = math.exp(log_x) if log_x < 700 else None
    return {"log10": l10, "value": value}


@dataclass(frozen=True)
class BoundReport(_ArchitectureSizes):
    """Every proxy of one model (:func:`score`). Natural-log fields; use :meth:`summary` for log10."""

    arch: ArchitectureSpec
    mode: str
    dtype: str
    options: ScoringOptions
    logit_scale: float
    grid: np.ndarray
    log_Lambda: np.ndarray
    log_alpha: np.ndarray
    matrices: tuple
    log_B_ours_sum: float
    log_B_ours_rss: float
    log_B_edelman: float
    log_B_edelman_11: float
    source: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def p_stars(self) -> np.ndarray:
        return np.array([m.p_star for m in self.matrices])

    def select(self, kind=None, layer=None) -> list:
        return [m for m in self.matrices if (kind is None or m.kind == kind) and (layer is None or m.layer == layer)]

    def summary(self) -> dict:
        """The four model-level proxies as ``{"log10", "value"}`` plus grid and p* statistics."""
        ps = self.p_stars
        return {
            "B_ours_sum": log10_or_value(self.log_B_ours_sum),
            "B_ours_rss": log10_or_value(self.log_B_ours_rss),
            "B_edelman": log10_or_value(self.log_B_edelman),
            "B_edelman_11_extension": log10_or_value(self.log_B_edelman_11),
            "grid_m": int(round(1.0 / self.grid[1])) if self.grid.size > 1 else 0,
            "grid_points": int(self.grid.size),
            "fraction_p_star_zero": float(np.mean(ps == 0.0)),
            "n_matrices": len(self.matrices),
        }

    def to_dict(self) -> dict:
        return {
            "model": self.source, "architecture": self.arch.to_dict(), "mode": self.mode, "dtype": self.dtype,
            "options": {"logit_scale": self.options.logit_scale, "logit_scale_value": self.logit_scale,
                        "L_phi": self.options.L_phi, "softmax_const": self.options.softmax_const,
                        "gamma_L_phi": self.options.gamma_L_phi},
            "grid": self.grid.tolist(),
            "log10_Lambda": (self.log_Lambda / math.log(10)).tolist(),
            "log10_alpha": (self.log_alpha / math.log(10)).tolist(),
            "summary": self.summary(),
            "matrices": [m.to_row() for m in self.matrices],
            "meta": self.meta,
        }


def score(spectra: ModelSpectra, options: ScoringOptions | None = None, **kw) -> BoundReport:
    """All proxies of the released code from precomputed spectra (no SVD here).

    ``options`` or keyword arguments of :class:`ScoringOptions`. Matrix-level terms use
    :func:`bounds_lib.peeling.posthoc_choice` on the grid ``posthoc_grid(L, N)``; depth weights use
    :func:`bounds_lib.propagation.log_layer_lipschitz_multihead` and ``log_alpha``; γ uses
    ``log_gamma_multihead`` (released form unless ``gamma_L_phi``); ``K = γαL`` via ``log_scale_K``.

    * ``B_ours = Σ_matrices T* + √L`` (:func:`~bounds_lib.peeling.aggregate_sum`) and the
      root-sum-square variant (:func:`~bounds_lib.peeling.aggregate_rss`).
    * ``B_Edelman = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}`` with
      ``ξ_ℓ = Σ_h[(C(M_out)C(M_in)C(Ṽ_h)‖QK_h‖_{2,1})^{2/3} + (C(M_out)C(M_in)‖Ṽ_h‖_{2,1})^{2/3}]
      + (C(M_out)‖M_in‖_{2,1})^{2/3} + ‖M_out‖_{2,1}^{2/3}`` (released formula).
    * ``B_Edelman_11``: the same with every (2,1) norm replaced by the (1,1) norm — **our extension**,
      a stand-in for the entrywise norms of Trauger & Tewari, not a released proxy.
    """
    if kw:
        options = replace(options or ScoringOptions(), **kw)
    options = options or ScoringOptions()
    arch = spectra.arch
    L, N, H = arch.n_layers, arch.hidden, arch.n_heads
    s = options.scale_for(arch)
    mats = [m.scaled(s) if (m.kind == "QK" and s != 1.0) else m for m in spectra.matrices]
    if len(mats) != L * (2 * H + 2):
        raise ValueError(f"spectra hold {len(mats)} matrices, expected {L * (2 * H + 2)} for L={L}, H={H}")

    C = {"QK": np.zeros((L, H)), "V": np.zeros((L, H)), "M_in": np.zeros(L), "M_out": np.zeros(L)}
    n21 = {k: np.zeros_like(v) for k, v in C.items()}
    n11 = {k: np.zeros_like(v) for k, v in C.items()}
    for m in mats:
        idx = (m.layer, m.head) if m.head >= 0 else m.layer
        C[m.kind][idx], n21[m.kind][idx], n11[m.kind][idx] = m.sigma1, m.norm_21, m.norm_11

    log_Lam = log_layer_lipschitz_multihead(C["M_in"], C["M_out"], C["V"], C["QK"], L_phi=options.L_phi,
                                            softmax_const=options.softmax_const)
    log_al = log_alpha(log_Lam)
    log_gam = log_gamma_multihead(C["M_in"], C["M_out"], C["V"], C["QK"],
                                  L_phi=options.L_phi if options.gamma_L_phi else None,
                                  softmax_const=options.softmax_const)
    log_K = {k: log_scale_K(v, log_al[:, None] if np.ndim(v) == 2 else log_al, L) for k, v in log_gam.items()}
    grid = posthoc_grid(L, N)

    scores = []
    for m in mats:
        idx = (m.layer, m.head) if m.head >= 0 else m.layer
        lK = float(log_K[m.kind][idx])
        sig = m.sigma
        if spectra.mode == "clean" and m.head >= 0:
            # exact zeros add nothing to S_p (p > 0) and every kept value is above the rank tolerance,
            # so dropping them changes no number — only the time spent on them
            k = max(1, int(np.count_nonzero(sig)))
            sig = sig[:k]
        if sig[0] > 2.0 ** 400:
            # S_p = Σσ^p overflows float64 for σ beyond ~1e154. T(W;p) depends on σ and K only through
            # S_p·K^p, so σ/c with log K + log c gives the same log T; c a power of two keeps σ/c, and
            # the rank tolerance (relative to σ₁ ≥ 1), exact
            e = math.frexp(float(sig[0]))[1] - 1
            choice = posthoc_choice(np.ldexp(sig, -e), lK + e * math.log(2.0), N, grid)
        else:
            choice = posthoc_choice(sig, lK, N, grid)
        scores.append(MatrixScore(m.layer, m.head, m.kind, m.shape, m.sigma1, m.rank, m.frobenius, m.nuclear,
                                  m.stable_rank, m.norm_21, m.norm_11, float(log_gam[m.kind][idx]),
                                  float(log_al[m.layer]), lK, choice.p_star, choice.log_T_star, choice.log_T))
    log_T_stars = np.array([sc.log_T_star for sc in scores])

    def log_edelman(norms):
        if any(np.isnan(v).any() for v in norms.values()):
            return float("nan")  # (1,1) norms not computed (entrywise=False)
        with np.errstate(divide="ignore"):
            lg = {k: np.log(v) for k, v in C.items()}
            ln = {k: np.log(v) for k, v in norms.items()}
        c = 2.0 / 3.0
        lmo, lmi = lg["M_out"][:, None], lg["M_in"][:, None]
        terms = np.concatenate([
            c * (lmo + lmi + lg["V"] + ln["QK"]),
            c * (lmo + lmi + ln["V"]),
            c * (lg["M_out"] + ln["M_in"])[:, None],
            c * ln["M_out"][:, None],
        ], axis=1)                                               # (L, 2H + 2)
        log_xi = logsumexp(terms, axis=1)
        inner = logsumexp(c * log_al + log_xi)
        return 1.5 * float(np.logaddexp(0.0, inner))

    return BoundReport(
        arch=arch, mode=spectra.mode, dtype=spectra.dtype, options=options, logit_scale=s, grid=grid,
        log_Lambda=np.asarray(log_Lam, dtype=np.float64), log_alpha=np.asarray(log_al, dtype=np.float64),
        matrices=tuple(scores),
        log_B_ours_sum=aggregate_sum(log_T_stars, L), log_B_ours_rss=aggregate_rss(log_T_stars, L),
        log_B_edelman=log_edelman(n21), log_B_edelman_11=log_edelman(n11),
        source=spectra.source, meta=dict(spectra.meta),
    )


def analyze(model, *, mode: str = "clean", dtype="float64", layers=None, cache: SpectraCache | None = None,
            progress=None, allow_download: bool | None = None, options: ScoringOptions | None = None,
            entrywise: bool = True, jobs: int = 1, **kw) -> BoundReport:
    """:func:`compute_spectra` then :func:`score` — the whole analysis of one model."""
    sp = compute_spectra(model, mode=mode, dtype=dtype, layers=layers, cache=cache, progress=progress,
                         allow_download=allow_download, entrywise=entrywise, jobs=jobs)
    return score(sp, options, **kw)


# --------------------------------------------------------------------------------------------
# Figures of Section 6 (matplotlib imported lazily; used by the CLI's --plots and by Chapter 6)
# --------------------------------------------------------------------------------------------

KIND_LABELS = {"QK": r"$QK_h$", "V": r"$\tilde V_h$", "M_in": r"$M_{\rm in}$", "M_out": r"$M_{\rm out}$"}

# The figures themselves live in bounds_lib.report (book style: at most two panels per row, a colour
# key for every colour); these names stay here for the CLI's --plots and for existing callers.


def figure_spectral_decay(spectra: ModelSpectra, layers=(0, 1, 2, 3)):
    """Normalised singular values ``σ_i/σ_1`` vs ``i`` by matrix type (:func:`bounds_lib.report.figure_spectral_decay`)."""
    from . import report

    return report.figure_spectral_decay(spectra, layers=layers)


def figure_p_star_histogram(report: BoundReport):
    """Histogram of the post hoc ``p*`` over all matrices, stacked by type (:mod:`bounds_lib.report`)."""
    from . import report as R

    return R.figure_p_star_histogram(report)


def figure_T_ratio(report: BoundReport):
    """``T(W;p)/T(W;0)`` vs ``p`` for every matrix, by type (:func:`bounds_lib.report.figure_T_ratio`)."""
    from . import report as R

    return R.figure_T_ratio(report)


def figure_norms(report: BoundReport):
    """Spectral, (2,1) and (1,1) norms by layer and type (:func:`bounds_lib.report.figure_norms`); the
    (1,1) panels say so when the head products' (1,1) norms were not computed (``entrywise=False``)."""
    from . import report as R

    fig = R.figure_norms(report)
    if any(math.isnan(m.norm_11) for m in report.matrices):
        for ax in fig.axes[2:4]:
            ax.text(0.5, 0.5, "head products' (1,1) norms\nnot computed (opt in:\nCLI --entrywise)",
                    ha="center", va="center", transform=ax.transAxes, color="0.3")
    return fig


def figure_prefix_depth(spectra: ModelSpectra, options: ScoringOptions | None = None):
    """``B_ours`` and ``B_Edelman`` of the first-k-layer prefixes of one model, each divided by its value
    at k = 1 (:func:`bounds_lib.report.figure_prefix_depth`) — prefixes, **not** models trained at depth k."""
    from . import report

    return report.figure_prefix_depth(spectra, options)


def figure_scaling(reports):
    """The paper's two scaling figures from a family of checkpoints (:func:`bounds_lib.report.figure_scaling`)."""
    from . import report

    return report.figure_scaling(list(reports))
