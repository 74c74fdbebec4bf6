"""The SymPy / closed-form checks of Chapters 1, 2, 5 and 6 (bounds_lib.checks.orders).

Each check holds on the book's inputs and fails, naming the claim, on a deliberately wrong one: a
wrong exponent, a wrong closed form, a grid with the wrong slope, a report with a moved p*.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from bounds_lib.checks import orders as CO
from bounds_lib.theory import orders as O

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_checkpoints import synthetic_spectra  # noqa: E402

S = O.SYMBOLS
p, eps, l, m, C_s, tau, N = (S[k] for k in ("p", "eps", "l", "m", "C_s", "tau", "N"))
_a, _b = sp.symbols("a b", positive=True)


def test_eps_exponent_reads_the_exponent_off_the_formula():
    assert CO.eps_exponent(eps ** (-p / (p + 2))) == p / (p + 2)
    assert CO.eps_exponent(3 * eps**-2 * sp.log(2)) == 2
    assert CO.eps_exponent(sp.Integer(5)) == 0


# ---------------------------------------------------------------- Chapter 1


def test_dudley_integral_holds_and_wrong_inputs_are_caught():
    r = CO.check_dudley_integral().require()
    E = sp.Symbol("E", positive=True)
    assert len(r.claims) == 5 and r.values["integral"] == sp.sqrt(E) * (p + 2) / 2
    # the same check through the chapter's own symbols
    q, e = sp.symbols("p epsilon", positive=True)
    assert CO.check_dudley_integral(e ** (-q / (q + 2)), q, e, (q + 2) / 2).holds
    # a wrong closed form
    assert CO.check_dudley_integral(e ** (-q / (q + 2)), q, e, (q + 3) / 2).failed == [
        "the integral equals the closed form"]
    # a wrong exponent (entropy ∝ ε^{-2p/(p+1)}): max 2/3, integrable, still finite on the grid
    bad = CO.check_dudley_integral(e ** (-q / (q + 1)), q, e, sp.integrate(e ** (-q / (q + 1)), (e, 0, 1),
                                                                            conds="none"))
    assert bad.failed == ["the eps-exponent is at most 1/2 on [0, 2], attained"]
    # exponent p/2: reaches 1 at p = 2, where the integral diverges
    div = CO.check_dudley_integral(e ** (-q / 2), q, e, 2 / (2 - q))
    assert "the eps-exponent is below 1 on [0, 2]" in div.failed and "finite at p = 0, 1/2, 1, 2" in div.failed
    with pytest.raises(AssertionError, match="fails: the integral equals the closed form"):
        CO.check_dudley_integral(e ** (-q / (q + 2)), q, e, q).require()
    with pytest.raises(ValueError, match="closed_form"):
        CO.check_dudley_integral(e ** (-q / (q + 2)))


def test_log_log_slopes_and_validation():
    ns, ds = np.array([10.0, 100.0, 1000.0]), np.array([2.0, 8.0])
    s_n, s_d = CO.log_log_slopes(3.0 * ns[:, None] ** -0.7 * ds**0.2, ns, ds)
    assert s_n == pytest.approx(-0.7, abs=1e-12) and s_d == pytest.approx(0.2, abs=1e-12)
    with pytest.raises(ValueError, match="positive grid of shape"):
        CO.log_log_slopes(np.ones((2, 2)), ns, ds)
    with pytest.raises(ValueError, match="positive grid"):
        CO.log_log_slopes(np.zeros((3, 2)), ns, ds)


def test_dudley_scaling_holds_and_wrong_slopes_are_caught():
    ns, ds = np.array([1e3, 1e4, 1e5]), np.array([2.0, 8.0, 32.0])
    bound = 40 * np.sqrt(ds[None, :] / ns[:, None])  # n^{-1/2} √d: 0.72 at (1e5, 32)
    mc = 1.0 / np.sqrt(ns[:, None]) * (1 + 0.01 * np.log(ds))[None, :]
    r = CO.check_dudley_scaling(ns, ds, bound, mc).require()
    assert r.values["s_n"] == pytest.approx(-0.5) and r.values["s_d"] == pytest.approx(0.5)
    assert CO.check_dudley_scaling(ns, ds, bound * ns[:, None] ** 0.1, mc).failed[0] == \
        "the bound falls like n^(-1/2)"
    assert CO.check_dudley_scaling(ns, ds, bound * (ds[None, :] / 32) ** 0.1, mc).failed == [
        "the bound grows like sqrt(d)"]
    assert CO.check_dudley_scaling(ns, ds, bound, mc * ns[:, None] ** 0.1).failed[0] == \
        "the Monte Carlo estimate falls like n^(-1/2)"
    assert CO.check_dudley_scaling(ns, ds, bound, mc * ds[None, :] ** 0.2).failed == [
        "the Monte Carlo estimate is (almost) free of d"]
    assert CO.check_dudley_scaling(ns, ds, bound, mc * 200).failed == ["the bound is above the estimate everywhere"]
    assert CO.check_dudley_scaling(ns, ds, bound * 2, mc).failed == ["the bound is below 1 at the largest n"]


# ---------------------------------------------------------------- Chapter 2


def test_balanced_covering_holds_and_each_wrong_form_is_caught():
    r = CO.check_balanced_covering().require()
    assert r.values["exponent"] == 2 * p / (p + 2) and r.values["covering"] == O.balanced_log_covering()
    wrong_tau = (C_s * (l + m) * eps**2 / (l * m)) ** (1 / (p + 1))
    assert CO.check_balanced_covering(tau_formula=wrong_tau).failed == ["the balancing threshold is tau_formula"]
    wrong_cov = ((C_s * (l + m)) ** 2 * (l * m) ** p / eps ** (2 * p)) ** (1 / (p + 1))
    assert CO.check_balanced_covering(covering=wrong_cov).failed == [
        "either entropy term at tau* is the claimed covering"]
    assert CO.check_balanced_covering(exponent=p / (p + 2)).failed == [
        "the balanced entropy's eps-exponent is the claimed exponent"]
    assert CO.check_balanced_covering(balanced_sum=_a ** (2 / (p + 2)) * _b ** (p / (p + 2))).failed \
        == ["for any a, b: a tau*^-p + b tau*^2 is the claimed balanced sum"]


def test_balance_factor_holds_and_a_wrong_factor_or_band_is_caught():
    r = CO.check_balance_factor().require()
    # p = 2: s^-2 + s^2 is smallest at s = 1
    assert r.values["factor"].subs(p, 2) == 2
    assert CO.check_balance_factor((1 + p / 2) * (2 / p) ** (p / (p + 1))).failed == [
        "min_s s^-p + s^2 is the claimed factor"]
    assert CO.check_balance_factor(band=(1.0, 1.9)).failed == ["the factor lies in [1, 1.9] on (0, 2]"]
    assert CO.check_balance_factor(band=(1.01, 2.0)).failed == ["the factor lies in [1.01, 2] on (0, 2]"]


def test_dudley_log_integral_holds_and_each_wrong_value_is_caught():
    r = CO.check_dudley_log_integral().require()
    b = sp.Symbol("b", positive=True)
    assert r.values["gamma"] == sp.sqrt(sp.pi) / (2 * b ** sp.Rational(3, 2))
    # each claim checks its own input: all four wrong at once, all four named
    wrong = CO.check_dudley_log_integral(gamma_form=sp.sqrt(sp.pi) / (2 * _b), p0_value=sp.sqrt(sp.pi),
                                         plain_form=(p + 1) / 2, max_exponent=1)
    assert wrong.failed == ["int_0^oo e^(-bu) sqrt(u) du is the claimed Gamma form",
                            "at p = 0: int_0^1 sqrt(log(1/eps)) deps is the claimed value",
                            "without the log: int_0^1 eps^(-p/(p+2)) deps is the claimed form",
                            "the exponent p/(p+2) has the claimed maximum on [0, 2]"]


def test_covering_endpoints_hold_and_wrong_forms_are_caught():
    r = CO.check_covering_endpoints().require()
    assert r.values["growth"] > 1.7
    assert CO.check_covering_endpoints(psi0=C_s * l).failed == ["Psi_0 is the claimed form"]
    assert CO.check_covering_endpoints(psi2=sp.sqrt(C_s * (l + m) * l * m) / eps**2).failed == [
        "Psi_2 is the claimed form"]
    assert CO.check_covering_endpoints(growth=3.0).failed == [
        "the direct p = 0 bound grows by more than 3 from eps = 0.1 to 0.001"]


def _sharp():
    low, fro = C_s / tau**p * (l + m), tau ** (2 - p) * C_s * m / eps**2
    t = sp.solve(sp.Eq(sp.log(low), sp.log(fro)), tau)[0]
    return sp.simplify(low.subs(tau, t))


def test_sharp_tail_covering_holds_and_a_wrong_exponent_is_caught():
    cov = _sharp()
    r = CO.check_sharp_tail_covering(cov).require()
    assert r.values["exponent"] == p
    assert CO.check_sharp_tail_covering(cov, exponent=2 * p / (p + 2)).failed == ["the eps-exponent is the claimed one"]
    # the dimension-tail covering of the theorem: exponent 2p/(p+2), finite at p = 2
    dim = CO.check_sharp_tail_covering(O.balanced_log_covering())
    assert dim.failed == ["the eps-exponent is the claimed one", "Dudley's integral diverges at p = 2"]
    assert CO.check_sharp_tail_covering(cov, finite_at=2).failed == ["Dudley's integral is finite at p = 2"]


# ---------------------------------------------------------------- Chapter 5


def test_printed_order_holds_and_a_rewritten_printed_form_is_caught():
    r = CO.check_printed_order().require()
    assert r.values["agree"] == [sp.sqrt(2)] and r.values["cs_printed"] == sp.Rational(1, 2)
    # if the printed form were the released term, every claim but the C_s one at p = 2 breaks
    same = CO.check_printed_order(printed=O.released_term())
    assert "at p = 2 the N-exponents are 2/3 (printed) and 3/4 (released)" in same.failed
    assert "the N-exponents coincide only at p = sqrt(2)" in same.failed
    wrong_cs = O.printed_leading_order(p) * C_s ** sp.Rational(1, 2)
    assert CO.check_printed_order(printed=wrong_cs).failed == [
        "the C_s-exponents are 1/2 (printed) and 1/4 (released, p = 2)"]


# ---------------------------------------------------------------- Chapter 6


@pytest.fixture(scope="module")
def full_rank_report():
    """A BERT-shaped report (L = 2, N = 8, H = 2, d_h = 4) with every p* = 0 at full rank."""
    from bounds_lib.analysis.scoring import score

    return score(synthetic_spectra(L=2, H=2, N=8, d=4, sigma1=10.0, decay=0.9))


def test_architecture_bound_holds_and_wrong_forms_or_reports_are_caught(full_rank_report):
    rep = full_rank_report
    L, N, H, d_h = 2, 8, 2, 4
    B_sum = 2 * L * N * (math.sqrt(H) + 1) + math.sqrt(L)
    B_rss = (2 * N + 1) * math.sqrt(L)
    assert all(m.p_star == 0 for m in rep.matrices)
    assert len(CO.check_architecture_bound(rep, B_sum, B_rss, N, H, d_h).require().claims) == 5
    assert CO.check_architecture_bound(rep, B_sum, B_rss, N, H, 3).failed == ["H d_h = N"]
    assert CO.check_architecture_bound(rep, B_sum * (1 + 1e-9), B_rss, N, H, d_h).failed == [
        "the sum of the terms T(W;0) is B_sum", "B_ours (sum) is B_sum"]
    assert CO.check_architecture_bound(rep, B_sum, 2 * N * math.sqrt(L), N, H, d_h).failed == [
        "B_ours (root-sum-square) is B_rss"]
    moved = dataclasses.replace(rep, matrices=(dataclasses.replace(rep.matrices[0], p_star=0.5),) + rep.matrices[1:])
    assert CO.check_architecture_bound(moved, B_sum, B_rss, N, H, d_h).failed == ["every p* = 0"]


# ---------------------------------------------------------------- what the reader sees, and the edges (mutation)


def test_zero_expands_logarithms_of_symbols_without_assumptions():
    x, y = sp.symbols("x y")
    assert CO._zero(sp.log(x * y) - sp.log(x) - sp.log(y)) and not CO._zero(sp.Integer(1))
    assert CO._same(eps ** (-p), 1 / eps**p) and not CO._same(eps**p, eps ** (p + 1))


def test_summary_lines_name_every_claim():
    r = CO.check_dudley_integral()
    assert [c for c, _ in r.claims] == [
        "the integral equals the closed form", "the eps-exponent is at most 1/2 on [0, 2], attained",
        "the eps-exponent is below 1 on [0, 2]", "finite at p = 0, 1/2, 1, 2",
        "control of the finiteness test (fixed input): int_0^1 1/eps is infinite"]
    assert repr(r) == ("Dudley's integral: 5 of 5 claims hold — integral = sqrt(E)*(p + 2)/2, "
                       "eps-exponent p/(p + 2)") and r.values["exponent"] == p / (p + 2)
    b = CO.check_balanced_covering()
    assert repr(b) == "the balanced covering: 4 of 4 claims hold — eps-exponent 2*p/(p + 2)"
    f = CO.check_balance_factor()
    assert repr(f) == "the factor of the balance: 2 of 2 claims hold — factor 1.0000 to 2.0000 on (0, 2]"
    d = CO.check_dudley_log_integral()
    assert repr(d) == "Dudley's integral with the logarithms: 4 of 4 claims hold — Gamma integral sqrt(pi)/(2*b**(3/2))"
    e = CO.check_covering_endpoints()
    assert repr(e) == f"Psi_p at the ends of [0, 2]: 3 of 3 claims hold — p = 0 growth {e.values['growth']:.3f}"
    s = CO.check_sharp_tail_covering(_sharp())
    assert repr(s) == "the sharper tail bound: 3 of 3 claims hold — eps-exponent p"
    o = CO.check_printed_order()
    assert repr(o) == ("the printed leading order: 3 of 3 claims hold — N-exponents (p + 2)/(2*(p + 1)) (printed), "
                       "(p + 1)/(p + 2) (released)")
    want = dict(printed_N=(p + 2) / (2 * (p + 1)), released_N=(p + 1) / (p + 2), cs_printed=sp.Rational(1, 2),
                cs_released=1 / (p + 2))
    assert sorted(o.values) == sorted([*want, "agree"]) and o.values["agree"] == [sp.sqrt(2)]
    assert all(sp.simplify(o.values[k] - v) == 0 for k, v in want.items())


def test_dudley_integral_reads_its_inputs_and_its_intervals():
    x, q = sp.symbols("x q", positive=True)
    # any symbols: the exponent is read with respect to the variable passed
    assert CO.check_dudley_integral(x ** (-q / (q + 2)), q, x, (q + 2) / 2).holds
    # the default integrand with a wrong closed form
    E = sp.Symbol("E", positive=True)
    assert CO.check_dudley_integral(closed_form=sp.sqrt(E) * (p + 3) / 2).failed == [
        "the integral equals the closed form"]
    for bad in [dict(p=q, closed_form=q), dict(eps=x, closed_form=q), dict(p=q, eps=x)]:
        with pytest.raises(ValueError, match=r"^pass the integrand with its symbols p and eps and the claimed "
                                             r"closed_form \(or none of them for the book's\)$"):
            CO.check_dudley_integral(x**-q, **bad)
    # exponent (2 - p)/4: at most 1/2, attained at p = 0 only
    assert CO.check_dudley_integral(x ** (-(2 - q) / 4), q, x, 4 / (2 + q)).holds
    # exponent 3/2 - p: at least 1 for p <= 1/2 only
    low = CO.check_dudley_integral(x ** (q - sp.Rational(3, 2)), q, x, 1 / (q - sp.Rational(1, 2)))
    assert "the eps-exponent is below 1 on [0, 2]" in low.failed
    # exponent p/3: reaches 1 only beyond [0, 2], at p = 3; the integral without conditions is 3/(3 - p)
    r = CO.check_dudley_integral(x ** (-q / 3), q, x, 3 / (3 - q))
    assert r.failed == ["the eps-exponent is at most 1/2 on [0, 2], attained"]


def test_scaling_tolerances_are_strict():
    ns, ds = np.array([1e3, 1e4, 1e5]), np.array([2.0, 8.0, 32.0])
    bound = 40 * ns[:, None] ** -0.49 * ds[None, :] ** 0.51
    bound = bound / bound[-1].max() * 0.9
    mc = 0.5 * ns[:, None] ** -0.47 * ds[None, :] ** 0.05
    ok = CO.check_dudley_scaling(ns, ds, bound, mc)
    v = ok.values
    assert ok.holds and sorted(v) == ["s_d", "s_d_mc", "s_n", "s_n_mc"]
    assert repr(ok) == (f"Dudley's bound on the linear class: 6 of 6 claims hold — slopes in n: bound {v['s_n']:.3f}, "
                        f"Monte Carlo {v['s_n_mc']:.3f}; in d: bound {v['s_d']:.3f}, Monte Carlo {v['s_d_mc']:.3f}")
    assert CO.check_dudley_scaling(ns, ds, bound, mc, tol_bound=abs(v["s_n"] + 0.5)).failed[0] == \
        "the bound falls like n^(-1/2)"
    assert CO.check_dudley_scaling(ns, ds, bound, mc, tol_bound=abs(v["s_d"] - 0.5)).failed == [
        "the bound grows like sqrt(d)"]
    assert CO.check_dudley_scaling(ns, ds, bound, mc, tol_mc=(abs(v["s_n_mc"] + 0.5), 0.1)).failed == [
        "the Monte Carlo estimate falls like n^(-1/2)"]
    assert CO.check_dudley_scaling(ns, ds, bound, mc, tol_mc=(0.05, abs(v["s_d_mc"]))).failed == [
        "the Monte Carlo estimate is (almost) free of d"]
    touch = mc.copy()
    touch[0, 0] = bound[0, 0]
    assert "the bound is above the estimate everywhere" in CO.check_dudley_scaling(ns, ds, bound, touch).failed
    one = bound.copy()
    one[-1, -1] = 1.0
    assert "the bound is below 1 at the largest n" in CO.check_dudley_scaling(ns, ds, one, mc).failed


def test_balanced_covering_takes_the_chapters_own_symbols():
    a, b = sp.symbols("a b", positive=True)
    assert CO.check_balanced_covering(balanced_sum=2 * a ** (2 / (p + 2)) * b ** (p / (p + 2))).holds


def test_covering_endpoints_use_the_covering_passed_and_a_strict_growth():
    assert CO.check_covering_endpoints(2 * O.balanced_log_covering()).failed == [
        "Psi_0 is the claimed form", "Psi_2 is the claimed form"]
    from bounds_lib.theory.interpolation import log_covering_p0

    want = log_covering_p0(3, 4, 5, 1.0, 1e-3) / log_covering_p0(3, 4, 5, 1.0, 1e-1)
    r = CO.check_covering_endpoints(growth=want)
    assert r.values["growth"] == want and r.failed == [
        f"the direct p = 0 bound grows by more than {want:g} from eps = 0.1 to 0.001"]


def test_printed_order_uses_the_released_term_passed():
    assert "at p = 2 the N-exponents are 2/3 (printed) and 3/4 (released)" in CO.check_printed_order(
        released=O.released_term() * N ** (p / (p + 2))).failed


def test_architecture_tolerances_are_strict(full_rank_report):
    rep = full_rank_report
    L, N_, H, d_h = 2, 8, 2, 4
    B_sum, B_rss = 2 * L * N_ * (math.sqrt(H) + 1) + math.sqrt(L), (2 * N_ + 1) * math.sqrt(L)
    r = CO.check_architecture_bound(rep, B_sum, B_rss, N_, H, d_h)
    assert repr(r) == f"B_ours from the shapes alone: 5 of 5 claims hold — B_sum = {B_sum:.6g}, B_rss = {B_rss:.6g}"
    from bounds_lib.theory.peeling import aggregate_sum

    log_T0 = np.array([m.log_T0 for m in rep.matrices])
    for claim, diff in [("the sum of the terms T(W;0) is B_sum", abs(aggregate_sum(log_T0, L) - math.log(B_sum))),
                        ("B_ours (sum) is B_sum", abs(rep.log_B_ours_sum - math.log(B_sum))),
                        ("B_ours (root-sum-square) is B_rss", abs(rep.log_B_ours_rss - math.log(B_rss)))]:
        assert claim in CO.check_architecture_bound(rep, B_sum, B_rss, N_, H, d_h, rtol=diff).failed
