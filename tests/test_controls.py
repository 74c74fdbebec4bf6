"""Chapter 9's controls, confound analysis, power simulation and exact tests (bounds_lib.studies.controls):
closed forms and properties on synthetic rows with known answers, each beside a weakened version or a
wrong input that the same check rejects, and a few facts of the committed study rows."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kendalltau, wilcoxon

from bounds_lib.studies import controls as C
from bounds_lib.studies import results as R
from bounds_lib.studies import study as ST


@pytest.fixture(scope="module")
def committed():
    rows, _ = ST.with_axes(R.load_results("robust")["rows"])
    return rows


def synthetic_rows(n=60, seed=0):
    """Models with spread-out exact population errors R and small training errors."""
    rng = np.random.default_rng(seed)
    R_ = np.linspace(0.05, 0.45, n)
    Rh = rng.uniform(0.0, 0.03, n)
    return [{"config": {"L": 1, "N": i, "seed": 0}, "test_error": float(r), "train_error": float(h),
             "gap_error": float(r - h)} for i, (r, h) in enumerate(zip(R_, Rh))]


def tau(x, y):
    return kendalltau(x, y).statistic


# ----------------------------------------------------------------------------- the positive control


def test_positive_control_tracks_the_gap_as_m_grows_and_not_at_tiny_m():
    rows = synthetic_rows()
    g = [r["gap_error"] for r in rows]
    assert tau(C.positive_control(rows, 10 ** 9), g) > 0.99
    assert tau(C.positive_control(rows, 4096), g) > 0.9
    # the same check fails for a weakened control: two held-out samples rank the gap poorly
    assert tau(C.positive_control(rows, 2), g) < 0.9


def test_positive_control_is_unbiased_with_the_binomial_variance():
    rows = synthetic_rows(n=5)
    m, seeds = 100, 2000
    draws = np.array([C.positive_control(rows, m, seed=s) for s in range(seeds)])
    gap = np.array([r["gap_error"] for r in rows])
    sd = np.sqrt([r["test_error"] * (1 - r["test_error"]) / m for r in rows])
    assert np.all(np.abs(draws.mean(axis=0) - gap) < 4 * sd / math.sqrt(seeds))
    assert np.allclose(draws.std(axis=0), sd, rtol=0.1)
    # a control that forgot the training error would be biased by R̂: the same check rejects it
    biased = draws + np.array([r["train_error"] for r in rows])
    assert not np.all(np.abs(biased.mean(axis=0) - gap) < 4 * sd / math.sqrt(seeds))


def test_positive_control_draws_are_fixed_per_model():
    rows = synthetic_rows(n=10)
    v = C.positive_control(rows, 128, seed=3)
    assert np.array_equal(v, C.positive_control(rows, 128, seed=3))
    assert np.array_equal(v[::-1], C.positive_control(rows[::-1], 128, seed=3))   # order does not matter
    assert v[4] == C.positive_control(rows[4:5], 128, seed=3)[0]                  # nor the other rows
    assert not np.array_equal(v, C.positive_control(rows, 128, seed=4))


@pytest.mark.parametrize("bad, exc", [
    (dict(m=0), ValueError), (dict(m=1.5), TypeError), (dict(m=10, seed=-1), ValueError),
    (dict(m=10, population="nope"), KeyError), (dict(m=10, rows=[]), ValueError),
    (dict(m=10, rows=[{"config": {}, "test_error": 1.5, "train_error": 0.0}]), ValueError),
])
def test_positive_control_refuses_bad_input(bad, exc):
    kw = {"rows": synthetic_rows(n=3), **bad}
    with pytest.raises(exc):
        C.positive_control(**kw)


def test_positive_control_is_the_ceiling_on_the_committed_rows(committed):
    g = [r["gap_error"] for r in committed]
    ceiling = tau(C.positive_control(committed, 4096), g)
    assert ceiling > 0.9
    assert all(ceiling > tau(ST.measure(committed, k), g) for k in ST.MEASURES if k != "neg_log_n")


# ----------------------------------------------------------------------------- the negative control


def test_shuffled_control_is_at_chance_on_average():
    rows = synthetic_rows()
    g = np.array([r["gap_error"] for r in rows])
    taus = [tau(C.shuffled_control(g, s), g) for s in range(200)]
    # null sd of τ for n = 60 is √(2(2n+5)/(9n(n−1))) ≈ 0.088: the mean of 200 has sd ≈ 0.006
    assert abs(np.mean(taus)) < 0.03
    assert np.std(taus) == pytest.approx(math.sqrt(2 * (2 * 60 + 5) / (9 * 60 * 59)), rel=0.2)
    # the same check fails for a "shuffle" that keeps the order
    assert abs(np.mean([tau(g, g) for _ in range(3)])) > 0.03


def test_shuffled_control_is_a_seeded_permutation():
    v = np.arange(20.0)
    a = C.shuffled_control(v, 1)
    assert sorted(a) == sorted(v) and np.array_equal(a, C.shuffled_control(v, 1))
    assert not np.array_equal(a, C.shuffled_control(v, 2))
    with pytest.raises(ValueError):
        C.shuffled_control([1.0, np.nan], 0)
    with pytest.raises(ValueError):
        C.shuffled_control(np.ones((2, 2)), 0)


# ----------------------------------------------------------------------------- the variance decomposition


def factorial(effects, noise=0.01, drop=()):
    """A 2^3 factorial, two seeds, gap = Σ β_h x_h (±1 codes) ± noise (seed 0 up, seed 1 down)."""
    rows = []
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                for s in (0, 1):
                    x = np.array([a, b, c]) * 2 - 1
                    rows.append({"config": {"A": a, "B": b, "C": c, "seed": s},
                                 "gap_error": float(x @ effects + (noise if s == 0 else -noise))})
    return [r for i, r in enumerate(rows) if i not in drop]


def test_variance_shares_recover_planted_main_effects_and_sum_to_one():
    beta = np.array([0.3, 0.1, 0.0])
    v = C.gap_variance_by_axis(factorial(beta), axes=("A", "B", "C"))
    total = 16 * (beta @ beta) + 16 * 0.01 ** 2   # SS_h = N β_h², residual = N e²
    for h, b in zip("ABC", beta):
        assert v.shares[h] == pytest.approx(16 * b ** 2 / total, abs=1e-12)
    assert v.residual == pytest.approx(16 * 0.01 ** 2 / total, abs=1e-12)
    assert sum(v.shares.values()) + v.residual == pytest.approx(1.0, abs=1e-12)
    # balanced: the one-way shares are the same numbers
    assert all(v.marginal[h] == pytest.approx(v.shares[h], abs=1e-12) for h in "ABC")
    # the check fails for a wrong planting (the effects of A and B swapped)
    assert v.shares["A"] != pytest.approx(16 * 0.1 ** 2 / total, abs=1e-3)


def test_variance_shares_still_sum_to_one_when_unbalanced_where_one_way_shares_do_not():
    rows = factorial(np.array([0.3, 0.2, 0.1]), noise=0.05, drop=(0, 1, 2, 5, 9))
    v = C.gap_variance_by_axis(rows, axes=("A", "B", "C"))
    assert sum(v.shares.values()) + v.residual == pytest.approx(1.0, abs=1e-12)
    assert abs(sum(v.marginal.values()) + v.residual - 1.0) > 1e-3


def test_variance_shares_take_a_four_level_axis_and_refuse_a_constant_gap():
    rows = [{"config": {"n": n, "seed": s}, "gap_error": 1.0 / n + 0.001 * s} for n in (64, 128, 256, 512)
            for s in (0, 1)]
    v = C.gap_variance_by_axis(rows, axes=("n",))
    assert v.shares["n"] > 0.99 and v.shares["n"] + v.residual == pytest.approx(1.0)
    with pytest.raises(ValueError, match="vary"):
        C.gap_variance_by_axis([{**r, "gap_error": 0.1} for r in rows], axes=("n",))


def test_label_noise_dominates_the_committed_gap(committed):
    v = C.gap_variance_by_axis(committed)
    assert max(v.shares, key=v.shares.get) == "label_noise" and v.shares["label_noise"] > 0.5
    assert v.marginal["label_noise"] == pytest.approx(0.741, abs=0.001)


# ----------------------------------------------------------------------------- within a level


def test_within_level_tau_sees_opposite_rankings_in_two_levels():
    rows = [{"config": {"eta": e, "N": i, "seed": 0}, "gap_error": float(i + 100 * e)}
            for e in (0, 1) for i in range(8)]
    m = [i if e == 0 else -i for e in (0, 1) for i in range(8)]
    out = C.within_level_tau(rows, m, "eta", n_boot=100, hypers=("eta", "N"))
    assert out[0].tau.value == 1.0 and out[1].tau.value == -1.0 and out[0].n_models == 8
    assert out[0].tau.sign == "+" and out[1].tau.sign == "-"
    # pooled over both levels, the level's offset hides the perfect ranking inside level 0
    assert -1 < tau(m, [r["gap_error"] for r in rows]) < 0
    with pytest.raises(ValueError):
        C.within_level_tau(rows, m[:-1], "eta")


def test_within_level_tau_on_the_committed_rows_is_the_plain_tau_of_the_subset(committed):
    out = C.within_level_tau(committed, "B_ours", "label_noise", n_boot=50)
    sub = [r for r in committed if r["config"]["label_noise"] == 0]
    assert out[0.0].n_models == len(sub)
    assert out[0.0].tau.value == pytest.approx(tau(ST.measure(sub, "B_ours"), [r["gap_error"] for r in sub]))


# ----------------------------------------------------------------------------- environments and the filter


def test_environments_agree_with_the_pre_registered_sign_errors(committed):
    m = ST.measure(committed, "B_ours")
    ours = [(e.axis, e.sign_error) for e in C.environments(committed, m)]
    assert ours == ST.sign_errors(committed, m)


def spread_rows():
    """Axis L at two levels for six N; each configuration's two seeds differ by 0.02; along L the gap
    moves by 0.005 (within the spread) for N < 3 and by 0.1 (outside) for N ≥ 3."""
    rows = []
    for N in range(6):
        step = 0.005 if N < 3 else 0.1
        for L in (1, 2):
            base = 0.1 * N + (step if L == 2 else 0.0)
            rows += [{"config": {"L": L, "N": N, "seed": s}, "gap_error": base + 0.02 * s} for s in (0, 1)]
    return rows


@pytest.mark.parametrize("by", ["pair", "environment"])
def test_the_filter_drops_exactly_the_planted_within_spread_pairs(by):
    rows = spread_rows()
    f = C.seed_spread_filter(rows, m=[r["gap_error"] for r in rows], by=by, axes=("L", "N"))
    assert f.threshold == pytest.approx(0.02)
    assert [e.axis for e in f.dropped] == ["L"] * 3
    assert sorted(rows[e.pairs[0][0]]["config"]["N"] for e in f.dropped) == [0, 1, 2]
    assert sorted(rows[e.pairs[0][0]]["config"]["N"] for e in f.kept if e.axis == "L") == [3, 4, 5]
    assert all(len(e.pairs) == 2 for e in f.kept) and f.pairs_dropped == 6
    # a weakened filter (threshold 0) keeps the planted noise pairs
    assert len(C.seed_spread_filter(rows, threshold=0.0, by=by, axes=("L", "N")).dropped) == 0


def test_sign_error_intervals_and_distribution(committed):
    pc = C.positive_control(committed, 4096)
    f = C.seed_spread_filter(committed, pc)
    assert f.threshold == pytest.approx(0.0144, abs=1e-4) and len(f.kept) == 117
    assert max(e.sign_error for e in f.kept) == 0.0          # the ceiling, once the noise pairs are gone
    mu = C.sign_errors_by_axis(f.kept)
    assert mu["all"].value == 0.0 and set(mu) == set(ST.AXES) | {"n_train", "all"}
    ours = C.sign_errors_by_axis(C.seed_spread_filter(committed, "B_ours").kept, n_boot=200)["all"]
    assert ours.lo <= ours.value <= ours.hi and ours.value > 0.2
    err, cdf, dgap = C.sign_error_distribution(f.kept)["all"]
    assert np.all(np.diff(err) >= 0) and cdf[-1] == 1.0 and err.size == dgap.size == 117
    assert all(abs(d) > f.threshold for e in f.kept for d in e.dgaps)
    with pytest.raises(ValueError):
        C.sign_errors_by_axis(C.environments(committed))     # no measure: no sign errors


# ----------------------------------------------------------------------------- power


def test_the_copula_plants_the_kendall_tau():
    labels = list(range(3000))
    rng = np.random.default_rng(0)
    g, a, b = C._simulate(labels, math.sin(math.pi * 0.5 / 2), math.sin(math.pi * 0.2 / 2), 0.5, 0.0, rng)
    assert tau(a, g) == pytest.approx(0.5, abs=0.03) and tau(b, g) == pytest.approx(0.2, abs=0.03)


def test_power_simulation_detects_a_large_delta_and_not_a_zero_one():
    p = C.detectable_delta_tau(60, deltas=(0.0, 0.6), tau_base=0.2, n_sim=25, n_boot=150, seed=1)
    assert p.power[1] >= 0.8 and p.power[0] <= 0.2
    assert p.detectable == 0.6
    # the same check fails on a grid too small for a modest effect: no Δτ on the list reaches 80 %
    small = C.detectable_delta_tau(8, deltas=(0.0, 0.2), tau_base=0.2, n_sim=15, n_boot=100, seed=1)
    assert math.isnan(small.detectable)
    single = C.detectable_delta_tau(40, deltas=(0.0, 0.7), paired=False, n_sim=20, n_boot=150)
    assert single.power[1] >= 0.8 and single.power[0] <= 0.2


@pytest.mark.parametrize("kw", [dict(deltas=(0.8,)), dict(power=1.0), dict(noise_corr=1.0), dict(n_sim=0),
                                dict(design=2), dict(icc=1.0)])
def test_power_simulation_refuses_bad_input(kw):
    args = {"design": 20, "n_sim": 1, "n_boot": 5, **kw}
    with pytest.raises((ValueError, TypeError)):
        C.detectable_delta_tau(**args)


def _psi_design(seeds=3):
    return [{"config": {"L": L, "N": N, "n_train": n, "seed": s}, "gap_error": 0.0}
            for L in (1, 2) for N in (16, 32) for n in (64, 128) for s in range(seeds)]


def test_psi_power_detects_a_large_planted_tau_and_not_a_zero_one():
    rows = _psi_design()
    p = C.detectable_psi(rows, ("L", "N", "n_train"), deltas=(0.0, 0.7), icc=0.3, n_sim=20, n_boot=100, seed=2)
    assert p.power[1] >= 0.8 and p.power[0] <= 0.2 and p.detectable == 0.7
    # with no planted effect the same grid detects nothing at 0.7's rate: the check can fail
    assert p.power[0] < p.power[1] - 0.5


def test_psi_power_plants_the_tau_in_every_group():
    """The simulated Ψ has expectation Δ: the mean over many grids of the point Ψ is near the planted τ."""
    import bounds_lib.studies.stats as S

    rows, rng = _psi_design(seeds=4), np.random.default_rng(0)
    labels = ST.clusters(rows)
    vals = []
    for _ in range(60):
        g, a, _ = C._simulate(labels, math.sin(math.pi * 0.4 / 2), 0.0, 0.0, 0.5, rng)
        sim = [{**r, "gap_error": float(x), "m": float(y)} for r, x, y in zip(rows, g, a)]
        vals.append(S.granulated_kendall(sim, lambda r: r["m"], hypers=("L", "N", "n_train"))["Psi"])
    assert np.mean(vals) == pytest.approx(0.4, abs=0.05)


@pytest.mark.parametrize("kw", [dict(deltas=(1.0,)), dict(power=0.0), dict(n_sim=0), dict(icc=1.0)])
def test_psi_power_refuses_bad_input(kw):
    with pytest.raises((ValueError, TypeError)):
        C.detectable_psi(_psi_design(), ("L", "N"), **{"n_sim": 1, "n_boot": 5, **kw})


# ----------------------------------------------------------------------------- exact tests


def test_sign_test_matches_the_hand_computed_binomial():
    assert C.sign_test(7, 2) == pytest.approx(2 * (36 + 9 + 1) / 512, abs=1e-15)
    assert round(C.sign_test(7, 2), 4) == 0.1797
    assert C.sign_test(9, 0) == pytest.approx(2 / 512) and C.sign_test(0, 0) == 1.0
    # a one-sided p-value (half of it) would not pass the same check
    assert (36 + 9 + 1) / 512 != pytest.approx(C.sign_test(7, 2))
    with pytest.raises(TypeError):
        C.sign_test(7.0, 2)


def test_exact_wilcoxon_matches_scipy_without_ties_and_the_hand_count_with_them():
    d = np.random.default_rng(3).normal(0.3, 1.0, 10)
    assert C.exact_paired_tests(d)["wilcoxon_p"] == pytest.approx(wilcoxon(d, method="exact").pvalue)
    # |d| all tied: ranks 2, 2, 2; T+ = 6 of the null {0, 2, 4, 6} with weights 1, 3, 3, 1 → p = 2/8
    assert C.exact_paired_tests([1.0, 1.0, 1.0])["wilcoxon_p"] == pytest.approx(0.25)
    assert C.exact_paired_tests([1.0, -1.0, 1.0])["wilcoxon_p"] == pytest.approx(1.0)
    t = C.exact_paired_tests(np.r_[np.zeros(5), np.arange(1.0, 21.0)])     # 20 non-zero: SciPy's method
    assert t["wilcoxon_method"] == "scipy" and t["n_zero"] == 5 and t["sign_p"] < 1e-5


def test_the_committed_rank_differences_are_seven_against_two(committed):
    t = C.exact_paired_tests(ST.pstar_rank_differences(committed))
    assert (t["n_plus"], t["n_minus"], t["n_zero"]) == (7, 2, 42)
    assert round(t["sign_p"], 4) == 0.1797 and t["wilcoxon_method"] == "exact"
    assert 0.05 < t["wilcoxon_p"] < 0.06
    # neither exact test rejects at 5 %, while the percentile bootstrap's interval of seed 0 excludes 0
    iv = ST.statistic(ST.HYPOTHESES[-1], committed, seed=0, n_boot=1000)
    assert iv.lo > 0 and min(t["sign_p"], t["wilcoxon_p"]) > 0.05
