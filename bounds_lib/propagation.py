"""Layerwise propagation: per-layer Lipschitz factors Λ, depth weights α, in-layer weights γ (Chapter 3).

Everything is computed in log space so that products over hundreds of layers never overflow.
Notation (Chapter 3, paper Section 4): the single-head block of :mod:`bounds_lib.model` is

    X ↦ Π_norm( φ( Π_norm( softmax_row(X W_QK Xᵀ) X W_V ) ) W_M ),

and the multi-head BERT adaptation of the released code is
``X ↦ Π_norm( φ( Π_norm(Σ_h softmax_row(X QK_h Xᵀ) X Ṽ_h) M_in ) M_out )``.
``C_a`` denotes the spectral norm ‖W_a‖₂ of matrix ``a``.

* Per-layer Lipschitz factor in ‖·‖_{2→∞} (Chapter 3, ``ch03-eq-lambda``):
  ``Λ = L_φ · C_M · C_V · (1 + 2 c · C_QK)`` with ``c`` the ℓ∞→ℓ1 Lipschitz constant of softmax.
  The released code uses ``c = 2`` (:data:`SOFTMAX_LINF_L1_RELEASED`); Chapter 3 proves the tight
  value ``c = 1`` (:data:`SOFTMAX_LINF_L1_TIGHT`).
* Depth weight ``α^{(ℓ)} = Π_{k=ℓ+1}^{L-1} Λ_k`` (0-based layers, ``α^{(L-1)} = 1``).
* In-layer weight γ (Lipschitz factor from one matrix of layer ℓ to that layer's output).
* Effective scale. Released: ``K = γ · α · L`` (:func:`log_scale_K`, floored at the smallest positive
  float). Proved in Chapter 3 (``ch03-thm-compose``): ``K = 2 · J · ‖w‖₂ · γ · α`` with
  ``J = L·A (+1 for a learned readout)`` pieces and ``A`` matrices per layer (:func:`log_effective_scale`);
  the released K misses ``A``, ``‖w‖₂`` and the internal-cover factor 2.
"""
from __future__ import annotations

import numbers

import numpy as np

from .falsification import Falsification, falsify
from .model import project_rows, softmax_rows

__all__ = [
    "LPHI_GELU_RELEASED",
    "SOFTMAX_LINF_L1_RELEASED",
    "SOFTMAX_LINF_L1_TIGHT",
    "LOG_TINY",
    "log_layer_lipschitz",
    "log_layer_lipschitz_multihead",
    "log_alpha",
    "log_gamma",
    "log_gamma_multihead",
    "log_scale_K",
    "matrices_per_layer",
    "log_effective_scale",
    "radius_allocation",
    "softmax_jacobian_linf_l1",
    "multihead_block_forward",
    "falsify_softmax",
    "falsify_logits",
    "falsify_layer_lipschitz",
    "falsify_parameter_perturbation",
    "falsify_multihead_gamma",
    "adversarial_layer_lipschitz",
    "adversarial_parameter_perturbation",
    "composition_bound",
    "falsify_composition",
]

#: GELU Lipschitz constant as rounded in the released code (the exact value is 1.1289…).
LPHI_GELU_RELEASED = 1.13
#: ℓ∞→ℓ1 Lipschitz constant of softmax used by the released code (hence ``1 + 4 C_QK``).
SOFTMAX_LINF_L1_RELEASED = 2.0
#: Tight ℓ∞→ℓ1 Lipschitz constant of softmax, proved in Chapter 3 (``ch03-lem-softmax``): ``max_q 4q(1-q) = 1``.
SOFTMAX_LINF_L1_TIGHT = 1.0
#: ``log`` of the smallest positive normal float: the floor of ``log K`` (released code).
LOG_TINY = float(np.log(np.finfo(np.float64).tiny))


def _nonneg(x, name):
    """``x`` as a float64 array of finite non-negative numbers, or ``ValueError``."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric, got {x!r}") from None
    if a.size == 0:
        raise ValueError(f"{name} is empty; give one value per layer (L >= 1)")
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} contains NaN; spectral norms must be finite numbers >= 0")
    if np.any(~np.isfinite(a)):
        raise ValueError(f"{name} contains infinite values; spectral norms must be finite")
    if np.any(a < 0):
        raise ValueError(f"{name} contains negative values; spectral norms are >= 0")
    return a


def _positive_scalar(x, name):
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return float(x)


def _log(a):
    with np.errstate(divide="ignore"):
        return np.log(a)


def log_layer_lipschitz(C_M, C_V, C_QK, L_phi, softmax_const=SOFTMAX_LINF_L1_RELEASED):
    """``log Λ = log[L_φ · C_M · C_V · (1 + 2·softmax_const·C_QK)]`` (Chapter 3, ``ch03-thm-layer``).

    Vectorised: arrays of length L give an array of length L. ``softmax_const = 2`` reproduces the
    released ``1 + 4 C_QK``; ``softmax_const = 1`` is the tight constant proved in Chapter 3.
    """
    L_phi = _positive_scalar(L_phi, "L_phi")
    c = _positive_scalar(softmax_const, "softmax_const")
    C_M, C_V, C_QK = np.broadcast_arrays(_nonneg(C_M, "C_M"), _nonneg(C_V, "C_V"), _nonneg(C_QK, "C_QK"))
    out = np.log(L_phi) + _log(C_M) + _log(C_V) + np.log1p(2.0 * c * C_QK)
    return out if out.ndim else float(out)


def log_layer_lipschitz_multihead(C_Min, C_Mout, C_V_heads, C_QK_heads, L_phi=LPHI_GELU_RELEASED,
                                  softmax_const=SOFTMAX_LINF_L1_RELEASED):
    """``log Λ_k = log[L_φ · C(M_in) · C(M_out) · Σ_h C(Ṽ_h)(1 + 2·softmax_const·C(QK_h))]``.

    ``C_Min, C_Mout``: shape ``(L,)``; ``C_V_heads, C_QK_heads``: shape ``(L, H)``. Released
    BERT adaptation of the released code with ``softmax_const = 2``; the head sum is a log-sum-exp.
    """
    L_phi = _positive_scalar(L_phi, "L_phi")
    c = _positive_scalar(softmax_const, "softmax_const")
    Cmi, Cmo = _nonneg(C_Min, "C_Min"), _nonneg(C_Mout, "C_Mout")
    V, QK = _nonneg(C_V_heads, "C_V_heads"), _nonneg(C_QK_heads, "C_QK_heads")
    if V.shape != QK.shape or V.ndim != 2:
        raise ValueError(f"C_V_heads and C_QK_heads must both have shape (L, H), got {V.shape} and {QK.shape}")
    if Cmi.shape != (V.shape[0],) or Cmo.shape != (V.shape[0],):
        raise ValueError(f"C_Min and C_Mout must have shape ({V.shape[0]},) to match (L, H) = {V.shape}")
    head_terms = _log(V) + np.log1p(2.0 * c * QK)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.max(head_terms, axis=1)
        safe = np.where(np.isfinite(m), m, 0.0)
        lse = safe + np.log(np.sum(np.exp(head_terms - safe[:, None]), axis=1))
    lse = np.where(np.isfinite(m), lse, -np.inf)
    return np.log(L_phi) + _log(Cmi) + _log(Cmo) + lse


def log_alpha(log_Lambda):
    """``log α^{(ℓ)} = Σ_{k=ℓ+1}^{L-1} log Λ_k`` for ``ℓ = 0..L-1`` (0-based); the last entry is 0.

    ``α^{(ℓ)}`` is the Lipschitz factor of the layers after ℓ (Chapter 3, ``ch03-def-weights``).
    """
    a = np.asarray(log_Lambda, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"log_Lambda must be a 1-D array with one entry per layer (L >= 1), got shape {a.shape}")
    if np.any(np.isnan(a)) or np.any(a == np.inf):
        raise ValueError("log_Lambda contains NaN or +inf; per-layer factors must be finite")
    with np.errstate(invalid="ignore"):
        tail = np.cumsum(a[::-1])[::-1]  # tail[ℓ] = Σ_{k ≥ ℓ} log Λ_k
    return np.append(tail[1:], 0.0)


def log_gamma(C_M, C_V, C_QK, L_phi=None, softmax_const=SOFTMAX_LINF_L1_RELEASED, phi_bound=1.0):
    """In-layer weights of the single-head block, as a dict of ``log γ`` with keys "QK", "V", "M".

    ``L_phi=None`` gives the released form (no ``L_φ``): ``γ_QK = c·C_V·C_M``, ``γ_V = C_M``, ``γ_M = 1``.
    With ``L_phi`` given, the form proved in Chapter 3 (``ch03-thm-param``):
    ``γ_QK = c·C_V·L_φ·C_M``, ``γ_V = L_φ·C_M``, ``γ_M = phi_bound``, where ``phi_bound`` is the
    linear-growth constant ``B_φ = sup_y ‖φ(y)‖₂/‖y‖₂`` (Chapter 3, ``ch03-def-weights``; 1 for GELU,
    ReLU, tanh and the identity since ``|φ(x)| ≤ |x|``).
    Here ``c = softmax_const`` multiplies a logit perturbation ``|x_t ΔW x_sᵀ| ≤ ‖ΔW‖₂`` (factor 1).
    """
    c = _positive_scalar(softmax_const, "softmax_const")
    lp = 0.0 if L_phi is None else np.log(_positive_scalar(L_phi, "L_phi"))
    lb = 0.0 if L_phi is None else np.log(_positive_scalar(phi_bound, "phi_bound"))
    C_M, C_V, _ = np.broadcast_arrays(_nonneg(C_M, "C_M"), _nonneg(C_V, "C_V"), _nonneg(C_QK, "C_QK"))
    out = {
        "QK": np.log(c) + _log(C_V) + lp + _log(C_M),
        "V": lp + _log(C_M),
        "M": lb + np.zeros_like(C_M),
    }
    return {k: (v if np.ndim(v) else float(v)) for k, v in out.items()}


def log_gamma_multihead(C_Min, C_Mout, C_V_h, C_QK_h, L_phi=None, softmax_const=SOFTMAX_LINF_L1_RELEASED,
                        phi_bound=1.0):
    """In-layer weights of the multi-head block: dict of ``log γ`` with keys "QK", "V", "M_in", "M_out".

    ``L_phi=None`` reproduces the released code exactly: ``γ_QK = c·C(Ṽ_h)·C(M_out)·C(M_in)``,
    ``γ_V = C(M_out)·C(M_in)``, ``γ_Min = C(M_out)``, ``γ_Mout = 1`` (``c = softmax_const``, 2 as released).
    With ``L_phi`` given, the form proved in Chapter 3: ``L_φ`` multiplies γ_QK, γ_V and γ_Min (every
    matrix before φ), and ``γ_Mout = phi_bound · C(M_in)`` because M_out acts on ``φ(y M_in)``, whose
    norm is at most ``B_φ·C(M_in)`` (``phi_bound`` = the linear-growth constant ``B_φ``, 1 for GELU) —
    the released ``γ_Mout = 1`` omits this factor.
    ``C_V_h, C_QK_h`` may be arrays (e.g. shape ``(L, H)``) broadcast against ``C_Min, C_Mout``.
    """
    c = _positive_scalar(softmax_const, "softmax_const")
    Cmi, Cmo = _nonneg(C_Min, "C_Min"), _nonneg(C_Mout, "C_Mout")
    V, QK = _nonneg(C_V_h, "C_V_h"), _nonneg(C_QK_h, "C_QK_h")
    Cmi0, Cmo0 = Cmi, Cmo  # per-layer shapes for the M_in / M_out weights
    if V.ndim > Cmi.ndim:  # per-head arrays (L, H) against per-layer (L,)
        Cmi = Cmi.reshape(Cmi.shape + (1,) * (V.ndim - Cmi.ndim))
        Cmo = Cmo.reshape(Cmo.shape + (1,) * (V.ndim - Cmo.ndim))
    try:
        np.broadcast_shapes(Cmi.shape, Cmo.shape, V.shape, QK.shape)
    except ValueError:
        raise ValueError(f"shapes do not broadcast: C_Min {Cmi.shape}, C_Mout {Cmo.shape}, "
                         f"C_V_h {V.shape}, C_QK_h {QK.shape}") from None
    if L_phi is None:
        lp, m_out = 0.0, np.zeros(np.broadcast_shapes(Cmi0.shape, Cmo0.shape))
    else:
        lp = np.log(_positive_scalar(L_phi, "L_phi"))
        m_out = np.log(_positive_scalar(phi_bound, "phi_bound")) + _log(Cmi0) + 0.0 * Cmo0
    out = {
        "QK": np.log(c) + _log(V) + _log(Cmo) + _log(Cmi) + lp + 0.0 * QK,
        "V": _log(Cmo) + _log(Cmi) + lp + 0.0 * V,
        "M_in": _log(Cmo0) + lp + 0.0 * Cmi0,
        "M_out": m_out,
    }
    return {k: (v if np.ndim(v) else float(v)) for k, v in out.items()}


def log_scale_K(log_gamma, log_alpha, L):
    """``log K = log γ + log α + log L``, floored at ``log(smallest positive float)`` (released code).

    ``log_gamma`` may be an array or a dict of arrays (then a dict is returned). Broadcasts.
    """
    if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
        raise ValueError(f"L (number of layers) must be an integer >= 1, got {L!r}")
    if isinstance(log_gamma, dict):
        return {k: log_scale_K(v, log_alpha, L) for k, v in log_gamma.items()}
    g = np.asarray(log_gamma, dtype=np.float64)
    a = np.asarray(log_alpha, dtype=np.float64)
    if np.any(np.isnan(g)) or np.any(np.isnan(a)):
        raise ValueError("log_gamma or log_alpha contains NaN")
    if np.any(g == np.inf) or np.any(a == np.inf):
        raise ValueError("log_gamma or log_alpha is +inf; compute them in log space from finite norms")
    out = np.maximum(g + a + np.log(L), LOG_TINY)
    return out if out.ndim else float(out)


def matrices_per_layer(heads=None):
    """``A``, the number of weight matrices per layer: 3 for the single-head block (QK, V, M) and
    ``2H + 2`` for ``H`` heads (``H`` QK, ``H`` Ṽ, ``M_in``, ``M_out``) (Chapter 3, ``ch03-thm-compose``)."""
    if heads is None:
        return 3
    if isinstance(heads, bool) or not isinstance(heads, numbers.Integral) or heads < 1:
        raise ValueError(f"heads must be None (single-head block) or an integer >= 1, got {heads!r}")
    return 2 * int(heads) + 2


def log_effective_scale(log_gamma, log_alpha, L, matrices_per_layer, readout_norm, learned_readout=True):
    """``log K = log 2 + log J + log ‖w‖₂ + log γ + log α`` with ``J = L·A + [learned_readout]``.

    Covering matrix ``(ℓ, a)`` at radius ``ε/K^{(ℓ,a)}`` covers the network output at radius ``ε``
    (Chapter 3, ``ch03-thm-compose``): the output moves by ``Σ_j ‖w‖₂ γ_j α_j d_j`` and each of the
    ``J`` pieces gets ``ε/J``; the factor 2 makes the per-matrix covers internal. ``log_gamma`` may
    be a dict (then a dict is returned); floored at :data:`LOG_TINY` like :func:`log_scale_K`.
    """
    if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
        raise ValueError(f"L (number of layers) must be an integer >= 1, got {L!r}")
    A = matrices_per_layer
    if isinstance(A, bool) or not isinstance(A, numbers.Integral) or A < 1:
        raise ValueError(f"matrices_per_layer must be an integer >= 1 (3 single head, 2H+2 for H heads), got {A!r}")
    w = _positive_scalar(readout_norm, "readout_norm")
    if not isinstance(learned_readout, bool):
        raise ValueError(f"learned_readout must be True or False, got {learned_readout!r}")
    J = int(L) * int(A) + int(learned_readout)
    if isinstance(log_gamma, dict):
        return {k: log_effective_scale(v, log_alpha, L, A, w, learned_readout) for k, v in log_gamma.items()}
    g = np.asarray(log_gamma, dtype=np.float64)
    a = np.asarray(log_alpha, dtype=np.float64)
    if np.any(np.isnan(g)) or np.any(np.isnan(a)) or np.any(g == np.inf) or np.any(a == np.inf):
        raise ValueError("log_gamma or log_alpha is NaN or +inf; compute them in log space from finite norms")
    out = np.maximum(np.log(2.0 * J * w) + g + a, LOG_TINY)
    return out if out.ndim else float(out)


def radius_allocation(eps, log_K):
    """Radius ``ε / K`` given to a matrix with effective scale ``K`` (Chapter 3, ``ch03-thm-compose``),
    in log space. With ``K`` from :func:`log_effective_scale` the pieces' contributions
    ``‖w‖₂ γ α · ε/K`` add up to at most ``ε/2`` (internal covers at radius ``ε/K`` each). With the
    released ``K = γαL`` they add up to ``A·‖w‖₂·ε`` for ``A`` matrices per layer, not ``ε``.
    """
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a positive finite radius, got {eps!r}")
    k = np.asarray(log_K, dtype=np.float64)
    if np.any(np.isnan(k)):
        raise ValueError("log_K contains NaN")
    out = np.log(eps) - k
    return out if out.ndim else float(out)


def softmax_jacobian_linf_l1(z):
    """``‖J(z)‖_{∞→1}`` for ``J = diag(p) − p pᵀ``, ``p = softmax(z)`` (rows of ``z`` batched).

    Equals ``max_{v∈{±1}^T} Σ_i p_i |v_i − p·v| = max_S 4 q_S (1 − q_S)`` with ``q_S = Σ_{i∈S} p_i``
    (Chapter 3, ``ch03-lem-softmax``); computed exactly by enumerating subsets (``T ≤ 16``).
    """
    z = np.atleast_2d(np.asarray(z, dtype=np.float64))
    T = z.shape[-1]
    if T > 16:
        raise ValueError(f"exact enumeration needs T <= 16 tokens, got {T}")
    p = softmax_rows(z)
    masks = ((np.arange(2**T)[:, None] >> np.arange(T)) & 1).astype(np.float64)  # (2^T, T)
    q = p @ masks.T
    return np.max(4.0 * q * (1.0 - q), axis=-1)


def multihead_block_forward(X, QK_heads, V_heads, M_in, M_out, phi, logit_scale=1.0):
    """Multi-head block ``Π_norm(φ(Π_norm(Σ_h softmax(s·X QK_h Xᵀ) X Ṽ_h) M_in) M_out)`` (batched X).

    ``phi`` is an element-wise callable. Used in Chapter 3 to falsify the multi-head γ.
    """
    X = np.asarray(X, dtype=np.float64)
    A = 0.0
    for QK, V in zip(QK_heads, V_heads):
        logits = logit_scale * (X @ QK) @ np.swapaxes(X, -1, -2)
        A = A + softmax_rows(logits) @ (X @ V)
    Y = project_rows(A)
    return project_rows(phi(Y @ M_in) @ M_out)


def _spectral(rng, shape, s):
    A = rng.standard_normal(shape)
    return s * A / np.linalg.norm(A, 2)


def falsify_softmax(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖softmax(z) − softmax(z')‖₁ / (c‖z − z'‖∞)`` over random logits (T = 2–16, scales 1e-3–30)."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        T = int(rng.integers(2, 17))
        z = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-3), np.log(30), (per, 1)))
        d = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-6), np.log(3), (per, 1)))
        if rng.random() < 0.5:  # near-worst directions: ±δ on a balanced split
            d = np.sign(d) * np.abs(d).max(axis=1, keepdims=True)
        num = np.abs(softmax_rows(z + d) - softmax_rows(z)).sum(axis=1)
        out.append(num / (softmax_const * np.abs(d).max(axis=1)))
    return Falsification("softmax l∞→l1", np.concatenate(out)[:trials])


def falsify_logits(rng, trials=10_000):
    """Ratios ``|x_t W x_sᵀ − x'_t W x'_sᵀ| / (2‖W‖₂ δ)`` for rows in the unit ball, ``δ = max(‖x_t−x'_t‖, ‖x_s−x'_s‖)``."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        N = int(rng.integers(1, 9))
        W = _spectral(rng, (N, N), float(np.exp(rng.uniform(-2, 2))))
        X = project_rows(rng.standard_normal((per, 4, N)) * rng.uniform(0.1, 3, (per, 1, 1)))
        Xp = project_rows(X + rng.standard_normal((per, 4, N)) * np.exp(rng.uniform(-6, 0, (per, 1, 1))))
        num = np.abs(X[:, 0] @ W * X[:, 1] - (Xp[:, 0] @ W) * Xp[:, 1]).sum(axis=1)
        delta = np.maximum(np.linalg.norm(X[:, 0] - Xp[:, 0], axis=1), np.linalg.norm(X[:, 1] - Xp[:, 1], axis=1))
        out.append(num / (2 * np.linalg.norm(W, 2) * np.maximum(delta, 1e-300)))
    return Falsification("bilinear logits", np.concatenate(out)[:trials])


def falsify_layer_lipschitz(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the single-head block of
    :mod:`bounds_lib.model` (N = 1–6, T = 1–5, spectral norms 0.2–5, all four activations)."""
    from . import model as M
    out, per = [], 250
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        N, T, act = int(rng.integers(1, 7)), int(rng.integers(1, 6)), acts[i % len(acts)]
        sc = np.exp(rng.uniform(np.log(0.2), np.log(5), 3))
        blk = M.Block(*(_spectral(rng, (N, N), s) for s in sc))
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.1, 2, (per, 1, 1)))
        Xp = project_rows(X + np.exp(rng.uniform(np.log(1e-4), 0, (per, 1, 1))) * rng.standard_normal((per, T, N)))
        num = np.max(np.linalg.norm(M.block_forward(X, blk, act) - M.block_forward(Xp, blk, act), axis=-1), axis=-1)
        den = np.max(np.linalg.norm(X - Xp, axis=-1), axis=-1)
        lam = np.exp(log_layer_lipschitz(sc[2], sc[1], sc[0], M.ACTIVATION_LIPSCHITZ[act], softmax_const))
        out.append(num / (lam * np.maximum(den, 1e-300)))
    return Falsification("layer Lipschitz Λ", np.concatenate(out)[:trials])


def falsify_parameter_perturbation(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT, released=False):
    """Ratios ``|f_W(X) − f_{W'}(X)| / (‖w‖ Σ_{ℓ,a} γ^{(ℓ,a)} α^{(ℓ)} ‖W'^{(ℓ,a)} − W^{(ℓ,a)}‖₂)`` for whole
    single-head networks (L = 1–5, N = 2–6, T = 1–4); γ, α from the unperturbed network's norms.
    ``released=True`` uses γ without L_φ (and the released constant if ``softmax_const=2``)."""
    from . import model as M
    out, per = [], 50
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        L, N, T, act = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 5)), acts[i % len(acts)]
        sn = float(np.exp(rng.uniform(np.log(0.3), np.log(3))))
        net = M.random_transformer(L, N, rng, spectral_norm=sn, act=act)
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.3))))
        D = np.zeros((L, 3))
        mask = rng.random((L, 3)) < 0.6
        mask[rng.integers(L), rng.integers(3)] = True
        blocks = []
        for ell, b in enumerate(net.blocks):
            new = []
            for a, W in enumerate((b.W_QK, b.W_V, b.W_M)):
                if mask[ell, a]:
                    E = _spectral(rng, W.shape, eps * sn)
                    D[ell, a] = np.linalg.norm(E, 2)
                    W = W + E
                new.append(W)
            blocks.append(M.Block(*new))
        net2 = M.SingleHeadTransformer(tuple(blocks), net.w, act=act)
        X = rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1))
        d = np.abs(M.forward(net, X) - M.forward(net2, X))
        C = np.array([[np.linalg.norm(W, 2) for W in (b.W_QK, b.W_V, b.W_M)] for b in net.blocks])
        g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=None if released else net.L_phi, softmax_const=softmax_const)
        la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
        G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
        out.append(d / (np.linalg.norm(net.w) * np.sum(G * D)))
    return Falsification("network parameter perturbation", np.concatenate(out)[:trials])


def falsify_multihead_gamma(rng, trials=10_000, released=False, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B_{W'}(X) − B_W(X)‖_{2→∞} / (γ_a ‖ΔW_a‖₂)`` for one perturbed matrix of a multi-head
    block with ``φ = L_φ·tanh`` (``L_φ ∈ {1, 3}``). Returns ``(Falsification, keys)`` where ``keys[i]``
    names the perturbed matrix type. ``released=True`` uses the released γ (no L_φ, ``γ_Mout = 1``, c = 2)."""
    out, keys, per = [], [], 50
    names = ("QK", "V", "M_in", "M_out")
    for _ in range(int(np.ceil(trials / per))):
        N, T, H = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        Nf = int(rng.integers(N, 3 * N + 1))
        Lp = float(rng.choice([1.0, 3.0]))
        s = np.exp(rng.uniform(np.log(0.3), np.log(4), 4))
        QK = [_spectral(rng, (N, N), s[0]) for _ in range(H)]
        V = [_spectral(rng, (N, N), s[1]) for _ in range(H)]
        Mi, Mo = _spectral(rng, (N, Nf), s[2]), _spectral(rng, (Nf, N), s[3])
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.1))))
        which, h = int(rng.integers(4)), int(rng.integers(H))
        P = [list(QK), list(V), Mi, Mo]
        if which < 2:
            P[which][h] = P[which][h] + _spectral(rng, (N, N), eps)
        else:
            P[which] = P[which] + _spectral(rng, P[which].shape, eps)
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1)))
        phi = lambda x, Lp=Lp: Lp * np.tanh(x)  # noqa: E731
        Z, Zp = multihead_block_forward(X, QK, V, Mi, Mo, phi), multihead_block_forward(X, *P, phi)
        d = np.max(np.linalg.norm(Z - Zp, axis=-1), axis=-1)
        CV = np.array([np.linalg.norm(v, 2) for v in V])
        CQ = np.array([np.linalg.norm(q, 2) for q in QK])
        if released:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, softmax_const=SOFTMAX_LINF_L1_RELEASED)
        else:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, L_phi=Lp, softmax_const=softmax_const, phi_bound=Lp)
        gam = np.exp(g[names[which]])
        gam = float(gam[h]) if which < 2 else float(gam)
        out.append(d / (gam * eps))
        keys += [names[which]] * per
    return Falsification("multi-head γ" + (" (released)" if released else ""), np.concatenate(out)[:trials]), \
        np.array(keys[:trials])


def _block_ratio(x, T, N, softmax_const, weaken):
    """Λ-ratio of the identity-activation block with ``W_QK = qI``, ``W_V = W_M = I`` at ``x = (log q, X, X')``."""
    from . import model as M

    q = float(np.exp(np.clip(x[0], -4.0, 4.0)))
    X = project_rows(x[1:1 + T * N].reshape(T, N))
    Xp = project_rows(x[1 + T * N:1 + 2 * T * N].reshape(T, N))
    den = float(np.max(np.linalg.norm(X - Xp, axis=-1)))
    if den < 1e-12:
        return 0.0
    blk = M.Block(q * np.eye(N), np.eye(N), np.eye(N))
    num = float(np.max(np.linalg.norm(M.block_forward(X, blk, "identity") - M.block_forward(Xp, blk, "identity"), axis=-1)))
    lam = float(np.exp(log_layer_lipschitz(1.0, 1.0, q, 1.0, softmax_const)))
    return weaken * num / (lam * den)


def adversarial_layer_lipschitz(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, tokens=(2, 3, 4),
                                qs=(0.5, 1.0, 3.0), N=2, trials=60, restarts=2, maxiter=1500):
    """Adversarial search against Λ (Chapter 3, ``ch03-thm-layer``): for every number of tokens ``T`` and
    logit gain ``q``, random draws of ``(X, X')`` and Nelder–Mead from the best ones maximise
    ``weaken · ‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the block with ``W_QK = qI``,
    ``W_V = W_M = I`` and identity activation (rows projected onto the unit ball). ``q`` is held fixed
    per search: left free, the optimiser drifts to ``q → 0``, where the ratio tends to 1 for any
    constant. Run it with a wrong ``softmax_const`` (e.g. 0.25) or ``weaken = 1.1`` to check its power."""
    parts = []
    for T in tokens:
        for q in qs:
            lq = float(np.log(_positive_scalar(q, "q")))
            parts.append(falsify("Λ", lambda x, T=T, lq=lq: _block_ratio(np.concatenate([[lq], x]), T, N,
                                                                          softmax_const, weaken),
                                 lambda r, T=T: r.normal(0.0, 0.6, 2 * T * N), rng,
                                 trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("layer Lipschitz Λ, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb=("QK", "V", "M")):
    """Parameter-perturbation ratio at ``x = (W: 3L N², E: 3L N², X: T N, log ε)`` (single-head network)."""
    from . import model as M

    k = 3 * L * N * N
    Ws = x[:k].reshape(L, 3, N, N)
    Es = x[k:2 * k].reshape(L, 3, N, N) * np.array([a in perturb for a in ("QK", "V", "M")])[None, :, None, None]
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), w, act=act)
    net2 = M.SingleHeadTransformer(tuple(M.Block(*(W + eps * E)) for W, E in zip(Ws, Es)), w, act=act)
    d = abs(M.forward(net, X) - M.forward(net2, X))
    C = np.array([[np.linalg.norm(W, 2) for W in b] for b in Ws])
    D = np.array([[eps * np.linalg.norm(E, 2) for E in b] for b in Es])
    g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=net.L_phi, softmax_const=softmax_const)
    la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
    G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
    bound = float(np.sum(G * D))
    return weaken * d / bound if bound > 0 else 0.0


def adversarial_parameter_perturbation(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2),
                                       N=2, T=2, act="identity", trials=150, restarts=2, maxiter=4000,
                                       perturb=("QK", "V", "M")):
    """Adversarial search against the whole-network parameter-perturbation bound (Chapter 3,
    ``ch03-thm-param``): random draws of weights, perturbation directions, input and ``log ε``,
    then Nelder–Mead from the best, maximising ``weaken·|f_W(X) − f_{W'}(X)| / (‖w‖₂ Σ γ α ‖ΔW‖₂)``
    (``‖w‖₂ = 1``); ``perturb`` names the matrix types that are perturbed (``("QK",)`` isolates the
    softmax constant). Power check: a wrong ``softmax_const`` or ``weaken = 1.1``."""
    parts = []
    for L in depths:
        dim = 6 * L * N * N + T * N + 1

        def sample(r, L=L, dim=dim):
            x = r.normal(0.0, 0.8, dim)
            x[-1] = r.uniform(-8.0, -2.0)
            return x

        parts.append(falsify("param", lambda x, L=L: _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb), sample,
                             rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == ("QK", "V", "M") else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("network parameter perturbation, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def composition_bound(net, net_hat, X, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Both sides of the composition lemma (Chapter 3, ``ch03-thm-compose``) for two single-head networks.

    Pieces ``j = (ℓ, a)``, ``a ∈ (QK, V, M)``, are replaced in order. ``d_j`` is the data-metric distance
    ``max_x ‖x(Ŵ_j − W_j)‖₂`` over the rows ``x`` that enter piece ``j`` when every earlier piece is
    already replaced (the inputs of the cover network: rows of the layer input for QK and V, rows of
    ``φ(Ŷ)`` for M). ``κ_j = ‖w‖₂ γ_j α^{(ℓ)}`` with γ, α from the norms of ``net`` and ``γ_M = 1``
    (the row norm ``≤ B_φ`` is inside ``d_M``). Returns ``(lhs, rhs, d, kappa)`` with
    ``lhs = max_i |f_W(X_i) − f_Ŵ(X_i)|`` and ``rhs = Σ_j κ_j d_j``; the lemma says ``lhs ≤ rhs``.
    """
    from . import model as M

    if net.L != net_hat.L or net.N != net_hat.N or net.act != net_hat.act:
        raise ValueError("net and net_hat must have the same depth, width and activation")
    Xb = np.asarray(X, dtype=np.float64)
    Xb = Xb[None] if Xb.ndim == 2 else Xb
    phi = M.activation(net.act)
    C = np.array([[np.linalg.norm(W, 2) for W in (b.W_QK, b.W_V, b.W_M)] for b in net.blocks])
    g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=net.L_phi, softmax_const=softmax_const)
    la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
    wn = float(np.linalg.norm(net.w))
    Z = project_rows(Xb)
    d, kappa = [], []
    for ell, (b, bh) in enumerate(zip(net.blocks, net_hat.blocks)):
        rows = Z.reshape(-1, net.N)
        d.append(float(np.max(np.linalg.norm(rows @ (bh.W_QK - b.W_QK), axis=1))))
        d.append(float(np.max(np.linalg.norm(rows @ (bh.W_V - b.W_V), axis=1))))
        Y = project_rows(M.attention(Z, bh.W_QK, bh.W_V, net.logit_scale))
        F = phi(Y).reshape(-1, net.N)
        d.append(float(np.max(np.linalg.norm(F @ (bh.W_M - b.W_M), axis=1))))
        kappa += [wn * np.exp(g["QK"][ell] + la[ell]), wn * np.exp(g["V"][ell] + la[ell]), wn * np.exp(la[ell])]
        Z = M.block_forward(Z, bh, net.act, net.logit_scale)
    # the readout of net_hat must equal that of net (a learned readout is one more piece, κ = 1)
    d.append(float(np.max(np.abs(Z[:, 0, :] @ (net_hat.w - net.w)))))
    kappa.append(1.0)
    lhs = float(np.max(np.abs(M.forward(net, Xb) - M.forward(net_hat, Xb))))
    d, kappa = np.array(d), np.array(kappa)
    return lhs, float(np.sum(d * kappa)), d, kappa


def _composition_ratio(x, L, N, T, act, softmax_const, weaken):
    from . import model as M

    k = 3 * L * N * N
    Ws, Es = x[:k].reshape(L, 3, N, N), x[k:2 * k].reshape(L, 3, N, N)
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), w, act=act)
    net_hat = M.SingleHeadTransformer(tuple(M.Block(*(W + eps * E)) for W, E in zip(Ws, Es)), w, act=act)
    lhs, rhs, _, _ = composition_bound(net, net_hat, X, softmax_const)
    return weaken * lhs / rhs if rhs > 0 else 0.0


def falsify_composition(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2), N=2, T=2,
                        acts=("identity", "tanh"), trials=150, restarts=2, maxiter=4000):
    """Random draws, then Nelder–Mead, against the composition lemma (``ch03-thm-compose``):
    ``weaken · max_i|f_W − f_Ŵ| / Σ_j κ_j d_j`` over weights, perturbation directions, input and scale.
    ``weaken = 1.1`` (or a wrong ``softmax_const``) checks the search's power."""
    parts = []
    for L in depths:
        for act in acts:
            dim = 6 * L * N * N + T * N + 1

            def sample(r, dim=dim):
                x = r.normal(0.0, 0.8, dim)
                x[-1] = r.uniform(-8.0, -2.0)
                return x

            parts.append(falsify("compose", lambda x, L=L, act=act: _composition_ratio(x, L, N, T, act, softmax_const,
                                                                                        weaken),
                                 sample, rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("composition (data metric), optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))
