"""Closed forms, exact boundaries and argument names in the errors of bounds_lib.theory.interpolation
(written against the survivors of `make mutation MODULES=interpolation`, see tests/MUTATION.md)."""
import numpy as np
import pytest
from scipy.integrate import quad

from bounds_lib.theory import interpolation as I


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
    with pytest.raises(ValueError, match=r"^log_K contains NaN$"):
        I.dudley_term_p0(1, 2, 1.0, np.nan)
    with pytest.raises(ValueError, match=r"^rank == -1, must be >= 0$"):
        I.dudley_term_p0(-1, 2, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"^rank == -1, must be >= 0$"):
        I.entropy_low_rank_volumetric(-1, 2, 2, 1.0, 0.1)
    for bad in (True, 1.0, "1"):   # a rank is a count: a flag or a float is a TypeError
        with pytest.raises(TypeError, match=r"^rank must be an integer, got"):
            I.dudley_term_p0(bad, 2, 1.0, 0.0)
        with pytest.raises(TypeError, match=r"^rank must be an integer, got"):
            I.entropy_low_rank_volumetric(bad, 2, 2, 1.0, 0.1)
    for bad in (np.inf, np.nan, -1.0):
        with pytest.raises(ValueError, match=r"^rho \(the Frobenius radius\)"):
            I.entropy_tail_maurey(bad, 0.1, 2, 2)


@pytest.mark.parametrize("call, name", [
    (lambda: I.svd_split(np.eye(2), 0.0), "tau"), (lambda: I.rank_bound(1.0, -1.0, 1.0), "tau"),
    (lambda: I.tail_bound_dimension(-1.0, (2, 2)), "tau"),
    (lambda: I.tail_bound_dimension(1.0, (0, 2)), "matrix dimension"),
    (lambda: I.tail_bound_schatten(0.0, 1.0, 1.0), "tau"),
    (lambda: I.entropy_low_rank(1.0, 0.0, 1.0, 2, 2), "C_s"), (lambda: I.entropy_low_rank(0.0, 1.0, 1.0, 2, 2), "tau"),
    (lambda: I.entropy_low_rank(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.entropy_low_rank(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.entropy_frobenius(0.0, 1.0, 2, 2), "tau"), (lambda: I.entropy_frobenius(1.0, 0.0, 2, 2), "eps"),
    (lambda: I.entropy_frobenius(1.0, 1.0, 0, 2), "l"), (lambda: I.entropy_frobenius(1.0, 1.0, 2, 0), "m"),
    (lambda: I.balancing_tau(0.0, 1.0, 1.0, 2, 2), "eps"), (lambda: I.balancing_tau(1.0, 0.0, 1.0, 2, 2), "C_s"),
    (lambda: I.balancing_tau(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.balancing_tau(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.log_covering_bound(0.0, 1.0, 1.0, 2, 2), "eps"),
    (lambda: I.log_covering_bound(1.0, 0.0, 1.0, 2, 2), "C_s"),
    (lambda: I.log_covering_bound(1.0, 1.0, 1.0, 0, 2), "l"), (lambda: I.log_covering_bound(1.0, 1.0, 1.0, 2, 0), "m"),
    (lambda: I.entropy_low_rank_volumetric(1, 0, 2, 1.0, 0.1), "l"),
    (lambda: I.entropy_low_rank_volumetric(1, 2, 0, 1.0, 0.1), "m"),
    (lambda: I.entropy_low_rank_volumetric(1, 2, 2, 0.0, 0.1), "C_2"),
    (lambda: I.entropy_low_rank_volumetric(1, 2, 2, 1.0, 0.0), "eps"),
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
    with pytest.raises(ValueError, match=rf"^{name} (\(|==)"):
        call()


def test_pos_messages_explain_the_symbol():
    with pytest.raises(ValueError, match=r"^tau \(the threshold τ\) contains -1.0, must be > 0.0$"):
        I.svd_split(np.eye(2), -1.0)
    with pytest.raises(ValueError, match=r"^tau \(the threshold τ\) contains 0.0, must be > 0.0$"):
        I.svd_split(np.eye(2), 0.0)
    with pytest.raises(ValueError, match=r"^eps \(the radius ε\) contains -1.0, must be > 0.0$"):
        I.entropy_frobenius(1.0, -1.0, 2, 2)
    with pytest.raises(ValueError, match=r"^C_s \(the Schatten budget\) contains -1.0, must be > 0.0$"):
        I.entropy_low_rank(1.0, -1.0, 1.0, 2, 2)
    with pytest.raises(ValueError, match=r"^C_2 \(the spectral-norm bound\) contains -1.0, must be > 0.0$"):
        I.entropy_low_rank_volumetric(1, 2, 2, -1.0, 0.1)
    with pytest.raises(TypeError, match=r"^tau \(the threshold τ\) must be numeric, got bool True$"):
        I.svd_split(np.eye(2), True)


def test_validation_edges():
    for bad in (np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"^tau \(the threshold τ\)"):
            I.svd_split(np.eye(2), bad)
    for bad in (2.5, 2.0, True):   # a dimension is a count: TypeError for a float or a flag
        with pytest.raises(TypeError, match=r"^l must be an integer, got"):
            I.entropy_low_rank(1.0, 1.0, 1.0, bad, 2)
    assert I.entropy_low_rank(1.0, 1.0, 1.0, np.int64(2), 2) == I.entropy_low_rank(1.0, 1.0, 1.0, 2, 2)
    arr = I.rank_bound(1.0, np.array([1.0, 2.0]), 1.0)  # arrays of thresholds stay arrays
    assert np.allclose(arr, [1.0, 0.5])
    with pytest.raises(ValueError, match=r"^log_K contains inf, must be finite$"):
        I.dudley_term_p0(1, 2, 1.0, np.inf)


@pytest.mark.parametrize("bad", [-1.0, -1e-300, float("nan"), float("inf"), [1.0, -2.0]])
def test_schatten_quantities_must_be_nonnegative_and_finite(bad):
    """Negative or NaN S_p used to give a negative rank bound or a NaN tail bound."""
    with pytest.raises(ValueError, match=r"^S_p \(a Schatten quantity Σσ\^p\) contains"):
        I.rank_bound(bad, 0.5, 1.0)
    with pytest.raises(ValueError, match=r"^S_p \(a Schatten quantity Σσ\^p\) contains"):
        I.tail_bound_schatten(0.5, bad, 1.0)


def test_a_flag_is_not_a_schatten_quantity():
    with pytest.raises(TypeError, match=r"^S_p \(a Schatten quantity Σσ\^p\) must be numeric, got bool True$"):
        I.rank_bound(True, 0.5, 1.0)
    with pytest.raises(TypeError, match=r"^S_p \(a Schatten quantity"):
        I.tail_bound_schatten(0.5, True, 1.0)


def test_schatten_quantity_zero_and_arrays_allowed():
    assert I.rank_bound(0.0, 0.5, 1.0) == 0.0
    np.testing.assert_allclose(I.tail_bound_schatten(0.25, [0.0, 4.0], 1.0), [0.0, 1.0])


# ---- corrected covering numbers of Chapter 2 (moved from the harness tests, tests/test_checks.py) ----
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
    lambda: I.entropy_low_rank_volumetric(-1, 2, 2, 1.0, 0.1),
    lambda: I.entropy_low_rank_volumetric(1, 2, 2, 0.0, 0.1), lambda: I.entropy_tail_maurey(-1.0, 0.1, 2, 2),
    lambda: I.entropy_tail_maurey(1.0, 0.0, 2, 2), lambda: I.entropy_tail_maurey(1.0, 0.1, 2, 0),
    lambda: I.dudley_term_p0(1, 2, 1.0, np.inf),
    lambda: I.log_covering_split(1.0, 0.1, 1.0, 3.0, 2, 2, 1.0, 2),
])
def test_bad_input_covering(call):
    with pytest.raises(ValueError):
        call()
