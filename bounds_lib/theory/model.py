"""The paper's single-head Transformer, in NumPy (Chapter 1, Section 2 of the paper).

Block ``ℓ`` maps token matrices ``X ∈ ℝ^{T×N}`` (row-vector convention) as

    A   = softmax_row(s · X W_QK Xᵀ) X W_V          (single attention head)
    Y   = Π_norm(A)                                  (rows projected onto the unit ball)
    Z   = Π_norm(φ(Y) W_M)                           (row-wise L_φ-Lipschitz φ, feed-forward)

and the readout is ``f(X) = ⟨w, X^{(L)}_{0,:}⟩`` at the [CLS] row (row 0). ``s`` is an optional
logit scale (``1/√d`` in practice; the paper's analysis uses ``s = 1``). All functions accept a
batch ``X`` of shape ``(n, T, N)`` or a single ``(T, N)`` input.

The torch twin used for training (Chapter 7) must reproduce :func:`forward` on the same weights.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .norms import as_matrix
from ..core.validation import check_array, check_scalar

#: Matrix types of the paper's single-head model (Chapter 1) — ``W_QK``, ``W_V``, ``W_M`` per layer.
SINGLE_HEAD_MATRIX_TYPES = ("QK", "V", "M")
#: Matrix types of a multi-head checkpoint (Chapter 6) in the order of the paper — per-head ``QK_h``,
#: per-head ``Ṽ_h`` ("V"), then the layer's ``M_in`` and ``M_out``.
MULTI_HEAD_MATRIX_TYPES = ("QK", "V", "M_in", "M_out")

__all__ = [
    "SINGLE_HEAD_MATRIX_TYPES",
    "MULTI_HEAD_MATRIX_TYPES",
    "ACTIVATIONS",
    "ACTIVATION_LIPSCHITZ",
    "Block",
    "SingleHeadTransformer",
    "activation",
    "project_rows",
    "softmax_rows",
    "attention",
    "block_forward",
    "hidden_states",
    "forward",
    "random_transformer",
]


def _gelu(x):
    from scipy.special import erf  # imported on use: scipy.special costs ~0.2 s at start-up

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


#: The element-wise activations φ by name (NumPy).
ACTIVATIONS = {
    "gelu": _gelu,
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "identity": lambda x: x,
}

def _gelu_lipschitz() -> float:
    """max_x GELU'(x) = max_x Φ(x) + xφ(x), attained at x = √2 (where φ(x)(2 − x²) = 0)."""
    r = math.sqrt(2.0)
    return 0.5 * (1.0 + math.erf(1.0)) + r * math.exp(-1.0) / math.sqrt(2.0 * math.pi)


#: Global Lipschitz constants L_φ of the activations (for GELU Φ(√2) + √2 φ(√2) = 1.12890…; the released
#: code rounds it up to 1.13).
ACTIVATION_LIPSCHITZ = {"gelu": _gelu_lipschitz(), "relu": 1.0, "tanh": 1.0, "identity": 1.0}


def activation(name: str):
    """The element-wise activation called ``name`` (one of the keys of ``ACTIVATIONS``).

    Raises
    ------
    TypeError
        ``name`` is not a string.
    ValueError
        ``name`` is not one of ``"gelu"``, ``"identity"``, ``"relu"``, ``"tanh"``.
    """
    if not isinstance(name, str):
        raise TypeError(f"activation must be a name (str), got {type(name).__name__} {name!r}; "
                        f"supported: {', '.join(sorted(ACTIVATIONS))}")
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; supported: {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


@dataclass(frozen=True)
class Block:
    """Weights of one block: ``W_QK`` (N×N), ``W_V`` (N×N), ``W_M`` (N×N)."""

    W_QK: np.ndarray
    W_V: np.ndarray
    W_M: np.ndarray

    def __post_init__(self):
        shapes = []
        for name in ("W_QK", "W_V", "W_M"):
            A = as_matrix(getattr(self, name), name)
            if A.shape[0] != A.shape[1]:
                raise ValueError(f"{name} must be square N×N, got shape {A.shape}")
            object.__setattr__(self, name, A)
            shapes.append(A.shape)
        if len(set(shapes)) != 1:
            raise ValueError(f"W_QK, W_V, W_M must share the hidden size N, got shapes {shapes}")

    @property
    def N(self) -> int:
        return self.W_QK.shape[0]


@dataclass(frozen=True)
class SingleHeadTransformer:
    """``L`` blocks, a readout vector ``w ∈ ℝ^N``, an activation name and a logit scale."""

    blocks: tuple
    w: np.ndarray
    act: str = "gelu"
    logit_scale: float = 1.0
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        blocks = tuple(self.blocks)
        if not blocks:
            raise ValueError("a SingleHeadTransformer needs at least one block (L >= 1)")
        if not all(isinstance(b, Block) for b in blocks):
            raise TypeError("blocks must be bounds_lib.theory.model.Block instances, got "
                            + ", ".join(sorted({type(b).__name__ for b in blocks if not isinstance(b, Block)})))
        N = blocks[0].N
        if any(b.N != N for b in blocks):
            raise ValueError("all blocks must share the hidden size N")
        w = check_array(self.w, "readout w")
        if w.shape != (N,):
            raise ValueError(f"readout w must have shape ({N},), got {w.shape}")
        activation(self.act)
        check_scalar(self.logit_scale, "logit_scale", float, min_val=0, include_boundaries="neither")
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "w", w)

    @property
    def L(self) -> int:
        return len(self.blocks)

    @property
    def N(self) -> int:
        return self.blocks[0].N

    @property
    def L_phi(self) -> float:
        return ACTIVATION_LIPSCHITZ[self.act]


def project_rows(Z: np.ndarray) -> np.ndarray:
    """``Π_norm``: rescale every row with ``‖z_t‖₂ > 1`` onto the unit sphere; others unchanged."""
    Z = np.asarray(Z)
    if Z.dtype.kind == "f":  # √Σ z² as np.linalg.norm computes it (same bits), without its dispatch: the searches'
        norms = np.sqrt(np.add.reduce(Z * Z, axis=-1, keepdims=True))  # inner loops call this ~10⁶ times
    else:
        norms = np.linalg.norm(Z, axis=-1, keepdims=True)
    return Z / np.maximum(norms, 1.0)


def softmax_rows(S: np.ndarray) -> np.ndarray:
    """Row-wise softmax, stabilised by subtracting the row maximum."""
    S = S - np.max(S, axis=-1, keepdims=True)
    E = np.exp(S)
    return E / np.sum(E, axis=-1, keepdims=True)


def _as_batch(X, N: int):
    X = check_array(X, "inputs")
    single = X.ndim == 2
    if single:
        X = X[None]
    if X.ndim != 3 or X.shape[-1] != N or X.shape[1] == 0 or X.shape[0] == 0:
        raise ValueError(f"inputs must have shape (n, T, {N}) or (T, {N}) with n, T >= 1, got {np.shape(X)}")
    return X, single


def attention(X: np.ndarray, W_QK: np.ndarray, W_V: np.ndarray, logit_scale: float = 1.0) -> np.ndarray:
    """``softmax_row(s · X W_QK Xᵀ) X W_V`` for a batch ``X`` of shape ``(n, T, N)``."""
    logits = logit_scale * (X @ W_QK) @ np.swapaxes(X, -1, -2)
    return softmax_rows(logits) @ (X @ W_V)


def block_forward(X: np.ndarray, block: Block, act: str = "gelu", logit_scale: float = 1.0) -> np.ndarray:
    """One block: ``Π_norm(φ(Π_norm(attention(X))) W_M)``."""
    return _blocks_forward(X, ((block.W_QK, block.W_V, block.W_M),), activation(act), logit_scale)


def _blocks_forward(H: np.ndarray, mats, phi, logit_scale: float) -> np.ndarray:
    """The blocks ``(W_QK, W_V, W_M)`` of ``mats`` in turn on a batch ``H`` of shape ``(n, T, N)``, without
    validation: the inner loop of :func:`forward`, also run by the adversarial searches of Chapter 3 (one
    small network per evaluation, where building and checking the dataclasses cost more than the block)."""
    for W_QK, W_V, W_M in mats:
        H = project_rows(phi(project_rows(attention(H, W_QK, W_V, logit_scale))) @ W_M)
    return H


def hidden_states(model: SingleHeadTransformer, X) -> list[np.ndarray]:
    """``[X^{(0)}, X^{(1)}, …, X^{(L)}]`` — the input (rows projected) and every block's output."""
    Xb, single = _as_batch(X, model.N)
    states = [project_rows(Xb)]
    for b in model.blocks:
        states.append(block_forward(states[-1], b, model.act, model.logit_scale))
    return [s[0] for s in states] if single else states


def forward(model: SingleHeadTransformer, X) -> np.ndarray:
    """Scalar outputs ``⟨w, X^{(L)}_{0,:}⟩`` of the paper's network (Chapter 1).

    Inputs are first projected row-wise onto the unit ball, as the analysis assumes.

    Parameters
    ----------
    model : SingleHeadTransformer
        The weights.
    X : array_like
        A batch of token matrices, shape ``(n, T, N)``, or one input of shape ``(T, N)``.

    Returns
    -------
    numpy.ndarray or float
        Shape ``(n,)`` for a batch, a Python float for one input.

    Raises
    ------
    ValueError
        ``X`` has another shape, or holds NaN or infinite entries.

    Examples
    --------
    >>> net = random_transformer(1, 3, np.random.default_rng(0))
    >>> forward(net, np.zeros((5, 2, 3))).shape
    (5,)
    """
    Xb, single = _as_batch(X, model.N)
    mats = ((b.W_QK, b.W_V, b.W_M) for b in model.blocks)
    H = _blocks_forward(project_rows(Xb), mats, activation(model.act), model.logit_scale)
    out = H[:, 0, :] @ model.w
    return float(out[0]) if single else out


def random_transformer(L: int, N: int, rng: np.random.Generator, *, spectral_norm: float = 1.0,
                       act: str = "gelu", logit_scale: float = 1.0) -> SingleHeadTransformer:
    """Gaussian weights rescaled so every matrix has spectral norm ``spectral_norm``.

    Parameters
    ----------
    L : int
        Number of blocks (depth), ``>= 1``.
    N : int
        Hidden size, ``>= 1``.
    rng : numpy.random.Generator
        Source of the Gaussian entries (the model is a deterministic function of its state).
    spectral_norm : float
        ``‖W‖₂`` of every matrix, ``> 0``.
    act : str
        Activation name (a key of :data:`ACTIVATIONS`).
    logit_scale : float
        The attention logit scale ``s > 0``.

    Returns
    -------
    SingleHeadTransformer
        ``L`` blocks of ``N×N`` matrices with ``‖W_QK‖₂ = ‖W_V‖₂ = ‖W_M‖₂ = spectral_norm`` and a unit
        readout ``w``.

    Raises
    ------
    TypeError
        ``L`` or ``N`` is not an integer, ``spectral_norm`` not a real number.
    ValueError
        ``L < 1``, ``N < 1``, ``spectral_norm`` not positive and finite, or an unknown activation.

    Examples
    --------
    >>> net = random_transformer(2, 4, np.random.default_rng(0), spectral_norm=2.0)
    >>> net.L, net.N, round(float(np.linalg.norm(net.blocks[0].W_V, 2)), 12)
    (2, 4, 2.0)
    >>> isinstance(forward(net, np.ones((3, 4))), float)  # one input of T = 3 tokens: one scalar output
    True
    >>> random_transformer(2.0, 4, np.random.default_rng(0))
    Traceback (most recent call last):
        ...
    TypeError: L (number of blocks) must be an integer, got float 2.0
    """
    L = check_scalar(L, "L (number of blocks)", int, min_val=1)
    N = check_scalar(N, "N (hidden size)", int, min_val=1)
    check_scalar(spectral_norm, "spectral_norm", float, min_val=0, include_boundaries="neither")

    def mat():
        A = rng.standard_normal((N, N))
        return spectral_norm * A / np.linalg.norm(A, 2)

    blocks = tuple(Block(mat(), mat(), mat()) for _ in range(int(L)))
    w = rng.standard_normal(N)
    return SingleHeadTransformer(blocks, w / np.linalg.norm(w), act=act, logit_scale=logit_scale)
