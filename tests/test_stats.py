"""Rank statistics (Kendall's tau, the granulated psi, scaling slopes), their bootstrap intervals, the ICC and
the sign check (bounds_lib.studies.stats, Chapters 7-8)."""
import math
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import kendalltau

from bounds_lib.studies import kendall as K, results as R, stats as S


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=12),
       st.lists(st.integers(0, 3), min_size=12, max_size=12))
def test_weighted_tau_is_scipy_tau_b_of_the_repeated_sample(pairs, counts):
    x = np.array([p[0] for p in pairs], float)
    y = np.array([p[1] for p in pairs], float)
    w = np.array(counts[:len(pairs)], float)
    rx, ry = np.repeat(x, w.astype(int)), np.repeat(y, w.astype(int))
    got = S.weighted_kendall(x, y, w)[0]
    if rx.size < 2 or np.ptp(rx) == 0 or np.ptp(ry) == 0:
        assert math.isnan(got)
    else:
        assert math.isclose(got, kendalltau(rx, ry).statistic, abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_grouped_tau_is_one_weighted_tau_per_group_bit_for_bit(sizes, seed):
    # small groups go through the pair list, groups over PAIRS_UP_TO through the matrix product
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    x, y = rng.integers(0, 4, n).astype(float), rng.integers(0, 3, n).astype(float)
    W = rng.integers(0, 4, (7, n)).astype(float)
    groups = np.split(rng.permutation(n), np.cumsum(sizes)[:-1])
    got = K.grouped_kendall(x, y, W, groups, constant_x=0.0)
    want = np.array([K.weighted_kendall(x[g], y[g], W[:, g], constant_x=0.0) for g in groups])
    assert got.shape == (len(groups), 7) and np.array_equal(got, want, equal_nan=True)


def test_bootstrap_weights_are_the_draws_of_one_multinomial_per_resample_and_cluster():
    # the vectorised draw consumes the generator exactly as a loop over resamples did
    clusters = ["a", "a", "a", "b", "c", "c"]
    rng = np.random.default_rng(5)
    top = rng.multinomial(3, np.full(3, 1 / 3), size=40)
    want = np.zeros((40, 6))
    for j, m in enumerate((np.arange(3), np.arange(3, 4), np.arange(4, 6))):
        for b in range(40):
            if m.size == 1:
                want[b, m[0]] = top[b, j]
            elif top[b, j]:
                want[b, m] = rng.multinomial(int(top[b, j]) * m.size, np.full(m.size, 1.0 / m.size))
    assert np.array_equal(S.bootstrap_weights(clusters, n_boot=40, seed=5), want)


def test_bootstrap_weights_resample_clusters_then_members():
    clusters = ["a", "a", "a", "b", "b", "c"]
    W = S.bootstrap_weights(clusters, n_boot=500, seed=3)
    assert W.shape == (500, 6) and np.all(W >= 0) and np.all(W == np.round(W))
    # cluster "a" drawn c times contributes 3c draws among its three rows
    counts_a = W[:, :3].sum(axis=1)
    assert np.all(counts_a % 3 == 0) and np.all(W[:, 3:5].sum(axis=1) % 2 == 0)
    assert np.allclose(W.mean(axis=0), 1.0, atol=0.15)  # every row is drawn once on average
    assert np.array_equal(W, S.bootstrap_weights(clusters, n_boot=500, seed=3))  # fixed seed: same draws


def _rows():
    rng = np.random.default_rng(0)
    rows = []
    for L in (1, 2, 4):
        for N in (8, 16):
            for n in (10, 40):
                for seed in (0, 1):
                    gap = L * N / n + 0.3 * rng.standard_normal()
                    rows.append({"config": {"L": L, "N": N, "n_train": n, "seed": seed}, "gap_error": gap,
                                 "m": np.log(L * N) + 0.1 * rng.standard_normal()})
    return rows


def test_granulated_intervals_point_values_equal_granulated_kendall():
    rows = _rows()
    m = np.array([r["m"] for r in rows])
    W = S.bootstrap_weights([(r["config"]["L"], r["config"]["N"], r["config"]["n_train"]) for r in rows], 300)
    got = S.granulated_intervals(rows, m, W, ("L", "N", "n_train"), fixed=("seed",))
    ref = S.granulated_kendall(rows, lambda r: r["m"], fixed=("seed",))
    for k in ("overall", "L", "N", "n_train", "Psi"):
        assert math.isclose(got[k].value, ref[k], abs_tol=1e-12), k
        assert got[k].lo <= got[k].value <= got[k].hi or k == "n_train"


def test_interval_covers_a_known_tau_and_check_sign_has_power():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(200)
    y = x + 0.5 * rng.standard_normal(200)
    iv = S.kendall_interval(x, y, S.bootstrap_weights(range(200), 1000))
    assert iv.lo > 0.3 and iv.sign == "+"
    S.check_sign(iv, "+")
    with pytest.raises(AssertionError, match="claims sign '-'"):
        S.check_sign(iv, "-", "tau")
    with pytest.raises(AssertionError, match="claims sign '0'"):
        S.check_sign(iv, "0")
    noise = S.kendall_interval(x, rng.standard_normal(200), S.bootstrap_weights(range(200), 1000))
    S.check_sign(noise, "0")
    with pytest.raises(ValueError):
        S.check_sign(iv, "positive")


def test_icc_closed_form():
    # groups with no within-group spread: the group explains everything
    assert math.isclose(S.intraclass_correlation([1, 1, 2, 2, 3, 3], "aabbcc"), 1.0)
    # identical group means: the group explains nothing (ICC = (0 - MSW)/(0 + MSW) = -1/(k-1)·... < 0)
    assert S.intraclass_correlation([0, 2, 0, 2, 0, 2], "aabbcc") < 0
    with pytest.raises(ValueError, match="at least two"):
        S.intraclass_correlation([1, 2, 3], "abc")
    iv = S.icc_interval([1, 1.1, 2, 2.1, 3, 3.1, 4, 4.1], "aabbccdd", n_boot=200)
    assert iv.value > 0.9 and iv.lo > 0.5


# ----------------------------------------------------------------------------- point estimates

def _grid_rows(gap):
    rows = []
    for L in (1, 2):
        for N in (4, 8, 16):
            for n in (10, 20):
                rows.append({"config": {"L": L, "N": N, "n_train": n}, "gap_error": gap(L, N, n),
                             "proxies": {"B_ours_sum": math.log10(L * N / n)}})
    return rows


def test_granulated_kendall_closed_form():
    keys = ("overall", "L", "N", "n_train", "Psi")
    perfect = S.granulated_kendall(_grid_rows(lambda L, N, n: L * N / n), lambda r: R.proxy_value(r, "B_ours_sum"))
    assert all(math.isclose(perfect[k], 1.0) for k in keys)
    assert (perfect["groups_L"], perfect["groups_N"], perfect["groups_n_train"]) == (6, 4, 6)
    reverse = S.granulated_kendall(_grid_rows(lambda L, N, n: -L * N / n), lambda r: R.proxy_value(r, "B_ours_sum"))
    assert all(math.isclose(reverse[k], -1.0) for k in keys)
    # a measure blind to n (the parameter count) ranks nothing within a group that varies n: τ = 0
    blind = S.granulated_kendall(_grid_rows(lambda L, N, n: L * N / n),
                                 lambda r: math.log10(r["config"]["L"] * r["config"]["N"]))
    assert blind["n_train"] == 0.0 and blind["groups_n_train"] == 6 and math.isclose(blind["L"], 1.0)
    # a gap that depends on n only: within-depth and within-width groups the gap is constant (τ undefined)
    only_n = S.granulated_kendall(_grid_rows(lambda L, N, n: 1.0 / n), lambda r: R.proxy_value(r, "B_ours_sum"))
    assert math.isnan(only_n["L"]) and math.isnan(only_n["N"]) and math.isclose(only_n["n_train"], 1.0)
    assert math.isclose(only_n["Psi"], 1.0)


def test_scaling_slopes_closed_form():
    rows = _grid_rows(lambda L, N, n: 0.0)
    assert math.isclose(S.scaling_slopes(rows, "B_ours_sum", "N"), 1.0)
    assert math.isclose(S.scaling_slopes(rows, "B_ours_sum", "L"), 1.0)
    assert math.isclose(S.scaling_slopes(rows, "B_ours_sum", "n_train"), -1.0)


def test_granulated_kendall_fixed_keys_split_groups():
    # two seeds: within each seed the measure ranks the gap perfectly, but seed 1 shifts every gap up,
    # so pooling the seeds in one group would mix concordant and discordant pairs
    rows = []
    for seed in (0, 1):
        for r in _grid_rows(lambda L, N, n: L * N / n):
            r = {**r, "config": {**r["config"], "seed": seed}, "gap_error": r["gap_error"] + 10 * seed}
            r["proxies"] = {"B_ours_sum": r["proxies"]["B_ours_sum"] - seed}
            rows.append(r)
    def m(r):
        return R.proxy_value(r, "B_ours_sum")

    split = S.granulated_kendall(rows, m, fixed=("seed",))
    assert all(math.isclose(split[k], 1.0) for k in ("L", "N", "n_train", "Psi"))
    assert (split["groups_L"], split["groups_N"], split["groups_n_train"]) == (12, 8, 12)
    pooled = S.granulated_kendall(rows, m)
    assert pooled["L"] < 1.0 and pooled["groups_L"] == 6


def test_kendall_tau_is_scipys_and_refuses_bad_input():
    x, y = [3.0, 1.0, 2.0, 5.0, 4.0], [2.0, 1.0, 2.0, 4.0, 5.0]
    assert S.kendall_tau(x, y) == kendalltau(x, y).statistic
    assert math.isnan(S.kendall_tau([1.0], [2.0])) and math.isnan(S.kendall_tau([1, 2], [3, 3]))
    with pytest.raises(ValueError, match="same shape"):
        S.kendall_tau([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="contains NaN"):
        S.kendall_tau([1, 2, np.nan], [1, 2, 3])
    with pytest.raises(TypeError, match="must be numeric"):
        S.kendall_tau([True, False], [1, 2])


def test_bootstrap_parameters_wrong_type_or_value():
    with pytest.raises(TypeError, match="n_boot .* must be an integer, got float"):
        S.bootstrap_weights("ab", n_boot=10.0)
    with pytest.raises(ValueError, match="n_boot .* == 0"):
        S.bootstrap_weights("ab", n_boot=0)
    with pytest.raises(TypeError, match="seed must be an integer, got bool"):
        S.bootstrap_weights("ab", seed=True)
    with pytest.raises(ValueError, match="at least one row"):
        S.bootstrap_weights([])
    W = S.bootstrap_weights("aabb", n_boot=20)
    with pytest.raises(ValueError, match="level .* must be < 1"):
        S.kendall_interval([1, 2, 3, 4], [1, 2, 4, 3], W, level=1.0)
    with pytest.raises(ValueError, match="same rows"):
        S.kendall_interval([1, 2, 3], [1, 2, 4], W)
    with pytest.raises(TypeError, match="needs an Interval"):
        S.check_sign(0.5, "+")
    with pytest.raises(TypeError, match="n_boot"):
        S.icc_interval([1, 1.1, 2, 2.1], "aabb", n_boot=2.5)


def test_numbers_print_the_true_minus_sign_and_never_a_negative_zero():
    """Issue #32: an interval printed "-0.00", and Chapter 9 mixed "-0.04" with the prose's "−" (U+2212)."""
    minus = "\u2212"
    iv = S.Interval(-0.001, -0.0449, 0.3, 1000)
    assert S.format_interval(iv) == "+0.00 [−0.04, +0.30]"
    assert S.format_interval(S.Interval(-0.2, -0.3, -0.004, 1000), 2) == "−0.20 [−0.30, +0.00]"
    assert S.format_interval(S.Interval(-0.2, -0.3, -0.004, 1000), 3) == "−0.200 [−0.300, −0.004]"
    assert S.format_interval(S.Interval(float("nan"), 0, 0, 1000)) == "n/a"
    # no hyphen-minus and no negative zero anywhere, at every precision
    rng = np.random.default_rng(0)
    for v, lo, hi in rng.uniform(-0.02, 0.02, (300, 3)):
        text = S.format_interval(S.Interval(v, min(lo, hi), max(lo, hi), 10), int(rng.integers(1, 5)))
        assert "-" not in text and not re.search(minus + r"0\.0+(?![0-9])", text), text
    # the number formatter the tables and prose use
    assert S.format_number(-0.0512) == minus + "0.05"
    assert S.format_number(0.1234) == "0.12" and S.format_number(0.1234, plus=True) == "+0.12"
    for digits in (1, 2, 3, 4):
        for x in (-0.0, -4e-5, -0.4 * 10 ** -digits):
            assert S.format_number(x, digits) == "0." + "0" * digits
            assert S.format_number(x, digits, plus=True) == "+0." + "0" * digits
    # a value that does not round to zero keeps its minus
    assert S.format_number(-0.006, 2) == minus + "0.01" and S.format_number(-0.0006, 3) == minus + "0.001"
    assert S.format_number(float("nan")) == "n/a"
    assert (S.format_number(float("-inf")), S.format_number(float("inf"), plus=True)) == (minus + "∞", "+∞")


# --------------------------------------------------------------------------------------------
# Edges the mutation run of `stats` found unchecked (tests/MUTATION.md)
# --------------------------------------------------------------------------------------------
def test_kendall_tau_names_the_bad_argument_and_ranks_a_range_of_exactly_one():
    with pytest.raises(ValueError, match=r"^x contains NaN$"):
        S.kendall_tau([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"^y contains inf, must be finite$"):
        S.kendall_tau([1.0, 2.0], [1.0, np.inf])
    # a range of exactly 1 is not a constant (the test for "no pair to rank" is ptp == 0)
    assert S.kendall_tau([0.0, 1.0, 0.5], [0.0, 1.0, 0.5]) == 1.0
    assert S.kendall_tau([0.0, 0.5, 2.0], [3.0, 4.0, 3.5]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("x, y", [([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]),
                                  ([1.0], [2.0])])
def test_kendall_tau_of_a_constant_is_nan_without_asking_scipy(x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SciPy warns on a constant input: it must not be reached
        assert math.isnan(S.kendall_tau(x, y))


def _four_rows(gaps):
    """Rows over L x N (two values each) with the given gaps, in that order; the measure is the gap."""
    return [{"config": {"L": L, "N": N, "n_train": 8}, "gap_error": gaps[i]}
            for i, (L, N) in enumerate((L, N) for L in (1, 2) for N in (4, 8))]


def test_granulated_kendall_skips_only_groups_with_a_constant_gap_and_goes_on_after_them():
    # the groups varying N: (L=1: rows 0, 1) and (L=2: rows 2, 3). The first has a constant gap and is
    # skipped; the second still counts, and a gap range of exactly 1 is not constant.
    rows = _four_rows([0.5, 0.5, 0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = S.granulated_kendall(rows, lambda r: r["gap_error"])
    assert (t["N"], t["groups_N"]) == (1.0, 1)
    assert (t["L"], t["groups_L"]) == (1.0, 2)  # the groups varying L: gaps (0.5, 0.0) and (0.5, 1.0)
    assert math.isnan(t["n_train"]) and t["groups_n_train"] == 0


def test_granulated_kendall_with_nothing_defined_is_nan_without_a_warning():
    rows = _four_rows([0.5, 0.5, 0.5, 0.5])  # the gap never varies: no group, no ψ, no Ψ
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the mean of an empty list would warn
        t = S.granulated_kendall(rows, lambda r: r["config"]["N"])
    assert all(math.isnan(t[k]) for k in ("L", "N", "n_train", "Psi")), t
    assert (t["groups_L"], t["groups_N"]) == (0, 0)


def _slope_rows(ns_by_L):
    return [{"config": {"L": L, "N": N, "n_train": 8}, "proxies": {"p": 2.0 * math.log10(N) + L}}
            for L, ns in ns_by_L for N in ns]


def test_scaling_slopes_goes_past_a_group_with_one_width_and_is_nan_without_any():
    # the first group (L=1) has one width and is passed over; the next (L=2) has the slope 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert S.scaling_slopes(_slope_rows([(1, [8]), (2, [8, 32])]), "p", "N") == pytest.approx(2.0)
        assert math.isnan(S.scaling_slopes(_slope_rows([(1, [8]), (2, [16])]), "p", "N"))


def test_the_text_of_an_interval_and_of_infinities():
    iv = S.Interval(0.123, -0.05, 0.3, 2000)
    assert str(iv) == S.format_interval(iv) == "+0.12 [−0.05, +0.30]"
    assert [S.format_number(v) for v in (np.inf, -np.inf)] == ["∞", "−∞"]
    assert [S.format_number(v, plus=True) for v in (np.inf, -np.inf)] == ["+∞", "−∞"]


def test_check_sign_messages():
    with pytest.raises(AssertionError) as e:
        S.check_sign(S.Interval(0.1234, -0.1, 0.2, 10), "+")
    assert str(e.value) == ("the statistic: the prose claims sign '+' but the interval is "
                            "+0.123 [−0.100, +0.200] (sign '0')")
    with pytest.raises(TypeError, match=r"^check_sign needs an Interval, got float$"):
        S.check_sign(0.5, "+")
    with pytest.raises(ValueError, match=r"^claimed sign must be '\+', '-' or '0', got 'x'$"):
        S.check_sign(S.Interval(0.1, -0.1, 0.2, 10), "x")


def test_bootstrap_weights_arguments():
    assert S.bootstrap_weights(["a", "b", "b"], 5).tolist() == S.bootstrap_weights(["a", "b", "b"], 5, seed=0).tolist()
    assert S.bootstrap_weights(["a", "b"], 1).shape == (1, 2)  # one resample is allowed
    with pytest.raises(ValueError, match=r"^n_boot \(number of resamples\) == 0, must be >= 1$"):
        S.bootstrap_weights(["a"], 0)
    with pytest.raises(ValueError, match=r"^seed == -1, must be >= 0$"):
        S.bootstrap_weights(["a"], 3, seed=-1)
    with pytest.raises(ValueError, match=r"^bootstrap_weights needs at least one row \(clusters is empty\)$"):
        S.bootstrap_weights([], 3)
    with pytest.raises(ValueError, match=r"^top and clusters must label the same rows, got 1 and 2$"):
        S.bootstrap_weights(["a", "b"], 3, top=["t"])


def test_three_stage_weights_draw_whole_top_clusters():
    # top t holds clusters a, b; top u holds c, d; two rows each. The first stage draws t or u; a top
    # drawn c times draws 2c of its clusters, each drawn k times 2k of its rows: so the rows of t are drawn
    # 4·c_t times in all, c_t in {0, 1, 2}. Without the top stage that count is 2·(clusters of t drawn),
    # which takes the values 2 and 6 as well.
    clusters = ["a", "a", "b", "b", "c", "c", "d", "d"]
    top = ["t"] * 4 + ["u"] * 4
    W = S.bootstrap_weights(clusters, 400, seed=3, top=top)
    in_t = W[:, :4].sum(axis=1)
    assert set(in_t.tolist()) == {0.0, 4.0, 8.0} and W.sum(axis=1).tolist() == [8.0] * 400
    two = S.bootstrap_weights(clusters, 400, seed=3)[:, :4].sum(axis=1)
    assert {2.0, 6.0} <= set(two.tolist())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-5, 5, allow_nan=False, allow_subnormal=False), min_size=2, max_size=5),
                min_size=2, max_size=5))
def test_icc_is_the_one_way_anova_ratio(groups):
    """ICC(1) = (F − 1) / (F + k̄ − 1), F SciPy's one-way ANOVA ratio MSB/MSW, k̄ the mean group size."""
    from scipy.stats import f_oneway

    values = [v for g in groups for v in g]
    labels = [i for i, g in enumerate(groups) for _ in g]
    if min(np.ptp(g) for g in groups) < 1e-3 or np.ptp([np.mean(g) for g in groups]) < 1e-3:
        return  # F near 0/0 or ∞: SciPy warns; the ratio form is checked where it is well conditioned
    F, k = f_oneway(*groups).statistic, len(values) / len(groups)
    assert math.isclose(S.intraclass_correlation(values, labels), (F - 1) / (F + k - 1), rel_tol=1e-9, abs_tol=1e-12)


def test_icc_closed_form_and_edges():
    # groups (1, 3) and (4, 6, 8): grand mean 4.4; MSB = (2·2.4² + 3·1.6²)/1 = 19.2; MSW = (2 + 8)/3;
    # k̄ = 2.5: ICC = (19.2 − 10/3) / (19.2 + 1.5·10/3) = (19.2 − 10/3)/24.2
    want = (19.2 - 10 / 3) / 24.2
    assert math.isclose(S.intraclass_correlation([1, 3, 4, 6, 8], "aabbb"), want, rel_tol=1e-12)
    assert math.isclose(S.intraclass_correlation([1e-3, 3e-3, 4e-3, 6e-3, 8e-3], "aabbb"), want,
                        rel_tol=1e-9)  # the same at a small scale: a scale-free statistic
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert S.intraclass_correlation([1, 1, 2, 2], "aabb") == 1.0  # no variance within: 1, no division by 0
        assert math.isnan(S.intraclass_correlation([2, 2, 2, 2], "aabb"))  # no variance at all: undefined
    with pytest.raises(ValueError, match=r"^the ICC needs at least two groups with at least two values each$"):
        S.intraclass_correlation([1, 2, 3], "aab")


def test_icc_interval_arguments_and_reproducibility():
    v, g = [1, 1.4, 2, 2.3, 3, 3.1, 2.5, 4, 0.5, 0.9, 1.7, 3.3], "aabbccddeeff"
    assert S.icc_interval(v, g, 50) == S.icc_interval(v, g, 50, seed=0) == S.icc_interval(v, g, 50)
    assert S.icc_interval(v, g, 50, seed=1) != S.icc_interval(v, g, 50)
    assert S.icc_interval(v, g, 1).n_boot == 1
    with pytest.raises(ValueError, match=r"^n_boot \(number of resamples\) == 0, must be >= 1$"):
        S.icc_interval(v, g, 0)
    with pytest.raises(ValueError, match=r"^seed == -1, must be >= 0$"):
        S.icc_interval(v, g, 5, seed=-1)


def _varying_rows():
    """L x N x two seeds; the gap and a second target ranked in opposite directions by N."""
    return [{"config": {"L": L, "N": N, "n_train": 8, "seed": s}, "gap_error": N + 0.1 * s, "other": -N + 0.1 * s}
            for L in (1, 2) for N in (4, 8, 16) for s in (0, 1)]


def test_group_taus_and_wrong_sign_share_targets_and_constant_measures():
    rows = _varying_rows()
    m = [r["config"]["N"] for r in rows]
    assert S.group_taus(rows, m, "N", S.HYPERPARAMETERS, ("seed",)).tolist() == [1.0] * 4
    assert S.wrong_sign_share(rows, m, "N", S.HYPERPARAMETERS, ("seed",)) == (0.0, 4)
    assert S.wrong_sign_share(rows, m, "N", S.HYPERPARAMETERS, ("seed",), target="other") == (1.0, 4)
    flat = [1.0] * len(rows)  # a measure constant inside every group ranks nothing: τ = 0 there
    assert S.group_taus(rows, flat, "N", S.HYPERPARAMETERS, ("seed",)).tolist() == [0.0] * 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        share, n = S.wrong_sign_share(rows, m, "n_train", S.HYPERPARAMETERS, ("seed",))  # no group varies n_train
    assert math.isnan(share) and n == 0


def test_granulated_intervals_levels_sizes_and_empty_axes():
    rows = _varying_rows()
    m = np.random.default_rng(5).permutation(len(rows)).astype(float)  # a measure that ranks the gap loosely
    W = S.bootstrap_weights([(r["config"]["L"], r["config"]["N"]) for r in rows], 40, seed=2)
    g = [r["gap_error"] for r in rows]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = S.granulated_intervals(rows, m, W, S.HYPERPARAMETERS, ("seed",), level=0.5)
    assert t["overall"] == S.kendall_interval(m, g, W, 0.5)  # the level reaches every interval
    wide = S.granulated_intervals(rows, m, W, S.HYPERPARAMETERS, ("seed",))
    assert wide["overall"].hi - wide["overall"].lo > t["overall"].hi - t["overall"].lo, (wide, t)
    assert all(wide[k].hi - wide[k].lo > t[k].hi - t[k].lo for k in ("N", "Psi")), (wide, t)  # L: a constant gap
    assert all(t[k].n_boot == 40 for k in ("overall", "L", "N", "n_train", "Psi")), t
    assert math.isnan(t["n_train"].value) and t["n_train"].n_undefined == 40  # no group varies n_train
    assert t["Psi"].value == pytest.approx(np.nanmean([t["L"].value, t["N"].value]))
    with pytest.raises(ValueError, match=r"^the measure m, the rows and the weights W must cover the same rows, "
                                         r"got 3, 12 and 12$"):
        S.granulated_intervals(rows, m[:3], W, S.HYPERPARAMETERS)
    still = [{**r, "gap_error": 0.5} for r in rows]  # a constant gap: no ψ and no Ψ defined
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = S.granulated_intervals(still, m, W, S.HYPERPARAMETERS, ("seed",))
    assert all(math.isnan(t[k].value) for k in ("L", "N", "n_train", "Psi")) and t["Psi"].n_boot == 40
