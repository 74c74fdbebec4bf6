import numpy as np
import pytest
from hypothesis import given, strategies as st

from bounds_lib.theory.interpolation import (balancing_tau, dudley_integral_exponent, entropy_frobenius,
                                             entropy_low_rank,
                                      log_covering_at_tau, log_covering_bound, rank_bound, svd_split,
                                      tail_bound_dimension, tail_bound_schatten)
from bounds_lib.theory.norms import schatten_power


def test_split_closed_form():
    W = np.diag([3.0, 2.0, 0.5])
    s = svd_split(W, 1.0)
    assert s.rank_W1 == 2 and np.allclose(s.W1 + s.W2, W)
    assert np.isclose(np.linalg.norm(s.W2), 0.5)
    assert np.isclose(rank_bound(schatten_power(s.sigma, 1.0), 1.0, 1.0), 5.5)


@given(st.integers(1, 6), st.integers(1, 6), st.floats(0.01, 3.0), st.floats(0.0, 2.0), st.integers(0, 10**6))
def test_split_bounds_hold(l, m, tau, p, seed):
    W = np.random.default_rng(seed).standard_normal((l, m))
    s = svd_split(W, tau)
    Sp = schatten_power(s.sigma, p)
    assert s.rank_W1 <= rank_bound(Sp, tau, p) + 1e-9
    f2 = np.linalg.norm(s.W2)
    assert f2 <= tail_bound_dimension(tau, W.shape) + 1e-9
    assert f2 <= tail_bound_schatten(tau, Sp, p) * (1 + 1e-9) + 1e-12


@given(st.floats(1e-3, 1.0), st.floats(0.1, 100.0), st.floats(0.0, 2.0), st.integers(1, 50), st.integers(1, 50))
def test_balancing(eps, Cs, p, l, m):
    t = balancing_tau(eps, Cs, p, l, m)
    a, b = entropy_low_rank(t, Cs, p, l, m), entropy_frobenius(t, eps, l, m)
    assert np.isclose(a, b) and np.isclose(a, log_covering_bound(eps, Cs, p, l, m))
    assert np.isclose(log_covering_at_tau(t, eps, Cs, p, l, m), 2 * a)


def test_covering_closed_form_and_dudley():
    # p = 0: C_s (l + m) (rank-C_s matrices); p = 2: (C_s (l+m) min(l,m) m)^{1/2} / eps
    assert np.isclose(log_covering_bound(0.1, 3.0, 0.0, 4, 5), 27.0)
    assert np.isclose(log_covering_bound(0.1, 3.0, 2.0, 4, 5), np.sqrt(27.0 * 20) / 0.1)
    assert dudley_integral_exponent(2.0) == 0.5 and dudley_integral_exponent(0.0) == 0.0


@pytest.mark.parametrize("call", [
    lambda: svd_split(np.eye(2), 0.0), lambda: svd_split(np.eye(2), -1.0), lambda: rank_bound(1.0, 1.0, 2.5),
    lambda: log_covering_bound(0.0, 1.0, 1.0, 2, 2), lambda: log_covering_bound(-1.0, 1.0, 1.0, 2, 2),
    lambda: balancing_tau(0.1, 1.0, -0.5, 2, 2), lambda: tail_bound_dimension(np.nan, (2, 2)),
    lambda: entropy_low_rank(1.0, 1.0, 1.0, 0, 2), lambda: svd_split(np.array([[np.nan]]), 1.0),
])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()
