"""Bound proxies from spectra — one scoring core for the single-head (Chapter 7) and multi-head (Chapter 6) paths.

Both paths compute the same quantities in log space, through the same functions:

* per matrix, the post hoc term ``T*(W) = min_{p∈𝒫_m} T(W;p)`` with ``K = γ α L``
  (:func:`posthoc_term`, built on :func:`bounds_lib.peeling.posthoc_choice`);
* ``B_ours = Σ T* + √L`` (released) and ``√(Σ T*²) + √L`` (:func:`bounds_lib.peeling.aggregate_sum`,
  :func:`bounds_lib.peeling.aggregate_rss`);
* ``B_Edelman = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}`` (:func:`log_edelman_bound`), where ``ξ_ℓ`` is a sum of
  ``x^{2/3}`` over per-layer summands ``x`` that each architecture lists (:func:`single_head_proxies`,
  :func:`score`), and ``B_11``, the same with every ``(2,1)`` norm replaced by the ``(1,1)`` norm
  (a labelled extension, no released formula).

The two architectures have their own matrix types, named once here:
:data:`SINGLE_HEAD_MATRIX_TYPES` (the paper's model, Chapter 1) and :data:`MULTI_HEAD_MATRIX_TYPES`
(BERT-like checkpoints, Chapter 6).
"""
from __future__ import annotations

import math

import numpy as np

from .norms import norm_11, norm_21, singular_values
from .peeling import aggregate_rss, aggregate_sum, posthoc_choice, posthoc_grid
from .propagation import LPHI_GELU_RELEASED, log_alpha, log_gamma, log_layer_lipschitz, log_scale_K

__all__ = [
    "SINGLE_HEAD_MATRIX_TYPES",
    "MULTI_HEAD_MATRIX_TYPES",
    "PROXY_NAMES",
    "LN10",
    "log_edelman_bound",
    "posthoc_term",
    "single_head_proxies",
]

#: Matrix types of the paper's single-head model (Chapter 1): ``W_QK``, ``W_V``, ``W_M`` per layer.
SINGLE_HEAD_MATRIX_TYPES = ("QK", "V", "M")
#: Matrix types of a multi-head checkpoint (Chapter 6), in the order of the paper: per-head ``QK_h``,
#: per-head ``Ṽ_h`` ("V"), then the layer's ``M_in`` and ``M_out``.
MULTI_HEAD_MATRIX_TYPES = ("QK", "V", "M_in", "M_out")
#: The proxies :func:`single_head_proxies` returns (all as log10), in the order Chapter 7 shows them;
#: also the keys of ``row["proxies"]`` in the stored results files. ``B_11`` is the (1,1) analogue of
#: ``B_edelman``.
PROXY_NAMES = ("B_ours_sum", "B_ours_rss", "B_edelman", "B_11", "prod_spectral", "sum_frobenius",
               "n_params")
LN10 = math.log(10.0)
_TWO_THIRDS = 2.0 / 3.0


def _released_L_phi(act: str, L_phi: float) -> float:
    return LPHI_GELU_RELEASED if act == "gelu" else L_phi


def log_edelman_bound(log_alpha, log_terms) -> float:
    """``log (1 + Σ_ℓ α_ℓ^{2/3} Σ_j x_{ℓj}^{2/3})^{3/2}`` — the ``B_Edelman`` form, in log space.

    Parameters
    ----------
    log_alpha : array_like, shape (L,)
        ``log α_ℓ``, the depth weight of every layer (:func:`bounds_lib.propagation.log_alpha`).
    log_terms : array_like, shape (L, k)
        ``log x_{ℓj}``: the logs of the ``k`` summands of ``ξ_ℓ`` *before* the 2/3 power (e.g.
        ``log(C_M C_V ‖W_QK‖_{2,1})``); ``-inf`` for a zero summand.

    Returns
    -------
    float
        The natural log of the bound (``0.0`` when every summand is zero).

    Raises
    ------
    ValueError
        ``log_terms`` is not two-dimensional, its number of rows differs from ``len(log_alpha)``, or
        an entry is NaN.

    Notes
    -----
    The exponents ``(2/3)(log α_ℓ + log x_{ℓj})`` are combined with ``np.logaddexp`` in layer-major
    order, so that no power of a large norm overflows; the stored results of Chapters 7–8 were computed
    in exactly this order.

    Examples
    --------
    One layer, ``α = 1`` and ``ξ = 1^{2/3} + 8^{2/3} = 5``: ``B = (1 + 5)^{3/2}``.

    >>> import math
    >>> b = log_edelman_bound([0.0], [[0.0, math.log(8.0)]])
    >>> round(math.exp(b), 10) == round(6.0 ** 1.5, 10)
    True
    """
    la = np.asarray(log_alpha, dtype=np.float64).reshape(-1)
    lt = np.asarray(log_terms, dtype=np.float64)
    if lt.ndim != 2 or lt.shape[0] != la.shape[0]:
        raise ValueError(f"log_terms must have shape (L, k) with L = len(log_alpha) = {la.shape[0]}, "
                         f"got shape {lt.shape}")
    if np.isnan(lt).any() or np.isnan(la).any():
        raise ValueError("log_alpha and log_terms must not contain NaN")
    exponents = _TWO_THIRDS * (la[:, None] + lt)
    return 1.5 * float(np.logaddexp(0.0, np.logaddexp.reduce(exponents.ravel())))


def posthoc_term(sigma, log_K: float, N: int, grid):
    """The post hoc choice ``p*`` and ``log T*`` of one matrix (:func:`bounds_lib.peeling.posthoc_choice`).

    ``S_p = Σσ^p`` overflows float64 for ``σ`` beyond ~1e154. ``T(W;p)`` depends on ``σ`` and ``K``
    only through ``S_p·K^p``, so for ``σ₁ > 2^400`` the spectrum is divided by a power of two ``c`` and
    ``log K`` increased by ``log c`` — the same ``log T``, with ``σ/c`` (and the rank tolerance, relative
    to ``σ₁ ≥ 1``) exact. Other spectra are passed through unchanged.

    Parameters
    ----------
    sigma : ndarray
        Singular values, descending.
    log_K : float
        ``log K`` of the matrix.
    N : int
        Hidden size.
    grid : ndarray
        The post hoc grid (:func:`bounds_lib.peeling.posthoc_grid`).

    Returns
    -------
    PosthocChoice
        See :func:`bounds_lib.peeling.posthoc_choice`.

    Examples
    --------
    >>> import numpy as np
    >>> from bounds_lib.peeling import posthoc_grid
    >>> ch = posthoc_term(np.array([1.0, 0.0]), 0.0, 2, posthoc_grid(1, 2))
    >>> ch.p_star
    0.0
    """
    if sigma[0] > 2.0 ** 400:
        e = math.frexp(float(sigma[0]))[1] - 1
        return posthoc_choice(np.ldexp(sigma, -e), log_K + e * math.log(2.0), N, grid)
    return posthoc_choice(sigma, log_K, N, grid)


def single_head_proxies(model) -> dict:
    """All proxies of one single-head model (log10 values) and ``p*`` of every matrix (Chapter 7).

    The single-head form of the released proxies: per matrix ``T*(W)`` with ``K = γ α L`` and the
    released constants (``L_φ = 1.13`` for GELU, softmax constant 2, γ without ``L_φ``); ``B_ours`` as
    ``Σ T* + √L`` (released) and ``√(Σ T*²) + √L``; ``B_Edelman`` with
    ``ξ_ℓ = (C_M C_V ‖W_QK‖_{2,1})^{2/3} + (C_M ‖W_V‖_{2,1})^{2/3} + ‖W_M‖_{2,1}^{2/3}``
    (:func:`log_edelman_bound`); ``B_11`` the same with ``‖·‖_{1,1}``; references: parameter count,
    ``Π‖W‖₂`` over all matrices and ``Σ‖W‖_F``.

    Parameters
    ----------
    model : bounds_lib.model.SingleHeadTransformer
        The model (Chapter 1).

    Returns
    -------
    dict
        The keys of :data:`PROXY_NAMES` (``log10`` of each proxy), ``p_star``
        (``{"QK": [...], "V": [...], "M": [...]}``, one entry per layer), ``log10_T_star`` (same
        layout), ``log10_alpha`` (per layer), ``spectral_norms`` (same layout as ``p_star``) and
        ``readout_norm`` ``‖w‖₂`` (not part of any proxy: the paper's bounds are stated for a fixed
        Lipschitz loss on the [CLS] output).

    Raises
    ------
    ValueError
        A weight matrix holds NaN or ±inf (:func:`bounds_lib.norms.singular_values`).

    Examples
    --------
    >>> import numpy as np
    >>> from bounds_lib.model import random_transformer
    >>> P = single_head_proxies(random_transformer(2, 4, np.random.default_rng(0)))
    >>> sorted(P["p_star"]) == sorted(SINGLE_HEAD_MATRIX_TYPES) and len(P["p_star"]["QK"])
    2
    >>> P["B_11"] >= P["B_edelman"]   # ‖W‖_{1,1} ≥ ‖W‖_{2,1}
    True
    """
    types = SINGLE_HEAD_MATRIX_TYPES
    L, N = model.L, model.N
    mats = {a: [getattr(b, f"W_{a}") for b in model.blocks] for a in types}
    sig = {a: [singular_values(W, f"W_{a}") for W in mats[a]] for a in types}
    C = {a: np.array([s[0] for s in sig[a]]) for a in types}
    log_Lam = log_layer_lipschitz(C["M"], C["V"], C["QK"], _released_L_phi(model.act, model.L_phi))
    la = log_alpha(np.atleast_1d(log_Lam))
    lg = log_gamma(C["M"], C["V"], C["QK"])
    lK = log_scale_K({a: np.atleast_1d(lg[a]) for a in types}, la, L)
    grid = posthoc_grid(L, N)
    p_star = {a: [] for a in types}
    lT = {a: [] for a in types}
    for a in types:
        for l in range(L):
            ch = posthoc_term(sig[a][l], float(np.atleast_1d(lK[a])[l]), N, grid)
            p_star[a].append(ch.p_star)
            lT[a].append(ch.log_T_star)
    all_lT = np.concatenate([lT[a] for a in types])

    def log_xi_terms(norm):
        # per layer: log(C_M C_V ‖W_QK‖), log(C_M ‖W_V‖), log ‖W_M‖ — the summands of ξ_ℓ
        return np.array([[np.log(C["M"][l]) + np.log(C["V"][l]) + np.log(norm(mats["QK"][l])),
                          np.log(C["M"][l]) + np.log(norm(mats["V"][l])),
                          np.log(norm(mats["M"][l]))] for l in range(L)])

    with np.errstate(divide="ignore"):
        log_prod_spec = float(sum(np.sum(np.log(C[a])) for a in types))
        log_terms_21, log_terms_11 = log_xi_terms(norm_21), log_xi_terms(norm_11)
    sum_frob = float(sum(np.sqrt(np.sum(s**2)) for a in types for s in sig[a]))
    return {
        "B_ours_sum": aggregate_sum(all_lT, L) / LN10,
        "B_ours_rss": aggregate_rss(all_lT, L) / LN10,
        "B_edelman": log_edelman_bound(la, log_terms_21) / LN10,
        "B_11": log_edelman_bound(la, log_terms_11) / LN10,
        "prod_spectral": log_prod_spec / LN10,
        "sum_frobenius": math.log10(sum_frob),
        "n_params": math.log10(3 * L * N * N + N),
        "p_star": p_star,
        "log10_T_star": {a: [x / LN10 for x in lT[a]] for a in types},
        "log10_alpha": [float(x) / LN10 for x in la],
        "spectral_norms": {a: [float(x) for x in C[a]] for a in types},
        "readout_norm": float(np.linalg.norm(model.w)),
    }
