"""Library checks that replaced chains of asserts in Chapters 3–5 (:class:`bounds_lib.checks.harness.CheckResult`).

Each check holds on the library's formulas and fails, naming the broken claim, on a deliberately
wrong one (a constant off by one, a swapped table, dyadic shells passed off as the lemma's).
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from bounds_lib import checks as CK
from bounds_lib.checks import ch2_split, ch3_multihead, ch3_single_head, ch4_peeling
from bounds_lib.theory import orders as O


def test_check_result_summary_and_require():
    ok = CK.CheckResult("s", (("a", True), ("b", True)), "d = 1")
    assert ok.holds and ok.summary() == "s: 2 of 2 claims hold — d = 1" and ok.require() is ok
    bad = CK.CheckResult("s", (("a", True), ("b", False)))
    assert not bad.holds and bad.failed == ["b"] and repr(bad) == "s: 1 of 2 claims hold; fails: b"
    with pytest.raises(AssertionError, match="fails: b"):
        bad.require()


def test_theorem_constants_hold_and_a_wrong_constant_is_caught():
    assert CK.check_theorem_constants().require().values["integral"] == sp.sqrt(2 * sp.pi)
    S = O.SYMBOLS
    p = sp.Symbol("p", positive=True)
    wrong = 2 * (2 * S["C_s"] * S["N"]) ** (2 / (p + 2)) * (145 * S["N"] ** 2) ** (p / (p + 2)) \
        * S["K"] ** (2 * p / (p + 2))
    r = CK.check_theorem_constants(wrong)
    assert r.failed == ["theta_j^2 / T(W;p)^2 = 2 * 2^(2/(p+2)) * 144^(p/(p+2))"]


@pytest.mark.parametrize("slip", ["144 -> 12", "no sqrt 2", "p = 0 without its factor 2"])
def test_theorem_constants_read_the_library_log_theta(slip):
    """The check runs on bounds_lib.theory.theorem.log_theta: a slip in that function (not in a typed formula) fails
    it."""
    import math

    from bounds_lib.theory.theorem import log_theta

    def wrong(log_s, p, log_K, rows, cols):
        out = log_theta(log_s, p, log_K, rows, cols)
        p = np.asarray(p, dtype=float)
        if slip == "144 -> 12":
            return out - 0.5 * p / (p + 2) * math.log(12.0)
        if slip == "no sqrt 2":
            return out - 0.5 * math.log(2.0) * (p > 0)
        return out - 0.5 * math.log(2.0) * (p == 0)

    assert CK.check_theorem_constants(log_theta=wrong).failed == [
        "theorem.log_theta has that constant (and 2 at p = 0) on the grid"]


def test_regime_slopes_hold_and_a_wrong_frobenius_term_is_caught():
    CK.check_regime_slopes().require()
    p, N = O.SYMBOLS["p"], O.SYMBOLS["N"]
    r = CK.check_regime_slopes(O.frobenius_holder_term(p) * N ** (p / (p + 2)))
    assert [c for c in r.failed] == ["Frobenius slope 2 log(C_F K) - log N, free of p"]


def test_orders_in_depth_hold_and_a_swapped_table_is_caught():
    tables = {agg: O.orders_table(agg, log_factor=True) for agg in O.AGGREGATIONS}
    assert len(CK.check_orders_in_depth(tables).require().claims) == 12
    swapped = {agg: {g: dict(row, ours=row["trauger_tewari"]) for g, row in t.items()} for agg, t in tables.items()}
    assert len(CK.check_orders_in_depth(swapped).failed) == 12


def test_shells_hold_and_dyadic_shells_passed_off_as_the_lemma_are_caught(monkeypatch):
    r = CK.check_shells(np.random.default_rng(3), L=12, trials=2000).require()
    assert r.values["inflation_geometric"].max() <= np.e ** 3
    monkeypatch.setattr(ch4_peeling, "geometric_ratio", lambda L: 2.0)
    bad = CK.check_shells(np.random.default_rng(3), L=12, trials=2000)
    assert "shells of ratio 1 + 1/L keep alpha within e^3" in bad.failed


# ---- Chapters 3 and 5: the checks that replaced the remaining chains of asserts (issue 19)

def test_softmax_check_holds_and_a_constant_below_one_is_caught():
    r = CK.check_softmax(np.random.default_rng(0), trials=1000, points=500).require()
    assert r.values["jacobian"].shape == (500,) and r.values["random"].trials == 1000
    bad = CK.check_softmax(np.random.default_rng(0), trials=1000, points=500, softmax_const=0.9)
    assert bad.failed == ["Jacobian norm <= c at 500 points", "Jacobian norm = c at z = 0, T = 2",
                          "no difference quotient above c in 1000 draws"]


def test_logits_check_holds_and_fails_on_violations_or_without_power(monkeypatch):
    r = CK.check_logits(np.random.default_rng(1), trials=10_000).require()
    assert r.values["weak_violations"] > 0
    assert CK.check_logits(np.random.default_rng(1), trials=10_000, weaken=0.9).failed == [
        "power: the same draws break the bound / 0.9"]
    monkeypatch.setattr(ch3_single_head, "falsify_logits",
                        lambda rng, trials: CK.Falsification("x", np.full(trials, 1.5)))
    assert CK.check_logits(np.random.default_rng(1), trials=10).failed == ["no violation in 10 draws"]


def test_multihead_gamma_check_holds_and_the_released_gamma_passed_off_is_caught(monkeypatch):
    r = CK.check_multihead_gamma(np.random.default_rng(0), np.random.default_rng(7), trials=2000).require()
    assert r.values["worst_released"]["M_out"] > 1
    real = CK.falsify_multihead_gamma
    monkeypatch.setattr(ch3_multihead, "falsify_multihead_gamma",
                        lambda rng, trials, released: real(rng, trials, False))
    bad = CK.check_multihead_gamma(np.random.default_rng(0), np.random.default_rng(7), trials=2000)
    assert bad.failed == ["the released gamma is violated", "the released gamma_Mout = 1 is violated"]


def test_composition_claims_name_each_failure():
    ok, bad = CK.Falsification("ok", np.array([0.5])), CK.Falsification("bad", np.array([1.5]))
    names = [c for c, _ in ch3_single_head._compose_claims(dict(whole=ok, weakened=ok, qk=ok, qk_false=ok))]
    assert names[1].startswith("power") and names[3].startswith("power")
    claims = dict(ch3_single_head._compose_claims(dict(whole=bad, weakened=ok, qk=bad, qk_false=bad)))
    assert [c for c, v in claims.items() if not v] == names[:3]


def test_layer_check_holds_and_a_true_constant_passed_off_as_false_is_caught():
    kw = dict(trials=500, tokens=(3,), qs=(1.0,), restarts=1)
    lay = CK.check_layer_lipschitz(np.random.default_rng(0), **kw).require()
    assert lay.values["optimiser_false"].violations > 0
    assert CK.check_layer_lipschitz(np.random.default_rng(0), false_const=1.0, **kw).failed == [
        "power: the optimiser breaks c = 1"]


def test_multihead_gamma_optimiser_claims(monkeypatch):
    # the search itself is run by the chapter (strict build); here its outcomes are given
    def fake(rng, which, weaken=1.0, **search):
        worst = {"QK": 0.99, "V": 0.93, "M_in": 0.97, "M_out": 0.96}[which] * weaken
        return CK.Falsification(which, np.array([0.5]), np.array([worst]))

    monkeypatch.setattr(ch3_multihead, "adversarial_multihead_gamma", fake)
    r = CK.check_multihead_gamma_optimiser(np.random.default_rng(0))
    assert r.failed == ["gamma_V: no violation, reaches 0.95"] and len(r.claims) == 8
    assert CK.check_multihead_gamma_optimiser(np.random.default_rng(0), reach=0.9).holds
    assert CK.check_multihead_gamma_optimiser(np.random.default_rng(0), reach=0.9, weaken=1.02).failed == [
        "power: gamma_V / 1.02 is broken", "power: gamma_M_in / 1.02 is broken", "power: gamma_M_out / 1.02 is broken"]


def test_log_factor_check_holds_and_an_old_factor_inside_the_band_is_caught():
    r = CK.check_log_factor(seed=5, trials=800, restarts=3).require()
    assert r.values["old_at"][2] < 1 < r.values["kappa"] < r.values["old_at"][48]
    inside = CK.check_log_factor(seed=5, trials=800, restarts=3, old_factor=sp.Integer(1) + 0 * O.SYMBOLS["L"])
    assert inside.failed == ["the old factor is below the band at L = 2", "the old factor is above the band at L = 48"]


_SEARCH = dict(search_trials=60, restarts=2)  # a smaller optimiser run than the chapter's


def test_split_check_holds_and_fails_on_a_wrong_bound_or_without_weakening(monkeypatch):
    r = CK.check_split(np.random.default_rng(3), trials=2000, **_SEARCH).require()
    assert [len(r.values[k]) for k in ("random", "nondegenerate", "optimiser", "weakened")] == [3, 3, 3, 6]
    assert CK.check_split(np.random.default_rng(3), trials=2000, **_SEARCH, weaken=1.0).failed == [
        "power: random draws break the rank bound / 1", "power: the optimiser breaks all three bounds / 1"]
    real = ch2_split._split_ratios
    monkeypatch.setattr(ch2_split, "_split_ratios", lambda *a: {k: 1.2 * v for k, v in real(*a).items()})
    bad = CK.check_split(np.random.default_rng(3), trials=500, **_SEARCH)
    assert bad.failed[:3] == ["no violation in 500 random draws", "none with tau < sigma_1",
                              "none found by the optimiser"]


def test_theorem_constants_report_what_they_checked():
    r = CK.check_theorem_constants()
    assert r.name == "Theorem 5.1's constants"
    assert [c for c, _ in r.claims] == [
        "theta_j^2 / T(W;p)^2 = 2 * 2^(2/(p+2)) * 144^(p/(p+2))",
        "theorem.log_theta has that constant (and 2 at p = 0) on the grid",
        "the Dudley integral at lambda = 0 is sqrt(2 pi)"]
    assert r.detail.startswith("integral = sqrt(2)*sqrt(pi); log_theta off by ")
    assert set(r.values) == {"integral", "log_theta_gap"} and 0 <= r.values["log_theta_gap"] < 1e-12
