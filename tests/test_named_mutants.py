"""Tests that kill the mutants issue 21 names — plausible bugs the fast suite used to miss (or caught only
through a docstring example). Each test says which mutant it kills; every expected value is derived
here from the definition (never typed from an output). ``make mutation`` runs this file for the modules
it covers (tests/mutation/run_mutation.py).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from tiny_checkpoints import synthetic_spectra

from bounds_lib.theory import norms
from bounds_lib.checkpoints import random_bert_state_dict
from bounds_lib.theory.norms import RANK_RTOL
from bounds_lib.analysis.scoring import score
from bounds_lib.analysis.cache import SpectraCache
from bounds_lib.analysis.kernel import head_product_spectra
from bounds_lib.analysis.spectra import compute_spectra

LN10 = math.log(10.0)


# ------------------------------------------------------------------ spectra


def _state_dict_with_core_values(values, N=64, H=16):
    """A one-layer BERT state dict (N, H heads, d_h = N/H) whose head 0 has ``QK_0`` with exactly the
    singular values ``values`` (Q's head-0 columns ``e_i``, K's ``values_i e_i``)."""
    sd, cfg = random_bert_state_dict(n_layers=1, hidden=N, n_heads=H, d_ff=2 * N, seed=0)
    d = N // H
    q, k = "encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.key.weight"
    sd[q][:d] = 0.0
    sd[k][:d] = 0.0
    for i, v in enumerate(values):  # nn.Linear (out, in): row i of the head-0 block is column i of W_{Q,0}
        sd[q][i, i] = 1.0
        sd[k][i, i] = v
    return sd, cfg


def test_clean_zero_tolerance_is_the_released_one_over_all_N_values():
    """Kills: ``_clean_sigma``'s tolerance with d_h instead of N. A core value between the two
    tolerances (``RANK_RTOL·d_h < 5e-9 ≤ RANK_RTOL·N`` at N = 64, d_h = 4) is a numerical zero for the
    released rank (over all N singular values of the N×N product): clean mode must zero it, as paper
    mode's explicit SVD counts it out of the rank."""
    N, H = 64, 16
    d = N // H
    tiny = 5e-9
    assert RANK_RTOL * d < tiny <= RANK_RTOL * N  # the test's premise: the two tolerances disagree here
    sd, cfg = _state_dict_with_core_values([1.0, tiny], N, H)
    clean = compute_spectra(sd, config=cfg).select("QK", 0)[0]
    paper = compute_spectra(sd, config=cfg, mode="paper").select("QK", 0)[0]
    assert paper.sigma[1] == pytest.approx(tiny, rel=1e-6)   # the value is really there
    assert paper.rank == 1 == clean.rank
    assert np.count_nonzero(clean.sigma) == 1                  # zeroed, not kept
    sd2, _ = _state_dict_with_core_values([1.0, 2 * RANK_RTOL * N], N, H)  # above the tolerance: kept
    assert np.count_nonzero(compute_spectra(sd2, config=cfg).select("QK", 0)[0].sigma) == 2


def test_the_cache_key_holds_entrywise():
    """Kills: the spectra cache key without ``entrywise``. After a cached ``entrywise=False`` run the
    same cache must not hand its NaN (1,1) norms to an ``entrywise=True`` run."""
    sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    fresh = compute_spectra(sd, config=cfg, entrywise=True)
    cache = SpectraCache()
    without = compute_spectra(sd, config=cfg, entrywise=False, cache=cache)
    assert all(math.isnan(m.norm_11) for m in without.select("QK"))
    again = compute_spectra(sd, config=cfg, entrywise=True, cache=cache)
    assert [m.norm_11 for m in again.matrices] == [m.norm_11 for m in fresh.matrices]
    assert math.isfinite(score(again).log_B_11) and score(again).log_B_11 == score(fresh).log_B_11


def test_cache_counts_every_group_once_per_mode():
    """(A docstring-only kill given a real test.) Clean then paper on one cache: 4 groups per layer are
    new in clean mode; paper mode recomputes the 2 head-product groups and reuses M_in, M_out."""
    L = 3
    sd, cfg = random_bert_state_dict(n_layers=L, hidden=8, n_heads=2, d_ff=16)
    cache = SpectraCache()
    compute_spectra(sd, config=cfg, cache=cache)
    assert (cache.misses, cache.hits) == (4 * L, 0)
    compute_spectra(sd, config=cfg, mode="paper", cache=cache)
    assert (cache.misses, cache.hits) == (4 * L + 2 * L, 2 * L)
    compute_spectra(sd, config=cfg, cache=cache)
    assert (cache.misses, cache.hits) == (6 * L, 2 * L + 4 * L)


def test_head_product_norms_are_column_norms_of_the_explicit_product(rng):
    """(A docstring-only kill given a real test: the (2,1)-norm transposition.) For random non-square
    factors with grouped heads, σ, ‖P_h‖_{2,1} (column sums) and ‖P_h‖_{1,1} of ``P_h = A_h B_{g(h)}ᵀ``
    agree with the explicit product; the row-norm sum (the transposed norm) does not."""
    H, G, N, d = 4, 2, 9, 3
    A = rng.standard_normal((H, N, d)) * rng.uniform(0.1, 3.0, size=(H, 1, d))
    B = rng.standard_normal((G, N, d)) * rng.uniform(0.1, 3.0, size=(G, 1, d))
    groups = np.array([0, 0, 1, 1])
    sigma, n21, n11 = head_product_spectra(A, B, groups)
    for h in range(H):
        P = A[h] @ B[groups[h]].T
        np.testing.assert_allclose(sigma[h], np.linalg.svd(P, compute_uv=False)[:d], rtol=1e-10)
        assert n21[h] == pytest.approx(np.sum(np.linalg.norm(P, axis=0)), rel=1e-12)
        assert n21[h] != pytest.approx(np.sum(np.linalg.norm(P, axis=1)), rel=1e-6)
        assert n11[h] == pytest.approx(np.sum(np.abs(P)), rel=1e-12)


def test_norm_21_sums_column_norms():
    """The released (2,1) norm sums the norms of the columns (row-vector convention); on a matrix whose
    row-norm sum differs, the transposed mutant is caught."""
    W = np.array([[3.0, 0.0, 1.0], [4.0, 2.0, 0.0]])
    cols = sum(math.hypot(*W[:, j]) for j in range(W.shape[1]))
    rows = sum(math.sqrt(sum(x * x for x in W[i])) for i in range(W.shape[0]))
    assert norms.norm_21(W) == pytest.approx(cols, rel=1e-15) and cols != pytest.approx(rows)
    assert norms.norm_21(W.T) == pytest.approx(rows, rel=1e-15)


def test_prefix_is_the_first_k_layers():
    """(A docstring-only kill given a real test.) ``prefix(k)`` keeps exactly the matrices of layers < k,
    sets L = k and records the full depth."""
    sd, cfg = random_bert_state_dict(n_layers=4, hidden=8, n_heads=2, d_ff=16)
    sp = compute_spectra(sd, config=cfg)
    for k in (1, 3, 4):
        pre = sp.prefix(k)
        assert pre.L == k and pre.meta["prefix_of"] == 4 and pre.arch.hidden == sp.arch.hidden
        assert pre.matrices == tuple(m for m in sp.matrices if m.layer < k)
    with pytest.raises(ValueError):
        sp.prefix(5)


# ------------------------------------------------------------------ scoring: the per-matrix rows


def test_every_log10_column_of_a_row_is_its_natural_log_over_ln10():
    """Kills: ``log10_alpha`` (or any log10 column) of the CSV/JSON rows in another base. Each row's
    log10 columns are the report's natural-log fields divided by ln 10 — checked against α and K of the
    report itself (α from its ``log_alpha`` per layer, ``10^{log10 K} = e^{log K}``)."""
    rep = score(synthetic_spectra(L=3))
    for m in rep.matrices:
        row = m.to_row()
        assert row["log10_depth_weight_alpha"] == pytest.approx(rep.log_alpha[m.layer] / LN10, rel=1e-14)
        for col, field in (("log10_gamma", m.log_gamma), ("log10_K", m.log_K), ("log10_T_star", m.log_T_star),
                           ("log10_T0", m.log_T0)):
            assert 10 ** row[col] == pytest.approx(math.exp(field), rel=1e-12), col
    d = rep.to_dict()
    np.testing.assert_allclose(d["log10_depth_weight_alpha"], rep.log_alpha / LN10, rtol=1e-14)
    np.testing.assert_allclose(d["log10_Lambda"], rep.log_Lambda / LN10, rtol=1e-14)
    # α ≠ 1 somewhere: the base matters
    assert any(abs(r["log10_depth_weight_alpha"]) > 0.1 for r in d["matrices"])


# ------------------------------------------------------------------ theorem (tests only; theorem.py is issue 20's)


def test_theta_uses_the_smaller_dimension():
    """Kills: θ with max(ℓ, m) for min(ℓ, m). Chapter 5's θ² = 2 (s(ℓ+m))^{2/(p+2)} (144 min(ℓ,m) m)^{p/(p+2)}
    K^{2p/(p+2)}, evaluated directly (no logs) for non-square shapes both ways round."""
    from bounds_lib.theory.theorem import log_theta

    s, K = 6.0, 3.5
    for rows, cols in ((8, 24), (24, 8), (5, 7)):
        for p in (0.25, 1.0, 2.0):
            theta2 = (2 * (s * (rows + cols)) ** (2 / (p + 2)) * (144 * min(rows, cols) * cols) ** (p / (p + 2))
                      * K ** (2 * p / (p + 2)))
            assert log_theta(math.log(s), p, math.log(K), rows, cols) == pytest.approx(0.5 * math.log(theta2),
                                                                                        rel=1e-13)


def test_deviation_term_is_over_2n():
    """Kills: the theorem's deviation term with /n for /(2n): ``3 B √((log(4/δ) + Π)/(2n))`` (McDiarmid's
    bounded-difference rate for a loss in [0, B], B = 1), recomputed from the report's own Π."""
    from bounds_lib.analysis.corrected import corrected_bound

    for n, delta in ((1000, 0.05), (10**6, 0.01)):
        r = corrected_bound(synthetic_spectra(), n=n, T=16, delta=delta)
        assert r.gap_deviation == pytest.approx(3 * math.sqrt((math.log(4 / delta) + r.penalty_nats) / (2 * n)),
                                                rel=1e-14)
        assert r.gap_bound == pytest.approx(r.gap_main + r.gap_deviation, rel=1e-15)


# ------------------------------------------------------------------ stats (tests only)


def test_bootstrap_interval_is_equal_tailed():
    """Kills: the percentile (1 − level) for (1 − level)/2. With draws 0, 1/1000, …, 1 the level-0.9
    interval is the 5th to the 95th percentile: 5 % of the draws below it and 5 % above."""
    from bounds_lib.studies.stats import _interval

    draws = np.arange(1001) / 1000
    for level in (0.9, 0.5):
        iv = _interval(0.5, draws, level)
        tail = (1 - level) / 2
        assert (iv.lo, iv.hi) == pytest.approx((np.quantile(draws, tail), np.quantile(draws, 1 - tail)), abs=1e-12)
        assert np.mean(draws < iv.lo) == pytest.approx(tail, abs=1.5e-3)
        assert np.mean(draws > iv.hi) == pytest.approx(tail, abs=1.5e-3)
        assert iv.n_boot == draws.size and iv.n_undefined == 0
    withnan = np.append(draws, [np.nan, np.inf])
    assert _interval(0.5, withnan, 0.9).n_undefined == 2


def test_bootstrap_interval_edges():
    """The undefined cases of the percentile interval: no finite draw, or an undefined point value, give a
    NaN interval that still counts the draws; one finite draw is an interval of width 0; the level is
    checked on both sides, by name."""
    from bounds_lib.studies.stats import Interval, _interval

    def same(a, b):
        return all((x == y) or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
                   for x, y in zip((a.value, a.lo, a.hi, a.n_boot, a.n_undefined),
                                   (b.value, b.lo, b.hi, b.n_boot, b.n_undefined)))

    assert same(_interval(0.3, [np.nan, np.inf, np.nan], 0.9), Interval(0.3, np.nan, np.nan, 3, 3))
    assert same(_interval(np.nan, [0.1, 0.2], 0.9), Interval(np.nan, np.nan, np.nan, 2, 0))
    assert same(_interval(0.3, [0.25, np.nan], 0.9), Interval(0.3, 0.25, 0.25, 2, 1))
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"^level \(of the interval\)"):
            _interval(0.3, [0.1, 0.2], bad)


def test_theta_of_a_scalar_p_is_a_float_and_vectorises():
    from bounds_lib.theory.theorem import log_theta

    one = log_theta(math.log(6.0), 1.0, math.log(3.5), 8, 24)
    assert type(one) is float
    many = log_theta(math.log(6.0), np.array([0.0, 1.0]), math.log(3.5), 8, 24)
    assert isinstance(many, np.ndarray) and many.shape == (2,) and many[1] == one
    assert many[0] == 0.5 * math.log(6.0 * (8 + 24))  # θ² = s(ℓ+m) at p = 0


def test_dudley_factor_closed_form_and_tightness_at_large_lambda():
    """``D = (2 + (B_w − 1)⁺)√Λ + √(2π)``; at large Λ the integral it bounds is ≈ 2√Λ, so D is tight there
    (a coefficient 3 instead of 2 on √Λ would leave a third of the bound unused)."""
    from scipy.integrate import quad

    from bounds_lib.theory.theorem import dudley_factor

    for lam in (0.5, 4.0, 1e4):
        for B_w in (0.5, 1.0, 1.5, 3.0):
            assert dudley_factor(lam, B_w) == pytest.approx((2 + max(B_w - 1, 0)) * math.sqrt(lam)
                                                            + math.sqrt(2 * math.pi), rel=1e-15)
    lam = 1e4
    integral = quad(lambda x: x ** -0.5 * math.sqrt(lam + math.log(1 / x)), 0, 1, limit=200)[0]
    assert integral <= dudley_factor(lam) and integral / dudley_factor(lam) > 0.98


def test_clean_sigma_tolerance_scales_with_sigma1_and_includes_equality():
    """The released tolerance ``RANK_RTOL·N·max(σ₁, 1)``: relative to σ₁ when σ₁ > 1, and a value equal to
    it is a zero (``σ ≤ tol``)."""
    from bounds_lib.analysis.kernel import _clean_sigma

    N = 64
    for s1 in (1.0, 100.0, 0.5):
        tol = RANK_RTOL * N * max(s1, 1.0)
        for v, kept in ((tol, False), (0.9 * tol, False), (1.1 * tol, True)):
            s = _clean_sigma(np.array([s1, v]), N)
            assert s.shape == (N,) and s[0] == s1 and s[1] == (v if kept else 0.0), (s1, v)
            assert not np.any(s[2:])


def test_head_product_chunks_give_one_value_per_head(rng):
    """The (1,1) norms are computed in chunks of heads: exactly one value per head, whatever the chunking."""
    for H, N in ((1, 4), (5, 7), (3, 600)):  # N = 600: 2^23 // N² = 23 heads per chunk
        A, B = rng.standard_normal((H, N, 2)), rng.standard_normal((H, N, 2))
        _, n21, n11 = head_product_spectra(A, B)
        assert n21.shape == n11.shape == (H,)
        np.testing.assert_allclose(n11, [np.sum(np.abs(A[h] @ B[h].T)) for h in range(H)], rtol=1e-12)
    A, B = rng.standard_normal((40, 600, 2)), rng.standard_normal((40, 600, 2))  # two chunks (23 + 17)
    _, _, n11 = head_product_spectra(A, B)
    assert n11.shape == (40,)
    np.testing.assert_allclose(n11, [np.sum(np.abs(A[h] @ B[h].T)) for h in range(40)], rtol=1e-12)


@pytest.mark.parametrize("dtype, k", [("float64", 300), ("float32", 70)])
@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_extreme_weights_give_the_scaled_spectra_exactly(mode, dtype, k):
    """Weights times 2^k (exact): every σ and both norms are those of the original weights times 2^2k
    for the head products (two factors) and times 2^k for M_in, M_out — through the power-of-two
    scaling and its undoing, which widens to float64 (in float32, 2^140 is beyond the float32 range);
    times 2^600 the products (2^1200) exceed float64 and the result is the ValueError that says so
    (never inf, never a warning)."""
    import warnings

    sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    ref = compute_spectra(sd, config=cfg, mode=mode, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = compute_spectra({n: v * 2.0**k for n, v in sd.items()}, config=cfg, mode=mode, dtype=dtype)
        for a, b in zip(ref.matrices, big.matrices):
            f = 2.0 ** (2 * k if a.head >= 0 else k)
            np.testing.assert_array_equal(b.sigma, a.sigma * f)
            assert (b.norm_21, b.norm_11) == (a.norm_21 * f, a.norm_11 * f)
        with pytest.raises(ValueError, match="exceed the float64 range"):
            compute_spectra({n: v * 2.0**600 for n, v in sd.items()}, config=cfg, mode=mode)


def test_prefix_length_is_checked_by_name():
    sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16)
    sp = compute_spectra(sd, config=cfg)
    for bad in (0, -1, 3):
        with pytest.raises(ValueError, match=r"^prefix length k == "):
            sp.prefix(bad)
    with pytest.raises(TypeError, match=r"^prefix length k must be an integer"):
        sp.prefix(1.5)


def test_cache_digest_separates_shapes_and_dtypes():
    """Equal bytes in another shape or dtype are other weights: the digest must differ."""
    A = np.arange(12, dtype=np.float64)
    d = SpectraCache.digest
    assert d(A.reshape(3, 4)) != d(A.reshape(4, 3)) != d(A.reshape(2, 6))
    assert d(A.reshape(3, 4)) != d(A.reshape(3, 4).view(np.int64))
    assert d(A.reshape(3, 4), tag="x") != d(A.reshape(3, 4), tag="y")
    assert d(A.reshape(3, 4)) == d(A.copy().reshape(3, 4))


def test_L_phi_for_reads_the_activation_unless_given():
    from dataclasses import replace

    from bounds_lib.checkpoints import ACTIVATION_L_PHI
    from bounds_lib.analysis.scoring import ScoringOptions

    arch = synthetic_spectra().arch
    for act in ("gelu", "relu", "silu", "sigmoid"):
        assert ScoringOptions().L_phi_for(replace(arch, activation=act)) == ACTIVATION_L_PHI[act]
        assert ScoringOptions(L_phi=2.5).L_phi_for(replace(arch, activation=act)) == 2.5
    with pytest.raises(ValueError) as err:
        ScoringOptions().L_phi_for(replace(arch, activation="swiglu"))
    assert str(err.value) == ("activation 'swiglu' has no Lipschitz constant here; supported: "
                              + ", ".join(sorted(ACTIVATION_L_PHI)) + "; or pass L_phi=")
    rep = score(synthetic_spectra(), L_phi=2.5)
    assert rep.L_phi == 2.5 and rep.to_dict()["options"]["L_phi"] == 2.5 == rep.to_dict()["options"]["L_phi_value"]


#: The per-matrix CSV/JSON columns of the CLI (``bounds-lib analyze --csv``): an interface, so pinned.
ROW_COLUMNS = ("layer", "head", "expert", "kind", "rows", "cols", "sigma1", "rank", "frobenius", "nuclear",
               "stable_rank", "norm_21", "norm_11", "log10_gamma", "log10_depth_weight_alpha", "log10_K", "p_star",
               "log10_T_star", "log10_T0")
#: The top-level keys of the CLI's ``--json`` report (``meta`` is filled by the CLI).
REPORT_KEYS = ("model", "architecture", "mode", "dtype", "options", "grid", "log10_Lambda",
               "log10_depth_weight_alpha", "summary", "meaning", "matrices", "meta")


def test_report_rows_and_keys_are_the_documented_schema():
    """Every column of a per-matrix row holds its field (rows × cols the stored shape, non-square for
    M_in and M_out; head empty for them), and the JSON report has exactly its documented keys, each
    holding its value."""
    rep = score(synthetic_spectra(L=2))
    for m in rep.matrices:
        row = m.to_row()
        assert tuple(row) == ROW_COLUMNS
        assert (row["rows"], row["cols"]) == m.shape and row["kind"] == m.matrix_type
        assert row["head"] == (m.head if m.head >= 0 else "") and row["layer"] == m.layer
        for col in ("sigma1", "rank", "frobenius", "nuclear", "stable_rank", "norm_21", "norm_11", "p_star"):
            assert row[col] == getattr(m, col), col
    assert any(r.shape[0] != r.shape[1] for r in rep.matrices)  # the shape check has power
    d = rep.to_dict()
    assert tuple(d) == REPORT_KEYS
    assert d["model"] == rep.source and d["architecture"] == rep.arch.to_dict()
    assert (d["mode"], d["dtype"], d["grid"]) == (rep.mode, rep.dtype, rep.grid.tolist())
    assert d["summary"] == rep.summary() and d["meta"] == rep.meta
    # the rows of to_dict are to_row's with the stored tensors they come from after "kind"
    assert [{k: v for k, v in r.items() if k != "tensors"} for r in d["matrices"]] == [m.to_row() for m in rep.matrices]
    assert all(r["tensors"] for r in d["matrices"]) and list(d["matrices"][0])[4] == "tensors"
