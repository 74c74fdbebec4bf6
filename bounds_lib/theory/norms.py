"""Matrix norms and Schatten quantities used throughout the book (Chapter 1).

Conventions (row-vector, as in the paper): a weight ``W ∈ ℝ^{d×d'}`` acts as ``X ↦ X W`` on a token
matrix ``X ∈ ℝ^{T×d}``.

* ``S_p(W) = Σ_i σ_i(W)^p`` for ``p ∈ (0, 2]`` (``p = 1`` nuclear norm, ``p = 2`` squared
  Frobenius norm); ``S_0(W)`` is the numerical rank (Chapter 1, eq. ``eq-schatten``).
* The numerical rank counts ``σ_i > RANK_RTOL · len(σ) · max(σ_1, 1)`` — exactly the tolerance of
  the authors' released experiment code, so that the book reproduces their numbers.
* ``‖W‖_{2,1} = Σ_j ‖W_{:,j}‖_2`` (column norms), ``‖W‖_{1,1} = Σ_ij |W_ij|``,
  ``‖Z‖_{2→∞} = max_t ‖Z_{t,:}‖_2`` (worst token row).

Every function validates its input with :mod:`bounds_lib.core.validation`: :class:`TypeError` for an
argument of the wrong type, :class:`ValueError` for a wrong value, each naming the argument.
The falsification of the inequalities between these norms is
:func:`bounds_lib.checks.ch1_norms.falsify_norm_inequalities`.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.validation import as_real_array, check_array, check_scalar

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
    "NORM_INEQUALITIES",
    "dudley_bound_linear",
    "rademacher_linear_mc",
]

#: Relative tolerance of the numerical rank, as in the released code (``1e-10 · len(σ) · max(σ₁, 1)``).
RANK_RTOL = 1e-10


def as_matrix(W, name: str = "W") -> np.ndarray:
    """Return ``W`` as a finite, non-empty, real 2-D float64 array, or raise ``ValueError``."""
    A = as_real_array(W, name)  # the validation shared with checkpoints (torch tensors, bf16, complex)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got an array with shape {A.shape}")
    if A.size == 0:
        raise ValueError(f"{name} is empty (shape {A.shape}); a weight matrix needs at least one entry")
    A = A.astype(np.float64, copy=False)
    if not np.all(np.isfinite(A)):
        bad = int(np.size(A) - np.count_nonzero(np.isfinite(A)))
        raise ValueError(f"{name} contains {bad} NaN or infinite entries; weights must be finite")
    return A


#: Matrices whose largest |entry| lies outside [2^-16, 2^16] are scaled by a power of two (exact) before
#: products, QRs, SVDs and norms, and the results scaled back in float64: in float32 a product of two
#: 1e20 entries overflows (LAPACK then prints "DLASCL ... illegal value" and returns NaN), in float64
#: entries near 1e200 do. Moderate weights — every trained model we know — are not touched.
_SAFE_EXPONENT = 16


def _pow2_scaled(W):
    """``(W·2^-e, e)`` with ``max|W·2^-e|`` in [1/2, 1) when ``W`` is outside the safe range, else ``(W, 0)``.

    Used by the norms below and by :mod:`bounds_lib.analysis.spectra`; scaling by a power of two is exact, so a
    norm computed from the scaled matrix and multiplied back by ``2^e`` is the unscaled one.
    """
    m = max(float(W.max()), -float(W.min())) if W.size else 0.0  # two reductions, no |W| temporary
    if m == 0.0 or 2.0 ** -_SAFE_EXPONENT <= m <= 2.0 ** _SAFE_EXPONENT:
        return W, 0
    e = math.frexp(m)[1]
    return np.ldexp(W, -e).astype(W.dtype, copy=False), e


def _unscaled(value: float, e: int, what: str) -> float:
    """``value · 2^e`` as a float; :class:`ValueError` when it exceeds the float64 range (never ``inf``)."""
    with np.errstate(over="ignore"):
        out = float(np.ldexp(value, e))
    if not math.isfinite(out):
        raise ValueError(f"{what} exceeds the float64 range (about 1.8e308); compute it in log space")
    return out


def validate_p(p, name: str = "p") -> float:
    """Return ``p`` as a float if it is a Schatten index in ``[0, 2]``, else raise ``ValueError``."""
    return check_scalar(p, f"{name} (a Schatten index of the paper, in [0, 2])", float, min_val=0.0, max_val=2.0)


def validate_sigma(sigma, name: str = "sigma") -> np.ndarray:
    """Return singular values as a 1-D float64 array sorted descending; reject bad input."""
    s = check_array(sigma, name, min_val=0.0, allow_empty=False,
                    what="singular values are finite and >= 0; a matrix has at least one")
    if s.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of singular values, got shape {s.shape}")
    return np.sort(s)[::-1]


def singular_values(W, name: str = "W") -> np.ndarray:
    """All ``min(d, d')`` singular values of ``W ∈ ℝ^{d×d'}`` in descending order (LAPACK ``gesdd``).

    Parameters
    ----------
    W : array_like, shape (d, d')
        A real matrix (NumPy array, nested list or torch tensor; float16/bfloat16 widened exactly).
    name : str
        The argument's name in error messages.

    Returns
    -------
    numpy.ndarray
        ``σ_1 ≥ σ_2 ≥ … ≥ σ_{min(d,d')} ≥ 0`` (Chapter 1, Definition ``def-norms``).

    Raises
    ------
    ValueError
        ``W`` is not a finite, non-empty, real 2-D array.

    Examples
    --------
    >>> singular_values([[3.0, 0.0], [0.0, -4.0]]).tolist()
    [4.0, 3.0]
    """
    A = as_matrix(W, name)
    return np.linalg.svd(A, compute_uv=False)


def rank_threshold(sigma) -> float:
    """The cut ``RANK_RTOL · len(σ) · max(σ₁, 1)`` below which a singular value counts as zero."""
    s = validate_sigma(sigma)
    return RANK_RTOL * s.size * max(float(s[0]), 1.0)


def numerical_rank(sigma) -> int:
    """The numerical rank ``S_0 = #{σ_i > RANK_RTOL · len(σ) · max(σ₁, 1)}`` — the released code's ``S_0``.

    Parameters
    ----------
    sigma : array_like
        Singular values (any order; :func:`singular_values` of the matrix).

    Returns
    -------
    int
        The number of singular values above :func:`rank_threshold` (Chapter 1, eq. ``eq-schatten``).

    Raises
    ------
    TypeError
        ``sigma`` is a bool or not numeric.
    ValueError
        ``sigma`` is empty, not 1-D, or holds a negative, NaN or infinite value.

    Examples
    --------
    >>> numerical_rank([2.0, 1.0, 1e-12])
    2
    """
    return _rank_of_valid(validate_sigma(sigma))


def _rank_of_valid(s: np.ndarray) -> int:
    """:func:`numerical_rank` of singular values :func:`validate_sigma` returned (checked once, not again)."""
    return int(np.count_nonzero(s > RANK_RTOL * s.size * max(float(s[0]), 1.0)))


def schatten_power(sigma, p) -> float:
    """``S_p(W) = Σ_i σ_i^p`` over all given singular values for ``p ∈ (0, 2]``; ``S_0`` = numerical rank.

    Chapter 1, eq. ``eq-schatten``: ``S_1`` is the nuclear norm, ``S_2`` the squared Frobenius norm.
    Pass the singular values (``singular_values(W)``). For small ``p > 0`` the sum includes
    numerically-zero singular values (``σ ≈ 1e-15`` still contributes ``σ^p``), exactly as the released
    code does; drop them beforehand for the "clean" convention.

    Parameters
    ----------
    sigma : array_like
        Singular values of ``W ∈ ℝ^{d×d'}``.
    p : float
        The Schatten index, in ``[0, 2]``.

    Returns
    -------
    float
        ``S_p(W)``.

    Raises
    ------
    TypeError
        ``p`` is not a real number (a bool included), or ``sigma`` is not numeric.
    ValueError
        ``p`` is outside ``[0, 2]`` or NaN; ``sigma`` is empty or holds a negative or non-finite value.

    Examples
    --------
    >>> schatten_power([4.0, 1.0], 0.5)
    3.0
    >>> schatten_power([4.0, 1.0], 2)
    17.0
    >>> schatten_power([4.0, 1e-12], 0)   # the numerical rank
    1.0
    """
    p = validate_p(p)
    s = validate_sigma(sigma)
    if p == 0.0:
        return float(numerical_rank(s))
    with np.errstate(over="ignore"):  # σ ≤ 1.8e308 and p ≤ 2: a term overflows only if S_p itself does
        out = float(np.sum(s**p))
    if not math.isfinite(out):
        raise ValueError(f"S_p = Σσᵖ (p = {p:g}, σ₁ = {s[0]:.3g}) exceeds the float64 range (about 1.8e308); "
                         "compute it in log space: p·log σ₁ + log Σ(σ_i/σ₁)ᵖ")
    return out


def schatten_powers(sigma, ps) -> np.ndarray:
    """:func:`schatten_power` for every ``p`` in ``ps`` at once (one validation, one power table).

    Used on the post hoc grid (Chapter 4), where it avoids re-validating and re-sorting ``σ`` at every
    grid point.

    Parameters
    ----------
    sigma : array_like
        Singular values of ``W``.
    ps : array_like, shape (k,)
        Schatten indices in ``[0, 2]``.

    Returns
    -------
    numpy.ndarray, shape (k,)
        ``[S_p(W) for p in ps]``.

    Raises
    ------
    TypeError
        ``ps`` holds booleans (as :func:`schatten_power` refuses ``p = True``) or ``sigma`` is not numeric.
    ValueError
        ``ps`` is not 1-D or has an entry outside ``[0, 2]``; ``sigma`` is invalid.

    Examples
    --------
    >>> schatten_powers([4.0, 1.0], [0.0, 0.5, 2.0]).tolist()
    [2.0, 3.0, 17.0]
    """
    s = validate_sigma(sigma)
    p = check_array(ps, "ps", min_val=0.0, max_val=2.0, what="Schatten indices of the paper lie in [0, 2]")
    if p.ndim != 1:
        raise ValueError(f"ps must be a 1-D array of Schatten indices, got shape {p.shape}")
    return _schatten_powers_valid(s, p)


def _schatten_powers_valid(s: np.ndarray, p: np.ndarray) -> np.ndarray:
    """:func:`schatten_powers` of singular values :func:`validate_sigma` returned and a checked 1-D ``p``.

    Only the overflow of ``S_p`` is still refused (a property of the values, not of their form).
    """
    out = np.empty(p.size)
    zero = p == 0
    out[zero] = _rank_of_valid(s)
    nz = s[s > 0]
    with np.errstate(over="ignore"):
        out[~zero] = np.sum(np.power.outer(nz, p[~zero]), axis=0) if nz.size else 0.0
    if not np.all(np.isfinite(out)):
        raise ValueError(f"S_p = Σσᵖ (σ₁ = {s[0]:.3g}) exceeds the float64 range (about 1.8e308) for some p; "
                         "compute it in log space: p·log σ₁ + log Σ(σ_i/σ₁)ᵖ")
    return out


def schatten_quasinorm(sigma, p) -> float:
    """``‖W‖_{S_p} = S_p(W)^{1/p}`` for ``p ∈ (0, 2]`` (a norm for ``p ≥ 1``, a quasi-norm below).

    Parameters
    ----------
    sigma : array_like
        Singular values of ``W``.
    p : float
        The Schatten index, in ``(0, 2]``.

    Returns
    -------
    float
        ``S_p(W)^{1/p}`` (Chapter 1, Definition ``def-norms``).

    Raises
    ------
    TypeError
        ``p`` is not a real number.
    ValueError
        ``p = 0`` (use :func:`numerical_rank`), ``p`` outside ``[0, 2]``, or ``sigma`` invalid.

    Examples
    --------
    >>> schatten_quasinorm([3.0, 4.0], 2)   # the Frobenius norm
    5.0
    >>> schatten_quasinorm([3.0, 4.0], 1)   # the nuclear norm
    7.0
    """
    p = validate_p(p)
    if p == 0.0:
        raise ValueError("the Schatten quasi-norm S_p^{1/p} is undefined at p = 0; use numerical_rank")
    return schatten_power(sigma, p) ** (1.0 / p)


def spectral_norm(W) -> float:
    """``‖W‖_2 = σ_1(W)``, the largest singular value.

    Examples
    --------
    >>> spectral_norm([[3.0, 0.0], [0.0, -4.0]])
    4.0
    """
    return float(singular_values(W)[0])


def frobenius_norm(W) -> float:
    """``‖W‖_F = (Σ_ij W_ij²)^{1/2} = S_2^{1/2}`` (computed on ``W`` scaled by a power of two when its entries
    are extreme, so that no square overflows or underflows)."""
    A, e = _pow2_scaled(as_matrix(W))
    return _unscaled(np.linalg.norm(A, "fro"), e, "‖W‖_F")


def nuclear_norm(W) -> float:
    """``‖W‖_* = Σ_i σ_i = S_1``."""
    s = singular_values(W)
    with np.errstate(over="ignore"):
        total = np.sum(s)
    return _unscaled(total, 0, "‖W‖_*")


def stable_rank(W) -> float:
    """``‖W‖_F² / ‖W‖_2²`` (0 for the zero matrix), on ``σ`` scaled by a power of two when it is extreme."""
    s, _ = _pow2_scaled(singular_values(W))  # exact scaling: the same value, without overflow
    return 0.0 if s[0] == 0 else float(np.sum(s**2) / s[0] ** 2)


def norm_21(W) -> float:
    """``‖W‖_{2,1} = Σ_j ‖W_{:,j}‖_2`` — the sum of the column norms (row-vector convention, as released).

    The norm of Edelman et al.'s bound (Chapter 1, Definition ``def-norms``).

    Parameters
    ----------
    W : array_like, shape (d, d')
        A real matrix.

    Returns
    -------
    float
        ``‖W‖_{2,1}``.

    Raises
    ------
    ValueError
        ``W`` is not a finite, non-empty, real 2-D array.

    Examples
    --------
    >>> norm_21([[3.0, 1.0], [4.0, 0.0]])
    6.0
    """
    A, e = _pow2_scaled(as_matrix(W))
    return _unscaled(np.sum(np.linalg.norm(A, axis=0)), e, "‖W‖_{2,1}")


def norm_11(W) -> float:
    """``‖W‖_{1,1} = Σ_ij |W_ij|`` — the norm of Trauger and Tewari's bound (Chapter 1, ``def-norms``).

    Parameters
    ----------
    W : array_like, shape (d, d')
        A real matrix.

    Returns
    -------
    float
        ``‖W‖_{1,1}``.

    Raises
    ------
    ValueError
        ``W`` is not a finite, non-empty, real 2-D array.

    Examples
    --------
    >>> norm_11([[3.0, -1.0], [4.0, 0.0]])
    8.0
    """
    with np.errstate(over="ignore"):
        total = np.sum(np.abs(as_matrix(W)))
    return _unscaled(total, 0, "‖W‖_{1,1}")


def norm_2_to_inf(Z) -> float:
    """``‖Z‖_{2→∞} = max_t ‖Z_{t,:}‖_2`` — the largest row (token) norm."""
    A, e = _pow2_scaled(as_matrix(Z, "Z"))
    return _unscaled(np.max(np.linalg.norm(A, axis=1)), e, "‖Z‖_{2→∞}")


def _fro(s):
    return float(np.sqrt(np.sum(s**2)))


#: The standard inequalities between the norms (Chapter 1), as ``name: (lhs, rhs)`` functions of
#: ``(W, s, k, r)``: the matrix, all singular values, the numerically non-zero ones and the numerical rank.
NORM_INEQUALITIES = {
    "‖W‖₂ ≤ ‖W‖_F": (lambda W, s, k, r: s[0], lambda W, s, k, r: _fro(s)),
    "‖W‖_F ≤ ‖W‖_*": (lambda W, s, k, r: _fro(s), lambda W, s, k, r: float(np.sum(s))),
    "‖W‖_F ≤ √rank ‖W‖₂": (lambda W, s, k, r: _fro(k), lambda W, s, k, r: np.sqrt(r) * s[0]),
    "‖W‖_* ≤ √rank ‖W‖_F": (lambda W, s, k, r: float(np.sum(k)), lambda W, s, k, r: np.sqrt(r) * _fro(k)),
    "‖W‖_F ≤ ‖W‖_{2,1}": (lambda W, s, k, r: _fro(s), lambda W, s, k, r: norm_21(W)),
    "‖W‖_{2,1} ≤ √m ‖W‖_F": (lambda W, s, k, r: norm_21(W), lambda W, s, k, r: np.sqrt(W.shape[1]) * _fro(s)),
    "‖W‖_{2,1} ≤ ‖W‖_{1,1}": (lambda W, s, k, r: norm_21(W), lambda W, s, k, r: norm_11(W)),
    "‖W‖_{1,1} ≤ √ℓ ‖W‖_{2,1}": (lambda W, s, k, r: norm_11(W), lambda W, s, k, r: np.sqrt(W.shape[0]) * norm_21(W)),
    "‖W‖_{2→∞} ≤ ‖W‖₂": (lambda W, s, k, r: norm_2_to_inf(W), lambda W, s, k, r: s[0]),
    "S_p ≤ rank·σ₁ᵖ (p=1/2)": (lambda W, s, k, r: schatten_power(k, 0.5), lambda W, s, k, r: r * s[0] ** 0.5),
    "σ₁ᵖ ≤ S_p (p=1/2)": (lambda W, s, k, r: s[0] ** 0.5, lambda W, s, k, r: schatten_power(k, 0.5)),
}


def dudley_bound_linear(n, d, etas=None):
    """Dudley's bound for the unit-ball linear class (Chapter 1, Theorem ``thm-dudley``).

    On ``n`` points of the unit ball of ``ℝ^d`` with the volumetric entropy ``d·log(1 + 2/ε)`` and
    ``B = 1``: ``min_η 4η + (12/√n) ∫_η^1 √(d·log(1+2/ε)) dε`` over the cut-offs ``etas``.

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    d : int
        Dimension, ``>= 1``.
    etas : array_like, optional
        Cut-offs in ``(0, 1]`` (default: 120 log-spaced points from ``1e-5`` to 1).

    Returns
    -------
    float
        The smallest bound over the cut-offs.

    Raises
    ------
    TypeError
        ``n`` or ``d`` is not an integer (``3.0`` and ``True`` included).
    ValueError
        ``n`` or ``d`` is below 1; ``etas`` is empty, not 1-D or outside ``(0, 1]``.

    Examples
    --------
    >>> dudley_bound_linear(100, 3, etas=[1.0])   # η = 1: no integral left
    4.0
    """
    from scipy.integrate import quad

    n = check_scalar(n, "n (number of points)", int, min_val=1)
    d = check_scalar(d, "d (dimension)", int, min_val=1)
    if etas is None:
        etas = np.geomspace(1e-5, 1.0, 120)
    else:
        etas = check_array(etas, "etas", min_val=0.0, max_val=1.0, include_boundaries="right", allow_empty=False,
                           what="cut-offs of Dudley's integral lie in (0, 1]")
        if etas.ndim != 1:
            raise ValueError(f"etas must be a 1-D array of cut-offs in (0, 1], got shape {etas.shape}")
    vals = [4 * e + 12 / np.sqrt(n) * quad(lambda t: np.sqrt(d * np.log1p(2 / t)), e, 1.0)[0] for e in etas]
    return float(min(vals))


def rademacher_linear_mc(rng, n, d, draws=200):
    """Monte Carlo estimate of ``(1/n) E‖Σ_i ζ_i x_i‖₂`` — the empirical Rademacher complexity of the
    unit-ball linear class — on ``n`` random unit vectors of ``ℝ^d`` (Chapter 1)."""
    n = check_scalar(n, "n (number of points)", int, min_val=1)
    d = check_scalar(d, "d (dimension)", int, min_val=1)
    draws = check_scalar(draws, "draws", int, min_val=1)
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    signs = rng.choice([-1.0, 1.0], size=(draws, n))
    return float(np.mean(np.linalg.norm(signs @ X, axis=1)) / n)
