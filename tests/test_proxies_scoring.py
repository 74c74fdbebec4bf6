"""Closed forms of ``bounds_lib.analysis.scoring.score`` on small synthetic spectra (no checkpoint, no torch).

Every number of a :class:`~bounds_lib.analysis.scoring.BoundReport` is recomputed here in plain Python floats
from the formulas of Chapter 6 (ch06-def-proxies) — ``Λ_k``, ``α``, ``γ`` (released form and with ``L_φ``),
``K = γαL``, ``T(W;p)`` on the grid ``𝒫_m``, ``p*``, ``B_ours`` (sum and root-sum-square),
``B_Edelman`` and its (1,1) analogue — for every option of :class:`ScoringOptions` (the ``L_φ``-in-γ
option, the softmax constant, ``L_φ``, the logit scale as a number and as ``1/√d_h``), and for
:meth:`MatrixSpectrum.scaled`. Written for the mutation run of ``scoring`` (tests/MUTATION.md).
"""
import math
from dataclasses import replace

import numpy as np
import pytest

from bounds_lib.checkpoints import ACTIVATION_L_PHI, ArchitectureSpec
from bounds_lib.analysis.scoring import BoundReport, ScoringOptions, log10_or_value, score
from bounds_lib.analysis.kernel import MatrixSpectrum
from bounds_lib.analysis.spectra import ModelSpectra

REL = 1e-12
L, N, H, D = 2, 6, 2, 3
TINY = np.finfo(np.float64).tiny


def _spectra(mode="clean", factor=1.0, nan_11=False):
    """Two layers, two heads, N = 6; every matrix has its own σ₁, (2,1) and (1,1) norms, and some
    matrices are small enough that p* > 0 (others have p* = 0)."""
    arch = ArchitectureSpec("bert", "bert", L, N, H, H, D, 4 * N, "gelu", "")
    sig = {
        (0, 0, "QK"): [2.0, 0.7, 0.1], (0, 1, "QK"): [1.5, 1.0, 0.2],
        (0, 0, "V"): [0.9, 0.3, 0.05], (0, 1, "V"): [0.6, 0.6, 0.01],
        (1, 0, "QK"): [0.3, 0.02, 0.001], (1, 1, "QK"): [3.0, 0.5, 0.4],
        (1, 0, "V"): [0.02, 0.01, 0.003], (1, 1, "V"): [1.2, 0.2, 0.1],
        (0, -1, "M_in"): [1.7, 1.1, 0.9, 0.5, 0.3, 0.2], (0, -1, "M_out"): [1.3, 1.2, 0.8, 0.6, 0.4, 0.1],
        (1, -1, "M_in"): [0.05, 0.04, 0.03, 0.02, 0.01, 0.005],
        (1, -1, "M_out"): [60.0, 50.0, 40.0, 30.0, 20.0, 10.0],
    }
    mats = []
    for i, ((l, h, kind), s) in enumerate(sig.items()):
        s = np.array(s + [0.0] * (N - len(s))) * factor
        shape = (N, 4 * N) if kind == "M_in" else (4 * N, N) if kind == "M_out" else (N, N)
        n21, n11 = (2.0 + 0.1 * i) * s[0], (5.0 + 0.3 * i) * s[0]
        mats.append(MatrixSpectrum(l, h, kind, shape, s, n21, float("nan") if nan_11 else n11))
    order = {"QK": 0, "V": 1, "M_in": 2, "M_out": 3}
    mats.sort(key=lambda m: (m.layer, order[m.matrix_type], m.head))
    return ModelSpectra(arch, mode, "float64", tuple(mats), "synthetic")


def _lse(xs):
    xs = [x for x in xs if x != -math.inf]
    if not xs:
        return -math.inf
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def reference(sp, *, logit_scale=1.0, L_phi=1.13, softmax_const=2.0, gamma_L_phi=False):
    """Plain-float recomputation of every proxy of ``score`` (log space so that huge σ stay finite)."""
    s = 1.0 / math.sqrt(D) if logit_scale == "inv_sqrt_dh" else float(logit_scale)
    by = {}
    for m in sp.matrices:
        f = s if m.matrix_type == "QK" else 1.0
        by[(m.layer, m.head, m.matrix_type)] = (m, [float(x) * f for x in m.sigma], m.norm_21 * f, m.norm_11 * f)
    lC = {k: math.log(v[1][0]) for k, v in by.items()}  # log σ₁
    log_Lam = []
    for l in range(L):
        heads = [lC[(l, h, "V")] + math.log(1 + 2 * softmax_const * math.exp(lC[(l, h, "QK")])) for h in range(H)]
        log_Lam.append(math.log(L_phi) + lC[(l, -1, "M_in")] + lC[(l, -1, "M_out")] + _lse(heads))
    log_al = [sum(log_Lam[l + 1:]) for l in range(L)]
    lp = math.log(L_phi) if gamma_L_phi else 0.0
    m_grid = math.ceil(L + math.log(N))
    grid = [i / m_grid for i in range(2 * m_grid + 1)]
    out = {"Lambda": log_Lam, "alpha": log_al, "grid": grid, "rows": []}
    for mm in sp.matrices:
        key = (mm.layer, mm.head, mm.matrix_type)
        _, sg, n21, n11 = by[key]
        l, h = mm.layer, mm.head
        if mm.matrix_type == "QK":
            lg = math.log(softmax_const) + lC[(l, h, "V")] + lC[(l, -1, "M_out")] + lC[(l, -1, "M_in")] + lp
        elif mm.matrix_type == "V":
            lg = lC[(l, -1, "M_out")] + lC[(l, -1, "M_in")] + lp
        elif mm.matrix_type == "M_in":
            lg = lC[(l, -1, "M_out")] + lp
        else:
            lg = lC[(l, -1, "M_in")] if gamma_L_phi else 0.0
        lK = max(lg + log_al[l] + math.log(L), math.log(TINY))
        nz = [x for x in sg if x > 0]
        # clean head spectra are scored without their exact zeros (the tolerance counts the kept values)
        n_tol = max(1, len(nz)) if (sp.mode == "clean" and mm.head >= 0) else len(sg)
        rank = sum(x > 1e-10 * n_tol * max(sg[0], 1.0) for x in nz)
        logT = []
        for p in grid:
            lS = math.log(rank) if p == 0 else _lse([p * math.log(x) for x in nz])
            logT.append((lS + p * lK + (p + 1) * math.log(N)) / (p + 2))
        i = min(range(len(grid)), key=lambda j: (logT[j], j))
        out["rows"].append({"key": key, "log_gamma": lg, "log_alpha": log_al[l], "log_K": lK, "log_T": logT,
                            "p_star": grid[i], "log_T_star": logT[i], "sigma1": sg[0], "rank": rank,
                            "norm_21": n21, "norm_11": n11, "nuclear": sum(sg),
                            "stable_rank": sum((x / sg[0]) ** 2 for x in sg),
                            "frobenius": sg[0] * math.sqrt(sum((x / sg[0]) ** 2 for x in sg))})
    ts = [r["log_T_star"] for r in out["rows"]]
    out["ours_sum"] = _lse([_lse(ts), 0.5 * math.log(L)])
    out["ours_rss"] = _lse([0.5 * _lse([2 * t for t in ts]), 0.5 * math.log(L)])

    def edelman(which):
        terms = []
        for l in range(L):
            lmo, lmi = lC[(l, -1, "M_out")], lC[(l, -1, "M_in")]
            nrm = {k: math.log(by[k][which]) for k in by if k[0] == l}
            t = [lmo + lmi + lC[(l, h, "V")] + nrm[(l, h, "QK")] for h in range(H)]
            t += [lmo + lmi + nrm[(l, h, "V")] for h in range(H)]
            t += [lmo + nrm[(l, -1, "M_in")], nrm[(l, -1, "M_out")]]
            terms.append(2 / 3 * log_al[l] + _lse([2 / 3 * x for x in t]))
        return 1.5 * _lse([0.0, _lse(terms)])

    out["edelman"], out["edelman_11"] = edelman(2), edelman(3)
    return out


def _check(rep, ref, rel=REL):
    assert isinstance(rep, BoundReport)
    np.testing.assert_allclose(rep.grid, ref["grid"], rtol=0, atol=0)
    np.testing.assert_allclose(rep.log_Lambda, ref["Lambda"], rtol=rel)
    np.testing.assert_allclose(rep.log_alpha, ref["alpha"], rtol=rel, atol=1e-300)
    assert len(rep.matrices) == len(ref["rows"]) == L * (2 * H + 2)
    for sc, r in zip(rep.matrices, ref["rows"]):
        assert (sc.layer, sc.head, sc.matrix_type) == r["key"]
        for f in ("log_gamma", "log_alpha", "log_K", "log_T_star", "sigma1", "norm_21", "norm_11", "nuclear",
                  "stable_rank", "frobenius"):
            assert getattr(sc, f) == pytest.approx(r[f], rel=rel, abs=1e-300), (sc.matrix_type, sc.layer, sc.head, f)
        assert type(sc.rank) is int and sc.rank == r["rank"]
        assert sc.p_star == r["p_star"], (sc.matrix_type, sc.layer, sc.head)
        np.testing.assert_allclose(sc.log_T, r["log_T"], rtol=rel)
        assert sc.log_T0 == pytest.approx(r["log_T"][0], rel=rel)
    assert rep.log_B_ours_sum == pytest.approx(ref["ours_sum"], rel=rel)
    assert rep.log_B_ours_rss == pytest.approx(ref["ours_rss"], rel=rel)
    assert rep.log_B_edelman == pytest.approx(ref["edelman"], rel=rel)
    assert rep.log_B_11 == pytest.approx(ref["edelman_11"], rel=rel)


OPTIONS = [
    {},
    {"gamma_L_phi": True},
    {"softmax_const": 1.0},
    {"L_phi": 1.7},
    {"L_phi": 1.7, "gamma_L_phi": True, "softmax_const": 0.5},
    {"logit_scale": 0.25},
    {"logit_scale": 3},
    {"logit_scale": 2.0},
    {"logit_scale": "inv_sqrt_dh"},
]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "released")
@pytest.mark.parametrize("mode", ["clean", "paper"])
def test_score_equals_closed_form(opts, mode):
    sp = _spectra(mode)
    rep = score(sp, **opts)
    _check(rep, reference(sp, **opts))
    assert rep.mode == mode and rep.dtype == "float64" and rep.source == "synthetic"
    assert rep.options == replace(ScoringOptions(), **opts)
    want_s = 1 / math.sqrt(D) if opts.get("logit_scale") == "inv_sqrt_dh" else float(opts.get("logit_scale", 1.0))
    assert rep.logit_scale == pytest.approx(want_s, rel=1e-15) and type(rep.logit_scale) is float
    # the same options given as an object, and as keywords on top of an object
    _check(score(sp, ScoringOptions(**opts)), reference(sp, **opts))
    if opts:
        k, v = next(iter(opts.items()))
        base = ScoringOptions(**{kk: vv for kk, vv in opts.items() if kk != k})
        assert score(sp, base, **{k: v}).log_B_ours_sum == rep.log_B_ours_sum


def test_both_regimes_of_p_star_and_options_change_the_numbers():
    """The closed-form checks above are not vacuous: p* takes both 0 and positive values, and each
    option moves the quantities it should (and by the closed-form amount)."""
    sp = _spectra()
    base = score(sp)
    ps = base.p_stars
    assert np.any(ps == 0) and np.any(ps > 0)
    g = score(sp, gamma_L_phi=True)
    for a, b in zip(base.matrices, g.matrices):
        if a.matrix_type == "M_out":  # released γ_Mout = 1; with L_φ: B_φ·C(M_in)
            cmi = next(m.sigma1 for m in base.matrices if m.matrix_type == "M_in" and m.layer == a.layer)
            assert a.log_gamma == 0.0 and b.log_gamma == pytest.approx(math.log(cmi), rel=REL)
        else:
            assert b.log_gamma - a.log_gamma == pytest.approx(math.log(1.13), rel=REL)
    c1 = score(sp, softmax_const=1.0)
    for a, b in zip(base.matrices, c1.matrices):
        if a.matrix_type == "QK":
            assert a.log_gamma - b.log_gamma == pytest.approx(math.log(2.0), rel=REL)
    assert c1.log_Lambda[0] < base.log_Lambda[0]


def test_logit_scale_scales_every_qk_norm_and_only_qk():
    sp = _spectra()
    base, sc = score(sp), score(sp, logit_scale=0.25)
    for a, b in zip(base.matrices, sc.matrices):
        f = 0.25 if a.matrix_type == "QK" else 1.0
        assert b.sigma1 == pytest.approx(f * a.sigma1, rel=REL)
        assert b.norm_21 == pytest.approx(f * a.norm_21, rel=REL)
        assert b.norm_11 == pytest.approx(f * a.norm_11, rel=REL)
        assert b.nuclear == pytest.approx(f * a.nuclear, rel=REL)
        assert b.rank == a.rank and b.stable_rank == pytest.approx(a.stable_rank, rel=REL)
    # the (1,1) analogue of B_Edelman under the scale: closed form with s·‖QK_h‖_{1,1}
    assert sc.log_B_11 == pytest.approx(reference(sp, logit_scale=0.25)["edelman_11"], rel=REL)
    assert sc.log_B_11 < base.log_B_11


def test_matrix_spectrum_scaled():
    m = MatrixSpectrum(1, 0, "QK", (4, 4), np.array([3.0, 2.0, 0.5, 0.0]), 7.0, 11.0)
    t = m.scaled(2.5)
    assert (t.layer, t.head, t.matrix_type, t.shape) == (1, 0, "QK", (4, 4))
    np.testing.assert_array_equal(t.sigma, [7.5, 5.0, 1.25, 0.0])
    assert (t.norm_21, t.norm_11) == (17.5, 27.5)
    assert t.sigma1 == 7.5 and t.rank == 3 and t.nuclear == 13.75
    assert t.frobenius == pytest.approx(2.5 * math.sqrt(13.25), rel=1e-15)
    assert not t.sigma.flags.writeable
    np.testing.assert_array_equal(m.sigma, [3.0, 2.0, 0.5, 0.0])  # the original is unchanged
    assert (m.norm_21, m.norm_11) == (7.0, 11.0)


def test_huge_singular_values_are_rescored_in_log_space():
    """σ beyond 2^400 (S_p would overflow): log T and p* still equal the log-space closed form."""
    sp = _spectra(factor=2.0 ** 450 * 1.3)
    rep = score(sp)
    _check(rep, reference(sp), rel=1e-11)
    assert all(np.all(np.isfinite(m.log_T)) for m in rep.matrices)


def test_missing_11_norms_give_nan_edelman_11_only():
    rep = score(_spectra(nan_11=True))
    assert math.isnan(rep.log_B_11)
    assert rep.log_B_edelman == pytest.approx(reference(_spectra())["edelman"], rel=REL)


def test_wrong_number_of_matrices_is_rejected():
    sp = _spectra()
    bad = replace(sp, matrices=sp.matrices[:-1])
    with pytest.raises(ValueError, match=r"^spectra hold 11 matrices, expected 12 for L=2, H=2$"):
        score(bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), "sqrt"])
def test_bad_logit_scale_value_is_rejected(bad):
    with pytest.raises(ValueError, match=r"^logit_scale"):
        score(_spectra(), logit_scale=bad)


@pytest.mark.parametrize("bad", [True, None, [1.0]])
def test_bad_logit_scale_type_is_rejected(bad):
    with pytest.raises(TypeError, match=r"^logit_scale \(a positive finite number or 'inv_sqrt_dh'\) must be a real"):
        score(_spectra(), logit_scale=bad)


@pytest.mark.parametrize("field, bad, exc", [
    ("L_phi", 0.0, ValueError), ("L_phi", float("nan"), ValueError), ("L_phi", "1.13", TypeError),
    ("softmax_const", -2.0, ValueError), ("softmax_const", True, TypeError),
    ("gamma_L_phi", 1, TypeError), ("gamma_L_phi", "yes", TypeError),
])
def test_bad_scoring_constants_are_rejected_when_made(field, bad, exc):
    with pytest.raises(exc, match=f"^{field}"):
        ScoringOptions(**{field: bad})


def test_select_picks_type_and_layer():
    rep = score(_spectra())
    assert rep.select("V", 1) == [m for m in rep.matrices if m.matrix_type == "V" and m.layer == 1]


def test_scale_for():
    arch = _spectra().arch
    assert ScoringOptions().scale_for(arch) == 1.0
    assert ScoringOptions(logit_scale="inv_sqrt_dh").scale_for(arch) == 1.0 / math.sqrt(D)
    v = ScoringOptions(logit_scale=4).scale_for(arch)
    assert v == 4.0 and type(v) is float
    with pytest.raises(ValueError, match=r"^logit_scale must be a positive number or 'inv_sqrt_dh', got 'x'$"):
        ScoringOptions(logit_scale="x").scale_for(arch)
    with pytest.raises(ValueError,
                       match=r"^logit_scale \(a positive finite number or 'inv_sqrt_dh'\) == 0.0, must be > 0$"):
        ScoringOptions(logit_scale=0).scale_for(arch)


def test_log10_or_value():
    assert log10_or_value(math.log(1000.0)) == {"log10": pytest.approx(3.0, rel=1e-15), "value": pytest.approx(1000.0)}
    assert log10_or_value(699.0)["value"] == pytest.approx(math.exp(699.0))
    assert log10_or_value(700.0) == {"log10": pytest.approx(700.0 / math.log(10), rel=1e-15), "value": None}
    assert log10_or_value(-2.0)["value"] == pytest.approx(math.exp(-2.0))


def test_summary_rows_and_dict():
    sp = _spectra()
    rep = score(sp, gamma_L_phi=True, softmax_const=1.0)
    ref = reference(sp, gamma_L_phi=True, softmax_const=1.0)
    summ = rep.summary()
    m = math.ceil(L + math.log(N))
    assert summ["grid_m"] == m and summ["grid_points"] == 2 * m + 1 and summ["n_matrices"] == 12
    ps = [r["p_star"] for r in ref["rows"]]
    assert summ["fraction_p_star_zero"] == pytest.approx(sum(p == 0 for p in ps) / 12, rel=1e-15)
    ln10 = math.log(10)
    for key, want in (("B_ours_sum", ref["ours_sum"]), ("B_ours_rss", ref["ours_rss"]),
                      ("B_edelman", ref["edelman"]), ("B_edelman_11_extension", ref["edelman_11"])):
        assert summ[key]["log10"] == pytest.approx(want / ln10, rel=REL)
        assert summ[key]["value"] == pytest.approx(math.exp(want), rel=1e-11)
    d = rep.to_dict()
    # L_phi not given: the constant of the spectra's activation ("gelu": the released 1.13), recorded as used
    assert d["options"] == {"logit_scale": 1.0, "logit_scale_value": 1.0, "L_phi": None,
                            "L_phi_value": ACTIVATION_L_PHI[sp.arch.activation], "softmax_const": 1.0,
                            "gamma_L_phi": True}
    np.testing.assert_allclose(d["log10_Lambda"], np.array(ref["Lambda"]) / ln10, rtol=REL)
    row, r = d["matrices"][0], ref["rows"][0]
    assert (row["layer"], row["head"], row["kind"], row["rows"], row["cols"]) == (0, 0, "QK", N, N)
    assert row["rank"] == r["rank"] and row["p_star"] == r["p_star"]
    assert row["log10_gamma"] == pytest.approx(r["log_gamma"] / ln10, rel=REL)
    assert row["log10_K"] == pytest.approx(r["log_K"] / ln10, rel=REL)
    assert row["log10_T_star"] == pytest.approx(r["log_T_star"] / ln10, rel=REL)
    assert row["log10_T0"] == pytest.approx(0.5 * math.log(r["rank"] * N) / ln10, rel=REL)
    assert d["matrices"][4]["head"] == ""  # M_in of layer 0: no head


def test_summary_grid_resolution_of_short_grids():
    """``grid_m`` is ``1/grid[1]``; a report with a one-point grid (p = 0 only) has no resolution: 0."""
    rep = score(_spectra())
    assert replace(rep, grid=np.array([0.0, 1.0])).summary()["grid_m"] == 1
    assert replace(rep, grid=np.array([0.0, 0.5, 1.0])).summary()["grid_m"] == 2
    assert replace(rep, grid=np.array([0.0])).summary()["grid_m"] == 0


def _with_sigma(sp, key, sigma):
    """``sp`` with the singular values of the matrix ``(layer, head, kind)`` replaced."""
    mats = tuple(replace(m, sigma=np.asarray(sigma, dtype=float)) if (m.layer, m.head, m.matrix_type) == key else m
                 for m in sp.matrices)
    return replace(sp, matrices=mats)


@pytest.mark.parametrize("opts", [{}, {"logit_scale": 0.25}])
def test_order_of_the_matrices_does_not_matter(opts):
    """``score`` places every matrix by its (layer, head, kind), not by its position in ``spectra``."""
    sp = _spectra()
    rev = replace(sp, matrices=sp.matrices[::-1])
    a, b = score(sp, **opts), score(rev, **opts)
    _check(a, reference(sp, **opts))
    for key in ("log_B_ours_sum", "log_B_ours_rss", "log_B_edelman", "log_B_11"):
        assert getattr(b, key) == pytest.approx(getattr(a, key), rel=1e-14)
    by_key = {(m.layer, m.head, m.matrix_type): m for m in a.matrices}
    for m in b.matrices:
        ref = by_key[(m.layer, m.head, m.matrix_type)]
        assert (m.log_gamma, m.log_K, m.p_star) == (ref.log_gamma, ref.log_K, ref.p_star)
        np.testing.assert_array_equal(m.log_T, ref.log_T)


def test_rank_tolerance_counts_all_values_in_paper_mode():
    """A head value 3e-10·σ₁ lies below the released tolerance 1e-10·6·σ₁ of all six values, so in paper
    mode S_0 = 1 (it would be 2 if the exact zeros were dropped, as clean mode does; clean spectra never
    hold such a value: ``_clean_sigma`` zeroes everything below the tolerance of the full length)."""
    sp = _with_sigma(_spectra("paper"), (0, 1, "V"), [1.0, 3e-10, 0, 0, 0, 0])
    rep = score(sp)
    _check(rep, reference(sp))
    m = next(m for m in rep.matrices if (m.layer, m.head, m.matrix_type) == (0, 1, "V"))
    assert m.rank == 1 and m.log_T0 == pytest.approx(0.5 * math.log(N), rel=REL)


def test_huge_leading_value_with_small_tail():
    """σ₁ = 2^600 (σ₁² overflows float64): in layer 1's M_out with σ₂ ≈ 1.4·σ₁·6e-10 (just above the
    rank tolerance, which a rescaling by the wrong power of two would move), in layer 0's M_in with
    σ₂ = 1 (the rescaling must be decided, and its power taken, from σ₁ alone)."""
    big = 2.0 ** 600
    sp = _with_sigma(_spectra(), (1, -1, "M_out"), [big, 1.4 * 6e-10 * big, 1.0, 0.5, 0.0, 0.0])
    sp = _with_sigma(sp, (0, -1, "M_in"), [big, 1.0, 0.5, 0.0, 0.0, 0.0])
    rep = score(sp)
    _check(rep, reference(sp), rel=1e-11)
    m = next(m for m in rep.matrices if (m.layer, m.matrix_type) == (1, "M_out"))
    assert m.rank == 2 and np.all(np.isfinite(m.log_T))
    assert m.log_T0 == pytest.approx(0.5 * math.log(2 * N), rel=REL)
    m = next(m for m in rep.matrices if (m.layer, m.matrix_type) == (0, "M_in"))
    assert m.rank == 1 and np.all(np.isfinite(m.log_T))


def test_meta_and_source_are_carried_over_as_a_copy():
    sp = replace(_spectra(), meta={"prefix_of": 5}, source="somewhere")
    rep = score(sp)
    assert rep.meta == {"prefix_of": 5} and rep.source == "somewhere"
    rep.meta["x"] = 1
    assert sp.meta == {"prefix_of": 5}
