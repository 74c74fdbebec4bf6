import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bounds_lib.theory.norms import schatten_power
from bounds_lib.theory.peeling import (PosthocChoice, aggregate_rss, aggregate_sum, grid_resolution, log_term,
                                posthoc_choice, posthoc_grid, round_up_to_grid, rounding_cost_bound, shell_index,
                                shell_log_weight, union_bound_log_count, uniformity_penalty)


def test_grid():
    assert grid_resolution(12, 768) == math.ceil(12 + math.log(768))
    assert grid_resolution(1, 1) == math.ceil(1 + math.log(2))
    g = posthoc_grid(2, 4)
    m = grid_resolution(2, 4)
    assert g.size == 2 * m + 1 and g[0] == 0 and g[-1] == 2 and np.allclose(np.diff(g), 1 / m)


def test_log_term_closed_forms():
    # p = 0: sqrt(rank * N); p = 2: ||W||_F^{1/2} K^{1/2} N^{3/4}
    assert np.isclose(log_term(np.log(4.0), 0.0, 123.0, 9), 0.5 * np.log(36))
    assert np.isclose(log_term(np.log(16.0), 2.0, np.log(9.0), 16), np.log(2 * 3 * 8))
    v = log_term(np.zeros(3), np.array([0.0, 1.0, 2.0]), 0.0, 1)
    assert v.shape == (3,) and np.allclose(v, 0)


def test_posthoc_choice_first_argmin_and_modes():
    s = np.array([2.0, 1.0, 1e-15, 1e-15])
    g = posthoc_grid(2, 4)
    paper, clean = posthoc_choice(s, 3.0, 4, g), posthoc_choice(s[:2], 3.0, 4, g)
    assert isinstance(paper, PosthocChoice)
    assert paper.p_star == g[np.argmin(paper.log_T)] and paper.log_T_star == paper.log_T.min()
    assert np.all(paper.log_T >= clean.log_T - 1e-12)  # numerical zeros inflate small-p terms
    assert np.isclose(clean.log_T[0], 0.5 * np.log(2 * 4))
    flat = posthoc_choice(np.ones(1), 0.0, 1, np.array([0.0, 1.0, 2.0]))
    assert flat.p_star == 0.0  # ties broken by the first grid point, as released


@given(st.lists(st.floats(1e-3, 10.0), min_size=1, max_size=6), st.floats(-5, 20), st.integers(1, 64))
def test_posthoc_equals_min_of_log_term(sig, logK, N):
    g = posthoc_grid(3, N)
    c = posthoc_choice(np.array(sig), logK, N, g)
    direct = [log_term(np.log(schatten_power(np.array(sig), p)), p, logK, N) for p in g]
    assert np.allclose(c.log_T, direct) and c.log_T_star <= min(direct) + 1e-12


def test_aggregations():
    a = np.log([1.0, 2.0, 3.0])
    assert np.isclose(aggregate_sum(a, 4), np.log(6 + 2))
    assert np.isclose(aggregate_rss(a, 4), np.log(np.sqrt(14) + 2))
    big = np.full(4 * 1000, 1000.0)  # 1000 layers, terms e^{1000}: finite in log space
    assert np.isfinite(aggregate_sum(big, 1000)) and np.isfinite(aggregate_rss(big, 1000))


@given(st.lists(st.floats(-30, 30), min_size=1, max_size=20), st.integers(1, 50))
def test_rss_at_most_sum(a, L):
    assert aggregate_rss(a, L) <= aggregate_sum(a, L) + 1e-12


@given(st.floats(0.001, 2.0), st.integers(1, 40), st.lists(st.floats(1e-3, 20.0), min_size=1, max_size=8),
       st.floats(-10, 40), st.integers(1, 1000))
def test_rounding_cost_bound_holds(p, m, sig, logK, N):
    s = np.sort(np.array(sig))[::-1]
    q = float(round_up_to_grid(p, m))
    lS = np.log(schatten_power(s, p))
    diff = log_term(np.log(schatten_power(s, q)), q, logK, N) - log_term(lS, p, logK, N)
    assert diff <= rounding_cost_bound(q - p, p, s[0], lS, logK, N) + 1e-9
    assert 0 <= q - p <= 1 / m + 1e-12


def test_shells_and_penalty():
    assert shell_index(1.0) == 0 and shell_index(3.0) == 2 and shell_index(0.3) == -1
    js = np.arange(-2000, 2001)
    assert abs(np.exp(shell_log_weight(js)).sum() - 1) < 1e-3
    m = grid_resolution(4, 128)
    assert np.isclose(union_bound_log_count(4, 128), 12 * math.log(2 * m + 1))
    assert union_bound_log_count(4, 128, shell_indices=[0, 3]) > union_bound_log_count(4, 128)
    assert uniformity_penalty(4, 128, 10**6) < uniformity_penalty(4, 128, 10**3)


@pytest.mark.parametrize("call", [
    lambda: grid_resolution(0, 4), lambda: grid_resolution(2, 0),
    lambda: log_term(0.0, 2.5, 0.0, 4), lambda: log_term(0.0, -0.1, 0.0, 4), lambda: log_term(0.0, np.nan, 0.0, 4),
    lambda: log_term(np.nan, 1.0, 0.0, 4), lambda: posthoc_choice([1.0], np.nan, 4, [0.0]),
    lambda: posthoc_choice([1.0], 0.0, 4, [3.0]), lambda: aggregate_sum([np.nan], 2),
    lambda: aggregate_rss([0.0], 0), lambda: uniformity_penalty(2, 4, 0), lambda: uniformity_penalty(2, 4, 10, 1.5),
    lambda: shell_index(0.0),
])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("call, pattern", [
    (lambda: grid_resolution(3.0, 8), r"^L \(number of layers\) must be an integer, got float 3.0$"),
    (lambda: grid_resolution(1.5, 4), r"^L \(number of layers\) must be an integer, got float 1.5$"),
    (lambda: grid_resolution(2, 8.0), r"^N \(hidden size\) must be an integer, got float 8.0$"),
    (lambda: grid_resolution(True, 4), r"^L \(number of layers\) must be an integer, got bool True$"),
    (lambda: grid_resolution("3", 4), r"^L \(number of layers\) must be an integer, got str '3'$"),
    (lambda: posthoc_choice([1.0], True, 4, [0.0]), r"^log_K must be a real number, got bool True$"),
    (lambda: log_term(0.0, True, 0.0, 4), r"^p must be numeric, got bool True$"),
    (lambda: shell_top(2.0, True),
     r"^shell ratio \(2 for dyadic shells, 1 \+ 1/L for geometric ones\) must be a real number"),
    (lambda: shell_top(2.0, "2"), r"^shell ratio .* must be a real number, got str '2'$"),
    (lambda: uniformity_penalty(2, 4, 10, True), r"^delta \(the confidence level\) must be a real number, got bool"),
    (lambda: uniformity_penalty(2, 4, 10, "0.5"), r"^delta \(the confidence level\) must be a real number, got str"),
    (lambda: uniformity_penalty(2, 4, 10.0), r"^n \(sample size\) must be an integer, got float 10.0$"),
    (lambda: round_up_to_grid(0.5, 4.0), r"^m \(grid resolution\) must be an integer, got float 4.0$"),
    (lambda: aggregate_rss([0.0], 2.0), r"^L \(number of layers\) must be an integer, got float 2.0$"),
])
def test_wrong_types_are_type_errors(call, pattern):
    """One rule everywhere (bounds_lib.core.validation): grid_resolution(3.0, 8) refuses a float like
    log_scale_K(0, 0, 2.0) does; a bool is never a number."""
    with pytest.raises(TypeError, match=pattern):
        call()


@given(st.lists(st.one_of(st.floats(-800, 800), st.just(-np.inf)), min_size=1, max_size=20))
def test_logsumexp_equals_scipys(xs):
    """The hand-written log-sum-exp (kept for bit-identical outputs, see its docstring) and SciPy's agree
    to a few units in the last place, -inf entries and both axes included."""
    from scipy.special import logsumexp as scipy_lse

    from bounds_lib.theory.peeling import logsumexp

    ours, ref = logsumexp(xs), float(scipy_lse(xs))
    assert isinstance(ours, float)
    if ref == -np.inf:
        assert ours == -np.inf and all(x == -np.inf for x in xs)
    else:
        assert ours == pytest.approx(ref, rel=4e-16 * len(xs), abs=4e-16 * len(xs))
    A = np.array([xs, xs[::-1], [-np.inf] * len(xs)])
    for axis in (0, 1):
        np.testing.assert_allclose(logsumexp(A, axis=axis), scipy_lse(A, axis=axis),
                                   rtol=4e-16 * A.shape[axis], atol=4e-16 * A.shape[axis])


def test_logsumexp_edge_cases_against_scipy():
    from scipy.special import logsumexp as scipy_lse

    from bounds_lib.theory.peeling import logsumexp

    assert logsumexp([-np.inf, -np.inf]) == scipy_lse([-np.inf, -np.inf]) == -np.inf
    assert logsumexp([np.inf, 1.0]) == scipy_lse([np.inf, 1.0]) == np.inf
    assert logsumexp([700.0, 700.0]) == pytest.approx(float(scipy_lse([700.0, 700.0])), rel=1e-15)
    # empty input: SciPy returns log 0 = -inf; ours raises (the aggregations treat "no matrix" themselves)
    assert scipy_lse([]) == -np.inf
    with pytest.raises(ValueError, match="zero-size array"):
        logsumexp([])
    assert aggregate_sum([], 4) == pytest.approx(math.log(2.0)) and aggregate_rss([], 9) == pytest.approx(math.log(3.0))
    # the last bits may differ (why the book keeps its own, to keep its outputs): inputs where they do
    for x in ([0.0, -1.0, -2.5, -3.0], [1.0, 2.0, 3.0]):
        assert logsumexp(x) != float(scipy_lse(x)) and logsumexp(x) == pytest.approx(float(scipy_lse(x)), rel=1e-15)


# ---- shells of the radii (Chapter 4, ch04-lem-shells) ----
from bounds_lib.theory.peeling import geometric_ratio, log_alpha_inflation, shell_top, shell_union_cost  # noqa: E402


def test_shell_index_exact_powers_and_ratio():
    rho = geometric_ratio(12)
    assert rho == 1 + 1 / 12
    for j in range(-40, 41):
        top = np.power(rho, float(j))
        assert shell_index(top, rho) == j                # a radius equal to ρ^j is in shell j
        assert shell_index(np.nextafter(top, np.inf), rho) == j + 1
    r = np.geomspace(1e-3, 1e3, 500)
    t = shell_top(r, rho)
    assert np.all(t >= r) and np.all(t < rho * r)       # ρ^{j-1} < r ≤ ρ^j
    assert shell_top(3.0) == 4.0 and shell_top(0.3) == 0.5
    with pytest.raises(ValueError):
        shell_index(1.0, ratio=1.0)


def test_shell_union_cost_closed_form():
    # shell j = 0 has weight 2/(3·1·2) = 1/3; shell ±5 has weight 2/(3·6·7)
    assert np.isclose(shell_union_cost([1.0]), np.log(3))
    assert np.isclose(shell_union_cost([32.0, 1 / 32]), 2 * np.log(3 * 6 * 7 / 2))
    rho = geometric_ratio(10)
    j = shell_index(2.0, rho)
    assert np.isclose(shell_union_cost([2.0], rho), np.log(1.5 * (j + 1) * (j + 2)))
    m = grid_resolution(4, 128)
    assert np.isclose(union_bound_log_count(4, 128, radii=[1.0, 1.0]), 12 * math.log(2 * m + 1) + 2 * np.log(3))
    with pytest.raises(ValueError):
        union_bound_log_count(4, 128, shell_indices=[0], radii=[1.0])


def test_alpha_inflation_closed_form_and_bound():
    # all norms equal to 3: dyadic top 4; Λ = C_M C_V (1+2C_QK) → (4·4·9)/(3·3·7) per layer after layer 0
    L = 5
    c = np.full(L, 3.0)
    assert np.isclose(log_alpha_inflation(c, c, c, 2.0), (L - 1) * np.log(16 * 9 / (9 * 7)))
    assert log_alpha_inflation(np.ones(L), np.ones(L), np.ones(L), 2.0) == 0.0   # radii on shell tops
    rng = np.random.default_rng(1)
    x = np.exp(rng.uniform(-1, 2, (200, 3, L)))
    rho = geometric_ratio(L)
    v = log_alpha_inflation(x[:, 0], x[:, 1], x[:, 2], rho)
    assert v.shape == (200,) and np.all(v >= 0) and np.all(v <= 3 * (L - 1) * np.log(rho) + 1e-12)


# ---- closed forms, exact messages, defaults (kill the mutants of `make mutation MODULES=peeling`) ----
def test_messages_name_the_parameter():
    with pytest.raises(ValueError, match=r"^L \(number of layers\) == 0, must be >= 1$"):
        grid_resolution(0, 4)
    with pytest.raises(ValueError, match=r"^N \(hidden size\) == 0, must be >= 1$"):
        grid_resolution(2, 0)
    with pytest.raises(ValueError, match=r"^p contains 2.5, must be <= 2.0 \(Schatten indices of the paper"
                                         r" lie in \[0, 2\]\)$"):
        log_term(0.0, 2.5, 0.0, 4)
    with pytest.raises(ValueError, match=r"^log_S contains NaN \(finite, or -inf for a zero matrix\)$"):
        log_term(np.nan, 1.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^log_K contains inf, must be finite \(it is floored at the log"
                                         r" of the smallest float\)$"):
        log_term(0.0, 1.0, np.inf, 4)
    with pytest.raises(ValueError, match=r"^log_K == inf, must be finite$"):
        posthoc_choice([1.0], np.inf, 4, [0.0])
    with pytest.raises(ValueError, match=r"^log_K is NaN"):
        posthoc_choice([1.0], np.nan, 4, [0.0])
    with pytest.raises(ValueError, match=r"^grid must be a non-empty 1-D array"):
        posthoc_choice([1.0], 0.0, 4, [])
    with pytest.raises(ValueError, match=r"^log_T_stars contains inf, must be finite$"):
        aggregate_sum([np.inf], 2)
    with pytest.raises(ValueError, match=r"^m \(grid resolution\) == 0, must be >= 1$"):
        round_up_to_grid(0.5, 0)
    with pytest.raises(ValueError, match=r"^delta \(the rounding step\) contains -1.0, must be >= 0.0$"):
        rounding_cost_bound(-1.0, 0.5, 1.0, 0.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^sigma_1 \(the largest singular value\) contains 0.0, must be > 0.0$"):
        rounding_cost_bound(0.1, 0.5, 0.0, 0.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^r contains -1.0, must be > 0.0 \(a radius must be positive and"
                                         r" finite to have a shell\)$"):
        shell_index(-1.0)
    with pytest.raises(ValueError, match=r"^shell ratio \(2 for dyadic shells, 1 \+ 1/L for geometric"
                                         r" ones\) == 1.0, must be > 1.0$"):
        shell_top(2.0, 1.0)
    with pytest.raises(ValueError, match=r"^n \(sample size\) == 0, must be >= 1$"):
        uniformity_penalty(2, 4, 0)
    with pytest.raises(ValueError, match=r"^delta \(the confidence level\) == 1.5, must be < 1.0$"):
        uniformity_penalty(2, 4, 10, 1.5)
    with pytest.raises(ValueError, match=r"^matrices_per_layer == 0, must be >= 1$"):
        union_bound_log_count(2, 4, matrices_per_layer=0)


def test_uniformity_penalty_closed_form():
    m = grid_resolution(4, 128)
    assert m == math.ceil(4 + math.log(128))
    want = math.sqrt((12 * math.log(2 * m + 1) + math.log(20)) / 2000)
    assert uniformity_penalty(4, 128, 1000) == pytest.approx(want, rel=1e-14)           # δ = 0.05 by default
    want5 = math.sqrt((4 * 5 * math.log(2 * m + 1) + math.log(10)) / 2000)
    assert uniformity_penalty(4, 128, 1000, delta=0.1, matrices_per_layer=5) == pytest.approx(want5, rel=1e-14)
    with_r = math.sqrt((12 * math.log(2 * m + 1) + 2 * math.log(3) + math.log(20)) / 2000)
    assert uniformity_penalty(4, 128, 1000, radii=[1.0, 1.0]) == pytest.approx(with_r, rel=1e-14)
    rho = 1.5
    j = shell_index(7.0, rho)
    cost = math.log(1.5 * (j + 1) * (j + 2))
    assert union_bound_log_count(4, 128, radii=[7.0], ratio=rho) == pytest.approx(12 * math.log(2 * m + 1) + cost)
    assert union_bound_log_count(4, 128, radii=[7.0]) == pytest.approx(
        12 * math.log(2 * m + 1) + shell_union_cost([7.0], geometric_ratio(4)))
    assert grid_resolution(1, 1) == 2 and grid_resolution(1, 2) == 2 and grid_resolution(1, 3) == 3


def test_posthoc_grid_exact_and_aggregation_edges():
    g = posthoc_grid(1, 1)
    assert g.dtype == np.float64 and g.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert aggregate_sum([], 4) == pytest.approx(math.log(2)) and aggregate_rss([], 9) == pytest.approx(math.log(3))
    assert aggregate_sum([-np.inf], 1) == 0.0
    assert aggregate_rss(np.log([3.0, 4.0]), 1) == pytest.approx(math.log(6.0))


def test_logsumexp_axes_and_infinities():
    from bounds_lib.theory.peeling import logsumexp
    A = np.log(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    assert logsumexp(A) == pytest.approx(math.log(21))
    np.testing.assert_allclose(logsumexp(A, axis=0), np.log([5.0, 7.0, 9.0]))
    np.testing.assert_allclose(logsumexp(A, axis=1), np.log([6.0, 15.0]))
    np.testing.assert_array_equal(logsumexp(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]), axis=1), [-np.inf, 0.0])
    assert isinstance(logsumexp([1.0, 2.0]), float)
    assert logsumexp([1000.0, 1000.0]) == pytest.approx(1000 + math.log(2))


def test_round_up_to_grid_exact():
    np.testing.assert_array_equal(round_up_to_grid(np.array([0.0, 0.1, 0.5, 0.51, 1.99, 2.0]), 2),
                                  [0.0, 0.5, 0.5, 1.0, 2.0, 2.0])
    assert round_up_to_grid(1 / 3, 3) == pytest.approx(1 / 3)      # a grid point stays put despite rounding error


def test_rounding_cost_bound_closed_form():
    # δ[log⁺σ₁/2 + log⁻S_p/4 + |2 log K + log N|/4] with σ₁ = e², S_p = e^{-4}, log K = 1, N = e^0
    assert rounding_cost_bound(0.5, 1.0, math.e**2, -4.0, 1.0, 1) == pytest.approx(0.5 * (1 + 1 + 0.5))
    assert rounding_cost_bound(0.5, 1.0, math.e**-2, 4.0, -3.0, 1) == pytest.approx(0.5 * (0 + 0 + 1.5))


def test_log_alpha_inflation_shapes_and_constants():
    c = np.full(4, 3.0)
    # softmax constant and L_phi: L_phi cancels; c enters through (1 + 2c·C_QK)
    v1 = log_alpha_inflation(c, c, c, 2.0, L_phi=1.13, softmax_const=2.0)
    assert v1 == pytest.approx(3 * np.log(16 * 17 / (9 * 13)))
    assert log_alpha_inflation(c, c, c, 2.0) == pytest.approx(3 * np.log(16 * 9 / (9 * 7)))   # defaults c = 1
    with pytest.raises(ValueError, match="must have one shape"):
        log_alpha_inflation(c, c, c[:3], 2.0)
    two = log_alpha_inflation(np.stack([c, 2 * c]), np.stack([c, 2 * c]), np.stack([c, 2 * c]), 2.0)
    assert two.shape == (2,)


def test_more_messages_and_rejections():
    from bounds_lib.theory.peeling import rounding_cost_bound as rcb
    with pytest.raises(ValueError, match=r"^N \(hidden size\) == 0, must be >= 1$"):
        log_term(0.0, 1.0, 0.0, 0)
    with pytest.raises(ValueError, match=r"^N \(hidden size\) == 0, must be >= 1$"):
        rcb(0.1, 0.5, 1.0, 0.0, 0.0, 0)
    with pytest.raises(ValueError, match=r"^L \(number of layers\) == 0, must be >= 1$"):
        aggregate_sum([0.0], 0)
    with pytest.raises(ValueError, match=r"^L \(number of layers\) == 0, must be >= 1$"):
        geometric_ratio(0)
    with pytest.raises(ValueError, match=r"^give shell_indices or radii, not both$"):
        union_bound_log_count(4, 128, shell_indices=[0], radii=[1.0])
    with pytest.raises(ValueError, match=r"^delta \(the rounding step\) contains NaN$"):
        rcb(np.nan, 0.5, 1.0, 0.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^sigma_1 \(the largest singular value\) contains NaN$"):
        rcb(0.1, 0.5, np.nan, 0.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^log_S contains inf, must be finite \(finite, or -inf for a zero matrix\)$"):
        log_term(np.inf, 1.0, 0.0, 4)
    with pytest.raises(ValueError, match=r"^log_K contains NaN \(it is floored at the log of the smallest float\)$"):
        log_term(0.0, 1.0, np.nan, 4)
    with pytest.raises(ValueError, match=r"^r contains inf, must be finite \(a radius must be positive and finite"):
        shell_index(np.inf)
    with pytest.raises(ValueError, match=r"^grid must be a non-empty 1-D array of p values in \[0, 2\]$"):
        posthoc_choice([1.0], 0.0, 4, [])
    with pytest.raises(ValueError, match=r"^p contains 2.5, must be <= 2.0"):
        log_term(0.0, np.array([0.0, 0.5, 2.0, 2.5]), 0.0, 4)        # the first bad value is reported
    # values out of range (booleans and non-numbers: test_wrong_types_are_type_errors)
    for call in [lambda: shell_top(2.0, math.inf), lambda: uniformity_penalty(2, 4, 10, 0.0),
                 lambda: uniformity_penalty(2, 4, 10, 1.0)]:
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match=r"must have one shape"):
        log_alpha_inflation(np.ones(3), np.ones(4), np.ones(4), 2.0)
    with pytest.raises(ValueError, match=r"must have one shape"):
        log_alpha_inflation(np.ones(4), np.ones(3), np.ones(4), 2.0)


def test_return_types_and_shapes():
    from bounds_lib.theory.peeling import logsumexp
    assert isinstance(log_term(0.0, 1.0, 0.0, 4), float)
    assert isinstance(shell_index(3.0), int) and shell_index(np.array([1.0, 3.0])).dtype.kind == "i"
    assert isinstance(shell_top(3.0), float)
    assert isinstance(log_alpha_inflation(np.full(3, 3.0), np.full(3, 3.0), np.full(3, 3.0), 2.0), float)
    assert logsumexp(np.zeros((1, 3)), axis=1).shape == (1,)
    rows = np.array([[0.0, 0.0], [-1000.0, -1000.0]])       # rows of very different scale: max per row
    np.testing.assert_allclose(logsumexp(rows, axis=1), [math.log(2), -1000 + math.log(2)])
    g = posthoc_grid(2, 4)
    c = posthoc_choice([2.0, 1.0], 1.0, 4, g)
    np.testing.assert_array_equal(c.grid, g)
    assert uniformity_penalty(4, 128, 1000, shell_indices=[0, 3]) > uniformity_penalty(4, 128, 1000)
    m = grid_resolution(4, 128)
    want = math.sqrt((12 * math.log(2 * m + 1) + shell_union_cost([7.0], 1.5) + math.log(20)) / 2000)
    assert uniformity_penalty(4, 128, 1000, radii=[7.0], ratio=1.5) == pytest.approx(want, rel=1e-14)




# ---- written against the survivors of `make mutation MODULES=peeling MUTATION_FLAGS=--bounds-only` ----

def test_each_check_names_its_argument():
    from bounds_lib.theory.peeling import log_alpha_inflation, shell_index

    p_range = r"must be <= 2.0 \(Schatten indices of the paper lie in \[0, 2\]\)$"
    for call, pattern in [
        (lambda: posthoc_choice([1.0], 0.0, 4, [0.0, 2.5]), r"^grid contains 2.5, " + p_range),
        (lambda: round_up_to_grid(2.5, 4), r"^p contains 2.5, " + p_range),
        (lambda: rounding_cost_bound(0.1, 2.5, 1.0, 0.0, 0.0, 4), r"^p contains 2.5, " + p_range),
        (lambda: aggregate_rss([np.nan], 2), r"^log_T_stars contains NaN$"),
        (lambda: shell_index(2.0, 1.0), r"^shell ratio \(2 for dyadic shells, 1 \+ 1/L for geometric ones\) == 1.0"),
        (lambda: log_alpha_inflation(np.ones(3), np.ones(3), np.ones(3), 0.5), r"^shell ratio \(2 for dyadic"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            call()


def test_minus_infinity_is_a_valid_log_and_scalars_are_floats():
    assert log_term(-np.inf, 1.0, 0.0, 4) == -np.inf          # log S_p of a zero matrix
    assert aggregate_rss([-np.inf, 0.0], 4) == pytest.approx(math.log(3.0))   # √(0 + 1) + √4
    assert type(log_term(0.0, 1.0, 0.0, 4)) is float and type(shell_top(3.0)) is float


def test_zero_logs_raise_no_warning():
    import warnings

    from bounds_lib.theory.peeling import logsumexp

    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # log 0 = -inf is expected, not warned
        assert logsumexp([-np.inf, -np.inf]) == -np.inf
        c = posthoc_choice([0.0, 0.0], 0.0, 4, [0.0, 1.0])     # S_1 = 0: log S_1 = -inf
        assert c.log_T[1] == -np.inf

