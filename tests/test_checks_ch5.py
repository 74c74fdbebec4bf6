"""Chapter 5's falsification of the Frobenius row, from inside and fast
(:func:`bounds_lib.checks.ch5_theorem.falsify_frobenius_row`): the ratio it hands the harness, rebuilt from
:func:`~bounds_lib.theory.peeling.log_term` at chosen points (clipping included), what it draws, and how the parts
for each ``N`` are put together. Its power (a flat spectrum attains the row; ÷1.1 is broken) is tested in
tests/test_checks.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bounds_lib.checks import ch5_theorem as CH5
from bounds_lib.checks.harness import Falsification
from bounds_lib.theory.peeling import log_term, posthoc_grid
from recording import Recording


@pytest.fixture
def parts(monkeypatch):
    """The harness replaced: each call's ratio, sampler and settings recorded; two ratios per part returned."""
    seen = []

    def falsify(name, ratio, sample, rng, trials, restarts, maxiter):
        seen.append({"name": name, "ratio": ratio, "sample": sample, "trials": trials, "restarts": restarts,
                     "maxiter": maxiter})
        k = len(seen)
        return Falsification(name, np.array([k, k + 0.5]), np.array([10.0 * k] * restarts))

    monkeypatch.setattr(CH5, "falsify", falsify)
    return seen


def _row(x, N, weaken=1.0):
    """The ratio as the docstring states it, computed apart: log-spectrum clipped to [−30, 5], log C_F to
    [−5, 8], log K to [−5, 30], the spectrum scaled to ‖s‖₂ = C_F."""
    s = np.exp(np.clip(x[:N], -30.0, 5.0))
    CF, lK = math.exp(min(max(x[N], -5.0), 8.0)), min(max(x[N + 1], -5.0), 30.0)
    s = s * CF / np.sqrt(np.sum(s**2))
    grid = posthoc_grid(1, N)
    logS = np.array([math.log(N)] + [math.log(np.sum(s**p)) for p in grid[1:]])
    lhs = np.min(log_term(logS, grid, lK, N))
    rhs = min(0.5 * (math.log(CF) + lK) + 0.75 * math.log(N), math.log(N))
    return weaken * math.exp(lhs - rhs)


def test_the_parts_default_to_n_4_and_16_and_are_joined_in_order(parts):
    f = CH5.falsify_frobenius_row(np.random.default_rng(0))
    assert [(p["name"], p["trials"], p["restarts"], p["maxiter"]) for p in parts] == [
        ("Frobenius row", 600, 3, 1500)] * 2
    assert f.name == "Frobenius row: inf_p 𝒯 ≤ min(√(C_F K)N^{3/4}, N)"
    assert f.ratios.tolist() == [1, 1.5, 2, 2.5] and f.adversarial.tolist() == [10.0] * 3 + [20.0] * 3
    g = CH5.falsify_frobenius_row(np.random.default_rng(0), trials=7, weaken=1.1, Ns=(3,), restarts=1)
    assert g.name.endswith(" (÷1.1)") and parts[-1]["trials"] == 7 and parts[-1]["restarts"] == 1


@pytest.mark.parametrize("N, x", [
    (4, [0.0, 0.0, 0.0, 0.0, 0.3, 2.0]),             # flat: the row attained where √(C_F K)N^{3/4} < N
    (4, [1.0, -0.5, 0.2, -2.0, 1.0, 9.0]),           # N binds
    (3, [-40.0, 7.0, 0.0, -9.0, -7.0]),              # every clip: σ below e^-30 and above e^5, C_F, K below
    (3, [0.5, 0.0, -0.5, 9.0, 40.0]),                # C_F and K above their clips
    (16, list(np.linspace(-3, 3, 16)) + [0.7, 4.0]),
])
def test_the_ratio_is_the_row_rebuilt_apart(parts, N, x):
    CH5.falsify_frobenius_row(np.random.default_rng(0), Ns=(N,), weaken=1.25)
    x = np.array(x, dtype=float)
    assert parts[0]["ratio"](x) == pytest.approx(_row(x, N, 1.25), rel=1e-12)
    CH5.falsify_frobenius_row(np.random.default_rng(0), Ns=(N,))
    assert parts[1]["ratio"](x) == pytest.approx(_row(x, N), rel=1e-12)


@pytest.mark.parametrize("N", [3, 4])
def test_the_ratio_is_the_row_rebuilt_apart_at_wide_random_points(parts, N):
    """Points with coordinates far beyond every clip, and spectra whose infimum over p lies inside (0, 2)."""
    CH5.falsify_frobenius_row(np.random.default_rng(0), Ns=(N,))
    ratio = parts[0]["ratio"]
    xs = np.random.default_rng(N).normal(0.0, 20.0, (400, N + 2))
    xs[:200, N:] = np.random.default_rng(N + 10).uniform(-8.0, 2.0, (200, 2))  # small C_F and K: p > 0 pays
    got = np.array([ratio(x) for x in xs])
    want = np.array([_row(x, N) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    grid = posthoc_grid(1, N)
    interior = 0
    for x in xs:  # how many points have their infimum strictly inside the grid: the spectrum's shape counts there
        s = np.exp(np.clip(x[:N], -30.0, 5.0))
        s = s * math.exp(min(max(x[N], -5.0), 8.0)) / np.sqrt(np.sum(s**2))
        logS = np.array([math.log(N)] + [math.log(np.sum(s**p)) for p in grid[1:]])
        k = int(np.argmin(log_term(logS, grid, min(max(x[N + 1], -5.0), 30.0), N)))
        interior += 0 < k < len(grid) - 1
    assert interior >= 20


def test_a_flat_spectrum_attains_the_row_exactly(parts):
    CH5.falsify_frobenius_row(np.random.default_rng(0), Ns=(4,))
    assert parts[0]["ratio"](np.array([0.0, 0.0, 0.0, 0.0, 0.0, 2.0])) == pytest.approx(1.0, abs=1e-12)



def test_the_draws_are_wide_log_spectra_three_in_ten_near_flat_and_log_k_in_minus_3_to_12(parts):
    CH5.falsify_frobenius_row(np.random.default_rng(0), Ns=(5,))
    sample = parts[0]["sample"]
    xs = [sample(r) for r in [np.random.default_rng(i) for i in range(400)]]
    flat = [np.std(x[:5]) < 0.2 for x in xs]
    assert 0.22 < np.mean(flat) < 0.38 and all(x.shape == (7,) for x in xs)
    lk = np.array([x[6] for x in xs])
    assert -3 <= lk.min() < -2.8 and 11.8 < lk.max() <= 12
    kinds = set()
    for seed in range(20):  # both kinds of draw: wide, and near-flat
        rec = Recording(seed)
        sample(rec)
        names = [c[0] for c in rec.calls]
        kinds.add(len(names))
        assert names in (["normal", "random", "uniform"], ["normal", "random", "normal", "uniform"])
        assert rec.calls[0][1] == (0.0, 2.0, 7) and rec.calls[-1][1] == (-3.0, 12.0)
        assert len(names) == 3 or rec.calls[2][1] == (0.0, 0.05, 5)
    assert kinds == {3, 4}


# --- the log factor: what check_log_factor runs and the old factor it sets against the band -----------------


class _Runs(list):
    """The calls of a stand-in ``falsify_log_factor``; ``level[(side, weakened)]`` sets each run's ratio."""

    def __init__(self):
        super().__init__()
        self.level = {("up", False): 0.9, ("low", False): 0.8, ("up", True): 1.2, ("low", True): 1.3}


@pytest.fixture
def log_runs(monkeypatch):
    """``falsify_log_factor`` recorded (the generator's state, trials, restarts, weakening)."""
    seen = _Runs()

    def run(rng, trials, restarts, weaken=1.0):
        seen.append((rng.bit_generator.state, trials, restarts, weaken))
        w = weaken != 1.0
        return (Falsification("up", np.array([seen.level["up", w]])),
                Falsification("low", np.array([seen.level["low", w]])))

    monkeypatch.setattr(CH5, "falsify_log_factor", run)
    return seen


def _old(n, T, N, L, C):
    """The old table's factor over √λ̄, in floating point."""
    return math.sqrt(math.log(n * T) * (L * math.log(C) + math.log(L))) / CH5.log_factors(n, T, N, L, C)[0]


def test_the_log_factor_check_runs_the_lemma_and_its_weakening_from_the_same_seed(log_runs):
    r = CH5.check_log_factor().require()
    fresh = np.random.default_rng(5).bit_generator.state
    assert log_runs == [(fresh, 2000, 4, 1.0), (fresh, 2000, 4, 1.1)]
    CH5.check_log_factor(seed=9, trials=30, restarts=2)
    assert log_runs[2:] == [(np.random.default_rng(9).bit_generator.state, 30, 2, 1.0),
                            (np.random.default_rng(9).bit_generator.state, 30, 2, 1.1)]
    assert r.name == "the log factor of the table"


def test_the_old_factor_is_evaluated_at_the_stated_point_for_each_depth(log_runs):
    from bounds_lib.theory.orders import SYMBOLS, log_factor_constant

    r = CH5.check_log_factor()
    assert r.values["old_at"] == pytest.approx({L: _old(1e5, 128, 768, L, 1.5) for L in (2, 12, 48)}, rel=1e-12)
    assert r.values["kappa"] == log_factor_constant(1e5 * 128 * 768)
    n, T, N, C = (SYMBOLS[k] for k in ("n", "T", "N", "C"))
    other = CH5.check_log_factor(at={n: 10, T: 3, N: 16, C: 2.0})
    assert other.values["old_at"] == pytest.approx({L: _old(10, 3, 16, L, 2.0) for L in (2, 12, 48)}, rel=1e-12)
    assert other.values["kappa"] == log_factor_constant(10 * 3 * 16)


def test_the_orders_in_depth_check_is_named():
    from bounds_lib.theory import orders as O

    first = O.AGGREGATIONS[0]
    r = CH5.check_orders_in_depth({first: O.orders_table(first, log_factor=True)})
    assert r.name == "the orders table in depth" and r.holds and len(r.claims) == 6


def test_the_regime_slopes_check_names_its_claims_and_keeps_the_low_rank_slope():
    import sympy as sp

    from bounds_lib.theory.orders import regime_log_slope

    r = CH5.check_regime_slopes().require()
    assert r.name == "the infimum over p in each regime"
    assert [c for c, _ in r.claims] == ["low-rank slope 2(L+1) log C + 2 log L + log(N/r)",
                                        "spectral slope 2(L+1) log C + 2 log L",
                                        "Frobenius slope 2 log(C_F K) - log N, free of p"]
    assert set(r.values) == {"low_rank"} and sp.simplify(r.values["low_rank"] - regime_log_slope("low_rank")) == 0


def test_the_log_factor_check_names_its_claims_keeps_its_runs_and_prints_one_line(log_runs):
    r = CH5.check_log_factor()
    assert [c for c, _ in r.claims] == [
        "no violation of sqrt(lambda) <= kappa * table", "no violation of table <= sqrt(lambda)",
        "power: both sides / 1.1 are broken", "the old factor is below the band at L = 2",
        "the old factor is above the band at L = 48"] and r.holds
    assert set(r.values) == {"up", "low", "up_weak", "low_weak", "old_at", "kappa"}
    assert [r.values[k].worst_ratio for k in ("up", "low", "up_weak", "low_weak")] == [0.9, 0.8, 1.2, 1.3]
    old = r.values["old_at"]
    assert r.detail == (f"worst ratios 0.9000 (upper), 0.8000 (lower); old factor {old[2]:.2f} at L = 2, "
                        f"{old[12]:.2f} at L = 12, {old[48]:.2f} at L = 48; kappa = {r.values['kappa']:.3f}")


@pytest.mark.parametrize("levels, failed", [
    ({("up", False): 1.1}, ["no violation of sqrt(lambda) <= kappa * table"]),
    ({("low", False): 1.1}, ["no violation of table <= sqrt(lambda)"]),
    ({("up", True): 0.99}, ["power: both sides / 1.1 are broken"]),
    ({("low", True): 0.99}, ["power: both sides / 1.1 are broken"]),
])
def test_the_log_factor_check_says_which_claim_fails(log_runs, levels, failed):
    log_runs.level.update(levels)
    assert CH5.check_log_factor().failed == failed


def test_the_old_factor_at_exactly_kappa_is_not_above_the_band(log_runs):
    import sympy as sp

    from bounds_lib.theory.orders import SYMBOLS, log_factor_constant

    kappa = log_factor_constant(1e5 * 128 * 768)
    L = SYMBOLS["L"]
    band_edge = sp.Piecewise((sp.Rational(1, 2), sp.Eq(L, 2)), (sp.Float(kappa, 30), True))  # 1/2 at L = 2, κ after
    r = CH5.check_log_factor(old_factor=band_edge)
    assert r.values["old_at"][48] == kappa and r.failed == ["the old factor is above the band at L = 48"]


# --- the two sides of the log-factor lemma, as the harness receives them -------------------------------------


def test_falsify_log_factor_hands_the_harness_both_sides(monkeypatch):
    from bounds_lib.theory.orders import log_factor_constant

    seen = []
    monkeypatch.setattr(CH5, "falsify", lambda name, ratio, sample, rng, trials, restarts, maxiter: seen.append(
        (name, ratio, sample, trials, restarts, maxiter)) or Falsification(name, np.array([0.5])))
    up, low = CH5.falsify_log_factor(np.random.default_rng(0))
    assert [(n, t, r, m) for n, _, _, t, r, m in seen] == [("√λ̄ ≤ κ·table", 2000, 4, 800), ("table ≤ √λ̄", 2000, 4, 800)]
    assert (up.name, low.name) == ("√λ̄ ≤ κ·table", "table ≤ √λ̄")
    CH5.falsify_log_factor(np.random.default_rng(0), trials=5, restarts=1, weaken=1.25)
    assert [(n, t, r) for n, _, _, t, r, _ in seen[2:]] == [("√λ̄ ≤ κ·table (÷1.25)", 5, 1),
                                                            ("table ≤ √λ̄ (÷1.25)", 5, 1)]
    for x in np.random.default_rng(1).normal(0.0, 3.0, (50, 5)):
        n, T, N, L, C = CH5._log_factor_point(x)
        thm, tab = CH5.log_factors(n, T, N, L, C)
        assert seen[2][1](x) == pytest.approx(1.25 * thm / (log_factor_constant(n * T * N) * tab), rel=1e-14)
        assert seen[3][1](x) == pytest.approx(1.25 * tab / thm, rel=1e-14)
    draws = np.array([seen[0][2](np.random.default_rng(i)) for i in range(400)])
    assert draws.shape == (400, 5) and abs(draws.mean()) < 0.2 and 2.8 < draws.std() < 3.2


def test_log_plus_is_zero_for_a_negative_argument():
    # C < 1 and many layers: log(8CN) + L log C + log L < 0, so log⁺ of it is 0
    lK = 10 * math.log(0.1) + math.log(10)
    thm, tab = CH5.log_factors(1.0, 1.0, 1.0, 10, 0.1)
    assert math.log(8 * 0.1) + lK < 0 and lK < 0
    assert thm == math.sqrt(math.log(9.0)) and tab == 0.0
