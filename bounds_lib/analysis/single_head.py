"""Bound proxies of the paper's single-head model (Chapter 7): :func:`single_head_proxies`.

The single-head form of the released proxies, through the same scoring core as the multi-head path of
Chapter 6 (:mod:`bounds_lib.analysis.scoring`): the post hoc term ``T*`` of every matrix
(:func:`bounds_lib.analysis.scoring.posthoc_term`), ``B_ours`` by
:func:`bounds_lib.theory.peeling.aggregate_sum` and :func:`bounds_lib.theory.peeling.aggregate_rss`, and
``B_Edelman`` and its (1,1) analogue ``B_11`` by :func:`bounds_lib.analysis.scoring.log_edelman_bound`.
:data:`PROXY_NAMES` are the proxies every row of the stored results files holds
(:mod:`bounds_lib.studies.results`).
"""
from __future__ import annotations

import math

import numpy as np

from ..theory.model import SINGLE_HEAD_MATRIX_TYPES
from ..theory.norms import norm_11, norm_21, singular_values
from ..theory.peeling import aggregate_rss, aggregate_sum, posthoc_grid
from ..theory.propagation import LPHI_GELU_RELEASED, log_alpha, log_gamma, log_layer_lipschitz, log_scale_K
from .scoring import LN10, _posthoc_term_valid, log_edelman_bound

__all__ = ["PROXY_NAMES", "single_head_proxies"]

#: The proxies :func:`single_head_proxies` returns (all as log10), in the order Chapter 7 shows them;
#: also the keys of ``row["proxies"]`` in the stored results files. ``B_11`` is the (1,1) analogue of
#: ``B_edelman``.
PROXY_NAMES = ("B_ours_sum", "B_ours_rss", "B_edelman", "B_11", "prod_spectral", "sum_frobenius",
               "n_params")


def _released_L_phi(act: str, L_phi: float) -> float:
    """``L_φ`` of the released code: 1.13 for GELU, the model's own constant otherwise (Chapter 7)."""
    return LPHI_GELU_RELEASED if act == "gelu" else L_phi


def single_head_proxies(model) -> dict:
    """All proxies of one single-head model (log10 values) and ``p*`` of every matrix (Chapter 7).

    The single-head form of the released proxies: per matrix ``T*(W)`` with ``K = γ α L`` and the
    released constants (``L_φ = 1.13`` for GELU, softmax constant 2, γ without ``L_φ``); ``B_ours`` as
    ``Σ T* + √L`` (released) and ``√(Σ T*²) + √L``; ``B_Edelman`` with
    ``ξ_ℓ = (C_M C_V ‖W_QK‖_{2,1})^{2/3} + (C_M ‖W_V‖_{2,1})^{2/3} + ‖W_M‖_{2,1}^{2/3}``
    (:func:`~bounds_lib.analysis.scoring.log_edelman_bound`); ``B_11`` the same with ``‖·‖_{1,1}``;
    references: parameter count, ``Π‖W‖₂`` over all matrices and ``Σ‖W‖_F``.

    Parameters
    ----------
    model : bounds_lib.theory.model.SingleHeadTransformer
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
        A weight matrix holds NaN or ±inf (:func:`bounds_lib.theory.norms.singular_values`).

    Examples
    --------
    >>> import numpy as np
    >>> from bounds_lib.theory.model import random_transformer
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
            # singular values as LAPACK returns them: descending, finite (the weights were checked), >= 0
            ch = _posthoc_term_valid(sig[a][l], float(np.atleast_1d(lK[a])[l]), N, grid)
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
        "B_edelman": log_edelman_bound(la, log_terms_21, summation="flat") / LN10,
        "B_11": log_edelman_bound(la, log_terms_11, summation="flat") / LN10,
        "prod_spectral": log_prod_spec / LN10,
        "sum_frobenius": math.log10(sum_frob),
        "n_params": math.log10(3 * L * N * N + N),
        "p_star": p_star,
        "log10_T_star": {a: [x / LN10 for x in lT[a]] for a in types},
        "log10_alpha": [float(x) / LN10 for x in la],
        "spectral_norms": {a: [float(x) for x in C[a]] for a in types},
        "readout_norm": float(np.linalg.norm(model.w)),
    }
