import numpy as np
import pytest
from hypothesis import given, strategies as st

from bounds_lib.theory import model as M
from bounds_lib.theory.propagation import (LOG_TINY, LPHI_GELU_RELEASED, SOFTMAX_LINF_L1_RELEASED,
                                           SOFTMAX_LINF_L1_TIGHT,
                                    log_alpha, log_gamma, log_gamma_multihead, log_layer_lipschitz,
                                    log_layer_lipschitz_multihead, log_scale_K, multihead_block_forward,
                                    radius_allocation, softmax_jacobian_linf_l1)

pos = st.floats(0.01, 50.0)


def test_constants():
    assert LPHI_GELU_RELEASED == 1.13 and SOFTMAX_LINF_L1_RELEASED == 2.0 and SOFTMAX_LINF_L1_TIGHT == 1.0


def test_layer_lipschitz_closed_form():
    assert np.isclose(log_layer_lipschitz(2.0, 3.0, 0.5, 1.13), np.log(1.13 * 2 * 3 * (1 + 4 * 0.5)))
    assert np.isclose(log_layer_lipschitz(2.0, 3.0, 0.5, 1.0, softmax_const=1.0), np.log(6 * 2))
    out = log_layer_lipschitz([1, 2], [1, 1], [0, 1], 1.0)
    assert out.shape == (2,) and np.allclose(out, np.log([1, 10]))


def test_multihead_reduces_to_single_head():
    a = log_layer_lipschitz_multihead([2.0], [3.0], [[0.5]], [[0.25]], L_phi=1.13)
    assert np.isclose(a[0], np.log(1.13 * 6 * 0.5 * 2))
    two = log_layer_lipschitz_multihead([1.0], [1.0], [[1.0, 2.0]], [[0.0, 1.0]], L_phi=1.0)
    assert np.isclose(two[0], np.log(1 + 2 * 5))


def test_alpha_closed_form():
    la = log_alpha(np.log([2.0, 3.0, 5.0]))
    assert np.allclose(np.exp(la), [15.0, 5.0, 1.0])
    assert log_alpha([7.0]).tolist() == [0.0]


@given(st.lists(pos, min_size=1, max_size=8), st.lists(pos, min_size=1, max_size=8))
def test_alpha_matches_product(a, b):
    n = min(len(a), len(b))
    lam = np.exp(log_layer_lipschitz(np.array(a[:n]), np.array(b[:n]), np.zeros(n), 1.0))
    la = log_alpha(np.log(lam))
    for l in range(n):
        assert np.isclose(la[l], np.sum(np.log(lam[l + 1:])), atol=1e-9)
    assert np.all(np.diff(la) <= 1e-12) or np.any(lam < 1)


def test_gamma_released_and_proved():
    g = log_gamma(3.0, 2.0, 7.0)
    assert np.isclose(np.exp(g["QK"]), 2 * 2 * 3) and np.isclose(np.exp(g["V"]), 3) and g["M"] == 0
    g = log_gamma(3.0, 2.0, 7.0, L_phi=1.5, softmax_const=1.0, phi_bound=1.5)
    assert np.isclose(np.exp(g["QK"]), 2 * 1.5 * 3) and np.isclose(np.exp(g["V"]), 4.5)
    assert np.isclose(np.exp(g["M"]), 1.5)
    g = log_gamma_multihead(2.0, 3.0, 5.0, 7.0)
    assert np.allclose([np.exp(g[k]) for k in ("QK", "V", "M_in", "M_out")], [2 * 5 * 6, 6, 3, 1])
    g = log_gamma_multihead(2.0, 3.0, 5.0, 7.0, L_phi=1.13, softmax_const=1.0)
    assert np.allclose([np.exp(g[k]) for k in ("QK", "V", "M_in", "M_out")], [1.13 * 30, 1.13 * 6, 1.13 * 3, 2])
    g = log_gamma_multihead(np.ones(3), np.ones(3), np.ones((3, 4)), np.ones((3, 4)))
    assert g["QK"].shape == (3, 4) and g["M_in"].shape == (3,)


def test_scale_K_floor_and_dict():
    assert log_scale_K(-1e6, 0.0, 3) == LOG_TINY
    assert np.isclose(log_scale_K(1.0, 2.0, 4), 3 + np.log(4))
    d = log_scale_K({"QK": 0.0, "V": 1.0}, 0.0, 1)
    assert set(d) == {"QK", "V"}
    assert np.isclose(radius_allocation(1.0, np.log(4.0)), np.log(0.25))


def test_thousand_layers_spectral_norm_ten_finite():
    L = 1000
    c = np.full(L, 10.0)
    ll = log_layer_lipschitz(c, c, c, LPHI_GELU_RELEASED)
    la = log_alpha(ll)
    g = log_gamma(c, c, c, L_phi=1.13)
    K = log_scale_K(g, la, L)
    llm = log_layer_lipschitz_multihead(c, c, np.full((L, 12), 10.0), np.full((L, 12), 10.0))
    gm = log_gamma_multihead(c, c, np.full((L, 12), 10.0), np.full((L, 12), 10.0), L_phi=1.13)
    Km = log_scale_K(gm["QK"], log_alpha(llm)[:, None], L)
    for arr in [ll, la, llm, Km, *K.values()]:
        assert np.all(np.isfinite(arr))
    assert la[0] / np.log(10) > 300  # α itself exceeds the float range: only its log is finite


@pytest.mark.parametrize("call", [
    lambda: log_layer_lipschitz(-1.0, 1.0, 1.0, 1.0),
    lambda: log_layer_lipschitz(np.nan, 1.0, 1.0, 1.0),
    lambda: log_layer_lipschitz(1.0, 1.0, 1.0, 0.0),
    lambda: log_layer_lipschitz([], [], [], 1.0),
    lambda: log_layer_lipschitz_multihead([1.0], [1.0], [1.0], [[1.0]]),
    lambda: log_alpha([]),
    lambda: log_alpha([np.nan]),
    lambda: log_scale_K(0.0, 0.0, 0),
    lambda: log_scale_K(np.nan, 0.0, 1),
    lambda: log_gamma(1.0, 1.0, 1.0, softmax_const=0.0),
    lambda: radius_allocation(0.0, 1.0),
    lambda: radius_allocation(-1.0, 1.0),
])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_softmax_jacobian_tight_constant():
    assert np.isclose(softmax_jacobian_linf_l1(np.zeros(2))[0], 1.0)
    z = np.random.default_rng(0).standard_normal((200, 5)) * 3
    assert np.all(softmax_jacobian_linf_l1(z) <= 1 + 1e-12)


@given(st.integers(1, 4), st.floats(0.1, 3.0), st.floats(0.1, 3.0), st.floats(0.1, 3.0), st.integers(0, 10**6))
def test_layer_lipschitz_holds(T, a, b, c, seed):
    rng = np.random.default_rng(seed)
    N = 3
    Ws = [s * A / np.linalg.norm(A, 2) for s, A in zip((a, b, c), rng.standard_normal((3, N, N)))]
    blk = M.Block(*Ws)
    X = M.project_rows(rng.standard_normal((20, T, N)))
    Y = M.project_rows(X + 0.1 * rng.standard_normal((20, T, N)))
    lhs = np.max(np.linalg.norm(M.block_forward(X, blk, "tanh") - M.block_forward(Y, blk, "tanh"), axis=-1), axis=-1)
    rhs = np.exp(log_layer_lipschitz(c, b, a, 1.0, softmax_const=1.0)) * np.max(np.linalg.norm(X - Y, axis=-1), axis=-1)
    assert np.all(lhs <= rhs * (1 + 1e-9))


def test_multihead_gamma_Mout_needs_C_Min():
    # M_out acts on φ(y M_in): with identity φ and ‖M_in‖ = 5 the released γ_Mout = 1 fails, the proved one holds
    N, rng = 2, np.random.default_rng(3)
    I = np.eye(N)
    X = np.array([[[1.0, 0.0]]])
    Mi, Mo = 5 * I, 0.01 * I
    E = 1e-3 * I
    ident = lambda x: x  # noqa: E731
    Z = multihead_block_forward(X, [0 * I], [I], Mi, Mo, ident)
    Zp = multihead_block_forward(X, [0 * I], [I], Mi, Mo + E, ident)
    d = np.linalg.norm(Z - Zp)
    g_rel = np.exp(log_gamma_multihead(5.0, 0.01, 1.0, 0.0)["M_out"])
    g_ok = np.exp(log_gamma_multihead(5.0, 0.01, 1.0, 0.0, L_phi=1.0)["M_out"])
    assert d > g_rel * 1e-3 and d <= g_ok * 1e-3 * (1 + 1e-9)
    assert rng is not None


# ---- issue 20: the multi-head surrogate network and its composition theorem ----
from bounds_lib.theory.propagation import composition_bound, multihead_composition_bound, multihead_forward  # noqa: E402


def _as_multihead(net):
    """A single-head network as a one-head surrogate: M_in = I, M_out = W_M (φ acts between them)."""
    N = net.N
    return [([b.W_QK], [b.W_V], np.eye(N), b.W_M) for b in net.blocks]


@pytest.mark.parametrize("act", ["identity", "tanh"])
def test_multihead_forward_is_the_single_head_network_at_one_head(act):
    rng = np.random.default_rng(0)
    net = M.random_transformer(3, 4, rng, spectral_norm=1.5, act=act)
    X = rng.standard_normal((5, 3, 4)) * 2
    got = multihead_forward(_as_multihead(net), net.w, X, M.activation(act))
    assert np.allclose(got, M.forward(net, X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("act", ["identity", "tanh"])
def test_multihead_composition_equals_single_head_at_one_head(act):
    # with M_in = I unperturbed, each κ_j d_j is the single-head one: the two right sides agree exactly
    rng = np.random.default_rng(1)
    net = M.random_transformer(2, 3, rng, spectral_norm=1.2, act=act)
    def nudge(b):
        return M.Block(*[W + 0.01 * rng.standard_normal(W.shape) for W in (b.W_QK, b.W_V, b.W_M)])

    hat = M.SingleHeadTransformer(tuple(nudge(b) for b in net.blocks), net.w, act=act)
    X = rng.standard_normal((4, 3, 3))
    lhs1, rhs1, _, _ = composition_bound(net, hat, X)
    lhs2, rhs2 = multihead_composition_bound(_as_multihead(net), _as_multihead(hat), net.w, X, M.activation(act),
                                             net.L_phi)
    assert lhs1 == pytest.approx(lhs2, rel=1e-12) and rhs1 == pytest.approx(rhs2, rel=1e-12)
    assert lhs2 <= rhs2


def test_multihead_composition_holds_on_random_two_head_networks():
    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(200):
        N, Nf, H, L = 3, 4, 2, int(rng.integers(1, 3))
        mk = lambda: [([rng.standard_normal((N, N)) for _ in range(H)], [rng.standard_normal((N, N)) for _ in range(H)],  # noqa: E731
                       rng.standard_normal((N, Nf)), rng.standard_normal((Nf, N))) for _ in range(L)]
        lay = mk()
        eps = float(np.exp(rng.uniform(-8, -2)))
        E = mk()
        hat = [([q + eps * e for q, e in zip(a[0], b[0])], [v + eps * e for v, e in zip(a[1], b[1])],
                a[2] + eps * b[2], a[3] + eps * b[3]) for a, b in zip(lay, E)]
        lhs, rhs = multihead_composition_bound(lay, hat, np.ones(N) / np.sqrt(N), rng.standard_normal((2, N)),
                                               np.tanh, 1.0)
        worst = max(worst, lhs / rhs)
    assert 0 < worst <= 1
