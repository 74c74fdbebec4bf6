"""Checks of Chapter 4: the rounding lemma ``ch04-lem-rounding`` and the shells lemma ``ch04-lem-shells``.

The lemmas of :mod:`bounds_lib.theory.peeling`: the cost of rounding ``p`` up to a grid point
(:func:`rounding_ratio`, :func:`falsify_rounding`) and the inflation of ``α⁽⁰⁾`` by rounding spectral
radii up to shell tops (:func:`falsify_shell_inflation`, :func:`check_shells`), by random draws and
an optimiser on the harness of :mod:`bounds_lib.checks.harness` (the shells by a coordinate ascent made
for their saw-tooth objective).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.validation import check_scalar
from ..theory.norms import schatten_power
from ..theory.peeling import (_RATIO, geometric_ratio, log_alpha_inflation, log_term, rounding_cost_bound,
                              rounding_cost_bound_sharp, shell_top)
from .harness import CheckResult, Falsification, _sigmoid, falsify

__all__ = ["rounding_ratio", "falsify_rounding", "falsify_shell_inflation", "check_shells"]


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
    ``what="alpha"``: the inflation of ``α⁽⁰⁾`` itself
    (:func:`~bounds_lib.theory.peeling.log_alpha_inflation`, tight softmax constant).
    Radii are drawn log-uniformly in ``[low, high]``. ``ratio`` defaults to ``1 + 1/L``; ``bound_log``
    defaults to ``3(L−1)·log ρ``. Returns a :class:`~bounds_lib.checks.harness.Falsification` whose ratios
    are ``log inflation / bound_log`` (random draws; ``adversarial``: the coordinate-ascent optimum —
    a saw-tooth objective defeats Nelder–Mead, so the search is specialised).
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    if L < 2:
        raise ValueError("L must be >= 2: α⁽⁰⁾ is a product over layers 1..L-1")
    rho = (geometric_ratio(L) if ratio is None
           else check_scalar(ratio, _RATIO, float, min_val=1.0, include_boundaries="neither"))
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


def rounding_ratio(x, weaken=1.0, sharp=False):
    """``(log 𝒯(p') − log 𝒯(p)) / (bound/weaken)`` at a point ``x`` of ℝ^d.

    The bound is :func:`~bounds_lib.theory.peeling.rounding_cost_bound`, or with ``sharp=True``
    :func:`~bounds_lib.theory.peeling.rounding_cost_bound_sharp` (Lemma ``ch04-lem-rounding-sharp``).

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
    lS, lSq = math.log(schatten_power(s, p)), math.log(schatten_power(s, q))
    diff = log_term(lSq, q, logK, N) - log_term(lS, p, logK, N)
    bound = float(rounding_cost_bound_sharp(q - p, p, s[0], logK, N) if sharp else
                  rounding_cost_bound(q - p, p, s[0], lS, logK, N)) / weaken
    return diff / bound if bound > 0 else 0.0


def falsify_rounding(rng, trials=2000, restarts=8, weaken=1.0, k=4, sharp=False):
    """Random draws and a Nelder–Mead search for a violation of the rounding lemma (Chapter 4), or with
    ``sharp=True`` of its sharper form (``ch04-lem-rounding-sharp``).

    ``weaken > 1`` checks the bound divided by ``weaken`` (a power check: it must be violated).
    Uses :func:`~bounds_lib.checks.harness.falsify`.
    """
    def sample(r):
        return np.r_[r.normal(-1, 3), r.normal(0, 3), r.uniform(-10, 40), r.uniform(0, 7), r.uniform(-6, 3, k)]

    name = f"rounding lemma{', sharp' if sharp else ''} (bound / {weaken:g})"
    return falsify(name, lambda x: rounding_ratio(x, weaken, sharp), sample, rng, trials=trials, restarts=restarts)


def check_shells(rng, L=12, trials=10_000, adversarial_starts=2):
    """Lemma ``ch04-lem-shells`` at depth ``L``: four falsifications by :func:`falsify_shell_inflation`.

    Claims: dyadic shells (ratio 2) break the ``e³`` bound on the inflation of ``α⁽⁰⁾`` (violations,
    median inflation above 10³); shells of ratio ``1 + 1/L`` keep it within ``e³``; the product of the
    ``3(L−1)`` rounded radii reaches its supremum ``ρ^{3(L−1)}`` (worst ratio above 0.999, no
    violation); and, as power, the supremum divided by 1.1 is broken — by the optimiser only. ``values``:
    the four :class:`~bounds_lib.checks.harness.Falsification` and the inflations of the random draws
    (``dyadic``, ``geometric``).
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=2)
    kw = dict(trials=trials, adversarial_starts=adversarial_starts)
    dyadic = falsify_shell_inflation(rng, L, ratio=2.0, bound_log=3.0, what="alpha", **kw)
    geom = falsify_shell_inflation(rng, L, bound_log=3.0, what="alpha", **kw)
    tight = falsify_shell_inflation(rng, L, **kw)
    sup_log = 3 * (L - 1) * math.log(geometric_ratio(L))
    weak = falsify_shell_inflation(rng, L, bound_log=sup_log - math.log(1.1), **kw)
    # bound_log = 3: ratios are log-inflations / 3
    infl_dy, infl_geo = np.exp(3 * dyadic.ratios), np.exp(3 * geom.ratios)
    claims = (
        ("dyadic shells break e^3", dyadic.violations > 0 and float(np.median(infl_dy)) > 1e3),
        ("shells of ratio 1 + 1/L keep alpha within e^3", geom.violations == 0),
        ("the product reaches rho^k", tight.violations == 0 and tight.worst_ratio > 0.999),
        ("power: rho^k / 1.1 is broken by the optimiser", weak.violations > 0 and weak.worst_random <= 1),
    )
    detail = (f"median inflation of alpha^(0): dyadic {np.median(infl_dy):.3g}, "
              f"1 + 1/L {np.median(infl_geo):.3g} (e^3 = {math.e ** 3:.3g})")
    return CheckResult(f"shells at L = {L}", claims, detail,
                       dict(dyadic=dyadic, geometric=geom, tight=tight, weakened=weak,
                            inflation_dyadic=infl_dy, inflation_geometric=infl_geo))
