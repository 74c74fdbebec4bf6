"""Kendall's ``τ_b`` with integer row weights, for every bootstrap resample at once (Chapters 7–9).

A resample is a vector of integer weights on the rows (:func:`bounds_lib.studies.stats.bootstrap_weights`);
with ``W = Σ w_i``, ``τ_b = (n_c − n_d) / √((n₀ − n_x)(n₀ − n_y))`` where ``n₀ = W(W−1)/2``,
``n_c − n_d = Σ_{i<j} w_i w_j sgn(x_i−x_j) sgn(y_i−y_j)`` and ``n_x = (wᵀ E_x w − W)/2`` (``E_x[i,j] = 1``
when ``x_i = x_j``, the diagonal included). The weights are integers, so every one of these sums is an
exact integer in floating point whatever the order of summation: the two ways of computing them below
(a matrix product for one large group, a list of pairs for many small ones) give the same ``τ_b``,
bit for bit (``tests/test_stats.py`` checks it).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["weighted_kendall", "grouped_kendall"]

#: Groups larger than this are summed by a matrix product (the pair list would grow as size²).
PAIRS_UP_TO = 40


@lru_cache(maxsize=None)
def _upper_pairs(k: int) -> tuple:
    """The pairs ``i < j`` of ``k`` rows (read-only index arrays, made once per size)."""
    pairs = np.triu_indices(k, 1)
    for a in pairs:
        a.flags.writeable = False
    return pairs


def _tau(tot, cd2, ex, ey, constant_x):
    """``τ_b`` from the weight total, ``2(n_c − n_d)`` and the quadratic forms ``wᵀE_x w``, ``wᵀE_y w``."""
    n0 = 0.5 * (tot * tot - tot)
    cd = 0.5 * cd2
    nx = 0.5 * (ex - tot)
    ny = 0.5 * (ey - tot)
    dx, dy = n0 - nx, n0 - ny
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = cd / np.sqrt(dx * dy)
    tau = np.where(dx <= 0, constant_x, tau)
    return np.where(dy <= 0, np.nan, tau)


def weighted_kendall(x, y, W, constant_x: float = np.nan) -> np.ndarray:
    """Kendall's ``τ_b`` of ``(x, y)`` for every row of weights ``W`` (shape ``(B, n)``, or ``(n,)``).

    Undefined (NaN) where ``y`` is constant on the drawn rows; ``constant_x`` where only ``x`` is
    (NaN by default; 0 in the granulated convention).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    S = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
    form = lambda M: ((W @ M) * W).sum(axis=1)  # noqa: E731  (wᵀMw for every resample)
    ex, ey = form((x[:, None] == x[None, :]).astype(float)), form((y[:, None] == y[None, :]).astype(float))
    return _tau(W.sum(axis=1), form(S), ex, ey, constant_x)


def grouped_kendall(x, y, W, groups, constant_x: float = np.nan) -> np.ndarray:
    """:func:`weighted_kendall` inside every group of row indices ``groups``: shape ``(len(groups), B)``.

    Small groups are summed all at once over the list of their pairs; a group of more than
    ``PAIRS_UP_TO`` rows by :func:`weighted_kendall` itself.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    out = np.empty((len(groups), W.shape[0]))
    small = [k for k, g in enumerate(groups) if len(g) <= PAIRS_UP_TO]
    for k in sorted(set(range(len(groups))) - set(small)):
        g = np.asarray(groups[k], dtype=int)
        out[k] = weighted_kendall(x[g], y[g], W[:, g], constant_x)
    if small:
        idx = [np.asarray(groups[k], dtype=int) for k in small]
        tri = [_upper_pairs(len(g)) for g in idx]
        i = np.concatenate([g[t[0]] for g, t in zip(idx, tri)]).astype(int)
        j = np.concatenate([g[t[1]] for g, t in zip(idx, tri)]).astype(int)
        rows, lab = np.concatenate(idx), np.repeat(np.arange(len(idx)), [len(g) for g in idx])
        of_pair = np.repeat(np.arange(len(idx)), [len(t[0]) for t in tri])
        per_row = (lab[:, None] == np.arange(len(idx))).astype(float)  # row → its group
        per_pair = (of_pair[:, None] == np.arange(len(idx))).astype(float)  # pair → its group
        ww = W[:, i] * W[:, j]
        s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
        sq = (W[:, rows] * W[:, rows]) @ per_row
        cd2 = 2.0 * ((ww * s) @ per_pair)
        ex = sq + 2.0 * ((ww * (x[i] == x[j])) @ per_pair)
        ey = sq + 2.0 * ((ww * (y[i] == y[j])) @ per_pair)
        out[small] = _tau(W[:, rows] @ per_row, cd2, ex, ey, constant_x).T
    return out
