"""Checks of Chapter 5: the orders table against Theorem ``ch05-thm-main``.

The log factor of the table (Lemma ``ch05-lem-logfactor``: :func:`log_factors`,
:func:`falsify_log_factor`, :func:`check_log_factor`) and its Frobenius row
(:func:`falsify_frobenius_row`) by random draws and an optimiser on the harness of
:mod:`bounds_lib.checks.harness`; the theorem's constants, the infimum over ``p`` in each regime and the
table's orders in depth by SymPy (:func:`check_theorem_constants`, :func:`check_regime_slopes`,
:func:`check_orders_in_depth`), each a one-line :class:`~bounds_lib.checks.harness.CheckResult`.
"""
from __future__ import annotations

import math

import numpy as np

from ..theory.peeling import log_term
from .harness import CheckResult, Falsification, _sigmoid, falsify

__all__ = [
    "LOG_FACTOR_DOMAIN",
    "log_factor_functions",
    "log_factors",
    "falsify_log_factor",
    "check_log_factor",
    "frobenius_row_function",
    "frobenius_row_bound",
    "falsify_frobenius_row",
    "check_theorem_constants",
    "check_regime_slopes",
    "check_orders_in_depth",
]

#: Domain of :func:`falsify_log_factor`: ``(n, T, N, L, C)`` in ``[1, 1e9]×[1, 1e4]×[2, 1e5]×[1, 200]×[1/8, 10]``.
LOG_FACTOR_DOMAIN = ((1.0, 1e9), (1.0, 1e4), (2.0, 1e5), (1.0, 200.0), (0.125, 10.0))


def _log_factor_point(x):
    """``(n, T, N, L, C)`` from ``x ∈ ℝ⁵`` (a sigmoid onto each log-range of :data:`LOG_FACTOR_DOMAIN`)."""
    out = []
    for xi, (lo, hi) in zip(np.asarray(x, dtype=np.float64), LOG_FACTOR_DOMAIN):
        out.append(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * _sigmoid(float(xi))))
    return tuple(out)


def log_factor_functions():
    """``(√λ̄, table factor)`` as functions of ``(n, T, N, L, C)``, lambdified from the library's
    :func:`bounds_lib.theory.orders.theorem_log_factor` and :func:`bounds_lib.theory.orders.table_log_factor`:
    ``√(log(9nTN) + log⁺(8CN·C^L L))`` and ``√(log(nTN) + log⁺(C^L L))``."""
    import sympy as sp

    from ..theory.orders import SYMBOLS, table_log_factor, theorem_log_factor

    args = [SYMBOLS[k] for k in ("n", "T", "N", "L", "C")]
    # logs of products expanded (log C^L = L log C): no C^L overflows the float range
    thm, tab = (sp.expand_log(f(), force=True) for f in (theorem_log_factor, table_log_factor))
    return sp.lambdify(args, thm, "math"), sp.lambdify(args, tab, "math")


def log_factors(n, T, N, L, C):
    """``(√λ̄, table factor)`` of Chapter 5 at one point (:func:`log_factor_functions`).

    Examples
    --------
    >>> [round(v, 4) for v in log_factors(1e5, 128, 768, 12, 1.5)]
    [6.4564, 5.5099]
    """
    thm, tab = log_factor_functions()
    return float(thm(n, T, N, L, C)), float(tab(n, T, N, L, C))


def falsify_log_factor(rng, trials=2000, restarts=4, weaken=1.0):
    """Lemma ``ch05-lem-logfactor``: ``table ≤ √λ̄ ≤ κ(nTN)·table`` over :data:`LOG_FACTOR_DOMAIN`.

    Returns ``(upper, lower)``: two :class:`~bounds_lib.checks.harness.Falsification` of the ratios
    ``weaken·√λ̄/(κ·table)`` and ``weaken·table/√λ̄`` (random draws, then Nelder–Mead from the best).
    ``weaken = 1.1`` is the power check: both sides of the lemma are approached (the upper one as
    ``N → ∞`` with ``n = T = L = 1``, the lower one as ``nTN → ∞``), so both weakened bounds must be
    violated.
    """
    from ..theory.orders import log_factor_constant

    thm, tab = log_factor_functions()

    def up(x):
        n, T, N, L, C = _log_factor_point(x)
        return weaken * thm(n, T, N, L, C) / (log_factor_constant(n * T * N) * tab(n, T, N, L, C))

    def low(x):
        point = _log_factor_point(x)
        return weaken * tab(*point) / thm(*point)

    def sample(r):
        return r.normal(0.0, 3.0, 5)

    tag = "" if weaken == 1.0 else f" (÷{weaken:g})"
    return (falsify("√λ̄ ≤ κ·table" + tag, up, sample, rng, trials=trials, restarts=restarts, maxiter=800),
            falsify("table ≤ √λ̄" + tag, low, sample, rng, trials=trials, restarts=restarts, maxiter=800))


def check_log_factor(seed=5, trials=2000, restarts=4, old_factor=None, at=None):
    """Lemma ``ch05-lem-logfactor`` checked, and the old table's factor set against it (Chapter 5).

    Two runs of :func:`falsify_log_factor`, each from ``numpy.random.default_rng(seed)``: the lemma
    as proved and both of its sides weakened by 1.1. ``old_factor`` is the factor the earlier table
    used, as a SymPy ratio to the theorem's ``√λ̄`` (default
    ``√(log(nT)(L log C + log L)) / √λ̄``), evaluated at ``at`` (default ``n = 10⁵``, ``T = 128``,
    ``N = 768``, ``C = 1.5``) for ``L = 2, 12, 48``. Claims: no violation of either side; as power,
    both weakened sides are broken; the old factor leaves the band ``[1, κ]`` below (``L = 2``) and
    above (``L = 48``). ``values``: ``up``, ``low``, ``up_weak``, ``low_weak`` (the
    :class:`~bounds_lib.checks.harness.Falsification`), ``old_at`` (the old ratio per depth) and ``kappa``.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, log_factor_constant, theorem_log_factor

    n, T, N, C, L = (SYMBOLS[k] for k in ("n", "T", "N", "C", "L"))
    if old_factor is None:
        old_factor = sp.sqrt(sp.log(n * T) * (L * sp.log(C) + sp.log(L))) / theorem_log_factor()
    at = {n: 10**5, T: 128, N: 768, C: 1.5} if at is None else at
    up, low = falsify_log_factor(np.random.default_rng(seed), trials=trials, restarts=restarts)
    up_w, low_w = falsify_log_factor(np.random.default_rng(seed), trials=trials, restarts=restarts, weaken=1.1)
    old_at = {Lv: float(old_factor.subs(at).subs(L, Lv)) for Lv in (2, 12, 48)}
    kappa = log_factor_constant(float(at[n] * at[T] * at[N]))
    claims = (
        ("no violation of sqrt(lambda) <= kappa * table", up.violations == 0),
        ("no violation of table <= sqrt(lambda)", low.violations == 0),
        ("power: both sides / 1.1 are broken", up_w.violations > 0 and low_w.violations > 0),
        ("the old factor is below the band at L = 2", old_at[2] < 1),
        ("the old factor is above the band at L = 48", old_at[48] > kappa),
    )
    detail = (f"worst ratios {up.worst_ratio:.4f} (upper), {low.worst_ratio:.4f} (lower); old factor "
              + ", ".join(f"{v:.2f} at L = {k}" for k, v in old_at.items()) + f"; kappa = {kappa:.3f}")
    return CheckResult("the log factor of the table", claims, detail,
                       dict(up=up, low=low, up_weak=up_w, low_weak=low_w, old_at=old_at, kappa=kappa))


def frobenius_row_function(L=3):
    """``(C_F, log K, N) ↦ min(√(C_F K) N^{3/4}, N)``, the Frobenius row of the orders table, lambdified from the
    library's :func:`bounds_lib.theory.orders.regime_term` ``("frobenius")`` (SymPy, in ``C``, ``L``, ``C_F``,
    ``N`` with ``K = C^L·L``): ``K = e^{log K}`` is reached with ``L`` layers, ``C = (K/L)^{1/L}``."""
    import sympy as sp

    from ..theory.orders import SYMBOLS, regime_term

    f = sp.lambdify([SYMBOLS[k] for k in ("C", "L", "C_F", "N")], regime_term("frobenius"), "math")
    return lambda CF, log_K, N: float(f(math.exp((log_K - math.log(L)) / L), L, CF, N))


def frobenius_row_bound(CF, log_K, N, L=3):
    """:func:`frobenius_row_function` at one point."""
    return frobenius_row_function(L)(CF, log_K, N)


def falsify_frobenius_row(rng, trials=600, weaken=1.0, Ns=(4, 16), restarts=3):
    """``min_{p ∈ 𝒫_m} 𝒯(W;p) ≤ min(√(C_F K) N^{3/4}, N)`` for ``N×N`` matrices with ``‖W‖_F ≤ C_F``
    (the Frobenius row of Chapter 5; ``K = C^L L``, ``𝒯`` of :func:`bounds_lib.theory.peeling.log_term`, the
    row of :func:`frobenius_row_function`).

    Random spectra (any rank, scaled to ``‖W‖_F = C_F``), then Nelder–Mead over the log-spectrum,
    ``log C_F`` and ``log K``. ``weaken = 1.1`` is the power check: the flat spectrum ``σ_i = C_F/√N``
    attains the bound, so the bound divided by 1.1 must be violated.
    """
    from ..theory.peeling import posthoc_grid

    row = frobenius_row_function()

    def make(N):
        grid = posthoc_grid(1, N)

        def ratio(x):
            s = np.exp(np.clip(x[:N], -30.0, 5.0))
            CF, lK = float(np.exp(np.clip(x[N], -5.0, 8.0))), float(np.clip(x[N + 1], -5.0, 30.0))
            s = s * CF / np.linalg.norm(s)
            logS = np.log(np.sum(s[None, :] ** grid[1:, None], axis=1))
            logS = np.r_[math.log(np.count_nonzero(s > 0)), logS]   # p = 0: the rank
            lhs = float(np.min(log_term(logS, grid, lK, N)))
            return weaken * math.exp(lhs) / row(CF, lK, N)
        return ratio

    def sample(r, N):
        x = r.normal(0.0, 2.0, N + 2)
        if r.random() < 0.3:   # near-flat spectra
            x[:N] = r.normal(0.0, 0.05, N)
        x[N + 1] = r.uniform(-3.0, 12.0)
        return x

    parts = [falsify("Frobenius row", make(N), lambda r, N=N: sample(r, N), rng, trials=trials,
                     restarts=restarts, maxiter=1500) for N in Ns]
    tag = "" if weaken == 1.0 else f" (÷{weaken:g})"
    return Falsification("Frobenius row: inf_p 𝒯 ≤ min(√(C_F K)N^{3/4}, N)" + tag,
                         np.concatenate([f.ratios for f in parts]), np.concatenate([f.adversarial for f in parts]))


def check_theorem_constants(theta2=None, log_theta=None):
    """The constants of Theorem ``ch05-thm-main`` at ``d_j = d_j' = N``: SymPy and the library's ``log θ``.

    ``theta2`` is ``θ_j²`` as a SymPy expression in the symbols of ``bounds_lib.theory.orders.SYMBOLS``
    (``C_s``, ``N``, ``K``) and ``p`` positive; the default is the theorem's
    ``2(2C_sN)^{2/(p+2)}(144N²)^{p/(p+2)}K^{2p/(p+2)}`` (a test passes a wrong one). ``log_theta`` is the
    function the theorem is evaluated with (default :func:`bounds_lib.theory.theorem.log_theta`; a test passes
    a wrong one). Claims: ``θ_j²/𝒯(W;p)² = 2·2^{2/(p+2)}·144^{p/(p+2)}`` symbolically; the same ratio from
    ``log_theta`` against :func:`bounds_lib.theory.peeling.log_term` at 9 grid points ``p ∈ [0, 2]`` and random
    ``log S_p``, ``log K`` (``N = 64``; at ``p = 0``, ``θ² = 2·𝒯(W;0)²``), to ``1e-9``; and
    ``∫₀¹ ε^{-1/2}√log(1/ε) dε = √(2π)`` (``values["integral"]``). Two facts the theorem uses are
    identities and are not claims here: at ``p = 0`` ``r(N + N)/(rN) = 2``, and ``2p/(p+2) ≤ 1 ⇔ p ≤ 2``.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, released_term
    from ..theory.theorem import log_theta as theorem_log_theta

    fn = theorem_log_theta if log_theta is None else log_theta
    C_s, N, K = SYMBOLS["C_s"], SYMBOLS["N"], SYMBOLS["K"]
    pp = sp.Symbol("p", positive=True)
    if theta2 is None:
        theta2 = 2 * (2 * C_s * N) ** (2 / (pp + 2)) * (144 * N * N) ** (pp / (pp + 2)) * K ** (2 * pp / (pp + 2))
    const = sp.expand_log(sp.log(theta2 / released_term(C_s, K, pp) ** 2), force=True)
    want = sp.log(2 * 2 ** (2 / (pp + 2)) * 144 ** (pp / (pp + 2)))
    # the library's log θ against log 𝒯 at points of the grid: the same constant, p = 0 included
    ps, width = np.linspace(0.0, 2.0, 9), 64
    draws = np.random.default_rng(0).uniform(-5.0, 10.0, (16, 2))
    expected = np.where(ps > 0, [float(want.subs(pp, x)) / 2 for x in np.maximum(ps, 1e-3)], 0.5 * math.log(2.0))
    gap = max(float(np.max(np.abs(fn(lS, ps, lK, width, width) - log_term(lS, ps, lK, width) - expected)))
              for lS, lK in draws)
    # ε = e^{-u}: ∫_0^1 ε^{-1/2}√log(1/ε) dε = ∫_0^∞ e^{-u/2}√u du
    u = sp.Symbol("u", positive=True)
    integral = sp.integrate(sp.exp(-u / 2) * sp.sqrt(u), (u, 0, sp.oo))
    claims = (
        ("theta_j^2 / T(W;p)^2 = 2 * 2^(2/(p+2)) * 144^(p/(p+2))", sp.simplify(const - want) == 0),
        ("theorem.log_theta has that constant (and 2 at p = 0) on the grid", gap < 1e-9),
        ("the Dudley integral at lambda = 0 is sqrt(2 pi)", sp.simplify(integral - sp.sqrt(2 * sp.pi)) == 0),
    )
    return CheckResult("Theorem 5.1's constants", claims,
                       f"integral = {sp.sstr(integral)}; log_theta off by {gap:.1e}",
                       dict(integral=integral, log_theta_gap=gap))


def check_regime_slopes(frobenius_term=None):
    """Which ``p`` is the infimum in each regime of the orders table (Chapter 5), by SymPy.

    ``(p+2)²·d/dp log 𝒯`` is ``2(L+1)log C + 2log L + log(N/r)`` in the low-rank regime and
    ``2(L+1)log C + 2log L`` in the spectral-only one (free of ``p``, so ``p = 0`` is the infimum for
    ``C ≥ 1``), and ``2log(C_F K) − log N`` for the Frobenius Hölder term
    (``frobenius_term``, default :func:`bounds_lib.theory.orders.frobenius_holder_term`; a test passes a
    wrong one): of one sign on ``[0, 2]``. ``values["low_rank"]`` is the low-rank slope.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, frobenius_holder_term, regime_log_slope

    L, N, C, p, r, C_F = (SYMBOLS[k] for k in ("L", "N", "C", "p", "r", "C_F"))
    term = frobenius_holder_term(p) if frobenius_term is None else frobenius_term

    def same(a, b):
        return sp.simplify(sp.expand_log(a - b, force=True)) == 0

    lr, spec = regime_log_slope("low_rank"), regime_log_slope("spectral")
    fro = sp.diff(sp.log(term), p) * (p + 2) ** 2
    depth = 2 * (L + 1) * sp.log(C) + 2 * sp.log(L)
    claims = (
        ("low-rank slope 2(L+1) log C + 2 log L + log(N/r)", same(lr, depth + sp.log(N / r))),
        ("spectral slope 2(L+1) log C + 2 log L", same(spec, depth)),
        ("Frobenius slope 2 log(C_F K) - log N, free of p",
         same(fro, 2 * sp.log(C_F) + 2 * L * sp.log(C) + 2 * sp.log(L) - sp.log(N))),
    )
    return CheckResult("the infimum over p in each regime", claims, values=dict(low_rank=lr))


def check_orders_in_depth(tables):
    """Every row of the orders table stays exponentially better in depth than both baselines.

    ``tables`` maps each aggregation of ``bounds_lib.theory.orders.AGGREGATIONS`` to an
    :func:`bounds_lib.theory.orders.orders_table`; one claim per regime, aggregation and baseline:
    ``ours / baseline → 0`` as ``L → ∞`` (:func:`bounds_lib.theory.orders.limit_in_depth`).
    """
    from ..theory.orders import REGIMES, limit_in_depth

    claims = tuple((f"{g} ({agg}) / {b} -> 0 in depth",
                    limit_in_depth(t[g]["ours"] / t[g][b]) == 0)
                   for agg, t in tables.items() for g in REGIMES for b in ("edelman", "trauger_tewari"))
    return CheckResult("the orders table in depth", claims)
