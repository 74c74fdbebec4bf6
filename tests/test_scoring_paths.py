"""The paths of :mod:`bounds_lib.analysis.scoring` the BERT-shaped tests do not take: a mixture-of-experts
layer (every expert a matrix of its own, ``Λ`` from the expert with the largest ``C(M_in)·C(M_out)``), the
rows of an expert's matrix, ``analyze``'s forwarding, ``check_report``, the options' ranges, the huge-spectrum
rescaling at its threshold, and the shapes ``log_edelman_bound`` accepts. Written from a mutation run of
the module after the library's move into subpackages (tests/MUTATION.md)."""
import math
import warnings

import numpy as np
import pytest

from bounds_lib.analysis import scoring
from bounds_lib.analysis.kernel import MatrixSpectrum
from bounds_lib.analysis.scoring import (BoundReport, ScoringOptions, _rescaled, check_report,
                                         log_edelman_bound, score)
from bounds_lib.analysis.spectra import ModelSpectra
from bounds_lib.checkpoints import ArchitectureSpec

L, H, N, D = 2, 2, 6, 3
#: (C(M_in,e), C(M_out,e)) of the three experts: the product is largest for expert 1 (3·2 = 6 against 4·1 and
#: 1·5) while the ratio C(M_in)/C(M_out) is largest for expert 0 and the last expert is expert 2
EXPERTS = ((4.0, 1.0), (3.0, 2.0), (1.0, 5.0))


def _spectrum(top, n=N):
    return top * np.linspace(1.0, 0.2, n)


def _attention(layer):
    mats = []
    for matrix_type, top in (("QK", 2.0), ("V", 1.5)):
        for h in range(H):
            s = np.zeros(N)
            s[:D] = _spectrum(top + 0.1 * h + 0.05 * layer, D)
            mats.append(MatrixSpectrum(layer, h, matrix_type, (N, N), s, 2.0 * top + h, 5.0 * top + h))
    return mats


def _ffn(layer, c_in, c_out, expert=None):
    return [MatrixSpectrum(layer, -1, "M_in", (N, 4 * N), _spectrum(c_in), 3.0 * c_in, 7.0 * c_in, expert),
            MatrixSpectrum(layer, -1, "M_out", (4 * N, N), _spectrum(c_out), 3.0 * c_out, 7.0 * c_out, expert)]


def moe_spectra(experts=EXPERTS):
    arch = ArchitectureSpec("mixtral", "mixtral", L, N, H, H, D, 4 * N, "silu", "", gated_ffn=True,
                            n_experts=len(experts))
    mats = []
    for layer in range(L):
        mats += _attention(layer)
        for e, (c_in, c_out) in enumerate(experts):
            mats += _ffn(layer, c_in, c_out, e)
    return ModelSpectra(arch, "clean", "float64", tuple(mats), "synthetic mixture of experts")


def dense_twin(expert):
    """The same attention with one dense feed-forward: expert ``expert``'s two matrices."""
    arch = ArchitectureSpec("mixtral", "mixtral", L, N, H, H, D, 4 * N, "silu", "", gated_ffn=True)
    mats = []
    for layer in range(L):
        mats += _attention(layer) + _ffn(layer, *EXPERTS[expert])
    return ModelSpectra(arch, "clean", "float64", tuple(mats), "synthetic dense")


def test_lambda_of_a_mixture_of_experts_is_that_of_its_largest_expert():
    """Λ_ℓ (and α) use the expert with the largest C(M_in)·C(M_out) — not the largest ratio, not the last."""
    moe = score(moe_spectra())
    assert moe.log_Lambda == pytest.approx(score(dense_twin(1)).log_Lambda, rel=1e-14)
    for other in (0, 2):
        assert not np.allclose(moe.log_Lambda, score(dense_twin(other)).log_Lambda, rtol=1e-6)


def test_every_expert_is_a_matrix_with_its_own_gamma_and_number():
    moe = score(moe_spectra())
    assert len(moe.matrices) == L * (2 * H + 2 * len(EXPERTS))
    for e in range(len(EXPERTS)):
        twin = score(dense_twin(e))
        for matrix_type in ("M_in", "M_out"):
            ours = [m for m in moe.matrices if m.matrix_type == matrix_type and m.expert == e]
            dense = [m for m in twin.matrices if m.matrix_type == matrix_type]
            assert [m.layer for m in ours] == list(range(L))
            # γ of a unit depends on that unit's own constants only (γ_Min = C(M_out,e), γ_Mout = 1)
            assert [m.log_gamma for m in ours] == pytest.approx([m.log_gamma for m in dense], rel=1e-14)
            assert [m.to_row()["expert"] for m in ours] == [e] * L
    assert {m.to_row()["expert"] for m in moe.matrices if m.head >= 0} == {""}
    assert {m.to_row()["expert"] for m in score(dense_twin(0)).matrices} == {""}


def test_edelman_of_a_mixture_of_experts_by_hand():
    """ξ_ℓ = Σ_h[(C_out* C_in* C(V_h)‖QK_h‖)^{2/3} + (C_out* C_in* ‖V_h‖)^{2/3}] + Σ_e[(C(M_out,e)‖M_in,e‖)^{2/3}
    + ‖M_out,e‖^{2/3}], with * the expert of the largest product; B = (1 + Σ_ℓ α_ℓ^{2/3} ξ_ℓ)^{3/2}."""
    sp = moe_spectra()
    rep = score(sp)
    c_in, c_out = EXPERTS[1]
    total = 0.0
    for layer in range(L):
        mats = [m for m in sp.matrices if m.layer == layer]
        qk = {m.head: m for m in mats if m.matrix_type == "QK"}
        v = {m.head: m for m in mats if m.matrix_type == "V"}
        xi = sum((c_out * c_in * v[h].sigma1 * qk[h].norm_21) ** (2 / 3) + (c_out * c_in * v[h].norm_21) ** (2 / 3)
                 for h in range(H))
        for e in range(len(EXPERTS)):
            m_in = next(m for m in mats if m.matrix_type == "M_in" and m.expert == e)
            m_out = next(m for m in mats if m.matrix_type == "M_out" and m.expert == e)
            xi += (m_out.sigma1 * m_in.norm_21) ** (2 / 3) + m_out.norm_21 ** (2 / 3)
        total += math.exp(rep.log_alpha[layer]) ** (2 / 3) * xi
    assert rep.log_B_edelman == pytest.approx(1.5 * math.log1p(total), rel=1e-13)


def test_a_mixture_of_experts_with_a_matrix_missing_is_refused_with_the_count():
    sp = moe_spectra()
    short = ModelSpectra(sp.arch, sp.mode, sp.dtype, sp.matrices[:-1], sp.source)
    with pytest.raises(ValueError) as err:
        score(short)
    assert str(err.value) == f"spectra hold {L * 10 - 1} matrices, expected {L * 10} for L={L}, H={H}, 3 experts"
    two = moe_spectra(EXPERTS[:2])
    with pytest.raises(ValueError, match=r", 2 experts$"):
        score(ModelSpectra(two.arch, two.mode, two.dtype, two.matrices[:-1], two.source))
    dense = dense_twin(0)
    with pytest.raises(ValueError) as err:
        score(ModelSpectra(dense.arch, dense.mode, dense.dtype, dense.matrices[1:], dense.source))
    assert str(err.value) == f"spectra hold {L * 6 - 1} matrices, expected {L * 6} for L={L}, H={H}"


def test_a_bad_spectrum_is_named_by_its_matrix():
    sp = dense_twin(0)
    bad = list(sp.matrices)
    m = bad[3]
    sigma = np.array(m.sigma)
    sigma[0] = np.nan
    bad[3] = MatrixSpectrum(m.layer, m.head, m.matrix_type, m.shape, sigma, m.norm_21, m.norm_11)
    with pytest.raises(ValueError, match=rf"^sigma of {m.label()}"):
        score(ModelSpectra(sp.arch, sp.mode, sp.dtype, tuple(bad), sp.source))


def test_a_zero_head_scores_without_a_warning():
    """A pruned (all-zero) head: log 0 = -inf summands, no RuntimeWarning (warnings are errors here)."""
    sp = dense_twin(0)
    mats = list(sp.matrices)
    m = mats[0]
    mats[0] = MatrixSpectrum(m.layer, m.head, m.matrix_type, m.shape, np.zeros(N), 0.0, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = score(ModelSpectra(sp.arch, sp.mode, sp.dtype, tuple(mats), sp.source))
    assert math.isfinite(rep.log_B_edelman) and math.isfinite(rep.log_B_ours_sum)


def test_analyze_forwards_every_argument_to_compute_spectra_and_score(monkeypatch):
    seen = {}

    def fake_spectra(model, **kw):
        seen["spectra"] = (model, kw)
        return "SPECTRA"

    def fake_score(sp, options=None, **kw):
        seen["score"] = (sp, options, kw)
        return "REPORT"

    monkeypatch.setattr(scoring, "compute_spectra", fake_spectra)
    monkeypatch.setattr(scoring, "score", fake_score)
    assert scoring.analyze("MODEL") == "REPORT"
    defaults = dict(mode="clean", dtype="float64", n_layers=None, layers=None, cache=None, progress=None,
                    allow_download=None, entrywise=True, jobs=1, threads=1)
    assert seen["spectra"] == ("MODEL", defaults)
    assert seen["score"] == ("SPECTRA", None, {})
    opts = ScoringOptions()
    given = dict(mode="paper", dtype="float32", n_layers=2, layers=3, cache="C", progress="P", allow_download=False,
                 entrywise=False, jobs=4, threads=3)
    scoring.analyze("M2", options=opts, config="CFG", download_timeout=9.0, prefix="p.", L_phi=2.0, **given)
    assert seen["spectra"] == ("M2", {**given, "config": "CFG", "download_timeout": 9.0, "prefix": "p."})
    assert seen["score"] == ("SPECTRA", opts, {"L_phi": 2.0})


def test_check_report_passes_a_report_and_names_anything_else():
    rep = score(dense_twin(0))
    assert check_report(rep) is rep
    with pytest.raises(TypeError) as err:
        check_report(3)
    assert str(err.value) == "report must be a bounds_lib.analysis.scoring.BoundReport (from score), got int"
    with pytest.raises(TypeError, match=r"^baseline must be a .*got str$"):
        check_report("x", "baseline")
    assert isinstance(rep, BoundReport)


def test_options_ranges():
    """L_φ may be any positive number (a scaled activation below 1 too); the softmax constant must be positive."""
    assert ScoringOptions(L_phi=0.5).L_phi == 0.5
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="L_phi"):
            ScoringOptions(L_phi=bad)
    assert ScoringOptions(softmax_const=0.25).softmax_const == 0.25
    with pytest.raises(ValueError, match="softmax_const"):
        ScoringOptions(softmax_const=0.0)


def test_rescaling_starts_above_two_to_the_400_and_brings_the_top_value_into_one_two():
    s = np.array([2.0 ** 400, 1.0])
    assert _rescaled(s, 0.5)[0] is s and _rescaled(s, 0.5)[1] == 0.5          # at the threshold: as given
    small = np.array([1e3, 1.0])
    assert _rescaled(small, 0.5)[0] is small
    for top in (2.0 ** 400 * 1.5, 1e150, 1e300):
        big = np.array([top, top / 3, 0.0])
        got, lk = _rescaled(big, 0.5)
        assert 1.0 <= got[0] < 2.0
        e = math.log2(big[0] / got[0])
        assert e == int(e) and np.array_equal(got * 2.0 ** e, big)              # a power of two, exact
        assert lk == pytest.approx(0.5 + e * math.log(2.0), rel=1e-15)


def test_edelman_reads_log_alpha_as_a_column_or_a_scalar():
    terms = [[0.0, math.log(8.0)], [math.log(2.0), -math.inf]]
    vec = log_edelman_bound([0.1, -0.2], terms)
    assert log_edelman_bound(np.array([[0.1], [-0.2]]), terms) == pytest.approx(vec, rel=1e-15)
    assert log_edelman_bound(0.0, [[0.0, math.log(8.0)]]) == pytest.approx(1.5 * math.log(6.0), rel=1e-15)


def test_a_scaled_spectrum_scales_its_values_and_both_norms():
    """``MatrixSpectrum.scaled(s)`` (the logit scale of QK): σ, ‖·‖_{2,1} and ‖·‖_{1,1} all times ``s``."""
    m = MatrixSpectrum(0, 1, "QK", (2, 2), np.array([3.0, 1.0]), 4.0, 5.0)
    got = m.scaled(0.5)
    assert got.sigma.tolist() == [1.5, 0.5] and (got.norm_21, got.norm_11) == (2.0, 2.5)
    assert (got.layer, got.head, got.matrix_type, got.shape, got.expert) == (0, 1, "QK", (2, 2), None)
    assert m.sigma.tolist() == [3.0, 1.0] and (m.norm_21, m.norm_11) == (4.0, 5.0)


def _batched_cases(rng):
    """Spectra of ragged lengths (heads of one length, dense matrices of another, rank-deficient heads), exact
    zeros, values of very different scales, and log K of both signs."""
    sigmas = []
    for n in (32,) * 20 + (31, 7, 1, 384, 384, 5):
        s = np.sort(rng.lognormal(0.0, rng.uniform(0.1, 3.0), n))[::-1]
        if rng.random() < 0.3:
            s[rng.integers(1, n + 1):] = 0.0
        sigmas.append(s * 10.0 ** rng.uniform(-8, 8))
    sigmas.append(np.zeros(32))
    log_Ks = rng.uniform(-30.0, 30.0, len(sigmas)).tolist()
    return sigmas, log_Ks


@pytest.mark.parametrize("grid, batched", [(None, True), (np.array([0.5, 1.5]), True), (np.array([0.0, 2.0]), False)])
def test_the_batched_post_hoc_choices_are_the_single_ones_bit_for_bit(grid, batched, monkeypatch):
    """``_posthoc_choices_valid`` (all of a model's matrices at once) against ``_posthoc_choice_valid`` (one at
    a time, the code it replaced in ``score``): every ``log 𝒯`` on the grid, ``p*`` and ``log 𝒯*`` equal, bit for
    bit, on 200 random sets of spectra, a grid with and without p = 0. The batch is what computes them (the
    single path is not called) wherever the grid has two positive p or more."""
    from bounds_lib.theory import peeling
    from bounds_lib.theory.peeling import _posthoc_choice_valid, _posthoc_choices_valid, posthoc_grid

    singles = []
    monkeypatch.setattr(peeling, "_posthoc_choice_valid", lambda *a: singles.append(1) or _posthoc_choice_valid(*a))
    rng = np.random.default_rng(52)
    g = posthoc_grid(6, 384) if grid is None else grid
    for _ in range(200):
        sigmas, log_Ks = _batched_cases(rng)
        singles.clear()
        got = _posthoc_choices_valid(sigmas, log_Ks, 384, g)
        assert len(singles) == (0 if batched else len(sigmas))
        for s, lk, (log_T, p_star, log_T_star) in zip(sigmas, log_Ks, got):
            one = _posthoc_choice_valid(s, lk, 384, g)
            assert log_T.tobytes() == one.log_T.tobytes() and (p_star, log_T_star) == (one.p_star, one.log_T_star)


def test_an_overflowing_spectrum_in_a_batch_raises_the_single_paths_error():
    from bounds_lib.theory.peeling import _posthoc_choice_valid, _posthoc_choices_valid, posthoc_grid

    g = posthoc_grid(2, 8)
    fine, huge = np.array([3.0, 1.0]), np.array([1e200, 1e200])
    with pytest.raises(ValueError) as single:
        _posthoc_choice_valid(huge, 0.0, 8, g)
    with pytest.raises(ValueError) as batched:
        _posthoc_choices_valid([fine, huge, fine], [0.0, 0.0, 0.0], 8, g)
    assert str(batched.value) == str(single.value) and "exceeds the float64 range" in str(single.value)
