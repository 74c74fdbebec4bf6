"""bounds_lib.theory.model: the paper's single-head Transformer in NumPy."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from bounds_lib.theory import model as M


def test_project_rows_is_projection_onto_unit_ball(rng):
    Z = rng.standard_normal((50, 7)) * rng.uniform(0.01, 5, size=(50, 1))
    P = M.project_rows(Z)
    n_in, n_out = np.linalg.norm(Z, axis=1), np.linalg.norm(P, axis=1)
    assert np.all(n_out <= 1 + 1e-12)
    np.testing.assert_allclose(P[n_in <= 1], Z[n_in <= 1])          # inside: unchanged
    np.testing.assert_allclose(n_out[n_in > 1], 1.0, rtol=1e-12)     # outside: on the sphere
    np.testing.assert_allclose(M.project_rows(P), P)                 # idempotent


@given(arrays(np.float64, (6, 5), elements=st.floats(-4, 4)), arrays(np.float64, (6, 5), elements=st.floats(-4, 4)))
def test_projection_nonexpansive_rowwise(A, B):
    d_before = np.linalg.norm(A - B, axis=1)
    d_after = np.linalg.norm(M.project_rows(A) - M.project_rows(B), axis=1)
    assert np.all(d_after <= d_before + 1e-12)


def test_softmax_rows_are_distributions(rng):
    S = rng.standard_normal((3, 4, 9)) * 50
    P = M.softmax_rows(S)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(M.softmax_rows(S + 7.0), P, rtol=1e-12)  # shift invariance


def test_attention_matches_explicit_loop(rng):
    N, T = 5, 4
    X = rng.standard_normal((T, N)) / 3
    W_QK, W_V = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    out = M.attention(X[None], W_QK, W_V, logit_scale=0.5)[0]
    for t in range(T):
        logits = np.array([0.5 * X[t] @ W_QK @ X[s] for s in range(T)])
        p = np.exp(logits - logits.max())
        p /= p.sum()
        np.testing.assert_allclose(out[t], sum(p[s] * (X[s] @ W_V) for s in range(T)), rtol=1e-12)


def test_forward_batched_equals_single_and_uses_cls_row(rng):
    mdl = M.random_transformer(3, 6, rng, spectral_norm=2.0)
    X = rng.standard_normal((5, 4, 6))
    batched = M.forward(mdl, X)
    assert batched.shape == (5,)
    for i in range(5):
        assert M.forward(mdl, X[i]) == pytest.approx(batched[i], rel=1e-12, abs=1e-14)
    H = M.hidden_states(mdl, X)
    assert len(H) == mdl.L + 1
    np.testing.assert_allclose(H[-1][:, 0, :] @ mdl.w, batched, rtol=1e-12)
    # every hidden row lies in the unit ball, so |f(X)| ≤ ‖w‖₂ = 1
    assert all(np.all(np.linalg.norm(h, axis=-1) <= 1 + 1e-12) for h in H)
    assert np.all(np.abs(batched) <= 1 + 1e-12)


def test_random_transformer_spectral_norms(rng):
    mdl = M.random_transformer(2, 8, rng, spectral_norm=3.0)
    for b in mdl.blocks:
        for W in (b.W_QK, b.W_V, b.W_M):
            assert np.linalg.norm(W, 2) == pytest.approx(3.0, rel=1e-12)
    assert mdl.L == 2 and mdl.N == 8 and mdl.L_phi == M.ACTIVATION_LIPSCHITZ["gelu"]


def test_gelu_lipschitz_constant_is_max_derivative():
    x = np.linspace(-5, 5, 200001)
    g = M.activation("gelu")(x)
    slope = np.max(np.abs(np.diff(g) / np.diff(x)))
    assert slope == pytest.approx(M.ACTIVATION_LIPSCHITZ["gelu"], rel=1e-8)
    assert slope <= 1.13  # the released constant is a valid upper bound


def test_bad_input(rng):
    with pytest.raises(ValueError, match="square"):
        M.Block(np.ones((2, 3)), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="hidden size"):
        M.Block(np.ones((2, 2)), np.ones((3, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="NaN"):
        M.Block(np.full((2, 2), np.nan), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least one block"):
        M.SingleHeadTransformer((), np.ones(2))
    with pytest.raises(ValueError, match="unknown activation"):
        M.activation("swish")
    mdl = M.random_transformer(1, 4, rng)
    with pytest.raises(ValueError, match=r"shape \(n, T, 4\)"):
        M.forward(mdl, np.ones((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        M.forward(mdl, np.full((2, 4), np.nan))
    with pytest.raises(ValueError, match=r"L \(number of blocks\) == 0, must be >= 1"):
        M.random_transformer(0, 4, rng)


@pytest.mark.parametrize("call, exc, match", [
    (lambda rng: M.random_transformer(2.0, 4, rng), TypeError, "must be an integer, got float 2.0"),
    (lambda rng: M.random_transformer(True, 4, rng), TypeError, "must be an integer, got bool"),
    (lambda rng: M.random_transformer(1, 0, rng), ValueError, r"N \(hidden size\) == 0"),
    (lambda rng: M.random_transformer(1, 4, rng, spectral_norm=0.0), ValueError, "spectral_norm == 0.0, must be > 0"),
    (lambda rng: M.random_transformer(1, 4, rng, spectral_norm="1"), TypeError, "spectral_norm must be a real"),
    (lambda rng: M.random_transformer(1, 4, rng, logit_scale=float("inf")), ValueError, "logit_scale == inf"),
    (lambda rng: M.random_transformer(1, 4, rng, logit_scale=True), TypeError, "logit_scale must be a real"),
    (lambda rng: M.activation(3), TypeError, "activation must be a name"),
    (lambda rng: M.SingleHeadTransformer((np.eye(2),), np.ones(2)), TypeError, "Block instances, got ndarray"),
    (lambda rng: M.SingleHeadTransformer(M.random_transformer(1, 2, rng).blocks, [1.0, np.inf]), ValueError,
     "readout w contains inf"),
])
def test_wrong_type_is_a_type_error_wrong_value_a_value_error(rng, call, exc, match):
    with pytest.raises(exc, match=match):
        call(rng)
