"""bounds_lib.theory.norms: closed-form spectra, property tests of every inequality, bad input."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from bounds_lib.theory import norms


def matrices(max_side=7):
    shape = st.tuples(st.integers(1, max_side), st.integers(1, max_side))
    return shape.flatmap(lambda s: arrays(np.float64, s, elements=st.floats(-10, 10, allow_nan=False, width=64)))


def with_spectrum(sigma, rng, shape=None):
    """A matrix with prescribed singular values (random orthogonal factors)."""
    sigma = np.asarray(sigma, dtype=float)
    l, m = shape or (len(sigma) + 2, len(sigma) + 1)
    U, _ = np.linalg.qr(rng.standard_normal((l, l)))
    V, _ = np.linalg.qr(rng.standard_normal((m, m)))
    D = np.zeros((l, m))
    D[: len(sigma), : len(sigma)] = np.diag(sigma)
    return U @ D @ V.T


# ---------------------------------------------------------------- closed forms
def test_known_spectrum_reproduced(rng):
    sigma = np.array([5.0, 3.0, 1.0, 0.5])
    W = with_spectrum(sigma, rng)
    np.testing.assert_allclose(norms.singular_values(W)[:4], sigma, rtol=1e-12)
    assert norms.spectral_norm(W) == pytest.approx(5.0, rel=1e-12)
    assert norms.frobenius_norm(W) == pytest.approx(math.sqrt(25 + 9 + 1 + 0.25), rel=1e-12)
    assert norms.nuclear_norm(W) == pytest.approx(9.5, rel=1e-12)
    assert norms.stable_rank(W) == pytest.approx((25 + 9 + 1 + 0.25) / 25, rel=1e-12)
    s = norms.singular_values(W)
    assert norms.numerical_rank(s) == 4
    assert norms.schatten_power(s, 0) == 4
    assert norms.schatten_power(s, 1) == pytest.approx(9.5, rel=1e-10)
    assert norms.schatten_power(s, 2) == pytest.approx(35.25, rel=1e-10)
    assert norms.schatten_power(sigma, 0.5) == pytest.approx(sum(sigma**0.5))
    assert norms.schatten_quasinorm(sigma, 2) == pytest.approx(math.sqrt(35.25))


def test_identity_and_mixed_norms():
    I = np.eye(4)
    assert norms.norm_21(I) == 4.0
    assert norms.norm_11(I) == 4.0
    assert norms.norm_2_to_inf(I) == 1.0
    W = np.array([[3.0, 0.0], [4.0, 1.0]])
    assert norms.norm_21(W) == pytest.approx(5.0 + 1.0)  # column norms
    assert norms.norm_11(W) == 8.0
    assert norms.norm_2_to_inf(W) == pytest.approx(math.sqrt(17.0))  # largest row


def test_numerical_rank_tolerance_matches_released_rule():
    # threshold = 1e-10 * len(sigma) * max(sigma_1, 1)
    s = np.array([2.0, 1e-9, 5.9e-10, 1e-16])
    thr = 1e-10 * 4 * 2.0
    assert norms.rank_threshold(s) == pytest.approx(thr)
    assert norms.numerical_rank(s) == 2
    # small matrices: the floor max(sigma_1, 1) = 1 applies
    assert norms.rank_threshold([1e-3, 1e-12]) == pytest.approx(2e-10)
    assert norms.numerical_rank(np.zeros(3)) == 0


def test_rank_of_explicit_low_rank_product(rng):
    A = rng.standard_normal((30, 4))
    B = rng.standard_normal((4, 30))
    s = norms.singular_values(A @ B)
    assert norms.numerical_rank(s) == 4
    # released convention: the 26 numerical zeros still add sigma^p for tiny p
    assert norms.schatten_power(s, 1 / 19) > norms.schatten_power(s[:4], 1 / 19) + 1.0


# ---------------------------------------------------------------- properties
@given(matrices())
def test_norm_chain(W):
    s = norms.singular_values(W)
    spec, fro, nuc = norms.spectral_norm(W), norms.frobenius_norm(W), norms.nuclear_norm(W)
    r = norms.numerical_rank(s)
    tol = 1e-9 * (1 + nuc)
    assert spec <= fro + tol
    assert fro <= nuc + tol
    assert fro <= math.sqrt(max(r, 1)) * spec + tol
    assert nuc <= math.sqrt(max(r, 1)) * fro + tol
    assert nuc <= r * spec + tol or r == 0


@given(matrices())
def test_mixed_norm_relations(W):
    l, m = W.shape
    fro, n21, n11 = norms.frobenius_norm(W), norms.norm_21(W), norms.norm_11(W)
    tol = 1e-9 * (1 + n11)
    assert fro <= n21 + tol                      # ‖W‖_F ≤ ‖W‖_{2,1}
    assert n21 <= math.sqrt(m) * fro + tol       # Cauchy–Schwarz over the m columns
    assert n21 <= n11 + tol                      # ‖·‖₂ ≤ ‖·‖₁ per column
    assert n11 <= math.sqrt(l) * n21 + tol       # ‖·‖₁ ≤ √ℓ ‖·‖₂ per column
    assert norms.norm_2_to_inf(W) <= norms.spectral_norm(W) + tol  # a row is e_tᵀ W


@given(matrices(), st.floats(0.05, 2.0), st.floats(0.05, 2.0))
def test_schatten_monotone_in_p(W, p, q):
    """‖W‖_{S_p} is non-increasing in p, and S_p^{1/p} ≥ σ₁."""
    s = norms.singular_values(W)
    if s[0] == 0:
        return
    lo, hi = sorted((p, q))
    a, b = norms.schatten_quasinorm(s, lo), norms.schatten_quasinorm(s, hi)
    assert b <= a * (1 + 1e-9)
    assert s[0] <= b * (1 + 1e-9)


@given(matrices(), st.floats(0.01, 2.0))
def test_schatten_between_rank_and_spectral(W, p):
    """S_p ≤ rank · σ₁^p when all numerical zeros are dropped."""
    s = norms.singular_values(W)
    kept = s[s > norms.rank_threshold(s)]
    if kept.size == 0:
        return
    assert norms.schatten_power(kept, p) <= kept.size * kept[0] ** p * (1 + 1e-9)


@given(matrices(), st.lists(st.floats(0, 2), min_size=1, max_size=9))
def test_schatten_powers_equals_pointwise(W, ps):
    s = norms.singular_values(W)
    ps = [0.0] + ps
    np.testing.assert_allclose(norms.schatten_powers(s, ps), [norms.schatten_power(s, p) for p in ps], rtol=1e-12)


@given(matrices(), st.floats(-5, 5).filter(lambda c: abs(c) > 1e-3))
def test_homogeneity(W, c):
    s, sc = norms.singular_values(W), norms.singular_values(c * W)
    np.testing.assert_allclose(sc, abs(c) * s, rtol=1e-9, atol=1e-9 * (1 + s[0]))
    assert norms.norm_21(c * W) == pytest.approx(abs(c) * norms.norm_21(W), rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "bad, fragment",
    [
        (np.ones(3), "2-D"),
        (np.ones((2, 2, 2)), "2-D"),
        (np.zeros((0, 3)), "empty"),
        (np.array([[1.0, np.nan]]), "NaN"),
        (np.array([[1.0, np.inf]]), "NaN or infinite"),
        (np.array([[1 + 1j]]), "real"),
        (np.array([["a"]]), "numeric"),
    ],
)
def test_bad_matrices_rejected(bad, fragment):
    for f in (norms.singular_values, norms.spectral_norm, norms.norm_21, norms.norm_11, norms.frobenius_norm):
        with pytest.raises(ValueError, match=fragment):
            f(bad)


@pytest.mark.parametrize("p", [-0.1, 2.0001, 3, float("nan"), float("inf")])
def test_bad_p_rejected(p):
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        norms.schatten_power([1.0, 0.5], p)


@pytest.mark.parametrize("p", ["1", None, True, np.True_])
def test_p_of_the_wrong_type_is_a_type_error(p):
    """One rule (bounds_lib.core.validation): a wrong type is a TypeError, a bool is never a number."""
    with pytest.raises(TypeError, match=r"^p \(a Schatten index of the paper, in \[0, 2\]\) must be a real number"):
        norms.schatten_power([1.0, 0.5], p)
    if isinstance(p, (bool, np.bool_)):   # an array of flags is refused like a flag
        with pytest.raises(TypeError, match=r"^ps must be numeric, got a boolean array$"):
            norms.schatten_powers([1.0, 0.5], [p])


def test_bad_grid_rejected():
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        norms.schatten_powers([1.0], [0.5, 2.5])
    with pytest.raises(ValueError, match="1-D"):
        norms.schatten_powers([1.0], [[0.5]])


def test_bad_sigma_rejected():
    with pytest.raises(ValueError, match="empty"):
        norms.schatten_power([], 1)
    with pytest.raises(ValueError, match=r"sigma contains -0.5, must be >= 0.0 \(singular values are finite and >= 0"):
        norms.schatten_power([1.0, -0.5], 1)
    with pytest.raises(ValueError, match="1-D"):
        norms.numerical_rank(np.ones((2, 2)))
    with pytest.raises(ValueError, match="p = 0"):
        norms.schatten_quasinorm([1.0], 0)
