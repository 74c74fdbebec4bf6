"""Leading orders of the bounds, as SymPy expressions (Chapters 2, 4 and 5).

Symbols: depth ``L``, hidden size ``N``, per-matrix spectral bound ``C`` (so ``α ≍ C^L`` and
``K = γαL ≍ C^L·L``), Frobenius bound ``C_F``, rank ``r``, Schatten index ``p``.

* This bound, per matrix (released ``𝒯(W;p)``, Chapter 4 ``ch04-eq-term``):
  ``𝒯 = S_p^{1/(p+2)} K^{p/(p+2)} N^{(p+1)/(p+2)}``, aggregated over ``≍ L`` matrices either by a
  sum (released ``B_ours``) or a root-sum-square (the paper's examples table).
* Regimes: Frobenius (``p = 2``, ``S_2 ≤ C_F²``), rank ≤ r (``p = 0``,
  ``S_0 = r``), spectral only (``p = 0``, ``S_0 = N``).
* Edelman et al. (2022): ``C^L L^{3/2} ‖W‖_{2,1}``; Trauger & Tewari (2024): ``C^L L^{3/2} ‖W‖_{1,1}``,
  with ``‖W‖_{2,1} ≤ √N ‖W‖_F`` and ``‖W‖_{1,1} ≤ √N ‖W‖_{2,1}``.
"""
from __future__ import annotations

import sympy as sp

__all__ = [
    "SYMBOLS",
    "REGIMES",
    "AGGREGATIONS",
    "entropy_terms",
    "balanced_tau",
    "balanced_log_covering",
    "dudley_integral",
    "term_from_covering",
    "released_term",
    "frobenius_holder_term",
    "regime_term",
    "log_K_factor",
    "theorem_log_factor",
    "table_log_factor",
    "log_factor_constant",
    "regime_log_slope",
    "ours_order",
    "edelman_order",
    "trauger_tewari_order",
    "orders_table",
    "TABLE_AS_PRINTED",
    "printed_leading_order",
    "limit_in_depth",
    "n_exponent",
]

L, N, C, C_F, r, p, eps, tau, C_s, l, m, K = sp.symbols("L N C C_F r p epsilon tau C_s ell m K", positive=True)
n, T = sp.symbols("n T", positive=True)
SYMBOLS = dict(L=L, N=N, C=C, C_F=C_F, r=r, p=p, eps=eps, tau=tau, C_s=C_s, l=l, m=m, K=K, n=n, T=T)
REGIMES = ("frobenius", "low_rank", "spectral")
AGGREGATIONS = ("sum", "rss")


def entropy_terms(l_=l, m_=m, p_=p):
    """``((C_s/τ^p)(ℓ+m), τ² ℓ m/ε²)`` — low-rank and Frobenius entropies, with ``ℓ = min(ℓ,m)`` assumed."""
    return C_s / tau**p_ * (l_ + m_), tau**2 * l_ * m_ / eps**2


def balanced_tau(l_=l, m_=m, p_=p):
    """Solve ``entropy_low_rank = entropy_frobenius`` for ``τ`` (SymPy; Chapter 2, eq. ``ch02-eq-tau``).

    Examples
    --------
    >>> balanced_tau()
    (C_s*epsilon**2*(ell + m)/(ell*m))**(1/(p + 2))
    """
    a, b = entropy_terms(l_, m_, p_)
    sols = sp.solve(sp.Eq(sp.log(a), sp.log(b)), tau)
    if len(sols) != 1:
        raise RuntimeError(f"expected one positive balancing τ, got {sols}")
    return sp.simplify(sols[0])


def balanced_log_covering(l_=l, m_=m, p_=p):
    """Either entropy term evaluated at the balancing τ (the log-covering order)."""
    a, _ = entropy_terms(l_, m_, p_)
    return sp.powsimp(sp.simplify(a.subs(tau, balanced_tau(l_, m_, p_))), force=True)


def dudley_integral(p_=p):
    """``∫₀¹ ε^{−p/(p+2)} dε`` (the entropy integral's ε dependence), ``= (p+2)/2`` (exact for numeric p too)."""
    p_ = sp.sympify(p_)
    return sp.simplify(sp.integrate(eps ** (-p_ / (p_ + 2)), (eps, 0, 1), conds="none"))


def term_from_covering(p_=p):
    """``√(log 𝒩(ε/K))`` for a square ``W ∈ ℝ^{N×N}``, stripped of its ``ε^{−p/(p+2)}`` factor."""
    cov = balanced_log_covering(N, N, p_).subs(eps, eps / K)
    return sp.powsimp(sp.simplify(sp.sqrt(cov) * eps ** (p_ / (p_ + 2))), force=True)


def released_term(S=C_s, K_=K, p_=p):
    """The released per-matrix term ``𝒯(W;p) = S^{1/(p+2)} K^{p/(p+2)} N^{(p+1)/(p+2)}`` (Chapter 4, ``ch04-eq-term``).

    Parameters
    ----------
    S : sympy.Expr
        The Schatten quantity ``S_p(W)`` (default: the budget ``C_s``).
    K_ : sympy.Expr
        The effective scale ``K``.
    p_ : sympy.Expr or number
        The Schatten index.

    Returns
    -------
    sympy.Expr
        ``𝒯``.

    Examples
    --------
    >>> released_term()
    C_s**(1/(p + 2))*K**(p/(p + 2))*N**((p + 1)/(p + 2))
    >>> released_term(SYMBOLS["r"], SYMBOLS["K"], 0)   # p = 0: √(rank · N)
    sqrt(N)*sqrt(r)
    """
    p_ = sp.sympify(p_)
    return S ** (1 / (p_ + 2)) * K_ ** (p_ / (p_ + 2)) * N ** ((p_ + 1) / (p_ + 2))


def frobenius_holder_term(p_=p):
    """``𝒯`` at index ``p`` of an ``N×N`` matrix known only through ``‖W‖_F ≤ C_F`` (Chapter 5).

    ``rank ≤ N`` always holds, so Hölder gives ``S_p = Σσ^p ≤ N^{1−p/2}(Σσ²)^{p/2} ≤ N^{1−p/2}C_F^p``
    (equality for ``N`` equal singular values ``C_F/√N``); with ``K = C^L·L``,
    ``𝒯 ≤ N^{(2+p/2)/(p+2)} (C_F K)^{p/(p+2)}``: ``N`` at ``p = 0``, ``√(C_F K) N^{3/4}`` at ``p = 2``.

    Examples
    --------
    >>> frobenius_holder_term(2)
    C**(L/2)*sqrt(C_F)*sqrt(L)*N**(3/4)
    >>> frobenius_holder_term(0)
    N
    """
    p_ = sp.sympify(p_)
    S = N ** (1 - p_ / 2) * C_F**p_
    return sp.powsimp(sp.simplify(released_term(S, C**L * L, p_)), force=True)


def regime_term(regime):
    """``inf_p 𝒯`` of one matrix in a regime, with ``K = C^L·L`` (Chapter 5, the orders table).

    Frobenius: only ``‖W‖_F ≤ C_F`` (and ``rank ≤ N``) is known; ``log`` of
    :func:`frobenius_holder_term` is ``(a + b p)/(p+2)``, monotone in ``p``, so the infimum over
    ``[0, 2]`` is at an end: ``min(√(C_F K) N^{3/4}, N)``. Low rank: ``p = 0``, ``S_0 = r``; spectral
    only: ``p = 0``, ``S_0 = N`` (both infima at ``p = 0``, :func:`regime_log_slope`).

    Examples
    --------
    >>> regime_term("low_rank")
    sqrt(N)*sqrt(r)
    """
    if regime == "frobenius":
        return sp.Min(frobenius_holder_term(2), frobenius_holder_term(0))
    if regime == "low_rank":
        return released_term(r, C**L * L, 0)
    if regime == "spectral":
        return released_term(N, C**L * L, 0)
    raise ValueError(f"unknown regime {regime!r}; supported: {', '.join(REGIMES)}")


def log_K_factor():
    """``√(log⁺ K) = √(max(L log C + log L, 0))`` with ``K = C^L·L`` (real for every ``C > 0``)."""
    return sp.sqrt(sp.Max(L * sp.log(C) + sp.log(L), 0))


def theorem_log_factor():
    """The theorem's ``√λ̄`` in a regime (Chapter 5, ``ch05-eq-theta``), square ``N×N`` matrices,
    ``c_j ≤ C`` and ``K = C^L·L``: ``√(log(9nTN) + log⁺(8 C N K))``."""
    return sp.sqrt(sp.log(9 * n * T * N) + sp.Max(sp.log(8 * C * N * C**L * L), 0))


def table_log_factor():
    """The orders table's factor ``√(log(nTN) + log⁺ K)``, ``K = C^L·L`` (Chapter 5).

    Lemma ``ch05-lem-logfactor``: for ``n, T ≥ 1``, ``nTN > 1`` and ``C ≥ 1/8``,
    ``1 ≤ theorem_log_factor / table_log_factor ≤ log_factor_constant(nTN)``.
    """
    return sp.sqrt(sp.log(n * T * N) + sp.Max(L * sp.log(C) + sp.log(L), 0))


def log_factor_constant(nTN):
    """``κ(nTN) = √(2 + log 72 / log(nTN))`` (``nTN > 1``): the constant of Lemma ``ch05-lem-logfactor``.

    Examples
    --------
    >>> round(log_factor_constant(1e10), 4)
    1.4784
    """
    x = float(nTN)
    if not x > 1.0:
        raise ValueError(f"nTN must exceed 1 (log(nTN) > 0), got {nTN!r}")
    import math
    return math.sqrt(2.0 + math.log(72.0) / math.log(x))


def regime_log_slope(regime):
    """``(p+2)² · d/dp log 𝒯(p)`` in a regime where ``S_p`` is bounded for every ``p`` (Chapter 5).

    Rank ``≤ r`` and ``‖W‖₂ ≤ C`` give ``S_p ≤ r C^p``; spectral only gives ``S_p ≤ N C^p``; with
    ``K = C^L L``, ``log 𝒯 = (log S + p log K + (p+1) log N)/(p+2)`` has
    ``(p+2)² d log 𝒯/dp = 2 log(CK) + log N − log S_0``, independent of ``p`` and ``≥ 0`` when
    ``C ≥ 1`` and ``S_0 ≤ N``: the infimum over ``p ∈ [0, 2]`` is at ``p = 0``.
    """
    if regime == "low_rank":
        S = r * C**p
    elif regime == "spectral":
        S = N * C**p
    else:
        raise ValueError(f"regime {regime!r} bounds S_p at every p only for 'low_rank' and 'spectral'")
    logT = sp.expand_log(sp.log(released_term(S, C**L * L, p)), force=True)
    return sp.simplify(sp.expand_log(sp.diff(logT, p) * (p + 2) ** 2, force=True))


def ours_order(regime, aggregation, log_factor=False):
    """Order of this bound over ``L`` layers: ``L·𝒯`` (sum) or ``√L·𝒯`` (root-sum-square) (Chapter 5).

    ``log_factor=True`` multiplies by :func:`table_log_factor`, ``√(log(nTN) + log⁺ K)``: the
    corrected theorem's ``√λ̄`` up to the constant of Lemma ``ch05-lem-logfactor`` (Chapter 5). The
    baselines' columns are shown without their own logarithmic factors.

    Parameters
    ----------
    regime : {"frobenius", "low_rank", "spectral"}
        The regime of :func:`regime_term`.
    aggregation : {"sum", "rss"}
        How the per-matrix terms are aggregated.
    log_factor : bool
        Include :func:`table_log_factor`.

    Returns
    -------
    sympy.Expr
        The leading order.

    Raises
    ------
    ValueError
        An unknown regime or aggregation.

    Examples
    --------
    >>> ours_order("low_rank", "rss")   # the examples table's √(rLN)
    sqrt(L)*sqrt(N)*sqrt(r)
    """
    T = regime_term(regime)
    if aggregation == "sum":
        out = L * T
    elif aggregation == "rss":
        out = sp.sqrt(L * T**2)
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}; supported: {', '.join(AGGREGATIONS)}")
    if log_factor:
        out = out * table_log_factor()
    return sp.powsimp(out, force=True)


def _norm21(regime):
    """Regime bound on ``‖W‖_{2,1} ≤ √N ‖W‖_F``: ``√N C_F``, ``√N √r C``, ``√N · √N C``."""
    return {"frobenius": sp.sqrt(N) * C_F, "low_rank": sp.sqrt(N) * sp.sqrt(r) * C,
            "spectral": sp.sqrt(N) * sp.sqrt(N) * C}[regime]


def edelman_order(regime, depth="max"):
    """``(Σ_ℓ α_ℓ^{2/3} ‖W‖_{2,1}^{2/3})^{3/2}`` with ``‖W‖_{2,1} ≤ √N ‖W‖_F`` and the regime's ``‖W‖_F``
    bound (``C_F``; ``√r·C``; ``√N·C``).

    ``depth="max"``: every ``α_ℓ ≤ C^L`` (the form of the paper's table, ``L^{3/2}C^L``);
    ``depth="geometric"``: ``α_ℓ = C^{L-ℓ}`` summed exactly, ``Σ_{ℓ=1}^{L} C^{2(L-ℓ)/3}`` — equal to the
    ``max`` form up to ``L^{3/2}`` only as ``C → 1``.
    """
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; supported: {', '.join(REGIMES)}")
    w = _norm21(regime)
    if depth == "max":
        s = L * (C**L) ** sp.Rational(2, 3)
    elif depth == "geometric":
        k = sp.Symbol("k", integer=True, nonnegative=True)
        s = sp.summation((C ** sp.Rational(2, 3)) ** k, (k, 0, L - 1))
    else:
        raise ValueError(f"unknown depth form {depth!r}; supported: 'max', 'geometric'")
    return sp.powsimp(sp.simplify((s * w ** sp.Rational(2, 3)) ** sp.Rational(3, 2)), force=True)


def trauger_tewari_order(regime, depth="max"):
    """As :func:`edelman_order` with ``‖W‖_{1,1} ≤ √N ‖W‖_{2,1}`` (one extra ``√N``)."""
    return sp.powsimp(sp.simplify(edelman_order(regime, depth) * sp.sqrt(N)), force=True)


def orders_table(aggregation="rss", log_factor=False):
    """``{regime: {"ours": …, "edelman": …, "trauger_tewari": …}}`` derived from the three bounds."""
    return {g: {"ours": ours_order(g, aggregation, log_factor), "edelman": edelman_order(g),
                "trauger_tewari": trauger_tewari_order(g)} for g in REGIMES}


#: The examples table as printed in the summary of the paper (Chapter 5).
TABLE_AS_PRINTED = {
    "frobenius": {"ours": sp.sqrt(C_F) * C ** (L / 2) * L * N ** sp.Rational(3, 4),
                  "edelman": C_F * C**L * L ** sp.Rational(3, 2) * sp.sqrt(N),
                  "trauger_tewari": C_F * C**L * L ** sp.Rational(3, 2) * N},
    "low_rank": {"ours": sp.sqrt(r * L * N), "edelman": C**L * L ** sp.Rational(3, 2) * sp.sqrt(r * N),
                 "trauger_tewari": C**L * L ** sp.Rational(3, 2) * sp.sqrt(r) * N},
    "spectral": {"ours": sp.sqrt(L) * N, "edelman": C**L * L ** sp.Rational(3, 2) * N,
                 "trauger_tewari": C**L * L ** sp.Rational(3, 2) * N ** sp.Rational(3, 2)},
}


def printed_leading_order(p_=p):
    """The summary's printed leading order ``√C_s C^{Lp/(p+2)} L N^{(p+2)/(2(p+1))}`` (Chapter 5, errata)."""
    p_ = sp.sympify(p_)
    return sp.sqrt(C_s) * C ** (L * p_ / (p_ + 2)) * L * N ** ((p_ + 2) / (2 * (p_ + 1)))


def limit_in_depth(expr):
    """``lim_{L→∞} expr`` at a fixed ``C > 1`` (substitutes ``C = 1 + c``, ``c > 0``).

    ``log⁺`` terms ``Max(x, 0)`` are replaced by ``x`` (for ``C > 1`` and ``L ≥ 1`` every ``log⁺`` of
    this module is ``log`` of a number ``≥ 1``); a ``Min(a, b)`` factor is split, since
    ``lim Min(a, b) = Min(lim a, lim b)`` on the extended half-line.
    """
    c = sp.Symbol("c", positive=True)
    e = sp.powsimp(sp.sympify(expr).subs(C, 1 + c), force=True)
    e = e.replace(lambda x: isinstance(x, sp.Max) and len(x.args) == 2 and 0 in x.args,
                  lambda x: [a for a in x.args if a != 0][0])
    mins = [x for x in e.atoms(sp.Min)]
    if mins:
        m0 = mins[0]
        return sp.Min(*(limit_in_depth(e.xreplace({m0: a}).subs(c, C - 1)) for a in m0.args))
    return sp.limit(e, L, sp.oo)


def n_exponent(expr):
    """Exponent of ``N`` in a monomial-type expression: ``lim_{N→∞} log(expr)/log N``."""
    return sp.simplify(sp.limit(sp.expand_log(sp.log(expr), force=True) / sp.log(N), N, sp.oo))
