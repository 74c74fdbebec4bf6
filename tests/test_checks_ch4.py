"""Chapter 4's checks from inside and fast (:mod:`bounds_lib.checks.ch4_peeling`): the rounding ratio rebuilt apart
from :mod:`bounds_lib.theory.peeling` at points beyond each clip, what the rounding search hands the harness, and
``check_shells``' runs and arguments. The searches' power is tested in tests/test_checks.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bounds_lib.checks import ch4_peeling as CH4
from bounds_lib.checks.harness import Falsification, _sigmoid
from bounds_lib.theory.norms import schatten_power
from bounds_lib.theory.peeling import log_term, rounding_cost_bound


def _rounding_apart(x, weaken=1.0):
    p = 2.0 * _sigmoid(x[0])
    q = p + (2.0 - p) * _sigmoid(x[1])
    logK = min(max(x[2], -50.0), 50.0)
    N = max(1, round(math.exp(min(x[3], 12.0))))
    s = np.sort(np.exp(np.clip(x[4:], -30.0, 30.0)))[::-1]
    lS, lSq = math.log(schatten_power(s, p)), math.log(schatten_power(s, q))
    bound = float(rounding_cost_bound(q - p, p, s[0], lS, logK, N)) / weaken
    return (log_term(lSq, q, logK, N) - log_term(lS, p, logK, N)) / bound


@pytest.mark.parametrize("x", [
    [0.2, -0.5, 50.5, 1.0, 0.3, -1.0, -2.0],        # log K above its clip
    [0.2, -0.5, -60.0, 1.0, 0.3, -1.0, -2.0],       # and below
    [0.2, -0.5, 3.0, 12.5, 0.3, -1.0, -2.0],        # log N above 12
    [-0.4, 0.9, 3.0, 2.0, 30.5, 29.0, -30.5],       # σ on both sides of both clips
    [1.0, 0.1, 3.0, 2.0, -31.0, -30.2, -35.0],
    [0.5, 0.5, 2.0, 3.0, 31.0, 30.4, 0.0],
])
def test_the_rounding_ratio_is_rebuilt_apart_beyond_every_clip(x):
    x = np.array(x)
    assert CH4.rounding_ratio(x, 1.3) == pytest.approx(_rounding_apart(x, 1.3), rel=1e-12)
    assert CH4.rounding_ratio(x) == pytest.approx(_rounding_apart(x), rel=1e-12)


def test_the_rounding_search_hands_the_harness_its_ratio_and_draws(monkeypatch):
    seen = []
    monkeypatch.setattr(CH4, "falsify", lambda name, ratio, sample, rng, trials, restarts: seen.append(
        (name, ratio, sample, trials, restarts)) or Falsification(name, np.array([0.5])))
    f = CH4.falsify_rounding(np.random.default_rng(0), trials=7, restarts=2, weaken=1.25, k=3)
    (name, ratio, sample, trials, restarts), = seen
    assert (name, trials, restarts, f.name) == ("rounding lemma (bound / 1.25)", 7, 2, "rounding lemma (bound / 1.25)")
    draws = np.array([sample(np.random.default_rng(i)) for i in range(2000)])
    assert draws.shape == (2000, 7)
    for col, (mean, sd) in enumerate([(-1.0, 3.0), (0.0, 3.0)]):
        assert abs(draws[:, col].mean() - mean) < 0.2 and abs(draws[:, col].std() - sd) < 0.15
    for col, (lo, hi) in zip((2, 3, 4, 5, 6), [(-10, 40), (0, 7), (-6, 3), (-6, 3), (-6, 3)]):
        assert lo <= draws[:, col].min() < lo + 0.1 * (hi - lo) and hi - 0.1 * (hi - lo) < draws[:, col].max() <= hi
    rec = []

    class Rng:
        def __getattr__(self, name):
            def draw(*args):
                rec.append((name, args))
                return getattr(np.random.default_rng(1), name)(*args)
            return draw

    sample(Rng())
    assert rec == [("normal", (-1, 3)), ("normal", (0, 3)), ("uniform", (-10, 40)), ("uniform", (0, 7)),
                   ("uniform", (-6, 3, 3))]
    assert ratio(draws[0]) == CH4.rounding_ratio(draws[0], 1.25)
    CH4.falsify_rounding(np.random.default_rng(0))
    assert seen[-1][0] == "rounding lemma (bound / 1)" and seen[-1][3:] == (2000, 8)
    assert seen[-1][2](np.random.default_rng(0)).shape == (8,)  # k = 4 singular values by default


def test_check_shells_runs_four_inflations_at_the_depth_asked(monkeypatch):
    calls = []

    def fake(rng, L, ratio=None, bound_log=None, trials=None, adversarial_starts=None, what="product"):
        calls.append((L, ratio, bound_log, trials, adversarial_starts, what))
        return Falsification("s", np.array([0.5]), np.array([0.5]))

    monkeypatch.setattr(CH4, "falsify_shell_inflation", fake)
    CH4.check_shells(np.random.default_rng(0), L=5, trials=9, adversarial_starts=1)
    sup = 3 * 4 * math.log(1 + 1 / 5)
    assert calls == [(5, 2.0, 3.0, 9, 1, "alpha"), (5, None, 3.0, 9, 1, "alpha"), (5, None, None, 9, 1, "product"),
                     (5, None, sup - math.log(1.1), 9, 1, "product")]
    r = CH4.check_shells(np.random.default_rng(0))
    assert calls[4][0] == 12 and calls[4][3:5] == (10_000, 2) and r.name == "shells at L = 12"
    for bad, err in [(1, ValueError), (2.5, TypeError)]:
        with pytest.raises(err, match=r"^L \(number of layers\)"):
            CH4.check_shells(np.random.default_rng(0), L=bad)
    with pytest.raises(ValueError) as e:
        CH4.check_shells(np.random.default_rng(0), L=1)
    assert str(e.value) == "L (number of layers) == 1, must be >= 2"


def _shells(monkeypatch, **runs):
    """``falsify_shell_inflation`` replaced: its four calls return ``runs`` (dyadic, geometric, tight, weak)."""
    base = dict(dyadic=Falsification("d", np.array([2.5, 2.6, 2.7])), geometric=Falsification("g", np.array([0.5])),
                tight=Falsification("t", np.array([0.9995]), np.array([0.9999])),
                weak=Falsification("w", np.array([0.9]), np.array([1.05])))
    base.update(runs)
    order = iter(["dyadic", "geometric", "tight", "weak"])
    monkeypatch.setattr(CH4, "falsify_shell_inflation", lambda *a, **k: base[next(order)])
    return CH4.check_shells(np.random.default_rng(0), L=4)


def test_check_shells_claims_detail_and_values(monkeypatch):
    r = _shells(monkeypatch)
    assert r.holds and r.name == "shells at L = 4"
    assert [c for c, _ in r.claims] == ["dyadic shells break e^3", "shells of ratio 1 + 1/L keep alpha within e^3",
                                        "the product reaches rho^k", "power: rho^k / 1.1 is broken by the optimiser"]
    np.testing.assert_array_equal(r.values["inflation_dyadic"], np.exp(3 * np.array([2.5, 2.6, 2.7])))
    np.testing.assert_array_equal(r.values["inflation_geometric"], np.exp(3 * np.array([0.5])))
    assert [r.values[k].name for k in ("dyadic", "geometric", "tight", "weakened")] == ["d", "g", "t", "w"]
    assert r.detail == (f"median inflation of alpha^(0): dyadic {np.exp(7.8):.3g}, 1 + 1/L {np.exp(1.5):.3g} "
                        f"(e^3 = {np.e ** 3:.3g})")


def _f(*ratios, adv=()):
    return Falsification("x", np.array(ratios, dtype=float), np.array(adv, dtype=float))


@pytest.mark.parametrize("runs, failed", [
    (dict(dyadic=_f(0.5, 0.5, 1.5)), ["dyadic shells break e^3"]),                  # broken, but not by much
    (dict(dyadic=_f(np.log(1000.5) / 3)), []),                                       # one draw, inflation 1000.5
    (dict(geometric=_f(0.5, 1.1)), ["shells of ratio 1 + 1/L keep alpha within e^3"]),
    (dict(tight=_f(0.9, adv=[1.01])), ["the product reaches rho^k"]),                # reached, but broken
    (dict(tight=_f(0.9, adv=[0.999])), ["the product reaches rho^k"]),               # not quite reached
    (dict(weak=_f(0.9, adv=[0.95])), ["power: rho^k / 1.1 is broken by the optimiser"]),
    (dict(weak=_f(1.0, adv=[1.05])), []),                                            # random draws at the bound
    (dict(weak=_f(1.5, adv=[1.05])), ["power: rho^k / 1.1 is broken by the optimiser"]),  # the draws did it
])
def test_check_shells_says_which_claim_fails(monkeypatch, runs, failed):
    assert _shells(monkeypatch, **runs).failed == failed



# --- the shell search's inputs and its coordinate ascent ------------------------------------------------------


@pytest.mark.parametrize("ratio", [1.0, 0.5])
def test_a_shell_ratio_not_above_one_is_refused_by_name(ratio):
    with pytest.raises(ValueError) as e:
        CH4.falsify_shell_inflation(np.random.default_rng(0), L=2, ratio=ratio, trials=2, adversarial_starts=0)
    assert str(e.value) == f"shell ratio (2 for dyadic shells, 1 + 1/L for geometric ones) == {ratio}, must be > 1.0"


def test_the_shell_search_hands_its_ascent_three_starts_by_default(monkeypatch):
    seen = []

    def ascent(objective, lo, hi, dim, rng, starts):
        seen.append((lo, hi, dim, starts))
        return np.full(dim, lo), 0.25

    monkeypatch.setattr(CH4, "_sawtooth_adversary", ascent)
    f = CH4.falsify_shell_inflation(np.random.default_rng(0), L=3, trials=4, low=0.7, high=2.0)
    assert seen == [(0.7, 2.0, 9, 3)] and f.adversarial.tolist() == [0.25 / (6 * math.log(4 / 3))]


def test_the_ascent_makes_two_sweeps_per_start_and_keeps_the_first_of_equal_points():
    calls = []

    def flat(x):  # every point equally good: nothing may move, and no later start may replace the first
        calls.append(np.atleast_2d(x).shape[0])
        return np.zeros(np.atleast_2d(x).shape[0])

    x, v = CH4._sawtooth_adversary(flat, 0.5, 4.0, 3, np.random.default_rng(1), starts=3)
    assert v == 0.0 and calls == [1, 4001, 4001, 4001, 4001, 4001, 4001] * 3  # a start, then 2 sweeps of 3 axes
    np.testing.assert_array_equal(x, np.random.default_rng(1).uniform(0.5, 4.0, (3, 3))[0])
