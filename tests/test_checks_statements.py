"""Library checks that replaced chains of asserts in Chapters 4–5 (:class:`bounds_lib.checks.CheckResult`).

Each check holds on the library's formulas and fails, naming the broken claim, on a deliberately
wrong one (a constant off by one, a swapped table, dyadic shells passed off as the lemma's).
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from bounds_lib import checks as CK
from bounds_lib import orders as O


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
    monkeypatch.setattr(CK, "geometric_ratio", lambda L: 2.0)
    bad = CK.check_shells(np.random.default_rng(3), L=12, trials=2000)
    assert "shells of ratio 1 + 1/L keep alpha within e^3" in bad.failed
