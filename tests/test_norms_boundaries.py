"""Exact boundaries, closed forms and error messages of bounds_lib.theory.norms (written against the
survivors of `make mutation MODULES=norms`, see tests/MUTATION.md)."""
import math

import numpy as np
import pytest

from bounds_lib.theory import norms
from bounds_lib.checks import norm_inequality_ratios


def test_numerical_rank_exactly_at_the_tolerance():
    # the cut is RANK_RTOL · len(σ) · max(σ₁, 1); a singular value equal to it is a numerical zero
    t = norms.RANK_RTOL * 2 * 1.0
    assert norms.rank_threshold([1.0, t]) == t
    assert norms.numerical_rank([1.0, t]) == 1
    assert norms.numerical_rank([1.0, t * (1 + 1e-9)]) == 2
    assert norms.schatten_power(np.array([1.0, t]), 0.0) == 1.0
    assert norms.schatten_powers(np.array([1.0, t]), np.array([0.0]))[0] == 1.0
    # below σ₁ = 1 the scale is 1, above it σ₁
    assert norms.rank_threshold([0.5, 0.0]) == norms.RANK_RTOL * 2
    assert norms.rank_threshold([10.0, 0.0, 0.0]) == norms.RANK_RTOL * 3 * 10.0


def test_schatten_powers_closed_forms():
    assert norms.schatten_powers([0.0, 0.0], [0.5, 2.0]).tolist() == [0.0, 0.0]
    assert np.allclose(norms.schatten_powers([4.0, 1.0, 0.0], [0.0, 0.5, 2.0]), [2.0, 3.0, 17.0])
    assert norms.validate_sigma([3, 1]).dtype == np.float64
    for bad, what in (([np.nan], "NaN"), ([2.5], "2.5, must be <= 2.0"), ([-0.1], "-0.1, must be >= 0.0")):
        with pytest.raises(ValueError, match=rf"^ps contains {what} "
                                             r"\(Schatten indices of the paper lie in \[0, 2\]\)$"):
            norms.schatten_powers([1.0], bad)
    with pytest.raises(ValueError, match=r"^ps must be a 1-D array of Schatten indices, got shape \(1, 1\)$"):
        norms.schatten_powers([1.0], [[1.0]])
    with pytest.raises(TypeError, match=r"^ps must be numeric, got a boolean array$"):
        norms.schatten_powers([1.0], [True])   # as schatten_power([1.0], True): a bool is never an index
    with pytest.raises(ValueError, match=r"^the Schatten quasi-norm S_p\^\{1/p\} is undefined at p = 0; use"
                                         r" numerical_rank$"):
        norms.schatten_quasinorm([1.0], 0.0)


def test_stable_rank_closed_forms():
    assert norms.stable_rank(np.zeros((2, 2))) == 0.0
    assert norms.stable_rank(np.diag([2.0, 0.0])) == 1.0
    assert norms.stable_rank(np.eye(2)) == 2.0
    assert np.isclose(norms.stable_rank(np.diag([2.0, 1.0])), 1.25)


def test_messages_name_the_argument():
    with pytest.raises(ValueError, match=r"^W must be a 2-D matrix"):
        norms.as_matrix(np.ones(3))
    with pytest.raises(ValueError, match=r"^Q must be a 2-D matrix"):
        norms.singular_values(np.ones(3), name="Q")
    with pytest.raises(ValueError, match=r"^W contains"):
        norms.singular_values([[np.nan]])
    with pytest.raises(ValueError, match=r"^Z must be a 2-D"):
        norms.norm_2_to_inf(np.ones(3))
    with pytest.raises(ValueError, match=r"^W cannot be converted to an array"):
        norms.as_matrix([[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError, match=r"^W must be a numeric array, got dtype object"):
        norms.as_matrix(np.array([[1, "a"]], dtype=object))
    with pytest.raises(ValueError, match=r"^W must be a numeric array, got dtype <U1"):
        norms.as_matrix(np.array([["a", "b"]]))
    with pytest.raises(ValueError, match=r"^W contains 2 NaN or infinite entries"):
        norms.as_matrix([[np.nan, 1.0, np.inf]])
    with pytest.raises(ValueError, match=r"^p \(a Schatten index of the paper, in \[0, 2\]\) == 3.0, must be <= 2.0$"):
        norms.validate_p(3.0)
    with pytest.raises(ValueError, match=r"^q \(a Schatten index"):
        norms.validate_p(-1.0, name="q")
    assert norms.validate_p(0) == 0.0 and norms.validate_p(2) == 2.0 and isinstance(norms.validate_p(1), float)
    with pytest.raises(ValueError, match=r"^sigma must be a 1-D"):
        norms.validate_sigma(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"^sigma contains inf, must be finite \(singular values are finite and >= 0"):
        norms.validate_sigma([np.inf])
    with pytest.raises(ValueError, match=r"^sigma is empty \(singular values are finite and >= 0; a matrix"
                                         r" has at least one\)$"):
        norms.validate_sigma([])
    with pytest.raises(TypeError, match=r"^s must be numeric"):
        norms.validate_sigma(True, name="s")
    with pytest.raises(ValueError, match=r"^W must be real; complex arrays"):
        norms.as_matrix(np.eye(2) * 1j)
    assert norms.as_matrix([[True, False]]).dtype == np.float64
    ints = norms.as_matrix([[1, 2], [3, 4]])  # integer matrices are numeric
    assert ints.dtype == np.float64 and ints.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_dudley_bound_linear_closed_form():
    from scipy.integrate import quad
    assert norms.dudley_bound_linear(100, 3, etas=[1.0]) == 4.0  # η = 1: no integral
    n, d = 400, 3
    expect = min(4 * e + 12 / np.sqrt(n) * quad(lambda t: np.sqrt(d * np.log1p(2 / t)), e, 1.0)[0]
                 for e in (0.25, 0.5))
    assert np.isclose(norms.dudley_bound_linear(n, d, etas=[0.25, 0.5]), expect, rtol=1e-12)
    grid = np.geomspace(1e-5, 1.0, 120)
    assert norms.dudley_bound_linear(n, d) == norms.dudley_bound_linear(n, d, etas=grid)
    for bad in ([], [0.0], [1.5], [np.nan]):
        with pytest.raises(ValueError, match=r"^etas (is empty|contains .*) \(cut-offs of Dudley's integral"
                                             r" lie in \(0, 1\]\)$"):
            norms.dudley_bound_linear(n, d, etas=bad)
    with pytest.raises(ValueError, match=r"^etas must be a 1-D array of cut-offs in \(0, 1\], got shape \(1, 1\)$"):
        norms.dudley_bound_linear(n, d, etas=[[0.5]])
    for args, name in (((0, 2), "n \\(number of points\\)"), ((2, 0), "d \\(dimension\\)")):
        with pytest.raises(ValueError, match=rf"^{name} == 0, must be >= 1$"):
            norms.dudley_bound_linear(*args)
    for args in ((True, 2), (2.0, 2), (2, 3.0)):   # a bool or a whole float is not a count: TypeError
        with pytest.raises(TypeError, match=r"must be an integer, got (bool|float)"):
            norms.dudley_bound_linear(*args)


def test_rademacher_linear_mc_is_the_formula():
    n, d, draws = 50, 3, 40
    r = np.random.default_rng(7)
    X = r.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    S = r.choice([-1.0, 1.0], size=(draws, n))
    expect = np.mean(np.linalg.norm(S @ X, axis=1)) / n
    assert norms.rademacher_linear_mc(np.random.default_rng(7), n, d, draws=draws) == pytest.approx(expect, rel=1e-15)
    assert isinstance(norms.rademacher_linear_mc(np.random.default_rng(7), 5, 2), float)
    for args, name in (((0, 2, 1), "n \\(number of points\\)"), ((2, 0, 1), "d \\(dimension\\)"), ((2, 2, 0), "draws")):
        with pytest.raises(ValueError, match=rf"^{name} == 0, must be >= 1$"):
            norms.rademacher_linear_mc(np.random.default_rng(0), *args)
    with pytest.raises(TypeError, match=r"^draws must be an integer, got float 2.0$"):
        norms.rademacher_linear_mc(np.random.default_rng(0), 2, 2, 2.0)


def test_chapter1_helpers_edges():
    assert norms.dudley_bound_linear(1, 1, etas=[1.0]) == 4.0  # n = d = 1 allowed
    assert norms.rademacher_linear_mc(np.random.default_rng(0), 1, 1, draws=1) == 1.0  # |ζ x| = 1
    # default draws = 200: the same numbers as an explicit draws=200
    assert norms.rademacher_linear_mc(np.random.default_rng(3), 20, 2) == \
        norms.rademacher_linear_mc(np.random.default_rng(3), 20, 2, draws=200)
    # n = 100, d = 3: the best cut-off is inside the default grid, so the grid (120 points) matters
    grid = np.geomspace(1e-5, 1.0, 120)
    vals = [norms.dudley_bound_linear(100, 3, etas=[e]) for e in grid]
    assert 0 < int(np.argmin(vals)) < 119 and norms.dudley_bound_linear(100, 3) == min(vals)
    # the ratios are scale-free (both sides homogeneous of the same degree), also below 1
    r1 = norm_inequality_ratios(np.diag([4.0, 1.0]))
    r2 = norm_inequality_ratios(np.diag([4.0, 1.0]) * 1e-3)
    assert all(np.isclose(r1[k], r2[k]) and r2[k] > 0 for k in r1)


def test_as_matrix_takes_torch_tensors_as_checkpoints_do():
    """One validation for the API and the checkpoint reader (bounds_lib.arrays): bf16 and
    requires_grad tensors are accepted (widened exactly), complex tensors refused."""
    torch = pytest.importorskip("torch")
    W = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16, requires_grad=True)
    A = norms.as_matrix(W)
    assert A.dtype == np.float64 and A.tolist() == [[1.5, -2.0], [0.25, 3.0]]
    with pytest.raises(ValueError, match=r"^W must be real"):
        norms.as_matrix(torch.zeros(2, 2, dtype=torch.complex64))


# ---- Dudley's bound for linear classes (Chapter 1) (moved from the harness tests, tests/test_checks.py) ----
def test_dudley_linear_scaling():
    from bounds_lib.theory import norms
    b = [norms.dudley_bound_linear(n, 4) for n in (1000, 100_000)]
    assert np.isclose(b[0] / b[1], 10, rtol=0.02)  # n^{-1/2}
    assert np.isclose(norms.dudley_bound_linear(100_000, 16) / b[1], 2, rtol=0.02)  # √d
    mc = norms.rademacher_linear_mc(np.random.default_rng(0), 400, 3)
    assert 0.8 / 20 < mc < 1 / 20 + 1e-3  # ≈ 1/√n
    with pytest.raises(ValueError):
        norms.dudley_bound_linear(0, 2)
    with pytest.raises(ValueError):
        norms.dudley_bound_linear(10, 2, etas=[0.0])
    with pytest.raises(TypeError):
        norms.rademacher_linear_mc(np.random.default_rng(0), 10, True)


def test_norms_of_extreme_matrices_are_computed_scaled():
    """Entries near 1e300 or 1e-170: the true values are within float64, so they are returned (the same
    value as the matrix scaled down by 2^k, then multiplied back) — not inf or NaN; a value truly beyond
    float64 is a ValueError, never inf."""
    import warnings

    rng = np.random.default_rng(3)
    W = rng.standard_normal((5, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings either
        for scale in (2.0**1000, 2.0**-560):
            big = W * scale  # exact: a power of two
            assert norms.frobenius_norm(big) == norms.frobenius_norm(W) * scale
            assert norms.norm_21(big) == norms.norm_21(W) * scale
            assert norms.norm_2_to_inf(big) == norms.norm_2_to_inf(W) * scale
            assert norms.stable_rank(big) == pytest.approx(norms.stable_rank(W), rel=1e-14)
        sigma = np.array([1e160, 1e159, 1e158])
        assert norms.stable_rank(np.diag(sigma)) == pytest.approx(1 + 1e-2 + 1e-4, rel=1e-14)
        assert norms.schatten_power([1e160, 1e160], 1.0) == 2e160
        assert norms.schatten_power([2.0**600, 2.0**600], 0.5) == 2 * 2.0**300
        huge = np.full((3, 3), 1e308)
        log_space = " exceeds the float64 range (about 1.8e308); compute it in log space"
        how = ": p·log σ₁ + log Σ(σ_i/σ₁)ᵖ"
        for f, args, what in (
                (norms.schatten_power, ([1e299, 1e300], 2), "S_p = Σσᵖ (p = 2, σ₁ = 1e+300)" + log_space + how),
                (norms.schatten_powers, ([1e300, 1e299], [0, 2]),
                 "S_p = Σσᵖ (σ₁ = 1e+300) exceeds the float64 range (about 1.8e308) for some p; compute it in "
                 "log space" + how),
                (norms.frobenius_norm, (huge,), "‖W‖_F" + log_space),
                (norms.norm_11, (huge,), "‖W‖_{1,1}" + log_space),
                (norms.norm_21, (huge,), "‖W‖_{2,1}" + log_space),
                (norms.norm_2_to_inf, (np.full((4, 4), 1e308),), "‖Z‖_{2→∞}" + log_space),  # √4 > 1.8
                (norms.nuclear_norm, (np.diag([1e308, 1e308]),), "‖W‖_*" + log_space)):
            with pytest.raises(ValueError) as err, warnings.catch_warnings():
                warnings.simplefilter("error")
                f(*args)
            assert str(err.value) == what
        # the scaling keeps the dtype (spectra scales float32 weights and computes in float32)
        from bounds_lib.theory.norms import _pow2_scaled

        for dtype in (np.float32, np.float64):
            A, e = _pow2_scaled((W * 2.0**40).astype(dtype))
            assert A.dtype == dtype and e == 40 + math.frexp(float(np.max(np.abs(W))))[1]
            assert 0.5 <= np.max(np.abs(A)) < 1

