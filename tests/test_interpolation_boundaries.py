"""Closed forms, exact boundaries and argument names in the errors of bounds_lib.interpolation
(written against the survivors of `make mutation MODULES=interpolation`, see tests/MUTATION.md)."""
import numpy as np
import pytest

from bounds_lib import interpolation as I


def test_split_at_sigma_equal_tau_goes_to_the_tail():
    s = I.svd_split(np.diag([2.0, 1.0, 0.5]), 1.0)
    assert s.rank_W1 == 1 and s.tau == 1.0
    assert np.isclose(np.linalg.norm(s.W2), np.sqrt(1.25)) and np.allclose(s.W1, np.diag([2.0, 0, 0]))
    assert np.allclose(s.sigma, [2.0, 1.0, 0.5])
    wide = I.svd_split(np.ones((2, 5)), 0.1)
    assert wide.W1.shape == wide.W2.shape == (2, 5) and wide.rank_W1 == 1


def test_bound_closed_forms():
    assert np.isclose(I.tail_bound_schatten(2.0, 3.0, 1.0), np.sqrt(6.0))
    assert np.isclose(I.tail_bound_schatten(0.5, 4.0, 0.5), np.sqrt(0.5**1.5 * 4.0))
    assert np.isclose(I.rank_bound(3.0, 0.5, 1.5), 3.0 / 0.5**1.5)
    assert np.isclose(I.tail_bound_dimension(0.5, (3, 7)), 0.5 * np.sqrt(3))
    assert np.isclose(I.entropy_low_rank(0.5, 2.0, 1.5, 3, 4), 2.0 / 0.5**1.5 * 7)
    assert np.isclose(I.entropy_frobenius(0.5, 0.1, 3, 4), 0.25 * 3 * 4 / 0.01)
    assert np.isclose(I.balancing_tau(0.1, 2.0, 1.5, 3, 4), (2.0 * 7 * 0.01 / 12) ** (1 / 3.5))
    assert np.isclose(I.log_covering_bound(0.1, 2.0, 1.5, 3, 4), ((2.0 * 7) ** 2 * 12**1.5 / 0.1**3) ** (1 / 3.5))
    # rank part ⌊C_s/τ^p⌋ with τ = 0.5, p = 1.5: ⌊2.83⌋ = 2
    tail = I.entropy_tail_maurey(0.5 * np.sqrt(3), 0.1, 4, 5)
    assert np.isclose(I.log_covering_split(0.5, 0.2, 1.0, 1.5, 3, 4, 1.0, 5) - tail, 2 * 7 * np.log(1 + 8 / 0.2))


def test_scalars_are_floats_and_edge_values():
    assert isinstance(I.entropy_tail_maurey(1.0, 0.5, 2, 3), float)
    assert isinstance(I.dudley_term_p0(1, 2, 1.0, 0.0), float)
    assert I.dudley_term_p0(0, 4, 1.0, 3.0) == 0.0
    assert np.allclose(I.dudley_term_p0(1, 2, 1.0, np.array([0.0, 1.0])),
                       2 * (np.sqrt(np.log1p(4 * np.exp([0.0, 1.0]))) + np.sqrt(np.pi) / 2))
    with pytest.raises(ValueError, match="log_K must be finite"):
        I.dudley_term_p0(1, 2, 1.0, np.nan)
    with pytest.raises(ValueError, match=r"^rank must be an integer >= 0"):
        I.dudley_term_p0(-1, 2, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"^rank must be an integer >= 0"):
        I.entropy_low_rank_volumetric(-1, 2, 2, 1.0, 0.1)
    for bad in (np.inf, np.nan, -1.0):
        with pytest.raises(ValueError, match=r"^rho \(the Frobenius radius\)"):
            I.entropy_tail_maurey(bad, 0.1, 2, 2)


@pytest.mark.parametrize("call, name", [
    (lambda: I.svd_split(np.eye(2), 0.0), "tau"), (lambda: I.rank_bound(1.0, -1.0, 1.0), "tau"),
    (lambda: I.tail_bound_dimension(-1.0, (2, 2)), "tau"), (lambda: I.tail_bound_dimension(1.0, (0, 2)), "matrix dimension"),
    (lambda: I.tail_bound_schatten(0.0, 1.0, 1.0), "tau"),
    (lambda: I.entropy_low_rank(1.0, 0.0, 1.0, 2, 2), "C_s"), (lambda: I.entropy_low_rank(0.0, 1.0, 1.0, 2, 2), "tau"),
    (lambda: I.entropy_low_rank(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.entropy_low_rank(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.entropy_frobenius(0.0, 1.0, 2, 2), "tau"), (lambda: I.entropy_frobenius(1.0, 0.0, 2, 2), "eps"),
    (lambda: I.entropy_frobenius(1.0, 1.0, 0, 2), "l"), (lambda: I.entropy_frobenius(1.0, 1.0, 2, 0), "m"),
    (lambda: I.balancing_tau(0.0, 1.0, 1.0, 2, 2), "eps"), (lambda: I.balancing_tau(1.0, 0.0, 1.0, 2, 2), "C_s"),
    (lambda: I.balancing_tau(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.balancing_tau(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.log_covering_bound(0.0, 1.0, 1.0, 2, 2), "eps"), (lambda: I.log_covering_bound(1.0, 0.0, 1.0, 2, 2), "C_s"),
    (lambda: I.log_covering_bound(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.log_covering_bound(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.entropy_low_rank_volumetric(1, 0, 2, 1.0, 0.1), "l"), (lambda: I.entropy_low_rank_volumetric(1, 2, 0, 1.0, 0.1), "m"),
    (lambda: I.entropy_low_rank_volumetric(1, 2, 2, 0.0, 0.1), "C_2"), (lambda: I.entropy_low_rank_volumetric(1, 2, 2, 1.0, 0.0), "eps"),
    (lambda: I.entropy_tail_maurey(1.0, 0.0, 2, 2), "eps"), (lambda: I.entropy_tail_maurey(1.0, 0.1, 0, 2), "m"),
    (lambda: I.entropy_tail_maurey(1.0, 0.1, 2, 0), "n_rows"),
    (lambda: I.log_covering_split(0.0, 0.1, 1.0, 1.0, 2, 2, 1.0, 2), "tau"),
    (lambda: I.log_covering_split(1.0, 0.1, 0.0, 1.0, 2, 2, 1.0, 2), "C_s"),
    (lambda: I.log_covering_split(1.0, 0.1, 1.0, 1.0, 0, 2, 1.0, 2), "l"),
    (lambda: I.log_covering_split(1.0, 0.1, 1.0, 1.0, 2, 0, 1.0, 2), "m"),
    (lambda: I.log_covering_split(1.0, 0.0, 1.0, 1.0, 2, 2, 1.0, 2), "eps"),
    (lambda: I.dudley_term_p0(1, 0, 1.0, 0.0), "N"), (lambda: I.dudley_term_p0(1, 2, 0.0, 0.0), "C_2"),
])
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} (\(|must)"):
        call()


def test_pos_messages_explain_the_symbol():
    with pytest.raises(ValueError, match=r"^tau \(the threshold τ\) must be positive and finite"):
        I.svd_split(np.eye(2), -1.0)
    with pytest.raises(ValueError, match=r"^eps \(the radius ε\)"):
        I.entropy_frobenius(1.0, -1.0, 2, 2)
    with pytest.raises(ValueError, match=r"^C_s \(the Schatten budget C_s\)"):
        I.entropy_low_rank(1.0, -1.0, 1.0, 2, 2)
    with pytest.raises(ValueError, match=r"^C_2 \(C_2\)"):
        I.entropy_low_rank_volumetric(1, 2, 2, -1.0, 0.1)
    with pytest.raises(ValueError):
        I.svd_split(np.eye(2), True)


def test_validation_edges():
    for bad in (np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"^tau \(the threshold τ\)"):
            I.svd_split(np.eye(2), bad)
    with pytest.raises(ValueError, match=r"^l must be an integer >= 1"):
        I.entropy_low_rank(1.0, 1.0, 1.0, 2.5, 2)
    arr = I.rank_bound(1.0, np.array([1.0, 2.0]), 1.0)  # arrays of thresholds stay arrays
    assert np.allclose(arr, [1.0, 0.5])
    with pytest.raises(ValueError, match=r"^log_K must be finite$"):
        I.dudley_term_p0(1, 2, 1.0, np.inf)


@pytest.mark.parametrize("bad", [-1.0, -1e-300, float("nan"), float("inf"), True, [1.0, -2.0]])
def test_schatten_quantities_must_be_nonnegative_and_finite(bad):
    """Issue 12: negative or NaN S_p used to give a negative rank bound or a NaN tail bound."""
    with pytest.raises(ValueError, match=r"^S_p \(a Schatten quantity"):
        I.rank_bound(bad, 0.5, 1.0)
    with pytest.raises(ValueError, match=r"^S_p \(a Schatten quantity"):
        I.tail_bound_schatten(0.5, bad, 1.0)


def test_schatten_quantity_zero_and_arrays_allowed():
    assert I.rank_bound(0.0, 0.5, 1.0) == 0.0
    np.testing.assert_allclose(I.tail_bound_schatten(0.25, [0.0, 4.0], 1.0), [0.0, 1.0])
