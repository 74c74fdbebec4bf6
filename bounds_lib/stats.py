"""Uncertainty for the rankings of Chapters 7 and 8: bootstrap intervals for Kendall's τ and ψ.

A ranking measured on one grid of trained models is one draw: another set of seeds or another
choice of configurations would give another τ. Following the hierarchical (two-stage) bootstrap, a
resample draws the grid's *configurations* with replacement and, inside every drawn configuration,
its *seeds* (models) with replacement; on a one-seed grid this is the ordinary bootstrap over models.
A resample is a vector of integer weights on the rows (how often each model was drawn), so Kendall's
``τ_b`` is computed with weights, in closed form and for all resamples at once:

``τ_b = (n_c − n_d) / √((n₀ − n_x)(n₀ − n_y))`` with, for weights ``w`` (``W = Σ w_i``),
``n₀ = W(W−1)/2`` pairs, ``n_c − n_d = Σ_{i<j} w_i w_j sgn(x_i−x_j) sgn(y_i−y_j)`` and
``n_x = (wᵀ E_x w − W)/2`` pairs tied in ``x`` (``E_x[i,j] = 1`` when ``x_i = x_j``, the diagonal
included: two draws of one model are a pair tied in both variables). With all weights 1 this is
SciPy's ``τ_b`` (a test checks it). The granulated ``ψ_h`` of :func:`bounds_lib.experiments.granulated_kendall`
is rebuilt per resample from the same groups, with the same conventions (a group whose drawn models
have a constant gap is skipped, one where the measure is constant scores 0).

Intervals are percentile intervals (level 95 % by default) over ``n_boot`` resamples with a fixed
seed, so a chapter prints the same interval on every build. :func:`check_sign` is the guard a chapter
uses before stating a sign in prose: the whole interval must lie on the claimed side of 0.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap_weights", "weighted_kendall", "kendall_interval", "granulated_intervals",
           "group_taus", "wrong_sign_share", "intraclass_correlation", "icc_interval", "check_sign",
           "format_interval"]

N_BOOT = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval ``[lo, hi]``."""

    value: float
    lo: float
    hi: float
    n_boot: int
    n_undefined: int = 0  # resamples where the statistic was undefined (left out of the percentiles)

    @property
    def sign(self) -> str:
        """``"+"`` if the whole interval is above 0, ``"-"`` if below, ``"0"`` if it contains 0."""
        return "+" if self.lo > 0 else "-" if self.hi < 0 else "0"

    def __str__(self) -> str:
        return format_interval(self)


def format_interval(iv: Interval, digits: int = 2) -> str:
    """``+0.12 [−0.05, +0.30]`` (``n/a`` for an undefined estimate)."""
    if not np.isfinite(iv.value):
        return "n/a"
    f = f"{{:+.{digits}f}}"
    return f"{f.format(iv.value)} [{f.format(iv.lo)}, {f.format(iv.hi)}]"


def check_sign(iv: Interval, claimed: str, what: str = "the statistic") -> None:
    """Assert that the prose's claim about the sign of ``iv`` holds for its whole interval.

    ``claimed``: ``"+"`` (the interval lies above 0), ``"-"`` (below 0) or ``"0"`` (the interval
    contains 0: "cannot be told from 0"). Raises ``AssertionError`` naming ``what`` otherwise.
    """
    if claimed not in ("+", "-", "0"):
        raise ValueError(f"claimed sign must be '+', '-' or '0', got {claimed!r}")
    if iv.sign != claimed:
        raise AssertionError(f"{what}: the prose claims sign {claimed!r} but the interval is "
                             f"{format_interval(iv, 3)} (sign {iv.sign!r})")


def bootstrap_weights(clusters, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """Row weights ``(n_boot, n_rows)`` of a two-stage bootstrap: clusters, then rows inside each.

    ``clusters[i]`` is any hashable label of row ``i``'s configuration. Each resample draws as many
    clusters as there are, with replacement; a cluster drawn ``c`` times contributes
    ``Multinomial(c·m, 1/m)`` draws over its ``m`` rows (``c`` independent resamples of its seeds).
    """
    labels = list(clusters)
    keys = {k: j for j, k in enumerate(dict.fromkeys(labels))}
    idx = np.array([keys[k] for k in labels])
    C = len(keys)
    members = [np.flatnonzero(idx == j) for j in range(C)]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(C, np.full(C, 1.0 / C), size=n_boot)
    W = np.zeros((n_boot, len(labels)))
    for j, m in enumerate(members):
        if m.size == 1:
            W[:, m[0]] = counts[:, j]
        else:
            for b in np.flatnonzero(counts[:, j]):
                W[b, m] = rng.multinomial(counts[b, j] * m.size, np.full(m.size, 1.0 / m.size))
    return W


def weighted_kendall(x, y, W, constant_x: float = np.nan) -> np.ndarray:
    """Kendall's ``τ_b`` of ``(x, y)`` for every row of weights ``W`` (shape ``(B, n)``, or ``(n,)``).

    Undefined (NaN) where ``y`` is constant on the drawn rows; ``constant_x`` where only ``x`` is
    (NaN by default; 0 in the granulated convention).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    S = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
    Ex = (x[:, None] == x[None, :]).astype(float)
    Ey = (y[:, None] == y[None, :]).astype(float)
    tot = W.sum(axis=1)
    n0 = 0.5 * (tot * tot - tot)
    cd = 0.5 * np.einsum("bi,ij,bj->b", W, S, W)
    nx = 0.5 * (np.einsum("bi,ij,bj->b", W, Ex, W) - tot)
    ny = 0.5 * (np.einsum("bi,ij,bj->b", W, Ey, W) - tot)
    dx, dy = n0 - nx, n0 - ny
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = cd / np.sqrt(dx * dy)
    tau = np.where(dx <= 0, constant_x, tau)
    return np.where(dy <= 0, np.nan, tau)


def _interval(value, draws, level):
    d = np.asarray(draws, dtype=float)
    ok = d[np.isfinite(d)]
    if ok.size == 0 or not np.isfinite(value):
        return Interval(float(value), np.nan, np.nan, int(d.size), int(d.size - ok.size))
    a = (1 - level) / 2
    lo, hi = np.quantile(ok, [a, 1 - a])
    return Interval(float(value), float(lo), float(hi), int(d.size), int(d.size - ok.size))


def kendall_interval(x, y, W, level: float = LEVEL) -> Interval:
    """``τ_b(x, y)`` on all rows and its bootstrap interval over the weights ``W`` (:func:`bootstrap_weights`)."""
    point = float(weighted_kendall(x, y, np.ones(len(x)))[0])
    return _interval(point, weighted_kendall(x, y, W), level)


def _groups(rows, h, hypers, fixed):
    others = [k for k in hypers if k != h]
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(tuple(r["config"][k] for k in (*others, *fixed)), []).append(i)
    return [np.array(v) for v in groups.values() if len(v) >= 2]


def group_taus(rows, m, h, hypers, fixed=(), target: str = "gap_error") -> np.ndarray:
    """``τ`` inside every group that varies only ``h`` (the terms of ``ψ_h``; NaN where the gap is constant)."""
    m = np.asarray(m, dtype=float)
    g = np.array([r[target] for r in rows])
    return np.array([weighted_kendall(m[idx], g[idx], np.ones(idx.size), constant_x=0.0)[0]
                     for idx in _groups(rows, h, hypers, fixed)])


def wrong_sign_share(rows, m, h, hypers, fixed=(), target: str = "gap_error") -> tuple:
    """``(share of groups with τ < 0, number of groups with a defined τ)`` along hyperparameter ``h``."""
    t = group_taus(rows, m, h, hypers, fixed, target)
    t = t[np.isfinite(t)]
    return (float(np.mean(t < 0)) if t.size else float("nan"), int(t.size))


def granulated_intervals(rows, m, W, hypers, fixed=(), target: str = "gap_error", level: float = LEVEL) -> dict:
    """Intervals for ``overall`` τ, every ``ψ_h`` and ``Ψ`` of measure values ``m`` (one per row).

    Same definitions as :func:`bounds_lib.experiments.granulated_kendall`; each resample of ``W``
    recomputes every group's weighted τ, ``ψ_h`` as the mean over the groups defined in it and ``Ψ``
    as the mean of the defined ``ψ_h``.
    """
    m = np.asarray(m, dtype=float)
    g = np.array([r[target] for r in rows])
    ones = np.ones((1, len(rows)))
    out = {"overall": kendall_interval(m, g, W, level)}
    psi_draws, psi_points = [], []
    for h in hypers:
        taus_b, taus_1 = [], []
        for idx in _groups(rows, h, hypers, fixed):
            taus_b.append(weighted_kendall(m[idx], g[idx], W[:, idx], constant_x=0.0))
            taus_1.append(weighted_kendall(m[idx], g[idx], ones[:, idx], constant_x=0.0)[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN resamples of a group stay NaN
            draws = np.nanmean(np.array(taus_b), axis=0) if taus_b else np.full(W.shape[0], np.nan)
            point = float(np.nanmean(taus_1)) if taus_1 and np.isfinite(taus_1).any() else float("nan")
        out[h] = _interval(point, draws, level)
        psi_draws.append(draws)
        psi_points.append(point)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pd = np.nanmean(np.array(psi_draws), axis=0)
    pp = [p for p in psi_points if np.isfinite(p)]
    out["Psi"] = _interval(float(np.mean(pp)) if pp else float("nan"), pd, level)
    return out


def intraclass_correlation(values, groups) -> float:
    """One-way ICC(1): the share of the variance of ``values`` explained by the group (configuration).

    ``ICC = (MSB − MSW) / (MSB + (k̄ − 1) MSW)`` from the one-way ANOVA mean squares between and within
    groups (``k̄`` the mean group size); near 0 when the seed moves a value as much as the configuration
    does, near 1 when the configuration fixes it. Can be slightly negative by sampling noise.
    """
    v = np.asarray(values, dtype=float)
    labels = list(groups)
    keys = list(dict.fromkeys(labels))
    members = [v[[i for i, l in enumerate(labels) if l == k]] for k in keys]
    if len(members) < 2 or any(len(x) < 2 for x in members):
        raise ValueError("the ICC needs at least two groups with at least two values each")
    n, a = v.size, len(members)
    grand = v.mean()
    msb = sum(len(x) * (x.mean() - grand) ** 2 for x in members) / (a - 1)
    msw = sum(((x - x.mean()) ** 2).sum() for x in members) / (n - a)
    k = n / a
    return float((msb - msw) / (msb + (k - 1) * msw)) if msb + (k - 1) * msw > 0 else float("nan")


def icc_interval(values, groups, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> Interval:
    """:func:`intraclass_correlation` and its bootstrap interval over the groups (configurations)."""
    v = np.asarray(values, dtype=float)
    labels = list(groups)
    keys = list(dict.fromkeys(labels))
    members = [np.array([i for i, l in enumerate(labels) if l == k]) for k in keys]
    point = intraclass_correlation(v, labels)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(len(keys), size=len(keys))
        vv = np.concatenate([v[members[j]] for j in pick])
        gg = np.concatenate([[b] * members[j].size for b, j in enumerate(pick)])
        draws.append(intraclass_correlation(vv, gg))
    return _interval(point, draws, level)
