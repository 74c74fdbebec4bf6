import math

import pytest
import sympy as sp

from bounds_lib.theory.orders import (AGGREGATIONS, REGIMES, SYMBOLS, TABLE_AS_PRINTED, balanced_log_covering,
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
    for g in ("low_rank", "spectral"):
        assert sp.simplify(rss[g]["ours"] / TABLE_AS_PRINTED[g]["ours"]) == 1
    # Frobenius: the printed row is the p = 2 branch; the infimum over p is its minimum with the p = 0 branch
    printed_T = TABLE_AS_PRINTED["frobenius"]["ours"] / sp.sqrt(L)
    assert rss["frobenius"]["ours"] == sp.sqrt(L) * sp.Min(sp.powsimp(printed_T, force=True), N)
    for g in REGIMES:
        # derived comparison columns: equal to the printed ones in the Frobenius regime, a factor C
        # larger where ‖W‖_F ≤ √r·C or √N·C (the printed table drops that C)
        for b in ("edelman", "trauger_tewari"):
            assert sp.simplify(rss[g][b] / TABLE_AS_PRINTED[g][b]) == (1 if g == "frobenius" else C)
        assert sp.simplify(tot[g]["ours"] / rss[g]["ours"] - sp.sqrt(L)) == 0


def test_log_factor_rows_and_geometric_depth_sum():
    from bounds_lib.theory.orders import edelman_order, log_K_factor, ours_order
    C, n, T = SYMBOLS["C"], SYMBOLS["n"], SYMBOLS["T"]
    lr = ours_order("low_rank", "rss", log_factor=True)
    want = sp.sqrt(SYMBOLS["r"] * L * N) * sp.sqrt(sp.log(n * T * N) + sp.Max(L * sp.log(C) + sp.log(L), 0))
    assert sp.simplify(lr / want) == 1
    assert limit_in_depth(lr / edelman_order("low_rank")) == 0      # still exponentially better
    # beyond L log C ≍ log(nTN) the row grows like L √(rN log C): the ratio to L√(rN) tends to √log C
    c = sp.Symbol("c", positive=True)   # limit_in_depth writes C = 1 + c
    assert sp.simplify(limit_in_depth(lr / (L * sp.sqrt(SYMBOLS["r"] * N))) - sp.sqrt(sp.log(1 + c))) == 0
    geo = edelman_order("frobenius", "geometric")
    assert sp.limit(geo / edelman_order("frobenius"), C, 1) == 1     # L^{3/2}C^L only near C = 1
    assert sp.limit((geo / edelman_order("frobenius")).subs(C, 2), L, sp.oo) == 0
    assert sp.simplify(log_K_factor() ** 2 - sp.Max(L * sp.log(C) + sp.log(L), 0)) == 0


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_ratios_vanish_in_depth(agg):
    t = orders_table(agg)
    for g in REGIMES:
        assert limit_in_depth(t[g]["ours"] / t[g]["edelman"]) == 0
        assert limit_in_depth(t[g]["ours"] / t[g]["trauger_tewari"]) == 0


def test_n_exponents_and_printed_inconsistency():
    from bounds_lib.theory.orders import frobenius_holder_term
    assert n_exponent(frobenius_holder_term(2)) == sp.Rational(3, 4)
    assert n_exponent(frobenius_holder_term(0)) == 1
    assert n_exponent(printed_leading_order(2)) == sp.Rational(2, 3)
    assert n_exponent(TABLE_AS_PRINTED["spectral"]["trauger_tewari"]) == sp.Rational(3, 2)


def test_bad_regime():
    with pytest.raises(ValueError):
        regime_term("nuclear")
    with pytest.raises(ValueError):
        orders_table("max")


# ---- closed forms and exact messages (kill the mutants of `make mutation MODULES=orders`) ----
from bounds_lib.theory.orders import (balanced_tau, edelman_order, entropy_terms, log_K_factor, ours_order,  # noqa: E402
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
    from bounds_lib.theory.orders import table_log_factor
    lf = orders_table("sum", log_factor=True)["spectral"]["ours"]
    assert sp.simplify(lf / (L * N * table_log_factor())) == 1
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
    from bounds_lib.theory.orders import regime_log_slope
    C, r = SYMBOLS["C"], SYMBOLS["r"]
    lr = regime_log_slope("low_rank")
    assert sp.simplify(sp.expand_log(lr - (2 * (L + 1) * sp.log(C) + 2 * sp.log(L) + sp.log(N) - sp.log(r)),
                                     force=True)) == 0
    assert float(lr.subs({C: 1, L: 1, N: 64, r: 64})) == 0.0          # tight at C = 1, L = 1, r = N
    assert float(regime_log_slope("spectral").subs({C: 2, L: 3})) == pytest.approx(8 * math.log(2) + 2 * math.log(3))
    with pytest.raises(ValueError, match="only for 'low_rank' and 'spectral'"):
        regime_log_slope("frobenius")


# ---- issue 20: the table's log factor is the theorem's up to a stated constant; the Frobenius row is inf_p ----
import itertools  # noqa: E402

import numpy as np  # noqa: E402

from bounds_lib.theory.orders import (frobenius_holder_term, log_factor_constant, table_log_factor,  # noqa: E402
                               theorem_log_factor)

_ARGS = tuple(SYMBOLS[k] for k in ("n", "T", "N", "L", "C"))
_GRID = list(itertools.product([1e2, 1e3, 1e5, 1e7], [1.0, 16.0, 128.0, 512.0], [16.0, 64.0, 768.0, 4096.0],
                               [1.0, 2.0, 6.0, 12.0, 48.0, 96.0], [0.125, 0.5, 0.9, 1.0, 1.1, 1.5, 3.0]))


def _ratios(factor):
    thm, f = sp.lambdify(_ARGS, theorem_log_factor(), "math"), sp.lambdify(_ARGS, factor, "math")
    return np.array([[thm(*x) / f(*x), log_factor_constant(x[0] * x[1] * x[2])] for x in _GRID])


def test_table_log_factor_is_the_theorems_within_kappa_on_a_grid():
    # Lemma ch05-lem-logfactor: 1 ≤ √λ̄ / table ≤ κ(nTN) = √(2 + log 72/log(nTN)) for n, T ≥ 1, C ≥ 1/8
    r = _ratios(table_log_factor())
    assert len(_GRID) == 2688 and np.all(r[:, 0] >= 1.0) and np.all(r[:, 0] <= r[:, 1])
    assert r[:, 0].min() < 1.05 and (r[:, 0] / r[:, 1]).max() > 0.9   # neither side is slack by much here


def test_old_multiplicative_factor_is_not_within_any_kappa():
    # the former table factor √log(nT)·√(L log C + log L): 0.83×, 1.70×, 2.57× the theorem's at L = 2, 12, 48
    n, T, C = SYMBOLS["n"], SYMBOLS["T"], SYMBOLS["C"]
    old = sp.sqrt(sp.log(n * T)) * sp.sqrt(L * sp.log(C) + sp.log(L))
    f = sp.lambdify(_ARGS, old / theorem_log_factor(), "math")
    got = [f(1e5, 128.0, 768.0, Lv, 1.5) for Lv in (2.0, 12.0, 48.0)]
    assert got == pytest.approx([0.8287, 1.6987, 2.5732], abs=1e-4)
    assert got[0] < 1 and got[2] > log_factor_constant(1e5 * 128 * 768)   # outside the band on both sides
    assert limit_in_depth(old / theorem_log_factor()) == sp.sqrt(sp.log(n * T))   # not a constant: → ∞ with nT


def test_log_K_factor_is_real_below_one():
    C = SYMBOLS["C"]
    v = log_K_factor().subs({C: sp.Rational(1, 2), L: 12})
    assert v == 0 and v.is_real
    assert float(log_K_factor().subs({C: 2, L: 3})) == pytest.approx(math.sqrt(3 * math.log(2) + math.log(3)))


def test_frobenius_row_is_the_infimum_over_p():
    C, C_F = SYMBOLS["C"], SYMBOLS["C_F"]
    # log 𝒯 = (a + b p)/(p + 2) under Hölder: (p+2)² d/dp log 𝒯 = 2 log(C_F K) − log N, free of p
    slope = sp.simplify(sp.expand_log(sp.diff(sp.log(frobenius_holder_term(p)), p) * (p + 2) ** 2, force=True))
    assert not slope.has(p)
    assert sp.simplify(sp.expand_log(slope - (2 * sp.log(C_F) + 2 * L * sp.log(C) + 2 * sp.log(L) - sp.log(N)),
                                     force=True)) == 0
    # a numeric inf over a fine p-grid equals the min of the two ends
    f = sp.lambdify((p, L, N, C, C_F), frobenius_holder_term(p), "math")
    for Lv, Nv, Cv, CFv in [(12, 768, 1.5, 4.0), (1, 768, 1.0, 1.0), (3, 64, 1.1, 0.5), (2, 4096, 2.0, 30.0)]:
        ps = np.linspace(0, 2, 401)
        ends = min(f(0, Lv, Nv, Cv, CFv), f(2, Lv, Nv, Cv, CFv))
        assert min(f(q, Lv, Nv, Cv, CFv) for q in ps) == pytest.approx(ends)
    # the numbers: at L = 12, C = 1.5, C_F = 4, N = 768 (rss, no log factor) 2.66·10³ (p = 0) vs 3.99·10⁴
    row = orders_table("rss")["frobenius"]["ours"].subs({L: 12, C: sp.Rational(3, 2), C_F: 4, N: 768})
    assert float(row) == pytest.approx(math.sqrt(12) * 768)
    p2 = float((sp.sqrt(L) * frobenius_holder_term(2)).subs({L: 12, C: sp.Rational(3, 2), C_F: 4, N: 768}))
    assert p2 == pytest.approx(3.99e4, rel=2e-3) and float(row) == pytest.approx(2.66e3, rel=2e-3)


def test_limit_in_depth_splits_min_and_drops_log_plus():
    C = SYMBOLS["C"]
    assert limit_in_depth(sp.Min(C**L, N) / N) == 1
    assert limit_in_depth(sp.Min(C**L, N)) == N
    c = sp.Symbol("c", positive=True)
    assert limit_in_depth(sp.sqrt(sp.Max(L * sp.log(C), 0)) / sp.sqrt(L)) == sp.sqrt(sp.log(1 + c))


def test_log_factor_constant_values_and_errors():
    assert log_factor_constant(math.e) == pytest.approx(math.sqrt(2 + math.log(72)))
    with pytest.raises(ValueError, match="nTN must exceed 1"):
        log_factor_constant(1.0)


def test_mutation_survivors_of_the_new_functions():
    # log_factor_constant accepts every nTN > 1 (not only > 2)
    assert log_factor_constant(1.5) == pytest.approx(math.sqrt(2 + math.log(72) / math.log(1.5)))
    # limit_in_depth drops only a log⁺ (Max with 0), not any two-argument Max
    r = SYMBOLS["r"]
    assert limit_in_depth(sp.Max(N, r) / N) == sp.Max(N, r) / N
    # the Min branches are substituted back with C = 1 + c before recursing (a finite, c-dependent limit)
    c, C = sp.Symbol("c", positive=True), SYMBOLS["C"]
    assert limit_in_depth(sp.Min(C, N)) == sp.Min(1 + c, N)


# ---- property-based: the two lemmas of Chapter 5's orders table ----
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(n=st.floats(1, 1e12), T=st.floats(1, 1e5), N=st.floats(2, 1e6), Lv=st.floats(1, 1e3), Cv=st.floats(0.125, 1e3))
def test_log_factor_lemma_property(n, T, N, Lv, Cv):
    from bounds_lib.checks import log_factors
    thm, tab = log_factors(n, T, N, Lv, Cv)
    assert tab <= thm * (1 + 1e-12) and thm <= log_factor_constant(n * T * N) * tab * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(sig=st.lists(st.floats(1e-6, 1e3), min_size=1, max_size=12), CF=st.floats(1e-2, 1e2),
       logK=st.floats(-5, 40), extra=st.integers(0, 8))
def test_frobenius_lemma_property(sig, CF, logK, extra):
    from bounds_lib.theory.peeling import log_term, posthoc_grid
    N = len(sig) + extra                               # rank ≤ N
    s = np.array(sig) * CF / np.linalg.norm(sig)       # ‖W‖_F = C_F
    grid = posthoc_grid(1, N)
    logS = np.r_[math.log(len(sig)), np.log(np.sum(s[None, :] ** grid[1:, None], axis=1))]
    lhs = float(np.min(log_term(logS, grid, logK, N)))
    rhs = min(0.5 * (math.log(CF) + logK) + 0.75 * math.log(N), math.log(N))
    assert lhs <= rhs + 1e-9
