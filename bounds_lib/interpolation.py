"""Matrix parameter interpolation: split W at a threshold τ and cover the two parts (Chapter 2).

For ``W ∈ ℝ^{ℓ×m}`` with singular values σ_j and ``S_p(W) = Σ σ_j^p ≤ C_s`` (Chapter 2, ``ch02-def-split``):

* ``W₁ = Σ_{σ_j > τ} σ_j u_j v_jᵀ`` (leading part), ``W₂ = W − W₁`` (tail);
* ``rank(W₁) ≤ S_p/τ^p`` (``ch02-lem-rank``), ``‖W₂‖_F ≤ τ √min(ℓ,m)`` and ``‖W₂‖_F² ≤ τ^{2−p} S_p`` (``ch02-lem-tail``);
* entropy of the low-rank part ``(C_s/τ^p)(ℓ+m)`` and of the Frobenius part ``τ² min(ℓ,m)·m/ε²``
  (log factors dropped); balancing them gives
  ``τ* = (C_s(ℓ+m) ε² / (min(ℓ,m)·m))^{1/(p+2)}`` and the log-covering bound
  ``([C_s(ℓ+m)]² (min(ℓ,m)·m)^p / ε^{2p})^{1/(p+2)}`` (``ch02-thm-covering``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .norms import as_matrix, validate_p

__all__ = [
    "SVDSplit",
    "svd_split",
    "rank_bound",
    "tail_bound_dimension",
    "tail_bound_schatten",
    "entropy_low_rank",
    "entropy_frobenius",
    "balancing_tau",
    "log_covering_at_tau",
    "log_covering_bound",
    "dudley_integral_exponent",
    "Falsification",
    "falsify_split",
]


def _pos(x, name):
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, bool) else None
    if a is None or np.any(np.isnan(a)) or np.any(~(a > 0)) or np.any(~np.isfinite(a)):
        what = {"tau": "the threshold τ", "eps": "the radius ε", "C_s": "the Schatten budget C_s"}.get(name, name)
        raise ValueError(f"{name} ({what}) must be positive and finite, got {x!r}")
    return a if a.ndim else float(a)


def _dim(x, name):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


@dataclass(frozen=True)
class SVDSplit:
    """``W = W1 + W2`` with ``W1`` the singular directions with ``σ > tau``, ``W2`` the rest."""

    W1: np.ndarray
    W2: np.ndarray
    sigma: np.ndarray
    tau: float
    rank_W1: int


def svd_split(W, tau):
    """Split ``W`` at ``τ``: ``W1 = Σ_{σ_j>τ} σ_j u_j v_jᵀ``, ``W2 = Σ_{σ_j≤τ} σ_j u_j v_jᵀ``."""
    A = as_matrix(W)
    tau = _pos(tau, "tau")
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    keep = s > tau
    W1 = (U[:, keep] * s[keep]) @ Vt[keep]
    return SVDSplit(W1=W1, W2=A - W1, sigma=s, tau=float(tau), rank_W1=int(np.count_nonzero(keep)))


def rank_bound(S_p, tau, p):
    """``S_p / τ^p`` ≥ ``rank(W₁)`` (Markov's inequality on the spectrum; at p = 0 it is the rank)."""
    p = validate_p(p)
    return np.asarray(S_p, dtype=np.float64) / _pos(tau, "tau") ** p


def tail_bound_dimension(tau, shape):
    """``τ · √min(ℓ, m)`` ≥ ``‖W₂‖_F`` (every tail singular value is ≤ τ)."""
    l, m = (_dim(d, "matrix dimension") for d in shape)
    return _pos(tau, "tau") * np.sqrt(min(l, m))


def tail_bound_schatten(tau, S_p, p):
    """``(τ^{2−p} S_p)^{1/2}`` ≥ ``‖W₂‖_F`` for ``p ∈ [0, 2]`` (σ² = σ^p σ^{2−p} ≤ σ^p τ^{2−p} on the tail)."""
    p = validate_p(p)
    return np.sqrt(_pos(tau, "tau") ** (2.0 - p) * np.asarray(S_p, dtype=np.float64))


def entropy_low_rank(tau, C_s, p, l, m):
    """``(C_s/τ^p)(ℓ + m)`` — entropy of rank-``C_s/τ^p`` matrices (log factor dropped)."""
    p = validate_p(p)
    return _pos(C_s, "C_s") / _pos(tau, "tau") ** p * (_dim(l, "l") + _dim(m, "m"))


def entropy_frobenius(tau, eps, l, m):
    """``τ² min(ℓ,m)·m / ε²`` — Maurey-type entropy of the tail's Frobenius ball (log factor dropped)."""
    l, m = _dim(l, "l"), _dim(m, "m")
    return _pos(tau, "tau") ** 2 * min(l, m) * m / _pos(eps, "eps") ** 2


def balancing_tau(eps, C_s, p, l, m):
    """``τ* = (C_s(ℓ+m) ε² / (min(ℓ,m)·m))^{1/(p+2)}`` — where the two entropy terms are equal."""
    p = validate_p(p)
    l, m = _dim(l, "l"), _dim(m, "m")
    return (_pos(C_s, "C_s") * (l + m) * _pos(eps, "eps") ** 2 / (min(l, m) * m)) ** (1.0 / (p + 2.0))


def log_covering_at_tau(tau, eps, C_s, p, l, m):
    """Sum of the two entropy terms at threshold ``τ`` (an upper bound on the log-covering number)."""
    return entropy_low_rank(tau, C_s, p, l, m) + entropy_frobenius(tau, eps, l, m)


def log_covering_bound(eps, C_s, p, l, m):
    """``([C_s(ℓ+m)]² (min(ℓ,m)·m)^p / ε^{2p})^{1/(p+2)}`` — each entropy term at ``τ*`` (log factor dropped)."""
    p = validate_p(p)
    l, m = _dim(l, "l"), _dim(m, "m")
    C_s, eps = _pos(C_s, "C_s"), _pos(eps, "eps")
    return ((C_s * (l + m)) ** 2 * (min(l, m) * m) ** p / eps ** (2 * p)) ** (1.0 / (p + 2.0))


def dudley_integral_exponent(p):
    """``p/(p+2)``: ``√(log 𝒩(ε)) ∝ ε^{−p/(p+2)}``, integrable on (0, 1] with integral ``(p+2)/2``."""
    p = validate_p(p)
    return p / (p + 2.0)


@dataclass(frozen=True)
class Falsification:
    """Outcome of a randomized check of an inequality ``lhs ≤ rhs``: ``ratios = lhs/rhs`` per trial."""

    name: str
    ratios: np.ndarray

    @property
    def trials(self) -> int:
        return int(self.ratios.size)

    @property
    def worst_ratio(self) -> float:
        return float(np.max(self.ratios))

    @property
    def violations(self) -> int:
        return int(np.count_nonzero(self.ratios > 1.0 + 1e-9))


def falsify_split(rng, trials=10_000):
    """Random matrices (shapes 1–12, log-uniform scales, thresholds, p ∈ [0, 2]): ratios of
    ``rank(W₁)/(S_p/τ^p)``, ``‖W₂‖_F/(τ√min)``, ``‖W₂‖_F/√(τ^{2−p}S_p)`` (Chapter 2).

    Half of the matrices have a planted power-law spectrum (so ranks and tails are non-trivial).
    Returns three :class:`Falsification` results.
    """
    out = {"rank": [], "tail_dim": [], "tail_schatten": []}
    per = 100
    for _ in range(int(np.ceil(trials / per))):
        l, m = (int(x) for x in rng.integers(1, 13, 2))
        k = min(l, m)
        A = rng.standard_normal((per, l, m)) * np.exp(rng.uniform(-3, 3, (per, 1, 1)))
        if rng.random() < 0.5:  # planted spectrum σ_j = s·j^{-a}
            U, _, Vt = np.linalg.svd(A, full_matrices=False)
            a = rng.uniform(0, 3, (per, 1))
            sig = np.exp(rng.uniform(-3, 3, (per, 1))) * np.arange(1, k + 1) ** (-a)
            A = (U * sig[:, None, :]) @ Vt
        s = np.linalg.svd(A, compute_uv=False)  # (per, k), descending
        p = rng.uniform(0, 2, per)
        p[rng.random(per) < 0.1] = 0.0
        tau = s[:, 0] * np.exp(rng.uniform(-4, 0.5, per))
        tail = np.where(s <= tau[:, None], s, 0.0)
        r1 = np.count_nonzero(s > tau[:, None], axis=1)
        with np.errstate(divide="ignore"):
            Sp = np.where(p[:, None] > 0, s ** p[:, None], 0.0).sum(axis=1)
        rank = np.count_nonzero(s > 1e-10 * k * np.maximum(s[:, 0:1], 1.0), axis=1)
        Sp = np.where(p > 0, Sp, rank)
        f2 = np.sqrt(np.sum(tail**2, axis=1))
        out["rank"].append(r1 / np.maximum(Sp / tau**p, 1e-300))
        out["tail_dim"].append(f2 / (tau * np.sqrt(k)))
        # at p = 0 the numerical zeros (σ ≤ 1e-10·…) are not in S_0: allow their σ² ≤ (1e-10 k σ₁)² k slack
        slack = (1e-10 * k * np.maximum(s[:, 0], 1.0)) ** 2 * k
        out["tail_schatten"].append(f2 / np.sqrt(tau ** (2 - p) * Sp + slack))
    return [Falsification(f"split: {k}", np.concatenate(v)[:trials]) for k, v in out.items()]
