"""The falsification harness itself (:mod:`bounds_lib.checks.harness`), exactly and fast: what each part passes
on, keeps and prints. The harness's power against the chapters' weakened bounds is tested in tests/test_checks.py;
here the optimiser is spied on, so a changed option, start or choice of the best point is seen directly."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize

from bounds_lib.checks import harness as H


# --- Falsification and CheckResult ---------------------------------------------------------------------


def test_a_ratio_exactly_at_the_tolerance_is_no_violation():
    f = H.Falsification("x", np.array([1.0 + H.VIOLATION_TOL, 0.2]), np.array([1.0 + 1.01 * H.VIOLATION_TOL]))
    assert f.violations == 1 and f.worst_random == 1.0 + H.VIOLATION_TOL
    assert H.VIOLATION_TOL == 1e-9  # the stated slack; and the optimisers' stopping tolerances, far below it
    assert (H.OPTIMISER_XTOL, H.OPTIMISER_FTOL, H.TINY_DENOMINATOR) == (1e-10, 1e-12, 1e-300)
    assert H.Falsification("y", np.array([0.5])).adversarial.shape == (0,)


def test_a_check_result_prints_one_exact_line_and_requires_every_claim():
    ok = H.CheckResult("lemma", (("a ≤ b", True), ("c ≤ d", True)))
    assert ok.holds and ok.failed == [] and ok.summary() == "lemma: 2 of 2 claims hold" == repr(ok)
    assert ok.require() is ok and ok.values == {} and ok.detail == ""
    bad = H.CheckResult("lemma", (("a ≤ b", True), ("c ≤ d", False), ("e ≤ f", 0)), detail="worst 1.2")
    assert not bad.holds and bad.failed == ["c ≤ d", "e ≤ f"]
    assert bad.summary() == "lemma: 1 of 3 claims hold; fails: c ≤ d; e ≤ f — worst 1.2"
    with pytest.raises(AssertionError) as e:
        bad.require()
    assert str(e.value) == bad.summary()
    assert H.CheckResult("n", (("one", 1), ("two", 2))).summary() == "n: 2 of 2 claims hold"  # truthy counts


def test_worst_ratios_lists_each_run_at_the_digits_asked():
    runs = {"a": H.Falsification("a", np.array([0.98123])),
            "b": H.Falsification("b", np.array([0.5]), np.array([1.25]))}
    assert H._worst_ratios(runs, 3) == "worst ratios a 0.981, b 1.250"
    assert H._worst_ratios(runs, 1) == "worst ratios a 1.0, b 1.2"


# --- _safe: a ratio made total -------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ValueError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError])
def test_a_raising_point_counts_as_zero(error):
    def ratio(x):
        raise error("no")

    assert H._safe(ratio)(np.ones(2)) == 0.0


@pytest.mark.parametrize("value, safe", [(float("nan"), 0.0), (math.inf, 0.0), (-math.inf, 0.0), (0.75, 0.75),
                                         (-2.0, -2.0)])
def test_only_finite_ratios_pass(value, safe):
    assert H._safe(lambda x: value)(np.ones(1)) == safe


def test_safe_passes_a_float64_array_and_lets_other_errors_through():
    seen = []
    H._safe(lambda x: seen.append(x) or 1.0)([1, 2])
    assert seen[0].dtype == np.float64 and seen[0].tolist() == [1.0, 2.0]
    with pytest.raises(KeyError):
        H._safe(lambda x: {}["k"])(np.ones(1))


# --- adversarial_search --------------------------------------------------------------------------------


@pytest.fixture
def minimize(monkeypatch):
    """SciPy's minimize, recording the method and options of every call."""
    calls = []
    real = scipy.optimize.minimize

    def spy(fun, x0, method=None, options=None):
        calls.append((method, dict(options), np.array(x0)))
        return real(fun, x0, method=method, options=options)

    monkeypatch.setattr(scipy.optimize, "minimize", spy)
    return calls


def test_nelder_mead_and_powell_get_their_own_tolerances_and_the_iterations(minimize):
    H.adversarial_search(lambda x: -float(x @ x), np.ones((1, 2)), maxiter=7)
    H.adversarial_search(lambda x: -float(x @ x), np.ones((1, 2)), maxiter=9, method="Powell")
    assert [(m, o) for m, o, _ in minimize] == [
        ("Nelder-Mead", {"maxiter": 7, "xatol": 1e-10, "fatol": 1e-12, "adaptive": True}),
        ("Powell", {"maxiter": 9, "xtol": 1e-10, "ftol": 1e-12})]


def test_the_default_is_nelder_mead_with_400_iterations(minimize):
    H.adversarial_search(lambda x: 0.0, np.zeros((1, 1)))
    assert minimize[0][0] == "Nelder-Mead" and minimize[0][1]["maxiter"] == 400


def test_every_start_is_searched_and_the_best_point_of_the_best_start_returned(minimize):
    # two peaks: 1 at x = 2 (reached from 1.5), 0.5 at x = -2 (reached from -1.5)
    ratio = lambda x: max(1.0 - (x[0] - 2) ** 2, 0.5 - (x[0] + 2) ** 2)  # noqa: E731
    best, x = H.adversarial_search(ratio, [[-1.5], [1.5], [-1.6]])
    assert [s[2].tolist() for s in minimize] == [[-1.5], [1.5], [-1.6]]
    np.testing.assert_allclose(best, [0.5, 1.0, 0.5], atol=1e-9)
    np.testing.assert_allclose(x, [2.0], atol=1e-5)
    best, x = H.adversarial_search(ratio, [[1.5], [-1.5]])  # the best first: kept over a later, lower one
    np.testing.assert_allclose(x, [2.0], atol=1e-5)


def test_a_start_better_than_where_the_optimiser_ends_is_kept(monkeypatch):
    # an optimiser that walks away: the start's own ratio and the start itself are returned
    monkeypatch.setattr(scipy.optimize, "minimize",
                        lambda fun, x0, method, options: scipy.optimize.OptimizeResult(x=x0 + 5, fun=fun(x0 + 5)))
    best, x = H.adversarial_search(lambda x: 1.0 / (1.0 + float(x @ x)), [[0.0, 0.0]])
    assert best.tolist() == [1.0] and x.tolist() == [0.0, 0.0]
    # and one that ends exactly level with the start returns where it ended
    monkeypatch.setattr(scipy.optimize, "minimize",
                        lambda fun, x0, method, options: scipy.optimize.OptimizeResult(x=-x0, fun=fun(-x0)))
    best, x = H.adversarial_search(lambda x: float(x @ x), [[1.0, 2.0]])
    assert best.tolist() == [5.0] and x.tolist() == [-1.0, -2.0]
    # integer starts are searched, and returned, as float64 points
    best, x = H.adversarial_search(lambda x: 1.0 / (1.0 + float(x @ x)) if x.dtype == np.float64 else -1.0, [[0, 0]])
    assert best.tolist() == [1.0] and x.dtype == np.float64


def test_of_starts_that_tie_the_first_is_returned(monkeypatch):
    monkeypatch.setattr(scipy.optimize, "minimize",
                        lambda fun, x0, method, options: scipy.optimize.OptimizeResult(x=x0 + 5, fun=fun(x0 + 5)))
    best, x = H.adversarial_search(lambda x: 1.0, [[0.0], [1.0], [2.0]])
    assert best.tolist() == [1.0, 1.0, 1.0] and x.tolist() == [5.0]


def test_one_start_may_be_a_vector_and_bad_arguments_are_named():
    best, x = H.adversarial_search(lambda x: -abs(x[0] - 1), [0.0])
    assert best.shape == (1,) and abs(x[0] - 1) < 1e-6
    for starts in (np.zeros((0, 2)), np.zeros((2, 0))):
        with pytest.raises(ValueError, match=r"starts must have shape \(k, d\) with k, d >= 1, got"):
            H.adversarial_search(lambda x: 0.0, starts)
    with pytest.raises(ValueError, match=r"^maxiter == 0, must be >= 1$"):
        H.adversarial_search(lambda x: 0.0, np.zeros((1, 1)), maxiter=0)
    assert H.adversarial_search(lambda x: 0.0, np.zeros((1, 1)), maxiter=1)[0].shape == (1,)
    with pytest.raises(ValueError, match=r"method must be 'Nelder-Mead' or 'Powell' \(derivative-free\), got 'BFGS'"):
        H.adversarial_search(lambda x: 0.0, np.zeros((1, 1)), method="BFGS")


# --- falsify and power_check ---------------------------------------------------------------------------


def test_falsify_starts_the_search_from_the_best_draws_in_order(monkeypatch):
    draws = iter([[0.1], [0.9], [0.5], [0.7]])
    seen = {}

    def search(ratio, starts, maxiter, method):
        seen.update(starts=starts.tolist(), maxiter=maxiter, method=method)
        return np.array([0.95, 0.8]), None

    monkeypatch.setattr(H, "adversarial_search", search)
    f = H.falsify("id", lambda x: x[0], lambda r: next(draws), None, trials=4, restarts=2, maxiter=11, method="Powell")
    assert seen == {"starts": [[0.9], [0.7]], "maxiter": 11, "method": "Powell"}
    assert f.name == "id" and f.ratios.tolist() == [0.1, 0.9, 0.5, 0.7] and f.adversarial.tolist() == [0.95, 0.8]


def test_falsify_defaults_and_no_search_without_restarts(monkeypatch):
    seen = {}
    monkeypatch.setattr(H, "adversarial_search",
                        lambda ratio, starts, maxiter, method: seen.update(k=len(starts), maxiter=maxiter,
                                                                           method=method) or (np.zeros(8), None))
    f = H.falsify("d", lambda x: float(x[0]), lambda r: r.uniform(size=1), np.random.default_rng(0))
    assert f.trials == 2000 and seen == {"k": 8, "maxiter": 400, "method": "Nelder-Mead"}
    seen.clear()
    f = H.falsify("d", lambda x: float(x[0]), lambda r: [float("nan")], np.random.default_rng(0), trials=3, restarts=0)
    assert seen == {} and f.adversarial.shape == (0,) and f.ratios.tolist() == [0.0, 0.0, 0.0]  # NaN counts as 0
    with pytest.raises(ValueError, match=r"^restarts == -1, must be >= 0$"):
        H.falsify("d", lambda x: 0.0, lambda r: [0.0], np.random.default_rng(0), restarts=-1)
    with pytest.raises(TypeError, match=r"^trials must be an integer"):
        H.falsify("d", lambda x: 0.0, lambda r: [0.0], np.random.default_rng(0), trials=2.5)
    with pytest.raises(ValueError, match=r"^trials == 0, must be >= 1$"):  # refused, not an empty result
        H.falsify("d", lambda x: 0.0, lambda r: [0.0], np.random.default_rng(0), trials=0, restarts=0)
    assert H.falsify("d", lambda x: 0.25, lambda r: [0.0], np.random.default_rng(0), trials=1, restarts=0).trials == 1


def test_power_check_messages_name_the_bound_and_the_worst_ratio():
    f = lambda w: H.Falsification(f"b÷{w:g}", np.array([0.9 * w]))  # noqa: E731
    proved, weak = H.power_check(f, 1.25)
    assert (proved.name, weak.name) == ("b÷1", "b÷1.25")
    with pytest.raises(AssertionError) as e:
        H.power_check(f, 1.1)
    assert str(e.value) == "b÷1.1: no violation of the weakened bound (worst ratio 0.99); the harness has no power"
    with pytest.raises(AssertionError) as e:
        H.power_check(lambda w: H.Falsification("b", np.array([1.5 * w])), 2.0)
    assert str(e.value) == "b: the proved bound is violated (worst ratio 1.5)"


# --- the shared samplers ------------------------------------------------------------------------------


def test_spectral_scales_a_normal_matrix_to_the_norm_asked():
    A = H._spectral(np.random.default_rng(3), (4, 6), 2.5)
    B = np.random.default_rng(3).standard_normal((4, 6))
    assert A.shape == (4, 6) and abs(np.linalg.norm(A, 2) - 2.5) < 1e-12
    np.testing.assert_allclose(A, 2.5 * B / np.linalg.norm(B, 2), rtol=1e-15)


@pytest.mark.parametrize("x, y", [(0.0, 0.5), (2.0, 1 / (1 + math.exp(-2))), (-3.0, 1 / (1 + math.exp(3))),
                                  (1e6, 1.0), (-1e6, 1 / (1 + math.exp(700))), (700.0, 1 / (1 + math.exp(-700)))])
def test_sigmoid_is_clipped_at_700(x, y):
    assert H._sigmoid(x) == y and 0.0 < H._sigmoid(-1e6) < 1e-300
