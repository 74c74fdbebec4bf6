"""Chapter 5's corrected theorem on a model's spectra, next to the released proxy.

:func:`corrected_bound` evaluates ``Θ``, the union-bound cost ``Π`` and the gap bound of the theorem
(:mod:`bounds_lib.theory.theorem` holds the per-matrix term and Dudley's factor) on the spectra of a
checkpoint, with the steps that lead from the released ``B_ours`` to ``Θ``;
:func:`rank_parameter_count` is ``Σ θ_j²`` when every matrix chooses ``p* = 0``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.validation import check_scalar
from ..theory.peeling import (geometric_ratio, grid_resolution, logsumexp, posthoc_grid, shell_top, shell_union_cost)
from ..theory.propagation import (LPHI_GELU_RELEASED, SOFTMAX_LINF_L1_TIGHT, log_alpha, log_gamma_multihead,
                                  log_effective_scale, log_layer_lipschitz_multihead, matrices_per_layer)
from ..theory.theorem import LOG_OVERFLOW, TINY, dudley_factor, log_theta
from .scoring import score

__all__ = ["TheoremReport", "corrected_bound", "rank_parameter_count"]


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


def _corrected_log_scales(mats, L, H, A, B_w, rho, L_phi, phi_bound) -> dict:
    """``log K_j = log(2J·B_w·γ_j·α_j)`` of every matrix type (Chapter 3 with ``c = 1`` and ``L_φ``), computed
    from the shell tops of the spectral norms (Chapter 4, ``ch04-lem-shells``): ``{type: (L,) or (L, H)}``."""
    C = {"QK": np.zeros((L, H)), "V": np.zeros((L, H)), "M_in": np.zeros(L), "M_out": np.zeros(L)}
    for m in mats:
        C[m.matrix_type][(m.layer, m.head) if m.head >= 0 else m.layer] = m.sigma1
    top = {k: shell_top(np.maximum(v, TINY), rho) for k, v in C.items()}
    log_Lam = log_layer_lipschitz_multihead(top["M_in"], top["M_out"], top["V"], top["QK"], L_phi=L_phi,
                                            softmax_const=SOFTMAX_LINF_L1_TIGHT)
    log_al = log_alpha(log_Lam)
    log_gam = log_gamma_multihead(top["M_in"], top["M_out"], top["V"], top["QK"], L_phi=L_phi,
                                  softmax_const=SOFTMAX_LINF_L1_TIGHT, phi_bound=phi_bound)
    return {k: log_effective_scale(v, log_al[:, None] if np.ndim(v) == 2 else log_al, L, A, B_w)
            for k, v in log_gam.items()}


def corrected_bound(spectra, n, T, delta=0.05, readout_norm=1.0, L_phi=LPHI_GELU_RELEASED, phi_bound=1.0):
    """Chapter 5's corrected theorem (Theorem ``ch05-thm-main``) on a model's spectra, next to the released ``B_ours``.

    Tight softmax constant ``c = 1`` and ``γ`` with ``L_φ`` (Chapter 3); per-matrix terms ``θ_j`` with the
    constants of Chapter 2's covering theorems; every radius rounded up to its geometric shell
    (Chapter 4, Lemma ``ch04-lem-shells``); the union-bound cost ``Π`` of the grid and the shells
    (Chapter 4, Theorem ``ch04-thm-uniform``).

    Parameters
    ----------
    spectra : bounds_lib.analysis.spectra.ModelSpectra
        The spectra of every matrix of the model (:func:`bounds_lib.analysis.spectra.compute_spectra`).
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
    log_K = _corrected_log_scales(mats, L, H, A, B_w, rho, L_phi, phi_bound)

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
