"""The proxies of the paper's single-head model (bounds_lib.analysis.single_head.single_head_proxies, Chapter 7): closed
forms on scaled identities, and agreement with the multi-head path of Chapter 6 on the saved checkpoint."""
import math

import numpy as np
import pytest
import torch

from bounds_lib.theory.model import Block, SingleHeadTransformer
from bounds_lib.studies.results import save_model
from bounds_lib.analysis.single_head import single_head_proxies
from bounds_lib.studies.training import TrainConfig, train


def scaled_identity(L, N, c):
    I = c * np.eye(N)
    return SingleHeadTransformer(tuple(Block(I, I, I) for _ in range(L)), np.ones(N) / np.sqrt(N))


@pytest.mark.parametrize("N", [4, 16])
def test_proxies_closed_form_large_weights(N):
    # c = 2, L = 1: K_QK = 2·c² = 8, K_V = c = 2, K_M = 1; c·K > 1 so p* = 0 and T* = √(rank·N) = N
    c = 2.0
    P = single_head_proxies(scaled_identity(1, N, c))
    assert P["p_star"] == {"QK": [0.0], "V": [0.0], "M": [0.0]}
    assert math.isclose(10 ** P["B_ours_sum"], 3 * N + 1, rel_tol=1e-12)
    assert math.isclose(10 ** P["B_ours_rss"], math.sqrt(3) * N + 1, rel_tol=1e-12)
    xi = (c * c * c * N) ** (2 / 3) + (c * c * N) ** (2 / 3) + (c * N) ** (2 / 3)
    assert math.isclose(10 ** P["B_edelman"], (1 + xi) ** 1.5, rel_tol=1e-12)
    assert math.isclose(10 ** P["B_11"], (1 + xi) ** 1.5, rel_tol=1e-12)  # ‖cI‖_{1,1} = ‖cI‖_{2,1}
    assert math.isclose(10 ** P["prod_spectral"], c**3, rel_tol=1e-12)
    assert math.isclose(10 ** P["sum_frobenius"], 3 * c * math.sqrt(N), rel_tol=1e-12)
    assert math.isclose(10 ** P["n_params"], 3 * N * N + N, rel_tol=1e-12)


def test_proxies_closed_form_small_weights_and_depth_weight():
    # c = 1/2: every c·K < 1, so T(p) = N (cK)^{p/(p+2)} decreases in p and p* = 2 for all matrices
    N, c = 8, 0.5
    P = single_head_proxies(scaled_identity(1, N, c))
    assert P["p_star"] == {"QK": [2.0], "V": [2.0], "M": [2.0]}
    T = [N * (c * 2 * c * c) ** 0.5, N * (c * c) ** 0.5, N * c**0.5]
    assert math.isclose(10 ** P["B_ours_sum"], sum(T) + 1, rel_tol=1e-12)
    # L = 2: α^{(0)} = Λ_1 = 1.13 · c · c · (1 + 4c) (released constants), α^{(1)} = 1
    P2 = single_head_proxies(scaled_identity(2, N, 2.0))
    assert math.isclose(10 ** P2["log10_alpha"][0], 1.13 * 4 * 9, rel_tol=1e-12)
    assert P2["log10_alpha"][1] == 0.0


def test_multihead_proxies_of_the_checkpoint_agree(tmp_path):
    """bounds_lib.analysis.scoring.analyze (the BERT path of Chapter 6) on the saved one-head checkpoint.

    The checkpoint stores M_in = I, so per-matrix T* and p* of QK, Ṽ = W_V and M_out = W_M must equal
    the single-head ones, and B_ours (sum) must equal ours once the identity M_in terms are removed.
    """
    from scipy.special import logsumexp

    from bounds_lib.analysis.scoring import analyze

    torch.set_num_threads(1)
    model = train(TrainConfig(L=3, N=8, n_train=32, T=8, s=3, steps=10, n_test=64, seed=2)).model
    save_model(model, tmp_path / "ck")
    rep = analyze(str(tmp_path / "ck"), mode="paper")
    ours = single_head_proxies(model)
    kind_of = {"QK": "QK", "V": "V", "M_out": "M"}
    for m in rep.matrices:
        if m.matrix_type == "M_in":
            assert m.sigma1 == 1.0
            continue
        a = kind_of[m.matrix_type]
        assert m.p_star == ours["p_star"][a][m.layer]
        assert math.isclose(m.log_T_star / math.log(10), ours["log10_T_star"][a][m.layer], rel_tol=1e-12)
    log_T = [m.log_T_star for m in rep.matrices if m.matrix_type != "M_in"]
    ours_sum = float(np.logaddexp(logsumexp(log_T), 0.5 * math.log(model.L))) / math.log(10)
    assert math.isclose(ours_sum, ours["B_ours_sum"], rel_tol=1e-12)


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_every_field_against_a_direct_computation(act):
    # L = 2 and a random model: the closed forms above (L = 1, c·I) cannot tell 3·L·N² from 3/L·N², nor
    # ‖W‖_F = √Σσ² from √Σ2σ at c = 2; here every field is recomputed from its definition
    from bounds_lib.theory.model import random_transformer
    from bounds_lib.theory.norms import norm_11, norm_21, singular_values
    from bounds_lib.theory.propagation import LPHI_GELU_RELEASED, log_alpha, log_layer_lipschitz
    from bounds_lib.theory.model import SINGLE_HEAD_MATRIX_TYPES
    from bounds_lib.analysis.scoring import log_edelman_bound

    model = random_transformer(2, 5, np.random.default_rng(3), spectral_norm=1.7, act=act)
    P = single_head_proxies(model)
    L, N = 2, 5
    mats = {a: [getattr(b, f"W_{a}") for b in model.blocks] for a in SINGLE_HEAD_MATRIX_TYPES}
    C = {a: [float(singular_values(W)[0]) for W in mats[a]] for a in SINGLE_HEAD_MATRIX_TYPES}
    assert P["spectral_norms"] == C
    assert P["readout_norm"] == float(np.linalg.norm(model.w))
    assert P["n_params"] == math.log10(3 * L * N * N + N)
    frob = sum(np.linalg.norm(W) for a in mats for W in mats[a])
    assert math.isclose(10 ** P["sum_frobenius"], frob, rel_tol=1e-12)
    prod = np.prod([c for a in C for c in C[a]])
    assert math.isclose(10 ** P["prod_spectral"], prod, rel_tol=1e-12)
    L_phi = LPHI_GELU_RELEASED if act == "gelu" else model.L_phi
    la = log_alpha(np.atleast_1d(log_layer_lipschitz(np.array(C["M"]), np.array(C["V"]), np.array(C["QK"]), L_phi)))
    assert np.allclose(np.array(P["log10_alpha"]) * math.log(10), la, rtol=0, atol=1e-12)
    for key, norm in (("B_edelman", norm_21), ("B_11", norm_11)):
        terms = np.array([[math.log(C["M"][l] * C["V"][l] * norm(mats["QK"][l])),
                           math.log(C["M"][l] * norm(mats["V"][l])), math.log(norm(mats["M"][l]))] for l in range(L)])
        # (the two summation orders of the core differ in the last bits only: no test here can tell them apart)
        assert math.isclose(P[key], log_edelman_bound(la, terms) / math.log(10), rel_tol=1e-12)


def test_single_head_edelman_sums_in_the_flat_order_of_the_committed_results(monkeypatch):
    """B_Edelman and B_11 of the single-head path use the ``"flat"`` order (the order of Chapters 7–8's stored
    results, bit for bit); the multi-head path keeps ``"by_layer"``."""
    from bounds_lib.analysis import single_head
    from bounds_lib.theory.model import random_transformer

    seen = []
    real = single_head.log_edelman_bound

    def spy(*args, **kw):
        seen.append(kw.get("summation", "by_layer"))
        return real(*args, **kw)

    monkeypatch.setattr(single_head, "log_edelman_bound", spy)
    single_head_proxies(random_transformer(3, 4, np.random.default_rng(0)))
    assert seen == ["flat", "flat"]


def test_a_weight_changed_after_construction_is_named_when_scored():
    """Blocks hold writable arrays: a NaN written after the model was built is refused, naming the matrix type."""
    model = SingleHeadTransformer(tuple(Block(np.eye(3), np.eye(3), np.eye(3)) for _ in range(2)), np.ones(3))
    model.blocks[1].W_V[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^W_V contains 1 NaN"):
        single_head_proxies(model)


def test_a_zero_matrix_scores_without_a_warning():
    import warnings

    N = 3
    I, Z = np.eye(N), np.zeros((N, N))
    model = SingleHeadTransformer((Block(Z, I, I), Block(I, I, I)), np.ones(N) / np.sqrt(N))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = single_head_proxies(model)
    assert all(math.isfinite(P[k]) for k in ("B_ours_sum", "B_edelman", "B_11"))
