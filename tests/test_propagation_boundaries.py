"""Closed forms, options and argument names in the errors of bounds_lib.theory.propagation (written against
the survivors of `make mutation MODULES=propagation`, see tests/MUTATION.md)."""
import numpy as np
import pytest

from bounds_lib.theory import model as M
from bounds_lib.theory import propagation as P


def test_gamma_options_closed_forms():
    # released form ignores L_φ's companions: phi_bound has no effect without L_phi
    g = P.log_gamma(3.0, 2.0, 7.0, phi_bound=5.0)
    assert g["M"] == 0.0 and np.isclose(g["V"], np.log(3.0))
    g = P.log_gamma(3.0, 2.0, 7.0, L_phi=2.0, softmax_const=0.5, phi_bound=4.0)
    assert np.allclose([np.exp(g[k]) for k in ("QK", "V", "M")], [0.5 * 2 * 2 * 3, 2 * 3, 4.0])
    g = P.log_gamma_multihead(2.0, 3.0, 5.0, 7.0, L_phi=1.5, softmax_const=0.5, phi_bound=4.0)
    assert np.allclose([np.exp(g[k]) for k in ("QK", "V", "M_in", "M_out")],
                       [0.5 * 5 * 3 * 2 * 1.5, 3 * 2 * 1.5, 3 * 1.5, 4.0 * 2.0])
    g = P.log_gamma_multihead(2.0, 3.0, 5.0, 7.0, softmax_const=3.0, phi_bound=4.0)  # released: no L_φ, γ_Mout = 1
    assert np.allclose([np.exp(g[k]) for k in ("QK", "V", "M_in", "M_out")], [3 * 5 * 3 * 2, 6, 3, 1])
    for v in P.log_gamma(3.0, 2.0, 7.0).values():
        assert isinstance(v, float)
    arr = P.log_gamma(np.ones(3), np.ones(3), np.ones(3))
    assert arr["M"].shape == (3,) and arr["QK"].shape == (3,)
    gm = P.log_gamma_multihead(np.ones(2), np.full(2, 2.0), np.ones((2, 3)), np.ones((2, 3)), L_phi=1.0)
    assert gm["M_out"].shape == (2,) and gm["QK"].shape == (2, 3) and np.allclose(gm["M_in"], np.log(2.0))
    with pytest.raises(ValueError, match="do not broadcast"):
        P.log_gamma_multihead(np.ones(2), np.ones(2), np.ones((3, 4)), np.ones((3, 4)))


def test_layer_lipschitz_multihead_closed_forms():
    a = P.log_layer_lipschitz_multihead([2.0], [3.0], [[1.0, 0.0]], [[1.0, 5.0]], L_phi=1.5, softmax_const=0.5)
    assert np.isclose(a[0], np.log(1.5 * 6 * (1 * (1 + 1.0))))
    zero = P.log_layer_lipschitz_multihead([1.0], [1.0], [[0.0, 0.0]], [[1.0, 1.0]])
    assert zero[0] == -np.inf
    two = P.log_layer_lipschitz_multihead([1.0, 1.0], [1.0, 2.0], [[1.0], [1.0]], [[0.0], [0.0]], L_phi=1.0)
    assert np.allclose(two, [0.0, np.log(2.0)])
    with pytest.raises(ValueError, match=r"C_Min and C_Mout must have shape \(1,\)"):
        P.log_layer_lipschitz_multihead([1.0, 1.0], [1.0, 1.0], [[1.0]], [[1.0]])
    with pytest.raises(ValueError, match="must both have shape"):
        P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[1.0, 1.0]])
    assert isinstance(P.log_layer_lipschitz(1.0, 1.0, 1.0, 1.0), float)
    assert P.log_layer_lipschitz(0.0, 1.0, 1.0, 1.0) == -np.inf


def test_alpha_and_scale_edges():
    assert P.log_alpha([-np.inf, 1.0, 2.0]).tolist() == [3.0, 2.0, 0.0]
    with pytest.raises(ValueError, match=r"^log_Lambda contains inf, must be finite \(log of per-layer factors"):
        P.log_alpha([1.0, np.inf])
    with pytest.raises(ValueError, match="one entry per layer"):
        P.log_alpha(np.zeros((2, 2)))
    assert P.log_scale_K(P.LOG_TINY - np.log(2.0), 0.0, 2) == P.LOG_TINY
    assert P.log_scale_K(P.LOG_TINY, 0.0, 2) == P.LOG_TINY + np.log(2.0)
    assert isinstance(P.log_scale_K(0.0, 0.0, 1), float)
    with pytest.raises(ValueError, match=r"^log_gamma contains inf, must be finite \(compute it in log space"):
        P.log_scale_K(np.inf, 0.0, 1)
    with pytest.raises(ValueError, match="log_K contains NaN"):
        P.radius_allocation(1.0, np.nan)
    assert isinstance(P.radius_allocation(2.0, 0.0), float) and np.isclose(P.radius_allocation(2.0, 0.0), np.log(2.0))
    assert np.allclose(P.radius_allocation(1.0, np.array([0.0, 1.0])), [0.0, -1.0])
    for bad, what in ((np.inf, "== inf, must be finite"), (np.nan, "is NaN"), (0.0, "== 0.0, must be > 0.0")):
        with pytest.raises(ValueError, match=rf"^eps \(the radius ε\) {what}"):
            P.radius_allocation(bad, 0.0)
    with pytest.raises(TypeError, match=r"^eps \(the radius ε\) must be a real number, got bool True$"):
        P.radius_allocation(True, 0.0)


def test_softmax_jacobian_closed_form_and_limits():
    # p = (1/4, 3/4): subsets give q ∈ {0, 1/4, 3/4, 1}, max 4q(1-q) = 3/4
    assert np.isclose(P.softmax_jacobian_linf_l1(np.array([0.0, np.log(3.0)]))[0], 0.75)
    assert P.softmax_jacobian_linf_l1(np.zeros((3, 1))).tolist() == [0.0, 0.0, 0.0]
    assert P.softmax_jacobian_linf_l1(np.zeros(16)).shape == (1,)
    with pytest.raises(ValueError, match="T <= 16"):
        P.softmax_jacobian_linf_l1(np.zeros(17))


def test_multihead_forward_logit_scale_and_heads():
    rng = np.random.default_rng(0)
    X = M.project_rows(rng.standard_normal((2, 3, 2)))
    QK, V = [np.eye(2) * 3.0], [np.eye(2)]
    tanh = np.tanh
    a = P.multihead_block_forward(X, QK, V, np.eye(2), np.eye(2), tanh, logit_scale=0.5)
    b = P.multihead_block_forward(X, [np.eye(2) * 1.5], V, np.eye(2), np.eye(2), tanh)
    assert np.allclose(a, b)
    # the single-head model is the one-head case with M_in = I, φ applied, M_out = W_M
    blk = M.Block(QK[0], V[0], 0.5 * np.eye(2))
    c = P.multihead_block_forward(X, QK, V, np.eye(2), 0.5 * np.eye(2), tanh)
    assert np.allclose(c, M.block_forward(X, blk, "tanh"))
    two = P.multihead_block_forward(X, QK * 2, V * 2, np.eye(2), np.eye(2), lambda x: x)
    one = M.project_rows(2 * M.attention(X, QK[0], V[0]))
    assert np.allclose(two, M.project_rows(M.project_rows(one)))


@pytest.mark.parametrize("call, pattern", [
    (lambda: P.log_layer_lipschitz(-1.0, 1.0, 1.0, 1.0), r"^C_M contains -1.0, must be >= 0.0 \(spectral norms"),
    (lambda: P.log_layer_lipschitz(1.0, np.nan, 1.0, 1.0), r"^C_V contains NaN"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, np.inf, 1.0), r"^C_QK contains inf, must be finite"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, [], 1.0), r"^C_QK is empty"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, "a", 1.0), r"^C_QK must be a numeric array"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, 1.0, 0.0), r"^L_phi == 0.0, must be > 0.0$"),
    (lambda: P.log_layer_lipschitz_multihead([-1.0], [1.0], [[1.0]], [[1.0]]), r"^C_Min contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [-1.0], [[1.0]], [[1.0]]), r"^C_Mout contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[-1.0]], [[1.0]]), r"^C_V_heads contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[-1.0]]), r"^C_QK_heads contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[1.0]], L_phi=-1.0), r"^L_phi == "),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[1.0]], softmax_const=0.0), r"^softmax_const == "),
    (lambda: P.log_gamma(-1.0, 1.0, 1.0), r"^C_M contains"), (lambda: P.log_gamma(1.0, -1.0, 1.0), r"^C_V contains"),
    (lambda: P.log_gamma(1.0, 1.0, -1.0), r"^C_QK contains"),
    (lambda: P.log_gamma(1.0, 1.0, 1.0, L_phi=0.0), r"^L_phi == "),
    (lambda: P.log_gamma(1.0, 1.0, 1.0, L_phi=1.0, phi_bound=0.0), r"^phi_bound == "),
    (lambda: P.log_gamma_multihead(-1.0, 1.0, 1.0, 1.0), r"^C_Min contains"),
    (lambda: P.log_gamma_multihead(1.0, -1.0, 1.0, 1.0), r"^C_Mout contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, -1.0, 1.0), r"^C_V_h contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, -1.0), r"^C_QK_h contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, 1.0, softmax_const=-1.0), r"^softmax_const == "),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, 1.0, L_phi=1.0, phi_bound=-1.0), r"^phi_bound == "),
    (lambda: P.log_scale_K(0.0, 0.0, 0), r"^L \(number of layers\) == 0, must be >= 1$"),
    (lambda: P.log_scale_K(0.0, np.nan, 1), r"^log_alpha contains NaN"),
    (lambda: P.log_scale_K(np.nan, 0.0, 1), r"^log_gamma contains NaN"),
])
def test_errors_name_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("call, pattern", [
    (lambda: P.log_layer_lipschitz(1.0, 1.0, 1.0, 1.0, softmax_const=True),
     r"^softmax_const must be a real number, got bool"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, True, 1.0), r"^C_QK must be numeric, got bool True$"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, 1.0, "1"), r"^L_phi must be a real number, got str"),
    (lambda: P.log_scale_K(0.0, 0.0, True), r"^L \(number of layers\) must be an integer, got bool True$"),
    (lambda: P.log_scale_K(0.0, 0.0, 2.0), r"^L \(number of layers\) must be an integer, got float 2.0$"),
    (lambda: P.matrices_per_layer(True), r"^heads \(None for the single-head block\) must be an integer, got bool"),
    (lambda: P.matrices_per_layer(1.5), r"^heads \(None for the single-head block\) must be an integer, got float"),
    (lambda: P.log_effective_scale(0.0, 0.0, 2, 3, 1.0, learned_readout=1), r"^learned_readout must be True or False"),
])
def test_wrong_types_are_type_errors(call, pattern):
    """One rule (bounds_lib.core.validation): a wrong type is a TypeError; a bool is never a number; 2.0 is no count."""
    with pytest.raises(TypeError, match=pattern):
        call()


def test_effective_scale_edges_and_messages():
    assert np.isclose(P.log_effective_scale(0.0, 0.0, 1, 1, 1.0), np.log(2 * 2))  # A = 1 allowed: J = 1 + 1
    d = P.log_effective_scale({"QK": 0.0}, 0.0, 2, 3, 1.0, learned_readout=False)
    assert np.isclose(d["QK"], np.log(2 * 6))  # the flag reaches every matrix type of the dict
    with pytest.raises(TypeError, match=r"^L \(number of layers\) must be an integer, got float 2.5$"):
        P.log_effective_scale(0.0, 0.0, 2.5, 3, 1.0)
    with pytest.raises(TypeError, match=r"^matrices_per_layer \(3 single head, 2H\+2 for H heads\) must be an integer"):
        P.log_effective_scale(0.0, 0.0, 2, 2.5, 1.0)
    with pytest.raises(ValueError, match=r"^matrices_per_layer \(3 single head, 2H\+2 for H heads\) == 0,"
                                         r" must be >= 1$"):
        P.log_effective_scale(0.0, 0.0, 2, 0, 1.0)
    with pytest.raises(ValueError, match=r"^readout_norm == -1.0, must be > 0.0$"):
        P.log_effective_scale(0.0, 0.0, 2, 3, -1.0)
    with pytest.raises(TypeError, match=r"^learned_readout must be True or False"):
        P.log_effective_scale(0.0, 0.0, 2, 3, 1.0, learned_readout=None)
    for g, a in ((0.0, np.nan), (np.inf, 0.0), (np.nan, 0.0), (0.0, np.inf)):
        with pytest.raises(ValueError, match=r"^log_(gamma|alpha) contains (NaN|inf, must be finite)"
                                             r" \(compute it in log space"):
            P.log_effective_scale(g, a, 2, 3, 1.0)
    assert P.log_effective_scale(np.array([0.0, -np.inf]), 0.0, 1, 3, 1.0)[1] == P.LOG_TINY
    with pytest.raises(ValueError, match=r"^heads \(None for the single-head block\) == 0, must be >= 1$"):
        P.matrices_per_layer(0)


def test_gamma_multihead_zero_norms_and_shapes():
    g = P.log_gamma_multihead(1.0, 1.0, 0.0, 0.0, L_phi=1.0)  # zero value and query-key norms
    assert g["V"] == 0.0 and g["QK"] == -np.inf and not np.isnan(g["M_in"])
    g = P.log_gamma_multihead(0.0, 1.0, 1.0, 1.0, L_phi=1.0)
    assert g["M_out"] == -np.inf and g["M_in"] == 0.0 and g["V"] == -np.inf
    g = P.log_gamma_multihead(1.0, 0.0, 1.0, 1.0)
    assert g["M_in"] == -np.inf and not np.isnan(g["M_out"])
    rel = P.log_gamma_multihead(2.0, np.array([1.0, 2.0, 3.0]), 1.0, 1.0)
    assert np.shape(rel["M_out"]) == (3,) and np.allclose(rel["M_in"], np.log([1.0, 2.0, 3.0]))
    rel = P.log_gamma_multihead(np.array([1.0, 2.0, 3.0]), 2.0, 1.0, 1.0)
    assert np.shape(rel["M_out"]) == (3,)
    ok = dict(C_Min=np.ones(2), C_Mout=np.ones(2), C_V_h=np.ones((2, 3)), C_QK_h=np.ones((2, 3)))
    for key, bad in (("C_Min", np.ones(4)), ("C_Mout", np.ones(4)),
                     ("C_V_h", np.ones((2, 4))), ("C_QK_h", np.ones((2, 4)))):
        with pytest.raises(ValueError, match="do not broadcast"):
            P.log_gamma_multihead(**{**ok, key: bad})
    with pytest.raises(ValueError, match=r"^L_phi == -1.0, must be > 0.0$"):
        P.log_gamma_multihead(1.0, 1.0, 1.0, 1.0, L_phi=-1.0)


def test_composition_bound_against_its_formula():
    rng = np.random.default_rng(11)
    N, T = 3, 4
    Ws = [[s * A / np.linalg.norm(A, 2) for s, A in zip((0.7, 1.3, 0.9), rng.standard_normal((3, N, N)))]
          for _ in range(2)]
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), np.array([0.6, -0.3, 0.2]), act="tanh",
                                  logit_scale=0.5)
    Es = [[1e-2 * rng.standard_normal((N, N)) for _ in range(3)] for _ in range(2)]
    hat = M.SingleHeadTransformer(tuple(M.Block(*(W + E for W, E in zip(Wl, El))) for Wl, El in zip(Ws, Es)),
                                  net.w + 1e-2, act="tanh", logit_scale=0.5)
    X = rng.standard_normal((5, T, N))
    lhs, rhs, d, kappa = P.composition_bound(net, hat, X)
    # κ from the class norms: γ_QK = c C_V L_φ C_M, γ_V = L_φ C_M, γ_M = 1, α from Λ of the later layers, × ‖w‖₂
    C = np.array([[0.7, 1.3, 0.9]] * 2)
    lam = np.exp(P.log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], 1.0, 1.0))
    alpha = [lam[1], 1.0]
    wn = np.linalg.norm(net.w)
    expect = []
    for a in alpha:
        expect += [wn * 1.3 * 0.9 * a, wn * 0.9 * a, wn * a]
    assert np.allclose(kappa, expect + [1.0]) and np.isclose(rhs, np.sum(d * kappa)) and lhs <= rhs
    # distances: layer 0 rows are the projected inputs; the readout acts on row 0 of the last state
    rows = M.project_rows(X).reshape(-1, N)
    assert np.isclose(d[0], np.max(np.linalg.norm(rows @ Es[0][0], axis=1)))
    assert np.isclose(d[1], np.max(np.linalg.norm(rows @ Es[0][1], axis=1)))
    Y = M.project_rows(M.attention(M.project_rows(X), hat.blocks[0].W_QK, hat.blocks[0].W_V, 0.5))
    assert np.isclose(d[2], np.max(np.linalg.norm(np.tanh(Y).reshape(-1, N) @ Es[0][2], axis=1)))
    Z = M.hidden_states(hat, X)[-1]
    assert np.isclose(d[-1], np.max(np.abs(Z[:, 0, :] @ (hat.w - net.w))))
    assert np.isclose(lhs, np.max(np.abs(M.forward(net, X) - M.forward(hat, X))))
    one = P.composition_bound(net, hat, X[0])  # a single input (T, N) works like a batch of one
    assert np.isclose(one[0], abs(M.forward(net, X[0]) - M.forward(hat, X[0])))
    other_scale = M.SingleHeadTransformer(hat.blocks, hat.w, act=hat.act, logit_scale=2 * hat.logit_scale)
    for other in (M.random_transformer(2, 4, rng), M.random_transformer(2, 3, rng, act="relu"), other_scale):
        with pytest.raises(ValueError, match=r"^net and net_hat must have the same depth, width, activation and "
                                             r"logit scale$"):
            P.composition_bound(net, other, X)


def test_more_edges_from_mutation():
    with pytest.raises(ValueError, match=r"^log_Lambda contains NaN \(log of per-layer factors: finite, or"
                                         r" -inf for a zero factor\)$"):
        P.log_alpha([np.nan])
    with pytest.raises(ValueError, match=r"^log_Lambda is empty"):
        P.log_alpha([])
    with pytest.raises(ValueError, match=r"^log_alpha contains inf, must be finite \(compute it in log"
                                         r" space from finite norms"):
        P.log_scale_K(0.0, np.inf, 1)
    with pytest.raises(ValueError, match=r"^log_K contains NaN$"):
        P.radius_allocation(1.0, np.nan)
    with pytest.raises(ValueError, match=r"^softmax_const == -1.0, must be > 0.0$"):
        P.log_gamma(1.0, 1.0, 1.0, softmax_const=-1.0)
    with pytest.raises(ValueError, match=r"^L_phi == inf, must be finite$"):
        P.log_layer_lipschitz(1.0, 1.0, 1.0, np.inf)
    with pytest.raises(ValueError, match=r"^C_Min and C_Mout must have shape \(1,\) to match \(L, H\) = \(1, 2\)$"):
        P.log_layer_lipschitz_multihead([1.0], [1.0, 1.0], [[1.0, 1.0]], [[1.0, 1.0]])
    # huge head terms: the log-sum-exp is shifted by its maximum, so it stays finite
    big = P.log_layer_lipschitz_multihead([1.0], [1.0], [[1e300, 1e300]], [[1e300, 1e300]], L_phi=1.0)
    assert np.isfinite(big[0]) and np.isclose(big[0], np.log(2) + np.log(1e300) + np.log(4e300))


def test_softmax_jacobian_needs_every_subset():
    # T = 5, p = (.02, .25, .02, .25, .46): only the subset {1, 3} (bit mask 10) reaches q = 1/2
    p = np.array([0.02, 0.25, 0.02, 0.25, 0.46])
    assert np.isclose(P.softmax_jacobian_linf_l1(np.log(p))[0], 1.0)
    # T = 3, p = (.1, .4, .5): the best subset is {2} (q = 1/2); the first token alone gives 0.36
    assert np.isclose(P.softmax_jacobian_linf_l1(np.log([0.1, 0.4, 0.5]))[0], 1.0)


def test_composition_bound_gelu_and_checks():
    rng = np.random.default_rng(5)
    net = M.random_transformer(1, 3, rng, spectral_norm=0.8, act="gelu")
    hat = M.SingleHeadTransformer(tuple(M.Block(b.W_QK + 0.01, b.W_V, b.W_M) for b in net.blocks), net.w, act="gelu")
    _, _, _, kappa = P.composition_bound(net, hat, rng.standard_normal((2, 3, 3)))
    lphi = M.ACTIVATION_LIPSCHITZ["gelu"]
    assert np.isclose(kappa[0], np.linalg.norm(net.w) * 0.8 * lphi * 0.8)  # γ_QK carries L_φ
    assert np.isclose(kappa[1], np.linalg.norm(net.w) * lphi * 0.8)
    wide = M.random_transformer(1, 4, rng, act="gelu")
    with pytest.raises(ValueError, match="same depth, width"):
        P.composition_bound(net, wide, rng.standard_normal((2, 3, 3)))
    # the readout piece is measured on row 0 (the [CLS] row), not on another row
    w2 = M.SingleHeadTransformer(net.blocks, net.w + rng.standard_normal(3), act="gelu")
    X = rng.standard_normal((1, 3, 3))
    Z = M.hidden_states(net, X)[-1]
    _, _, d, _ = P.composition_bound(net, w2, X)
    assert np.isclose(d[-1], abs(Z[0, 0] @ (w2.w - net.w)))
    assert not np.isclose(d[-1], abs(Z[0, 1] @ (w2.w - net.w)))


def test_default_phi_bound_and_zero_Mout():
    assert P.log_gamma(3.0, 2.0, 7.0, L_phi=1.5)["M"] == 0.0  # default B_φ = 1
    assert P.log_gamma_multihead(2.0, 3.0, 1.0, 1.0, L_phi=1.0)["M_out"] == np.log(2.0)  # default B_φ = 1
    g = P.log_gamma_multihead(1.0, 0.0, 1.0, 1.0, L_phi=1.0)  # C(M_out) = 0 leaves γ_Mout = B_φ C(M_in)
    assert g["M_out"] == 0.0


# ---- effective scale and composition of Chapter 3 (moved from the harness tests, tests/test_checks.py) ----
def test_matrices_per_layer():
    assert P.matrices_per_layer() == 3 and P.matrices_per_layer(1) == 4 and P.matrices_per_layer(12) == 26
    with pytest.raises(ValueError):
        P.matrices_per_layer(0)
    for bad in (True, 1.5, 2.0):   # a head count is an integer: a flag or a float is a TypeError
        with pytest.raises(TypeError):
            P.matrices_per_layer(bad)


def test_effective_scale_closed_form():
    g, a = np.log(3.0), np.log(5.0)
    # J = L·A + 1 = 4·3 + 1 = 13; K = 2·13·‖w‖·γ·α
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 0.5), np.log(2 * 13 * 0.5 * 15))
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 0.5, learned_readout=False), np.log(2 * 12 * 0.5 * 15))
    d = P.log_effective_scale({"QK": g, "V": 0.0}, np.zeros(2), 2, 26, 1.0)
    assert set(d) == {"QK", "V"} and np.allclose(d["V"], np.log(2 * 53))
    assert P.log_effective_scale(-1e6, 0.0, 1, 3, 1.0) == P.LOG_TINY
    # the released K = γαL misses 2·A·‖w‖₂ (for a fixed readout)
    rel = P.log_scale_K(g, a, 4)
    assert np.isclose(P.log_effective_scale(g, a, 4, 3, 2.0, learned_readout=False) - rel, np.log(2 * 3 * 2.0))
    # allocation: Σ_j ‖w‖γα·ε/K_j = ε/2 for J pieces of equal weight
    r = P.radius_allocation(1.0, P.log_effective_scale(g, a, 4, 3, 0.5, learned_readout=False))
    assert np.isclose(12 * 0.5 * 15 * np.exp(r), 0.5)


@pytest.mark.parametrize("call", [
    lambda: P.log_effective_scale(0.0, 0.0, 0, 3, 1.0), lambda: P.log_effective_scale(0.0, 0.0, 2, 0, 1.0),
    lambda: P.log_effective_scale(0.0, 0.0, 2, 3, 0.0),
    lambda: P.log_effective_scale(np.nan, 0.0, 2, 3, 1.0), lambda: P.log_effective_scale(0.0, np.inf, 2, 3, 1.0),
])
def test_bad_input_effective_scale(call):
    with pytest.raises(ValueError):
        call()


def test_composition_bound_closed_forms():
    from bounds_lib.theory import model as M
    rng = np.random.default_rng(4)
    net = M.random_transformer(2, 3, rng, spectral_norm=0.7, act="tanh")
    X = rng.standard_normal((5, 4, 3))
    lhs, rhs, d, kappa = P.composition_bound(net, net, X)
    assert lhs == 0 and rhs == 0 and d.shape == kappa.shape == (7,)
    # only the readout changes: the bound is exact (κ = 1 and d = the output change itself)
    net_w = M.SingleHeadTransformer(net.blocks, net.w + np.array([0.1, -0.2, 0.05]), act="tanh")
    lhs, rhs, d, kappa = P.composition_bound(net, net_w, X)
    assert np.isclose(lhs, rhs) and np.all(d[:-1] == 0) and kappa[-1] == 1
    # κ of the last layer's M is ‖w‖₂ (γ_M = 1, α = 1)
    assert np.isclose(kappa[-2], np.linalg.norm(net.w))
    with pytest.raises(ValueError, match="same depth"):
        P.composition_bound(net, M.random_transformer(1, 3, rng), X)
