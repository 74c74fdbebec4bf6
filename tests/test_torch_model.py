"""The torch twin computes exactly the NumPy model of Chapter 1 (same weights, float64)."""
import numpy as np
import pytest
import torch

from bounds_lib.theory.model import forward, hidden_states, random_transformer
from bounds_lib.studies.torch_model import TorchTransformer, from_numpy, project_rows, to_numpy


@pytest.mark.parametrize("act", ["gelu", "relu", "tanh", "identity"])
@pytest.mark.parametrize("L,N,T", [(1, 4, 3), (3, 8, 5), (5, 16, 9)])
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_torch_equals_numpy(act, L, N, T, scale):
    rng = np.random.default_rng(L * 100 + N)
    model = random_transformer(L, N, rng, spectral_norm=scale, act=act, logit_scale=0.7)
    X = 2.0 * rng.standard_normal((11, T, N))  # rows outside the unit ball too: Π_norm matters
    ref = forward(model, X)
    tm = from_numpy(model)
    out = tm(torch.as_tensor(X)).detach().numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-13)
    H = tm.hidden(torch.as_tensor(X)).detach().numpy()
    np.testing.assert_allclose(H, hidden_states(model, X)[-1], rtol=1e-12, atol=1e-13)


def test_round_trip_is_exact():
    rng = np.random.default_rng(1)
    model = random_transformer(2, 6, rng)
    back = to_numpy(from_numpy(model))
    for a, b in zip(model.blocks, back.blocks):
        for name in ("W_QK", "W_V", "W_M"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
    assert np.array_equal(model.w, back.w)
    assert back.act == model.act and back.logit_scale == model.logit_scale


def test_trained_float32_model_converts():
    tm = TorchTransformer(2, 5, generator=torch.Generator().manual_seed(0))
    X = torch.randn(7, 4, 5, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(forward(to_numpy(tm), X.double().numpy()),
                               tm(X).detach().double().numpy(), rtol=1e-5, atol=1e-6)


def test_projection_matches_definition_and_has_finite_gradient_at_zero():
    Z = torch.tensor([[0.0, 0.0], [0.3, 0.4], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    P = project_rows(Z)
    np.testing.assert_allclose(P.detach().numpy(), [[0, 0], [0.3, 0.4], [0.6, 0.8]], rtol=1e-15)
    P.sum().backward()
    assert torch.all(torch.isfinite(Z.grad))


def test_init_is_seeded():
    a = TorchTransformer(2, 8, generator=torch.Generator().manual_seed(3))
    b = TorchTransformer(2, 8, generator=torch.Generator().manual_seed(3))
    c = TorchTransformer(2, 8, generator=torch.Generator().manual_seed(4))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


@pytest.mark.parametrize("kwargs, match", [
    (dict(L=0, N=4), r"L \(number of blocks\) == 0"), (dict(L=1, N=0), r"N \(hidden size\) == 0"),
    (dict(L=1, N=4, act="swish"), "unknown activation"), (dict(L=1, N=4, logit_scale=0.0), "logit_scale"),
    (dict(L=1, N=4, rank=5), r"rank .* == 5, must be <= 4"), (dict(L=1, N=4, init_scale=-1.0), "init_scale"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TorchTransformer(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(L=2.0, N=4), "L .* must be an integer, got float 2.0"), (dict(L=1, N=True), "N .* got bool True"),
    (dict(L=1, N=4, rank=1.0), "rank .* must be an integer"), (dict(L=1, N=4, act=None), "act must be"),
    (dict(L=1, N=4, logit_scale="1"), "logit_scale must be a real number"),
])
def test_wrong_types_are_type_errors(kwargs, match):
    with pytest.raises(TypeError, match=match):
        TorchTransformer(**kwargs)


def test_bad_input_shape():
    with pytest.raises(ValueError, match="inputs must have shape"):
        TorchTransformer(1, 4)(torch.zeros(2, 3, 5))
