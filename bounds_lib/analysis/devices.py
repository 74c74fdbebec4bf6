"""Where the dense values-only SVDs of an analysis run: LAPACK through NumPy, or torch on a device.

At LLM scale the cost of :func:`bounds_lib.analysis.spectra.compute_spectra` is the dense SVDs of the
feed-forward matrices (``M_in`` is N×d_ff, or N×2d_ff when gated; ``M_out`` d_ff×N), which grow as
``N²·d_ff``; a GPU does them many times faster than one CPU core. This module chooses the backend:

* ``"cpu"`` — ``numpy.linalg.svd`` (``compute_uv=False``), the default and the reference;
* ``"cuda"``, ``"cuda:K"`` — ``torch.linalg.svdvals`` on that CUDA device;
* ``"auto"`` — ``"cuda"`` when torch sees a CUDA device, else ``"cpu"``;
* ``"torch-cpu"`` — the torch code path on torch's CPU device (MKL's LAPACK rather than NumPy's
  OpenBLAS): what the tests run on a machine without a GPU, and a way to compare the two libraries.

Only the dense SVDs move (``M_in``, ``M_out``, and the explicit N×N head products of the
``"paper"`` mode). The d_h×d_h cores of the head products stay on the CPU: they are small, and their
singular values near the numerical-rank tolerance decide which ones are exact zeros, a decision that
should not depend on the device. Norms are computed on the CPU from the same array in every case.

The precision is the array's (float64 by default, float32 with ``--dtype float32``): a device never
lowers it. Different LAPACK implementations (OpenBLAS, MKL, cuSOLVER) agree only up to rounding: a
backward-stable SVD of an m×n matrix returns values within ``c·max(m, n)·ε·σ₁`` of the exact ones
(Golub & Van Loan, Thm. 8.6.2 and §8.6.3), so two backends agree within twice that.
:func:`spectra_agree` checks exactly that bound, with the constant :data:`AGREEMENT_C` measured by
``tests/test_devices.py`` on random and real (all-MiniLM-L6-v2) matrices with a large margin.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np

from .threads import limit_new_libraries

__all__ = ["DEVICE_CHOICES", "AGREEMENT_C", "Device", "is_device_name", "resolve_device", "svdvals", "agreement_tol",
           "spectra_agree"]

#: The values ``--device`` accepts (``cuda:K`` names the K-th CUDA device).
DEVICE_CHOICES = ("cpu", "auto", "cuda", "cuda:K", "torch-cpu")

#: The constant ``c`` of the agreement bound ``|σ_i − σ'_i| ≤ c·max(m, n)·ε·σ₁`` between two backends.
#: The worst case measured between torch's CPU device (MKL) and NumPy (OpenBLAS) is 0.062
#: (``tests/test_devices.py`` prints it; a 64×64 Gaussian matrix). ``c = 1`` leaves a margin of 16×,
#: and still catches a wrong singular value: an error of 1e-9·σ₁ on a 4096-wide matrix is 1e3 times
#: the bound (9e-13·σ₁). Between CPU and a GPU (cuSOLVER) the constant is not measured here:
#: ``benchmarks/bench_device.py`` prints it on the machine that runs it.
AGREEMENT_C = 1.0

_CUDA = re.compile(r"cuda(:(0|[1-9][0-9]*))?")


@dataclass(frozen=True)
class Device:
    """A resolved backend: ``kind`` is ``"numpy"`` or ``"torch"``; ``torch_device`` names torch's device."""

    name: str
    kind: str
    torch_device: str | None = None

    def __str__(self) -> str:
        return self.name


CPU = Device("cpu", "numpy")


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the package
        raise RuntimeError("--device other than cpu needs torch (pip install torch)") from None
    limit_new_libraries()  # torch's OpenMP and BLAS, loaded by that import, get the caller's thread limit
    return torch


def is_device_name(text: str) -> bool:
    """Whether ``text`` names a device of :data:`DEVICE_CHOICES` (``cuda:3`` does, ``cuda:K`` and ``gpu`` do not).

    >>> [is_device_name(t) for t in ("cpu", "cuda:3", "cuda:K", "gpu")]
    [True, True, False, False]
    """
    return text in ("cpu", "auto", "torch-cpu") or bool(_CUDA.fullmatch(text))


def resolve_device(name) -> Device:
    """The :class:`Device` for ``name`` (one of :data:`DEVICE_CHOICES`, or a :class:`Device`).

    Raises
    ------
    ValueError
        ``name`` is not a device name this module knows.
    RuntimeError
        A CUDA device is asked for and torch cannot see it (no GPU, a CPU-only torch, or an index
        beyond the devices present).

    Examples
    --------
    >>> resolve_device("cpu")
    Device(name='cpu', kind='numpy', torch_device=None)
    >>> resolve_device("torch-cpu").kind
    'torch'
    """
    if isinstance(name, Device):
        return name
    if name is None or name == "cpu":
        return CPU
    if not isinstance(name, str):
        raise TypeError(f"device must be a string ({', '.join(DEVICE_CHOICES)}), got {type(name).__name__}")
    if name == "torch-cpu":
        _torch()
        return Device("torch-cpu", "torch", "cpu")
    if name == "auto":
        torch = _torch()
        return Device("cuda", "torch", "cuda") if torch.cuda.is_available() else CPU
    if _CUDA.fullmatch(name):
        torch = _torch()
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
            raise RuntimeError(f"--device {name}: no CUDA device is available ({build}); "
                               "use --device cpu, or auto to use a GPU only when there is one")
        index = int(name.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if index >= count:
            raise RuntimeError(f"--device {name}: torch sees {count} CUDA device(s), 0..{count - 1}")
        return Device(name, "torch", name)
    raise ValueError(f"unknown device {name!r}; supported: {', '.join(DEVICE_CHOICES)}")


def svdvals(W: np.ndarray, device: Device | str | None = None) -> np.ndarray:
    """Singular values of ``W`` (2-D, or a stack of matrices), descending, as a NumPy array of ``W``'s dtype.

    ``device`` is a :class:`Device` or a name for :func:`resolve_device` (default: NumPy on the CPU).
    The array is copied to the device in its own precision, decomposed there, and only the singular
    values come back.

    Examples
    --------
    >>> svdvals(np.array([[3.0, 0.0], [0.0, -4.0]])).tolist()
    [4.0, 3.0]
    >>> svdvals(np.array([[3.0, 0.0], [0.0, -4.0]]), "torch-cpu").tolist()
    [4.0, 3.0]
    """
    device = resolve_device(device)
    if device.kind == "numpy":
        return np.linalg.svd(W, compute_uv=False)
    torch = _torch()
    try:
        t = torch.from_numpy(np.ascontiguousarray(W)).to(device.torch_device)
        if device.torch_device == "cpu":
            return _one_thread_svdvals(torch, t)
        s = torch.linalg.svdvals(t)
        return s.cpu().numpy()
    except torch.cuda.OutOfMemoryError:
        mb = W.nbytes / 2**20
        raise MemoryError(f"a {'×'.join(map(str, W.shape))} {W.dtype} matrix ({mb:.0f} MB) and its SVD do not "
                          f"fit in the memory of {device}; use --device cpu") from None


_TORCH_CPU_LOCK = threading.Lock()


def _one_thread_svdvals(torch, t) -> np.ndarray:
    """``torch.linalg.svdvals`` on torch's CPU device with one intra-op thread, torch's setting restored after.

    MKL's SVD gives other last bits with another number of threads, and a worker process and this
    one need not have the same (a caller's ``threadpool_limits`` reaches this process's OpenMP, not a
    spawned worker's): with ``--jobs 1`` and ``--jobs 2`` the values differed by 5·10⁻¹⁶ relative. One
    thread makes them the same bit for bit, whichever process runs the unit; the lock keeps units run
    in threads from changing the setting under one another."""
    with _TORCH_CPU_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return torch.linalg.svdvals(t).numpy()
        finally:
            torch.set_num_threads(before)


def agreement_tol(shape, sigma_max: float, dtype=np.float64) -> float:
    """``AGREEMENT_C·max(m, n)·ε·σ₁``: how far two backends' singular values of an m×n matrix may differ."""
    return AGREEMENT_C * max(shape[-2:]) * float(np.finfo(dtype).eps) * float(sigma_max)


def spectra_agree(a, b, shape, dtype=np.float64) -> tuple[bool, float]:
    """``(agree, worst)``: whether two spectra of one m×n matrix agree within :func:`agreement_tol`.

    ``worst`` is the largest ``|a_i − b_i|`` in units of the tolerance (``≤ 1`` when they agree).

    >>> spectra_agree([2.0, 1.0], [2.0, 1.0 + 1e-16], (2, 2))[0]
    True
    >>> spectra_agree([2.0, 1.0], [2.0, 1.0 + 1e-9], (2, 2))[0]
    False
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, float("inf")
    if a.size == 0:
        return True, 0.0
    tol = agreement_tol(shape, max(float(a.max()), float(b.max())), dtype)
    diff = float(np.max(np.abs(a - b)))
    worst = diff / tol if tol > 0 else (0.0 if diff == 0 else float("inf"))
    return worst <= 1.0, worst
