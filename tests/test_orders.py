import math

import pytest
import sympy as sp

from bounds_lib.orders import (AGGREGATIONS, REGIMES, SYMBOLS, TABLE_AS_PRINTED, balanced_log_covering,
                               dudley_integral, limit_in_depth, n_exponent, orders_table, printed_leading_order,
                               regime_term, released_term, term_from_covering)

L, N, p, K, C_s = (SYMBOLS[k] for k in ("L", "N", "p", "K", "C_s"))


def test_exponent_of_eps():
    cov = balanced_log_covering()
    assert sp.simplify(sp.diff(sp.log(cov), SYMBOLS["eps"]) * SYMBOLS["eps"] + 2 * p / (p + 2)) == 0


def test_dudley_and_term():
    assert sp.simplify(dudley_integral() - (p + 2) / 2) == 0
    ratio = term_from_covering() / released_term(C_s, K)
    assert sp.simplify(sp.expand_log(sp.log(ratio), force=True) - sp.log(2) / (p + 2)) == 0


def test_rss_table_matches_printed_and_sum_does_not():
    rss, tot = orders_table("rss"), orders_table("sum")
    C = SYMBOLS["C"]
    for g in REGIMES:
        assert sp.simplify(rss[g]["ours"] / TABLE_AS_PRINTED[g]["ours"]) == 1
        # derived comparison columns: equal to the printed ones in the Frobenius regime, a factor C
        # larger where ‖W‖_F ≤ √r·C or √N·C (the printed table drops that C)
        for b in ("edelman", "trauger_tewari"):
            assert sp.simplify(rss[g][b] / TABLE_AS_PRINTED[g][b]) == (1 if g == "frobenius" else C)
        assert sp.simplify(tot[g]["ours"] / TABLE_AS_PRINTED[g]["ours"] - sp.sqrt(L)) == 0


def test_log_factor_rows_and_geometric_depth_sum():
    from bounds_lib.orders import edelman_order, log_K_factor, ours_order
    C = SYMBOLS["C"]
    lr = ours_order("low_rank", "rss", log_factor=True)
    assert sp.simplify(lr / (sp.sqrt(SYMBOLS["r"] * L * N) * sp.sqrt(L * sp.log(C) + sp.log(L)))) == 1
    assert limit_in_depth(lr / edelman_order("low_rank")) == 0      # still exponentially better
    assert limit_in_depth(lr / (L * sp.sqrt(SYMBOLS["r"] * N))) != 0  # the √L claim is lost: order L·√log C
    geo = edelman_order("frobenius", "geometric")
    assert sp.limit(geo / edelman_order("frobenius"), C, 1) == 1     # L^{3/2}C^L only near C = 1
    assert sp.limit((geo / edelman_order("frobenius")).subs(C, 2), L, sp.oo) == 0
    assert sp.simplify(log_K_factor() ** 2 - (L * sp.log(C) + sp.log(L))) == 0


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_ratios_vanish_in_depth(agg):
    t = orders_table(agg)
    for g in REGIMES:
        assert limit_in_depth(t[g]["ours"] / t[g]["edelman"]) == 0
        assert limit_in_depth(t[g]["ours"] / t[g]["trauger_tewari"]) == 0


def test_n_exponents_and_printed_inconsistency():
    assert n_exponent(regime_term("frobenius")) == sp.Rational(3, 4)
    assert n_exponent(printed_leading_order(2)) == sp.Rational(2, 3)
    assert n_exponent(TABLE_AS_PRINTED["spectral"]["trauger_tewari"]) == sp.Rational(3, 2)


def test_bad_regime():
    with pytest.raises(ValueError):
        regime_term("nuclear")
    with pytest.raises(ValueError):
        orders_table("max")


# ---- closed forms and exact messages (kill the mutants of `make mutation MODULES=orders`) ----
from bounds_lib.orders import (balanced_tau, edelman_order, entropy_terms, log_K_factor, ours_order,  # noqa: E402
                               trauger_tewari_order)


def test_balanced_forms_at_explicit_p():
    e, Cs, l, m = SYMBOLS["eps"], SYMBOLS["C_s"], SYMBOLS["l"], SYMBOLS["m"]
    # at p = 2 with ℓ = m = 1: entropies 2C_s/τ² and τ²/ε² balance at τ⁴ = 2C_s ε², each = √(2C_s)/ε
    assert sp.simplify(balanced_tau(1, 1, 2) - (2 * Cs * e**2) ** sp.Rational(1, 4)) == 0
    assert sp.simplify(balanced_log_covering(1, 1, 2) - sp.sqrt(2 * Cs) / e) == 0
    assert sp.simplify(balanced_log_covering(l, m, 0) - Cs * (l + m)) == 0        # p = 0: rank × (ℓ+m)
    a, b = entropy_terms(l, m, 1)
    assert sp.simplify(a - Cs * (l + m) / SYMBOLS["tau"]) == 0
    # √ of the entropy at radius ε/K, with ℓ = m = N, stripped of ε: 2^{1/(p+2)} T(W; p), here at p = 2
    assert sp.simplify(term_from_covering(2) / released_term(C_s, K, 2) - 2 ** sp.Rational(1, 4)) == 0


def test_dudley_integral_at_explicit_p():
    assert dudley_integral(2) == 2 and dudley_integral(0) == 1
    assert not dudley_integral().has(sp.Piecewise)


def test_error_messages_name_the_choices():
    with pytest.raises(ValueError, match="unknown regime 'nuclear'; supported: frobenius, low_rank, spectral"):
        regime_term("nuclear")
    with pytest.raises(ValueError, match="supported: frobenius, low_rank, spectral"):
        edelman_order("nuclear")
    with pytest.raises(ValueError, match="unknown aggregation 'max'; supported: sum, rss"):
        ours_order("frobenius", "max")
    with pytest.raises(ValueError, match="unknown depth form 'mean'; supported: 'max', 'geometric'"):
        edelman_order("frobenius", "mean")


def test_defaults_and_log_factor_flag():
    C = SYMBOLS["C"]
    T = regime_term("low_rank")
    assert sp.simplify(ours_order("low_rank", "rss") - sp.sqrt(L) * T) == 0          # default: no log factor
    assert orders_table() == orders_table("rss")
    lf = orders_table("sum", log_factor=True)["spectral"]["ours"]
    assert sp.simplify(lf / (L * N * log_K_factor())) == 1
    assert sp.simplify(log_K_factor().subs({C: sp.E, L: 1})) == 1


def test_geometric_depth_sum_closed_form():
    C, C_F = SYMBOLS["C"], SYMBOLS["C_F"]
    # C = 8, L = 2: Σ_{k<2} 8^{2k/3} = 1 + 4 = 5; Edelman = (5 (√N C_F)^{2/3})^{3/2} = 5^{3/2} √N C_F
    geo = edelman_order("frobenius", "geometric").subs({C: 8, L: 2})
    assert sp.simplify(geo - 5 ** sp.Rational(3, 2) * sp.sqrt(N) * C_F) == 0
    tt = trauger_tewari_order("frobenius", "geometric").subs({C: 8, L: 2})
    assert sp.simplify(tt - 5 ** sp.Rational(3, 2) * N * C_F) == 0


def test_printed_leading_order_closed_form():
    C = SYMBOLS["C"]
    want = sp.sqrt(C_s) * C ** (L / 2) * L * N ** sp.Rational(2, 3)
    assert sp.simplify(printed_leading_order(2) - want) == 0
    assert sp.simplify(printed_leading_order(1) - sp.sqrt(C_s) * C ** (L / 3) * L * N ** sp.Rational(3, 4)) == 0


def test_limit_in_depth_substitutes_one_plus_c():
    C, c = SYMBOLS["C"], sp.Symbol("c", positive=True)
    assert limit_in_depth(C - 1) == c                       # C = 1 + c exactly, with a fresh positive c
    assert limit_in_depth(C**L) == sp.oo and limit_in_depth(C ** (-L)) == 0


def test_regime_log_slope_is_p_free_and_nonnegative():
    from bounds_lib.orders import regime_log_slope
    C, r = SYMBOLS["C"], SYMBOLS["r"]
    lr = regime_log_slope("low_rank")
    assert sp.simplify(sp.expand_log(lr - (2 * (L + 1) * sp.log(C) + 2 * sp.log(L) + sp.log(N) - sp.log(r)),
                                     force=True)) == 0
    assert float(lr.subs({C: 1, L: 1, N: 64, r: 64})) == 0.0          # tight at C = 1, L = 1, r = N
    assert float(regime_log_slope("spectral").subs({C: 2, L: 3})) == pytest.approx(8 * math.log(2) + 2 * math.log(3))
    with pytest.raises(ValueError, match="only for 'low_rank' and 'spectral'"):
        regime_log_slope("frobenius")
