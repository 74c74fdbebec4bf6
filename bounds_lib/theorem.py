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

:func:`corrected_bound` computes all of it from a model's spectra, with the released ``B_ours`` and
the steps that lead from one to the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .peeling import (geometric_ratio, grid_resolution, logsumexp, posthoc_grid, shell_top, shell_union_cost)
from .propagation import (LPHI_GELU_RELEASED, SOFTMAX_LINF_L1_TIGHT, log_alpha, log_gamma_multihead,
                          log_effective_scale, log_layer_lipschitz_multihead, matrices_per_layer)
from .validation import check_scalar

__all__ = ["TheoremReport", "log_theta", "dudley_factor", "corrected_bound", "rank_parameter_count"]

#: The smallest positive normal float: a zero spectral norm or Schatten sum is raised to it before its
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


@dataclass(frozen=True)
class TheoremReport:
    """Released proxy and the corrected theorem's quantities for one model (natural logs).

    ``steps``: ``[(description, log value)]`` from the released ``B_ours`` to ``Θ`` — each step changes
    one thing, so consecutive ratios explain the difference.
    """

    L: int
    N: int
    n: int
    T: int
    delta: float
    readout_norm: float
    log_B_released: float
    log_rss: float
    log_sum: float
    Lambda: float
    dudley: float
    log_Theta: float
    penalty_nats: float
    gap_main: float
    gap_deviation: float
    p_stars: np.ndarray
    steps: tuple

    @property
    def gap_bound(self) -> float:
        """``24Θ/√n + 3√((log(4/δ)+Π)/(2n))`` with ``L_𝓛 = B_𝓛 = 1``."""
        return self.gap_main + self.gap_deviation


def corrected_bound(spectra, n, T, delta=0.05, readout_norm=1.0, L_phi=LPHI_GELU_RELEASED, phi_bound=1.0):
    """Chapter 5's corrected theorem (Theorem ``ch05-thm-main``) on a model's spectra, next to the released ``B_ours``.

    Tight softmax constant ``c = 1`` and ``γ`` with ``L_φ`` (Chapter 3); per-matrix terms ``θ_j`` with the
    constants of Chapter 2's covering theorems; every radius rounded up to its geometric shell
    (Chapter 4, Lemma ``ch04-lem-shells``); the union-bound cost ``Π`` of the grid and the shells
    (Chapter 4, Theorem ``ch04-thm-uniform``).

    Parameters
    ----------
    spectra : bounds_lib.spectra.ModelSpectra
        The spectra of every matrix of the model (:func:`bounds_lib.spectra.compute_spectra`).
    n : int
        The sample size, ``>= 1``.
    T : int
        The sequence length, ``>= 1``.
    delta : float
        The confidence level, in ``(0, 1)``.
    readout_norm : float
        The readout radius ``B_w > 0`` (a sentence encoder has no readout; 1 is a unit readout).
    L_phi : float
        The activation's Lipschitz constant (GELU as released by default).
    phi_bound : float
        The linear-growth constant ``B_φ`` of the activation (1 for GELU).

    Returns
    -------
    TheoremReport
        ``log Θ``, the Dudley factor ``D``, the penalty ``Π``, the gap bound and the steps from the released
        ``B_ours`` to ``Θ`` (natural logs).

    Raises
    ------
    TypeError
        ``n`` or ``T`` is not an integer (``3.0`` and ``True`` included), or ``delta``/``readout_norm`` is
        not a real number.
    ValueError
        ``n`` or ``T`` below 1, ``delta`` outside ``(0, 1)``, ``readout_norm`` not positive and finite.

    Examples
    --------
    >>> from bounds_lib import compute_spectra
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> state, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2)
    >>> rep = corrected_bound(compute_spectra(state, config=config), n=100_000, T=128)
    >>> rep.L, rep.N, len(rep.steps), rep.gap_bound > rep.gap_main
    (2, 8, 6, True)
    """
    from .scoring import score

    n = check_scalar(n, "n (sample size)", int, min_val=1)
    T = check_scalar(T, "T (sequence length)", int, min_val=1)
    delta = check_scalar(delta, "delta (the confidence level)", float, min_val=0.0, max_val=1.0,
                         include_boundaries="neither")
    readout_norm = check_scalar(readout_norm, "readout_norm (B_w)", float, min_val=0.0, include_boundaries="neither")
    released = score(spectra)  # released constants: c = 2, γ without L_φ, K = γαL
    arch = spectra.arch
    L, N, H = arch.n_layers, arch.hidden, arch.n_heads
    rho = geometric_ratio(L)
    A = matrices_per_layer(H)
    J = L * A + 1
    B_w = float(shell_top(float(readout_norm), rho))
    mats = spectra.matrices

    C = {"QK": np.zeros((L, H)), "V": np.zeros((L, H)), "M_in": np.zeros(L), "M_out": np.zeros(L)}
    for m in mats:
        C[m.matrix_type][(m.layer, m.head) if m.head >= 0 else m.layer] = m.sigma1
    top = {k: shell_top(np.maximum(v, TINY), rho) for k, v in C.items()}
    log_Lam = log_layer_lipschitz_multihead(top["M_in"], top["M_out"], top["V"], top["QK"], L_phi=L_phi,
                                            softmax_const=SOFTMAX_LINF_L1_TIGHT)
    log_al = log_alpha(log_Lam)
    log_gam = log_gamma_multihead(top["M_in"], top["M_out"], top["V"], top["QK"], L_phi=L_phi,
                                  softmax_const=SOFTMAX_LINF_L1_TIGHT, phi_bound=phi_bound)
    log_K = {k: log_effective_scale(v, log_al[:, None] if np.ndim(v) == 2 else log_al, L, A, B_w)
             for k, v in log_gam.items()}

    grid = posthoc_grid(L, N)
    log_th, log_T_corr, p_star, radii = [], [], [], [B_w]
    Lambda = math.log(9.0 * n * T * N) + max(math.log(2.0 * B_w * J), 0.0)   # readout piece
    for m in mats:
        idx = (m.layer, m.head) if m.head >= 0 else m.layer
        lK = float(log_K[m.matrix_type][idx])
        rows, cols = m.shape
        sig = m.sigma[m.sigma > 0]
        S = np.array([float(np.sum(sig ** g)) if g > 0 else float(max(m.rank, 1)) for g in grid])
        s_top = shell_top(np.maximum(S, TINY), rho)
        lt = log_theta(np.log(s_top), grid, lK, rows, cols)
        i = int(np.argmin(lt))
        log_th.append(float(lt[i]))
        p_star.append(float(grid[i]))
        # released-form T with the corrected K (step 2 of the decomposition), square shapes as released
        log_T_corr.append(float(np.min((np.log(s_top) + grid * lK + (grid + 1) * math.log(N)) / (grid + 2))))
        c2 = float(shell_top(max(m.sigma1, TINY), rho))
        radii += [float(s_top[i]), c2]
        Lambda = max(Lambda, math.log(9.0 * n * T * cols)
                     + max(math.log(8.0 * c2 * math.sqrt(min(rows, cols) * cols)) + lK, 0.0))
    log_th = np.array(log_th)
    log_rss = 0.5 * float(np.logaddexp(logsumexp(2 * log_th), math.log(N)))
    log_sum = float(np.logaddexp(logsumexp(log_th), 0.5 * math.log(N)))
    D = dudley_factor(Lambda, B_w)
    log_Theta = log_rss + math.log(D)
    M = len(mats)
    Pi = M * math.log(2 * grid_resolution(L, N) + 1) + shell_union_cost(radii, rho)
    steps = (
        ("released B_ours = Σ T* + √L (c = 2, γ without L_φ, K = γαL)", released.log_B_ours_sum),
        ("same, K = 2J·B_w·γα with c = 1, γ with L_φ, shell tops", float(np.logaddexp(logsumexp(log_T_corr),
                                                                                       0.5 * math.log(L)))),
        ("per-matrix constants and shapes: Σ θ* + √L", float(np.logaddexp(logsumexp(log_th), 0.5 * math.log(L)))),
        ("readout entropy instead of √L: Σ θ* + √N", log_sum),
        ("root-sum-square: √(Σ θ*² + N)", log_rss),
        ("× Dudley factor D: Θ", log_Theta),
    )
    return TheoremReport(
        L=L, N=N, n=n, T=T, delta=float(delta), readout_norm=float(readout_norm),
        log_B_released=released.log_B_ours_sum, log_rss=log_rss, log_sum=log_sum, Lambda=Lambda, dudley=D,
        log_Theta=log_Theta, penalty_nats=Pi,
        gap_main=24.0 * math.exp(log_Theta) / math.sqrt(n) if log_Theta < LOG_OVERFLOW else math.inf,
        gap_deviation=3.0 * math.sqrt((math.log(4.0 / delta) + Pi) / (2.0 * n)),
        p_stars=np.array(p_star), steps=steps)


def rank_parameter_count(spectra, shells=True):
    """``Σ_j s_j (d_j + d_j')`` over every matrix: ``θ_j²`` at ``p_j = 0`` summed (Chapter 5, the finding).

    When every matrix chooses ``p* = 0``, ``Θ = √(rank_parameter_count + N) · D`` exactly: the theorem on
    real weights is a parameter count — a rank-``r`` matrix ``d × d'`` has ``r(d + d')`` parameters in a
    factored form — under the logarithm ``D``. ``shells=True`` rounds each numerical rank up to its shell
    top (as :func:`corrected_bound` does); ``False`` gives the plain ``Σ rank·(d + d')``.

    Examples
    --------
    >>> from bounds_lib import compute_spectra
    >>> from bounds_lib.checkpoints import random_bert_state_dict
    >>> state, config = random_bert_state_dict(n_layers=2, hidden=8, n_heads=2)
    >>> rank_parameter_count(compute_spectra(state, config=config), shells=False)   # 2·(4·(4·16) + 2·(8·24))
    1280.0
    """
    rho = geometric_ratio(spectra.arch.n_layers)
    total = 0.0
    for m in spectra.matrices:
        r = float(max(m.rank, 1))
        total += (float(shell_top(r, rho)) if shells else r) * float(sum(m.shape))
    return total
