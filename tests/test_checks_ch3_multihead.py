"""Chapter 3's multi-head checks from inside and fast (:mod:`bounds_lib.checks.ch3_multihead`): each check's runs
recorded in order with their settings, its claims failing one at a time and its line compared whole; the search
vector's layout and each optimiser's ratio rebuilt apart from :mod:`bounds_lib.theory.propagation`; the random
draws of γ followed from a recording generator. The power of each search is tested in tests/test_checks.py."""
from __future__ import annotations

import numpy as np
import pytest

from bounds_lib.checks import ch3_multihead as MH
from bounds_lib.checks.harness import Falsification
from bounds_lib.theory import propagation as P
from bounds_lib.theory.model import MULTI_HEAD_MATRIX_TYPES, project_rows
from recording import Recording, record_compositions, record_searches

TYPES = MULTI_HEAD_MATRIX_TYPES


def _f(name, *ratios):
    return Falsification(name, np.array(ratios, dtype=float))


# --- the search vector's layout ---------------------------------------------------------------------------


def _layers(x, L, H, N, Nf):
    """The search's stacks (:func:`MH._mh_stacks`) as ``L`` layers ``(QK heads, Ṽ heads, M_in, M_out)``."""
    (QK, V, Mi, Mo), used = MH._mh_stacks(x, L, H, N, Nf)
    assert QK.shape == V.shape == (L, H, N, N) and Mi.shape == (L, N, Nf) and Mo.shape == (L, Nf, N)
    return [(list(QK[ell]), list(V[ell]), Mi[ell], Mo[ell]) for ell in range(L)], used


def test_a_search_vector_holds_each_layer_as_qk_heads_v_heads_m_in_m_out():
    H, N, Nf = 2, 2, 3
    k = 2 * H * N * N + 2 * N * Nf
    x = np.arange(2 * k + 5, dtype=float)
    layers, used = _layers(x, 2, H, N, Nf)
    assert used == 2 * k and len(layers) == 2
    for ell, (QK, V, Mi, Mo) in enumerate(layers):
        o = ell * k
        assert [q.tolist() for q in QK] == [x[o:o + 4].reshape(2, 2).tolist(), x[o + 4:o + 8].reshape(2, 2).tolist()]
        assert [v.tolist() for v in V] == [x[o + 8:o + 12].reshape(2, 2).tolist(),
                                           x[o + 12:o + 16].reshape(2, 2).tolist()]
        assert Mi.tolist() == x[o + 16:o + 22].reshape(2, 3).tolist()
        assert Mo.tolist() == x[o + 22:o + 28].reshape(3, 2).tolist()


def test_the_searches_activations_and_their_lipschitz_constants():
    z = np.array([-2.0, 0.0, 0.5])
    assert {k: L for k, (_, L) in MH._MH_ACTS.items()} == {"identity": 1.0, "tanh": 1.0, "3tanh": 3.0}
    np.testing.assert_array_equal(MH._MH_ACTS["identity"][0](z), z)
    np.testing.assert_array_equal(MH._MH_ACTS["tanh"][0](z), np.tanh(z))
    np.testing.assert_array_equal(MH._MH_ACTS["3tanh"][0](z), 3.0 * np.tanh(z))


# --- the ratios, rebuilt apart ------------------------------------------------------------------------------


def _norm(A):
    return float(np.linalg.norm(A, 2))


def _layer_ratio_apart(x, H, N, Nf, T, act, c, weaken):
    (QK, V, Mi, Mo), k = _layers(x, 1, H, N, Nf)[0][0], 2 * H * N * N + 2 * N * Nf
    phi, Lp = MH._MH_ACTS[act]
    X = project_rows(x[k:k + T * N].reshape(T, N))
    Xp = project_rows(x[k + T * N:k + 2 * T * N].reshape(T, N))
    num = np.max(np.linalg.norm(P.multihead_block_forward(X, QK, V, Mi, Mo, phi)
                                - P.multihead_block_forward(Xp, QK, V, Mi, Mo, phi), axis=-1))
    lam = np.exp(Lp and P.log_layer_lipschitz_multihead(np.array([_norm(Mi)]), np.array([_norm(Mo)]),
                                                        np.array([[_norm(v) for v in V]]),
                                                        np.array([[_norm(q) for q in QK]]), Lp, c)[0])
    return weaken * num / (lam * np.max(np.linalg.norm(X - Xp, axis=-1)))


@pytest.mark.parametrize("act", ["identity", "tanh", "3tanh"])
def test_the_layer_ratio_is_rebuilt_apart(act):
    H, N, Nf, T = 2, 2, 3, 2
    k = 2 * H * N * N + 2 * N * Nf
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.normal(0.0, 0.8, k + 2 * T * N)
        assert MH._mh_layer_ratio(x, H, N, Nf, T, act, 0.7, 1.2) == pytest.approx(
            _layer_ratio_apart(x, H, N, Nf, T, act, 0.7, 1.2), rel=1e-12)
    x[k + T * N:] = x[k:k + T * N]  # X = X'
    assert MH._mh_layer_ratio(x, H, N, Nf, T, act, 1.0, 1.0) == 0.0


def _gamma_ratio_apart(x, which, H, N, Nf, T, act, c, weaken):
    (QK, V, Mi, Mo), k = _layers(x, 1, H, N, Nf)[0][0], 2 * H * N * N + 2 * N * Nf
    phi, Lp = MH._MH_ACTS[act]
    shape = {"QK": (N, N), "V": (N, N), "M_in": (N, Nf), "M_out": (Nf, N)}[which]
    size = shape[0] * shape[1]
    E = x[k:k + size].reshape(shape) * np.exp(min(max(x[k + size], -12.0), 0.0))
    X = project_rows(x[k + size + 1:k + size + 1 + T * N].reshape(T, N))
    new = {"QK": list(QK), "V": list(V), "M_in": Mi, "M_out": Mo}
    if which in ("QK", "V"):
        new[which][0] = new[which][0] + E
    else:
        new[which] = new[which] + E
    d = np.max(np.linalg.norm(P.multihead_block_forward(X, QK, V, Mi, Mo, phi)
                              - P.multihead_block_forward(X, new["QK"], new["V"], new["M_in"], new["M_out"], phi),
                              axis=-1))
    g = P.log_gamma_multihead(_norm(Mi), _norm(Mo), np.array([_norm(v) for v in V]), np.array([_norm(q) for q in QK]),
                              L_phi=Lp, softmax_const=c, phi_bound=Lp)  # B_φ = L_φ: φ(0) = 0
    return weaken * d / (float(np.ravel(np.exp(g[which]))[0]) * _norm(E))


@pytest.mark.parametrize("which", TYPES)
def test_the_gamma_ratio_perturbs_head_0_and_is_rebuilt_apart(which):
    H, N, Nf, T = 2, 2, 3, 2
    size = {"QK": 4, "V": 4, "M_in": 6, "M_out": 6}[which]
    rng = np.random.default_rng(1)
    for log_eps in (-20.0, -5.0, -0.5, 2.0):  # clipped to [-12, 0]
        x = rng.normal(0.0, 0.8, 2 * H * N * N + 2 * N * Nf + size + 1 + T * N)
        x[2 * H * N * N + 2 * N * Nf + size] = log_eps
        assert MH._mh_gamma_ratio(x, which, H, N, Nf, T, "3tanh", 0.8, 1.1) == pytest.approx(
            _gamma_ratio_apart(x, which, H, N, Nf, T, "3tanh", 0.8, 1.1), rel=1e-12)
    x[2 * H * N * N + 2 * N * Nf:2 * H * N * N + 2 * N * Nf + size] = 0.0  # no perturbation
    assert MH._mh_gamma_ratio(x, which, H, N, Nf, T, "tanh", 1.0, 1.0) == 0.0


@pytest.mark.parametrize("perturb", [TYPES, ("QK",), ("V", "M_out"), ("M_in",)])
def test_the_composition_ratio_is_rebuilt_apart(perturb):
    L, H, N, Nf, T = 2, 2, 2, 3, 2
    k = L * (2 * H * N * N + 2 * N * Nf)
    rng = np.random.default_rng(2)
    for last in (-20.0, -4.0, 1.0):
        x = np.r_[rng.normal(0.0, 0.8, 2 * k + T * N), last]
        layers, _ = _layers(x, L, H, N, Nf)
        E, _ = _layers(x[k:], L, H, N, Nf)
        eps = np.exp(min(max(last, -12.0), 0.0))
        m = {a: float(a in perturb) for a in TYPES}
        hat = [([q + eps * m["QK"] * e for q, e in zip(a[0], b[0])], [v + eps * m["V"] * e for v, e in zip(a[1], b[1])],
                a[2] + eps * m["M_in"] * b[2], a[3] + eps * m["M_out"] * b[3]) for a, b in zip(layers, E)]
        lhs, rhs = P.multihead_composition_bound(layers, hat, np.ones(N) / np.sqrt(N), x[2 * k:2 * k + T * N].reshape(
            T, N), np.tanh, 1.0, 0.6)
        assert MH._mh_composition_ratio(x, L, H, N, Nf, T, "tanh", 0.6, 1.3, perturb) == pytest.approx(
            1.3 * lhs / rhs, rel=1e-12)
    x[k:2 * k] = 0.0  # nothing moves: both sides 0
    assert MH._mh_composition_ratio(x, L, H, N, Nf, T, "tanh", 0.6, 1.3, perturb) == 0.0


# --- the optimisers' settings, names and draws ------------------------------------------------------------



@pytest.fixture
def searches(monkeypatch):
    return record_searches(monkeypatch, MH)


def test_the_layer_search_runs_every_token_count_and_activation(searches):
    rng = np.random.default_rng(0)
    f = MH.falsify_multihead_layer(rng, softmax_const=0.5, weaken=1.1, H=1, N=2, Nf=3,
                                   tokens=(2, 3), acts=("tanh", "3tanh"), trials=5, restarts=1, maxiter=7)
    assert all(s["rng"] is rng for s in searches) and f.ratios.tolist() == [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5]
    assert [(s["name"], s["trials"], s["restarts"], s["maxiter"]) for s in searches] == [("Λ mh", 5, 1, 7)] * 4
    assert f.name == "multi-head Λ, optimiser (c = 0.5, ÷1.1)" and f.adversarial.tolist() == [10, 20, 30, 40]
    for s, (T, act) in zip(searches, [(2, "tanh"), (2, "3tanh"), (3, "tanh"), (3, "3tanh")]):
        dim = 2 * 4 + 2 * 6 + 2 * T * 2
        draws = np.array([s["sample"](np.random.default_rng(i)) for i in range(400)])
        assert draws.shape == (400, dim) and 0.63 < draws[:, 4:].std() < 0.77
        small = np.abs(draws[:, :4]).max(axis=1) < 0.1  # the logits' weights scaled by 0.02 half the time
        assert 0.4 < small.mean() < 0.6 and abs(draws[:, 4:].mean()) < 0.05
        assert 0.63 < draws[~small, :4].std() < 0.77 and 0.7 * 0.017 < draws[small, :4].std() < 0.7 * 0.023
        assert s["ratio"](draws[0]) == MH._mh_layer_ratio(draws[0], 1, 2, 3, T, act, 0.5, 1.1)
    g = MH.falsify_multihead_layer(np.random.default_rng(0))
    assert g.name == "multi-head Λ, optimiser (c = 1)"
    assert [(s["trials"], s["restarts"], s["maxiter"]) for s in searches[4:]] == [(300, 3, 3000)] * 3
    x = searches[4]["sample"](np.random.default_rng(0))
    assert x.shape == (2 * 2 * 4 + 2 * 4 + 2 * 2 * 2,)  # H = N = Nf = 2, T = 2 by default
    assert searches[5]["ratio"](x) == MH._mh_layer_ratio(x, 2, 2, 2, 2, "tanh", 1.0, 1.0)


@pytest.mark.parametrize("which", TYPES)
def test_the_gamma_search_of_each_matrix_type(searches, which):
    rng = np.random.default_rng(0)
    f = MH.adversarial_multihead_gamma(rng, which, softmax_const=0.5, weaken=1.1, H=1, N=2,
                                       Nf=3, T=3, act="3tanh", trials=5, restarts=1, maxiter=7)
    assert searches[0]["rng"] is rng and f.adversarial.tolist() == [10.0]
    size = {"QK": 4, "V": 4, "M_in": 6, "M_out": 6}[which]
    (s,) = searches
    assert (s["name"], s["trials"], s["restarts"], s["maxiter"]) == ("γ mh", 5, 1, 7)
    assert f.name == f"multi-head γ_{which}, optimiser (c = 0.5, ÷1.1)" and f.ratios.tolist() == [1, 1.5]
    draws = np.array([s["sample"](np.random.default_rng(i)) for i in range(300)])
    e = 2 * 4 + 2 * 6 + size
    assert draws.shape == (300, e + 1 + 6) and -8.0 <= draws[:, e].min() < -7.8 and -2.2 < draws[:, e].max() <= -2.0
    rest = np.delete(draws, e, axis=1)
    assert 0.75 < rest.std() < 0.85 and abs(rest.mean()) < 0.05
    assert s["ratio"](draws[0]) == MH._mh_gamma_ratio(draws[0], which, 1, 2, 3, 3, "3tanh", 0.5, 1.1)
    g = MH.adversarial_multihead_gamma(np.random.default_rng(0), which)
    assert g.name == f"multi-head γ_{which}, optimiser (c = 1)"
    assert (searches[1]["trials"], searches[1]["restarts"], searches[1]["maxiter"]) == (60, 2, 3000)
    x = searches[1]["sample"](np.random.default_rng(0))
    assert searches[1]["ratio"](x) == MH._mh_gamma_ratio(x, which, 2, 2, 2, 2, "identity", 1.0, 1.0)


def test_an_unknown_matrix_type_is_named():
    with pytest.raises(ValueError) as e:
        MH.adversarial_multihead_gamma(np.random.default_rng(0), "W_O")
    assert str(e.value) == "which must be one of QK, V, M_in, M_out, got 'W_O'"


def test_the_composition_search_runs_every_depth_and_activation(searches):
    rng = np.random.default_rng(0)
    f = MH.falsify_multihead_composition(rng, softmax_const=0.5, weaken=1.1, depths=(1, 2), H=1,
                                         N=2, Nf=3, T=3, acts=("tanh", "3tanh"), perturb=("QK",), trials=5,
                                         restarts=1, maxiter=7)
    assert all(s["rng"] is rng for s in searches) and f.ratios.tolist() == [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5]
    assert f.adversarial.tolist() == [10, 20, 30, 40]
    assert [(s["name"], s["trials"], s["restarts"], s["maxiter"]) for s in searches] == [("compose mh", 5, 1, 7)] * 4
    assert f.name == "multi-head composition, optimiser (c = 0.5, ÷1.1, perturbed: QK)"
    for s, (L, act) in zip(searches, [(1, "tanh"), (1, "3tanh"), (2, "tanh"), (2, "3tanh")]):
        k = L * (2 * 4 + 2 * 6)
        draws = np.array([s["sample"](np.random.default_rng(i)) for i in range(300)])
        assert draws.shape == (300, 2 * k + 6 + 1) and 0.75 < draws[:, :-1].std() < 0.85
        assert abs(draws[:, :-1].mean()) < 0.05
        assert -8.0 <= draws[:, -1].min() < -7.8 and -2.2 < draws[:, -1].max() <= -2.0
        assert s["ratio"](draws[0]) == MH._mh_composition_ratio(draws[0], L, 1, 2, 3, 3, act, 0.5, 1.1, ("QK",))
    g = MH.falsify_multihead_composition(np.random.default_rng(0))
    assert g.name == "multi-head composition, optimiser (c = 1)"
    assert [(s["trials"], s["restarts"], s["maxiter"]) for s in searches[4:]] == [(100, 2, 4000)] * 4
    x = searches[4]["sample"](np.random.default_rng(0))
    assert x.shape == (2 * 24 + 4 + 1,) and searches[4]["ratio"](x) == MH._mh_composition_ratio(
        x, 1, 2, 2, 2, 2, "identity", 1.0, 1.0, TYPES)
    assert MH.falsify_multihead_composition(np.random.default_rng(0), perturb=("V", "M_in")).name.endswith(
        ", perturbed: V+M_in)")


# --- the one-line checks on recorded runs ---------------------------------------------------------------


def test_the_gamma_check_runs_the_lemma_and_the_released_gamma_and_reports_per_type(monkeypatch):
    calls = []
    proved = (_f("p", 0.5, 0.9, 0.7, 0.2), np.array(["QK", "V", "M_in", "M_out"]))
    released = (_f("r", 0.5, 1.5, 0.7, 1.2, 0.9), np.array(["QK", "V", "M_in", "M_out", "M_out"]))

    def fake(rng, trials, released):
        calls.append((rng, trials, released))
        return (released_run if released else proved_run)

    proved_run, released_run = proved, released
    monkeypatch.setattr(MH, "falsify_multihead_gamma", fake)
    r = MH.check_multihead_gamma("rng", "rng_released", trials=4)
    assert calls == [("rng", 4, False), ("rng_released", 4, True)]
    assert r.holds and r.name == "multi-head γ, random draws"
    assert [c for c, _ in r.claims] == ["no violation of the lemma in 4 draws", "the released gamma is violated",
                                        "the released gamma_Mout = 1 is violated"]
    assert r.values["worst_released"] == {"QK": 0.5, "V": 1.5, "M_in": 0.7, "M_out": 1.2}
    assert r.detail == "worst ratios: lemma 0.9, released 1.5 (2 violations)"
    assert set(r.values) == {"proved", "proved_keys", "released", "released_keys", "worst_released"}
    assert r.values["released_keys"] is released[1] and r.values["proved"] is proved[0]
    assert r.values["proved_keys"] is proved[1] and r.values["released"] is released[0]
    MH.check_multihead_gamma("rng", "rng_released")
    assert calls[2] == ("rng", 10_000, False)
    # fewer draws than asked; a violation of the lemma; no M_out draw or none above 1 in the released runs
    assert MH.check_multihead_gamma("r", "q", trials=5).failed == ["no violation of the lemma in 4 draws"]
    proved_run = (_f("p", 0.5, 1.1, 0.7, 0.2), proved[1])
    assert MH.check_multihead_gamma("r", "q", trials=4).failed == ["no violation of the lemma in 4 draws"]
    proved_run = proved
    released_run = (_f("r", 0.5, 1.5, 0.7), np.array(["QK", "V", "M_in"]))
    assert MH.check_multihead_gamma("r", "q", trials=4).failed == ["the released gamma_Mout = 1 is violated"]
    released_run = (_f("r", 0.5, 0.5, 0.7, 1.0), np.array(["QK", "V", "M_in", "M_out"]))
    assert MH.check_multihead_gamma("r", "q", trials=4).failed == ["the released gamma is violated",
                                                                   "the released gamma_Mout = 1 is violated"]


def test_the_gamma_optimiser_check_runs_each_type_then_its_weakening(monkeypatch):
    calls, levels = [], {}

    def fake(rng, which, weaken=1.0, **search):
        assert rng == "rng"
        calls.append((which, weaken, search))
        return _f(which, levels.get((which, weaken), 1.2 if weaken != 1.0 else 0.97))

    monkeypatch.setattr(MH, "adversarial_multihead_gamma", fake)
    r = MH.check_multihead_gamma_optimiser("rng", reach=0.96, weaken=1.05, trials=3, restarts=1)
    assert calls == [(a, w, {"trials": 3, "restarts": 1}) for a in TYPES for w in (1.0, 1.05)]
    assert r.holds and r.name == "multi-head γ, optimiser"
    assert [c for c, _ in r.claims] == [f"gamma_{a}: no violation, reaches 0.96" for a in TYPES] + [
        f"power: gamma_{a} / 1.05 is broken" for a in TYPES]
    assert r.detail == "worst ratios " + ", ".join(f"{a} 0.9700 (÷1.05: 1.200)" for a in TYPES)
    assert list(r.values["proved"]) == list(TYPES) and list(r.values["weakened"]) == list(TYPES)
    levels.update({("V", 1.0): 0.95, ("M_in", 1.0): 1.01, ("QK", 1.05): 1.0})
    assert MH.check_multihead_gamma_optimiser("rng", reach=0.96, weaken=1.05).failed == [
        "gamma_V: no violation, reaches 0.96", "gamma_M_in: no violation, reaches 0.96",
        "power: gamma_QK / 1.05 is broken"]
    levels.clear()
    levels[("QK", 1.0)] = 0.95
    r = MH.check_multihead_gamma_optimiser("rng")
    assert r.holds and r.claims[0][0] == "gamma_QK: no violation, reaches 0.95" and calls[-1][1] == 1.1


def test_the_composition_check_runs_its_four_searches_from_their_seeds(monkeypatch):
    calls = record_compositions(monkeypatch, MH, "falsify_multihead_composition")
    r = MH.check_multihead_composition(seed=3, qk_seed=4, trials=6, qk_trials=5, restarts=1)
    s3, s4 = np.random.default_rng(3).bit_generator.state, np.random.default_rng(4).bit_generator.state
    kw = {"depths": (1, 2), "acts": ("3tanh",), "trials": 6, "restarts": 1}
    kq = {"depths": (1,), "acts": ("identity",), "trials": 5, "restarts": 1, "perturb": ("QK",)}
    assert calls == [(s3, kw), (s3, {"weaken": 1.1, **kw}), (s4, kq), (s4, {"softmax_const": 0.5, **kq})]
    assert r.holds and r.name == "multi-head composition" and list(r.values) == ["whole", "weakened", "qk", "qk_false"]
    assert r.detail == "worst ratios whole 0.5000, weakened 1.5000, qk 0.5000, qk_false 1.5000"
    MH.check_multihead_composition()
    assert calls[4][0] == np.random.default_rng(20260509).bit_generator.state
    assert calls[6][0] == np.random.default_rng(7).bit_generator.state
    assert (calls[4][1]["trials"], calls[4][1]["restarts"], calls[6][1]["trials"]) == (60, 2, 40)


# --- the random draws of γ ----------------------------------------------------------------------------------



def test_gamma_draws_come_in_batches_of_50_with_their_matrix_type():
    rng = Recording(8)
    f, keys = MH.falsify_multihead_gamma(rng, trials=120)
    starts = [i for i, c in enumerate(rng.calls) if c[0] == "integers" and c[1] == (2, 6)]
    assert len(starts) == 3 and f.trials == 120 and keys.shape == (120,) and f.name == "multi-head γ"
    for b, i in enumerate(starts):
        (_, _, _, N), (_, a2, _, T), (_, a3, _, H), (_, a4, _, Nf), (_, a5, _, Lp), (_, a6, _, s) = rng.calls[i:i + 6]
        assert a2 == (1, 5) and a3 == (1, 3) and a4 == (N, 3 * N + 1) and a5 == ([1.0, 3.0],)
        assert a6 == (np.log(0.3), np.log(4), 4)
        which = next(c for c in rng.calls[i + 6:] if c[0] == "integers" and c[1] == (4,))[3]
        assert set(keys[50 * b:50 * (b + 1)]) == {TYPES[which]}
    released, rkeys = MH.falsify_multihead_gamma(np.random.default_rng(8), trials=120, released=True)
    assert released.name == "multi-head γ (released)" and rkeys.tolist() == keys.tolist()
    tight, keys = MH.falsify_multihead_gamma(np.random.default_rng(9), trials=600)
    half, _ = MH.falsify_multihead_gamma(np.random.default_rng(9), trials=600, softmax_const=0.5)
    qk = keys == "QK"  # a smaller c, a smaller γ_QK (the other γ do not hold c)
    assert np.all(half.ratios[qk] >= tight.ratios[qk]) and np.any(half.ratios[qk] > tight.ratios[qk])
    np.testing.assert_array_equal(half.ratios[~qk], tight.ratios[~qk])
    assert MH.falsify_multihead_gamma(np.random.default_rng(0))[0].trials == 10_000


def test_the_layer_ratio_divides_by_a_distance_of_exactly_one_trillionth():
    H, N, Nf, T = 1, 2, 2, 2
    k = 2 * H * N * N + 2 * N * Nf
    x = np.r_[np.random.default_rng(3).normal(0.0, 0.8, k), np.zeros(2 * T * N)]
    x[k + T * N] = 1e-12  # X = 0, X' = (1e-12, 0; 0, 0): ‖X − X'‖_{2→∞} = 1e-12 exactly, the smallest divided by
    got = MH._mh_layer_ratio(x, H, N, Nf, T, "tanh", 1.0, 1.0)
    assert got > 0 and got == pytest.approx(_layer_ratio_apart(x, H, N, Nf, T, "tanh", 1.0, 1.0), rel=1e-12)
    x[k + T * N] = 0.99e-12
    assert MH._mh_layer_ratio(x, H, N, Nf, T, "tanh", 1.0, 1.0) == 0.0


def _gamma_draws_apart(rng, trials, released, c):
    """falsify_multihead_gamma's ratios and matrix types from its documented draws, with γ written out: the lemma's
    ``γ_QK = c C(Ṽ_h) L_φ C(M_out) C(M_in)``, ``γ_V = L_φ C(M_out) C(M_in)``, ``γ_Min = L_φ C(M_out)``,
    ``γ_Mout = B_φ C(M_in)`` (``B_φ = L_φ`` for ``L_φ tanh``); the released ones without ``L_φ``, with
    ``γ_Mout = 1`` and ``c = 2``."""
    def spectral(shape, norm):
        A = rng.standard_normal(shape)
        return norm * A / np.linalg.norm(A, 2)

    out, keys = [], []
    for _ in range(-(-trials // 50)):
        N, T, H = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        Nf = int(rng.integers(N, 3 * N + 1))
        Lp = float(rng.choice([1.0, 3.0]))
        s = np.exp(rng.uniform(np.log(0.3), np.log(4), 4))
        QK = [spectral((N, N), s[0]) for _ in range(H)]
        V = [spectral((N, N), s[1]) for _ in range(H)]
        Mi, Mo = spectral((N, Nf), s[2]), spectral((Nf, N), s[3])
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.1))))
        which, h = int(rng.integers(4)), int(rng.integers(H))
        new = [list(QK), list(V), Mi, Mo]
        if which < 2:
            new[which][h] = new[which][h] + spectral((N, N), eps)
        else:
            new[which] = new[which] + spectral(new[which].shape, eps)
        X = project_rows(rng.standard_normal((50, T, N)) * rng.uniform(0.2, 3, (50, 1, 1)))
        phi = lambda z, Lp=Lp: Lp * np.tanh(z)  # noqa: E731
        diff = P.multihead_block_forward(X, QK, V, Mi, Mo, phi) - P.multihead_block_forward(X, *new, phi)
        d = np.linalg.norm(diff, axis=-1).max(axis=-1)
        cv = _norm(V[h])
        if released:
            gam = [2.0 * cv * s[3] * s[2], s[3] * s[2], s[3], 1.0][which]
        else:
            gam = [c * cv * Lp * s[3] * s[2], Lp * s[3] * s[2], Lp * s[3], Lp * s[2]][which]
        out.append(d / (gam * eps))
        keys += [TYPES[which]] * 50
    return np.concatenate(out)[:trials], keys[:trials]


@pytest.mark.parametrize("seed, released, c", [(11, False, 1.0), (12, True, 1.0), (13, False, 0.6)])
def test_gamma_draws_are_rebuilt_block_by_block(seed, released, c):
    f, keys = MH.falsify_multihead_gamma(np.random.default_rng(seed), trials=900, released=released, softmax_const=c)
    ratios, want = _gamma_draws_apart(np.random.default_rng(seed), 900, released, c)
    assert keys.tolist() == want and set(want) == set(TYPES)  # 18 blocks: every type perturbed
    np.testing.assert_allclose(f.ratios, ratios, rtol=1e-12, atol=0)
