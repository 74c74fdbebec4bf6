"""Post hoc choice of the Schatten index p, discretisation cost, dyadic shells (Chapter 4).

* Per-matrix term (released code, Chapter 4 ``ch04-eq-term``):
  ``T(W; p) = S_p(W)^{1/(p+2)} · K^{p/(p+2)} · N^{(p+1)/(p+2)}``, computed as
  ``log T = log S_p/(p+2) + p/(p+2)·log K + (p+1)/(p+2)·log N``; at ``p = 0`` ``S_0`` is the rank.
* Grid ``𝒫_m = {0, 1/m, …, 2}`` with ``m = ⌈L + ln max(N, 2)⌉``; ``p*`` is the first argmin.
* Aggregations: ``B = Σ T* + √L`` (released) and ``B = √(Σ T*²) + √L`` (matches the examples
  table; see the book's reconstructions page); both in log space.
* Rounding cost (Chapter 4, ``ch04-lem-rounding``) and the union-bound penalty over grid points and
  shells of the radii (Chapter 4, ``ch04-thm-uniform``) — reconstructions by the book.
* Shells of ratio ``ρ``: a radius ``r`` is rounded up to ``ρ^j``, ``j = ⌈log_ρ r⌉``. Dyadic shells
  (``ρ = 2``) inflate a product of ``k`` rounded radii by up to ``2^k``; geometric shells
  ``ρ = 1 + 1/L`` by at most ``(1 + 1/L)^k ≤ e^{k/L}`` (Chapter 4, ``ch04-lem-shells``).
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
    "shell_top",
    "geometric_ratio",
    "shell_log_weight",
    "shell_union_cost",
    "log_alpha_inflation",
    "falsify_shell_inflation",
    "rounding_ratio",
    "falsify_rounding",
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


def _ratio(ratio):
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not (1.0 < ratio < math.inf):
        raise ValueError(f"shell ratio must be a real number > 1 (2 for dyadic shells, 1 + 1/L for "
                         f"geometric ones), got {ratio!r}")
    return float(ratio)


def geometric_ratio(L):
    """``ρ = 1 + 1/L`` — the shell ratio of Chapter 4 (``ch04-lem-shells``): ``ρ^{3L} ≤ e³``."""
    L = _int_at_least_1(L, "L (number of layers)")
    return 1.0 + 1.0 / L


def shell_index(r, ratio=2.0):
    """Shell ``j = ⌈log_ρ r⌉`` of a positive radius ``r`` (``ρ^{j−1} < r ≤ ρ^j``); ``ρ = 2``: dyadic.

    Computed with exact integer powers around the logarithm, so a radius equal to ``ρ^j`` is in shell ``j``.
    """
    rho = _ratio(ratio)
    r = np.asarray(r, dtype=np.float64)
    if np.any(~(r > 0)) or np.any(~np.isfinite(r)):
        raise ValueError("radii must be positive and finite to have a shell")
    j = np.ceil(np.log(r) / math.log(rho)).astype(np.int64)
    # repair floating-point error in the logarithm: enforce ρ^{j-1} < r ≤ ρ^j
    j = np.where(np.power(rho, j.astype(float)) < r, j + 1, j)
    j = np.where(np.power(rho, (j - 1).astype(float)) >= r, j - 1, j)
    return j if j.ndim else int(j)


def shell_top(r, ratio=2.0):
    """``ρ^{⌈log_ρ r⌉} ∈ [r, ρ r)`` — the radius that the union bound uses for ``r``."""
    rho = _ratio(ratio)
    out = np.power(rho, np.asarray(shell_index(r, rho), dtype=np.float64))
    return out if np.ndim(out) else float(out)


def shell_log_weight(j):
    """``log w_j`` with ``w_j = 2 / (3 (|j|+1)(|j|+2))`` — prior weights over shells ``j ∈ ℤ`` (Σ w_j = 1)."""
    j = np.abs(np.asarray(j, dtype=np.float64))
    return np.log(2.0 / 3.0) - np.log(j + 1.0) - np.log(j + 2.0)


def union_bound_log_count(L, N, matrices_per_layer=3, shell_indices=None, radii=None, ratio=None):
    """``log`` of the inverse union-bound weight: ``M·log(2m+1) + Σ log(1/w_j)`` (``M = L·matrices_per_layer``).

    Every matrix chooses its own grid point (``2m+1`` options) and, for each of its radii, a shell
    ``j`` with weight :func:`shell_log_weight`. Give either ``shell_indices`` (shell indices of all radii)
    or ``radii`` with the shell ``ratio`` (default ``1 + 1/L``, Chapter 4 ``ch04-lem-shells``); neither:
    only the grid is counted.
    """
    m = grid_resolution(L, N)
    k = _int_at_least_1(matrices_per_layer, "matrices_per_layer")
    out = L * k * math.log(2 * m + 1)
    if shell_indices is not None and radii is not None:
        raise ValueError("give shell_indices or radii, not both")
    if shell_indices is not None:
        out -= float(np.sum(shell_log_weight(np.asarray(list(shell_indices)))))
    if radii is not None:
        out += shell_union_cost(radii, geometric_ratio(L) if ratio is None else ratio)
    return out


def uniformity_penalty(L, N, n, delta=0.05, matrices_per_layer=3, shell_indices=None, radii=None, ratio=None):
    """``√((log count + log(1/δ)) / (2n))`` — the price of choosing p and the shells after training.

    With a fixed number of matrices per layer (``matrices_per_layer``, 3 in the single-head model) the
    grid part is ``√(3L log(2(L + ln N) + 1)/(2n)) ≍ √(L log(L + log N)/n)``, the cost stated in the
    paper's summary; the shells of the ``radii`` (:func:`union_bound_log_count`) add ``O(log L)`` nats
    per radius. For multi-head models the count grows with the heads (Chapter 4).
    """
    n = _int_at_least_1(n, "n (sample size)")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    c = union_bound_log_count(L, N, matrices_per_layer, shell_indices, radii, ratio)
    return math.sqrt((c + math.log(1.0 / delta)) / (2.0 * n))


def shell_union_cost(r, ratio=2.0):
    """``Σ log(1/w_j)`` over the radii ``r`` with ``j = shell_index(r, ρ)`` — the union-bound cost in nats.

    For geometric shells ``|j| ≈ L·|log r|``, so each radius costs ``≈ 2 log(L |log r| + 2) + log 1.5``:
    ``O(log L)`` per radius (Chapter 4, ``ch04-lem-shells``).
    """
    j = shell_index(np.atleast_1d(np.asarray(r, dtype=np.float64)), ratio)
    return float(-np.sum(shell_log_weight(j)))


def log_alpha_inflation(C_M, C_V, C_QK, ratio, L_phi=1.0, softmax_const=1.0):
    """``log α⁽⁰⁾(rounded radii) − log α⁽⁰⁾(radii)``: every spectral norm rounded up to its shell top.

    ``C_M, C_V, C_QK``: spectral norms per layer (length ``L``), ``α⁽⁰⁾ = Π_{k=1}^{L-1} Λ_k`` with
    ``Λ_k = L_φ C_M C_V (1 + 2c C_QK)`` (:func:`bounds_lib.propagation.log_layer_lipschitz`). Arrays of shape
    ``(trials, L)`` give one value per row. Chapter 4, ``ch04-lem-shells``.
    """
    from .propagation import log_layer_lipschitz

    rho = _ratio(ratio)
    arrs = [np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in (C_M, C_V, C_QK)]
    if not (arrs[0].shape == arrs[1].shape == arrs[2].shape):
        raise ValueError(f"C_M, C_V, C_QK must have one shape, got {[a.shape for a in arrs]}")
    true = log_layer_lipschitz(*arrs, L_phi, softmax_const)
    top = log_layer_lipschitz(*(shell_top(a, rho) for a in arrs), L_phi, softmax_const)
    out = np.sum(top[:, 1:] - true[:, 1:], axis=1)
    return out if np.ndim(C_M) > 1 else float(out[0])


def _sawtooth_adversary(objective, lo, hi, dim, rng, starts):
    """Maximise a separable, increasing-between-jumps objective over ``[lo, hi]^dim``.

    Random starts, then per coordinate the best point just above a shell top (where a rounded radius
    is largest relative to the radius) among a fine log-grid — a coordinate ascent that ends at a
    local maximum of each coordinate's sawtooth. Returns the best point found.
    """
    grid = np.geomspace(lo, hi, 4001)
    best_x, best_v = None, -np.inf
    for x in rng.uniform(lo, hi, (starts, dim)):
        v = objective(x)
        for _ in range(2):  # two sweeps of coordinate ascent
            for i in range(dim):
                cand = np.repeat(x[None, :], grid.size, axis=0)
                cand[:, i] = grid
                vals = objective(cand)
                k = int(np.argmax(vals))
                if vals[k] > v:
                    x, v = cand[k].copy(), float(vals[k])
        if v > best_v:
            best_x, best_v = x.copy(), v
    return best_x, best_v


def falsify_shell_inflation(rng, L=12, ratio=None, bound_log=None, trials=10_000, low=0.5, high=4.0,
                            adversarial_starts=3, what="product"):
    """Check ``log inflation ≤ bound_log`` by random draws and an adversarial search (Chapter 4).

    ``what="product"``: the inflation of a product of the ``3(L−1)`` spectral radii of
    ``α⁽⁰⁾`` (the lemma's key step, tight as every radius approaches a shell top from above);
    ``what="alpha"``: the inflation of ``α⁽⁰⁾`` itself (:func:`log_alpha_inflation`, tight softmax constant).
    Radii are drawn log-uniformly in ``[low, high]``. ``ratio`` defaults to ``1 + 1/L``; ``bound_log``
    defaults to ``3(L−1)·log ρ``. Returns a :class:`bounds_lib.falsification.Falsification` whose ratios
    are ``log inflation / bound_log`` (random draws; ``adversarial``: the coordinate-ascent optimum —
    a saw-tooth objective defeats Nelder–Mead, so the search is specialised).
    """
    from .falsification import Falsification

    L = _int_at_least_1(L, "L (number of layers)")
    if L < 2:
        raise ValueError("L must be >= 2: α⁽⁰⁾ is a product over layers 1..L-1")
    rho = geometric_ratio(L) if ratio is None else _ratio(ratio)
    k = 3 * (L - 1)
    bound_log = k * math.log(rho) if bound_log is None else float(bound_log)
    if not bound_log > 0:
        raise ValueError(f"bound_log must be positive, got {bound_log!r}")
    if not (0 < low < high < math.inf):
        raise ValueError(f"need 0 < low < high, got low={low!r}, high={high!r}")

    def objective(x):
        x = np.atleast_2d(x)
        if what == "product":
            return np.sum(np.log(shell_top(x[:, 3:], rho)) - np.log(x[:, 3:]), axis=1)
        return log_alpha_inflation(x[:, 0::3], x[:, 1::3], x[:, 2::3], rho)

    if what not in ("product", "alpha"):
        raise ValueError(f"what must be 'product' or 'alpha', got {what!r}")
    draws = np.exp(rng.uniform(math.log(low), math.log(high), (int(trials), 3 * L)))
    vals = objective(draws)
    adv = np.zeros(0)
    if adversarial_starts:
        _, v = _sawtooth_adversary(objective, low, high, 3 * L, rng, int(adversarial_starts))
        adv = np.array([v])
    name = f"shells rho={rho:.4g}: {what} of {k} radii"
    return Falsification(name, vals / bound_log, adv / bound_log)


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-max(min(x, 700.0), -700.0)))


def rounding_ratio(x, weaken=1.0):
    """``(log T(p') − log T(p)) / (bound/weaken)`` of :func:`rounding_cost_bound` at a point ``x`` of ℝ^d.

    ``x = (a, b, log K, log N, log σ_1, …, log σ_k)``: ``p = 2·sigmoid(a)``, ``p' = p + (2 − p)·sigmoid(b)``,
    ``N = max(1, round(e^{log N}))``, singular values sorted. Any real vector is a valid configuration,
    so an optimiser can search freely (Chapter 4, ``ch04-lem-rounding``). 0 where the bound is 0.
    """
    x = np.asarray(x, dtype=np.float64)
    p = 2.0 * _sigmoid(x[0])
    q = p + (2.0 - p) * _sigmoid(x[1])
    logK = float(np.clip(x[2], -50, 50))
    N = int(max(1, round(math.exp(min(x[3], 12.0)))))
    s = np.sort(np.exp(np.clip(x[4:], -30, 30)))[::-1]
    if not (p > 0 and q > p):
        return 0.0
    lS, lSq = math.log(schatten_power_sum(s, p)), math.log(schatten_power_sum(s, q))
    diff = log_term(lSq, q, logK, N) - log_term(lS, p, logK, N)
    bound = float(rounding_cost_bound(q - p, p, s[0], lS, logK, N)) / weaken
    return diff / bound if bound > 0 else 0.0


def schatten_power_sum(s, p):
    """``Σ σ^p`` for ``p > 0`` (helper of :func:`rounding_ratio`; NumPy on the given values)."""
    return float(np.sum(np.asarray(s, dtype=np.float64) ** p))


def falsify_rounding(rng, trials=2000, restarts=8, weaken=1.0, k=4):
    """Random draws and a Nelder–Mead search for a violation of the rounding lemma (Chapter 4).

    ``weaken > 1`` checks the bound divided by ``weaken`` (a power check: it must be violated).
    Uses :func:`bounds_lib.falsification.falsify`.
    """
    from .falsification import falsify

    def sample(r):
        return np.r_[r.normal(-1, 3), r.normal(0, 3), r.uniform(-10, 40), r.uniform(0, 7), r.uniform(-6, 3, k)]

    return falsify(f"rounding lemma (bound / {weaken:g})", lambda x: rounding_ratio(x, weaken), sample, rng,
                   trials=trials, restarts=restarts)
