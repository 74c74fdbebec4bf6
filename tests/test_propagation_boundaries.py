"""Closed forms, options and argument names in the errors of bounds_lib.propagation (written against
the survivors of `make mutation MODULES=propagation`, see tests/MUTATION.md)."""
import numpy as np
import pytest

from bounds_lib import model as M
from bounds_lib import propagation as P


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
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        P.log_alpha([1.0, np.inf])
    with pytest.raises(ValueError, match="one entry per layer"):
        P.log_alpha(np.zeros((2, 2)))
    assert P.log_scale_K(P.LOG_TINY - np.log(2.0), 0.0, 2) == P.LOG_TINY
    assert P.log_scale_K(P.LOG_TINY, 0.0, 2) == P.LOG_TINY + np.log(2.0)
    assert isinstance(P.log_scale_K(0.0, 0.0, 1), float)
    with pytest.raises(ValueError, match=r"\+inf"):
        P.log_scale_K(np.inf, 0.0, 1)
    with pytest.raises(ValueError, match="log_K contains NaN"):
        P.radius_allocation(1.0, np.nan)
    assert isinstance(P.radius_allocation(2.0, 0.0), float) and np.isclose(P.radius_allocation(2.0, 0.0), np.log(2.0))
    assert np.allclose(P.radius_allocation(1.0, np.array([0.0, 1.0])), [0.0, -1.0])
    for bad in (True, np.inf, np.nan):
        with pytest.raises(ValueError, match="eps must be a positive finite radius"):
            P.radius_allocation(bad, 0.0)


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
    (lambda: P.log_layer_lipschitz(-1.0, 1.0, 1.0, 1.0), r"^C_M contains negative"),
    (lambda: P.log_layer_lipschitz(1.0, np.nan, 1.0, 1.0), r"^C_V contains NaN"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, np.inf, 1.0), r"^C_QK contains infinite"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, [], 1.0), r"^C_QK is empty"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, "a", 1.0), r"^C_QK must be numeric"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, 1.0, 0.0), r"^L_phi must be a positive finite number"),
    (lambda: P.log_layer_lipschitz(1.0, 1.0, 1.0, 1.0, softmax_const=True), r"^softmax_const must be"),
    (lambda: P.log_layer_lipschitz_multihead([-1.0], [1.0], [[1.0]], [[1.0]]), r"^C_Min contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [-1.0], [[1.0]], [[1.0]]), r"^C_Mout contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[-1.0]], [[1.0]]), r"^C_V_heads contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[-1.0]]), r"^C_QK_heads contains"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[1.0]], L_phi=-1.0), r"^L_phi must"),
    (lambda: P.log_layer_lipschitz_multihead([1.0], [1.0], [[1.0]], [[1.0]], softmax_const=0.0), r"^softmax_const must"),
    (lambda: P.log_gamma(-1.0, 1.0, 1.0), r"^C_M contains"), (lambda: P.log_gamma(1.0, -1.0, 1.0), r"^C_V contains"),
    (lambda: P.log_gamma(1.0, 1.0, -1.0), r"^C_QK contains"),
    (lambda: P.log_gamma(1.0, 1.0, 1.0, L_phi=0.0), r"^L_phi must"),
    (lambda: P.log_gamma(1.0, 1.0, 1.0, L_phi=1.0, phi_bound=0.0), r"^phi_bound must"),
    (lambda: P.log_gamma_multihead(-1.0, 1.0, 1.0, 1.0), r"^C_Min contains"),
    (lambda: P.log_gamma_multihead(1.0, -1.0, 1.0, 1.0), r"^C_Mout contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, -1.0, 1.0), r"^C_V_h contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, -1.0), r"^C_QK_h contains"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, 1.0, softmax_const=-1.0), r"^softmax_const must"),
    (lambda: P.log_gamma_multihead(1.0, 1.0, 1.0, 1.0, L_phi=1.0, phi_bound=-1.0), r"^phi_bound must"),
    (lambda: P.log_scale_K(0.0, 0.0, True), r"^L \(number of layers\) must be an integer >= 1"),
    (lambda: P.log_scale_K(0.0, np.nan, 1), r"^log_gamma or log_alpha contains NaN"),
])
def test_errors_name_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
