"""Post hoc choice of the Schatten index p, discretisation cost, dyadic shells (Chapter 4).

* Per-matrix term (released code, Chapter 4 ``ch04-eq-term``):
  ``T(W; p) = S_p(W)^{1/(p+2)} · K^{p/(p+2)} · N^{(p+1)/(p+2)}``, computed as
  ``log T = log S_p/(p+2) + p/(p+2)·log K + (p+1)/(p+2)·log N``; at ``p = 0`` ``S_0`` is the rank.
* Grid ``𝒫_m = {0, 1/m, …, 2}`` with ``m = ⌈L + ln max(N, 2)⌉``; ``p*`` is the first argmin.
* Aggregations: ``B = Σ T* + √L`` (released) and ``B = √(Σ T*²) + √L`` (matches the examples
  table; see the book's reconstructions page); both in log space.
* Rounding cost (Chapter 4, ``ch04-lem-rounding``) and the union-bound penalty over grid points and
  dyadic shells (Chapter 4, ``ch04-thm-uniform``) — reconstructions by the book.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from .norms import schatten_powers, validate_p, validate_sigma

__all__ = [
    "PosthocChoice",
    "grid_resolution",
    "posthoc_grid",
    "log_term",
    "posthoc_choice",
    "logsumexp",
    "aggregate_sum",
    "aggregate_rss",
    "rounding_cost_bound",
    "round_up_to_grid",
    "shell_index",
    "shell_log_weight",
    "union_bound_log_count",
    "uniformity_penalty",
]


def _int_at_least_1(x, name):
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not np.isfinite(x) or int(x) != x or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


def _finite_real(x, name):
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or math.isnan(x):
        raise ValueError(f"{name} must be a real number, got {x!r}")
    if x == math.inf:
        raise ValueError(f"{name} is +inf; compute it in log space from finite norms")
    return float(x)


def grid_resolution(L, N):
    """``m = ⌈L + ln max(N, 2)⌉`` — the grid resolution of the released code."""
    L = _int_at_least_1(L, "L (number of layers)")
    N = _int_at_least_1(N, "N (hidden size)")
    return int(math.ceil(L + math.log(max(N, 2))))


def posthoc_grid(L, N):
    """``𝒫_m = {0, 1/m, 2/m, …, 2}`` (``2m + 1`` points), ``m = grid_resolution(L, N)``."""
    m = grid_resolution(L, N)
    return np.arange(2 * m + 1, dtype=np.float64) / m


def _validate_p_array(p):
    a = np.asarray(p, dtype=np.float64)
    if np.any(np.isnan(a)) or np.any((a < 0) | (a > 2)):
        bad = a[np.isnan(a) | (a < 0) | (a > 2)].ravel()[0]
        raise ValueError(f"p must lie in [0, 2] (Schatten indices of the paper), got {bad}")
    return a


def log_term(log_S, p, log_K, N):
    """``log T(W;p) = log S_p/(p+2) + p/(p+2)·log K + (p+1)/(p+2)·log N`` (vectorised over p).

    ``log_S`` is ``log S_p(W)`` at the same ``p`` (at ``p = 0`` the log numerical rank).
    """
    p = _validate_p_array(p)
    N = _int_at_least_1(N, "N (hidden size)")
    log_S = np.asarray(log_S, dtype=np.float64)
    log_K = np.asarray(log_K, dtype=np.float64)
    if np.any(np.isnan(log_S)) or np.any(log_S == np.inf):
        raise ValueError("log_S must be finite or -inf (zero matrix), got NaN or +inf")
    if np.any(np.isnan(log_K)) or np.any(np.abs(log_K) == np.inf):
        raise ValueError("log_K must be finite (it is floored at log of the smallest float)")
    out = (log_S + p * log_K + (p + 1.0) * np.log(N)) / (p + 2.0)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class PosthocChoice:
    """Result of the post hoc choice for one matrix: the grid, ``log T`` on it, ``p*`` and ``log T*``."""

    grid: np.ndarray
    log_T: np.ndarray
    p_star: float
    log_T_star: float


def posthoc_choice(sigma, log_K, N, grid):
    """Evaluate ``log T(W;p)`` on ``grid`` from the singular values ``sigma``; ``p*`` = first argmin.

    ``S_p`` is :func:`bounds_lib.norms.schatten_powers` of exactly the ``sigma`` given: pass all
    singular values for the released ("paper") convention, or drop numerical zeros ("clean").
    """
    s = validate_sigma(sigma)
    g = _validate_p_array(grid)
    if g.ndim != 1 or g.size == 0:
        raise ValueError("grid must be a non-empty 1-D array of p values in [0, 2]")
    log_K = _finite_real(log_K, "log_K")
    with np.errstate(divide="ignore"):
        log_S = np.log(schatten_powers(s, g))
    lt = np.asarray(log_term(log_S, g, log_K, N), dtype=np.float64)
    i = int(np.argmin(lt))
    return PosthocChoice(grid=g.copy(), log_T=lt, p_star=float(g[i]), log_T_star=float(lt[i]))


def logsumexp(a, axis=None):
    """``log Σ exp(a)`` without overflow (NumPy only; ``-inf`` entries contribute nothing)."""
    a = np.asarray(a, dtype=np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out if out.ndim else float(out)


def _log_terms(log_T_stars, L):
    L = _int_at_least_1(L, "L (number of layers)")
    a = np.asarray(log_T_stars, dtype=np.float64).ravel()
    if np.any(np.isnan(a)) or np.any(a == np.inf):
        raise ValueError("log_T_stars contains NaN or +inf")
    return a, L


def aggregate_sum(log_T_stars, L):
    """``log(Σ T* + √L)`` — the released ``B_ours`` (log-sum-exp, safe for any depth)."""
    a, L = _log_terms(log_T_stars, L)
    return float(np.logaddexp(logsumexp(a) if a.size else -np.inf, 0.5 * np.log(L)))


def aggregate_rss(log_T_stars, L):
    """``log(√(Σ T*²) + √L)`` — the root-sum-square aggregation matching the examples table."""
    a, L = _log_terms(log_T_stars, L)
    return float(np.logaddexp(0.5 * logsumexp(2.0 * a) if a.size else -np.inf, 0.5 * np.log(L)))


def round_up_to_grid(p, m):
    """Smallest grid point ``⌈p·m⌉/m ≥ p`` of ``𝒫_m`` (vectorised)."""
    p = _validate_p_array(p)
    m = _int_at_least_1(m, "m (grid resolution)")
    return np.minimum(np.ceil(p * m - 1e-12) / m, 2.0)


def rounding_cost_bound(delta, p, sigma_1, log_S, log_K, N):
    """Upper bound on ``log T(p+δ) − log T(p)`` for ``0 < p``, ``p + δ ≤ 2`` (Chapter 4, ``ch04-lem-rounding``):

    ``δ · [ log⁺(σ₁)/2 + log⁻(S_p)/4 + |2 log K + log N|/4 ]`` with ``log⁺ = max(log, 0)``,
    ``log⁻ = max(−log, 0)``. With ``δ ≤ 1/m`` and ``m ≥ L + ln N`` this is O(1) when log K = O(L).
    """
    delta = np.asarray(delta, dtype=np.float64)
    if np.any(delta < 0) or np.any(np.isnan(delta)):
        raise ValueError("delta must be >= 0")
    _validate_p_array(p)
    N = _int_at_least_1(N, "N (hidden size)")
    s1 = np.asarray(sigma_1, dtype=np.float64)
    if np.any(s1 <= 0) or np.any(np.isnan(s1)):
        raise ValueError("sigma_1 must be > 0")
    lpos = np.maximum(np.log(s1), 0.0)
    lneg = np.maximum(-np.asarray(log_S, dtype=np.float64), 0.0)
    return delta * (lpos / 2.0 + lneg / 4.0 + np.abs(2.0 * np.asarray(log_K) + np.log(N)) / 4.0)


def shell_index(r):
    """Dyadic shell ``j = ⌈log₂ r⌉`` of a positive radius ``r`` (``2^{j−1} < r ≤ 2^j``)."""
    r = np.asarray(r, dtype=np.float64)
    if np.any(~(r > 0)) or np.any(~np.isfinite(r)):
        raise ValueError("radii must be positive and finite to have a dyadic shell")
    return np.ceil(np.log2(r)).astype(int)


def shell_log_weight(j):
    """``log w_j`` with ``w_j = 2 / (3 (|j|+1)(|j|+2))`` — prior weights over shells ``j ∈ ℤ`` (Σ w_j = 1)."""
    j = np.abs(np.asarray(j, dtype=np.float64))
    return np.log(2.0 / 3.0) - np.log(j + 1.0) - np.log(j + 2.0)


def union_bound_log_count(L, N, matrices_per_layer=3, shell_indices=None):
    """``log`` of the inverse union-bound weight: ``M·log(2m+1) − Σ log w_j`` (``M`` = number of matrices).

    Every matrix chooses its own grid point (``2m+1`` options) and, for each of its radii, a dyadic
    shell ``j`` with weight :func:`shell_log_weight`. ``shell_indices``: iterable of shell indices of
    all radii (default none, i.e. only the grid).
    """
    m = grid_resolution(L, N)
    k = _int_at_least_1(matrices_per_layer, "matrices_per_layer")
    out = L * k * math.log(2 * m + 1)
    if shell_indices is not None:
        out -= float(np.sum(shell_log_weight(np.asarray(list(shell_indices)))))
    return out


def uniformity_penalty(L, N, n, delta=0.05, matrices_per_layer=3, shell_indices=None):
    """``√((log count + log(1/δ)) / (2n))`` — the price of choosing p and the shells after training.

    With a fixed number of matrices per layer (``matrices_per_layer``, 3 in the single-head model) its
    leading order is ``√(3L log(2(L + ln N) + 1)/(2n)) ≍ √(L log(L + log N)/n)``, the cost stated in the
    paper's summary; for multi-head models the count grows with the heads (Chapter 4).
    """
    n = _int_at_least_1(n, "n (sample size)")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    c = union_bound_log_count(L, N, matrices_per_layer, shell_indices)
    return math.sqrt((c + math.log(1.0 / delta)) / (2.0 * n))
