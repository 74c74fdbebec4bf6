"""Checks of the asymptotic orders and closed forms of Chapters 1, 2, 5 and 6, each one line.

What a chain of ``assert sp.simplify(...) == 0`` lines used to check in a chapter, as a
:class:`~bounds_lib.checks.harness.CheckResult`: named claims, one summary line, ``require()`` that raises
with the failing claim's name. Every check takes what it verifies — the integrand, the claimed
closed form, the exponent, the measured grid — as a parameter whose default is the book's, so a
test can pass a wrong one and see the named claim fail (a SymPy check that could not fail would be
no evidence).

* Chapter 1 — :func:`check_dudley_integral` (Dudley's integral of an entropy
  ``∝ ε^{-2p/(p+2)}``), :func:`check_dudley_scaling` (the ``n^{-1/2}√d`` scaling of Dudley's bound on
  the linear class, against a Monte Carlo estimate);
* Chapter 2 — :func:`check_balanced_covering` (the balancing threshold, the balanced entropy and its
  ε-exponent), :func:`check_balance_factor` (the minimum over ``τ`` against the balanced value),
  :func:`check_dudley_log_integral` (Dudley's integral with the logarithms kept),
  :func:`check_covering_endpoints` and :func:`check_sharp_tail_covering` (two exercises);
* Chapter 5 — :func:`check_printed_order` (the errata of the printed leading order);
* Chapter 6 — :func:`check_architecture_bound` (``B_ours`` as a function of the shapes alone).

The checks of the inequalities (random draws, optimisers, power checks) are in
:mod:`bounds_lib.checks`.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from .harness import CheckResult
from ..theory.orders import SYMBOLS

__all__ = [
    "ENTROPY_EXPONENT_GRID",
    "eps_exponent",
    "check_dudley_integral",
    "log_log_slopes",
    "check_dudley_scaling",
    "check_balanced_covering",
    "check_balance_factor",
    "check_dudley_log_integral",
    "check_covering_endpoints",
    "check_sharp_tail_covering",
    "check_printed_order",
    "check_architecture_bound",
]

#: The Schatten indices at which an entropy integral is evaluated exactly (grid end points and inside).
ENTROPY_EXPONENT_GRID = (0, sp.Rational(1, 2), 1, 2)

_P, _EPS = SYMBOLS["p"], SYMBOLS["eps"]


def _zero(expr) -> bool:
    """``expr`` simplifies to 0, logarithms of products expanded (also for symbols without assumptions)."""
    return sp.simplify(sp.expand_log(sp.sympify(expr), force=True)) == 0


def _same(a, b) -> bool:
    """``a = b`` for positive expressions: their logarithms agree."""
    return _zero(sp.log(a) - sp.log(b))


def _log_exponent(expr, x):
    """``d log(expr)/d log x``: the exponent of ``x`` in ``expr``, read off the formula."""
    return sp.simplify(sp.diff(sp.log(expr), x) * x)


def eps_exponent(expr, eps=_EPS):
    """``−d log(expr)/d log ε``: the exponent ``a`` of ``expr ∝ ε^{-a}``, read off the expression.

    Examples
    --------
    >>> p, e = sp.symbols("p e", positive=True)
    >>> eps_exponent(e ** (-p / (p + 2)), e)
    p/(p + 2)
    """
    return -_log_exponent(expr, eps)


def _integral_finite(integrand, eps) -> bool:
    """``∫₀¹ integrand dε`` is finite (SymPy)."""
    return bool(sp.integrate(integrand, (eps, 0, 1)).is_finite)


# ---------------------------------------------------------------- Chapter 1


def check_dudley_integral(integrand=None, p=None, eps=None, closed_form=None):
    """Dudley's integral ``∫₀¹ √(log 𝒩(ε)) dε`` for an entropy ``∝ ε^{-2p/(p+2)}`` (Chapter 1).

    ``integrand`` is ``√(log 𝒩)`` as a SymPy expression in ``p`` and ``eps`` (default
    ``√E·ε^{-p/(p+2)}``, all symbols positive) and ``closed_form`` the claimed value of the integral
    (default ``√E(p+2)/2``). Claims: the integral equals the closed form; the ε-exponent, read off
    the integrand (:func:`eps_exponent`), is at most 1/2 on ``[0, 2]`` with maximum 1/2; it is
    below 1 there (integrability); the integral is finite at every ``p`` of
    :data:`ENTROPY_EXPONENT_GRID`; and a control of the finiteness test itself on a fixed input (it
    reports ``∫₀¹ ε^{-1} dε``, exponent 1, as infinite) — a test of the tester, the same for every
    integrand, so labelled as a control rather than as power. ``values``: ``integral``,
    ``exponent``.
    """
    if integrand is None:
        p, eps = sp.symbols("p epsilon", positive=True)
        E = sp.Symbol("E", positive=True)
        integrand = sp.sqrt(E) * eps ** (-p / (p + 2))
        closed_form = sp.sqrt(E) * (p + 2) / 2 if closed_form is None else closed_form
    if p is None or eps is None or closed_form is None:
        raise ValueError("pass the integrand with its symbols p and eps and the claimed closed_form "
                         "(or none of them for the book's)")
    integral = sp.simplify(sp.integrate(integrand, (eps, 0, 1), conds="none"))
    a = eps_exponent(integrand, eps)
    above_one = sp.solve_univariate_inequality(a >= 1, p, relational=False) & sp.Interval(0, 2)
    claims = (
        ("the integral equals the closed form", _zero(integral - closed_form)),
        ("the eps-exponent is at most 1/2 on [0, 2], attained",
         sp.maximum(a, p, sp.Interval(0, 2)) == sp.Rational(1, 2)),
        ("the eps-exponent is below 1 on [0, 2]", above_one == sp.EmptySet),
        ("finite at p = 0, 1/2, 1, 2", all(_integral_finite(integrand.subs(p, v), eps) for v in ENTROPY_EXPONENT_GRID)),
        ("control of the finiteness test (fixed input): int_0^1 1/eps is infinite",
         not _integral_finite(eps ** -1, eps)),
    )
    return CheckResult("Dudley's integral", claims, f"integral = {sp.sstr(integral)}, "
                       f"eps-exponent {sp.sstr(a)}", dict(integral=integral, exponent=a))


def log_log_slopes(values, ns, ds):
    """Least-squares slopes ``(s_n, s_d)`` of ``log values = c + s_n log n + s_d log d`` on the grid
    ``values[i, j]`` at ``(ns[i], ds[j])``.

    Examples
    --------
    >>> ns, ds = np.array([10.0, 100.0]), np.array([2.0, 8.0])
    >>> [round(float(s), 6) for s in log_log_slopes(ns[:, None] ** -0.5 * ds ** 0.5, ns, ds)]
    [-0.5, 0.5]
    """
    values, ns, ds = np.asarray(values), np.asarray(ns), np.asarray(ds)
    if values.shape != (ns.size, ds.size) or not np.all(values > 0):
        raise ValueError(f"values must be a positive grid of shape ({ns.size}, {ds.size}), got shape {values.shape}")
    design = np.column_stack([np.ones(values.size), np.log(np.repeat(ns, ds.size)), np.log(np.tile(ds, ns.size))])
    return tuple(float(s) for s in np.linalg.lstsq(design, np.log(values).ravel())[0][1:])


def check_dudley_scaling(ns, ds, bound, mc, tol_bound=0.02, tol_mc=(0.05, 0.1)):
    """Dudley's bound on the linear class scales as ``n^{-1/2}√d``; the truth as ``n^{-1/2}`` (Chapter 1).

    ``bound[i, j]`` and ``mc[i, j]`` are Dudley's bound (:func:`bounds_lib.theory.norms.dudley_bound_linear`)
    and a Monte Carlo estimate of the Rademacher complexity at ``(ns[i], ds[j])``. Claims: the
    bound's log-log slopes (:func:`log_log_slopes`) are ``−1/2`` in ``n`` and ``+1/2`` in ``d`` within
    ``tol_bound``; the estimate's are ``−1/2`` in ``n`` within ``tol_mc[0]`` and ``0`` in ``d``
    within ``tol_mc[1]``; the bound is above the estimate everywhere; and below the trivial bound 1
    at the largest ``n``. ``values``: the four slopes (``s_n``, ``s_d``, ``s_n_mc``, ``s_d_mc``).
    """
    s_n, s_d = log_log_slopes(bound, ns, ds)
    s_n_mc, s_d_mc = log_log_slopes(mc, ns, ds)
    bound, mc = np.asarray(bound), np.asarray(mc)
    claims = (
        ("the bound falls like n^(-1/2)", abs(s_n + 0.5) < tol_bound),
        ("the bound grows like sqrt(d)", abs(s_d - 0.5) < tol_bound),
        ("the Monte Carlo estimate falls like n^(-1/2)", abs(s_n_mc + 0.5) < tol_mc[0]),
        ("the Monte Carlo estimate is (almost) free of d", abs(s_d_mc) < tol_mc[1]),
        ("the bound is above the estimate everywhere", bool(np.all(mc < bound))),
        ("the bound is below 1 at the largest n", bool(np.all(bound[-1] < 1))),
    )
    detail = (f"slopes in n: bound {s_n:.3f}, Monte Carlo {s_n_mc:.3f}; "
              f"in d: bound {s_d:.3f}, Monte Carlo {s_d_mc:.3f}")
    return CheckResult("Dudley's bound on the linear class", claims, detail,
                       dict(s_n=s_n, s_d=s_d, s_n_mc=s_n_mc, s_d_mc=s_d_mc))


# ---------------------------------------------------------------- Chapter 2


def check_balanced_covering(tau_formula=None, covering=None, exponent=None, balanced_sum=None):
    """Theorem ``ch02-thm-covering``: the balancing threshold and the balanced entropy, by SymPy.

    With ``d ≤ d'`` (``ℓ = min``, ``m = d'``: the symbols of ``bounds_lib.theory.orders.SYMBOLS``) the
    claimed forms are ``tau_formula`` (default ``(C_s(ℓ+m)ε²/(ℓm))^{1/(p+2)}``, eq.
    ``ch02-eq-tau``), ``covering`` (default ``((C_s(ℓ+m))²(ℓm)^p/ε^{2p})^{1/(p+2)}``, either entropy
    term at ``τ*``, eq. ``ch02-eq-covering``), ``exponent`` (default ``2p/(p+2)``) and, for any
    coefficients ``a, b > 0`` (also ``d > d'``), ``balanced_sum`` (default
    ``2a^{2/(p+2)}b^{p/(p+2)}``, in positive symbols ``a``, ``b`` and ``p``). Claims:
    :func:`bounds_lib.theory.orders.balanced_tau` is ``tau_formula``;
    :func:`bounds_lib.theory.orders.balanced_log_covering` is ``covering``; its
    ε-exponent (:func:`eps_exponent`) is ``exponent``; and ``aτ^{-p} + bτ²`` at its balancing point is
    ``balanced_sum``. ``values``: ``covering`` (the library's), ``exponent`` (read off it).
    """
    from ..theory.orders import balanced_log_covering, balanced_tau

    p, eps, l, m, C_s, tau = (SYMBOLS[k] for k in ("p", "eps", "l", "m", "C_s", "tau"))
    if tau_formula is None:
        tau_formula = (C_s * (l + m) * eps**2 / (l * m)) ** (1 / (p + 2))
    if covering is None:
        covering = ((C_s * (l + m)) ** 2 * (l * m) ** p / eps ** (2 * p)) ** (1 / (p + 2))
    if exponent is None:
        exponent = 2 * p / (p + 2)
    a, b = sp.symbols("a b", positive=True)
    if balanced_sum is None:
        balanced_sum = 2 * a ** (2 / (p + 2)) * b ** (p / (p + 2))
    cov = balanced_log_covering()
    got = eps_exponent(cov)
    t = sp.solve(sp.Eq(sp.log(a * tau**-p), sp.log(b * tau**2)), tau)[0]
    claims = (
        ("the balancing threshold is tau_formula", _zero(balanced_tau() - tau_formula)),
        ("either entropy term at tau* is the claimed covering", _same(cov, covering)),
        ("the balanced entropy's eps-exponent is the claimed exponent", _zero(got - exponent)),
        ("for any a, b: a tau*^-p + b tau*^2 is the claimed balanced sum",
         _zero(a * t**-p + b * t**2 - balanced_sum)),
    )
    return CheckResult("the balanced covering", claims, f"eps-exponent {sp.sstr(got)}",
                       dict(covering=cov, exponent=got))


def check_balance_factor(factor_formula=None, band=(1.0, 2.0), points=401):
    """``min_τ aτ^{-p} + bτ² = a^{2/(p+2)}b^{p/(p+2)}·min_s (s^{-p} + s²)``: the factor, by SymPy (Chapter 2).

    ``factor_formula`` is the claimed ``min_s (s^{-p} + s²)``, an expression in ``p``
    (default ``(1 + p/2)(2/p)^{p/(p+2)}``). Claims: SymPy's minimum (solving ``d/ds = 0``) equals it;
    and it lies in ``band`` on ``(0, 2]`` (``points`` values, tolerance ``1e-6`` below, ``1e-12`` above).
    ``values["factor"]``: SymPy's minimum.
    """
    p = SYMBOLS["p"]
    if factor_formula is None:
        factor_formula = (1 + p / 2) * (2 / p) ** (p / (p + 2))
    s = sp.Symbol("s", positive=True)
    f = s**-p + s**2
    factor = sp.simplify(f.subs(s, sp.solve(sp.diff(f, s), s)[0]))
    fac = sp.lambdify(p, factor)(np.linspace(1e-9, 2, int(points)))
    lo, hi = band
    claims = (
        ("min_s s^-p + s^2 is the claimed factor", _zero(sp.log(factor) - sp.log(factor_formula))),
        (f"the factor lies in [{lo:g}, {hi:g}] on (0, 2]", bool(lo - 1e-6 <= fac.min() and fac.max() <= hi + 1e-12)),
    )
    return CheckResult("the factor of the balance", claims,
                       f"factor {fac.min():.4f} to {fac.max():.4f} on (0, 2]", dict(factor=factor))


def check_dudley_log_integral(gamma_form=None, p0_value=None, plain_form=None, max_exponent=sp.Rational(1, 2)):
    """Lemma ``ch02-lem-dudley``: Dudley's integral with the logarithms kept, by SymPy.

    ``gamma_form`` is the claimed ``∫₀^∞ e^{-bu}√u du``, in a positive symbol ``b`` (default
    ``√π/(2b^{3/2})``: the integral after ``ε = e^{-u}``, ``b = 1 − a = 2/(p+2)``), ``p0_value`` the claimed
    ``∫₀¹ √log(1/ε) dε`` (default ``√π/2``), ``plain_form`` the claimed ``∫₀¹ ε^{-p/(p+2)} dε``
    (default ``(p+2)/2``; :func:`bounds_lib.theory.orders.dudley_integral`), ``max_exponent`` the claimed
    maximum of ``a = p/(p+2)`` on ``[0, 2]``. One claim each. ``values["gamma"]``: SymPy's Gamma integral.
    """
    from ..theory.orders import dudley_integral

    p, eps = SYMBOLS["p"], SYMBOLS["eps"]
    u, b = sp.symbols("u b", positive=True)
    if gamma_form is None:
        gamma_form = sp.sqrt(sp.pi) / (2 * b ** sp.Rational(3, 2))
    p0_value = sp.sqrt(sp.pi) / 2 if p0_value is None else p0_value
    plain_form = (p + 2) / 2 if plain_form is None else plain_form
    gamma_int = sp.integrate(sp.exp(-b * u) * sp.sqrt(u), (u, 0, sp.oo))
    claims = (
        ("int_0^oo e^(-bu) sqrt(u) du is the claimed Gamma form", _zero(gamma_int - gamma_form)),
        ("at p = 0: int_0^1 sqrt(log(1/eps)) deps is the claimed value",
         _zero(sp.integrate(sp.sqrt(sp.log(1 / eps)), (eps, 0, 1)) - p0_value)),
        ("without the log: int_0^1 eps^(-p/(p+2)) deps is the claimed form", _zero(dudley_integral() - plain_form)),
        ("the exponent p/(p+2) has the claimed maximum on [0, 2]",
         sp.maximum(p / (p + 2), p, sp.Interval(0, 2)) == max_exponent),
    )
    return CheckResult("Dudley's integral with the logarithms", claims, f"Gamma integral {sp.sstr(gamma_int)}",
                       dict(gamma=gamma_int))


def check_covering_endpoints(covering=None, psi0=None, psi2=None, growth=1.7):
    """Exercise ``ch02-ex-special``: the balanced entropy ``Ψ_p`` at ``p = 0`` and ``p = 2``.

    ``covering`` is ``Ψ_p`` in the symbols of ``bounds_lib.theory.orders.SYMBOLS`` (default
    :func:`bounds_lib.theory.orders.balanced_log_covering`); ``psi0`` the claimed ``Ψ_0`` (default
    ``C_s(ℓ+m)``, the parameter count of rank-``C_s`` matrices), ``psi2`` the claimed ``Ψ_2`` (default
    ``√(C_s(ℓ+m)ℓm)/ε``, a Frobenius ball). A third claim is what ``Ψ_0`` leaves out: the direct
    ``p = 0`` bound (:func:`bounds_lib.theory.interpolation.log_covering_p0`, rank 3, ``4×5``, ``C_2 = 1``)
    grows by more than ``growth`` from ``ε = 10^{-1}`` to ``10^{-3}``.
    """
    from ..theory.interpolation import log_covering_p0
    from ..theory.orders import balanced_log_covering

    p, eps, l, m, C_s = (SYMBOLS[k] for k in ("p", "eps", "l", "m", "C_s"))
    cov = balanced_log_covering() if covering is None else covering
    psi0 = C_s * (l + m) if psi0 is None else psi0
    psi2 = sp.sqrt(C_s * (l + m) * l * m) / eps if psi2 is None else psi2
    ratio = log_covering_p0(3, 4, 5, 1.0, 1e-3) / log_covering_p0(3, 4, 5, 1.0, 1e-1)
    claims = (
        ("Psi_0 is the claimed form", _zero(cov.subs(p, 0) - psi0)),
        ("Psi_2 is the claimed form", _zero(cov.subs(p, 2) - psi2)),
        (f"the direct p = 0 bound grows by more than {growth:g} from eps = 0.1 to 0.001", bool(ratio > growth)),
    )
    return CheckResult("Psi_p at the ends of [0, 2]", claims, f"p = 0 growth {ratio:.3f}", dict(growth=ratio))


def check_sharp_tail_covering(covering, exponent=None, divergent_at=2, finite_at=sp.Rational(3, 2)):
    """Exercise ``ch02-ex-sharp``: the entropy balanced with the sharper tail bound ``τ^{2−p}C_s``.

    ``covering`` is the derived entropy (symbols of ``bounds_lib.theory.orders.SYMBOLS``); ``exponent``
    the claimed ε-exponent (default ``p``). Claims: its ε-exponent (:func:`eps_exponent`) is
    ``exponent``; Dudley's integral of its square root diverges at ``p = divergent_at`` and is finite
    at ``p = finite_at``. ``values["exponent"]``: the exponent read off ``covering``.
    """
    p, eps = SYMBOLS["p"], SYMBOLS["eps"]
    exponent = p if exponent is None else exponent
    got = eps_exponent(covering)
    claims = (
        ("the eps-exponent is the claimed one", _zero(got - exponent)),
        (f"Dudley's integral diverges at p = {divergent_at}",
         sp.integrate(sp.sqrt(covering.subs(p, divergent_at)), (eps, 0, 1)) == sp.oo),
        (f"Dudley's integral is finite at p = {finite_at}",
         _integral_finite(sp.sqrt(covering.subs(p, finite_at)), eps)),
    )
    return CheckResult("the sharper tail bound", claims, f"eps-exponent {sp.sstr(got)}", dict(exponent=got))


# ---------------------------------------------------------------- Chapter 5


def check_printed_order(printed=None, released=None):
    """The errata of the printed leading order (Chapter 5): its exponents against the released term's.

    ``printed`` defaults to :func:`bounds_lib.theory.orders.printed_leading_order`, ``released`` to
    :func:`bounds_lib.theory.orders.released_term`; the exponents are read off the formulas
    (``d log(expr)/d log x``), not typed. Claims: at ``p = 2`` the ``N``-exponents are 2/3 (printed)
    and 3/4 (released); the ``C_s``-exponents are 1/2 (printed, for every ``p``) and 1/4 (released at
    ``p = 2``); on ``[0, 2]`` the two ``N``-exponents coincide at the single point ``p = √2``.
    ``values``: ``printed_N``, ``released_N``, ``cs_printed``, ``cs_released``, ``agree`` (the
    solutions in ``p``).
    """
    from ..theory.orders import printed_leading_order, released_term

    p, N, C_s = SYMBOLS["p"], SYMBOLS["N"], SYMBOLS["C_s"]
    printed = printed_leading_order(p) if printed is None else printed
    released = released_term() if released is None else released
    pN, rN = _log_exponent(printed, N), _log_exponent(released, N)
    cs_p, cs_r = _log_exponent(printed, C_s), _log_exponent(released, C_s)
    agree = sp.solve(sp.Eq(pN, rN), p)
    claims = (
        ("at p = 2 the N-exponents are 2/3 (printed) and 3/4 (released)",
         (pN.subs(p, 2), rN.subs(p, 2)) == (sp.Rational(2, 3), sp.Rational(3, 4))),
        ("the C_s-exponents are 1/2 (printed) and 1/4 (released, p = 2)",
         (cs_p, cs_r.subs(p, 2)) == (sp.Rational(1, 2), sp.Rational(1, 4))),
        ("the N-exponents coincide only at p = sqrt(2)", agree == [sp.sqrt(2)]),
    )
    return CheckResult("the printed leading order", claims,
                       f"N-exponents {sp.sstr(pN)} (printed), {sp.sstr(rN)} (released)",
                       dict(printed_N=pN, released_N=rN, cs_printed=cs_p, cs_released=cs_r, agree=agree))


# ---------------------------------------------------------------- Chapter 6


def check_architecture_bound(report, B_sum, B_rss, N, H, d_h, rtol=1e-12):
    """Exercise ``ch06-ex-arch``: with every ``p* = 0`` at full rank, ``B_ours`` depends on the shapes alone.

    ``report`` is a :class:`bounds_lib.analysis.scoring.BoundReport` of a model with ``L`` layers, hidden size
    ``N``, ``H`` heads of size ``d_h``; ``B_sum`` and ``B_rss`` are the claimed closed forms of
    ``B_ours`` (sum and root-sum-square aggregation), evaluated. Claims: ``H d_h = N``; every
    ``p* = 0``; the released sum of the terms ``𝒯(W;0)`` (:func:`bounds_lib.theory.peeling.aggregate_sum`)
    is ``B_sum``; the report's ``B_ours`` (sum) is ``B_sum``; its root-sum-square ``B_ours`` is
    ``B_rss`` (logarithms within ``rtol``).
    """
    from ..theory.peeling import aggregate_sum

    L = int(report.L)
    log_T0 = np.array([m.log_T0 for m in report.matrices])
    claims = (
        ("H d_h = N", H * d_h == N),
        ("every p* = 0", all(m.p_star == 0 for m in report.matrices)),
        ("the sum of the terms T(W;0) is B_sum", abs(aggregate_sum(log_T0, L) - math.log(B_sum)) < rtol),
        ("B_ours (sum) is B_sum", abs(report.log_B_ours_sum - math.log(B_sum)) < rtol),
        ("B_ours (root-sum-square) is B_rss", abs(report.log_B_ours_rss - math.log(B_rss)) < rtol),
    )
    return CheckResult("B_ours from the shapes alone", claims, f"B_sum = {B_sum:.6g}, B_rss = {B_rss:.6g}")
