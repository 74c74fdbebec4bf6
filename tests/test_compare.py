"""bounds_lib.analysis.compare: fine-tunes made here, with changes known in closed form.

A rank-r update of named tensors must rank exactly those matrices first, with ‖ΔW‖_F and ‖ΔW‖₂ equal to
the ones computed here from the update itself (QR cores against explicit products: relative 1e-12, the
rounding of float64 products of this size), every other matrix exactly unchanged."""
import math

import numpy as np
import pytest

import bounds_lib.analysis.compare as C
from bounds_lib.analysis.compare import compare
from bounds_lib.analysis.describe import effective_rank
from bounds_lib.analysis.describe import COMPARE_COLUMNS
from bounds_lib.checkpoints import CheckpointError, random_bert_state_dict

#: Relative agreement of QR-core norms with the explicit products' norms (float64, matrices of size ≤ 32).
RTOL = 1e-12
N, H, F = 16, 2, 32
D = N // H


@pytest.fixture(scope="module")
def base():
    return random_bert_state_dict(n_layers=3, hidden=N, n_heads=H, d_ff=F, seed=1)


def _fine_tune(sd, rng):
    """Rank-2 update of head 1's query rows in layer 2; rank-1 update of layer 0's intermediate of norm 3."""
    sd = dict(sd)
    q = "encoder.layer.2.attention.self.query.weight"
    dq = np.zeros_like(sd[q])
    dq[D:2 * D] = rng.standard_normal((D, 2)) @ rng.standard_normal((2, N))
    sd[q] = sd[q] + dq
    f = "encoder.layer.0.intermediate.dense.weight"
    u, v = rng.standard_normal(F), rng.standard_normal(N)
    sd[f] = sd[f] + 3.0 * np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))
    return sd, dq


def test_rank_r_update_ranks_those_matrices_first_with_exact_norms(base, rng):
    sd, cfg = base
    sd2, dq = _fine_tune(sd, rng)
    cmp = compare(sd, sd2, config_a=cfg, config_b=cfg)
    k = sd["encoder.layer.2.attention.self.key.weight"][D:2 * D]
    dQK = dq[D:2 * D].T @ k
    expect = {"L2.QK.h1": (np.linalg.norm(dQK), np.linalg.norm(dQK, 2)), "L0.M_in": (3.0, 3.0)}
    assert {c.label() for c in cmp.changes[:2]} == set(expect)
    for c in cmp.changes[:2]:
        fro, spec = expect[c.label()]
        assert c.abs_change_fro == pytest.approx(fro, rel=RTOL), c.label()
        assert c.abs_change_spec == pytest.approx(spec, rel=RTOL), c.label()
        W_a = sd["encoder.layer.0.intermediate.dense.weight"].T if c.matrix_type == "M_in" else (
            sd["encoder.layer.2.attention.self.query.weight"][D:2 * D].T @ k)
        assert c.rel_change_fro == pytest.approx(fro / np.linalg.norm(W_a), rel=RTOL)
        assert c.rel_change_spec == pytest.approx(spec / np.linalg.norm(W_a, 2), rel=RTOL)
    assert all(c.rel_change_fro == 0.0 and c.abs_change_spec == 0.0 for c in cmp.changes[2:])
    rows = cmp.rows()
    assert [r["rank_of_change"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0]["tensors"].startswith("encoder.layer.")
    assert cmp.summary()["n_changed"] == 2 and cmp.summary()["n_matrices"] == 3 * (2 * H + 2)


def test_a_sign_slip_in_the_change_is_caught(base, rng, monkeypatch):
    """Power: with ``W_b + W_a`` in place of ``W_b − W_a`` the exact-norm test above fails."""
    sd, cfg = base
    sd2, dq = _fine_tune(sd, rng)
    real = C._thin_factors

    def slipped(left, right):  # [W_b | −W_a] → [W_b | W_a] in the change's factors
        if left.shape[1] == 2 * D:
            left = np.hstack([left[:, :D], -left[:, D:]])
        return real(left, right)

    monkeypatch.setattr(C, "_thin_factors", slipped)
    with pytest.raises(AssertionError):
        test_rank_r_update_ranks_those_matrices_first_with_exact_norms((sd, cfg), np.random.default_rng(0))


def test_weyl_and_scaling(base):
    """``sigma_shift ≤ rel_change_spec`` (Weyl) under a dense random change; ``W_b = 2 W_a`` moves every σ by
    σ_i, keeps every subspace (overlap 1) and every p*."""
    sd, cfg = base
    rng = np.random.default_rng(3)
    noisy = {k: v + 0.3 * rng.standard_normal(v.shape) for k, v in sd.items()}
    cmp = compare(sd, noisy, config_a=cfg, config_b=cfg)
    assert all(c.sigma_shift <= c.rel_change_spec * (1 + 1e-12) for c in cmp.changes)
    assert all(0.0 <= c.subspace_overlap <= 1.0 for c in cmp.changes)
    assert any(c.subspace_overlap < 0.99 for c in cmp.changes)
    doubled = {k: 2 * v if "intermediate" in k or "output.dense" in k and "attention" not in k else v
               for k, v in sd.items()}
    cmp2 = compare(sd, doubled, config_a=cfg, config_b=cfg)
    for c in cmp2.changes:
        if c.matrix_type in ("M_in", "M_out"):
            assert c.rel_change_fro == pytest.approx(1.0, rel=RTOL) and c.sigma_shift == pytest.approx(1.0, rel=RTOL)
            assert c.subspace_overlap == pytest.approx(1.0, abs=1e-9) and c.p_star_a == c.p_star_b
        else:
            assert c.rel_change_fro == 0.0


def test_effective_rank_closed_form():
    assert effective_rank([1.0, 1.0, 1.0, 1.0]) == pytest.approx(4.0, rel=1e-15)
    assert effective_rank([5.0]) == 1.0 and effective_rank([0.0, 0.0]) == 0.0
    # σ ∝ (1, 1, 2): q = (1/4, 1/4, 1/2), entropy 1.5 ln 2
    assert effective_rank([1.0, 1.0, 2.0]) == pytest.approx(math.exp(1.5 * math.log(2)), rel=1e-14)


def test_different_shapes_are_one_error_naming_them(base):
    sd, cfg = base
    wide, cfg_w = random_bert_state_dict(n_layers=3, hidden=N, n_heads=H, d_ff=2 * F, seed=1)
    with pytest.raises(CheckpointError, match=r"shapes differ: encoder\.layer\.0\.intermediate\.dense\.weight "
                                              r"\(32, 16\) in A vs \(64, 16\) in B.*\(and 3 more\)"):
        compare(sd, wide, config_a=cfg, config_b=cfg_w)
    deep, cfg_d = random_bert_state_dict(n_layers=4, hidden=N, n_heads=H, d_ff=F)
    with pytest.raises(CheckpointError, match="A has 3 layers, B has 4"):
        compare(sd, deep, config_a=cfg, config_b=cfg_d)
    with pytest.raises(ValueError, match="top_k"):
        compare(sd, sd, config_a=cfg, config_b=cfg, top_k=0)


def test_to_dict_and_dataframe(base):
    pd = pytest.importorskip("pandas")
    sd, cfg = base
    cmp = compare(sd, sd, config_a=cfg, config_b=cfg)
    d = cmp.to_dict()
    assert d["summary"]["delta_log10_B_ours"] == 0.0 and d["summary"]["n_changed"] == 0
    df = cmp.report_a.to_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) == 3 * (2 * H + 2) and "tensors" in df.columns
    assert list(cmp.to_dataframe().columns) == list(COMPARE_COLUMNS)
    assert d["meaning"]["a"]["architecture_alone"] == d["meaning"]["b"]["architecture_alone"]
