"""A torch twin of :mod:`bounds_lib.theory.model` for training the paper's Transformer (Chapter 7).

The module :class:`TorchTransformer` computes exactly the map of :func:`bounds_lib.theory.model.forward`:
rows of the input are projected onto the unit ball, then for every block ``ℓ``

    Y = Π_norm(softmax_row(s · X W_QK Xᵀ) X W_V),   X ← Π_norm(φ(Y) W_M),

and the output is ``⟨w, X_{0,:}⟩`` (the [CLS] row). All matrices are ``N×N`` and act on row
vectors (``X ↦ X W``), so the trained parameters *are* the paper's ``W^{QK}, W^{V}, W^{M}``: no
biases, no LayerNorm, no residual stream. :func:`to_numpy` and :func:`from_numpy` convert between
the two implementations without changing a single weight; a test checks that the outputs agree in
float64 to ~1e-12.

``Π_norm`` is written as ``z / sqrt(max(‖z‖², 1))``, which equals ``z / max(‖z‖, 1)`` and has a
finite gradient at ``z = 0``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..theory.model import Block, SingleHeadTransformer
from ..core.validation import check_scalar

__all__ = [
    "TORCH_ACTIVATIONS",
    "project_rows",
    "TorchTransformer",
    "from_numpy",
    "to_numpy",
]

TORCH_ACTIVATIONS = {
    "gelu": lambda x: torch.nn.functional.gelu(x, approximate="none"),
    "relu": torch.relu,
    "tanh": torch.tanh,
    "identity": lambda x: x,
}


def project_rows(Z: torch.Tensor) -> torch.Tensor:
    """``Π_norm`` on the last axis: ``z / max(‖z‖₂, 1)`` for every row ``z``."""
    sq = torch.sum(Z * Z, dim=-1, keepdim=True)
    return Z / torch.sqrt(torch.clamp(sq, min=1.0))


class TorchTransformer(nn.Module):
    """``L`` single-head blocks of hidden size ``N`` with a scalar [CLS] readout.

    Parameters are ``W_QK[ℓ]``, ``W_V[ℓ]``, ``W_M[ℓ]`` (each ``N×N``) and ``w`` (``N``); with
    ``rank = r > 0`` each matrix is instead factorised as ``A Bᵀ`` (``A, B`` of shape ``N×r``, the
    low-rank parameterisation of Chapter 8), and :meth:`matrices` returns the products. The
    initialisation (seeded through ``generator``) draws i.i.d. ``𝒩(0, init_scale²/N)`` entries, so
    every matrix starts with spectral norm ≈ ``2·init_scale``; ``w`` starts as ``𝒩(0, 1/N)``.
    """

    def __init__(self, L: int, N: int, *, act: str = "gelu", logit_scale: float = 1.0,
                 init_scale: float = 1.0, generator: torch.Generator | None = None,
                 dtype: torch.dtype = torch.float32, rank: int = 0):
        super().__init__()
        L = check_scalar(L, "L (number of blocks)", int, min_val=1)
        N = check_scalar(N, "N (hidden size)", int, min_val=1)
        if not isinstance(act, str):
            raise TypeError(f"act must be an activation name (str), got {type(act).__name__} {act!r}")
        if act not in TORCH_ACTIVATIONS:
            raise ValueError(f"unknown activation {act!r}; supported: {', '.join(sorted(TORCH_ACTIVATIONS))}")
        check_scalar(logit_scale, "logit_scale", float, min_val=0, include_boundaries="neither")
        check_scalar(init_scale, "init_scale", float, min_val=0)
        check_scalar(rank, f"rank (0: full N×N matrices; at most N = {N})", int, min_val=0, max_val=N)
        self.L, self.N, self.act, self.logit_scale = int(L), int(N), act, float(logit_scale)
        self.rank = int(rank)
        std = init_scale / math.sqrt(N)

        def mat():
            return nn.Parameter(torch.randn(N, N, generator=generator, dtype=dtype) * std)

        if self.rank == 0:
            self.W_QK = nn.ParameterList([mat() for _ in range(self.L)])
            self.W_V = nn.ParameterList([mat() for _ in range(self.L)])
            self.W_M = nn.ParameterList([mat() for _ in range(self.L)])
        else:
            # W = A Bᵀ with A, B of shape N×r: entries of W have variance r·s⁴ = init_scale²/N
            fs = math.sqrt(init_scale) / (N * self.rank) ** 0.25

            def factor():
                return nn.Parameter(torch.randn(N, self.rank, generator=generator, dtype=dtype) * fs)

            for a in ("QK", "V", "M"):
                setattr(self, f"A_{a}", nn.ParameterList([factor() for _ in range(self.L)]))
                setattr(self, f"B_{a}", nn.ParameterList([factor() for _ in range(self.L)]))
        self.w = nn.Parameter(torch.randn(N, generator=generator, dtype=dtype) / math.sqrt(N))

    def matrices(self, dtype: torch.dtype | None = None) -> dict:
        """``{"QK": [W_QK per layer], "V": [...], "M": [...]}``: the paper's matrices as tensors.

        For a full model these are the parameters themselves; for a factorised one (``rank = r``)
        the products ``A Bᵀ`` (rank at most ``r``), which carry the gradient to the factors. ``dtype``
        (e.g. float64) converts the factors before multiplying, so that the product's numerical rank
        is ``r`` and not that of a float32 rounding.
        """
        if self.rank == 0:
            return {"QK": list(self.W_QK), "V": list(self.W_V), "M": list(self.W_M)}
        cast = (lambda t: t) if dtype is None else (lambda t: t.to(dtype))
        return {a: [cast(A) @ cast(B).T for A, B in zip(getattr(self, f"A_{a}"), getattr(self, f"B_{a}"))]
                for a in ("QK", "V", "M")}

    def hidden(self, X: torch.Tensor) -> torch.Tensor:
        """The last block's output ``X^{(L)}`` for a batch ``X`` of shape ``(n, T, N)``."""
        if X.ndim != 3 or X.shape[-1] != self.N:
            raise ValueError(f"inputs must have shape (n, T, {self.N}), got {tuple(X.shape)}")
        phi = TORCH_ACTIVATIONS[self.act]
        H = project_rows(X)
        W = self.matrices()
        for QK, V, M in zip(W["QK"], W["V"], W["M"]):
            logits = self.logit_scale * (H @ QK) @ H.transpose(-1, -2)
            Y = project_rows(torch.softmax(logits, dim=-1) @ (H @ V))
            H = project_rows(phi(Y) @ M)
        return H

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Scalar outputs ``⟨w, X^{(L)}_{0,:}⟩`` of shape ``(n,)``."""
        return self.hidden(X)[:, 0, :] @ self.w


def from_numpy(model: SingleHeadTransformer, dtype: torch.dtype = torch.float64) -> TorchTransformer:
    """A :class:`TorchTransformer` carrying exactly the weights of a NumPy ``SingleHeadTransformer``."""
    tm = TorchTransformer(model.L, model.N, act=model.act, logit_scale=model.logit_scale, dtype=dtype)
    with torch.no_grad():
        for l, b in enumerate(model.blocks):
            tm.W_QK[l].copy_(torch.as_tensor(b.W_QK, dtype=dtype))
            tm.W_V[l].copy_(torch.as_tensor(b.W_V, dtype=dtype))
            tm.W_M[l].copy_(torch.as_tensor(b.W_M, dtype=dtype))
        tm.w.copy_(torch.as_tensor(model.w, dtype=dtype))
    return tm


def to_numpy(tm: TorchTransformer, meta: dict | None = None) -> SingleHeadTransformer:
    """The NumPy ``SingleHeadTransformer`` (float64) with the weights of ``tm``."""
    def arr(p):
        return p.detach().cpu().to(torch.float64).numpy().copy()

    W = tm.matrices(torch.float64)
    blocks = tuple(Block(arr(q), arr(v), arr(m)) for q, v, m in zip(W["QK"], W["V"], W["M"]))
    return SingleHeadTransformer(blocks, arr(tm.w), act=tm.act, logit_scale=tm.logit_scale,
                                 meta=dict(meta or {}))
