"""Seconds per layer of the spectra on a device against the CPU path, for LLaMA-shaped layers.

    python benchmarks/bench_device.py --device cuda --shapes 1b,7b,70b     # on a GPU machine
    python benchmarks/bench_device.py --device torch-cpu --shapes tiny,1b  # the same code path, no GPU

For each shape one layer of random weights is generated (Gaussian, std 0.02, rounded through
float16 as checkpoints store them) and :func:`bounds_lib.analysis.kernel.layer_spectra` — the function
``bounds-lib analyze`` runs for every layer — is timed on the CPU (NumPy/LAPACK) and on the device,
interleaved, median of ``--repeats``. It prints seconds per layer on each, the ratio CPU/device, the
extrapolation to the model's layer count, and how far the device's singular values are from the
CPU's in units of :func:`bounds_lib.analysis.devices.agreement_tol` (≤ 1 is agreement; the constant is
measured on torch's CPU device only, so on a GPU this line is the measurement).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from bounds_lib.checkpoints import ArchitectureSpec, LayerWeights
from bounds_lib.analysis.devices import resolve_device, spectra_agree
from bounds_lib.analysis.kernel import layer_spectra

#: name -> (layers, N, query heads, key/value heads, gated d_ff), the published LLaMA shapes.
SHAPES = {
    "tiny": (2, 256, 4, 2, 688),
    "1b": (22, 2048, 32, 4, 5632),    # TinyLlama-1.1B
    "7b": (32, 4096, 32, 32, 11008),  # LLaMA-2-7B
    "13b": (40, 5120, 40, 40, 13824),
    "70b": (80, 8192, 64, 8, 28672),  # LLaMA-2-70B
}


def synthetic_layer(name: str, dtype=np.float64, seed: int = 0) -> LayerWeights:
    L, N, H, Hk, F = SHAPES[name]
    d = N // H
    spec = ArchitectureSpec(family="llama", model_type="llama", n_layers=L, hidden=N, n_heads=H, n_kv_heads=Hk,
                            head_dim=d, d_ff=F, activation="silu", prefix="", gated_ffn=True)
    rng = np.random.default_rng(seed)

    def w(rows, cols):  # stored (out, in) in float16, widened as the reader widens
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16).astype(dtype)

    Wq, Wk, Wv, Wo = w(H * d, N).T, w(Hk * d, N).T, w(Hk * d, N).T, w(N, H * d).T
    M_in = np.concatenate([w(F, N).T, w(F, N).T], axis=1)
    return LayerWeights(0, spec, Wq, Wk, Wv, Wo, M_in, w(N, F).T)


def timed(lw, device):
    t0 = time.perf_counter()
    mats = layer_spectra(lw, "clean", entrywise=False, device=device)
    return time.perf_counter() - t0, mats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="cuda, cuda:K, auto or torch-cpu (default auto)")
    ap.add_argument("--shapes", default="tiny,1b", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-cpu-above", default="13b",
                    help="shapes larger than this are timed on the device only (the CPU would take hours)")
    a = ap.parse_args(argv)
    device = resolve_device(a.device)
    names = a.shapes.split(",")
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    import torch

    load = os.getloadavg()[0]
    gpu = torch.cuda.get_device_name(0) if device.kind == "torch" and device.torch_device != "cpu" else "none"
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, torch {torch.__version__}, CPUs {os.cpu_count()}, "
          f"load average {load:.2f}; device {device} (GPU: {gpu}); BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}, torch threads {torch.get_num_threads()}")
    order = list(SHAPES)
    for name in names:
        L, N, H, Hk, F = SHAPES[name]
        lw = synthetic_layer(name)
        with_cpu = order.index(name) <= order.index(a.skip_cpu_above)
        timed(lw, device)  # warm-up: CUDA context, kernels, MKL/OpenBLAS threads
        t_cpu, t_dev, worst = [], [], 0.0
        for _ in range(a.repeats):
            if with_cpu:
                t, ref = timed(lw, "cpu")
                t_cpu.append(t)
            t, got = timed(lw, device)
            t_dev.append(t)
            if with_cpu:
                for r, g in zip(ref, got):
                    worst = max(worst, spectra_agree(r.sigma, g.sigma, r.shape)[1])
        dev = statistics.median(t_dev)
        line = f"{name:>4} (L={L}, N={N}, H={H}/{Hk}, gated d_ff={F}): {device} {dev:8.2f} s per layer"
        if with_cpu:
            cpu = statistics.median(t_cpu)
            line += (f", cpu {cpu:8.2f} s per layer, ratio cpu/{device} = {cpu / dev:6.2f}x; "
                     f"whole model (extrapolated, {L} layers): cpu {L * cpu / 60:.1f} min, "
                     f"{device} {L * dev / 60:.1f} min; "
                     f"largest |Δσ| = {worst:.3g} × the agreement tolerance")
        else:
            line += f"; whole model (extrapolated, {L} layers): {L * dev / 60:.1f} min (CPU not timed)"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
