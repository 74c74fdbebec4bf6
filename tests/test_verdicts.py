"""Chapter 9's statistics between their controls, the stored power and the amended verdicts
(bounds_lib.studies.verdicts): every vectorised floor against the library's one-at-a-time statistic,
the shared-resample sweep against the study's own, the verdict rule branch by branch, and the stored
power table re-derived entry by entry."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bounds_lib.studies import controls as C
from bounds_lib.studies import results as R
from bounds_lib.studies import stats as S
from bounds_lib.studies import study as ST
from bounds_lib.studies import verdicts as V

HYPERS = ST.AXES + ("n_train",)


@pytest.fixture(scope="module")
def committed():
    rows, _ = ST.with_axes(R.load_results("robust")["rows"])
    return rows


# ----------------------------------------------------------------------------- measures and the floor


def test_measure_values_names_the_controls_and_the_baselines(committed):
    assert np.array_equal(V.measure_values(committed, "control:128"), C.positive_control(committed, 128))
    mu = ST.measure(committed, "B_ours")
    assert np.array_equal(V.measure_values(committed, "shuffled:B_ours"), C.shuffled_control(mu, 0))
    assert np.array_equal(V.measure_values(committed, "r_star"), C.baseline_measure(committed, "r_star"))
    assert V.label("control:4096").startswith("positive control") and V.label("B_ours") == ST.MEASURES["B_ours"]
    with pytest.raises(TypeError, match="name must be a str"):
        V.measure_values(committed, 3)


def test_permuted_taus_are_the_library_tau_of_each_permutation(committed):
    g = np.array([r["gap_error"] for r in committed])
    mu = ST.measure(committed, "B_ours")
    fast = V.permuted_taus(mu, g, n_perm=5)
    slow = [S.kendall_tau(C.shuffled_control(mu, s), g) for s in range(5)]
    assert np.allclose(fast, slow, atol=1e-12)
    # with ties in the measure (an axis indicator) too
    eta = C.baseline_measure(committed, "axis:label_noise")
    assert np.allclose(V.permuted_taus(eta, g, 3), [S.kendall_tau(C.shuffled_control(eta, s), g) for s in range(3)])
    # a wrong tau (no tie correction) would differ on the indicator
    assert not np.allclose(V.permuted_taus(eta, g, 3), [S.kendall_tau(C.shuffled_control(eta, s), g) * 0.9
                                                         for s in range(3)])


def test_permuted_psis_are_the_granulated_psi_of_each_permutation(committed):
    mu = ST.measure(committed, "B_ours")
    fast = V.permuted_psis(committed, mu, n_perm=3)
    slow = [S.granulated_kendall(committed, _by_row(committed, C.shuffled_control(mu, s)), hypers=HYPERS)["Psi"]
            for s in range(3)]
    assert np.allclose(fast, slow, atol=1e-12)


def _by_row(rows, values):
    lookup = {id(r): v for r, v in zip(rows, values)}
    return lambda r: lookup[id(r)]


def test_permuted_sign_errors_are_the_environment_means(committed):
    mu = ST.measure(committed, "B_ours")
    envs = C.environments(committed)
    fast = V.permuted_sign_errors(envs, mu, n_perm=3)
    slow = [np.mean([e.sign_error for e in C.environments(committed, C.shuffled_control(mu, s))]) for s in range(3)]
    assert np.allclose(fast, slow, atol=1e-12)


def test_permutation_range_is_the_central_quantiles():
    assert V.permutation_range(np.arange(1001.0)) == pytest.approx((25.0, 975.0))
    assert V.permutation_range([1.0, 1.0]) == (1.0, 1.0)


def test_manipulation_check_fails_when_a_measure_beats_the_ceiling_or_the_floor_moves():
    ok = V.manipulation_check("τ", {"control:4096": 0.9, "B_ours": 0.3, "shuffled:B_ours": 0.0}, (-0.1, 0.1))
    assert ok.passed
    beaten = V.manipulation_check("τ", {"control:4096": 0.3, "B_ours": 0.5, "shuffled:B_ours": 0.0}, (-0.1, 0.1))
    assert beaten.best == "B_ours" and not beaten.ceiling_ok and not beaten.passed
    off = V.manipulation_check("τ", {"control:4096": 0.9, "shuffled:B_ours": 0.2}, (-0.1, 0.1))
    assert off.ceiling_ok and not off.floor_ok
    low = V.manipulation_check("se", {"control:4096": 0.0, "B_ours": 0.4, "shuffled:B_ours": 0.5}, (0.4, 0.6),
                               smaller_is_better=True)
    assert low.passed
    with pytest.raises(KeyError):
        V.manipulation_check("τ", {"B_ours": 0.3}, (0, 1))


# ----------------------------------------------------------------------------- shared resamples


@pytest.mark.parametrize("hid", ["H3", "H6", "H7", "H9"])
def test_sweep_with_shared_weights_is_the_study_sweep(committed, hid):
    h = next(h for h in ST.HYPOTHESES if h.id == hid)
    seeds = (0, 3)
    Ws = V.shared_weights(committed, seeds, n_boot=200)
    assert V.sweep(h, committed, Ws, seeds, n_boot=200) == ST.seed_sweep(h, committed, seeds, n_boot=200)
    with pytest.raises(ValueError, match="one weight matrix per seed"):
        V.sweep(h, committed, Ws[:1], seeds)


def test_sign_error_sweep_is_one_half_minus_the_mean(committed):
    kept = C.seed_spread_filter(committed, "B_ours").kept
    sw = V.sign_error_sweep(kept, seeds=(0, 1), n_boot=300)
    iv = C.sign_errors_by_axis(kept, 300, 1)["all"]
    assert sw.intervals[1] == S.Interval(0.5 - iv.value, 0.5 - iv.hi, 0.5 - iv.lo, 300)
    assert sw.claimed == "+"


def test_sign_error_report_filters_the_positive_control_to_no_error(committed):
    rep = V.sign_error_report(committed, V.measure_values(committed, "control:4096"), n_boot=200)
    assert rep.worst == 1.0 and rep.worst_filtered == 0.0
    assert rep.filtered["all"].value == 0.0 and len(rep.kept) < len(rep.envs)


# ----------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("signs, ends, d80, exact, expected", [
    ("+++", [0.3] * 3, None, None, "supported"),
    ("+++", [0.3] * 3, None, [(0.01, "+"), (0.02, "+")], "supported"),
    ("+++", [0.3] * 3, None, [(0.18, "+"), (0.05, "+")], "borderline"),
    ("+++", [0.3] * 3, None, [(0.01, "-")], "borderline"),
    ("++0", [0.3] * 3, 0.05, None, "borderline"),
    ("---", [-0.1] * 3, 0.05, None, "refuted (reversed)"),
    ("000", [0.05, 0.08, 0.09], 0.5, None, "refuted (no effect of interest)"),
    ("000", [0.3] * 3, 0.10, None, "refuted (no effect shown)"),
    ("000", [0.3] * 3, 0.25, None, "not testable at this power"),
    ("000", [0.3] * 3, math.nan, None, "not testable at this power"),
    ("000", [0.3] * 3, None, None, "power not simulated"),
])
def test_amended_verdict_branch_by_branch(signs, ends, d80, exact, expected):
    assert V.amended_verdict(signs, ends, "+", 0.1, d80, exact) == expected


def test_amended_verdict_reads_a_negative_claim_on_its_own_side():
    assert V.amended_verdict("000", [-0.05] * 3, "-", 0.1, 0.3) == "refuted (no effect of interest)"
    assert V.amended_verdict("000", [-0.3] * 3, "-", 0.1, 0.3) == "not testable at this power"


def test_amended_line_of_a_tied_statistic_is_borderline():
    ivs = tuple(S.Interval(0.002, 0.0004, 0.004, 1000) for _ in range(10))
    c = V.Claim("X", "text", ST.SweepResult(ivs, "+"), "pstar_rank", None,
                (("sign", 0.18, "+"), ("Wilcoxon", 0.055, "+")), "supported")
    line = V.amended_line(c)
    assert line[2] == "+0.0020 [+0.0004, +0.0040]" and line[3] == "10 of 10"
    assert line[-2:] == ("supported", "borderline") and "p = 0.180" in line[4]


def test_a_tiny_exact_p_value_prints_as_a_bound_not_as_zero():
    ivs = tuple(S.Interval(0.3, 0.2, 0.4, 1000) for _ in range(10))
    c = V.Claim("X", "text", ST.SweepResult(ivs, "+"), "sign_error", None,
                (("sign", 3e-9, "+"), ("Wilcoxon", 0.0012, "+")))
    line = V.amended_line(c)
    assert line[4] == "sign p < 0.001; Wilcoxon p = 0.001" and "0.000" not in line[4]
    for bad in (-0.01, 1.2, float("nan")):
        with pytest.raises(ValueError, match="in \\[0, 1\\]"):
            V.p_text(bad)


# ----------------------------------------------------------------------------- power


def test_power_curve_entries_are_reproducible_one_at_a_time():
    curve = V.power_curve(30, deltas=(0.0, 0.4), paired=False, seed=5, n_sim=6, n_boot=50)
    alone = C.detectable_delta_tau(30, deltas=(0.4,), paired=False, seed=6, n_sim=6, n_boot=50)
    assert curve.power[1] == alone.power[0] and curve.deltas == (0.0, 0.4)


def test_power_nuisance_is_set_from_the_data(committed):
    nu = V.power_nuisance(committed, "B_ours", "B_edelman")
    g = np.array([r["gap_error"] for r in committed])
    mu, ed = ST.measure(committed, "B_ours"), ST.measure(committed, "B_edelman")
    assert nu["tau_base"] == S.kendall_tau(ed, g)
    assert nu["noise_corr"] == pytest.approx(math.sin(math.pi * S.kendall_tau(mu, ed) / 2))
    assert 0 < nu["icc"] < 1 and nu["n_models"] == len(committed)
    sub = V.power_nuisance(committed, "B_ours", None, 0.05)
    assert sub["n_models"] == sum(r["config"]["label_noise"] == 0.05 for r in committed) and sub["tau_base"] == 0


def test_the_stored_power_table_is_what_committed_power_gives(committed):
    power = V.load_power()
    assert set(power["tests"]) == {t[0] for t in V.POWER_TESTS} and tuple(power["deltas"]) == V.POWER_DELTAS
    for p in power["tests"].values():
        # the false-positive rate of every test is at most 5 %, and d80 is read off the curve
        assert p["power"][0] <= 0.05
        ok = [d for d, x in zip(power["deltas"], p["power"]) if x >= 0.8]
        assert p["d80"] == (min(ok) if ok else None)
    # one entry of the smallest design, recomputed alone
    t = power["tests"]["A2"]
    nu = V.power_nuisance(committed, "B_ours", None, 0.05)
    assert {k: t[k] for k in nu} == nu
    sub = [r for r in committed if r["config"]["label_noise"] == 0.05]
    k = power["deltas"].index(0.3)
    again = C.detectable_delta_tau(sub, deltas=(0.3,), paired=False, seed=power["seed"] + k, n_sim=power["n_sim"],
                                   n_boot=power["n_boot"], icc=max(nu["icc"], 0.0))
    assert again.power[0] == t["power"][k]


def test_sign_error_cdf_figure_has_a_panel_per_measure():
    fig = V.plot_sign_error_cdf({"a": [0, 0.5, 1], "b": [0, 0], "c": [1.0]}, [0.5, 0.5], [0.0])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 and [ax.get_title() for ax in visible] == ["a", "b", "c"]


def test_the_stored_psi_power_of_h6_recomputes_and_reads_off_its_curve():
    """H6's power (Ψ > 0), stored beside the τ tests' in both power tables: the false-positive rate at
    most 5 %, d80 read off the curve, and one entry of the replication's recomputed alone."""
    from bounds_lib.studies import replication_report as RR
    from bounds_lib.studies.replication import teacher_clusters

    committed, rep = V.load_power(), RR.load_replication_power()
    for table in (committed, rep):
        p = table["psi"]
        assert p["power"][0] <= 0.05 and len(p["power"]) == len(table["deltas"])
        ok = [d for d, x in zip(table["deltas"], p["power"]) if x >= 0.8]
        assert p["d80"] == (min(ok) if ok else None)
        assert p["icc"] == committed["tests"]["tau"]["icc"]
    rows, _ = ST.with_axes(R.load_results("replication")["rows"])
    k = rep["deltas"].index(0.2)
    again = C.detectable_psi(rows, RR.HYPERS, RR.FIXED, deltas=(0.2,), seed=rep["seed"] + k, n_sim=rep["n_sim"],
                             n_boot=rep["n_boot"], icc=rep["psi"]["icc"], top=teacher_clusters(rows))
    assert again.power[0] == rep["psi"]["power"][k]
