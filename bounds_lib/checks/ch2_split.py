"""Checks of Chapter 2: the split lemmas ``ch02-lem-rank`` and ``ch02-lem-tail``.

The split of ``W`` at a threshold ``τ`` (:mod:`bounds_lib.theory.interpolation`) is checked three ways
with the harness of :mod:`bounds_lib.checks.harness`: random matrices (:func:`falsify_split`), an
optimiser over spectra (:func:`adversarial_split`), and both against weakened bounds
(:func:`check_split`, the chapter's one-line check).
"""
from __future__ import annotations

import numpy as np

from ..theory.interpolation import rank_bound, tail_bound_dimension, tail_bound_schatten
from ..theory.norms import RANK_RTOL
from .harness import TINY_DENOMINATOR, CheckResult, Falsification, falsify

__all__ = ["TAU_GAP", "falsify_split", "adversarial_split", "check_split"]

#: Non-degenerate thresholds lie below ``σ₁`` by at least this relative gap (``τ ≤ (1 − 1e-9)σ₁``).
TAU_GAP = 1e-9


#: The three ratios of the split lemmas, in the order the checks report them.
SPLIT_KEYS = ("rank", "tail_dim", "tail_schatten")


def _split_ratios(s, tau, p, k, weaken, keys=SPLIT_KEYS):
    """The three ratios of the split lemmas for descending spectra ``s`` (rows), threshold ``tau``, index ``p``.

    ``keys``: the ratios wanted (the optimiser maximises one at a time); each is computed as when all three
    are, to the last bit."""
    out = {}
    if "rank" in keys or "tail_schatten" in keys:
        Sp = np.where(p[:, None] > 0, s ** p[:, None], 0.0).sum(axis=1)  # s ≥ 0, p ≥ 0: nothing divides
        rank = np.count_nonzero(s > RANK_RTOL * k * np.maximum(s[:, 0:1], 1.0), axis=1)
        Sp = np.where(p > 0, Sp, rank)
    if "rank" in keys:
        r1 = np.count_nonzero(s > tau[:, None], axis=1)
        # the library's bounds, one row at a time (each takes one index p)
        rank_b = np.array([rank_bound(S, t, q) for S, t, q in zip(Sp, tau, p)])
        out["rank"] = weaken * r1 / np.maximum(rank_b, TINY_DENOMINATOR)
    if "tail_dim" in keys or "tail_schatten" in keys:
        tail = np.where(s <= tau[:, None], s, 0.0)
        f2 = np.sqrt(np.sum(tail**2, axis=1))
    if "tail_dim" in keys:
        out["tail_dim"] = weaken * f2 / tail_bound_dimension(tau, (k, k))
    if "tail_schatten" in keys:
        # at p = 0 the numerical zeros (σ ≤ RANK_RTOL·k·σ₁) are not in S_0: allow their σ² ≤ (RANK_RTOL k σ₁)² k slack
        slack = (RANK_RTOL * k * np.maximum(s[:, 0], 1.0)) ** 2 * k
        tail_b = np.array([tail_bound_schatten(t, S, q) for S, t, q in zip(Sp, tau, p)])
        out["tail_schatten"] = weaken * f2 / np.sqrt(tail_b**2 + slack)
    return out


def falsify_split(rng, trials=10_000, nondegenerate=False, weaken=1.0):
    """Random matrices (shapes 1–12, log-uniform scales, thresholds, p ∈ [0, 2]): ratios of
    ``rank(W₁)/(S_p/τ^p)``, ``‖W₂‖_F/(τ√min)``, ``‖W₂‖_F/√(τ^{2−p}S_p)`` (Chapter 2).

    Half of the matrices have a planted power-law spectrum (so ranks and tails are non-trivial).
    ``nondegenerate=True`` draws only thresholds ``τ < σ₁`` (so ``W₁ ≠ 0``; with ``τ ≥ σ₁`` the tail
    bounds are attained trivially). ``weaken > 1`` divides every bound by ``weaken`` (power check).
    Returns three :class:`~bounds_lib.checks.harness.Falsification` results.
    """
    out = {key: [] for key in SPLIT_KEYS}
    per = 100
    hi = -TAU_GAP if nondegenerate else 0.5
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
    Returns three :class:`~bounds_lib.checks.harness.Falsification` results (random and optimiser ratios)."""
    out = []
    for key in SPLIT_KEYS:
        def ratio(x, key=key):
            s = np.sort(np.exp(np.clip(x[:-2], -30, 30)))[::-1][None, :]
            tau = s[:, 0] * (1 - TAU_GAP) / (1 + np.exp(-x[-2]))
            p = np.array([2.0 / (1 + np.exp(-x[-1]))])
            return float(_split_ratios(s, tau, p, s.shape[1], weaken, (key,))[key][0])

        name = f"split: {key} (τ < σ₁, optimiser)" + (f" ÷{weaken:g}" if weaken != 1.0 else "")
        out.append(falsify(name, ratio, lambda r: r.normal(0, 1.5, k + 2), rng, trials=trials,
                           restarts=restarts, maxiter=maxiter, method="Powell"))
    return out


def check_split(rng, trials=10_000, weaken=1.1, search_trials=200, restarts=3):
    """Lemmas ``ch02-lem-rank`` and ``ch02-lem-tail`` (the split at ``τ``), checked three ways, with power.

    In this order on ``rng``: :func:`falsify_split` (all thresholds), :func:`falsify_split` with
    ``τ < σ₁`` only, :func:`adversarial_split` (``search_trials`` draws, ``restarts`` starts); then,
    against the bounds divided by ``weaken``, :func:`falsify_split` with ``τ < σ₁`` and
    :func:`adversarial_split`. Claims: no violation of the
    three bounds in any of the first three runs; with ``τ < σ₁`` the two tail bounds are not attained
    at random; as power, random draws break the rank bound ÷ ``weaken`` and the optimiser breaks all
    three. ``values``: ``random``, ``nondegenerate``, ``optimiser`` and ``weakened`` (the last one
    random then optimiser), lists of :class:`~bounds_lib.checks.harness.Falsification` in the order rank,
    tail (dimension), tail (Schatten).
    """
    search = dict(trials=search_trials, restarts=restarts)
    runs = dict(random=falsify_split(rng, trials=trials),
                nondegenerate=falsify_split(rng, trials=trials, nondegenerate=True),
                optimiser=adversarial_split(rng, **search))
    runs["weakened"] = (falsify_split(rng, trials=trials, nondegenerate=True, weaken=weaken)
                        + adversarial_split(rng, weaken=weaken, **search))
    random, nd, weak = runs["random"], runs["nondegenerate"], runs["weakened"]
    claims = (
        (f"no violation in {trials} random draws", all(f.trials >= trials and f.violations == 0 for f in random)),
        ("none with tau < sigma_1", all(f.trials >= trials and f.violations == 0 for f in nd)),
        ("none found by the optimiser", all(f.violations == 0 for f in runs["optimiser"])),
        ("with tau < sigma_1 the tail bounds are not attained at random", all(f.worst_ratio < 1 for f in nd[1:])),
        (f"power: random draws break the rank bound / {weaken:g}", weak[0].violations > 0),
        (f"power: the optimiser breaks all three bounds / {weaken:g}", all(f.violations > 0 for f in weak[3:])),
    )
    detail = "worst ratios (rank, tail dim., tail Schatten): " + "; ".join(
        f"{k} " + ", ".join(f"{f.worst_ratio:.4f}" for f in runs[k][-3:]) for k in runs)
    return CheckResult("the split lemmas", claims, detail, runs)
