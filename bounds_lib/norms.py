"""Matrix norms and Schatten quantities used throughout the book (Chapter 1).

Conventions (row-vector, as in the paper): a weight ``W`` of shape ``(ℓ, m)`` acts as
``X ↦ X W`` on a token matrix ``X ∈ ℝ^{T×ℓ}``.

* ``S_p(W) = Σ_i σ_i(W)^p`` for ``p ∈ (0, 2]`` (``p = 1`` nuclear norm, ``p = 2`` squared
  Frobenius norm); ``S_0(W)`` is the numerical rank (Chapter 1, eq. ``eq-schatten``).
* The numerical rank counts ``σ_i > RANK_RTOL · len(σ) · max(σ_1, 1)`` — exactly the tolerance of
  the authors' released experiment code, so that the book reproduces their numbers.
* ``‖W‖_{2,1} = Σ_j ‖W_{:,j}‖_2`` (column norms), ``‖W‖_{1,1} = Σ_ij |W_ij|``,
  ``‖Z‖_{2→∞} = max_t ‖Z_{t,:}‖_2`` (worst token row).

Every function validates its input and raises :class:`ValueError` naming the problem.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "RANK_RTOL",
    "as_matrix",
    "validate_p",
    "validate_sigma",
    "singular_values",
    "rank_threshold",
    "numerical_rank",
    "schatten_power",
    "schatten_powers",
    "schatten_quasinorm",
    "spectral_norm",
    "frobenius_norm",
    "nuclear_norm",
    "stable_rank",
    "norm_21",
    "norm_11",
    "norm_2_to_inf",
]

#: Relative tolerance of the numerical rank, as in the released code (``1e-10 · len(σ) · max(σ₁, 1)``).
RANK_RTOL = 1e-10


def as_matrix(W, name: str = "W") -> np.ndarray:
    """Return ``W`` as a finite, non-empty, real 2-D float64 array, or raise ``ValueError``."""
    try:
        A = np.asarray(W)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise ValueError(f"{name} cannot be converted to an array: {exc}") from None
    if A.dtype == object:
        raise ValueError(f"{name} must be a numeric 2-D array, got an object array")
    if np.iscomplexobj(A):
        raise ValueError(f"{name} must be real; complex matrices are not supported")
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got an array with shape {A.shape}")
    if A.size == 0:
        raise ValueError(f"{name} is empty (shape {A.shape}); a weight matrix needs at least one entry")
    if not np.issubdtype(A.dtype, np.number) and A.dtype != np.bool_:
        raise ValueError(f"{name} must be numeric, got dtype {A.dtype}")
    A = A.astype(np.float64, copy=False)
    if not np.all(np.isfinite(A)):
        bad = int(np.size(A) - np.count_nonzero(np.isfinite(A)))
        raise ValueError(f"{name} contains {bad} NaN or infinite entries; weights must be finite")
    return A


def validate_p(p, name: str = "p") -> float:
    """Return ``p`` as a float if it is a Schatten index in ``[0, 2]``, else raise ``ValueError``."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise ValueError(f"{name} must be a real number in [0, 2], got {p!r}")
    p = float(p)
    if not (0.0 <= p <= 2.0):  # also rejects NaN
        raise ValueError(f"{name} must lie in [0, 2] (Schatten indices of the paper), got {p}")
    return p


def validate_sigma(sigma, name: str = "sigma") -> np.ndarray:
    """Return singular values as a 1-D float64 array sorted descending; reject bad input."""
    s = np.asarray(sigma, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of singular values, got shape {s.shape}")
    if s.size == 0:
        raise ValueError(f"{name} is empty; a matrix has at least one singular value")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if np.any(s < 0):
        raise ValueError(f"{name} contains negative values; singular values are >= 0")
    return np.sort(s)[::-1]


def singular_values(W, name: str = "W") -> np.ndarray:
    """All ``min(ℓ, m)`` singular values of ``W`` in descending order (LAPACK gesdd)."""
    A = as_matrix(W, name)
    return np.linalg.svd(A, compute_uv=False)


def rank_threshold(sigma) -> float:
    """The cut ``RANK_RTOL · len(σ) · max(σ₁, 1)`` below which a singular value counts as zero."""
    s = validate_sigma(sigma)
    return RANK_RTOL * s.size * max(float(s[0]), 1.0)


def numerical_rank(sigma) -> int:
    """``#{σ_i > RANK_RTOL · len(σ) · max(σ₁, 1)}`` — the released code's ``S_0``."""
    s = validate_sigma(sigma)
    return int(np.count_nonzero(s > rank_threshold(s)))


def schatten_power(sigma, p) -> float:
    """``S_p = Σ_i σ_i^p`` over all given singular values for ``p ∈ (0, 2]``; ``S_0`` = numerical rank.

    Pass the singular values (``singular_values(W)``). Note that for small ``p > 0`` the sum
    includes numerically-zero singular values (``σ ≈ 1e-15`` still contributes ``σ^p``), exactly as
    the released code does; drop them beforehand for the "clean" convention.
    """
    p = validate_p(p)
    s = validate_sigma(sigma)
    if p == 0.0:
        return float(numerical_rank(s))
    return float(np.sum(s**p))


def schatten_powers(sigma, ps) -> np.ndarray:
    """:func:`schatten_power` for every ``p`` in ``ps`` at once (one validation, one power table).

    Returns ``[S_p for p in ps]``; used for the post hoc grid, where it avoids re-validating and
    re-sorting ``σ`` at every grid point.
    """
    s = validate_sigma(sigma)
    p = np.asarray(ps, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"ps must be a 1-D array of Schatten indices, got shape {p.shape}")
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 2)):
        raise ValueError("every p must lie in [0, 2] (Schatten indices of the paper)")
    out = np.empty(p.size)
    zero = p == 0
    out[zero] = numerical_rank(s)
    nz = s[s > 0]
    out[~zero] = np.sum(np.power.outer(nz, p[~zero]), axis=0) if nz.size else 0.0
    return out


def schatten_quasinorm(sigma, p) -> float:
    """``‖W‖_{S_p} = S_p^{1/p}`` for ``p ∈ (0, 2]`` (a norm for ``p ≥ 1``, a quasi-norm below)."""
    p = validate_p(p)
    if p == 0.0:
        raise ValueError("the Schatten quasi-norm S_p^{1/p} is undefined at p = 0; use numerical_rank")
    return schatten_power(sigma, p) ** (1.0 / p)


def spectral_norm(W) -> float:
    """``‖W‖_2 = σ_1(W)``."""
    return float(singular_values(W)[0])


def frobenius_norm(W) -> float:
    """``‖W‖_F = (Σ_ij W_ij²)^{1/2} = S_2^{1/2}``."""
    return float(np.linalg.norm(as_matrix(W), "fro"))


def nuclear_norm(W) -> float:
    """``‖W‖_* = Σ_i σ_i = S_1``."""
    return float(np.sum(singular_values(W)))


def stable_rank(W) -> float:
    """``‖W‖_F² / ‖W‖_2²`` (0 for the zero matrix)."""
    s = singular_values(W)
    return 0.0 if s[0] == 0 else float(np.sum(s**2) / s[0] ** 2)


def norm_21(W) -> float:
    """``‖W‖_{2,1} = Σ_j ‖W_{:,j}‖_2`` — sum of column norms (row-vector convention, as released)."""
    A = as_matrix(W)
    return float(np.sum(np.linalg.norm(A, axis=0)))


def norm_11(W) -> float:
    """``‖W‖_{1,1} = Σ_ij |W_ij|``."""
    return float(np.sum(np.abs(as_matrix(W))))


def norm_2_to_inf(Z) -> float:
    """``‖Z‖_{2→∞} = max_t ‖Z_{t,:}‖_2`` — the largest row (token) norm."""
    A = as_matrix(Z, "Z")
    return float(np.max(np.linalg.norm(A, axis=1)))
