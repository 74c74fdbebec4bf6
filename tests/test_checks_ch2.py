"""Chapter 2's checks of the split lemmas from inside and fast (:mod:`bounds_lib.checks.ch2_split`): the three
ratios in closed form, the random matrices rebuilt from a recording generator, the optimiser's map from a search
vector to a spectrum, threshold and index, and the order and settings of the runs ``check_split`` makes. The
power of each (a weakened bound broken) is tested in tests/test_checks.py and tests/test_checks_statements.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bounds_lib.checks import ch2_split as CH2
from bounds_lib.checks.harness import Falsification
from bounds_lib.theory.norms import RANK_RTOL
from recording import Recording, record_searches

# --- the three ratios ---------------------------------------------------------------------------------------


def test_the_split_ratios_in_closed_form_row_by_row():
    s = np.array([[4.0, 2.0, 1.0], [4.0, 2.0, 1e-12], [3.0, 3.0, 3.0]])
    tau, p = np.array([1.5, 1.5, 3.0]), np.array([1.0, 0.0, 0.5])
    r = CH2._split_ratios(s, tau, p, 3, 2.0)
    slack = [(RANK_RTOL * 3 * 4.0) ** 2 * 3, (RANK_RTOL * 3 * 4.0) ** 2 * 3, (RANK_RTOL * 3 * 3.0) ** 2 * 3]
    S = [7.0, 2.0, 3 * math.sqrt(3.0)]  # S_1; S_0 = the numerical rank (1e-12 is below RANK_RTOL·3·4); S_½
    head = [2, 2, 0]                     # σ > τ
    tail = [1.0, 1e-12, math.sqrt(27.0)]  # ‖W₂‖_F: σ ≤ τ (all three at τ = σ)
    want_rank = [2.0 * h / (Sj / t**pj) if h else 0.0 for h, Sj, t, pj in zip(head, S, tau, p)]
    np.testing.assert_allclose(r["rank"], want_rank, rtol=1e-14)
    np.testing.assert_allclose(r["tail_dim"], [2.0 * f / (t * math.sqrt(3)) for f, t in zip(tail, tau)], rtol=1e-14)
    np.testing.assert_allclose(r["tail_schatten"],
                               [2.0 * f / math.sqrt(t ** (2 - pj) * Sj + sl)
                                for f, t, pj, Sj, sl in zip(tail, tau, p, S, slack)], rtol=1e-14)


def test_at_p_0_a_numerical_zero_is_allowed_its_slack():
    # σ₃ = 1e-9 lies below RANK_RTOL·3·max(σ₁, 1) = 1.2e-9: a numerical zero, so S_0 = 2 and its σ² is in the slack
    s, tau, p = np.array([[4.0, 2.0, 1e-9]]), np.array([1e-9]), np.array([0.0])
    r = CH2._split_ratios(s, tau, p, 3, 1.0)
    slack = (RANK_RTOL * 3 * 4.0) ** 2 * 3
    assert r["rank"][0] == pytest.approx(2 / 2, rel=1e-14)
    assert r["tail_schatten"][0] == pytest.approx(1e-9 / math.sqrt(1e-18 * 2 + slack), rel=1e-12)
    assert r["tail_schatten"][0] < 1
    small = CH2._split_ratios(np.array([[0.5, 0.2]]), np.array([0.3]), np.array([0.0]), 2, 1.0)  # σ₁ < 1
    assert small["tail_schatten"][0] == pytest.approx(0.2 / math.sqrt(0.09 * 2 + (RANK_RTOL * 2) ** 2 * 2), rel=1e-14)


def test_the_rank_counts_only_values_above_its_threshold_with_sigma_1_floored_at_1():
    # k = 2, σ₁ = 1: the threshold is RANK_RTOL·2·1 = 2e-10; a value exactly there is a numerical zero
    at, above = (CH2._split_ratios(np.array([[1.0, v]]), np.array([0.5]), np.array([0.0]), 2, 1.0)["rank"][0]
                 for v in (2e-10, 3e-10))
    assert RANK_RTOL * 2 * 1.0 == 2e-10 and at == 1.0 and above == 0.5  # r1 = 1 over S_0 = 1, then 2
    # the slack of a tail at p = 0 with σ₁ = 1: (RANK_RTOL·2·1)²·2
    r = CH2._split_ratios(np.array([[1.0, 1e-12]]), np.array([1e-10]), np.array([0.0]), 2, 1.0)
    assert r["tail_schatten"][0] == pytest.approx(1e-12 / math.sqrt(1e-20 + (RANK_RTOL * 2) ** 2 * 2), rel=1e-12)


# --- the random matrices ------------------------------------------------------------------------------------



@pytest.mark.parametrize("nondegenerate", [False, True])
def test_each_batch_is_rebuilt_from_its_draws(monkeypatch, nondegenerate):
    seen = []
    real = CH2._split_ratios
    monkeypatch.setattr(CH2, "_split_ratios", lambda *a: seen.append(a) or real(*a))
    rng = Recording(7)
    out = CH2.falsify_split(rng, trials=1050, nondegenerate=nondegenerate, weaken=1.5)
    assert len(seen) == 11  # ⌈1050 / 100⌉ batches of 100
    calls, planted = list(rng.calls), 0
    for s, tau, p, k, weaken in seen:
        (_, a1, _, lm), (_, a2, _, G), (_, a3, _, sc), (_, _, _, u) = calls[:4]
        assert a1 == (1, 13, 2) and a3 == (-3, 3, (100, 1, 1)) and weaken == 1.5
        l, m = (int(x) for x in lm)
        assert a2 == ((100, l, m),) and k == min(l, m)
        A, calls = G * np.exp(sc), calls[4:]
        if u < 0.5:  # a planted power-law spectrum
            planted += 1
            (_, b1, _, a), (_, b2, _, scale) = calls[:2]
            assert b1 == (0, 3, (100, 1)) and b2 == (-3, 3, (100, 1))
            U, _, Vt = np.linalg.svd(A, full_matrices=False)
            A, calls = (U * (np.exp(scale) * np.arange(1, k + 1) ** (-a))[:, None, :]) @ Vt, calls[2:]
        np.testing.assert_allclose(s, np.linalg.svd(A, compute_uv=False), rtol=1e-9, atol=1e-12 * np.max(s))
        (_, c1, _, pp), (_, c2, _, zero), (_, c3, _, lt) = calls[:3]
        calls = calls[3:]
        assert c1 == (0, 2, 100) and c2 == (100,) and c3 == (-4, -CH2.TAU_GAP if nondegenerate else 0.5, 100)
        np.testing.assert_array_equal(p, np.where(zero < 0.1, 0.0, pp))
        np.testing.assert_array_equal(tau, s[:, 0] * np.exp(lt))
    assert calls == [] and 0 < planted < 11
    tag = (" (τ < σ₁)" if nondegenerate else "") + " ÷1.5"
    assert [f.name for f in out] == [f"split: {k}{tag}" for k in ("rank", "tail_dim", "tail_schatten")]
    assert all(f.trials == 1050 for f in out)


def test_the_names_and_the_defaults_of_the_random_draws(monkeypatch):
    monkeypatch.setattr(CH2, "_split_ratios", lambda s, tau, p, k, w: dict.fromkeys(
        ("rank", "tail_dim", "tail_schatten"), np.full(len(tau), 0.5)))
    out = CH2.falsify_split(np.random.default_rng(0))
    assert [(f.name, f.trials) for f in out] == [("split: rank", 10_000), ("split: tail_dim", 10_000),
                                                 ("split: tail_schatten", 10_000)]


# --- the optimiser's search ---------------------------------------------------------------------------------



@pytest.fixture
def searches(monkeypatch):
    return record_searches(monkeypatch, CH2)


def test_the_search_maps_a_vector_to_a_sorted_spectrum_a_threshold_below_sigma_1_and_p_in_0_2(searches):
    out = CH2.adversarial_split(np.random.default_rng(0), trials=9, restarts=2, k=4, weaken=1.2, maxiter=13)
    assert [(d["name"], d["trials"], d["restarts"], d["maxiter"], d["method"]) for d in searches] == [
        (f"split: {key} (τ < σ₁, optimiser) ÷1.2", 9, 2, 13, "Powell") for key in ("rank", "tail_dim", "tail_schatten")]
    assert [f.name for f in out] == [d["name"] for d in searches]
    for x in ([0.5, 40.0, -1.0, -40.0, 0.3, -0.7],    # two log-σ beyond the ±30 clip
              [-30.5] * 4 + [0.3, -0.7],             # all just below it (there the slack decides)
              [-35.0, -40.0, -40.0, -50.0, 0.3, -0.7]):
        x = np.array(x)
        s = np.sort(np.exp(np.clip(x[:4], -30, 30)))[::-1][None, :]
        tau = s[:, 0] * (1 - CH2.TAU_GAP) / (1 + math.exp(-0.3))
        p = np.array([2.0 / (1 + math.exp(0.7))])
        want = CH2._split_ratios(s, tau, p, 4, 1.2)
        for d, key in zip(searches, ("rank", "tail_dim", "tail_schatten")):
            assert d["ratio"](x) == want[key][0]
    draws = [searches[0]["sample"](np.random.default_rng(i)) for i in range(300)]
    assert all(v.shape == (6,) for v in draws) and 1.3 < np.std(draws) < 1.7 and abs(np.mean(draws)) < 0.15


def test_the_search_defaults(searches):
    CH2.adversarial_split(np.random.default_rng(0))
    assert {(d["trials"], d["restarts"], d["maxiter"]) for d in searches} == {(200, 3, 40)}
    assert searches[0]["name"] == "split: rank (τ < σ₁, optimiser)"
    assert searches[0]["sample"](np.random.default_rng(0)).shape == (14,)  # k = 12: twelve σ, τ and p


# --- check_split: the runs, in order, and what it claims -----------------------------------------------------


@pytest.fixture
def runs(monkeypatch):
    """Both searches recorded in call order; each returns ratios set by ``level`` (per run kind)."""
    state = {"calls": [], "level": {}}

    def make(kind, n, trials):
        v = state["level"].get(kind, 0.5)  # one level for all three, or one per bound (a tuple: the ratios)
        v = v if isinstance(v, list) else [v] * n
        return [Falsification(f"{kind} {i}", np.array(v[i]) if isinstance(v[i], tuple) else np.full(trials, v[i]))
                for i in range(n)]

    def fs(rng, trials, nondegenerate=False, weaken=1.0):
        state["calls"].append(("random", trials, nondegenerate, weaken))
        kind = "weak" if weaken != 1.0 else "nd" if nondegenerate else "random"
        return make(kind, 3, trials)

    def adv(rng, trials, restarts, weaken=1.0):
        state["calls"].append(("optimiser", trials, restarts, weaken))
        return make("weak_opt" if weaken != 1.0 else "opt", 3, 2)

    monkeypatch.setattr(CH2, "falsify_split", fs)
    monkeypatch.setattr(CH2, "adversarial_split", adv)
    return state


def test_check_split_runs_five_searches_in_order(runs):
    runs["level"].update(weak=1.5, weak_opt=1.5)
    r = CH2.check_split(np.random.default_rng(0), trials=40, weaken=1.25, search_trials=7, restarts=2)
    assert runs["calls"] == [("random", 40, False, 1.0), ("random", 40, True, 1.0), ("optimiser", 7, 2, 1.0),
                             ("random", 40, True, 1.25), ("optimiser", 7, 2, 1.25)]
    assert r.holds and r.name == "the split lemmas"
    assert [c for c, _ in r.claims] == [
        "no violation in 40 random draws", "none with tau < sigma_1", "none found by the optimiser",
        "with tau < sigma_1 the tail bounds are not attained at random",
        "power: random draws break the rank bound / 1.25", "power: the optimiser breaks all three bounds / 1.25"]
    assert r.detail == ("worst ratios (rank, tail dim., tail Schatten): random 0.5000, 0.5000, 0.5000; "
                        "nondegenerate 0.5000, 0.5000, 0.5000; optimiser 0.5000, 0.5000, 0.5000; "
                        "weakened 1.5000, 1.5000, 1.5000")
    assert [len(r.values[k]) for k in ("random", "nondegenerate", "optimiser", "weakened")] == [3, 3, 3, 6]


def test_check_split_defaults(runs):
    runs["level"].update(weak=1.5, weak_opt=1.5)
    CH2.check_split(np.random.default_rng(0))
    assert runs["calls"] == [("random", 10_000, False, 1.0), ("random", 10_000, True, 1.0), ("optimiser", 200, 3, 1.0),
                             ("random", 10_000, True, 1.1), ("optimiser", 200, 3, 1.1)]


@pytest.mark.parametrize("levels, failed", [
    ({"random": 1.1, "weak": 1.5, "weak_opt": 1.5}, ["no violation in 40 random draws"]),
    ({"nd": 1.0, "weak": 1.5, "weak_opt": 1.5}, ["with tau < sigma_1 the tail bounds are not attained at random"]),
    ({"opt": 1.1, "weak": 1.5, "weak_opt": 1.5}, ["none found by the optimiser"]),
    ({"weak_opt": 1.5}, ["power: random draws break the rank bound / 1.1"]),
    ({"weak": 1.5}, ["power: the optimiser breaks all three bounds / 1.1"]),
    # each of the three bounds counts: the tail (dimension) one attained alone, the optimiser missing the rank bound
    ({"nd": [0.5, 1.0, 0.5], "weak": 1.5, "weak_opt": 1.5},
     ["with tau < sigma_1 the tail bounds are not attained at random"]),
    ({"weak": 1.5, "weak_opt": [0.5, 1.5, 1.5]}, ["power: the optimiser breaks all three bounds / 1.1"]),
    ({"weak": [(0.5, 1.5), 0.5, 0.5], "weak_opt": 1.5}, []),  # one violation of the rank bound ÷ 1.1 is power
])
def test_check_split_says_which_claim_fails(runs, levels, failed):
    runs["level"].update(levels)
    assert CH2.check_split(np.random.default_rng(0), trials=40).failed == failed


def test_a_run_with_fewer_draws_than_asked_fails_its_claim(runs, monkeypatch):
    runs["level"].update(weak=1.5, weak_opt=1.5)
    real = CH2.falsify_split
    monkeypatch.setattr(CH2, "falsify_split", lambda rng, trials, **k: real(rng, trials - 1, **k))
    assert CH2.check_split(np.random.default_rng(0), trials=40).failed == [
        "no violation in 40 random draws", "none with tau < sigma_1"]
