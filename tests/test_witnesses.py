"""Witnesses (bounds_lib.checks.witnesses and .ch3_witnesses): every bound attained along its family, every
weakened constant broken.

One test per (witness, weakened constant): the weakened bound must be violated by the witness. The ratios
are checked against their closed forms (so a wrong exponent or a lost factor fails, not only "≤ 1"), and
bugs planted in the library's bound functions (monkeypatched, as a careless edit would make them) must
make the witnesses fail: the witnesses run the library's functions, not copies.
"""
import math

import numpy as np
import pytest

from bounds_lib.theory import propagation as P
from bounds_lib.checks import ch3_witnesses as W3, witnesses as W

CH3 = W3.chapter3_witnesses()
OTHERS = (W.norm_witnesses() + [W.split_witness(k) for k in ("rank", "tail_dim", "tail_schatten")]
          + [W.shell_witness(), W.rounding_witness(), W.log_factor_witness("upper"),
             W.log_factor_witness("lower"), W.frobenius_row_witness()])
ALL = CH3 + OTHERS
PAIRS = [(w, k) for w in ALL for k in w.weakened]


@pytest.mark.parametrize("w", ALL, ids=[w.name for w in ALL])
def test_the_bound_holds_and_is_attained(w):
    assert w.holds, w.summary()
    assert w.attained, w.summary()
    assert w.require() is w


@pytest.mark.parametrize("w,key", PAIRS, ids=[f"{w.name} | {k}" for w, k in PAIRS])
def test_each_weakened_constant_is_broken(w, key):
    assert np.max(w.weakened[key]) > 1 + W.VIOLATION_TOL, (w.name, key, w.weakened[key])
    assert w.caught[key]


def _lambda_ratio(q, v=W3.VALUE, second=None):
    """Closed form of the Λ witness: the Λ head's row 1 moves by vθ(4q + e^{−q})/(2 + e^{−q}) (softmax derivative
    at weights (e^{−q}, 1, 1)/(2 + e^{−q}), plus the self term); a second head (QK = 0, Ṽ = s·I) averages the
    three tokens and adds sθ/3 in the same direction; Λ·θ = (v(1 + 2q) + s)θ over the same Σ_h C(Ṽ_h) scale."""
    e, s = math.exp(-q), (second or 0.0)
    return (v * (4 * q + e) / (2 + e) + s / 3) / (v * (1 + 2 * q) + s)


@pytest.mark.parametrize("make,second", [(W3.layer_qk_witness, None), (W3.multihead_layer_witness, 0.01)])
def test_lambda_witness_matches_its_closed_form(make, second):
    w = make()
    expected = np.array([_lambda_ratio(q, second=second) for q in w.values])
    assert np.allclose(w.ratios, expected, rtol=0, atol=1e-6), (w.ratios, expected)
    # the referee's numbers: 0.84, 0.94, 0.984 at q = 3, 8, 30 (a second head of 0.01 moves the third digit)
    assert [round(float(r), 2) for r in w.ratios[:3]] == [0.84, 0.94, 0.98]
    # against c = 1/2 the single-head ratio is (4q + e^-q)/((2 + e^-q)(1 + q)) -> 2
    half = w.weakened["c = ½"]
    v, s = W3.VALUE, second or 0.0
    assert np.allclose(half, [_lambda_ratio(q, second=second) * (v * (1 + 2 * q) + s) / (v * (1 + q) + s)
                              for q in w.values], atol=1e-6)


def test_depth_two_attains_alpha_through_the_qk_factor():
    for w, second in ((W3.perturbation_witness("V", 2), None), (W3.composition_witness("M", 2), None),
                      (W3.multihead_composition_witness("M_out", 2), W3.SECOND),
                      (W3.multihead_perturbation_witness("M_out", 2), W3.SECOND)):
        assert np.allclose(w.ratios, [_lambda_ratio(q, second=second) for q in w.values], atol=1e-6), w.summary()
        assert w.ratios[2] >= 0.9   # q = 30: the bar for depth 2
        assert np.max(w.weakened["α with c = ½"]) > 1.7


def test_qk_perturbation_ratio_is_the_softmax_leak():
    for w in (W3.perturbation_witness("QK", 1), W3.multihead_gamma_witness("QK"), W3.composition_witness("QK", 1)):
        assert np.allclose(w.ratios, [2 / (2 + math.exp(-q)) for q in w.values], atol=1e-5), w.summary()


def test_released_gamma_is_broken_by_exactly_the_missing_factors():
    # released γ_Mout = 1 against B_φ·C(M_in) = 3·2: the ratio is 6 (to rounding)
    assert W3.multihead_gamma_witness("M_out").weakened["released γ"][-1] == pytest.approx(6.0, rel=1e-6)
    # released γ_V has no L_φ: ratio L_φ = 3
    assert W3.multihead_gamma_witness("V").weakened["released γ"][-1] == pytest.approx(3.0, rel=1e-6)


def test_alpha_value_path_is_exact_at_every_depth():
    w = W3.alpha_value_path(depths=(1, 2, 5, 20))
    assert np.allclose(w.ratios, 1.0, atol=1e-6)
    # C_V × 0.9 in every layer: α⁽⁰⁾ (L − 1 factors) shrinks by 0.9^(L−1); γ^V has no C_V
    assert np.allclose(w.weakened["C_V × 0.9"], [0.9 ** -(L - 1) for L in (1, 2, 5, 20)], rtol=1e-6)


def test_softmax_and_logit_ratios_are_their_closed_forms():
    s = W3.softmax_witness()
    assert np.allclose(s.ratios, [math.tanh(d) / d for d in s.values], rtol=1e-9)
    g = W3.logit_witness()
    assert np.allclose(g.ratios, [1 - t / 2 for t in g.values], rtol=1e-9)


def test_split_and_peeling_witnesses_are_their_closed_forms():
    r = W.split_witness("rank", p=0.5)
    assert np.allclose(r.ratios, [(1 + 1 / k) ** -0.5 for k in r.values], rtol=1e-12)
    t = W.split_witness("tail_dim")
    assert np.allclose(t.ratios, [math.sqrt((k - 1) / k) for k in t.values], rtol=1e-12)
    ts = W.split_witness("tail_schatten", p=0.5)
    assert np.allclose(ts.ratios, [math.sqrt((k - 1) / (2 ** 0.5 + k - 1)) for k in ts.values], rtol=1e-12)


# ------------------------------------------------------------ bugs planted in the library: the witnesses fail


def _planted(monkeypatch, name, wrapper):
    original = getattr(P, name)
    monkeypatch.setattr(P, name, wrapper(original))


def test_planted_softmax_constant_halved_in_lambda(monkeypatch):
    _planted(monkeypatch, "log_layer_lipschitz",
             lambda f: lambda C_M, C_V, C_QK, L_phi, softmax_const=2.0: f(C_M, C_V, C_QK, L_phi, softmax_const / 2))
    assert not W3.layer_qk_witness().ok
    assert not W3.perturbation_witness("M", 2).ok


def test_planted_lphi_dropped_from_multihead_lambda(monkeypatch):
    _planted(monkeypatch, "log_layer_lipschitz_multihead",
             lambda f: lambda Cmi, Cmo, V, QK, L_phi=1.13, softmax_const=2.0: f(Cmi, Cmo, V, QK, 1.0, softmax_const))
    assert not W3.multihead_layer_witness().ok
    assert not W3.multihead_composition_witness("V", 2).ok


def test_planted_released_gamma_mout(monkeypatch):
    def wrap(f):
        def g(Cmi, Cmo, V, QK, L_phi=None, softmax_const=2.0, phi_bound=1.0):
            out = f(Cmi, Cmo, V, QK, L_phi, softmax_const, phi_bound)
            return {**out, "M_out": 0.0 * np.asarray(out["M_out"])}
        return g
    _planted(monkeypatch, "log_gamma_multihead", wrap)
    assert not W3.multihead_gamma_witness("M_out").ok
    assert not W3.multihead_perturbation_witness("M_out", 2).ok


def test_planted_alpha_one_layer_short(monkeypatch):
    _planted(monkeypatch, "log_alpha", lambda f: lambda a: np.append(f(a)[1:], 0.0))
    assert not W3.alpha_value_path().ok


def test_planted_composition_without_the_softmax_constant_in_alpha(monkeypatch):
    def wrap(f):
        def g(layers, hat, w, X, phi, L_phi, softmax_const=1.0):
            lhs, rhs = f(layers, hat, w, X, phi, L_phi, softmax_const / 2)
            return lhs, rhs
        return g
    _planted(monkeypatch, "multihead_composition_bound", wrap)
    assert not W3.multihead_composition_witness("M_out", 2).ok


def test_a_failed_witness_names_what_failed():
    bad = W.Witness("x", "lbl", "q", (1,), np.array([1.5]), {"c": np.array([0.5])})
    assert not bad.ok and "FAILED" in bad.summary()
    with pytest.raises(AssertionError, match="violated.*not broken"):
        bad.require()
    low = W.Witness("y", "lbl", "q", (1,), np.array([0.5]), {})
    with pytest.raises(AssertionError, match="below 0.98"):
        low.require()


def test_unknown_pieces_are_refused():
    with pytest.raises(ValueError, match="no witness"):
        W3.perturbation_witness("QK", 2)
    with pytest.raises(ValueError, match="piece must be"):
        W3.multihead_gamma_witness("W")
    with pytest.raises(ValueError, match="no witness"):
        W3.multihead_composition_witness("QK", 2)
    with pytest.raises(ValueError, match="which must be"):
        W.split_witness("nope")
    with pytest.raises(ValueError, match="side must be"):
        W.log_factor_witness("middle")


def test_every_norm_inequality_has_a_witness():
    from bounds_lib.theory.norms import NORM_INEQUALITIES
    assert {w.name for w in W.norm_witnesses()} == set(NORM_INEQUALITIES)


def test_witness_table_rows():
    rows = W.witness_table(CH3[:3])
    assert [r[0] for r in rows] == [w.name for w in CH3[:3]]
    assert all(r[-1] for r in rows)


# ------------------------------------------------------------ what the reader sees (from the mutation run)


def test_summary_line_is_exact():
    w = W.Witness("Λ", "lbl", "q", (3, 1000.0), np.array([0.84, 0.9995]),
                  {"c × 0.9": np.array([0.9, 1.11]), "c = ½": np.array([0.5, 0.9])})
    assert w.summary() == "Λ — q = 3: 0.8400, 1000: 0.9995; weakened caught 1/2 [FAILED]"
    ok = W.Witness("s", "lbl", "δ", (0.01,), np.array([1.0]), {})
    assert ok.summary() == "s — δ = 0.01: 1.0000 [ok]" and repr(ok) == ok.summary()


@pytest.mark.parametrize("value,text", [(3, "3"), (np.int64(12), "12"), (0.5, "0.5"), (0.001, "0.001"),
                                        (9999.0, "9999"), (0.0, "0"), (1e4, "1e+04"), (1e-4, "1e-04"),
                                        (1e64, "1e+64"), (-2.5, "-2.5")])
def test_parameter_values_are_printed_readably(value, text):
    assert W._fmt(value) == text


def test_witness_table_rows_are_exact():
    w = W.Witness("Λ", "ch03-thm-layer", "q", (3.0, 8.0, 30.0), np.array([0.84, 0.94, 0.98]),
                  {"c × 0.9": np.array([0.9, 1.0, 1.1]), "c = ½": np.array([0.9, 1.5, 1.9]),
                   "L_φ × 0.9": np.array([0.5, 0.6, 0.7])})
    # c × 0.9 and c = ½ change the bound's form (their ratio to the bound's varies along q); L_φ × 0.9 would
    # rescale it (constant ratio) but is not caught
    w2 = W.Witness("Λ", "ch03-thm-layer", "q", (3.0, 8.0, 30.0), np.array([0.84, 0.94, 0.98]),
                   {"c × 0.9": np.array([0.9, 1.0, 1.1]), "c = ½": np.array([0.9, 1.5, 1.9]),
                    "L_φ × 0.9": np.array([0.84, 0.94, 0.98]) / 0.9})
    assert W.witness_table([w]) == [("Λ", "ch03-thm-layer", "q = 30", 0.98, "c × 0.9, c = ½", "", False)]
    assert W.witness_table([w2]) == [("Λ", "ch03-thm-layer", "q = 30", 0.98, "c × 0.9, c = ½", "L_φ × 0.9", True)]
    assert w2.form_changing == {"c × 0.9": True, "c = ½": True, "L_φ × 0.9": False}
    assert W.weakening_counts([w, w2]) == {"form": 5, "form_caught": 4, "rescale": 1}


def test_form_changing_weakenings_are_told_from_rescalings():
    lam = W3.layer_qk_witness()
    kinds = lam.form_changing
    # inside 1 + 2cC_QK: the form changes; a factor of the product: the whole bound is rescaled
    assert kinds["c × 0.9"] and kinds["c = ½"] and kinds["C_QK × 0.9"]
    assert not (kinds["L_φ × 0.9"] or kinds["C_V × 0.9"] or kinds["C_M × 0.9"] or kinds["L_φ dropped"])
    # α with one layer fewer and C_V in α change with the depth: form-changing along L
    alpha = W3.alpha_value_path().form_changing
    assert alpha["α with one layer fewer"] and alpha["C_V × 0.9"]
    # a one-point family cannot tell: counted as a rescaling
    assert not any(w.form_changing["rhs × 0.9"] for w in W.norm_witnesses())
