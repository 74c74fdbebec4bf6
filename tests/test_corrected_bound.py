"""Chapter 5's corrected theorem on a model's spectra (:mod:`bounds_lib.analysis.corrected`), pinned by
the identities its docstrings state and by an independent recomputation of every per-matrix quantity.

The recomputation (:func:`_reference`) is written as loops over the post hoc grid, one matrix and one
grid point at a time, with the scale ``K_j = 2J·B_w·γ_j·α_j`` rebuilt from Chapter 3's definitions
(``Λ_k``, ``α``, ``γ`` with ``L_φ`` and ``B_φ``, tight softmax constant ``c = 1``) on the shell tops of
the spectral norms. It shares with the library only the building blocks that have their own tests
(``posthoc_grid``, ``grid_resolution``, ``geometric_ratio``, ``shell_top``, ``shell_index``,
``log_theta``, ``log_term``, ``dudley_factor``).

Tolerances: exact equality where the test repeats the library's floating-point operations (the
identities of the report); ``rel=1e-12`` where the same quantity is computed along another path (sums
in another order, products instead of sums of logs): those differ by a few ulps, while any wrong
constant or factor moves them by far more.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from bounds_lib.analysis.corrected import _corrected_log_scales, corrected_bound, rank_parameter_count
from bounds_lib.analysis.scoring import score
from bounds_lib.analysis.spectra import compute_spectra
from bounds_lib.checkpoints import random_bert_state_dict
from bounds_lib.theory.peeling import (geometric_ratio, grid_resolution, log_term, posthoc_grid, shell_index,
                                       shell_top)
from bounds_lib.theory.propagation import LPHI_GELU_RELEASED
from bounds_lib.theory.theorem import TINY, dudley_factor, log_theta
from tiny_checkpoints import synthetic_spectra

REL = 1e-12
STEP_NAMES = (
    "released B_ours = Σ T* + √L (c = 2, γ without L_φ, K = γαL)",
    "same, K = 2J·B_w·γα with c = 1, γ with L_φ, shell tops",
    "per-matrix constants and shapes: Σ θ* + √L",
    "readout entropy instead of √L: Σ θ* + √N",
    "root-sum-square: √(Σ θ*² + N)",
    "× Dudley factor D: Θ",
)


# ------------------------------------------------------------------ spectra


def _random(std, seed, n_layers=2, hidden=8, n_heads=2, d_ff=16):
    state, config = random_bert_state_dict(n_layers=n_layers, hidden=hidden, n_heads=n_heads, d_ff=d_ff,
                                           seed=seed, std=std)
    return compute_spectra(state, config=config)


def _edge():
    """Random spectra (std 0.5) with two edited matrices: a rank-1 QK head (rank floored at 1 matters)
    and a V head with positive singular values below the numerical-rank threshold: rank 4 (shell top
    1.5⁴ ≈ 5.06), seven positive values (shell top 1.5⁵ ≈ 7.59); ``S_0`` is the rank, not the count."""
    sp = _random(0.5, 3)
    mats = list(sp.matrices)
    s = np.zeros(8)
    s[0] = 3.0
    mats[0] = replace(mats[0], sigma=s)
    assert mats[0].matrix_type == "QK" and mats[0].rank == 1
    v = np.array(mats[2].sigma, dtype=np.float64)
    assert mats[2].matrix_type == "V" and mats[2].rank == 4 and v[4] == 0.0
    v[4:7] = 1e-13
    mats[2] = replace(mats[2], sigma=v)
    assert mats[2].rank == 4 and np.count_nonzero(mats[2].sigma) == 7
    return replace(sp, matrices=tuple(mats))


SPECTRA = {
    # every matrix chooses p* = 0; heads of one layer have different spectral norms
    "random": lambda: _random(0.5, 1),
    "random_3x12": lambda: _random(0.7, 5, n_layers=3, hidden=12, n_heads=3, d_ff=20),
    # small weights: most matrices choose p* > 0 (intermediate grid points included)
    "small": lambda: _random(0.01, 1),
    # tiny weights: the readout's piece of Λ is the largest
    "tiny": lambda: _random(0.001, 2),
    "synthetic": lambda: synthetic_spectra(L=3, H=2, N=8, d=4, sigma1=0.3, decay=0.2),
    "edge": _edge,
}


@pytest.fixture(scope="module", params=sorted(SPECTRA))
def spectra(request):
    return SPECTRA[request.param]()


@pytest.fixture(scope="module")
def small():
    return SPECTRA["small"]()


@pytest.fixture(scope="module")
def rand():
    return SPECTRA["random"]()


# ------------------------------------------------------------------ the independent recomputation


def _reference_log_K(spectra, B_w, L_phi, phi_bound):
    """``log K_j = log(2J·B_w·γ_j·α_j)`` per matrix, keyed ``(type, layer, head)``, from Chapter 3's
    definitions on the shell tops of the spectral norms (``c = 1``)."""
    L, H = spectra.arch.n_layers, spectra.arch.n_heads
    rho = geometric_ratio(L)
    J = L * (2 * H + 2) + 1          # H QK and H Ṽ heads, M_in and M_out in every layer, and the readout
    C = {(m.matrix_type, m.layer, m.head): shell_top(max(m.sigma1, TINY), rho) for m in spectra.matrices}

    def lc(kind, layer, head=-1):
        return math.log(C[kind, layer, head])

    log_lip = []                     # log Λ_k = log[L_φ C(M_in) C(M_out) Σ_h C(Ṽ_h)(1 + 2·1·C(QK_h))]
    for k in range(L):
        heads = 0.0
        for h in range(H):
            heads += C["V", k, h] * (1.0 + 2.0 * C["QK", k, h])
        log_lip.append(math.log(L_phi) + lc("M_in", k) + lc("M_out", k) + math.log(heads))
    out = {}
    for m in spectra.matrices:
        l, h = m.layer, m.head
        log_alpha = 0.0
        for k in range(l + 1, L):    # α^(l): the layers after l
            log_alpha += log_lip[k]
        if m.matrix_type == "QK":
            log_gamma = math.log(L_phi) + lc("V", l, h) + lc("M_out", l) + lc("M_in", l)
        elif m.matrix_type == "V":
            log_gamma = math.log(L_phi) + lc("M_out", l) + lc("M_in", l)
        elif m.matrix_type == "M_in":
            log_gamma = math.log(L_phi) + lc("M_out", l)
        else:                        # M_out acts on φ(y M_in): |φ(y M_in)| ≤ B_φ C(M_in)|y|
            log_gamma = math.log(phi_bound) + lc("M_in", l)
        out[m.matrix_type, l, h] = math.log(2.0) + math.log(J) + math.log(B_w) + log_gamma + log_alpha
    return out


def _reference(spectra, n, T, readout_norm=1.0, L_phi=LPHI_GELU_RELEASED, phi_bound=1.0):
    """Every number of the corrected theorem but the released score, one matrix and one grid point at a time."""
    L, N, H = spectra.arch.n_layers, spectra.arch.hidden, spectra.arch.n_heads
    rho = geometric_ratio(L)
    J = L * (2 * H + 2) + 1
    B_w = shell_top(readout_norm, rho)
    log_K = _reference_log_K(spectra, B_w, L_phi, phi_bound)
    grid = posthoc_grid(L, N)
    p_stars, thetas, released_terms, radii = [], [], [], [B_w]
    # Λ: the readout's piece, then every matrix's
    Lam = math.log(9.0) + math.log(n) + math.log(T) + math.log(N) + max(math.log(2.0 * J * B_w), 0.0)
    for m in spectra.matrices:
        rows, cols = m.shape
        lK = log_K[m.matrix_type, m.layer, m.head]
        best = best_p = best_s = None
        best_T = math.inf
        for p in grid:
            p = float(p)
            if p == 0.0:
                s = float(max(m.rank, 1))
            else:
                s = math.fsum(float(x) ** p for x in m.sigma if x > 0)
            s_top = shell_top(max(s, TINY), rho)
            lt = log_theta(math.log(s_top), p, lK, rows, cols)
            if best is None or lt < best:          # the first argmin
                best, best_p, best_s = lt, p, s_top
            best_T = min(best_T, log_term(math.log(s_top), p, lK, N))
        p_stars.append(best_p)
        thetas.append(best)
        released_terms.append(best_T)
        c2 = shell_top(max(m.sigma1, TINY), rho)
        radii += [best_s, c2]
        Lam = max(Lam, math.log(9.0) + math.log(n) + math.log(T) + math.log(cols)
                  + max(math.log(8.0) + math.log(c2) + 0.5 * math.log(min(rows, cols) * cols) + lK, 0.0))
    penalty = len(spectra.matrices) * math.log(2 * grid_resolution(L, N) + 1)
    for j in shell_index(np.array(radii), rho):          # log(1/w_j), w_j = 2/(3(|j|+1)(|j|+2))
        penalty += math.log(1.5 * (abs(int(j)) + 1) * (abs(int(j)) + 2))
    th = np.exp(np.array(thetas))
    return {
        "B_w": B_w, "J": J, "log_K": log_K, "p_stars": np.array(p_stars), "log_theta": np.array(thetas),
        "Lambda": Lam, "penalty": penalty,
        "step1": math.log(math.fsum(np.exp(released_terms)) + math.sqrt(L)),
        "step2": math.log(math.fsum(th) + math.sqrt(L)),
        "log_sum": math.log(math.fsum(th) + math.sqrt(N)),
        "log_rss": 0.5 * math.log(math.fsum(th ** 2) + N),
    }


# ------------------------------------------------------------------ identities of the report


def test_report_identities(spectra):
    n, T, delta = 5000, 32, 0.1
    r = corrected_bound(spectra, n=n, T=T, delta=delta, readout_norm=2.5)
    B_w = shell_top(2.5, geometric_ratio(spectra.arch.n_layers))
    assert (r.L, r.N, r.n, r.T) == (spectra.arch.n_layers, spectra.arch.hidden, n, T)
    assert (r.delta, r.readout_norm) == (0.1, 2.5)
    assert r.log_Theta == r.log_rss + math.log(r.dudley)
    assert r.dudley == dudley_factor(r.Lambda, B_w)
    assert r.dudley == pytest.approx((2.0 + (B_w - 1.0)) * math.sqrt(r.Lambda) + math.sqrt(2 * math.pi), rel=REL)
    assert r.gap_main == 24.0 * math.exp(r.log_Theta) / math.sqrt(n)
    assert r.gap_deviation == 3.0 * math.sqrt((math.log(4.0 / delta) + r.penalty_nats) / (2.0 * n))
    assert r.gap_bound == r.gap_main + r.gap_deviation
    assert tuple(name for name, _ in r.steps) == STEP_NAMES
    values = [v for _, v in r.steps]
    assert values[0] == r.log_B_released == score(spectra).log_B_ours_sum
    assert values[3:] == [r.log_sum, r.log_rss, r.log_Theta]
    assert r.log_rss <= r.log_sum                      # √(Σθ² + N) ≤ Σθ + √N
    assert r.p_stars.shape == (len(spectra.matrices),)


def test_log_sum_and_log_rss_are_the_sums_of_the_per_matrix_terms(spectra):
    """The report's aggregates against its own per-matrix θ* (from the recomputation's log θ at the
    report's p*): log-sum-exp with √N and root-sum-square with N."""
    r = corrected_bound(spectra, n=1000, T=16)
    ref = _reference(spectra, 1000, 16)
    np.testing.assert_array_equal(r.p_stars, ref["p_stars"])
    th = np.exp(ref["log_theta"])
    assert r.log_sum == pytest.approx(math.log(th.sum() + math.sqrt(r.N)), rel=REL)
    assert r.log_rss == pytest.approx(0.5 * math.log(np.sum(th ** 2) + r.N), rel=REL)
    assert r.steps[2][1] == pytest.approx(math.log(th.sum() + math.sqrt(r.L)), rel=REL)


# ------------------------------------------------------------------ the independent recomputation


@pytest.mark.parametrize("kw", [{}, {"readout_norm": 0.08}, {"readout_norm": 1.5}, {"readout_norm": 3.0},
                                {"L_phi": 1.0}, {"L_phi": 2.0, "phi_bound": 2.0}, {"phi_bound": 0.5}],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
def test_matches_an_independent_recomputation(spectra, kw):
    n, T = 2000, 24
    r = corrected_bound(spectra, n=n, T=T, **kw)
    ref = _reference(spectra, n, T, **kw)
    np.testing.assert_array_equal(r.p_stars, ref["p_stars"])
    assert r.Lambda == pytest.approx(ref["Lambda"], rel=REL)
    assert r.penalty_nats == pytest.approx(ref["penalty"], rel=REL)
    assert r.dudley == pytest.approx(dudley_factor(ref["Lambda"], ref["B_w"]), rel=REL)
    assert r.log_sum == pytest.approx(ref["log_sum"], rel=REL)
    assert r.log_rss == pytest.approx(ref["log_rss"], rel=REL)
    assert r.steps[1][1] == pytest.approx(ref["step1"], rel=REL)
    assert r.steps[2][1] == pytest.approx(ref["step2"], rel=REL)
    assert r.log_Theta == pytest.approx(ref["log_rss"] + math.log(dudley_factor(ref["Lambda"], ref["B_w"])),
                                        rel=REL)


def test_the_regimes_the_recomputation_covers():
    """The spectra above reach every branch: p* = 0 everywhere, p* > 0 (an interior grid point too),
    Λ attained by a matrix with a positive log⁺ and by the readout with ``log(2B_wJ) < 1``."""
    assert np.all(corrected_bound(SPECTRA["random"](), n=2000, T=24).p_stars == 0)
    p = corrected_bound(SPECTRA["small"](), n=2000, T=24).p_stars
    assert np.any(p == 2) and np.any((p > 0) & (p < 2))
    tiny = SPECTRA["tiny"]()
    r = corrected_bound(tiny, n=2000, T=24, readout_norm=0.08)
    ref = _reference(tiny, 2000, 24, readout_norm=0.08)
    readout = math.log(9 * 2000 * 24 * 8) + math.log(2 * ref["B_w"] * ref["J"])
    assert 0 < math.log(2 * ref["B_w"] * ref["J"]) < 1
    assert r.Lambda == pytest.approx(readout, rel=REL)
    big = corrected_bound(SPECTRA["random"](), n=2000, T=24)
    assert big.Lambda > math.log(9 * 2000 * 24 * 16) + 1       # a matrix's log⁺(8 C₂ √(ℓ'm) K) counts
    edge = corrected_bound(SPECTRA["edge"](), n=2000, T=24)
    assert edge.p_stars[0] == 0 and edge.p_stars[2] == 0      # the edited heads' θ* is their rank term


def test_log_scales_follow_chapter_3(spectra):
    """``_corrected_log_scales`` against the definition ``K = 2J·B_w·γα`` (``c = 1``, ``γ`` with ``L_φ``,
    ``B_φ``), also when the matrices come in reverse order."""
    L, H = spectra.arch.n_layers, spectra.arch.n_heads
    rho, A = geometric_ratio(L), 2 * H + 2
    for L_phi, phi_bound, B_w in ((LPHI_GELU_RELEASED, 1.0, 1.0), (1.0, 2.0, 1.5 ** 3), (2.5, 0.5, 0.75)):
        ref = _reference_log_K(spectra, B_w, L_phi, phi_bound)
        for mats in (spectra.matrices, spectra.matrices[::-1]):
            got = _corrected_log_scales(mats, L, H, A, B_w, rho, L_phi, phi_bound)
            assert set(got) == {"QK", "V", "M_in", "M_out"}
            for m in mats:
                idx = (m.layer, m.head) if m.head >= 0 else m.layer
                assert float(got[m.matrix_type][idx]) == pytest.approx(ref[m.matrix_type, m.layer, m.head], rel=REL)


def test_order_of_the_matrices_does_not_matter(spectra):
    """Θ, Λ and Π are sums and maxima over the matrices: listing them in reverse order changes nothing
    but the order of ``p_stars`` (sums in another order: ``rel=1e-12``)."""
    a = corrected_bound(spectra, n=1000, T=16, readout_norm=1.5)
    b = corrected_bound(replace(spectra, matrices=spectra.matrices[::-1]), n=1000, T=16, readout_norm=1.5)
    np.testing.assert_array_equal(a.p_stars, b.p_stars[::-1])
    for field in ("Lambda", "dudley", "penalty_nats", "log_rss", "log_sum", "log_Theta", "gap_bound"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=REL), field
    for (_, x), (_, y) in zip(a.steps, b.steps):
        assert x == pytest.approx(y, rel=REL)


# ------------------------------------------------------------------ parameters and scaling


def test_defaults_are_the_documented_ones(small):
    implicit = corrected_bound(small, 1000, 16)
    explicit = corrected_bound(small, 1000, 16, delta=0.05, readout_norm=1.0, L_phi=LPHI_GELU_RELEASED,
                               phi_bound=1.0)
    assert (implicit.delta, implicit.readout_norm) == (0.05, 1.0)
    assert isinstance(implicit.delta, float) and isinstance(implicit.readout_norm, float)
    for field in ("Lambda", "dudley", "penalty_nats", "log_rss", "log_sum", "log_Theta", "gap_main",
                  "gap_deviation"):
        assert getattr(implicit, field) == getattr(explicit, field), field
    assert implicit.steps == explicit.steps
    np.testing.assert_array_equal(implicit.p_stars, explicit.p_stars)
    # and each of them matters on these spectra
    for kw in ({"readout_norm": 2.0}, {"phi_bound": 2.0}, {"L_phi": 1.0}):
        assert corrected_bound(small, 1000, 16, **kw).log_Theta != implicit.log_Theta, kw


def test_delta_only_moves_the_deviation_term(spectra):
    a = corrected_bound(spectra, n=1000, T=16, delta=0.05)
    b = corrected_bound(spectra, n=1000, T=16, delta=0.001)
    for field in ("Lambda", "dudley", "penalty_nats", "log_rss", "log_sum", "log_Theta", "gap_main"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.steps == b.steps
    assert b.gap_deviation > a.gap_deviation
    assert b.gap_deviation ** 2 - a.gap_deviation ** 2 == pytest.approx(9 * math.log(50) / 2000, rel=1e-9)


@pytest.mark.parametrize("which", ["n", "T"])
def test_n_and_T_enter_through_lambda_and_root_n(spectra, which):
    """``Λ = max_j log(9nT m_j) + …`` moves by exactly ``log k`` when ``n`` or ``T`` is multiplied by ``k``;
    nothing else but ``D`` and the ``1/√n`` of the gap terms depends on them."""
    k, n, T = 7, 1000, 16
    a = corrected_bound(spectra, n=n, T=T)
    b = corrected_bound(spectra, n=n * k if which == "n" else n, T=T * k if which == "T" else T)
    assert b.Lambda == pytest.approx(a.Lambda + math.log(k), rel=REL)
    for field in ("log_rss", "log_sum", "penalty_nats", "log_B_released"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.steps[:5] == b.steps[:5]
    np.testing.assert_array_equal(a.p_stars, b.p_stars)
    root_n = math.sqrt(k) if which == "n" else 1.0
    assert b.gap_main * root_n / b.dudley == pytest.approx(a.gap_main / a.dudley, rel=REL)
    assert b.gap_deviation * root_n == pytest.approx(a.gap_deviation, rel=REL)


def test_readout_norm_is_rounded_up_to_its_shell(rand):
    """``B_w`` is the shell top of ``readout_norm``: two norms in one shell give one report, and the
    report's ``D`` uses the rounded value (``B_w > 1`` counts in ``D``)."""
    rho = geometric_ratio(rand.arch.n_layers)                  # 1.5: shell (1.5², 1.5³] = (2.25, 3.375]
    a = corrected_bound(rand, n=1000, T=16, readout_norm=2.3)
    b = corrected_bound(rand, n=1000, T=16, readout_norm=3.375)
    assert a.Lambda == b.Lambda and a.log_Theta == b.log_Theta and a.penalty_nats == b.penalty_nats
    assert a.dudley == dudley_factor(a.Lambda, rho ** 3) == (2 + rho ** 3 - 1) * math.sqrt(a.Lambda) + math.sqrt(
        2 * math.pi)
    c = corrected_bound(rand, n=1000, T=16, readout_norm=3.4)   # next shell
    assert c.dudley > a.dudley


def test_an_overflowing_theta_gives_an_infinite_gap(rand):
    """``log Θ ≥ 700``: the gap bound is reported as infinite rather than overflowing; just below, finite."""
    over = corrected_bound(rand, n=1000, T=16, readout_norm=1e302)
    assert 700 <= over.log_Theta < math.log(np.finfo(np.float64).max)   # exp would not even overflow
    assert over.gap_main == math.inf and over.gap_bound == math.inf
    assert over.log_Theta == over.log_rss + math.log(over.dudley)
    under = corrected_bound(rand, n=1000, T=16, readout_norm=1e300)
    assert under.log_Theta < 700
    assert under.gap_main == 24.0 * math.exp(under.log_Theta) / math.sqrt(1000) < math.inf


# ------------------------------------------------------------------ the finding: a parameter count


@pytest.mark.parametrize("name, plain", [("random", 2 * (4 * 4 * 16 + 2 * 8 * 24)),
                                         ("random_3x12", 3 * (6 * 4 * 24 + 2 * 12 * 32))])
def test_theta_is_a_parameter_count_when_every_p_star_is_zero(name, plain):
    """All ``p* = 0``: ``Θ = √(rank_parameter_count + N)·D`` exactly. ``shells=False`` is the plain
    ``Σ rank·(d + d')``: each QK and Ṽ head has the rank of the head dimension, M_in and M_out are full rank."""
    sp = SPECTRA[name]()
    r = corrected_bound(sp, n=100_000, T=128)
    assert np.all(r.p_stars == 0)
    count = rank_parameter_count(sp)
    assert r.log_rss == pytest.approx(0.5 * math.log(count + r.N), rel=REL)
    assert math.exp(r.log_Theta) == pytest.approx(math.sqrt(count + r.N) * r.dudley, rel=REL)
    assert rank_parameter_count(sp, shells=False) == plain
    rho = geometric_ratio(sp.arch.n_layers)
    assert count == sum(shell_top(float(m.rank), rho) * (m.shape[0] + m.shape[1]) for m in sp.matrices)
    assert plain <= count < rho * plain


# ------------------------------------------------------------------ input validation


@pytest.mark.parametrize("kw, error, message", [
    ({"n": 0}, ValueError, r"n \(sample size\) == 0, must be >= 1"),
    ({"n": -3}, ValueError, r"n \(sample size\) == -3, must be >= 1"),
    ({"n": 3.0}, TypeError, r"n \(sample size\) must be an integer, got float 3\.0"),
    ({"n": True}, TypeError, r"n \(sample size\) must be an integer, got bool True"),
    ({"n": "10"}, TypeError, r"n \(sample size\) must be an integer, got str '10'"),
    ({"T": 0}, ValueError, r"T \(sequence length\) == 0, must be >= 1"),
    ({"T": -1}, ValueError, r"T \(sequence length\) == -1, must be >= 1"),
    ({"T": 16.0}, TypeError, r"T \(sequence length\) must be an integer, got float 16\.0"),
    ({"T": False}, TypeError, r"T \(sequence length\) must be an integer, got bool False"),
    ({"delta": 0.0}, ValueError, r"delta \(the confidence level\) == 0\.0, must be > 0\.0"),
    ({"delta": -0.1}, ValueError, r"delta \(the confidence level\) == -0\.1, must be > 0\.0"),
    ({"delta": 1.0}, ValueError, r"delta \(the confidence level\) == 1\.0, must be < 1\.0"),
    ({"delta": 1.5}, ValueError, r"delta \(the confidence level\) == 1\.5, must be < 1\.0"),
    ({"delta": math.nan}, ValueError, r"delta \(the confidence level\) is NaN, must be a real number"),
    ({"delta": "0.05"}, TypeError, r"delta \(the confidence level\) must be a real number, got str '0\.05'"),
    ({"delta": True}, TypeError, r"delta \(the confidence level\) must be a real number, got bool True"),
    ({"readout_norm": 0.0}, ValueError, r"readout_norm \(B_w\) == 0\.0, must be > 0\.0"),
    ({"readout_norm": -1.0}, ValueError, r"readout_norm \(B_w\) == -1\.0, must be > 0\.0"),
    ({"readout_norm": math.inf}, ValueError, r"readout_norm \(B_w\) == inf, must be finite"),
    ({"readout_norm": None}, TypeError, r"readout_norm \(B_w\) must be a real number, got NoneType None"),
])
def test_bad_arguments_are_refused_with_their_names(rand, kw, error, message):
    args = {"n": 1000, "T": 16, **kw}
    with pytest.raises(error, match=f"^{message}$"):
        corrected_bound(rand, **args)


def test_smallest_and_integer_like_arguments_are_accepted(rand):
    r = corrected_bound(rand, n=1, T=1, delta=1e-12, readout_norm=1e-6)
    assert (r.n, r.T) == (1, 1) and r.Lambda > 0 and math.isfinite(r.gap_bound)
    s = corrected_bound(rand, n=np.int64(1000), T=np.int32(16), delta=np.float32(0.25), readout_norm=2)
    assert type(s.n) is int and type(s.T) is int and (s.n, s.T) == (1000, 16)
    assert type(s.delta) is float and s.delta == 0.25 and type(s.readout_norm) is float and s.readout_norm == 2.0
    assert s.log_Theta == corrected_bound(rand, n=1000, T=16, delta=0.25, readout_norm=2.0).log_Theta
