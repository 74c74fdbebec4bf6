"""The one scoring core of :mod:`bounds_lib.analysis.scoring` shared by the single-head (Chapter 7) and multi-head
(Chapter 6) proxies: ``log_edelman_bound`` against hand-computed closed forms, its two summation orders
against each other, and the two architectures' paths against each other on a model both can express."""
import math

import numpy as np
import pytest

from bounds_lib.theory.model import MULTI_HEAD_MATRIX_TYPES, SINGLE_HEAD_MATRIX_TYPES, random_transformer
from bounds_lib.theory.peeling import posthoc_choice, posthoc_grid
from bounds_lib.analysis.scoring import (
    LN10,
    _multi_head_log_terms,
    analyze,
    log_edelman_bound,
    posthoc_term,
)
from bounds_lib.analysis.single_head import single_head_proxies

SUMMATIONS = ("by_layer", "flat")


@pytest.mark.parametrize("summation", SUMMATIONS)
def test_edelman_closed_form_two_layers(summation):
    # α = (8, 1), summands x: layer 0 {1, 27}, layer 1 {8, 64}
    # ξ_0 = 1 + 9 = 10, ξ_1 = 4 + 16 = 20; B = (1 + 8^{2/3}·10 + 1·20)^{3/2} = (1 + 40 + 20)^{3/2} = 61^{3/2}
    la = np.log([8.0, 1.0])
    lt = np.log([[1.0, 27.0], [8.0, 64.0]])
    assert math.exp(log_edelman_bound(la, lt, summation=summation)) == pytest.approx(61.0 ** 1.5, rel=1e-13)


@pytest.mark.parametrize("summation", SUMMATIONS)
def test_edelman_zero_summands_and_no_overflow(summation):
    # a zero matrix (log 0 = -inf) contributes nothing; all zero gives B = 1 (log 0.0)
    assert log_edelman_bound([0.0], [[-np.inf, -np.inf]], summation=summation) == 0.0
    lt = np.array([[math.log(8.0), -np.inf]])
    assert math.exp(log_edelman_bound([0.0], lt, summation=summation)) == pytest.approx(5.0 ** 1.5, rel=1e-14)
    # summands far beyond float range stay finite in log space: B ≈ (α^{2/3} x^{2/3})^{3/2} = α x
    big = log_edelman_bound([2000.0], [[3000.0]], summation=summation)
    assert big == pytest.approx(5000.0, rel=1e-14)


def test_the_two_summation_orders_agree(rng):
    for _ in range(200):
        L, k = int(rng.integers(1, 13)), int(rng.integers(1, 30))
        la = rng.normal(0, 20, L)
        lt = rng.normal(0, 10, (L, k))
        a = log_edelman_bound(la, lt, summation="by_layer")
        b = log_edelman_bound(la, lt, summation="flat")
        assert a == pytest.approx(b, rel=1e-13, abs=1e-13)


def test_each_summation_order_is_the_one_its_chapter_committed(rng):
    # bit for bit: "by_layer" is Chapter 6's order, "flat" the single-head order of Chapters 7–8's
    # committed results; on inputs where the two orders round differently, each must keep its own
    from bounds_lib.theory.peeling import logsumexp

    c = 2.0 / 3.0
    differ = 0
    for _ in range(300):
        la, lt = rng.normal(0, 3, 4), rng.normal(0, 3, (4, 5))
        flat = 1.5 * float(np.logaddexp(0.0, np.logaddexp.reduce((c * (la[:, None] + lt)).ravel())))
        by_layer = 1.5 * float(np.logaddexp(0.0, logsumexp(c * la + logsumexp(c * lt, axis=1))))
        assert log_edelman_bound(la, lt, summation="flat") == flat
        assert log_edelman_bound(la, lt, summation="by_layer") == by_layer
        differ += flat != by_layer
    assert differ > 0   # the draws include inputs where the orders really differ (else the test is empty)


def test_edelman_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        log_edelman_bound([0.0, 1.0], [[0.0]])
    with pytest.raises(ValueError, match="shape"):
        log_edelman_bound([0.0], [0.0])
    with pytest.raises(ValueError, match="^log_alpha and log_terms must not contain NaN$"):
        log_edelman_bound([0.0], [[np.nan]])
    with pytest.raises(ValueError, match="NaN"):
        log_edelman_bound([np.nan], [[0.0]])
    with pytest.raises(ValueError, match="summation"):
        log_edelman_bound([0.0], [[0.0]], summation="pairwise")


def test_posthoc_term_rescales_huge_spectra_exactly():
    grid = posthoc_grid(2, 4)
    sigma = np.array([3.0, 1.0, 0.5, 0.0])
    plain = posthoc_term(sigma, 0.7, 4, grid)
    assert plain.p_star == posthoc_choice(sigma, 0.7, 4, grid).p_star
    c = 2.0 ** 600  # σ·c overflows S_p for p = 2 without the rescaling
    huge = posthoc_term(sigma * c, 0.7 - 600 * math.log(2.0), 4, grid)
    assert huge.p_star == plain.p_star
    np.testing.assert_allclose(huge.log_T, plain.log_T, rtol=1e-12)


def test_matrix_type_constants():
    assert SINGLE_HEAD_MATRIX_TYPES == ("QK", "V", "M")
    assert MULTI_HEAD_MATRIX_TYPES == ("QK", "V", "M_in", "M_out")


def test_single_and_multi_head_paths_agree_on_a_one_head_model(tmp_path, rng):
    """A single-head model saved as a one-head BERT checkpoint (``M_in = I``, ``Ṽ = W_V``, ``QK = W_QK``)
    has the same ``α``, the same ``T*`` and ``p*`` per matrix, and the same ``B_Edelman`` summands apart
    from the multi-head form's extra ``(C(M_out)‖M_in‖_{2,1})^{2/3}`` term."""
    pytest.importorskip("safetensors")
    from bounds_lib.studies.results import save_model

    model = random_transformer(3, 6, rng, spectral_norm=0.8)
    save_model(model, tmp_path / "ck")
    rep = analyze(str(tmp_path / "ck"), mode="paper")
    ours = single_head_proxies(model)
    np.testing.assert_allclose(rep.log_alpha / LN10, ours["log10_alpha"], rtol=1e-12, atol=1e-14)
    as_single = {"QK": "QK", "V": "V", "M_out": "M"}
    for m in rep.matrices:
        if m.matrix_type in as_single:
            a = as_single[m.matrix_type]
            assert m.p_star == ours["p_star"][a][m.layer]
            assert m.log_T_star / LN10 == pytest.approx(ours["log10_T_star"][a][m.layer], rel=1e-12)
    C = {"QK": np.zeros((3, 1)), "V": np.zeros((3, 1)), "M_in": np.zeros(3), "M_out": np.zeros(3)}
    n21 = {k: np.zeros_like(v) for k, v in C.items()}
    for m in rep.matrices:
        idx = (m.layer, m.head) if m.head >= 0 else m.layer
        C[m.matrix_type][idx], n21[m.matrix_type][idx] = m.sigma1, m.norm_21
    terms = _multi_head_log_terms(C, n21)  # columns: QK_0, V_0, M_in, M_out
    without_M_in = log_edelman_bound(rep.log_alpha, terms[:, [0, 1, 3]])
    assert without_M_in / LN10 == pytest.approx(ours["B_edelman"], rel=1e-12)
    assert rep.log_B_edelman > without_M_in  # the M_in summand (C(M_out)·N)^{2/3} > 0 adds to it
