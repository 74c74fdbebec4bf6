"""Chapter 3's single-head checks from inside and fast (:mod:`bounds_lib.checks.ch3_single_head`): each check's runs
recorded in order with their settings, its claims failing one at a time and its line compared whole; each
optimiser's ratio rebuilt apart from :mod:`bounds_lib.theory.model`; the random draws' shapes and counts. The
power of each search (a weakened bound or a false constant broken) is tested in tests/test_checks.py and
tests/test_checks_statements.py, with searches of seconds each."""
from __future__ import annotations

import numpy as np
import pytest

from bounds_lib.checks import ch3_single_head as CH3
from bounds_lib.checks.harness import Falsification
from bounds_lib.theory import model as M
from bounds_lib.theory import propagation as P
from recording import Recording, record_compositions, record_searches


def _f(name, *ratios):
    return Falsification(name, np.array(ratios, dtype=float))


# --- the one-line checks on recorded runs ---------------------------------------------------------------


@pytest.fixture
def record(monkeypatch):
    """Replace named functions of the module by recorders returning ``levels[name]`` (a Falsification) per call."""
    state = {"calls": [], "levels": {}, "rngs": []}

    def patch(*names):
        for name in names:
            def fake(*args, _name=name, **kwargs):
                state["calls"].append((_name, args[1:], kwargs))
                state["rngs"].append(args[0] if args else "no generator")
                level = state["levels"].get((_name, len([c for c in state["calls"] if c[0] == _name])),
                                            state["levels"].get(_name, 0.5))
                return level if isinstance(level, Falsification) else _f(_name, *np.atleast_1d(level))
            monkeypatch.setattr(CH3, name, fake)
        return state
    return patch


def test_the_softmax_check_draws_logits_then_runs_the_constant_and_its_tenth_less(record, monkeypatch):
    state = record("falsify_softmax")
    seen = []
    monkeypatch.setattr(P, "softmax_jacobian_linf_l1", lambda Z: seen.append(np.array(Z)) or np.full(len(Z), 0.75))
    rng = np.random.default_rng(0)
    r = CH3.check_softmax(rng, trials=1, points=4, softmax_const=0.8)
    Z = seen[0]
    ref = np.random.default_rng(0)
    np.testing.assert_array_equal(Z, ref.standard_normal((4, 6)) * np.exp(ref.uniform(-4, 2, (4, 1))))
    assert seen[1].tolist() == [0.0, 0.0]
    assert [(c[0], c[2]) for c in state["calls"]] == [("falsify_softmax", {"trials": 1, "softmax_const": 0.8}),
                                                      ("falsify_softmax", {"trials": 1, "softmax_const": 0.8 / 1.1})]
    assert [c for c, _ in r.claims] == ["Jacobian norm <= c at 4 points", "Jacobian norm = c at z = 0, T = 2",
                                        "no difference quotient above c in 1 draws", "power: c / 1.1 is broken"]
    assert r.name == "softmax l∞→l1" and r.detail == "max Jacobian norm 0.750000; worst quotient ratio 0.5000000000"
    assert r.failed == ["Jacobian norm = c at z = 0, T = 2", "power: c / 1.1 is broken"]
    assert set(r.values) == {"jacobian", "random", "weakened"} and r.values["jacobian"].tolist() == [0.75] * 4
    assert r.values["random"].name == r.values["weakened"].name == "falsify_softmax"


@pytest.mark.parametrize("jac, random, weak, trials, failed", [
    (1.0 + 1e-13, 1.0, 1.2, 2, []),                                        # within the 1e-12 slack, at the bound
    (1.0 * (1 + 1e-12), 1.0 + 1e-9, 1.2, 2, []),                           # both at their slack exactly
    (1.0 + 1e-11, 1.0, 1.2, 2, ["Jacobian norm <= c at 3 points"]),
    (0.5, 1.0 + 2e-9, 1.2, 2, ["no difference quotient above c in 2 draws"]),
    (0.5, 0.5, 1.0, 2, ["power: c / 1.1 is broken"]),
    (0.5, 0.5, 1.2, 3, ["no difference quotient above c in 2 draws"]),   # fewer draws than asked
])
def test_the_softmax_check_says_which_claim_fails(record, monkeypatch, jac, random, weak, trials, failed):
    state = record("falsify_softmax")
    state["levels"].update({("falsify_softmax", 1): _f("s", random, 0.1), ("falsify_softmax", 2): _f("w", weak)})
    monkeypatch.setattr(P, "softmax_jacobian_linf_l1", lambda Z: np.full(len(Z), jac) if np.ndim(Z) == 2 else [1.0])
    assert CH3.check_softmax(np.random.default_rng(0), trials=trials, points=3).failed == failed


def test_the_softmax_check_defaults_and_its_points_checked(record, monkeypatch):
    state = record("falsify_softmax")
    monkeypatch.setattr(P, "softmax_jacobian_linf_l1", lambda Z: np.ones(len(Z)) if np.ndim(Z) == 2 else [1.0])
    r = CH3.check_softmax(np.random.default_rng(0))
    assert r.values["jacobian"].shape == (20_000,) and state["calls"][0][2]["trials"] == 10_000
    with pytest.raises(ValueError, match=r"^points == 0, must be >= 1$"):
        CH3.check_softmax(np.random.default_rng(0), points=0)


def test_the_logits_check_counts_the_violations_of_the_weakened_bound(record):
    state = record("falsify_logits")
    state["levels"]["falsify_logits"] = _f("l", 0.5, 0.95, 1.0)
    rng = np.random.default_rng(0)
    r = CH3.check_logits(rng, trials=3, weaken=1.04)
    assert state["calls"][0][2] == {"trials": 3} and state["rngs"] == [rng]
    assert list(r.values) == ["random", "weak_violations"] and r.values["random"] is state["levels"]["falsify_logits"]
    assert r.name == "bilinear logits" and r.holds and r.values["weak_violations"] == 1  # 1.04 · 0.95 < 1 < 1.04
    assert [c for c, _ in r.claims] == ["no violation in 3 draws", "power: the same draws break the bound / 1.04"]
    assert r.detail == "worst ratio 1.000000; 1 violations of the bound / 1.04"
    assert CH3.check_logits(np.random.default_rng(0), trials=4).failed == ["no violation in 3 draws"]  # too few
    state["levels"]["falsify_logits"] = _f("l", 0.5, 0.9)
    r = CH3.check_logits(np.random.default_rng(0), trials=2)
    assert r.failed == ["power: the same draws break the bound / 1.1"] and r.values["weak_violations"] == 0
    assert state["calls"][-1][2] == {"trials": 2}
    state["levels"]["falsify_logits"] = _f("l", 1.0 + 1e-12)
    assert CH3.check_logits(np.random.default_rng(0), trials=1).failed == ["no violation in 1 draws"]
    state["levels"]["falsify_logits"] = _f("l", 0.5)  # weakened exactly onto the bound: not a violation
    assert CH3.check_logits(np.random.default_rng(0), trials=1, weaken=2.0).values["weak_violations"] == 0
    CH3.check_logits(np.random.default_rng(0))
    assert state["calls"][-1][2] == {"trials": 10_000}


def test_the_layer_check_runs_four_searches_in_order(record):
    state = record("falsify_layer_lipschitz", "adversarial_layer_lipschitz")
    state["levels"][("adversarial_layer_lipschitz", 2)] = _f("of", 1.5)
    rng = np.random.default_rng(0)
    r = CH3.check_layer_lipschitz(rng, trials=1, false_const=0.3, tokens=(3,), restarts=1)
    assert len(state["rngs"]) == 4 and all(g is rng for g in state["rngs"])
    assert [(c[0], c[2]) for c in state["calls"]] == [
        ("falsify_layer_lipschitz", {"trials": 1, "softmax_const": 1.0}),
        ("falsify_layer_lipschitz", {"trials": 1, "softmax_const": 0.3}),
        ("adversarial_layer_lipschitz", {"tokens": (3,), "restarts": 1}),
        ("adversarial_layer_lipschitz", {"softmax_const": 0.3, "tokens": (3,), "restarts": 1})]
    assert r.holds and r.name == "layer Lipschitz Λ" and list(r.values) == [
        "random", "random_false", "optimiser", "optimiser_false"]
    assert [c for c, _ in r.claims] == ["no violation in 1 random draws", "no violation found by the optimiser",
                                        "power: the optimiser breaks c = 0.3"]
    assert r.detail == "worst ratios random 0.500, random_false 0.500, optimiser 0.500, optimiser_false 1.500"
    assert state["calls"] and CH3.check_layer_lipschitz(np.random.default_rng(0)).claims[2][0].endswith("c = 0.25")
    assert state["calls"][4][2] == {"trials": 10_000, "softmax_const": 1.0}


@pytest.mark.parametrize("levels, failed", [
    ({("falsify_layer_lipschitz", 1): 1.1}, ["no violation in 1 random draws"]),
    ({("adversarial_layer_lipschitz", 1): 1.1}, ["no violation found by the optimiser"]),
    ({("falsify_layer_lipschitz", 2): 1.1}, []),   # what random draws find against c = 0.25 is not a claim
    ({("adversarial_layer_lipschitz", 2): 1.0}, ["power: the optimiser breaks c = 0.25"]),
])
def test_the_layer_check_says_which_claim_fails(record, levels, failed):
    state = record("falsify_layer_lipschitz", "adversarial_layer_lipschitz")
    state["levels"].update({("adversarial_layer_lipschitz", 2): 1.5, **levels})
    assert CH3.check_layer_lipschitz(np.random.default_rng(0), trials=1).failed == failed


def test_the_parameter_check_runs_five_searches_in_order(record):
    state = record("falsify_parameter_perturbation", "adversarial_parameter_perturbation")
    state["levels"].update({("adversarial_parameter_perturbation", 3): 1.5,
                            ("adversarial_parameter_perturbation", 4): 1.5})
    rng = np.random.default_rng(0)
    r = CH3.check_parameter_perturbation(rng, trials=1)
    assert len(state["rngs"]) == 5 and all(g is rng for g in state["rngs"])
    assert list(r.values) == ["random", "optimiser", "qk", "qk_c_quarter", "weakened"]
    assert r.values["qk_c_quarter"].worst_ratio == 1.5 and r.values["random"].name == "falsify_parameter_perturbation"
    assert [(c[0], c[2]) for c in state["calls"]] == [
        ("falsify_parameter_perturbation", {"trials": 1, "softmax_const": 1.0}),
        ("adversarial_parameter_perturbation", {}),
        ("adversarial_parameter_perturbation", {"perturb": ("QK",)}),
        ("adversarial_parameter_perturbation", {"perturb": ("QK",), "softmax_const": 0.25}),
        ("adversarial_parameter_perturbation", {"weaken": 1.1})]
    assert r.holds and r.name == "network parameter perturbation"
    assert [c for c, _ in r.claims] == [
        "no violation in 1 random draws", "no violation found by the optimiser",
        "no violation found by the optimiser changing W^QK alone", "power: softmax constant 1/4 broken through W^QK",
        "power: the bound / 1.1 broken"]
    assert r.detail == ("worst ratios random 0.5000, optimiser 0.5000, qk 0.5000, qk_c_quarter 1.5000, "
                        "weakened 1.5000")
    CH3.check_parameter_perturbation(np.random.default_rng(0))
    assert state["calls"][5][2]["trials"] == 10_000


@pytest.mark.parametrize("which, level, failed", [
    (("falsify_parameter_perturbation", 1), 1.1, ["no violation in 1 random draws"]),
    (("adversarial_parameter_perturbation", 1), 1.1, ["no violation found by the optimiser"]),
    (("adversarial_parameter_perturbation", 2), 1.1, ["no violation found by the optimiser changing W^QK alone"]),
    (("adversarial_parameter_perturbation", 3), 1.0, ["power: softmax constant 1/4 broken through W^QK"]),
    (("adversarial_parameter_perturbation", 4), 1.0, ["power: the bound / 1.1 broken"]),
])
def test_the_parameter_check_says_which_claim_fails(record, which, level, failed):
    state = record("falsify_parameter_perturbation", "adversarial_parameter_perturbation")
    state["levels"].update({("adversarial_parameter_perturbation", 3): 1.5,
                            ("adversarial_parameter_perturbation", 4): 1.5, which: level})
    assert CH3.check_parameter_perturbation(np.random.default_rng(0), trials=1).failed == failed


def test_the_composition_check_runs_the_whole_network_then_w_qk_alone_from_its_own_seed(monkeypatch):
    calls = record_compositions(monkeypatch, CH3, "falsify_composition")
    rng = np.random.default_rng(3)
    state0 = rng.bit_generator.state
    r = CH3.check_composition(rng, qk_seed=11, trials=7, restarts=2)
    seeded = np.random.default_rng(11).bit_generator.state
    qk = {"trials": 7, "restarts": 2, "depths": (1,), "perturb": ("QK",)}
    assert calls == [(state0, {"trials": 7, "restarts": 2}), (state0, {"trials": 7, "restarts": 2, "weaken": 1.1}),
                     (seeded, qk), (seeded, {"softmax_const": 0.5, **qk})]
    assert r.holds and r.name == "composition of covers" and list(r.values) == ["whole", "weakened", "qk", "qk_false"]
    assert r.detail == "worst ratios whole 0.50000, weakened 1.50000, qk 0.50000, qk_false 1.50000"
    CH3.check_composition(np.random.default_rng(3))
    assert calls[4][1] == {"trials": 60, "restarts": 1}
    assert calls[6][0] == np.random.default_rng(20260509).bit_generator.state


def test_the_composition_claims_in_order():
    ok, bad = _f("ok", 0.5), _f("bad", 1.5)
    claims = CH3._compose_claims(dict(whole=ok, weakened=bad, qk=ok, qk_false=bad))
    assert claims == (("no violation", True), ("power: the bound / 1.1 is broken", True),
                      ("no violation perturbing W^QK alone", True),
                      ("power: softmax constant 1/2 broken through W^QK", True))
    assert [v for _, v in CH3._compose_claims(dict(whole=bad, weakened=ok, qk=bad, qk_false=ok))] == [False] * 4


# --- the optimisers' ratios, rebuilt apart ----------------------------------------------------------------


def _block_ratio_apart(x, T, N, c, weaken, qk):
    q = np.exp(min(max(x[0], -4.0), 4.0))
    X = M.project_rows(x[1:1 + T * N].reshape(T, N))
    Xp = M.project_rows(x[1 + T * N:1 + 2 * T * N].reshape(T, N))
    sign = np.ones(N)
    if qk == "indefinite":
        sign[0] = -1.0
    blk = M.Block(q * np.diag(sign), np.eye(N), np.eye(N))
    num = np.max(np.linalg.norm(M.block_forward(X, blk, "identity") - M.block_forward(Xp, blk, "identity"), axis=-1))
    lam = np.exp(P.log_layer_lipschitz(1.0, 1.0, q, 1.0, c))
    return weaken * num / (lam * np.max(np.linalg.norm(X - Xp, axis=-1)))


@pytest.mark.parametrize("qk", ["identity", "indefinite"])
@pytest.mark.parametrize("T, N", [(2, 2), (3, 3)])
def test_the_block_ratio_is_rebuilt_apart(qk, T, N):
    rng = np.random.default_rng(T * N)
    for lq in (-9.0, -1.0, 0.5, 3.0, 9.0):  # beyond ±4 the gain is clipped
        x = np.r_[lq, rng.normal(0.0, 0.8, 2 * T * N)]
        assert CH3._block_ratio(x, T, N, 0.7, 1.3, qk) == pytest.approx(_block_ratio_apart(x, T, N, 0.7, 1.3, qk),
                                                                        rel=1e-12)
    x = np.r_[0.0, np.tile(rng.normal(0.0, 0.8, T * N), 2)]  # X = X'
    assert CH3._block_ratio(x, T, N, 1.0, 1.0, qk) == 0.0
    with pytest.raises(ValueError) as e:
        CH3._block_ratio(np.r_[0.0, rng.normal(0.0, 1.0, 2 * T * N)], T, N, 1.0, 1.0, "diagonal")
    assert str(e.value) == "qk must be 'identity' or 'indefinite', got 'diagonal'"


def test_the_block_ratio_default_is_the_identity_gain():
    x = np.r_[0.3, np.random.default_rng(1).normal(0.0, 0.8, 8)]
    assert CH3._block_ratio(x, 2, 2, 1.0, 1.0) == CH3._block_ratio(x, 2, 2, 1.0, 1.0, "identity")
    assert CH3._block_ratio(x, 2, 2, 1.0, 1.0) != CH3._block_ratio(x, 2, 2, 1.0, 1.0, "indefinite")


def _nets(x, L, N, T, act, perturb):
    k = 3 * L * N * N
    Ws = x[:k].reshape(L, 3, N, N)
    Es = x[k:2 * k].reshape(L, 3, N, N).copy()
    for a, name in enumerate(M.SINGLE_HEAD_MATRIX_TYPES):
        if name not in perturb:
            Es[:, a] = 0.0
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = np.exp(min(max(x[-1], -12.0), 0.0))
    w = np.ones(N) / np.sqrt(N)
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), w, act=act)
    net2 = M.SingleHeadTransformer(tuple(M.Block(*(W + eps * E)) for W, E in zip(Ws, Es)), w, act=act)
    return net, net2, X, Ws, Es, eps


def _network_ratio_apart(x, L, N, T, act, c, weaken, perturb):
    net, net2, X, Ws, Es, eps = _nets(x, L, N, T, act, perturb)
    d = abs(M.forward(net, X) - M.forward(net2, X))
    bound = 0.0
    la = P.log_alpha(P.log_layer_lipschitz(*(np.array([np.linalg.norm(b[a], 2) for b in Ws]) for a in (2, 1, 0)),
                                           net.L_phi, c))
    for ell, (b, e) in enumerate(zip(Ws, Es)):
        C = [np.linalg.norm(W, 2) for W in b]
        g = P.log_gamma(C[2], C[1], C[0], L_phi=net.L_phi, softmax_const=c)
        for a, key in enumerate(("QK", "V", "M")):
            bound += np.exp(np.asarray(g[key]).item() + la[ell]) * eps * np.linalg.norm(e[a], 2)
    return weaken * d / bound if bound > 0 else 0.0


@pytest.mark.parametrize("L, act, perturb", [(1, "identity", ("QK", "V", "M")), (2, "tanh", ("QK",)),
                                             (2, "gelu", ("V", "M"))])
def test_the_network_and_composition_ratios_are_rebuilt_apart(L, act, perturb):
    N, T = 2, 3
    rng = np.random.default_rng(L)
    for last in (-20.0, -5.0, -1.0, 3.0):  # log ε clipped to [-12, 0]
        x = np.r_[rng.normal(0.0, 0.8, 6 * L * N * N + T * N), last]
        got = CH3._network_ratio(x, L, N, T, act, 0.9, 1.2, perturb)
        assert got == pytest.approx(_network_ratio_apart(x, L, N, T, act, 0.9, 1.2, perturb), rel=1e-10)
        net, net2, X, *_ = _nets(x, L, N, T, act, perturb)
        lhs, rhs, _, _ = P.composition_bound(net, net2, X, 0.9)
        assert CH3._composition_ratio(x, L, N, T, act, 0.9, 1.2, perturb) == pytest.approx(1.2 * lhs / rhs,
                                                                                            rel=1e-12)


def test_with_nothing_perturbed_both_ratios_are_zero():
    x = np.r_[np.random.default_rng(0).normal(0.0, 0.8, 24 + 6), -3.0]
    x[12:24] = 0.0  # no perturbation direction
    assert CH3._network_ratio(x, 1, 2, 3, "identity", 1.0, 1.0) == 0.0
    assert CH3._composition_ratio(x, 1, 2, 3, "identity", 1.0, 1.0) == 0.0
    y = np.r_[np.random.default_rng(1).normal(0.0, 0.8, 30), -3.0]
    assert CH3._network_ratio(y, 1, 2, 3, "identity", 1.0, 1.0) == CH3._network_ratio(
        y, 1, 2, 3, "identity", 1.0, 1.0, ("QK", "V", "M"))  # the default: every matrix perturbed


# --- the optimisers' settings, names and draws -----------------------------------------------------------



@pytest.fixture
def searches(monkeypatch):
    return record_searches(monkeypatch, CH3)


def test_the_layer_search_runs_every_token_count_and_gain(searches):
    rng = np.random.default_rng(0)
    f = CH3.adversarial_layer_lipschitz(rng, softmax_const=0.25, weaken=1.1, tokens=(2, 5),
                                        qs=(0.5, 2.0), N=3, trials=7, restarts=1, maxiter=9, qk="indefinite")
    assert all(s["rng"] is rng for s in searches)
    assert [(s["name"], s["trials"], s["restarts"], s["maxiter"]) for s in searches] == [("Λ", 7, 1, 9)] * 4
    assert f.name == "layer Lipschitz Λ, optimiser (c = 0.25, ÷1.1)"
    assert f.ratios.tolist() == [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5] and f.adversarial.tolist() == [10, 20, 30, 40]
    for s, (T, q) in zip(searches, [(2, 0.5), (2, 2.0), (5, 0.5), (5, 2.0)]):
        x = np.random.default_rng(T).normal(0.0, 0.6, 2 * T * 3)
        assert s["ratio"](x) == CH3._block_ratio(np.r_[np.log(q), x], T, 3, 0.25, 1.1, "indefinite")
        draws = np.array([s["sample"](np.random.default_rng(i)) for i in range(200)])
        assert draws.shape == (200, 6 * T) and 0.55 < draws.std() < 0.65 and abs(draws.mean()) < 0.05
    assert CH3.adversarial_layer_lipschitz(np.random.default_rng(0)).name == "layer Lipschitz Λ, optimiser (c = 1)"
    assert [(s["trials"], s["restarts"], s["maxiter"]) for s in searches[4:]] == [(60, 2, 1500)] * 9
    x = np.random.default_rng(0).normal(0.0, 0.6, 8)
    assert searches[4]["ratio"](x) == CH3._block_ratio(np.r_[np.log(0.5), x], 2, 2, 1.0, 1.0, "identity")
    with pytest.raises(ValueError, match=r"^q \(the logit gain\) == 0"):
        CH3.adversarial_layer_lipschitz(np.random.default_rng(0), qs=(0.0,))


@pytest.mark.parametrize("fn, name, grid", [
    ("adversarial_parameter_perturbation", "param", [(1, None), (2, None)]),
    ("falsify_composition", "compose", [(1, "identity"), (1, "tanh"), (2, "identity"), (2, "tanh")]),
])
def test_the_network_searches_run_every_depth_and_draw_log_eps_in_minus_8_to_minus_2(searches, fn, name, grid):
    rng = np.random.default_rng(0)
    f = getattr(CH3, fn)(rng, softmax_const=0.5, weaken=1.1, N=2, T=3, trials=5, restarts=1,
                         maxiter=11, perturb=("QK",))
    assert all(s["rng"] is rng for s in searches)
    assert f.ratios.tolist() == [v for k in range(1, len(grid) + 1) for v in (k, k + 0.5)]
    assert [(s["name"], s["trials"], s["restarts"], s["maxiter"]) for s in searches] == [(name, 5, 1, 11)] * len(grid)
    title = {"param": "network parameter perturbation, optimiser", "compose": "composition (data metric), optimiser"}
    assert f.name == title[name] + " (c = 0.5, ÷1.1, perturbed: QK)"
    assert f.adversarial.tolist() == [10.0 * (i + 1) for i in range(len(grid))]
    ratio_of = CH3._network_ratio if name == "param" else CH3._composition_ratio
    for s, (L, act) in zip(searches, grid):
        dim = 6 * L * 4 + 6 + 1
        draws = np.array([s["sample"](np.random.default_rng(i)) for i in range(300)])
        assert draws.shape == (300, dim) and 0.75 < draws[:, :-1].std() < 0.85 and abs(draws[:, :-1].mean()) < 0.05
        assert -8.0 <= draws[:, -1].min() < -7.8 and -2.2 < draws[:, -1].max() <= -2.0
        x = draws[0]
        assert s["ratio"](x) == ratio_of(x, L, 2, 3, act or "identity", 0.5, 1.1, ("QK",))
    g = getattr(CH3, fn)(np.random.default_rng(0))
    assert g.name == title[name] + " (c = 1)"
    n = len(grid)
    assert [(s["trials"], s["restarts"], s["maxiter"]) for s in searches[n:]] == [(150, 2, 4000)] * n
    x = searches[n]["sample"](np.random.default_rng(0))
    assert x.shape == (6 * 4 + 4 + 1,)  # N = T = 2 by default
    assert searches[n]["ratio"](x) == ratio_of(x, 1, 2, 2, "identity", 1.0, 1.0, ("QK", "V", "M"))
    assert getattr(CH3, fn)(np.random.default_rng(0), perturb=("V", "M")).name.endswith(", perturbed: V+M)")


# --- the random draws, rebuilt from a recording generator -----------------------------------------------



def test_softmax_draws_are_rebuilt_batch_by_batch():
    rng = Recording(2)
    f = CH3.falsify_softmax(rng, trials=1200, softmax_const=0.8)
    ratios = []
    while rng.calls:
        (_, a1, _, T), (_, a2, _, z), (_, a3, _, zs), (_, a4, _, d), (_, a5, _, ds), (_, a6, _, u) = rng.take(6)
        assert a1 == (2, 17) and a2 == ((500, T),) and a4 == ((500, T),)
        assert a3 == (np.log(1e-3), np.log(30), (500, 1)) and a5 == (np.log(1e-6), np.log(3), (500, 1)) and a6 == ()
        z, d = z * np.exp(zs), d * np.exp(ds)
        if u < 0.5:
            d = np.sign(d) * np.abs(d).max(axis=1, keepdims=True)
        num = np.abs(M.softmax_rows(z + d) - M.softmax_rows(z)).sum(axis=1)
        ratios.append(num / (0.8 * np.abs(d).max(axis=1)))
    assert len(ratios) == 3 and f.name == "softmax l∞→l1"
    np.testing.assert_array_equal(f.ratios, np.concatenate(ratios)[:1200])
    assert CH3.falsify_softmax(np.random.default_rng(0)).trials == 10_000


def test_logit_draws_are_rebuilt_batch_by_batch():
    rng = Recording(3)
    f = CH3.falsify_logits(rng, trials=700)
    ratios = []
    while rng.calls:
        (_, a1, _, N), (_, a2, _, ls), (_, a3, _, G) = rng.take(3)
        assert a1 == (1, 9) and a2 == (-2, 2) and a3 == ((N, N),)
        W = np.exp(ls) * G / np.linalg.norm(G, 2)
        (_, b1, _, X), (_, b2, _, sx), (_, b3, _, E), (_, b4, _, se) = rng.take(4)
        assert b1 == ((500, 4, N),) and b2 == (0.1, 3, (500, 1, 1)) and b3 == ((500, 4, N),)
        assert b4 == (-6, 0, (500, 1, 1))
        X = M.project_rows(X * sx)
        Xp = M.project_rows(X + E * np.exp(se))
        num = np.abs(X[:, 0] @ W * X[:, 1] - (Xp[:, 0] @ W) * Xp[:, 1]).sum(axis=1)
        delta = np.maximum(np.linalg.norm(X[:, 0] - Xp[:, 0], axis=1), np.linalg.norm(X[:, 1] - Xp[:, 1], axis=1))
        ratios.append(num / (2 * np.linalg.norm(W, 2) * np.maximum(delta, 1e-300)))
    assert len(ratios) == 2 and f.name == "bilinear logits"
    np.testing.assert_allclose(f.ratios, np.concatenate(ratios)[:700], rtol=1e-12)
    assert CH3.falsify_logits(np.random.default_rng(0), trials=10).trials == 10


def test_layer_draws_are_rebuilt_batch_by_batch():
    rng = Recording(4)
    f = CH3.falsify_layer_lipschitz(rng, trials=1100, softmax_const=0.9)
    ratios, acts = [], []
    i = 0
    while rng.calls:
        (_, a1, _, N), (_, a2, _, T), (_, a3, _, sc) = rng.take(3)
        assert a1 == (1, 7) and a2 == (1, 6) and a3 == (np.log(0.2), np.log(5), 3)
        sc = np.exp(sc)
        Ws = []
        for s in sc:
            (_, g, _, G), = rng.take(1)
            assert g == ((N, N),)
            Ws.append(s * G / np.linalg.norm(G, 2))
        (_, b1, _, X), (_, b2, _, sx), (_, b3, _, se), (_, b4, _, E) = rng.take(4)
        assert b1 == ((250, T, N),) and b2 == (0.1, 2, (250, 1, 1))
        assert b3 == (np.log(1e-4), 0, (250, 1, 1)) and b4 == ((250, T, N),)
        act = sorted(M.ACTIVATIONS)[i % len(M.ACTIVATIONS)]
        acts.append(act)
        blk = M.Block(*Ws)
        X = M.project_rows(X * sx)
        Xp = M.project_rows(X + np.exp(se) * E)
        num = np.max(np.linalg.norm(M.block_forward(X, blk, act) - M.block_forward(Xp, blk, act), axis=-1), axis=-1)
        den = np.max(np.linalg.norm(X - Xp, axis=-1), axis=-1)
        lam = np.exp(P.log_layer_lipschitz(sc[2], sc[1], sc[0], M.ACTIVATION_LIPSCHITZ[act], 0.9))
        ratios.append(num / (lam * np.maximum(den, 1e-300)))
        i += 1
    assert acts == sorted(M.ACTIVATIONS) + sorted(M.ACTIVATIONS)[:1] and f.name == "layer Lipschitz Λ"
    np.testing.assert_allclose(f.ratios, np.concatenate(ratios)[:1100], rtol=1e-12)
    assert CH3.falsify_layer_lipschitz(np.random.default_rng(0), trials=3).trials == 3


def test_the_draws_default_to_ten_thousand():
    assert CH3.falsify_logits(np.random.default_rng(0)).trials == 10_000
    assert CH3.falsify_layer_lipschitz(np.random.default_rng(0)).trials == 10_000
    rng = Recording(0)
    assert CH3.falsify_parameter_perturbation(rng).trials == 10_000  # 200 networks of 50 inputs: 0.3 s
    assert sum(n == "integers" and a == (1, 6) for n, a, _, _ in rng.calls) == 200


def test_parameter_draws_come_in_batches_of_50_networks_and_use_the_released_gamma_when_asked():
    rng = Recording(5)
    f = CH3.falsify_parameter_perturbation(rng, trials=120)
    firsts = [c for c in rng.calls if c[0] == "integers" and c[1] == (1, 6)]
    assert len(firsts) == 3 and f.trials == 120 and f.name == "network parameter perturbation"
    depths = [int(c[3]) for c in firsts]
    masks = [c for c in rng.calls if c[0] == "random" and c[1] and isinstance(c[1][0], tuple)]
    assert [m[1] for m in masks] == [((L, 3),) for L in depths]
    ok = CH3.falsify_parameter_perturbation(np.random.default_rng(6), trials=200)
    released = CH3.falsify_parameter_perturbation(np.random.default_rng(6), trials=200, released=True)
    assert ok.violations == 0 and np.all(released.ratios >= ok.ratios - 1e-12) and np.any(released.ratios > ok.ratios)
    half = CH3.falsify_parameter_perturbation(np.random.default_rng(6), trials=200, softmax_const=0.5)
    assert np.all(half.ratios >= ok.ratios) and np.any(half.ratios > ok.ratios)  # a smaller c, a smaller bound


class _Fixed(Recording):
    """A recording generator whose ``random`` returns ``u`` (a float, or an array of ``u`` of the shape asked): the
    uniform draws that decide a branch put exactly on its threshold."""

    def __init__(self, seed, u):
        super().__init__(seed)
        self.u = u

    def random(self, size=None):
        out = self.u if size is None else np.full(size, self.u)
        self.calls.append(("random", () if size is None else (size,), {}, out))
        return out


def test_a_softmax_draw_exactly_on_one_half_keeps_its_gaussian_direction():
    f = CH3.falsify_softmax(_Fixed(7, 0.5), trials=500, softmax_const=0.9)
    ref = np.random.default_rng(7)
    T = int(ref.integers(2, 17))
    z = ref.standard_normal((500, T)) * np.exp(ref.uniform(np.log(1e-3), np.log(30), (500, 1)))
    d = ref.standard_normal((500, T)) * np.exp(ref.uniform(np.log(1e-6), np.log(3), (500, 1)))  # not balanced
    num = np.abs(M.softmax_rows(z + d) - M.softmax_rows(z)).sum(axis=1)
    np.testing.assert_array_equal(f.ratios, num / (0.9 * np.abs(d).max(axis=1)))


def test_the_block_ratio_is_computed_from_a_distance_of_exactly_one_trillionth():
    x = np.zeros(1 + 2 * 2 * 2)
    x[5] = 1e-12  # X = 0, X' = (1e-12, 0; 0, 0): ‖X − X'‖_{2→∞} = 1e-12 exactly, the smallest distance divided by
    got = CH3._block_ratio(x, 2, 2, 1.0, 1.0)
    assert got > 0 and got == pytest.approx(_block_ratio_apart(x, 2, 2, 1.0, 1.0, "identity"), rel=1e-12)
    x[5] = 0.99e-12
    assert CH3._block_ratio(x, 2, 2, 1.0, 1.0) == 0.0


def _parameter_ratios_apart(rng, trials, c, released):
    """falsify_parameter_perturbation's ratios from the documented draws: per batch of 50 inputs, ``L, N, T``, the
    norm ``s`` of every weight, the network, ``ε``, which matrices move (each with probability 0.6, one always), each
    move ``E`` (``‖E‖₂ = ε s``), the inputs; the bound summed matrix by matrix."""
    out, acts = [], sorted(M.ACTIVATIONS)
    for i in range(-(-trials // 50)):
        L, N, T = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 5))
        act = acts[i % len(acts)]
        s = float(np.exp(rng.uniform(np.log(0.3), np.log(3))))
        net = M.random_transformer(L, N, rng, spectral_norm=s, act=act)
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.3))))
        moves = rng.random((L, 3)) < 0.6
        moves[rng.integers(L), rng.integers(3)] = True
        blocks, bound = [], 0.0
        norms = [[np.linalg.norm(W, 2) for W in (b.W_QK, b.W_V, b.W_M)] for b in net.blocks]
        log_alpha = P.log_alpha(np.array([P.log_layer_lipschitz(m, v, q, net.L_phi, c) for q, v, m in norms]))
        for ell, b in enumerate(net.blocks):
            Ws = [b.W_QK, b.W_V, b.W_M]
            q, v, m = norms[ell]
            g = P.log_gamma(m, v, q, L_phi=None if released else net.L_phi, softmax_const=c)
            for a, key in enumerate(("QK", "V", "M")):
                if moves[ell, a]:
                    A = rng.standard_normal(Ws[a].shape)
                    E = eps * s * A / np.linalg.norm(A, 2)
                    Ws[a] = Ws[a] + E
                    bound += np.exp(np.asarray(g[key]).item() + log_alpha[ell]) * np.linalg.norm(E, 2)
            blocks.append(M.Block(*Ws))
        X = rng.standard_normal((50, T, N)) * rng.uniform(0.2, 3, (50, 1, 1))
        d = np.abs(M.forward(net, X) - M.forward(M.SingleHeadTransformer(tuple(blocks), net.w, act=act), X))
        out.append(d / (np.linalg.norm(net.w) * bound))
    return np.concatenate(out)[:trials]


# with every uniform draw on the threshold 0.6, one matrix moves per network: the one drawn to move always
@pytest.mark.parametrize("make, c, released", [(lambda: Recording(8), 1.0, False), (lambda: _Fixed(9, 0.6), 0.7, True),
                                               (lambda: _Fixed(10, 0.6), 1.0, False)])
def test_parameter_draws_are_rebuilt_network_by_network(make, c, released):
    rng, twin = make(), make()
    f = CH3.falsify_parameter_perturbation(rng, trials=140, softmax_const=c, released=released)
    np.testing.assert_allclose(f.ratios, _parameter_ratios_apart(twin, 140, c, released), rtol=1e-12, atol=0)
    assert f.trials == 140 and f.violations == 0
    ints = [a for n, a, _, _ in rng.calls if n == "integers" and len(a) == 2]
    assert ints == [(1, 6), (2, 7), (1, 5)] * 3
    ranges = [a for n, a, _, _ in rng.calls if n == "uniform"]
    assert ranges == [(np.log(0.3), np.log(3)), (np.log(1e-5), np.log(0.3)), (0.2, 3, (50, 1, 1))] * 3
