"""Layerwise propagation: per-layer Lipschitz factors Λ, depth weights α, in-layer weights γ (Chapter 3).

Everything is computed in log space so that products over hundreds of layers never overflow.
Notation (Chapter 3, paper Section 4): the single-head block of :mod:`bounds_lib.theory.model` is

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

import numpy as np

from .model import project_rows, softmax_rows
from ..core.logspace import logsumexp
from ..core.validation import check_array, check_bool, check_scalar

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
    "bilinear_logit_bound",
    "multihead_block_forward",
    "composition_bound",
    "multihead_forward",
    "multihead_composition_bound",
]

#: GELU Lipschitz constant as rounded in the released code (the exact value is 1.1289…).
LPHI_GELU_RELEASED = 1.13
#: ℓ∞→ℓ1 Lipschitz constant of softmax used by the released code (hence ``1 + 4 C_QK``).
SOFTMAX_LINF_L1_RELEASED = 2.0
#: Tight ℓ∞→ℓ1 Lipschitz constant of softmax, proved in Chapter 3 (``ch03-lem-softmax``): ``max_q 4q(1-q) = 1``.
SOFTMAX_LINF_L1_TIGHT = 1.0
#: ``check_scalar`` keywords for a positive finite constant (``L_φ``, ``softmax_const``, ``‖w‖₂``, ...).
_POSITIVE = {"min_val": 0.0, "include_boundaries": "neither"}
#: ``check_array`` keywords for spectral norms (one per layer, or per layer and head).
_SPECTRAL_NORMS = {"min_val": 0.0, "allow_empty": False,
                   "what": "spectral norms are finite and >= 0, one value per layer (L >= 1)"}
#: What a log-space input may hold (for the error messages).
_LOG_SPACE = "compute it in log space from finite norms: finite, or -inf for a zero factor"
#: ``log`` of the smallest positive normal float: the floor of ``log K`` (released code).
LOG_TINY = float(np.log(np.finfo(np.float64).tiny))


def _log(a):
    with np.errstate(divide="ignore"):
        return np.log(a)


def log_layer_lipschitz(C_M, C_V, C_QK, L_phi, softmax_const=SOFTMAX_LINF_L1_RELEASED):
    """``log Λ = log[L_φ · C_M · C_V · (1 + 2·softmax_const·C_QK)]`` (Chapter 3, Theorem ``ch03-thm-layer``).

    The Lipschitz factor of one single-head block in ``‖·‖_{2→∞}`` (eq. ``ch03-eq-lambda``), in log space.
    ``softmax_const = 2`` reproduces the released ``1 + 4 C_QK``; ``softmax_const = 1`` is the tight
    constant proved in Chapter 3 (Lemma ``ch03-lem-softmax``).

    Parameters
    ----------
    C_M, C_V, C_QK : float or array_like
        Spectral norms ``‖W^M‖₂, ‖W^V‖₂, ‖W^{QK}‖₂`` (one per layer; arrays broadcast).
    L_phi : float
        The activation's Lipschitz constant ``L_φ > 0``.
    softmax_const : float
        The ℓ∞→ℓ1 Lipschitz constant ``c > 0`` of softmax.

    Returns
    -------
    float or numpy.ndarray
        ``log Λ`` per layer (``-inf`` where a norm is 0).

    Raises
    ------
    TypeError
        A constant is a bool or not a real number, or a norm array is not numeric.
    ValueError
        A norm is negative, NaN or infinite (or none is given); a constant is not positive and finite.

    Examples
    --------
    >>> import math
    >>> round(math.exp(log_layer_lipschitz(1.0, 2.0, 0.5, 1.0, softmax_const=1.0)), 12)   # 1·1·2·(1 + 2·0.5)
    4.0
    """
    L_phi = check_scalar(L_phi, "L_phi", float, **_POSITIVE)
    c = check_scalar(softmax_const, "softmax_const", float, **_POSITIVE)
    C_M, C_V, C_QK = np.broadcast_arrays(check_array(C_M, "C_M", **_SPECTRAL_NORMS),
                                         check_array(C_V, "C_V", **_SPECTRAL_NORMS),
                                         check_array(C_QK, "C_QK", **_SPECTRAL_NORMS))
    out = _log_lambda(C_M, C_V, C_QK, L_phi, c)
    return out if out.ndim else float(out)


def _log_lambda(C_M, C_V, C_QK, L_phi, c):
    """:func:`log_layer_lipschitz` on validated float arrays and constants (also the searches' inner loop)."""
    return np.log(L_phi) + _log(C_M) + _log(C_V) + np.log1p(2.0 * c * C_QK)


def log_layer_lipschitz_multihead(C_Min, C_Mout, C_V_heads, C_QK_heads, L_phi=LPHI_GELU_RELEASED,
                                  softmax_const=SOFTMAX_LINF_L1_RELEASED):
    """``log Λ_k = log[L_φ · C(M_in) · C(M_out) · Σ_h C(Ṽ_h)(1 + 2·softmax_const·C(QK_h))]``.

    ``C_Min, C_Mout``: shape ``(L,)``; ``C_V_heads, C_QK_heads``: shape ``(L, H)``. Released
    BERT adaptation of the released code with ``softmax_const = 2``; the head sum is a log-sum-exp.
    """
    L_phi = check_scalar(L_phi, "L_phi", float, **_POSITIVE)
    c = check_scalar(softmax_const, "softmax_const", float, **_POSITIVE)
    Cmi, Cmo = check_array(C_Min, "C_Min", **_SPECTRAL_NORMS), check_array(C_Mout, "C_Mout", **_SPECTRAL_NORMS)
    V = check_array(C_V_heads, "C_V_heads", **_SPECTRAL_NORMS)
    QK = check_array(C_QK_heads, "C_QK_heads", **_SPECTRAL_NORMS)
    if V.shape != QK.shape or V.ndim != 2:
        raise ValueError(f"C_V_heads and C_QK_heads must both have shape (L, H), got {V.shape} and {QK.shape}")
    if Cmi.shape != (V.shape[0],) or Cmo.shape != (V.shape[0],):
        raise ValueError(f"C_Min and C_Mout must have shape ({V.shape[0]},) to match (L, H) = {V.shape}")
    return _log_lambda_mh(Cmi, Cmo, V, QK, L_phi, c)


def _log_lambda_mh(Cmi, Cmo, V, QK, L_phi, c):
    """:func:`log_layer_lipschitz_multihead` on validated float arrays and constants (also the searches' inner loop)."""
    lse = logsumexp(_log(V) + np.log1p(2.0 * c * QK), axis=1)  # the sum over heads in log space (-inf: no head)
    return np.log(L_phi) + _log(Cmi) + _log(Cmo) + lse


def log_alpha(log_Lambda):
    """``log α^{(ℓ)} = Σ_{k=ℓ+1}^{L-1} log Λ_k`` for ``ℓ = 0..L-1`` (0-based); the last entry is 0.

    ``α^{(ℓ)}`` is the Lipschitz factor of the layers after ``ℓ`` (Chapter 3, Definition ``ch03-def-weights``).

    Parameters
    ----------
    log_Lambda : array_like, shape (L,)
        ``log Λ_k`` of every layer (finite, or ``-inf`` for a zero factor).

    Returns
    -------
    numpy.ndarray, shape (L,)
        ``log α^{(ℓ)}``.

    Raises
    ------
    TypeError
        ``log_Lambda`` is a bool or not numeric.
    ValueError
        ``log_Lambda`` is empty, not 1-D, or holds NaN or ``+inf``.

    Examples
    --------
    >>> log_alpha([1.0, 2.0, 3.0]).tolist()
    [5.0, 3.0, 0.0]
    """
    a = check_array(log_Lambda, "log_Lambda", allow_neg_inf=True, allow_empty=False,
                    what="log of per-layer factors: finite, or -inf for a zero factor")
    if a.ndim != 1:
        raise ValueError(f"log_Lambda must be a 1-D array with one entry per layer (L >= 1), got shape {a.shape}")
    return _log_alpha(a)


def _log_alpha(a):
    """:func:`log_alpha` of a validated 1-D float array (also the searches' inner loop)."""
    with np.errstate(invalid="ignore"):
        tail = np.cumsum(a[::-1])[::-1]  # tail[ℓ] = Σ_{k ≥ ℓ} log Λ_k
    return np.append(tail[1:], 0.0)


def log_gamma(C_M, C_V, C_QK, L_phi=None, softmax_const=SOFTMAX_LINF_L1_RELEASED, phi_bound=1.0):
    """In-layer weights ``log γ`` of the single-head block: a dict with keys ``"QK"``, ``"V"``, ``"M"``.

    ``L_phi=None`` gives the released form (no ``L_φ``): ``γ_QK = c·C_V·C_M``, ``γ_V = C_M``, ``γ_M = 1``.
    With ``L_phi`` given, the form proved in Chapter 3 (Theorem ``ch03-thm-param``, eq. ``ch03-eq-gamma``):
    ``γ_QK = c·C_V·L_φ·C_M``, ``γ_V = L_φ·C_M``, ``γ_M = B_φ``, where ``B_φ = sup_y ‖φ(y)‖₂/‖y‖₂``
    (``phi_bound``; 1 for GELU, ReLU, tanh and the identity since ``|φ(x)| ≤ |x|``). Here
    ``c = softmax_const`` multiplies a logit perturbation ``|x_t ΔW x_sᵀ| ≤ ‖ΔW‖₂`` (factor 1).

    Parameters
    ----------
    C_M, C_V, C_QK : float or array_like
        Spectral norms per layer (broadcast).
    L_phi : float, optional
        ``L_φ > 0``; ``None`` for the released form.
    softmax_const : float
        ``c > 0``.
    phi_bound : float
        ``B_φ > 0`` (used only with ``L_phi``).

    Returns
    -------
    dict of str to float or numpy.ndarray
        ``log γ`` per matrix type.

    Raises
    ------
    TypeError
        A constant is a bool or not a real number, or a norm array is not numeric.
    ValueError
        A norm is negative or non-finite; a constant is not positive and finite.

    Examples
    --------
    >>> g = log_gamma(2.0, 3.0, 1.0, L_phi=1.0, softmax_const=1.0)
    >>> {k: round(float(v), 6) for k, v in g.items()}   # log(1·3·1·2), log 2, log 1
    {'QK': 1.791759, 'V': 0.693147, 'M': 0.0}
    """
    c = check_scalar(softmax_const, "softmax_const", float, **_POSITIVE)
    lp = 0.0 if L_phi is None else np.log(check_scalar(L_phi, "L_phi", float, **_POSITIVE))
    lb = 0.0 if L_phi is None else np.log(check_scalar(phi_bound, "phi_bound", float, **_POSITIVE))
    C_M, C_V, _ = np.broadcast_arrays(check_array(C_M, "C_M", **_SPECTRAL_NORMS),
                                      check_array(C_V, "C_V", **_SPECTRAL_NORMS),
                                      check_array(C_QK, "C_QK", **_SPECTRAL_NORMS))
    out = _log_gamma(C_M, C_V, c, lp, lb)
    return {k: (v if np.ndim(v) else float(v)) for k, v in out.items()}


def _log_gamma(C_M, C_V, c, lp, lb):
    """:func:`log_gamma` on validated float arrays, ``c``, ``lp = log L_φ`` and ``lb = log B_φ`` (0, 0 for the
    released form); also the searches' inner loop."""
    return {"QK": np.log(c) + _log(C_V) + lp + _log(C_M), "V": lp + _log(C_M), "M": lb + np.zeros_like(C_M)}


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
    c = check_scalar(softmax_const, "softmax_const", float, **_POSITIVE)
    Cmi, Cmo = check_array(C_Min, "C_Min", **_SPECTRAL_NORMS), check_array(C_Mout, "C_Mout", **_SPECTRAL_NORMS)
    V, QK = check_array(C_V_h, "C_V_h", **_SPECTRAL_NORMS), check_array(C_QK_h, "C_QK_h", **_SPECTRAL_NORMS)
    Cmi0, Cmo0 = Cmi, Cmo  # per-layer shapes for the M_in / M_out weights
    if V.ndim > Cmi.ndim:  # per-head arrays (L, H) against per-layer (L,)
        Cmi = Cmi.reshape(Cmi.shape + (1,) * (V.ndim - Cmi.ndim))
        Cmo = Cmo.reshape(Cmo.shape + (1,) * (V.ndim - Cmo.ndim))
    try:
        np.broadcast_shapes(Cmi.shape, Cmo.shape, V.shape, QK.shape)
    except ValueError:
        raise ValueError(f"shapes do not broadcast: C_Min {Cmi.shape}, C_Mout {Cmo.shape}, "
                         f"C_V_h {V.shape}, C_QK_h {QK.shape}") from None
    if L_phi is not None:
        L_phi = check_scalar(L_phi, "L_phi", float, **_POSITIVE)
        phi_bound = check_scalar(phi_bound, "phi_bound", float, **_POSITIVE)
    out = _log_gamma_mh(Cmi0, Cmo0, V, QK, c, L_phi, phi_bound)
    return {k: (v if np.ndim(v) else float(v)) for k, v in out.items()}


def _log_gamma_mh(Cmi, Cmo, V, QK, c, L_phi, phi_bound):
    """:func:`log_gamma_multihead` on validated arrays (per layer ``Cmi``, ``Cmo``; per head ``V``, ``QK``) and
    constants; also the searches' inner loop. Each log is taken once (the same value wherever it enters)."""
    with np.errstate(divide="ignore"):
        lmi0, lmo0, lv = np.log(Cmi), np.log(Cmo), np.log(V)
    lmi, lmo = lmi0, lmo0
    if V.ndim > Cmi.ndim:
        lmi = np.reshape(lmi0, Cmi.shape + (1,) * (V.ndim - Cmi.ndim))
        lmo = np.reshape(lmo0, Cmo.shape + (1,) * (V.ndim - Cmo.ndim))
    if L_phi is None:
        lp, m_out = 0.0, np.zeros(np.broadcast_shapes(Cmi.shape, Cmo.shape))
    else:
        lp = np.log(L_phi)
        m_out = np.log(phi_bound) + lmi0 + 0.0 * Cmo
    return {
        "QK": np.log(c) + lv + lmo + lmi + lp + 0.0 * QK,
        "V": lmo + lmi + lp + 0.0 * V,
        "M_in": lmo0 + lp + 0.0 * Cmi,
        "M_out": m_out,
    }


def log_scale_K(log_gamma, log_alpha, L):
    """Released ``log K = log γ + log α + log L``, floored at :data:`LOG_TINY` (Chapter 3, the released scale).

    Chapter 3 (Theorem ``ch03-thm-compose``) shows that this ``K`` misses the matrix count, the readout norm
    and a factor 2; the proved scale is :func:`log_effective_scale`.

    Parameters
    ----------
    log_gamma : float, array_like or dict
        ``log γ`` (a dict of arrays gives a dict).
    log_alpha : float or array_like
        ``log α`` (broadcast against ``log_gamma``).
    L : int
        The number of layers, ``>= 1``.

    Returns
    -------
    float, numpy.ndarray or dict
        ``log K``.

    Raises
    ------
    TypeError
        ``L`` is not an integer (``2.0`` and ``True`` included), or an array is not numeric.
    ValueError
        ``L < 1``; ``log_gamma`` or ``log_alpha`` holds NaN or ``+inf``.

    Examples
    --------
    >>> import math
    >>> round(math.exp(log_scale_K(math.log(3.0), math.log(5.0), 4)), 9)   # 3·5·4
    60.0
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    if isinstance(log_gamma, dict):
        return {k: log_scale_K(v, log_alpha, L) for k, v in log_gamma.items()}
    g = check_array(log_gamma, "log_gamma", allow_neg_inf=True, what=_LOG_SPACE)
    a = check_array(log_alpha, "log_alpha", allow_neg_inf=True, what=_LOG_SPACE)
    out = np.maximum(g + a + np.log(L), LOG_TINY)
    return out if out.ndim else float(out)


def matrices_per_layer(heads=None):
    """``A``, the number of weight matrices per layer (Chapter 3, Theorem ``ch03-thm-compose``).

    3 for the single-head block (QK, V, M) and ``2H + 2`` for ``H`` heads (``H`` QK, ``H`` Ṽ, ``M_in``,
    ``M_out``).

    Raises
    ------
    TypeError
        ``heads`` is not ``None`` or an integer (``2.0`` and ``True`` included).
    ValueError
        ``heads < 1``.

    Examples
    --------
    >>> matrices_per_layer(), matrices_per_layer(12)
    (3, 26)
    """
    if heads is None:
        return 3
    return 2 * check_scalar(heads, "heads (None for the single-head block)", int, min_val=1) + 2


def log_effective_scale(log_gamma, log_alpha, L, matrices_per_layer, readout_norm, learned_readout=True):
    """``log K = log 2 + log J + log ‖w‖₂ + log γ + log α`` with ``J = L·A + [learned_readout]`` pieces.

    Covering matrix ``(ℓ, a)`` at radius ``ε/K^{(ℓ,a)}`` covers the network output at radius ``ε``
    (Chapter 3, Theorem ``ch03-thm-compose``): the output moves by ``Σ_j ‖w‖₂ γ_j α_j d_j`` and each of the
    ``J`` pieces gets ``ε/J``; the factor 2 makes the per-matrix covers internal. Floored at
    :data:`LOG_TINY` like :func:`log_scale_K`.

    Parameters
    ----------
    log_gamma : float, array_like or dict
        ``log γ`` (a dict gives a dict).
    log_alpha : float or array_like
        ``log α``.
    L : int
        The number of layers, ``>= 1``.
    matrices_per_layer : int
        ``A``: 3 for the single-head block, ``2H + 2`` for ``H`` heads (:func:`matrices_per_layer`).
    readout_norm : float
        ``‖w‖₂ > 0``.
    learned_readout : bool
        Whether the readout is one more piece.

    Returns
    -------
    float, numpy.ndarray or dict
        ``log K``.

    Raises
    ------
    TypeError
        ``L`` or ``matrices_per_layer`` is not an integer, ``learned_readout`` is not a bool, or another
        argument is not numeric.
    ValueError
        A count below 1, ``readout_norm`` not positive and finite, NaN or ``+inf`` in the logs.

    Examples
    --------
    >>> import math
    >>> round(math.exp(log_effective_scale(math.log(3.0), math.log(5.0), 4, 3, 0.5)), 9)   # 2·13·0.5·15
    195.0
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    A = check_scalar(matrices_per_layer, "matrices_per_layer (3 single head, 2H+2 for H heads)", int, min_val=1)
    w = check_scalar(readout_norm, "readout_norm", float, **_POSITIVE)
    learned_readout = check_bool(learned_readout, "learned_readout")
    J = L * A + int(learned_readout)
    if isinstance(log_gamma, dict):
        return {k: log_effective_scale(v, log_alpha, L, A, w, learned_readout) for k, v in log_gamma.items()}
    g = check_array(log_gamma, "log_gamma", allow_neg_inf=True, what=_LOG_SPACE)
    a = check_array(log_alpha, "log_alpha", allow_neg_inf=True, what=_LOG_SPACE)
    out = np.maximum(np.log(2.0 * J * w) + g + a, LOG_TINY)
    return out if out.ndim else float(out)


def radius_allocation(eps, log_K):
    """Radius ``ε / K`` given to a matrix with effective scale ``K`` (Chapter 3, ``ch03-thm-compose``),
    in log space. With ``K`` from :func:`log_effective_scale` the pieces' contributions
    ``‖w‖₂ γ α · ε/K`` add up to at most ``ε/2`` (internal covers at radius ``ε/K`` each). With the
    released ``K = γαL`` they add up to ``A·‖w‖₂·ε`` for ``A`` matrices per layer, not ``ε``.
    """
    eps = check_scalar(eps, "eps (the radius ε)", float, **_POSITIVE)
    k = check_array(log_K, "log_K", allow_inf=True)
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


def bilinear_logit_bound(spectral_norm, theta, factor=2.0):
    """``factor·‖W‖₂·θ`` with ``factor = 2``: the change of a logit ``x_t W x_sᵀ`` when both rows (in the unit
    ball) move by at most ``θ`` (Chapter 3, Lemma ``ch03-lem-logits``; ``factor`` is exposed for the witness's
    power check, :func:`bounds_lib.checks.ch3_witnesses.logit_witness`)."""
    C = check_scalar(spectral_norm, "spectral_norm", float, min_val=0.0)
    th = check_scalar(theta, "theta", float, min_val=0.0)
    return check_scalar(factor, "factor", float, **_POSITIVE) * C * th


def _row_norms(A):
    """``np.linalg.norm(A, axis=-1)`` of a real float array, without its dispatch: the same ufuncs in the
    same order (``√Σ a²`` along the last axis), so the same bits. For the searches' inner loops."""
    return np.sqrt(np.add.reduce(A * A, axis=-1))


def _spectral_norms(stack):
    """``‖W‖₂`` of every matrix of a stack ``(..., m, n)``: one batched LAPACK call, the same ``gesdd`` per
    matrix as ``np.linalg.norm(W, 2)`` and bitwise its value (pinned in ``tests/test_searches_speed.py``)."""
    return np.linalg.svd(stack, compute_uv=False).max(axis=-1)


def multihead_block_forward(X, QK_heads, V_heads, M_in, M_out, phi, logit_scale=1.0):
    """Multi-head block ``Π_norm(φ(Π_norm(Σ_h softmax(s·X QK_h Xᵀ) X Ṽ_h) M_in) M_out)`` (batched X).

    ``phi`` is an element-wise callable. Used in Chapter 3 to falsify the multi-head γ.
    """
    return _mh_block(np.asarray(X, dtype=np.float64), np.asarray(QK_heads), np.asarray(V_heads), M_in, M_out, phi,
                     logit_scale)[2]


def _mh_block(X, QK, V, M_in, M_out, phi, logit_scale=1.0):
    """:func:`multihead_block_forward` on arrays: the heads ``QK``, ``V`` stacked on axis −3, broadcast against the
    batch axes of ``X`` (so a stack of blocks runs as one pass, as the searches do with a network and its
    perturbation); each slice is the same products in the same order. Returns ``(Y, φ(Y M_in), the output)``."""
    Xh = X[..., None, :, :]
    heads = softmax_rows((logit_scale * (Xh @ QK)) @ np.swapaxes(Xh, -1, -2)) @ (Xh @ V)
    A = 0.0
    for h in range(heads.shape[-3]):
        A = A + heads[..., h, :, :]
    Y = project_rows(A)
    F = phi(Y @ M_in)
    return Y, F, project_rows(F @ M_out)


def composition_bound(net, net_hat, X, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Both sides of the composition lemma (Chapter 3, ``ch03-thm-compose``) for two single-head networks.

    Pieces ``j = (ℓ, a)``, ``a ∈ (QK, V, M)``, are replaced in order. ``d_j`` is the data-metric distance
    ``max_x ‖x(Ŵ_j − W_j)‖₂`` over the rows ``x`` that enter piece ``j`` when every earlier piece is
    already replaced (the inputs of the cover network: rows of the layer input for QK and V, rows of
    ``φ(Ŷ)`` for M). ``κ_j = ‖w‖₂ γ_j α^{(ℓ)}`` with γ, α from the norms of ``net`` and ``γ_M = 1``
    (the row norm ``≤ B_φ`` is inside ``d_M``). Returns ``(lhs, rhs, d, kappa)`` with
    ``lhs = max_i |f_W(X_i) − f_Ŵ(X_i)|`` and ``rhs = Σ_j κ_j d_j``; the lemma says ``lhs ≤ rhs``.
    """
    if (net.L != net_hat.L or net.N != net_hat.N or net.act != net_hat.act
            or net.logit_scale != net_hat.logit_scale):
        raise ValueError("net and net_hat must have the same depth, width, activation and logit scale")
    mats, mats_hat = (np.array([(b.W_QK, b.W_V, b.W_M) for b in n.blocks]) for n in (net, net_hat))
    return _composition_sides(mats, mats_hat, net.w, net_hat.w, X, net.act, net.logit_scale, softmax_const)


def _composition_sides(mats, mats_hat, w, w_hat, X, act, logit_scale, softmax_const):
    """:func:`composition_bound` on the matrices ``mats``, ``mats_hat`` (shape ``(L, 3, N, N)``, types QK, V,
    M) and readouts of the two networks; the adversarial searches of Chapter 3 call it directly."""
    from . import model as M

    Xb = np.asarray(X, dtype=np.float64)
    Xb = Xb[None] if Xb.ndim == 2 else Xb
    L, N = mats.shape[0], mats.shape[-1]
    phi, L_phi = M.activation(act), M.ACTIVATION_LIPSCHITZ[act]
    C = _spectral_norms(mats)
    c = float(softmax_const)
    g = _log_gamma(C[:, 2], C[:, 1], c, np.log(L_phi), np.log(1.0))
    la = _log_alpha(_log_lambda(C[:, 2], C[:, 1], C[:, 0], L_phi, c))
    wn = float(np.linalg.norm(w))
    Z = np.array((project_rows(Xb),) * 2)  # net's pass and net_hat's, stacked: each slice the same products
    pairs, D = np.array((mats, mats_hat)).transpose(1, 2, 0, 3, 4)[:, :, :, None], mats_hat - mats  # [ℓ, a]: (2,1,N,N)
    d, kappa = [], []
    for ell in range(L):
        dQV = _row_norms(Z[1].reshape(-1, N) @ D[ell, :2]).max(axis=-1)  # rows of net_hat's layer input
        # the layer of the hybrid: the block of net_hat (the loop of model.block_forward, its φ(Ŷ) kept)
        F = phi(project_rows(M.attention(Z, pairs[ell, 0], pairs[ell, 1], logit_scale)))
        d += [float(dQV[0]), float(dQV[1]), float(np.max(_row_norms(F[1].reshape(-1, N) @ D[ell, 2])))]
        kappa += [wn * np.exp(g["QK"][ell] + la[ell]), wn * np.exp(g["V"][ell] + la[ell]), wn * np.exp(la[ell])]
        Z = project_rows(F @ pairs[ell, 2])
    # the readout of net_hat must equal that of net (a learned readout is one more piece, κ = 1)
    d.append(float(np.max(np.abs(Z[1, :, 0, :] @ (w_hat - w)))))
    kappa.append(1.0)
    # Z[0] is net's last hidden state, Z[1] net_hat's: their readouts are f_W and f_Ŵ (model.forward's last line)
    lhs = float(np.max(np.abs(Z[0, :, 0, :] @ w - Z[1, :, 0, :] @ w_hat)))
    d, kappa = np.array(d), np.array(kappa)
    return lhs, float(np.sum(d * kappa)), d, kappa


def multihead_forward(layers, w, X, phi):
    """Multi-head surrogate network (Chapter 3, ``ch03-def-mh-block``): ``Π_norm`` on the input, then
    :func:`multihead_block_forward` per layer ``(QK_heads, V_heads, M_in, M_out)``, readout ``w`` on
    the first row. ``X``: shape ``(T, N)`` or ``(batch, T, N)``."""
    Z = project_rows(np.asarray(X, dtype=np.float64))
    for QK, V, Mi, Mo in layers:
        Z = multihead_block_forward(Z, QK, V, Mi, Mo, phi)
    return Z[..., 0, :] @ w


def multihead_composition_bound(layers, layers_hat, w, X, phi, L_phi, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Both sides of the multi-head composition theorem (Chapter 3, ``ch03-thm-compose-mh``).

    Pieces per layer in the order ``QK_1..QK_H, Ṽ_1..Ṽ_H, M_in, M_out``; ``d_j = max_x ‖x(Ŵ_j − W_j)‖₂``
    over the rows entering piece ``j`` once every earlier piece is replaced (layer input rows for
    ``QK_h``, ``Ṽ_h``; ``ŷ = Π_norm(Σ_h P̂_h Z Ṽ̂_h)`` for ``M_in``; ``φ(ŷ M̂_in)`` for ``M_out``), and
    ``κ_j = ‖w‖₂ γ_j α^{(ℓ)}`` with ``γ_{QK_h} = c C(Ṽ_h) L_φ C(M_in) C(M_out)``,
    ``γ_{Ṽ_h} = L_φ C(M_in) C(M_out)``, ``γ_{M_in} = L_φ C(M_out)``, ``γ_{M_out} = 1`` and the multi-head
    ``Λ`` — all from the norms of ``layers`` (the later pieces of every hybrid). ``lhs = max_i |f_W − f_Ŵ|``,
    ``rhs = Σ_j κ_j d_j``; the theorem says ``lhs ≤ rhs``. Returns ``(lhs, rhs)``.
    """
    W, W_hat = ([np.array([lay[i] for lay in ls]) for i in range(4)] for ls in (layers, layers_hat))
    CQ, CV, Cmi, Cmo = norms = _mh_norms(W)
    la = log_alpha(log_layer_lipschitz_multihead(Cmi, Cmo, CV, CQ, L_phi, softmax_const))
    return _mh_composition_sides(W, W_hat, w, X, phi, L_phi, float(softmax_const), norms, la)


def _mh_norms(W):
    """``‖·‖₂`` of the stacks ``W = (QK (L, H, N, N), Ṽ (L, H, N, N), M_in (L, N, N_f), M_out (L, N_f, N))``: one
    batched SVD (one per shape when ``N_f ≠ N``); contiguous arrays ``(L, H)``, ``(L, H)``, ``(L,)``, ``(L,)``."""
    (QK, V, Mi, Mo), H = W, W[0].shape[1]
    if Mi.shape[1:] == Mo.shape[1:] == QK.shape[2:]:
        S = _spectral_norms(np.concatenate((QK, V, Mi[:, None], Mo[:, None]), axis=1))
    else:
        S = np.concatenate((_spectral_norms(np.concatenate((QK, V), axis=1)), _spectral_norms(Mi)[:, None],
                            _spectral_norms(Mo)[:, None]), axis=1)
    return S[:, :H].copy(), S[:, H:2 * H].copy(), S[:, 2 * H].copy(), S[:, 2 * H + 1].copy()


def _mh_composition_sides(W, W_hat, w, X, phi, L_phi, c, norms, la):
    """:func:`multihead_composition_bound` on the stacks ``W``, ``W_hat`` (as :func:`_mh_norms`), given ``W``'s norms
    and ``log α``; the searches call it directly. Both networks run as one stacked pass of :func:`_mh_block`."""
    CQ, CV, Cmi, Cmo = norms
    L, H = W[0].shape[:2]
    wn = float(np.linalg.norm(w))
    Xb = np.asarray(X, dtype=np.float64)
    Z = np.array((project_rows(Xb[None] if Xb.ndim == 2 else Xb),) * 2)  # W's pass and Ŵ's (the hybrids' later pieces)
    pairs = [np.array(p) for p in zip(W, W_hat)]  # (2, L, …): W's, Ŵ's
    D = [b - a for a, b in zip(W, W_hat)]
    dist = lambda R, D: _row_norms(R.reshape(-1, D.shape[-2]) @ D).max(axis=-1)  # noqa: E731
    rhs = 0.0
    for ell in range(L):
        a = wn * np.exp(la[ell])
        dQV = dist(Z[1], np.concatenate((D[0][ell], D[1][ell])))  # every QK_h, then every Ṽ_h
        for h in range(H):
            rhs += a * c * CV[ell, h] * L_phi * Cmi[ell] * Cmo[ell] * float(dQV[h])
            rhs += a * L_phi * Cmi[ell] * Cmo[ell] * float(dQV[H + h])
        Y, F, Z = _mh_block(Z, *(p[:, ell, None] for p in pairs), phi)
        rhs += a * L_phi * Cmo[ell] * float(dist(Y[1], D[2][ell]))
        rhs += a * float(dist(F[1], D[3][ell]))
    # Z[0] is now W's last hidden state, Z[1] Ŵ's: their readouts are f_W and f_Ŵ (multihead_forward's last line)
    f = Z[..., 0, :] @ w
    return float(np.max(np.abs(f[0] - f[1]))), rhs
