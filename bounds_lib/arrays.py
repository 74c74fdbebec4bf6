"""One validation of weight arrays, shared by :mod:`bounds_lib.checkpoints` and :mod:`bounds_lib.norms`.

:func:`as_real_array` turns what a user may hand the library — a NumPy array, a nested list, a
PyTorch tensor (on any device, with ``requires_grad``, in float16 or bfloat16) — into a real NumPy
array, and rejects with one :class:`ValueError` line what has no real-valued meaning here:
complex numbers (the imaginary part would be silently dropped by ``astype``), object and string
arrays, and — where the caller asks for it (checkpoint weights) — integer and boolean arrays, which
in a state dict are buffers or quantised weights, not the float matrices of the paper.
"""
from __future__ import annotations

import numpy as np

__all__ = ["as_real_array", "is_torch_tensor"]


def is_torch_tensor(x) -> bool:
    """``True`` for a ``torch.Tensor`` (without importing torch when it is not loaded)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "dtype")


def _torch_to_numpy(t, name: str) -> np.ndarray:
    import torch

    t = t.detach()
    if t.is_complex():
        raise ValueError(f"{name} must be real; got a complex tensor ({t.dtype})")
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.to(torch.float32)  # exact widening (NumPy has no bfloat16)
    try:
        t = t.cpu()
    except Exception as exc:  # e.g. a tensor on the "meta" device holds no values
        raise ValueError(f"{name} cannot be copied to the CPU (device {t.device}): "
                         f"{' '.join(str(exc).split())[:200]}") from None
    try:
        return t.numpy()
    except TypeError:  # e.g. float8 / quantised dtypes
        raise ValueError(f"{name} has dtype {t.dtype}, which has no NumPy equivalent") from None


def as_real_array(x, name: str = "array", *, allow_integer: bool = True) -> np.ndarray:
    """``x`` as a real NumPy array (dtype kept: float16/32/64, or integer/bool if allowed).

    Raises :class:`ValueError` (one line: what is wrong and what is supported) for complex, object,
    string and — with ``allow_integer=False`` — integer or boolean input. Finiteness is *not*
    checked here (callers check it once they know the dtype they compute in).
    """
    if is_torch_tensor(x):
        A = _torch_to_numpy(x, name)
    else:
        try:
            A = np.asarray(x)
        except Exception as exc:
            raise ValueError(f"{name} cannot be converted to an array: {' '.join(str(exc).split())}") from None
    kind = A.dtype.kind
    if kind == "c":
        raise ValueError(f"{name} must be real; complex arrays ({A.dtype}) are not supported")
    if kind in "OSUVMm":
        raise ValueError(f"{name} must be a numeric array, got dtype {A.dtype}")
    if kind in "iub" and not allow_integer:
        raise ValueError(f"{name} has dtype {A.dtype}; weights must be floating point "
                         "(float16, bfloat16, float32 or float64)")
    if kind not in "fiub":
        raise ValueError(f"{name} has unsupported dtype {A.dtype}")
    return A
