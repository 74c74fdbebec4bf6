"""Chapter 1's falsification of the norm inequalities, seen from inside and fast: what it draws, what it asks the
optimiser, and what it returns (:func:`bounds_lib.checks.ch1_norms.falsify_norm_inequalities`). Its power against
the weakened inequalities is tested in tests/test_checks.py (a 30 s search); here the ratio and the search are
recorded, so each part of the harness's call is seen directly."""
from __future__ import annotations

import numpy as np
import pytest

from bounds_lib.checks import ch1_norms as CH1
from bounds_lib.theory.norms import NORM_INEQUALITIES
from recording import Recording


@pytest.fixture
def recorded(monkeypatch):
    """The matrices ``norm_inequality_ratios`` sees and the calls of ``adversarial_search``."""
    seen = {"W": [], "search": []}
    real = CH1.norm_inequality_ratios

    def ratios(W, weaken=1.0, names=None):
        seen["W"].append((np.array(W), weaken))
        return real(W, weaken, names)

    def search(f, starts, maxiter):
        seen["search"].append((np.array(starts), maxiter, f(starts[0])))
        return np.array([0.5] * len(starts)), starts[0]

    monkeypatch.setattr(CH1, "norm_inequality_ratios", ratios)
    monkeypatch.setattr(CH1, "adversarial_search", search)
    return seen


def test_random_matrices_span_shapes_1_to_39_every_rank_and_six_decades(recorded):
    out = CH1.falsify_norm_inequalities(np.random.default_rng(0), trials=600, restarts=0)
    shapes = np.array([W.shape for W, _ in recorded["W"]])
    assert len(recorded["W"]) == 600 and shapes.min() == 1 and shapes.max() == 39
    ranks = [np.linalg.matrix_rank(W) / min(W.shape) for W, _ in recorded["W"]]
    assert min(ranks) < 0.2 and max(ranks) == 1.0  # low-rank and full-rank draws
    scale = np.log10([np.linalg.norm(W, 2) for W, _ in recorded["W"]])
    assert scale.min() < -2 and scale.max() > 3  # 10^±3 times a Gaussian product
    assert [f.name for f in out] == list(NORM_INEQUALITIES) and all(f.trials == 600 for f in out)
    assert recorded["search"] == [] and all(f.adversarial.shape == (0,) for f in out)


def test_each_inequality_gets_its_own_search_over_the_shape_asked(recorded):
    rng = np.random.default_rng(1)
    out = CH1.falsify_norm_inequalities(rng, trials=3, restarts=2, shape=(2, 3), maxiter=17)
    assert len(recorded["search"]) == len(NORM_INEQUALITIES)
    for (starts, maxiter, value), name in zip(recorded["search"], NORM_INEQUALITIES):
        assert starts.shape == (2, 6) and maxiter == 17
        assert value == pytest.approx(CH1.norm_inequality_ratios(starts[0].reshape(2, 3))[name], rel=1e-12)
    assert all(f.adversarial.tolist() == [0.5, 0.5] for f in out)
    assert len({s.tobytes() for s, _, _ in recorded["search"]}) == len(NORM_INEQUALITIES)  # fresh starts each


def test_a_weakened_run_divides_every_right_side_and_says_so(recorded):
    out = CH1.falsify_norm_inequalities(np.random.default_rng(2), trials=5, restarts=1, weaken=1.25, maxiter=3)
    assert [f.name for f in out] == [n + " ÷1.25" for n in NORM_INEQUALITIES]
    assert {w for _, w in recorded["W"]} == {1.25}
    plain = CH1.falsify_norm_inequalities(np.random.default_rng(2), trials=5, restarts=1, maxiter=3)
    for weak, proved in zip(out, plain):
        np.testing.assert_allclose(weak.ratios, 1.25 * proved.ratios, rtol=1e-12)


def test_the_defaults_are_4000_draws_two_starts_a_4_by_5_matrix_and_4000_iterations(recorded, monkeypatch):
    monkeypatch.setattr(CH1, "norm_inequality_ratios",
                        lambda W, weaken=1.0, names=None: dict.fromkeys(NORM_INEQUALITIES, 0.5))
    out = CH1.falsify_norm_inequalities(np.random.default_rng(3))
    assert all(f.trials == 4000 for f in out)
    assert {(s.shape, m) for s, m, _ in recorded["search"]} == {((2, 20), 4000)}



def test_each_draw_is_the_documented_one(recorded):
    """Shape ``integers(1, 40)`` per side, rank ``integers(1, min + 1)``, Gaussian factors, scale ``10^U(−3, 3)``:
    every matrix the ratios see is rebuilt from the draws recorded."""
    rng = Recording(4)
    CH1.falsify_norm_inequalities(rng, trials=50, restarts=0)
    calls = rng.calls
    assert len(calls) == 5 * 50 + len(NORM_INEQUALITIES)  # then one (empty) draw of starts per inequality
    assert all(c[:3] == ("standard_normal", ((0, 20),), {}) for c in calls[5 * 50:])
    for t, (W, _) in enumerate(recorded["W"]):
        shape, rank, left, right, scale = calls[5 * t: 5 * t + 5]
        assert shape[:3] == ("integers", (1, 40), {"size": 2})
        l, m = (int(x) for x in shape[3])
        assert rank[:3] == ("integers", (1, min(l, m) + 1), {}) and rank[3] >= 1
        rk = int(rank[3])
        assert left[:3] == ("standard_normal", ((l, rk),), {}) and right[:3] == ("standard_normal", ((rk, m),), {})
        assert scale[:3] == ("uniform", (-3, 3), {})
        np.testing.assert_array_equal(W, left[3] @ right[3] * 10.0 ** scale[3])
