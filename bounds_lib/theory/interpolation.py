"""Matrix parameter interpolation: split W at a threshold τ and cover the two parts (Chapter 2).

For ``W ∈ ℝ^{d×d'}`` with singular values σ_j and ``S_p(W) = Σ σ_j^p ≤ C_s`` (Chapter 2, ``ch02-def-split``):

* ``W₁ = Σ_{σ_j > τ} σ_j u_j v_jᵀ`` (leading part), ``W₂ = W − W₁`` (tail);
* ``rank(W₁) ≤ S_p/τ^p`` (``ch02-lem-rank``), ``‖W₂‖_F ≤ τ √min(d,d')`` and ``‖W₂‖_F² ≤ τ^{2−p} S_p``
  (``ch02-lem-tail``);
* entropy of the low-rank part ``(C_s/τ^p)(d+d')`` and of the Frobenius part ``τ² min(d,d')·d'/ε²``
  (log factors dropped); balancing them gives
  ``τ* = (C_s(d+d') ε² / (min(d,d')·d'))^{1/(p+2)}`` and the log-covering bound
  ``([C_s(d+d')]² (min(d,d')·d')^p / ε^{2p})^{1/(p+2)}`` (``ch02-thm-covering``).

The functions take the shape as ``l = d`` (rows) and ``m = d'`` (columns). Every argument is checked
with :mod:`bounds_lib.core.validation` (``TypeError`` for a wrong type, ``ValueError`` for a wrong value).
The randomized and adversarial checks of the split lemmas are :func:`bounds_lib.checks.ch2_split.falsify_split`
and :func:`bounds_lib.checks.ch2_split.adversarial_split`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .norms import as_matrix, validate_p
from ..core.validation import check_array, check_scalar

__all__ = [
    "SVDSplit",
    "svd_split",
    "rank_bound",
    "tail_bound_dimension",
    "tail_bound_schatten",
    "entropy_low_rank",
    "entropy_frobenius",
    "balancing_tau",
    "log_covering_at_tau",
    "log_covering_bound",
    "dudley_integral_exponent",
    "entropy_low_rank_volumetric",
    "entropy_tail_maurey",
    "log_covering_p0",
    "log_covering_split",
    "dudley_term_p0",
]


#: The names the error messages give the parameters (what each one is in Chapter 2).
_TAU, _EPS = "tau (the threshold τ)", "eps (the radius ε)"
_C_S, _C_2 = "C_s (the Schatten budget)", "C_2 (the spectral-norm bound)"
_S_P = "S_p (a Schatten quantity Σσ^p)"
#: ``check_array`` keywords for a positive finite number or array of them.
_POSITIVE = {"min_val": 0.0, "include_boundaries": "neither"}

#: Relative slack in ``⌊C_s/τ^p⌋``: a budget that is an integer up to rounding (``C_s/τ^p = 2·(1 − 1e-16)``)
#: keeps that integer rank instead of dropping one.
FLOOR_RTOL = 1e-12


def _scalar(a):
    """A validated 0-d array as a Python ``float`` (what the chapters print); arrays unchanged."""
    return a if a.ndim else float(a)


@dataclass(frozen=True)
class SVDSplit:
    """``W = W1 + W2`` with ``W1`` the singular directions with ``σ > tau``, ``W2`` the rest."""

    W1: np.ndarray
    W2: np.ndarray
    sigma: np.ndarray
    tau: float
    rank_W1: int


def svd_split(W, tau):
    """Split ``W`` at ``τ``: ``W₁ = Σ_{σ_j>τ} σ_j u_j v_jᵀ``, ``W₂ = W − W₁`` (Chapter 2, ``ch02-def-split``).

    Parameters
    ----------
    W : array_like, shape (d, d')
        A real matrix.
    tau : float
        The threshold ``τ > 0``; a singular value equal to ``τ`` goes to the tail ``W₂``.

    Returns
    -------
    SVDSplit
        ``W1``, ``W2``, all singular values ``sigma``, ``tau`` and ``rank_W1``.

    Raises
    ------
    TypeError
        ``tau`` is a bool or not numeric.
    ValueError
        ``tau`` is not positive and finite; ``W`` is not a finite real 2-D array.

    Examples
    --------
    >>> s = svd_split([[2.0, 0.0], [0.0, 0.5]], 1.0)
    >>> s.rank_W1, s.W2.tolist()
    (1, [[0.0, 0.0], [0.0, 0.5]])
    """
    A = as_matrix(W)
    tau = _scalar(check_array(tau, _TAU, **_POSITIVE))
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    keep = s > tau
    W1 = (U[:, keep] * s[keep]) @ Vt[keep]
    return SVDSplit(W1=W1, W2=A - W1, sigma=s, tau=float(tau), rank_W1=int(np.count_nonzero(keep)))


def rank_bound(S_p, tau, p):
    """``S_p(W)/τ^p`` ≥ ``rank(W₁)`` (Chapter 2, Lemma ``ch02-lem-rank``: Markov's inequality on the spectrum).

    Parameters
    ----------
    S_p : float or array_like
        ``S_p(W) ≥ 0`` (at ``p = 0`` the rank).
    tau : float or array_like
        The threshold ``τ > 0``.
    p : float
        The Schatten index, in ``[0, 2]``.

    Returns
    -------
    float or numpy.ndarray
        The bound (arrays broadcast).

    Raises
    ------
    TypeError
        An argument is a bool or not numeric.
    ValueError
        ``S_p`` negative or non-finite, ``τ`` not positive and finite, ``p`` outside ``[0, 2]``.

    Examples
    --------
    >>> float(rank_bound(3.0, 0.5, 1.0))
    6.0
    """
    p = validate_p(p)
    return check_array(S_p, _S_P, min_val=0.0) / _scalar(check_array(tau, _TAU, **_POSITIVE)) ** p


def tail_bound_dimension(tau, shape):
    """``τ · √min(d, d')`` ≥ ``‖W₂‖_F`` (Chapter 2, Lemma ``ch02-lem-tail``: every tail singular value is ≤ τ).

    Parameters
    ----------
    tau : float or array_like
        The threshold ``τ > 0``.
    shape : tuple of int
        ``(d, d')``, the shape of ``W``.

    Returns
    -------
    float or numpy.ndarray
        The bound.

    Raises
    ------
    TypeError
        A dimension is not an integer, or ``tau`` is a bool or not numeric.
    ValueError
        A dimension is below 1, or ``τ`` is not positive and finite.

    Examples
    --------
    >>> float(tail_bound_dimension(0.5, (4, 9)))   # 0.5·√4
    1.0
    """
    l, m = (check_scalar(d, "matrix dimension", int, min_val=1) for d in shape)
    return _scalar(check_array(tau, _TAU, **_POSITIVE)) * np.sqrt(min(l, m))


def tail_bound_schatten(tau, S_p, p):
    """``(τ^{2−p} S_p(W))^{1/2}`` ≥ ``‖W₂‖_F`` for ``p ∈ [0, 2]`` (Chapter 2, Lemma ``ch02-lem-tail``).

    On the tail ``σ² = σ^p σ^{2−p} ≤ σ^p τ^{2−p}``.

    Parameters
    ----------
    tau : float or array_like
        The threshold ``τ > 0``.
    S_p : float or array_like
        ``S_p(W) ≥ 0``.
    p : float
        The Schatten index, in ``[0, 2]``.

    Returns
    -------
    float or numpy.ndarray
        The bound.

    Raises
    ------
    TypeError
        An argument is a bool or not numeric.
    ValueError
        ``τ`` not positive and finite, ``S_p`` negative or non-finite, ``p`` outside ``[0, 2]``.

    Examples
    --------
    >>> round(float(tail_bound_schatten(2.0, 3.0, 1.0)) ** 2, 12)   # τ^{2-p}·S_p = 2·3
    6.0
    """
    p = validate_p(p)
    return np.sqrt(_scalar(check_array(tau, _TAU, **_POSITIVE)) ** (2.0 - p) * check_array(S_p, _S_P, min_val=0.0))


def entropy_low_rank(tau, C_s, p, l, m):
    """``(C_s/τ^p)(d + d')`` — entropy of rank-``C_s/τ^p`` matrices (log factor dropped)."""
    p = validate_p(p)
    C_s, tau = _scalar(check_array(C_s, _C_S, **_POSITIVE)), _scalar(check_array(tau, _TAU, **_POSITIVE))
    return C_s / tau ** p * (check_scalar(l, "l", int, min_val=1) + check_scalar(m, "m", int, min_val=1))


def entropy_frobenius(tau, eps, l, m):
    """``τ² min(d,d')·d' / ε²`` — Maurey-type entropy of the tail's Frobenius ball (log factor dropped)."""
    l, m = check_scalar(l, "l", int, min_val=1), check_scalar(m, "m", int, min_val=1)
    tau, eps = _scalar(check_array(tau, _TAU, **_POSITIVE)), _scalar(check_array(eps, _EPS, **_POSITIVE))
    return tau ** 2 * min(l, m) * m / eps ** 2


def balancing_tau(eps, C_s, p, l, m):
    """``τ* = (C_s(d+d') ε² / (min(d,d')·d'))^{1/(p+2)}`` — where the two entropy terms are equal."""
    p = validate_p(p)
    l, m = check_scalar(l, "l", int, min_val=1), check_scalar(m, "m", int, min_val=1)
    C_s, eps = _scalar(check_array(C_s, _C_S, **_POSITIVE)), _scalar(check_array(eps, _EPS, **_POSITIVE))
    return (C_s * (l + m) * eps ** 2 / (min(l, m) * m)) ** (1.0 / (p + 2.0))


def log_covering_at_tau(tau, eps, C_s, p, l, m):
    """Sum of the two entropy terms at threshold ``τ`` (an upper bound on the log-covering number)."""
    return entropy_low_rank(tau, C_s, p, l, m) + entropy_frobenius(tau, eps, l, m)


def log_covering_bound(eps, C_s, p, l, m):
    """``([C_s(d+d')]² (min(d,d')·d')^p / ε^{2p})^{1/(p+2)}`` — each entropy term at ``τ*`` (log factor dropped)."""
    p = validate_p(p)
    l, m = check_scalar(l, "l", int, min_val=1), check_scalar(m, "m", int, min_val=1)
    C_s, eps = _scalar(check_array(C_s, _C_S, **_POSITIVE)), _scalar(check_array(eps, _EPS, **_POSITIVE))
    return ((C_s * (l + m)) ** 2 * (min(l, m) * m) ** p / eps ** (2 * p)) ** (1.0 / (p + 2.0))


def dudley_integral_exponent(p):
    """``p/(p+2)``: ``√(log 𝒩(ε)) ∝ ε^{−p/(p+2)}``, integrable on (0, 1] with integral ``(p+2)/2``."""
    p = validate_p(p)
    return p / (p + 2.0)


def entropy_low_rank_volumetric(rank, l, m, C_2, eps):
    """``r(d+d')·log(1 + 4C₂/ε)`` ≥ the log-covering number of ``{W ∈ ℝ^{d×d'}: rank W ≤ r, ‖W‖₂ ≤ C₂}``.

    Covered in the spectral norm, hence in the data metric ``max_x ‖x(W−W')‖₂`` over rows ``‖x‖₂ ≤ 1``
    (Chapter 2, Lemma ``ch02-lem-lowrank-cover``; volumetric, every logarithm kept).

    Parameters
    ----------
    rank : int
        ``r ≥ 0`` (``0`` gives 0).
    l, m : int
        ``d`` (rows) and ``d'`` (columns) of ``W``.
    C_2 : float
        The spectral-norm bound ``C₂ > 0``.
    eps : float
        The radius ``ε > 0``.

    Returns
    -------
    float
        The entropy bound in nats.

    Raises
    ------
    TypeError
        ``rank``, ``l`` or ``m`` is not an integer (``2.0`` and ``True`` included).
    ValueError
        ``rank < 0``, a dimension below 1, ``C₂`` or ``ε`` not positive and finite.

    Examples
    --------
    >>> round(float(entropy_low_rank_volumetric(2, 3, 4, 1.5, 0.5)), 6)   # 2·7·log 13
    35.909291
    """
    rank = check_scalar(rank, "rank", int, min_val=0)
    l, m = check_scalar(l, "l", int, min_val=1), check_scalar(m, "m", int, min_val=1)
    C_2, eps = _scalar(check_array(C_2, _C_2, **_POSITIVE)), _scalar(check_array(eps, _EPS, **_POSITIVE))
    return int(rank) * (l + m) * np.log1p(4.0 * C_2 / eps)


def entropy_tail_maurey(rho, eps, m, n_rows):
    """``36 ρ² m/ε² · log(2⌈4ρ√m/ε + 2⌉ · n_rows · m + 1)`` ≥ the log-covering number of ``{‖W‖_F ≤ ρ}``.

    ``m = d'`` columns, metric ``max_x ‖x(W−W')‖₂`` over ``n_rows`` rows with ``‖x‖₂ ≤ 1``: Zhang (2002,
    Thm 4) applied to the scalar class ``(x, k) ↦ ⟨W, xᵀe_kᵀ⟩_F`` on the ``n_rows·m`` lifted points at
    radius ``ε/√m`` (Chapter 2, Lemma ``ch02-lem-tail-cover``).

    Parameters
    ----------
    rho : float or array_like
        The Frobenius radius ``ρ ≥ 0`` (``0`` gives 0).
    eps : float
        The radius ``ε > 0``.
    m : int
        ``d'``, the number of columns.
    n_rows : int
        The number of data rows.

    Returns
    -------
    float or numpy.ndarray
        The entropy bound in nats.

    Raises
    ------
    TypeError
        ``m`` or ``n_rows`` is not an integer, or ``rho``/``eps`` is a bool or not numeric.
    ValueError
        ``ρ`` negative or non-finite, ``ε`` not positive and finite, ``m`` or ``n_rows`` below 1.

    Examples
    --------
    >>> entropy_tail_maurey(0.0, 0.1, 4, 10)
    0.0
    """
    rho = check_array(rho, "rho (the Frobenius radius)", min_val=0.0)
    eps = _scalar(check_array(eps, _EPS, **_POSITIVE))
    m, n_rows = check_scalar(m, "m", int, min_val=1), check_scalar(n_rows, "n_rows", int, min_val=1)
    out = 36.0 * rho**2 * m / eps**2 * np.log(2.0 * np.ceil(4.0 * rho * np.sqrt(m) / eps + 2.0) * n_rows * m + 1.0)
    return out if np.ndim(out) else float(out)


def log_covering_p0(rank, l, m, C_2, eps):
    """``p = 0``: ``log 𝒩(ℱ₀, ε) ≤ r(d+d')·log(1 + 4C₂/ε)`` — not free of ε (Chapter 2, ``ch02-thm-covering``).

    Parameters and errors as :func:`entropy_low_rank_volumetric`.

    Examples
    --------
    >>> round(float(log_covering_p0(3, 5, 5, 2.0, 0.1)), 6)   # 30·log 81
    131.833475
    """
    return entropy_low_rank_volumetric(rank, l, m, C_2, eps)


def log_covering_split(tau, eps, C_s, p, l, m, C_2, n_rows):
    """Right side of the covering theorem (Chapter 2, Theorem ``ch02-thm-covering``) at threshold ``τ``.

    ``⌊C_s/τ^p⌋(d+d')·log(1 + 8C₂/ε) + 144 τ² min(d,d') d'/ε² · log(2⌈8τ√(min(d,d') d')/ε + 2⌉ n_rows d' + 1)``:
    each part covered at radius ``ε/2`` (low-rank part: rank ``≤ C_s/τ^p``, ``‖W₁‖₂ ≤ C₂``; tail:
    Frobenius radius ``τ√min(d,d')``). Valid for every ``τ > 0`` and ``p ∈ [0, 2]``. The floor keeps an
    integer budget up to rounding (relative slack ``FLOOR_RTOL``); the rank part never exceeds
    ``min(d, d')``.

    Parameters
    ----------
    tau : float
        The threshold ``τ > 0``.
    eps : float
        The radius ``ε > 0``.
    C_s : float
        The Schatten budget ``S_p(W) ≤ C_s``.
    p : float
        The Schatten index, in ``[0, 2]``.
    l, m : int
        ``d`` (rows) and ``d'`` (columns).
    C_2 : float
        The spectral-norm bound ``C₂ > 0``.
    n_rows : int
        The number of data rows.

    Returns
    -------
    float
        The log-covering bound in nats.

    Raises
    ------
    TypeError
        A dimension is not an integer, or a real argument is a bool or not numeric.
    ValueError
        A value out of its range (see the parameters).

    Examples
    --------
    >>> v = log_covering_split(1.0, 0.2, 2.5, 1.0, 3, 4, 2.0, 7)
    >>> round(float(v - entropy_tail_maurey(3 ** 0.5, 0.1, 4, 7)), 6)   # rank part ⌊2.5⌋·7·log(1 + 8·2/0.2)
    61.522288
    """
    p = validate_p(p)
    l, m = check_scalar(l, "l", int, min_val=1), check_scalar(m, "m", int, min_val=1)
    tau, C_s = _scalar(check_array(tau, _TAU, **_POSITIVE)), _scalar(check_array(C_s, _C_S, **_POSITIVE))
    r = int(np.floor(C_s / tau**p * (1 + FLOOR_RTOL)))
    rank_part = entropy_low_rank_volumetric(min(r, min(l, m)), l, m, C_2,
                                            _scalar(check_array(eps, _EPS, **_POSITIVE)) / 2.0)
    return rank_part + entropy_tail_maurey(tau * np.sqrt(min(l, m)), eps / 2.0, m, n_rows)


def dudley_term_p0(rank, N, C_2, log_K):
    """``√(2rN)·(√log(1 + 4C₂K) + √π/2)`` ≥ ``∫₀¹ √(2rN·log(1 + 4C₂K/ε)) dε`` (Chapter 2, eq. ``ch02-eq-p0``).

    The ``p = 0`` per-matrix Dudley term of an ``N×N`` matrix of rank ``r`` covered at radius ``ε/K``
    (``log_K`` in log space). Uses ``log(1+a/ε) ≤ log(1+a) + log(1/ε)``, ``√(u+v) ≤ √u + √v`` and
    ``∫₀¹√log(1/ε)dε = √π/2``: the term grows like ``√(rN·log K)``, i.e. like ``√(rN·L)`` when
    ``log K ≍ L``.

    Parameters
    ----------
    rank : int
        ``r ≥ 0``.
    N : int
        The hidden size, ``>= 1``.
    C_2 : float
        The spectral-norm bound ``C₂ > 0``.
    log_K : float or array_like
        ``log K``, finite.

    Returns
    -------
    float or numpy.ndarray
        The bound.

    Raises
    ------
    TypeError
        ``rank`` or ``N`` is not an integer, or ``C_2``/``log_K`` is a bool or not numeric.
    ValueError
        ``rank < 0``, ``N < 1``, ``C₂`` not positive and finite, or ``log_K`` not finite.

    Examples
    --------
    >>> dudley_term_p0(0, 16, 1.0, 5.0)
    0.0
    >>> round(dudley_term_p0(1, 2, 1.0, 0.0), 6)   # 2·(√log 5 + √π/2)
    4.309726
    """
    rank = check_scalar(rank, "rank", int, min_val=0)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    C_2 = _scalar(check_array(C_2, _C_2, **_POSITIVE))
    lk = check_array(log_K, "log_K")
    # log(1 + 4 C₂ K) computed stably for large K: logaddexp(0, log 4C₂ + log K)
    inner = np.logaddexp(0.0, np.log(4.0 * C_2) + lk)
    out = np.sqrt(2.0 * int(rank) * N) * (np.sqrt(inner) + np.sqrt(np.pi) / 2.0)
    return out if np.ndim(out) else float(out)
