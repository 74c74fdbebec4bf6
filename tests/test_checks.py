"""The falsification harness and the checks of Chapters 1–4 (bounds_lib.checks).

Every harness result is checked twice: against the proved bound (no violation) and against a
weakened one (a violation must be found) — a harness that cannot find the second is useless.
"""
import math

import numpy as np
import pytest

from bounds_lib import checks as C
from bounds_lib.checks import ch3_single_head
from bounds_lib.theory import norms
from bounds_lib.checks import (VIOLATION_TOL, Falsification, adversarial_search, falsify, falsify_rounding,
                               falsify_shell_inflation, power_check, rounding_ratio)
from bounds_lib.theory.peeling import geometric_ratio, log_alpha_inflation, log_term, rounding_cost_bound, shell_top


def test_falsification_counts_and_worst():
    f = Falsification("x", np.array([0.5, 1.0, 1.0 + 2 * VIOLATION_TOL]), np.array([0.9, 1.2]))
    assert f.trials == 3 and f.violations == 2 and f.worst_ratio == 1.2
    assert f.worst_random == 1.0 + 2 * VIOLATION_TOL and f.worst_adversarial == 1.2
    g = Falsification("y", np.array([1.0 + VIOLATION_TOL / 2]))
    assert g.violations == 0 and math.isnan(g.worst_adversarial)


def test_adversarial_search_finds_the_maximum():
    best, x = adversarial_search(lambda x: 1.0 - float(np.sum((x - 0.3) ** 2)), np.zeros((2, 3)))
    assert best.shape == (2,) and np.all(best > 1 - 1e-8) and np.allclose(x, 0.3, atol=1e-4)
    best, _ = adversarial_search(lambda x: np.cos(x[0]), np.array([[0.5]]), method="Powell")
    assert abs(best[0] - 1.0) < 1e-8
    # a raising or NaN ratio counts as 0, not as a crash
    best, _ = adversarial_search(lambda x: float("nan"), np.zeros((1, 2)))
    assert best[0] == 0.0
    with pytest.raises(ValueError, match="method"):
        adversarial_search(lambda x: 0.0, np.zeros((1, 1)), method="BFGS")
    with pytest.raises(ValueError, match="starts"):
        adversarial_search(lambda x: 0.0, np.zeros((0, 1)))


def test_falsify_and_power_check():
    # |sin x| ≤ |x|: tight near 0, so dividing the bound by 1.1 must be caught
    def run(w):
        return falsify("sin", lambda x: w * abs(np.sin(x[0])) / max(abs(x[0]), 1e-300),
                       lambda r: r.uniform(-3, 3, 1), np.random.default_rng(0), trials=50, restarts=2)
    proved, weak = power_check(run, 1.1)
    assert proved.violations == 0 and proved.worst_ratio > 0.999 and weak.violations > 0
    with pytest.raises(AssertionError, match="no power"):
        power_check(lambda w: run(1.0), 1.1)
    with pytest.raises(AssertionError, match="violated"):
        power_check(lambda w: run(1.2), 1.1)
    with pytest.raises(ValueError):
        falsify("x", lambda x: 0.0, lambda r: r.uniform(size=1), np.random.default_rng(0), trials=0)


# ---------------------------------------------------------------- split lemmas: random, non-degenerate, optimiser

@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_split_random_and_nondegenerate():
    rng = np.random.default_rng(3)
    full = C.falsify_split(rng, trials=1000)
    nd = C.falsify_split(rng, trials=1000, nondegenerate=True)
    assert all(f.violations == 0 for f in full + nd)
    assert full[0].worst_ratio == 1.0  # rank bound attained (p = 0)
    assert all(f.worst_ratio < 1 for f in nd[1:])  # with τ < σ₁ the tail bounds are not attained
    weak = C.falsify_split(rng, trials=1000, weaken=1.1)
    assert all(f.violations > 0 for f in weak)


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_split_optimiser_power():
    proved = C.adversarial_split(np.random.default_rng(5), trials=60, restarts=2)
    weak = C.adversarial_split(np.random.default_rng(5), trials=60, restarts=2, weaken=1.1)
    assert all(f.violations == 0 for f in proved)
    # τ < σ₁ with k = 12: sup of the tail ratios is √(11/12) ≈ 0.957 > 1/1.1
    assert proved[1].worst_adversarial > 0.95 and all(f.violations > 0 for f in weak)


# ---------------------------------------------------------------- Chapter 3: optimisers


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_layer_lipschitz_optimiser_has_power():
    kw = dict(tokens=(3,), qs=(1.0,), trials=60, restarts=2, maxiter=1500)
    ok = C.adversarial_layer_lipschitz(np.random.default_rng(0), **kw)
    wrong_c = C.adversarial_layer_lipschitz(np.random.default_rng(0), softmax_const=0.25, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > ok.worst_random
    assert wrong_c.violations > 0
    assert C.adversarial_layer_lipschitz(np.random.default_rng(0), weaken=1.1 / ok.worst_adversarial, **kw).violations


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_parameter_perturbation_optimiser_has_power():
    kw = dict(depths=(1,), trials=40, restarts=1, maxiter=2500)  # seed 2: reaches 0.98 of the bound
    ok = C.adversarial_parameter_perturbation(np.random.default_rng(2), **kw)
    qk = C.adversarial_parameter_perturbation(np.random.default_rng(2), perturb=("QK",), **kw)
    wrong_c = C.adversarial_parameter_perturbation(np.random.default_rng(2), softmax_const=0.25, perturb=("QK",), **kw)
    weak = C.adversarial_parameter_perturbation(np.random.default_rng(2), weaken=1.1, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > 0.9
    assert wrong_c.violations > 0 and weak.violations > 0
    # perturbing W_QK alone, γ^QK = c·C_V·L_φ·C_M with c = 1 is attained: the optimiser reaches ratio 1
    assert qk.violations == 0 and qk.worst_adversarial > 1 - 1e-4 and wrong_c.worst_adversarial > 3.9


# ---------------------------------------------------------------- Chapter 1: norm inequalities

@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_norm_inequalities_power():
    ok = C.falsify_norm_inequalities(np.random.default_rng(0), trials=300, restarts=1)
    weak = C.falsify_norm_inequalities(np.random.default_rng(0), trials=300, restarts=1, weaken=1.1)
    assert len(ok) == len(norms.NORM_INEQUALITIES) and all(f.violations == 0 for f in ok)
    assert all(f.violations > 0 for f in weak)
    assert min(f.worst_ratio for f in ok) > 0.99  # every inequality attained or nearly attained


def test_norm_inequality_closed_forms():
    # rank-one matrix attains ‖W‖₂ = ‖W‖_F; all-ones attains both √ factors
    r = C.norm_inequality_ratios(np.outer([1.0, 2.0], [3.0, 4.0, 5.0]))
    assert np.isclose(r["‖W‖₂ ≤ ‖W‖_F"], 1) and np.isclose(r["‖W‖_F ≤ √rank ‖W‖₂"], 1)
    J = C.norm_inequality_ratios(np.ones((3, 4)))
    assert np.isclose(J["‖W‖_{2,1} ≤ √m ‖W‖_F"], 1) and np.isclose(J["‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}"], 1)
    assert set(C.norm_inequality_ratios(np.zeros((2, 2))).values()) == {0.0}
    d = C.norm_inequality_ratios(np.diag([4.0, 1.0]), weaken=2.0)
    assert np.isclose(d["‖W‖₂ ≤ ‖W‖_F"], 2 * 4 / np.sqrt(17)) and np.isclose(d["‖W‖_F ≤ ‖W‖_*"], 2 * np.sqrt(17) / 5)
    assert np.isclose(d["‖W‖_F ≤ √rank ‖W‖₂"], 2 * np.sqrt(17) / (np.sqrt(2) * 4))
    assert np.isclose(d["‖W‖_* ≤ √rank ‖W‖_F"], 2 * 5 / (np.sqrt(2) * np.sqrt(17)))
    assert np.isclose(d["‖W‖_F ≤ ‖W‖_{2,1}"], 2 * np.sqrt(17) / 5) and np.isclose(d["‖W‖_{2,1} ≤ ‖W‖_{1,1}"], 2.0)
    assert np.isclose(d["‖W‖_{2,1} ≤ √m ‖W‖_F"], 2 * 5 / (np.sqrt(2) * np.sqrt(17)))
    assert np.isclose(d["‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}"], 2 / np.sqrt(2)) and np.isclose(d["‖W‖_{2→∞} ≤ ‖W‖₂"], 2.0)
    assert np.isclose(d["S_p ≤ rank·σ₁ᵖ (p=1/2)"], 2 * 3 / 4) and np.isclose(d["σ₁ᵖ ≤ S_p (p=1/2)"], 2 * 2 / 3)


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_composition_power():
    kw = dict(depths=(1,), acts=("identity",), trials=30, restarts=1, maxiter=2000)
    ok = C.falsify_composition(np.random.default_rng(0), **kw)
    weak = C.falsify_composition(np.random.default_rng(0), weaken=1.1, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > 0.95 and weak.violations > 0


# ---------------------------------------------------------------- Chapter 4: rounding lemma and shells

def test_shell_falsification_has_power():
    rng = np.random.default_rng(2)
    tight = falsify_shell_inflation(rng, L=6, trials=2000, adversarial_starts=1)
    assert tight.violations == 0 and tight.worst_ratio > 0.99      # the adversary reaches the supremum
    weak = falsify_shell_inflation(rng, L=6, trials=2000, adversarial_starts=1,
                                   bound_log=3 * 5 * np.log(geometric_ratio(6)) - np.log(1.1))
    assert weak.violations >= 1                                    # power: bound / 1.1 is violated
    assert weak.worst_random <= 1                                  # ... which random draws alone miss
    dyadic = falsify_shell_inflation(rng, L=6, ratio=2.0, bound_log=3.0, what="alpha", trials=2000,
                                     adversarial_starts=1)
    assert dyadic.violations >= 1                                  # dyadic shells break the e³ claim
    geo = falsify_shell_inflation(rng, L=6, bound_log=3.0, what="alpha", trials=2000, adversarial_starts=1)
    assert geo.violations == 0


def test_rounding_lemma_falsification_has_power():
    rng = np.random.default_rng(4)
    proved = falsify_rounding(rng, trials=200, restarts=3)
    assert proved.violations == 0 and proved.worst_adversarial > 0.95   # near-tight, found by the optimiser
    weak = falsify_rounding(rng, trials=200, restarts=3, weaken=1.1)
    assert weak.violations > 0
    # the tight configuration of the proof: p → 0, δ → 0, one singular value e^2, log K = 3, N = 1
    assert rounding_ratio(np.array([-12.0, -12.0, 3.0, 0.0, 2.0])) == pytest.approx(1.0, abs=1e-3)


def test_shell_inflation_defaults_and_validation():
    rng = np.random.default_rng(5)
    r = falsify_shell_inflation(rng, L=2, adversarial_starts=0)
    assert r.trials == 10_000 and r.adversarial.size == 0
    assert r.name == "shells rho=1.5: product of 3 radii"
    x = np.exp(np.log(0.5) + (np.log(4.0) - np.log(0.5)) * np.random.default_rng(5).random((10_000, 6)))
    # the draws are log-uniform in [0.5, 4]: the product ratios are those of the layer-1 radii
    top = shell_top(x[:, 3:], 1.5)
    np.testing.assert_allclose(r.ratios, np.sum(np.log(top / x[:, 3:]), axis=1) / (3 * math.log(1.5)))
    a = falsify_shell_inflation(np.random.default_rng(6), L=3, what="alpha", trials=50, adversarial_starts=1)
    assert a.name.endswith("alpha of 6 radii") and a.adversarial.size == 1
    for bad in [dict(L=1), dict(L=2, bound_log=0.0), dict(L=2, low=2.0, high=1.0), dict(L=2, what="beta"),
                dict(L=2, ratio=1.0)]:
        with pytest.raises(ValueError):
            falsify_shell_inflation(rng, trials=5, adversarial_starts=0, **bad)
    with pytest.raises(ValueError, match="L must be >= 2"):
        falsify_shell_inflation(rng, L=1, trials=5)
    with pytest.raises(ValueError, match="what must be 'product' or 'alpha', got 'beta'"):
        falsify_shell_inflation(rng, L=2, what="beta", trials=5)
    with pytest.raises(ValueError, match="need 0 < low < high"):
        falsify_shell_inflation(rng, L=2, low=2.0, high=1.0, trials=5)
    with pytest.raises(ValueError, match="bound_log must be positive"):
        falsify_shell_inflation(rng, L=2, bound_log=-1.0, trials=5)


def test_rounding_ratio_closed_forms():
    # x = (0, 0, log K, log N, log σ...): p = 1, p' = 1.5
    x = np.array([0.0, 0.0, 2.0, math.log(3.0), 1.0, -0.5, 0.3])
    s = np.sort(np.exp([1.0, -0.5, 0.3]))[::-1]
    lS, lSq = math.log(np.sum(s**1.0)), math.log(np.sum(s**1.5))
    diff = log_term(lSq, 1.5, 2.0, 3) - log_term(lS, 1.0, 2.0, 3)
    assert rounding_ratio(x) == pytest.approx(diff / rounding_cost_bound(0.5, 1.0, s[0], lS, 2.0, 3), rel=1e-12)
    assert rounding_ratio(x, weaken=2.0) == pytest.approx(2 * rounding_ratio(x), rel=1e-12)
    # clipping: log K to [-50, 50], log N to 12, log σ to [-30, 30]
    big = np.array([0.0, 0.0, 100.0, 20.0, 40.0, -40.0])
    s2 = np.array([math.exp(30.0), math.exp(-30.0)])
    N2 = int(round(math.exp(12.0)))
    lS2, lSq2 = math.log(np.sum(s2)), math.log(np.sum(s2**1.5))
    d2 = log_term(lSq2, 1.5, 50.0, N2) - log_term(lS2, 1.0, 50.0, N2)
    assert rounding_ratio(big) == pytest.approx(d2 / rounding_cost_bound(0.5, 1.0, s2[0], lS2, 50.0, N2), rel=1e-9)
    neg = np.array([0.0, 0.0, -100.0, -5.0, 0.5])             # log K → -50, N → 1
    s3 = math.exp(0.5)
    d3 = log_term(1.5 * 0.5, 1.5, -50.0, 1) - log_term(0.5, 1.0, -50.0, 1)
    assert rounding_ratio(neg) == pytest.approx(d3 / rounding_cost_bound(0.5, 1.0, s3, 0.5, -50.0, 1), rel=1e-12)
    assert rounding_ratio(np.zeros(5)) == 0.0                  # σ = 1, log K = 0, N = 1: bound 0, ratio 0
    assert rounding_ratio(np.array([0.0, -800.0, 0.0, 0.0, 0.5])) == 0.0   # p' = p in floating point
    r = falsify_rounding(np.random.default_rng(7), trials=20, restarts=0)
    assert r.trials == 20 and r.adversarial.size == 0 and r.name == "rounding lemma (bound / 1)"
    assert falsify_rounding(np.random.default_rng(7), restarts=0).trials == 2000


def test_alpha_objective_uses_each_kind_of_radius():
    rng = np.random.default_rng(8)
    r = falsify_shell_inflation(rng, L=3, ratio=2.0, bound_log=1.0, what="alpha", trials=200, adversarial_starts=0)
    x = np.exp(np.log(0.5) + (np.log(4.0) - np.log(0.5)) * np.random.default_rng(8).random((200, 9)))
    want = log_alpha_inflation(x[:, 0::3], x[:, 1::3], x[:, 2::3], 2.0)
    np.testing.assert_allclose(r.ratios, want)
    assert falsify_shell_inflation(rng, L=2, bound_log=0.5, trials=5, adversarial_starts=0).trials == 5
    assert falsify_shell_inflation(rng, trials=5, adversarial_starts=0).name.endswith("of 33 radii")  # L = 12


def test_rounding_ratio_reads_p_and_p_prime_from_their_coordinates():
    x = np.array([1.0, -1.0, 2.0, math.log(3.0), 1.0, -0.5])
    p = 2.0 / (1.0 + math.exp(-1.0))
    q = p + (2.0 - p) / (1.0 + math.exp(1.0))
    s = np.exp([1.0, -0.5])
    lS, lSq = math.log(np.sum(s**p)), math.log(np.sum(s**q))
    diff = log_term(lSq, q, 2.0, 3) - log_term(lS, p, 2.0, 3)
    assert rounding_ratio(x) == pytest.approx(diff / rounding_cost_bound(q - p, p, s[0], lS, 2.0, 3), rel=1e-12)


def test_shell_inflation_messages():
    with pytest.raises(ValueError, match=r"^L \(number of layers\) == 0, must be >= 1$"):
        falsify_shell_inflation(np.random.default_rng(0), L=0, trials=5)
    with pytest.raises(ValueError, match=r"^L must be >= 2: α⁽⁰⁾ is a product over layers 1..L-1$"):
        falsify_shell_inflation(np.random.default_rng(0), L=1, trials=5)
    with pytest.raises(ValueError, match=r"^need 0 < low < high, got low=0.0, high=4.0$"):
        falsify_shell_inflation(np.random.default_rng(0), L=2, low=0.0, trials=5)
    with pytest.raises(ValueError, match=r"^need 0 < low < high"):
        falsify_shell_inflation(np.random.default_rng(0), L=2, low=1.0, high=1.0, trials=5)
    with pytest.raises(ValueError, match=r"^need 0 < low < high"):
        falsify_shell_inflation(np.random.default_rng(0), L=2, high=math.inf, trials=5)


# ---- Chapter 5: the orders table against the theorem (issue 20) ----

def test_log_factor_lemma_holds_and_the_search_has_power():
    from bounds_lib.checks import falsify_log_factor
    rng = np.random.default_rng(5)
    up, low = falsify_log_factor(rng, trials=800, restarts=3)
    assert up.trials == low.trials == 800 and up.violations == 0 and low.violations == 0
    assert up.worst_adversarial > 0.999          # the optimiser reaches the constant κ (N → ∞, n = T = L = 1)
    up_w, low_w = falsify_log_factor(rng, trials=800, restarts=3, weaken=1.1)
    assert up_w.violations > 0 and low_w.violations > 0


def test_log_factors_closed_form():
    import math
    from bounds_lib.checks import log_factors
    thm, tab = log_factors(1.0, 1.0, 2.0, 1.0, 1.0)   # K = 1: log⁺(8·1·2·1) = log 16
    assert thm == pytest.approx(math.sqrt(math.log(18.0) + math.log(16.0)))
    assert tab == pytest.approx(math.sqrt(math.log(2.0)))
    thm, tab = log_factors(1.0, 1.0, 2.0, 12.0, 0.125)   # K = 12/8¹² < 1: log⁺ K = 0
    assert tab == pytest.approx(math.sqrt(math.log(2.0)))


def test_frobenius_row_is_attained_and_the_weakened_row_fails():
    from bounds_lib.checks import falsify_frobenius_row
    rng = np.random.default_rng(6)
    f = falsify_frobenius_row(rng, trials=200, Ns=(4,), restarts=2)
    assert f.violations == 0 and f.worst_ratio > 1 - 1e-9     # attained by the flat spectrum
    assert falsify_frobenius_row(rng, trials=200, Ns=(4,), restarts=2, weaken=1.1).violations > 0


# ---- Chapter 3: the multi-head surrogate (issue 20): each check finds a violation of its weakened bound ----

@pytest.mark.slow  # optimiser runs
def test_multihead_layer_lambda_has_power():
    from bounds_lib.checks import falsify_multihead_layer
    kw = dict(trials=150, restarts=2, acts=("identity",))
    f = falsify_multihead_layer(np.random.default_rng(20260509), **kw)
    w = falsify_multihead_layer(np.random.default_rng(20260509), weaken=1.1, **kw)
    assert f.violations == 0 and f.worst_ratio > 0.95 and w.violations > 0


@pytest.mark.slow  # optimiser runs
@pytest.mark.parametrize("which", ["QK", "M_out"])
def test_multihead_gamma_optimiser_reaches_one_and_breaks_the_weakened_gamma(which):
    from bounds_lib.checks import adversarial_multihead_gamma
    f = adversarial_multihead_gamma(np.random.default_rng(3), which, trials=80, restarts=2)
    w = adversarial_multihead_gamma(np.random.default_rng(3), which, weaken=1.1, trials=80, restarts=2)
    assert f.violations == 0 and f.worst_ratio >= 0.95 and w.violations > 0
    with pytest.raises(ValueError, match="which must be one of QK, V, M_in, M_out"):
        adversarial_multihead_gamma(np.random.default_rng(3), "M")


@pytest.mark.slow  # optimiser runs
def test_multihead_gamma_m_out_with_three_tanh_holds_its_linear_growth_constant():
    """γ_Mout = B_φ·C(M_in) with B_φ = 3 for φ = 3·tanh: with B_φ = 1 in its place (as once) this search found
    ratios near 3 — a false violation; with it, the bound holds and is approached where tanh is linear."""
    from bounds_lib.checks import adversarial_multihead_gamma
    kw = dict(act="3tanh", trials=60, restarts=1, maxiter=1500)
    f = adversarial_multihead_gamma(np.random.default_rng(0), "M_out", **kw)
    w = adversarial_multihead_gamma(np.random.default_rng(0), "M_out", weaken=1.1, **kw)
    assert f.violations == 0 and f.worst_ratio > 0.95 and w.violations > 0


@pytest.mark.slow  # optimiser runs
def test_composition_qk_isolated_finds_a_wrong_softmax_constant():
    from bounds_lib.checks import falsify_composition, falsify_multihead_composition
    kw = dict(trials=40, restarts=1, depths=(1,), perturb=("QK",))
    assert falsify_composition(np.random.default_rng(20260509), **kw).violations == 0
    assert falsify_composition(np.random.default_rng(20260509), softmax_const=0.5, **kw).violations > 0
    kw = dict(trials=40, restarts=1, depths=(1,), acts=("identity",), perturb=("QK",))
    assert falsify_multihead_composition(np.random.default_rng(4), **kw).violations == 0
    assert falsify_multihead_composition(np.random.default_rng(4), softmax_const=0.5, **kw).violations > 0


def test_check_parameter_perturbation_says_which_claim_fails(monkeypatch):
    """The five runs of Theorem ch03-thm-param's check, replaced by fixed outcomes (the real runs take
    minutes and are executed by Chapter 3): all claims hold on the right pattern, and a violation in the
    random draws, or a power run that finds none, is named in the one-line summary and fails ``require``."""
    ok, broken = np.array([0.5, 0.9]), np.array([0.5, 1.2])

    def patch(random, weakened):
        monkeypatch.setattr(ch3_single_head, "falsify_parameter_perturbation",
                            lambda rng, trials, softmax_const: C.Falsification("random", random))
        monkeypatch.setattr(ch3_single_head, "adversarial_parameter_perturbation",
                            lambda rng, perturb=None, softmax_const=1.0, weaken=1.0: C.Falsification(
                                "opt", ok, broken if (softmax_const == 0.25 or weaken != 1.0) and weakened
                                else ok))

    patch(ok, True)
    res = C.check_parameter_perturbation(None, trials=2)
    assert res.holds and res.summary().startswith("network parameter perturbation: 5 of 5 claims hold")
    patch(broken, True)
    res = C.check_parameter_perturbation(None, trials=2)
    assert res.failed == ["no violation in 2 random draws"]
    with pytest.raises(AssertionError, match="4 of 5 claims hold; fails: no violation in 2 random draws"):
        res.require()
    patch(ok, False)  # the broken variants are not caught: the check has lost its power, and says so
    assert C.check_parameter_perturbation(None, trials=2).failed == [
        "power: softmax constant 1/4 broken through W^QK", "power: the bound / 1.1 broken"]


# ---- issue 28: the searches see indefinite W_QK and L_φ ≠ 1 (the witnesses' shapes) ----

def test_block_ratio_reads_the_qk_shape():
    """The indefinite W_QK = q·diag(−1, 1) on the witness's tokens gives its ratio; qI does not."""
    from bounds_lib.checks.ch3_single_head import _block_ratio
    from bounds_lib.checks.ch3_witnesses import _TOKENS, _rotation
    q, th = 30.0, 1e-7 / 30
    x = np.concatenate([[np.log(q)], _TOKENS.ravel(), (_TOKENS @ _rotation(th)).ravel()])
    e = np.exp(-q)
    indefinite = _block_ratio(x, 3, 2, 1.0, 1.0, qk="indefinite")
    assert indefinite == pytest.approx((4 * q + e) / ((2 + e) * (1 + 2 * q)), abs=1e-6)
    assert _block_ratio(x, 3, 2, 1.0, 1.0, qk="identity") < 0.1
    with pytest.raises(ValueError, match="qk must be 'identity' or 'indefinite', got 'free'"):
        _block_ratio(x, 3, 2, 1.0, 1.0, qk="free")


def test_multihead_searches_have_an_activation_with_lphi_three():
    from bounds_lib.checks.ch3_multihead import _MH_ACTS
    phi, lp = _MH_ACTS["3tanh"]
    xs = np.linspace(-1e-4, 1e-4, 11)
    assert lp == 3.0 and np.allclose(np.diff(phi(xs)) / np.diff(xs), 3.0, rtol=1e-6)


@pytest.mark.slow  # optimiser runs
def test_layer_search_with_indefinite_qk_breaks_half_the_softmax_constant():
    """With W_QK free of sign the search reaches the witness's region: c = 1/2 is broken (not with qI)."""
    kw = dict(tokens=(3,), qs=(8.0,), trials=40, restarts=2, maxiter=1500)
    half = C.adversarial_layer_lipschitz(np.random.default_rng(0), softmax_const=0.5, qk="indefinite", **kw)
    assert half.violations > 0
    assert C.adversarial_layer_lipschitz(np.random.default_rng(0), qk="indefinite", **kw).violations == 0
