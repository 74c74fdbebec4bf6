"""The book's corrected main theorem, evaluated on real weights, next to the released proxy (Chapter 5).

Chapter 5 (``ch05-thm-main``) proves, with probability ``≥ 1 − δ`` and simultaneously over the post hoc
choices (grid point per matrix, shells of all radii),

``GAP ≤ 24 L_𝓛/√n · Θ + 3 B_𝓛 √((log(4/δ) + Π)/(2n))``,  ``Θ = √(Σ_j θ_j² + N) · D``,

* ``θ_j² = 2 (s_j(ℓ+m))^{2/(p+2)} (144 min(ℓ,m) m)^{p/(p+2)} K_j^{2p/(p+2)}`` for ``p > 0`` and
  ``θ_j² = r_j(ℓ+m)`` at ``p = 0`` (Chapter 2's covering theorems), with ``s_j`` the shell top of
  ``S_p(W_j)`` (of the rank at ``p = 0``) and ``K_j = 2J·B_w·γ_j·α_j`` (Chapter 3's composition, ``J``
  pieces) computed from the shell tops of the spectral norms (Chapter 4, ``ch04-lem-shells``);
  for square ``W_j ∈ ℝ^{N×N}``, ``θ_j = √2·2^{1/(p+2)}·12^{p/(p+2)}·𝒯(W_j;p)``;
* ``N``: the readout's own entropy ``N log(1 + 2B_w J/ε)``;
* ``D = (2 + (B_w − 1)⁺)√Λ + √(2π)``, ``Λ = max_j[log(9 nT m_j) + log⁺(8 C₂_j √(min(ℓ_j, m_j)·m_j) K_j)]`` (and
  ``log⁺(2 B_w J)``): Dudley's integral of ``ε^{-1/2}√(Λ + log(1/ε))``;
* ``Π``: the union-bound cost of the grid and the shells (Chapter 4, ``ch04-thm-uniform``).

This module holds the theorem's per-matrix term and Dudley's factor;
:func:`bounds_lib.analysis.corrected.corrected_bound` computes all of it from a model's spectra, with the
released ``B_ours`` and the steps that lead from one to the other.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.validation import check_scalar

__all__ = ["log_theta", "dudley_factor", "TINY", "LOG_OVERFLOW"]

#: The smallest positive normal float; a zero spectral norm or Schatten sum is raised to it before its
#: shell is taken (a shell needs a positive radius).
TINY = float(np.finfo(np.float64).tiny)
#: ``exp`` overflows above ``log(max float) ≈ 709.78``: a larger ``log Θ`` reports an infinite gap bound.
LOG_OVERFLOW = 700.0


def log_theta(log_s, p, log_K, rows, cols):
    """``log θ`` of one matrix (vectorised over ``p``): Chapter 5's per-matrix term, constants included.

    ``θ² = 2 (s(ℓ+m))^{2/(p+2)} (144 min(ℓ,m) m)^{p/(p+2)} K^{2p/(p+2)}`` for ``p > 0`` and ``θ² = s(ℓ+m)``
    at ``p = 0`` (``s`` = rank radius), with ``ℓ = rows`` (input dimension), ``m = cols``.
    """
    p = np.asarray(p, dtype=np.float64)
    log_s = np.asarray(log_s, dtype=np.float64)
    lm = math.log(rows + cols)
    inner = math.log(144.0 * min(rows, cols) * cols)
    pos = 0.5 * (math.log(2.0) + 2.0 * (log_s + lm) / (p + 2) + p * (inner + 2.0 * log_K) / (p + 2))
    zero = 0.5 * (log_s + lm)
    out = np.where(p > 0, pos, zero)
    return out if out.ndim else float(out)


def dudley_factor(Lambda, B_w=1.0):
    """``D = (2 + (B_w − 1)⁺)√Λ + √(2π)`` ≥ ``∫_0^{B_w} ε^{-1/2}√(Λ + log(1/ε)) dε`` (Chapter 5, eq. ``ch05-eq-main``).

    Raises
    ------
    TypeError
        ``Lambda`` is not a real number.
    ValueError
        ``Lambda`` is not positive and finite.

    Examples
    --------
    >>> import math
    >>> round(dudley_factor(4.0) - math.sqrt(2 * math.pi), 12)   # 2·√4
    4.0
    """
    Lambda = check_scalar(Lambda, "Lambda (the logarithmic factor)", float, min_val=0.0, include_boundaries="neither")
    return (2.0 + max(B_w - 1.0, 0.0)) * math.sqrt(Lambda) + math.sqrt(2.0 * math.pi)
