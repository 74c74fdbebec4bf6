"""The falsification harness and the corrected covering / effective-scale functions (Chapters 2–3).

Every harness result is checked twice: against the proved bound (no violation) and against a
weakened one (a violation must be found) — a harness that cannot find the second is useless.
"""
import math

import numpy as np
import pytest
from scipy.integrate import quad

from bounds_lib import interpolation as I
from bounds_lib import propagation as P
from bounds_lib.falsification import VIOLATION_TOL, Falsification, adversarial_search, falsify, power_check


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


# ---------------------------------------------------------------- Chapter 2: corrected covering numbers

def test_low_rank_volumetric_closed_form():
    assert np.isclose(I.entropy_low_rank_volumetric(2, 3, 4, 1.5, 0.5), 2 * 7 * np.log(1 + 12.0))
    assert I.entropy_low_rank_volumetric(0, 3, 4, 1.5, 0.5) == 0.0
    assert np.isclose(I.log_covering_p0(3, 5, 5, 2.0, 0.1), 30 * np.log(81.0))
    # p = 0 is not free of ε: the entropy grows like log(1/ε)
    assert I.log_covering_p0(3, 5, 5, 2.0, 1e-6) > I.log_covering_p0(3, 5, 5, 2.0, 1e-3) + 30 * np.log(999)


def test_tail_maurey_closed_form():
    rho, eps, m, n = 2.0, 0.5, 3, 10
    expect = 36 * 4 * 3 / 0.25 * np.log(2 * np.ceil(4 * 2 * np.sqrt(3) / 0.5 + 2) * 10 * 3 + 1)
    assert np.isclose(I.entropy_tail_maurey(rho, eps, m, n), expect)
    assert I.entropy_tail_maurey(0.0, eps, m, n) == 0.0
    assert np.allclose(I.entropy_tail_maurey(np.array([1.0, 2.0]), 1.0, 1, 1),
                       [36 * np.log(2 * 6 + 1), 144 * np.log(2 * 10 + 1)])


def test_split_covering_closed_form():
    # τ = 1, p = 1, C_s = 2.5: rank part ⌊2.5⌋ = 2; tail radius √min(ℓ,m) at ε/2
    tau, eps, Cs, l, m, C2, n = 1.0, 0.2, 2.5, 3, 4, 2.0, 7
    expect = 2 * 7 * np.log(1 + 8 * C2 / eps) + I.entropy_tail_maurey(np.sqrt(3), eps / 2, m, n)
    assert np.isclose(I.log_covering_split(tau, eps, Cs, 1.0, l, m, C2, n), expect)
    # exactly at C_s/τ^p = integer the rank part keeps that integer
    assert np.isclose(I.log_covering_split(0.5, eps, 1.0, 1.0, l, m, C2, n) - I.entropy_tail_maurey(
        0.5 * np.sqrt(3), eps / 2, m, n), 2 * 7 * np.log(1 + 8 * C2 / eps))
    # the rank part never exceeds min(ℓ, m)
    assert np.isclose(I.log_covering_split(1e-3, eps, 10.0, 1.0, l, m, C2, n) - I.entropy_tail_maurey(
        1e-3 * np.sqrt(3), eps / 2, m, n), 3 * 7 * np.log(1 + 8 * C2 / eps))


def test_dudley_term_p0_bounds_the_integral():
    for rank, N, C2, K in [(1, 1, 1.0, 1.0), (3, 8, 2.0, 50.0), (2, 4, 0.5, 1e6)]:
        integral, _ = quad(lambda e: np.sqrt(2 * rank * N * np.log1p(4 * C2 * K / e)), 0, 1, limit=200)
        bound = I.dudley_term_p0(rank, N, C2, np.log(K))
        assert integral <= bound <= 1.5 * integral
        assert np.isclose(bound, np.sqrt(2 * rank * N) * (np.sqrt(np.log1p(4 * C2 * K)) + np.sqrt(np.pi) / 2))
    # grows like √log K: finite for K beyond float range
    assert np.isfinite(I.dudley_term_p0(1, 1, 1.0, 2000.0))


@pytest.mark.parametrize("call", [
    lambda: I.entropy_low_rank_volumetric(-1, 2, 2, 1.0, 0.1), lambda: I.entropy_low_rank_volumetric(1.5, 2, 2, 1.0, 0.1),
    lambda: I.entropy_low_rank_volumetric(1, 2, 2, 0.0, 0.1), lambda: I.entropy_tail_maurey(-1.0, 0.1, 2, 2),
    lambda: I.entropy_tail_maurey(1.0, 0.0, 2, 2), lambda: I.entropy_tail_maurey(1.0, 0.1, 2, 0),
    lambda: I.dudley_term_p0(1, 2, 1.0, np.inf), lambda: I.dudley_term_p0(True, 2, 1.0, 0.0),
    lambda: I.log_covering_split(1.0, 0.1, 1.0, 3.0, 2, 2, 1.0, 2),
])
def test_bad_input_covering(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------- split lemmas: random, non-degenerate, optimiser

@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_split_random_and_nondegenerate():
    rng = np.random.default_rng(3)
    full = I.falsify_split(rng, trials=1000)
    nd = I.falsify_split(rng, trials=1000, nondegenerate=True)
    assert all(f.violations == 0 for f in full + nd)
    assert full[0].worst_ratio == 1.0  # rank bound attained (p = 0)
    assert all(f.worst_ratio < 1 for f in nd[1:])  # with τ < σ₁ the tail bounds are not attained
    weak = I.falsify_split(rng, trials=1000, weaken=1.1)
    assert all(f.violations > 0 for f in weak)


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_split_optimiser_power():
    proved = I.adversarial_split(np.random.default_rng(5), trials=60, restarts=2)
    weak = I.adversarial_split(np.random.default_rng(5), trials=60, restarts=2, weaken=1.1)
    assert all(f.violations == 0 for f in proved)
    # τ < σ₁ with k = 12: sup of the tail ratios is √(11/12) ≈ 0.957 > 1/1.1
    assert proved[1].worst_adversarial > 0.95 and all(f.violations > 0 for f in weak)


# ---------------------------------------------------------------- Chapter 3: effective scale and optimisers

def test_matrices_per_layer():
    assert P.matrices_per_layer() == 3 and P.matrices_per_layer(1) == 4 and P.matrices_per_layer(12) == 26
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError):
            P.matrices_per_layer(bad)


def test_effective_scale_closed_form():
    g, a = np.log(3.0), np.log(5.0)
    # J = L·A + 1 = 4·3 + 1 = 13; K = 2·13·‖w‖·γ·α
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 0.5), np.log(2 * 13 * 0.5 * 15))
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 0.5, learned_readout=False), np.log(2 * 12 * 0.5 * 15))
    d = P.log_effective_scale({"QK": g, "V": 0.0}, np.zeros(2), 2, 26, 1.0)
    assert set(d) == {"QK", "V"} and np.allclose(d["V"], np.log(2 * 53))
    assert P.log_effective_scale(-1e6, 0.0, 1, 3, 1.0) == P.LOG_TINY
    # the released K = γαL misses 2·A·‖w‖₂ (for a fixed readout)
    rel = P.log_scale_K(g, a, 4)
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 2.0, learned_readout=False) - rel, np.log(2 * 3 * 2.0))
    # allocation: Σ_j ‖w‖γα·ε/K_j = ε/2 for J pieces of equal weight
    r = P.radius_allocation(1.0, P.log_effective_scale(g, a, 4, 3, 0.5, learned_readout=False))
    assert np.isclose(12 * 0.5 * 15 * np.exp(r), 0.5)


@pytest.mark.parametrize("call", [
    lambda: P.log_effective_scale(0.0, 0.0, 0, 3, 1.0), lambda: P.log_effective_scale(0.0, 0.0, 2, 0, 1.0),
    lambda: P.log_effective_scale(0.0, 0.0, 2, 3, 0.0), lambda: P.log_effective_scale(0.0, 0.0, 2, 3, 1.0, 1),
    lambda: P.log_effective_scale(np.nan, 0.0, 2, 3, 1.0), lambda: P.log_effective_scale(0.0, np.inf, 2, 3, 1.0),
])
def test_bad_input_effective_scale(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_layer_lipschitz_optimiser_has_power():
    kw = dict(tokens=(3,), qs=(1.0,), trials=60, restarts=2, maxiter=1500)
    ok = P.adversarial_layer_lipschitz(np.random.default_rng(0), **kw)
    wrong_c = P.adversarial_layer_lipschitz(np.random.default_rng(0), softmax_const=0.25, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > ok.worst_random
    assert wrong_c.violations > 0 and wrong_c.worst_random < 1  # random draws alone miss the wrong constant
    assert P.adversarial_layer_lipschitz(np.random.default_rng(0), weaken=1.1 / ok.worst_adversarial, **kw).violations


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_parameter_perturbation_optimiser_has_power():
    kw = dict(depths=(1,), trials=40, restarts=1, maxiter=2500)  # seed 2: reaches 0.98 of the bound
    ok = P.adversarial_parameter_perturbation(np.random.default_rng(2), **kw)
    qk = P.adversarial_parameter_perturbation(np.random.default_rng(2), perturb=("QK",), **kw)
    wrong_c = P.adversarial_parameter_perturbation(np.random.default_rng(2), softmax_const=0.25, perturb=("QK",), **kw)
    weak = P.adversarial_parameter_perturbation(np.random.default_rng(2), weaken=1.1, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > 0.9
    assert wrong_c.violations > 0 and weak.violations > 0
    # perturbing W_QK alone, γ^QK = c·C_V·L_φ·C_M with c = 1 is attained: the optimiser reaches ratio 1
    assert qk.violations == 0 and qk.worst_adversarial > 1 - 1e-4 and wrong_c.worst_adversarial > 3.9


# ---------------------------------------------------------------- Chapter 1: norm inequalities, Dudley scaling

@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_norm_inequalities_power():
    from bounds_lib import norms
    ok = norms.falsify_norm_inequalities(np.random.default_rng(0), trials=300, restarts=1)
    weak = norms.falsify_norm_inequalities(np.random.default_rng(0), trials=300, restarts=1, weaken=1.1)
    assert len(ok) == len(norms.NORM_INEQUALITIES) and all(f.violations == 0 for f in ok)
    assert all(f.violations > 0 for f in weak)
    assert min(f.worst_ratio for f in ok) > 0.99  # every inequality attained or nearly attained


def test_norm_inequality_closed_forms():
    from bounds_lib import norms
    # rank-one matrix attains ‖W‖₂ = ‖W‖_F; all-ones attains both √ factors
    r = norms.norm_inequality_ratios(np.outer([1.0, 2.0], [3.0, 4.0, 5.0]))
    assert np.isclose(r["‖W‖₂ ≤ ‖W‖_F"], 1) and np.isclose(r["‖W‖_F ≤ √rank ‖W‖₂"], 1)
    J = norms.norm_inequality_ratios(np.ones((3, 4)))
    assert np.isclose(J["‖W‖_{2,1} ≤ √m ‖W‖_F"], 1) and np.isclose(J["‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}"], 1)
    assert set(norms.norm_inequality_ratios(np.zeros((2, 2))).values()) == {0.0}
    d = norms.norm_inequality_ratios(np.diag([4.0, 1.0]), weaken=2.0)
    assert np.isclose(d["‖W‖₂ ≤ ‖W‖_F"], 2 * 4 / np.sqrt(17)) and np.isclose(d["‖W‖_F ≤ ‖W‖_*"], 2 * np.sqrt(17) / 5)
    assert np.isclose(d["‖W‖_F ≤ √rank ‖W‖₂"], 2 * np.sqrt(17) / (np.sqrt(2) * 4))
    assert np.isclose(d["‖W‖_* ≤ √rank ‖W‖_F"], 2 * 5 / (np.sqrt(2) * np.sqrt(17)))
    assert np.isclose(d["‖W‖_F ≤ ‖W‖_{2,1}"], 2 * np.sqrt(17) / 5) and np.isclose(d["‖W‖_{2,1} ≤ ‖W‖_{1,1}"], 2.0)
    assert np.isclose(d["‖W‖_{2,1} ≤ √m ‖W‖_F"], 2 * 5 / (np.sqrt(2) * np.sqrt(17)))
    assert np.isclose(d["‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}"], 2 / np.sqrt(2)) and np.isclose(d["‖W‖_{2→∞} ≤ ‖W‖₂"], 2.0)
    assert np.isclose(d["S_p ≤ rank·σ₁ᵖ (p=1/2)"], 2 * 3 / 4) and np.isclose(d["σ₁ᵖ ≤ S_p (p=1/2)"], 2 * 2 / 3)


def test_dudley_linear_scaling():
    from bounds_lib import norms
    b = [norms.dudley_bound_linear(n, 4) for n in (1000, 100_000)]
    assert np.isclose(b[0] / b[1], 10, rtol=0.02)  # n^{-1/2}
    assert np.isclose(norms.dudley_bound_linear(100_000, 16) / b[1], 2, rtol=0.02)  # √d
    mc = norms.rademacher_linear_mc(np.random.default_rng(0), 400, 3)
    assert 0.8 / 20 < mc < 1 / 20 + 1e-3  # ≈ 1/√n
    with pytest.raises(ValueError):
        norms.dudley_bound_linear(0, 2)
    with pytest.raises(ValueError):
        norms.dudley_bound_linear(10, 2, etas=[0.0])
    with pytest.raises(ValueError):
        norms.rademacher_linear_mc(np.random.default_rng(0), 10, True)


def test_composition_bound_closed_forms():
    from bounds_lib import model as M
    rng = np.random.default_rng(4)
    net = M.random_transformer(2, 3, rng, spectral_norm=0.7, act="tanh")
    X = rng.standard_normal((5, 4, 3))
    lhs, rhs, d, kappa = P.composition_bound(net, net, X)
    assert lhs == 0 and rhs == 0 and d.shape == kappa.shape == (7,)
    # only the readout changes: the bound is exact (κ = 1 and d = the output change itself)
    net_w = M.SingleHeadTransformer(net.blocks, net.w + np.array([0.1, -0.2, 0.05]), act="tanh")
    lhs, rhs, d, kappa = P.composition_bound(net, net_w, X)
    assert np.isclose(lhs, rhs) and np.all(d[:-1] == 0) and kappa[-1] == 1
    # κ of the last layer's M is ‖w‖₂ (γ_M = 1, α = 1)
    assert np.isclose(kappa[-2], np.linalg.norm(net.w))
    with pytest.raises(ValueError, match="same depth"):
        P.composition_bound(net, M.random_transformer(1, 3, rng), X)


@pytest.mark.slow  # optimiser runs; left out of `make mutation` bound-only runs
def test_composition_power():
    kw = dict(depths=(1,), acts=("identity",), trials=30, restarts=1, maxiter=2000)
    ok = P.falsify_composition(np.random.default_rng(0), **kw)
    weak = P.falsify_composition(np.random.default_rng(0), weaken=1.1, **kw)
    assert ok.violations == 0 and ok.worst_adversarial > 0.95 and weak.violations > 0
