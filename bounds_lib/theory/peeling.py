"""Post hoc choice of the Schatten index p, discretisation cost, dyadic shells (Chapter 4).

* Per-matrix term (released code, Chapter 4 ``ch04-eq-term``):
  ``𝒯(W; p) = S_p(W)^{1/(p+2)} · K^{p/(p+2)} · N^{(p+1)/(p+2)}``, computed as
  ``log 𝒯 = log S_p/(p+2) + p/(p+2)·log K + (p+1)/(p+2)·log N``; at ``p = 0`` ``S_0`` is the rank.
* Grid ``𝒫_m = {0, 1/m, …, 2}`` with ``m = ⌈L + ln max(N, 2)⌉``; ``p*`` is the first argmin.
* Aggregations: ``B = Σ 𝒯* + √L`` (released) and ``B = √(Σ 𝒯*²) + √L`` (matches the examples
  table; see the book's reconstructions page); both in log space (:func:`logsumexp`).
* Rounding cost (Chapter 4, ``ch04-lem-rounding``) and the union-bound penalty over grid points and
  shells of the radii (Chapter 4, ``ch04-thm-uniform``) — reconstructions by the book.
* Shells of ratio ``ρ``: a radius ``r`` is rounded up to ``ρ^j``, ``j = ⌈log_ρ r⌉``. Dyadic shells
  (``ρ = 2``) inflate a product of ``k`` rounded radii by up to ``2^k``; geometric shells
  ``ρ = 1 + 1/L`` by at most ``(1 + 1/L)^k ≤ e^{k/L}`` (Chapter 4, ``ch04-lem-shells``).

Arguments are checked with :mod:`bounds_lib.core.validation` (``TypeError`` for a wrong type, ``ValueError``
for a wrong value). The randomized and adversarial checks of the rounding and shell lemmas are
:func:`bounds_lib.checks.ch4_peeling.falsify_rounding` and
:func:`bounds_lib.checks.ch4_peeling.falsify_shell_inflation`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.logspace import logsumexp
from .norms import _rank_of_valid, _schatten_powers_valid, validate_sigma
from .propagation import log_layer_lipschitz
from ..core.validation import check_array, check_scalar

__all__ = [
    "P_MAX",
    "GRID_ATOL",
    "PosthocChoice",
    "grid_resolution",
    "posthoc_grid",
    "log_term",
    "posthoc_choice",
    "logsumexp",
    "aggregate_sum",
    "aggregate_rss",
    "rounding_cost_bound",
    "rounding_cost_bound_sharp",
    "round_up_to_grid",
    "shell_index",
    "shell_top",
    "geometric_ratio",
    "shell_log_weight",
    "shell_union_cost",
    "log_alpha_inflation",
    "union_bound_log_count",
    "uniformity_penalty",
]

#: The largest Schatten index of the paper, ``p ∈ [0, P_MAX]``; grid ``𝒫_m = {0, 1/m, …, P_MAX}``.
P_MAX = 2.0
#: Absolute slack of :func:`round_up_to_grid`: ``p·m`` within ``1e-12`` of an integer ``k`` (``p = k/m``
#: up to rounding, e.g. ``(1/3)·3 = 1.0000000000000002``) stays on grid point ``k/m`` instead of jumping
#: to ``(k+1)/m``.
GRID_ATOL = 1e-12
#: ``check_array`` keywords for Schatten indices.
_P_INDEX = {"min_val": 0.0, "max_val": P_MAX, "what": "Schatten indices of the paper lie in [0, 2]"}
#: The name the error messages give a shell ratio.
_RATIO = "shell ratio (2 for dyadic shells, 1 + 1/L for geometric ones)"


def grid_resolution(L, N):
    """``m = ⌈L + ln max(N, 2)⌉`` — the grid resolution of the released code (Chapter 4, ``ch04-thm-uniform``).

    Parameters
    ----------
    L : int
        The number of layers, ``>= 1``.
    N : int
        The hidden size, ``>= 1``.

    Returns
    -------
    int
        ``m``.

    Raises
    ------
    TypeError
        ``L`` or ``N`` is not an integer (``3.0`` and ``True`` included).
    ValueError
        ``L`` or ``N`` is below 1.

    Examples
    --------
    >>> grid_resolution(12, 768)
    19
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    return int(math.ceil(L + math.log(max(N, 2))))


def posthoc_grid(L, N):
    """``𝒫_m = {0, 1/m, 2/m, …, 2}`` (``2m + 1`` points), ``m = grid_resolution(L, N)`` (Chapter 4).

    Parameters and errors as :func:`grid_resolution`.

    Returns
    -------
    numpy.ndarray, shape (2m + 1,)
        The grid of Schatten indices.

    Examples
    --------
    >>> posthoc_grid(1, 2).tolist()   # m = ⌈1 + ln 2⌉ = 2
    [0.0, 0.5, 1.0, 1.5, 2.0]
    """
    m = grid_resolution(L, N)
    return np.arange(2 * m + 1, dtype=np.float64) / m


def log_term(log_S, p, log_K, N):
    """``log 𝒯(W;p) = log S_p/(p+2) + p/(p+2)·log K + (p+1)/(p+2)·log N`` (Chapter 4, eq. ``ch04-eq-term``).

    Vectorised over ``p``.

    Parameters
    ----------
    log_S : float or array_like
        ``log S_p(W)`` at the same ``p`` (at ``p = 0`` the log numerical rank; ``-inf`` for a zero matrix).
    p : float or array_like
        Schatten indices in ``[0, 2]``.
    log_K : float or array_like
        ``log K``, finite.
    N : int
        The hidden size, ``>= 1``.

    Returns
    -------
    float or numpy.ndarray
        ``log 𝒯(W;p)``.

    Raises
    ------
    TypeError
        ``N`` is not an integer, or an array argument is a bool or not numeric.
    ValueError
        ``p`` outside ``[0, 2]``, ``N < 1``, ``log_S`` NaN or ``+inf``, ``log_K`` not finite.

    Examples
    --------
    >>> import math
    >>> round(math.exp(log_term(math.log(4.0), 2.0, math.log(9.0), 16)), 9)   # 4^{1/4}·9^{1/2}·16^{3/4}
    33.941125497
    """
    p = check_array(p, "p", **_P_INDEX)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    log_S = check_array(log_S, "log_S", allow_neg_inf=True, what="finite, or -inf for a zero matrix")
    log_K = check_array(log_K, "log_K", what="it is floored at the log of the smallest float")
    out = _log_term_valid(log_S, p, log_K, N)
    return out if out.ndim else float(out)


def _log_term_valid(log_S, p, log_K, N):
    """The formula of :func:`log_term` on arguments already checked (arrays or floats, ``N >= 1``)."""
    return (log_S + p * log_K + (p + 1.0) * np.log(N)) / (p + 2.0)


@dataclass(frozen=True)
class PosthocChoice:
    """Result of the post hoc choice for one matrix: the grid, ``log 𝒯`` on it, ``p*`` and ``log 𝒯*``."""

    grid: np.ndarray
    log_T: np.ndarray
    p_star: float
    log_T_star: float


def posthoc_choice(sigma, log_K, N, grid):
    """Evaluate ``log 𝒯(W;p)`` on ``grid`` from the singular values; ``p*`` is the first argmin (Chapter 4).

    ``S_p`` is :func:`bounds_lib.theory.norms.schatten_powers` of exactly the ``sigma`` given: pass all
    singular values for the released ("paper") convention, or drop numerical zeros ("clean").

    Parameters
    ----------
    sigma : array_like
        Singular values of ``W``.
    log_K : float
        ``log K`` of the matrix, finite.
    N : int
        The hidden size, ``>= 1``.
    grid : array_like, shape (k,)
        Schatten indices in ``[0, 2]`` (usually :func:`posthoc_grid`).

    Returns
    -------
    PosthocChoice
        The grid, ``log 𝒯`` on it, ``p*`` and ``log 𝒯*``.

    Raises
    ------
    TypeError
        ``log_K`` or ``N`` has the wrong type, or an array is not numeric.
    ValueError
        ``grid`` empty, not 1-D or outside ``[0, 2]``; ``sigma`` invalid; ``log_K`` not finite.

    Examples
    --------
    >>> c = posthoc_choice([1.0, 1.0], 3.0, 4, posthoc_grid(1, 4))
    >>> c.p_star   # a flat spectrum with K > 1: p = 0 (the rank) wins
    0.0
    """
    s = validate_sigma(sigma)
    g = check_array(grid, "grid", **_P_INDEX)
    if g.ndim != 1 or g.size == 0:
        raise ValueError("grid must be a non-empty 1-D array of p values in [0, 2]")
    log_K = check_scalar(log_K, "log_K", float)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    return _posthoc_choice_valid(s, log_K, N, g)


def _posthoc_choice_valid(s: np.ndarray, log_K: float, N: int, g: np.ndarray) -> PosthocChoice:
    """:func:`posthoc_choice` on arguments already checked, none checked again (Chapter 4).

    ``s`` as :func:`bounds_lib.theory.norms.validate_sigma` returns it (1-D, descending, finite, ``>= 0``,
    non-empty), ``log_K`` a finite float, ``N >= 1`` an int, ``g`` a non-empty 1-D float64 grid in
    ``[0, 2]``: the scoring of a whole model (:func:`bounds_lib.analysis.scoring.score`) checks each
    spectrum once and then calls this for every matrix.
    """
    with np.errstate(divide="ignore"):
        log_S = np.log(_schatten_powers_valid(s, g))
    lt = np.asarray(_log_term_valid(log_S, g, log_K, N), dtype=np.float64)
    i = int(np.argmin(lt))
    return PosthocChoice(grid=g.copy(), log_T=lt, p_star=float(g[i]), log_T_star=float(lt[i]))



def _posthoc_choices_valid(sigmas: list, log_Ks, N: int, g: np.ndarray) -> list:
    """:func:`_posthoc_choice_valid` of many matrices, bit for bit: ``[(log_T, p*, log 𝒯*)]`` in their order.

    The spectra of one length are stacked (a model's ``2LH`` head spectra mostly share one), so that each
    power, sum, log and argmin is one NumPy call for all of them instead of one per matrix; the arithmetic
    is the same: ``S_p`` adds ``σ_iᵖ`` over ``i`` in order, one row after the other, for every ``p`` of the
    grid at once (a zero singular value adds an exact ``0.0``, where the single path leaves it out), and
    ``log 𝒯`` is the same expression element by element. A grid with one positive ``p`` (NumPy sums a single
    column pairwise, in blocks that depend on its length) and a spectrum whose ``S_p`` overflows take the
    single path, matrix by matrix; the latter raises its error for the first such matrix.
    Arguments as :func:`_posthoc_choice_valid` takes them, ``log_Ks`` one finite float per matrix."""
    def one_by_one():
        return [_single(_posthoc_choice_valid(s, lk, N, g)) for s, lk in zip(sigmas, log_Ks)]

    zero = g == 0
    pos = g[~zero]
    if pos.size < 2:  # one column: NumPy sums it pairwise, in blocks that depend on the length (zeros included)
        return one_by_one()
    out = [None] * len(sigmas)
    by_length: dict = {}
    for j, s in enumerate(sigmas):
        by_length.setdefault(s.size, []).append(j)
    log_N = np.log(N)
    for js in by_length.values():
        S = np.stack([sigmas[j] for j in js])  # (m, k)
        powers = np.empty((len(js), g.size))
        powers[:, zero] = np.array([_rank_of_valid(sigmas[j]) for j in js], dtype=np.float64)[:, None]
        with np.errstate(over="ignore"):
            powers[:, ~zero] = np.sum(np.power.outer(S, pos), axis=1)
        if not np.all(np.isfinite(powers)):
            return one_by_one()
        with np.errstate(divide="ignore"):
            log_S = np.log(powers)
        log_K = np.array([log_Ks[j] for j in js], dtype=np.float64)[:, None]
        lt = (log_S + g * log_K + (g + 1.0) * log_N) / (g + 2.0)
        best = np.argmin(lt, axis=1)
        for row, (j, i) in enumerate(zip(js, best.tolist())):
            out[j] = (lt[row].copy(), float(g[i]), float(lt[row, i]))
    return out


def _single(choice: PosthocChoice) -> tuple:
    return choice.log_T, choice.p_star, choice.log_T_star


def aggregate_sum(log_T_stars, L):
    """``log(Σ_j 𝒯*_j + √L)`` — the released ``B_ours`` (Chapter 4), by a log-sum-exp (safe for any depth).

    Parameters
    ----------
    log_T_stars : array_like
        ``log 𝒯*`` of every matrix (``-inf`` allowed; none at all gives ``log √L``).
    L : int
        The number of layers, ``>= 1``.

    Returns
    -------
    float
        ``log B``.

    Raises
    ------
    TypeError
        ``L`` is not an integer, or ``log_T_stars`` is not numeric.
    ValueError
        ``L < 1``, or ``log_T_stars`` holds NaN or ``+inf``.

    Examples
    --------
    >>> import math
    >>> round(math.exp(aggregate_sum([math.log(2.0), math.log(3.0)], 4)), 12)   # 2 + 3 + √4
    7.0
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    a = check_array(log_T_stars, "log_T_stars", allow_neg_inf=True).ravel()
    return float(np.logaddexp(logsumexp(a) if a.size else -np.inf, 0.5 * np.log(L)))


def aggregate_rss(log_T_stars, L):
    """``log(√(Σ_j 𝒯*_j²) + √L)`` — the root-sum-square aggregation matching the examples table (Chapter 4).

    Parameters and errors as :func:`aggregate_sum`.

    Examples
    --------
    >>> import math
    >>> round(math.exp(aggregate_rss([math.log(3.0), math.log(4.0)], 4)), 12)   # √(9 + 16) + √4
    7.0
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    a = check_array(log_T_stars, "log_T_stars", allow_neg_inf=True).ravel()
    return float(np.logaddexp(0.5 * logsumexp(2.0 * a) if a.size else -np.inf, 0.5 * np.log(L)))


def round_up_to_grid(p, m):
    """Smallest grid point ``⌈p·m⌉/m ≥ p`` of ``𝒫_m`` (vectorised)."""
    p = check_array(p, "p", **_P_INDEX)
    m = check_scalar(m, "m (grid resolution)", int, min_val=1)
    return np.minimum(np.ceil(p * m - GRID_ATOL) / m, P_MAX)


def rounding_cost_bound(delta, p, sigma_1, log_S, log_K, N):
    """Upper bound on ``log 𝒯(p+δ) − log 𝒯(p)`` for ``0 < p``, ``p + δ ≤ 2`` (Chapter 4, ``ch04-lem-rounding``):

    ``δ · [ log⁺(σ₁)/2 + log⁻(S_p)/4 + |2 log K + log N|/4 ]`` with ``log⁺ = max(log, 0)``,
    ``log⁻ = max(−log, 0)``. With ``δ ≤ 1/m`` and ``m ≥ L + ln N`` this is O(1) when log K = O(L).
    """
    delta = check_array(delta, "delta (the rounding step)", min_val=0.0)
    check_array(p, "p", **_P_INDEX)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    s1 = check_array(sigma_1, "sigma_1 (the largest singular value)", min_val=0.0, include_boundaries="neither")
    lpos = np.maximum(np.log(s1), 0.0)
    lneg = np.maximum(-np.asarray(log_S, dtype=np.float64), 0.0)
    return delta * (lpos / 2.0 + lneg / 4.0 + np.abs(2.0 * np.asarray(log_K) + np.log(N)) / 4.0)


def rounding_cost_bound_sharp(delta, p, sigma_1, log_K, N):
    """Sharper bound on ``log 𝒯(p+δ) − log 𝒯(p)`` for ``0 < p``, ``p + δ ≤ 2`` (Chapter 4, ``ch04-lem-rounding-sharp``):

    ``δ · (2 log σ₁ + 2 log K + log N)⁺ / 4``. With ``w_j = σ_j^p/S_p``,
    ``(p+2)² d/dp[log S_p/(p+2)] = 2 E_w[log σ] − H(w) ≤ 2 log σ₁``, so no ``log⁻S_p`` term is needed.
    Attained by a rank-one ``W`` as ``p, δ → 0`` (:func:`bounds_lib.checks.witnesses.rounding_witness`).

    Examples
    --------
    >>> import math
    >>> float(rounding_cost_bound_sharp(0.5, 1.0, math.e, 1.0, 1))   # 0.5·(2 + 2 + 0)/4
    0.5
    """
    delta = check_array(delta, "delta (the rounding step)", min_val=0.0)
    check_array(p, "p", **_P_INDEX)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    s1 = check_array(sigma_1, "sigma_1 (the largest singular value)", min_val=0.0, include_boundaries="neither")
    return delta * np.maximum(2.0 * np.log(s1) + 2.0 * np.asarray(log_K) + np.log(N), 0.0) / 4.0


def geometric_ratio(L):
    """``ρ = 1 + 1/L`` — the shell ratio of Chapter 4 (``ch04-lem-shells``): ``ρ^{3L} ≤ e³``."""
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    return 1.0 + 1.0 / L


def shell_index(r, ratio=2.0):
    """Shell ``j = ⌈log_ρ r⌉`` of a positive radius ``r`` (``ρ^{j−1} < r ≤ ρ^j``); ``ρ = 2``: dyadic.

    Computed with exact integer powers around the logarithm, so a radius equal to ``ρ^j`` is in shell ``j``.
    """
    rho = check_scalar(ratio, _RATIO, float, min_val=1.0, include_boundaries="neither")
    r = check_array(r, "r", min_val=0.0, include_boundaries="neither",
                    what="a radius must be positive and finite to have a shell")
    j = np.ceil(np.log(r) / math.log(rho)).astype(np.int64)
    # repair floating-point error in the logarithm: enforce ρ^{j-1} < r ≤ ρ^j
    j = np.where(np.power(rho, j.astype(float)) < r, j + 1, j)
    j = np.where(np.power(rho, (j - 1).astype(float)) >= r, j - 1, j)
    return j if j.ndim else int(j)


def shell_top(r, ratio=2.0):
    """``ρ^{⌈log_ρ r⌉} ∈ [r, ρ r)`` — the radius that the union bound uses for ``r``."""
    rho = check_scalar(ratio, _RATIO, float, min_val=1.0, include_boundaries="neither")
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
    k = check_scalar(matrices_per_layer, "matrices_per_layer", int, min_val=1)
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
    n = check_scalar(n, "n (sample size)", int, min_val=1)
    delta = check_scalar(delta, "delta (the confidence level)", float, min_val=0.0, max_val=1.0,
                         include_boundaries="neither")
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
    ``Λ_k = L_φ C_M C_V (1 + 2c C_QK)`` (:func:`bounds_lib.theory.propagation.log_layer_lipschitz`). Arrays of shape
    ``(trials, L)`` give one value per row. Chapter 4, ``ch04-lem-shells``.
    """

    rho = check_scalar(ratio, _RATIO, float, min_val=1.0, include_boundaries="neither")
    arrs = [np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in (C_M, C_V, C_QK)]
    if not (arrs[0].shape == arrs[1].shape == arrs[2].shape):
        raise ValueError(f"C_M, C_V, C_QK must have one shape, got {[a.shape for a in arrs]}")
    true = log_layer_lipschitz(*arrs, L_phi, softmax_const)
    top = log_layer_lipschitz(*(shell_top(a, rho) for a in arrs), L_phi, softmax_const)
    out = np.sum(top[:, 1:] - true[:, 1:], axis=1)
    return out if np.ndim(C_M) > 1 else float(out[0])
