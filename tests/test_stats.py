"""Bootstrap intervals for Kendall's tau and psi, the ICC and the sign check (Chapters 7-8)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import kendalltau

from bounds_lib import stats as S
from bounds_lib.experiments import granulated_kendall


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
    ref = granulated_kendall(rows, lambda r: r["m"], fixed=("seed",))
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
