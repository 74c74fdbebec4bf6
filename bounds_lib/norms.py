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

from .arrays import as_real_array

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
    "norm_inequality_ratios",
    "falsify_norm_inequalities",
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


def norm_inequality_ratios(W, weaken=1.0) -> dict:
    """``weaken · lhs/rhs`` of every inequality in :data:`NORM_INEQUALITIES` at the matrix ``W``
    (0 when both sides vanish)."""
    A = as_matrix(W)
    s = singular_values(A)
    r = numerical_rank(s)
    if r == 0:
        return {name: 0.0 for name in NORM_INEQUALITIES}
    k = s[:r]
    out = {}
    for name, (lhs, rhs) in NORM_INEQUALITIES.items():
        b = float(rhs(A, s, k, r))
        out[name] = weaken * float(lhs(A, s, k, r)) / b if b > 0 else 0.0
    return out


def falsify_norm_inequalities(rng, trials=4000, restarts=2, weaken=1.0, shape=(4, 5)):
    """Check every inequality of :data:`NORM_INEQUALITIES` (Chapter 1) by random matrices of random
    shape (1–39 per side), rank and scale (``10^±3``), then by Nelder–Mead over the entries of a
    ``shape`` matrix from random starts. ``weaken > 1`` divides every right side by ``weaken``
    (power check). Returns one :class:`~bounds_lib.falsification.Falsification` per inequality."""
    from .falsification import Falsification, adversarial_search

    names = list(NORM_INEQUALITIES)
    rand = {n: [] for n in names}
    for _ in range(int(trials)):
        l, m = (int(x) for x in rng.integers(1, 40, size=2))
        rk = int(rng.integers(1, min(l, m) + 1))
        W = rng.standard_normal((l, rk)) @ rng.standard_normal((rk, m)) * 10.0 ** rng.uniform(-3, 3)
        for n, v in norm_inequality_ratios(W, weaken).items():
            rand[n].append(v)
    out = []
    for n in names:
        starts = rng.standard_normal((int(restarts), shape[0] * shape[1]))
        adv, _ = (adversarial_search(lambda x, n=n: norm_inequality_ratios(x.reshape(shape), weaken)[n], starts,
                                     maxiter=4000) if restarts else (np.zeros(0), None))
        out.append(Falsification(n + (f" ÷{weaken:g}" if weaken != 1.0 else ""), np.array(rand[n]), adv))
    return out


def dudley_bound_linear(n, d, etas=None):
    """Dudley's bound (Chapter 1, ``thm-dudley``) for the unit-ball linear class on ``n`` points of the
    unit ball of ``ℝ^d`` with the volumetric entropy ``d·log(1 + 2/ε)`` and ``B = 1``:
    ``min_η 4η + (12/√n) ∫_η^1 √(d·log(1+2/ε)) dε`` over a log grid of ``η`` (default 1e-5…1)."""
    from scipy.integrate import quad

    for v, name in ((n, "n"), (d, "d")):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    etas = np.geomspace(1e-5, 1.0, 120) if etas is None else np.asarray(etas, dtype=np.float64)
    if etas.ndim != 1 or etas.size == 0 or np.any(~(etas > 0)) or np.any(etas > 1):
        raise ValueError("etas must be a non-empty 1-D array of cut-offs in (0, 1]")
    vals = [4 * e + 12 / np.sqrt(n) * quad(lambda t: np.sqrt(d * np.log1p(2 / t)), e, 1.0)[0] for e in etas]
    return float(min(vals))


def rademacher_linear_mc(rng, n, d, draws=200):
    """Monte Carlo estimate of ``(1/n) E‖Σ_i ζ_i x_i‖₂`` — the empirical Rademacher complexity of the
    unit-ball linear class — on ``n`` random unit vectors of ``ℝ^d`` (Chapter 1)."""
    for v, name in ((n, "n"), (d, "d"), (draws, "draws")):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    signs = rng.choice([-1.0, 1.0], size=(draws, n))
    return float(np.mean(np.linalg.norm(signs @ X, axis=1)) / n)
