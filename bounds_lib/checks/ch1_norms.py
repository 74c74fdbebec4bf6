"""Checks of Chapter 1: the inequalities between the norms of a matrix.

:func:`falsify_norm_inequalities` checks every inequality of
:data:`bounds_lib.theory.norms.NORM_INEQUALITIES` by random matrices and an optimiser (the harness of
:mod:`bounds_lib.checks.harness`); :func:`norm_inequality_ratios` is the ratio of each at one matrix
(also the deterministic check's, :func:`bounds_lib.checks.witnesses.norm_witnesses`).
"""
from __future__ import annotations

import numpy as np

from ..theory.norms import NORM_INEQUALITIES, as_matrix, numerical_rank, singular_values
from .harness import Falsification, adversarial_search

__all__ = ["norm_inequality_ratios", "falsify_norm_inequalities"]


def norm_inequality_ratios(W, weaken=1.0, names=None) -> dict:
    """``weaken · lhs/rhs`` of every inequality in :data:`~bounds_lib.theory.norms.NORM_INEQUALITIES` at the matrix
    ``W`` (0 when both sides vanish); ``names`` restricts it to those inequalities (the optimiser of
    :func:`falsify_norm_inequalities` follows one, and computes only its two sides)."""
    A = as_matrix(W)
    s = singular_values(A)
    r = numerical_rank(s)
    names = NORM_INEQUALITIES if names is None else names
    if r == 0:
        return {name: 0.0 for name in names}
    k = s[:r]
    out = {}
    for name in names:
        lhs, rhs = NORM_INEQUALITIES[name]
        b = float(rhs(A, s, k, r))
        out[name] = weaken * float(lhs(A, s, k, r)) / b if b > 0 else 0.0
    return out


def falsify_norm_inequalities(rng, trials=4000, restarts=2, weaken=1.0, shape=(4, 5), maxiter=4000):
    """Check every inequality of :data:`~bounds_lib.theory.norms.NORM_INEQUALITIES` (Chapter 1).

    First by random matrices of random shape (1–39 per side), rank and scale (``10^±3``), then by
    Nelder–Mead (``maxiter`` iterations) over the entries of a ``shape`` matrix from random starts.
    ``weaken > 1`` divides every right side by ``weaken`` (power check; the deterministic one is
    :func:`bounds_lib.checks.witnesses.norm_witnesses`). Returns one
    :class:`~bounds_lib.checks.harness.Falsification` per inequality."""
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
        adv, _ = (adversarial_search(lambda x, n=n: norm_inequality_ratios(x.reshape(shape), weaken, (n,))[n], starts,
                                     maxiter=maxiter) if restarts else (np.zeros(0), None))
        out.append(Falsification(n + (f" ÷{weaken:g}" if weaken != 1.0 else ""), np.array(rand[n]), adv))
    return out
