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

from .falsification import Falsification, falsify
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
    "entropy_low_rank_volumetric",
    "entropy_tail_maurey",
    "log_covering_p0",
    "log_covering_split",
    "dudley_term_p0",
    "Falsification",
    "falsify_split",
    "adversarial_split",
]


def _pos(x, name):
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, bool) else None
    if a is None or np.any(np.isnan(a)) or np.any(~(a > 0)) or np.any(~np.isfinite(a)):
        what = {"tau": "the threshold τ", "eps": "the radius ε", "C_s": "the Schatten budget C_s"}.get(name, name)
        raise ValueError(f"{name} ({what}) must be positive and finite, got {x!r}")
    return a if a.ndim else float(a)


def _schatten_value(x, name="S_p"):
    """``S_p(W) = Σ σ^p`` as float64: non-negative and finite (a scalar or an array), else ``ValueError``."""
    if isinstance(x, bool):
        raise ValueError(f"{name} (a Schatten quantity Σσ^p) must be a non-negative number, got {x!r}")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} (a Schatten quantity Σσ^p) must be a non-negative number, got {x!r}") from None
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} (a Schatten quantity Σσ^p) must be non-negative and finite, got {x!r}")
    return a


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
    return _schatten_value(S_p) / _pos(tau, "tau") ** p


def tail_bound_dimension(tau, shape):
    """``τ · √min(ℓ, m)`` ≥ ``‖W₂‖_F`` (every tail singular value is ≤ τ)."""
    l, m = (_dim(d, "matrix dimension") for d in shape)
    return _pos(tau, "tau") * np.sqrt(min(l, m))


def tail_bound_schatten(tau, S_p, p):
    """``(τ^{2−p} S_p)^{1/2}`` ≥ ``‖W₂‖_F`` for ``p ∈ [0, 2]`` (σ² = σ^p σ^{2−p} ≤ σ^p τ^{2−p} on the tail)."""
    p = validate_p(p)
    return np.sqrt(_pos(tau, "tau") ** (2.0 - p) * _schatten_value(S_p))


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


def entropy_low_rank_volumetric(rank, l, m, C_2, eps):
    """``r(ℓ+m)·log(1 + 4C₂/ε)`` ≥ log-covering number of ``{W ∈ ℝ^{ℓ×m}: rank W ≤ r, ‖W‖₂ ≤ C₂}`` in the
    spectral norm, hence in the data metric ``max_x ‖x(W−W')‖₂`` over rows ``‖x‖₂ ≤ 1``
    (Chapter 2, ``ch02-lem-lowrank-cover``; volumetric, every logarithm kept). ``rank = 0`` gives 0."""
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0, got {rank!r}")
    l, m = _dim(l, "l"), _dim(m, "m")
    C_2, eps = _pos(C_2, "C_2"), _pos(eps, "eps")
    return int(rank) * (l + m) * np.log1p(4.0 * C_2 / eps)


def entropy_tail_maurey(rho, eps, m, n_rows):
    """``36 ρ² m/ε² · log(2⌈4ρ√m/ε + 2⌉ · n_rows · m + 1)`` ≥ log-covering number of the Frobenius ball
    ``{‖W‖_F ≤ ρ}`` (``m`` columns) in ``max_x ‖x(W−W')‖₂`` over ``n_rows`` rows with ``‖x‖₂ ≤ 1``.

    Zhang (2002, Thm 4) applied to the scalar class ``(x, k) ↦ ⟨W, xᵀe_kᵀ⟩_F`` on the ``n_rows·m``
    lifted points at radius ``ε/√m`` (Chapter 2, ``ch02-lem-tail-cover``). ``ρ = 0`` gives 0."""
    rho = np.asarray(rho, dtype=np.float64)
    if np.any(np.isnan(rho)) or np.any(rho < 0) or np.any(~np.isfinite(rho)):
        raise ValueError(f"rho (the Frobenius radius) must be finite and >= 0, got {rho!r}")
    eps = _pos(eps, "eps")
    m, n_rows = _dim(m, "m"), _dim(n_rows, "n_rows")
    out = 36.0 * rho**2 * m / eps**2 * np.log(2.0 * np.ceil(4.0 * rho * np.sqrt(m) / eps + 2.0) * n_rows * m + 1.0)
    return out if np.ndim(out) else float(out)


def log_covering_p0(rank, l, m, C_2, eps):
    """``p = 0``: ``log 𝒩(ℱ₀, ε) ≤ r(ℓ+m)·log(1 + 4C₂/ε)`` — not free of ε (Chapter 2, ``ch02-thm-covering``)."""
    return entropy_low_rank_volumetric(rank, l, m, C_2, eps)


def log_covering_split(tau, eps, C_s, p, l, m, C_2, n_rows):
    """Right side of the covering theorem (Chapter 2, ``ch02-thm-covering``) at threshold ``τ``:

    ``⌊C_s/τ^p⌋(ℓ+m)·log(1 + 8C₂/ε) + 144 τ² min(ℓ,m) m/ε² · log(2⌈8τ√(min(ℓ,m)m)/ε + 2⌉ n_rows m + 1)``,

    each part covered at radius ``ε/2`` (low-rank part: rank ``≤ C_s/τ^p``, ``‖W₁‖₂ ≤ C₂``; tail:
    Frobenius radius ``τ√min(ℓ,m)``). Valid for every ``τ > 0`` and ``p ∈ [0, 2]``."""
    p = validate_p(p)
    l, m = _dim(l, "l"), _dim(m, "m")
    tau, C_s = _pos(tau, "tau"), _pos(C_s, "C_s")
    r = int(np.floor(C_s / tau**p * (1 + 1e-12)))
    rank_part = entropy_low_rank_volumetric(min(r, min(l, m)), l, m, C_2, _pos(eps, "eps") / 2.0)
    return rank_part + entropy_tail_maurey(tau * np.sqrt(min(l, m)), eps / 2.0, m, n_rows)


def dudley_term_p0(rank, N, C_2, log_K):
    """``√(2rN)·(√log(1 + 4C₂K) + √π/2)`` ≥ ``∫₀¹ √(2rN·log(1 + 4C₂K/ε)) dε`` — the ``p = 0`` per-matrix
    Dudley term of an ``N×N`` matrix of rank ``r`` covered at radius ``ε/K`` (``log_K`` in log space).

    Uses ``log(1+a/ε) ≤ log(1+a) + log(1/ε)``, ``√(u+v) ≤ √u + √v`` and ``∫₀¹√log(1/ε)dε = √π/2``
    (Chapter 2, ``ch02-eq-T0``): the term grows like ``√(rN·log K)``, i.e. like ``√(rN·L)`` when
    ``log K ≍ L``."""
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0, got {rank!r}")
    N, C_2 = _dim(N, "N"), _pos(C_2, "C_2")
    lk = np.asarray(log_K, dtype=np.float64)
    if np.any(~np.isfinite(lk)):
        raise ValueError("log_K must be finite")
    # log(1 + 4 C₂ K) computed stably for large K: logaddexp(0, log 4C₂ + log K)
    inner = np.logaddexp(0.0, np.log(4.0 * C_2) + lk)
    out = np.sqrt(2.0 * int(rank) * N) * (np.sqrt(inner) + np.sqrt(np.pi) / 2.0)
    return out if np.ndim(out) else float(out)


def _split_ratios(s, tau, p, k, weaken):
    """The three ratios of the split lemmas for descending spectra ``s`` (rows), threshold ``tau``, index ``p``."""
    tail = np.where(s <= tau[:, None], s, 0.0)
    r1 = np.count_nonzero(s > tau[:, None], axis=1)
    with np.errstate(divide="ignore"):
        Sp = np.where(p[:, None] > 0, s ** p[:, None], 0.0).sum(axis=1)
    rank = np.count_nonzero(s > 1e-10 * k * np.maximum(s[:, 0:1], 1.0), axis=1)
    Sp = np.where(p > 0, Sp, rank)
    f2 = np.sqrt(np.sum(tail**2, axis=1))
    # at p = 0 the numerical zeros (σ ≤ 1e-10·…) are not in S_0: allow their σ² ≤ (1e-10 k σ₁)² k slack
    slack = (1e-10 * k * np.maximum(s[:, 0], 1.0)) ** 2 * k
    return {"rank": weaken * r1 / np.maximum(Sp / tau**p, 1e-300),
            "tail_dim": weaken * f2 / tail_bound_dimension(tau, (k, k)),
            "tail_schatten": weaken * f2 / np.sqrt(tau ** (2 - p) * Sp + slack)}


def falsify_split(rng, trials=10_000, nondegenerate=False, weaken=1.0):
    """Random matrices (shapes 1–12, log-uniform scales, thresholds, p ∈ [0, 2]): ratios of
    ``rank(W₁)/(S_p/τ^p)``, ``‖W₂‖_F/(τ√min)``, ``‖W₂‖_F/√(τ^{2−p}S_p)`` (Chapter 2).

    Half of the matrices have a planted power-law spectrum (so ranks and tails are non-trivial).
    ``nondegenerate=True`` draws only thresholds ``τ < σ₁`` (so ``W₁ ≠ 0``; with ``τ ≥ σ₁`` the tail
    bounds are attained trivially). ``weaken > 1`` divides every bound by ``weaken`` (power check).
    Returns three :class:`~bounds_lib.falsification.Falsification` results.
    """
    out = {"rank": [], "tail_dim": [], "tail_schatten": []}
    per = 100
    hi = -1e-9 if nondegenerate else 0.5
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
        tau = s[:, 0] * np.exp(rng.uniform(-4, hi, per))
        for key, v in _split_ratios(s, tau, p, k, weaken).items():
            out[key].append(v)
    tag = (" (τ < σ₁)" if nondegenerate else "") + (f" ÷{weaken:g}" if weaken != 1.0 else "")
    return [Falsification(f"split: {k}{tag}", np.concatenate(v)[:trials]) for k, v in out.items()]


def adversarial_split(rng, trials=200, restarts=3, k=12, weaken=1.0, maxiter=40):
    """Random draws, then Powell maximisation from the best ones, of the three split ratios over
    spectra ``σ ∈ ℝ^k``, thresholds ``τ ∈ (0, σ₁)`` (non-degenerate) and ``p ∈ [0, 2]``; ``weaken``
    as in :func:`falsify_split`. The search vector is ``(log σ_1..k, logit(τ/σ₁), logit(p/2))``.
    Returns three :class:`~bounds_lib.falsification.Falsification` results (random and optimiser ratios)."""
    out = []
    for key in ("rank", "tail_dim", "tail_schatten"):
        def ratio(x, key=key):
            s = np.sort(np.exp(np.clip(x[:-2], -30, 30)))[::-1][None, :]
            tau = s[:, 0] * (1 - 1e-9) / (1 + np.exp(-x[-2]))
            p = np.array([2.0 / (1 + np.exp(-x[-1]))])
            return float(_split_ratios(s, tau, p, s.shape[1], weaken)[key][0])

        name = f"split: {key} (τ < σ₁, optimiser)" + (f" ÷{weaken:g}" if weaken != 1.0 else "")
        out.append(falsify(name, ratio, lambda r: r.normal(0, 1.5, k + 2), rng, trials=trials,
                           restarts=restarts, maxiter=maxiter, method="Powell"))
    return out
