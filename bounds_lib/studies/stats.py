"""Rank statistics of Chapters 7 and 8: Kendall's τ, the granulated ψ, scaling slopes, and their uncertainty.

Point estimates (Jiang et al. 2020's protocol): :func:`kendall_tau` (SciPy's ``τ_b``),
:func:`granulated_kendall` (``τ`` overall and the granulated ``ψ_h``, ``Ψ`` over the hyperparameters
:data:`HYPERPARAMETERS`) and :func:`scaling_slopes` (how a proxy grows with width or depth).

Uncertainty. A ranking measured on one grid of trained models is one draw: another set of seeds or another
choice of configurations would give another τ. Following the hierarchical (two-stage) bootstrap, a
resample draws the grid's *configurations* with replacement and, inside every drawn configuration,
its *seeds* (models) with replacement; on a one-seed grid this is the ordinary bootstrap over models.
With a top level above the configurations (Chapter 9's teacher draws) it has three stages
(:func:`bootstrap_weights` with ``top``). A resample is a vector of integer weights on the rows (how
often each model was drawn), so Kendall's ``τ_b`` is computed with weights, in closed form, for all resamples
(:mod:`bounds_lib.studies.kendall`):

``τ_b = (n_c − n_d) / √((n₀ − n_x)(n₀ − n_y))`` with, for weights ``w`` (``W = Σ w_i``),
``n₀ = W(W−1)/2`` pairs, ``n_c − n_d = Σ_{i<j} w_i w_j sgn(x_i−x_j) sgn(y_i−y_j)`` and
``n_x = (wᵀ E_x w − W)/2`` pairs tied in ``x`` (``E_x[i,j] = 1`` when ``x_i = x_j``, the diagonal
included: two draws of one model are a pair tied in both variables). With all weights 1 this is
SciPy's ``τ_b`` (a test checks it). The granulated ``ψ_h`` of :func:`granulated_kendall`
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

from ..core.validation import check_array, check_scalar
from .kendall import grouped_kendall, weighted_kendall

__all__ = ["HYPERPARAMETERS", "kendall_tau", "granulated_kendall", "scaling_slopes",
           "Interval", "bootstrap_weights", "kendall_interval", "granulated_intervals",
           "group_taus", "wrong_sign_share", "intraclass_correlation", "icc_interval", "check_sign",
           "format_number", "format_interval"]

#: Default number of bootstrap resamples.
N_BOOT = 2000
#: Default coverage of the percentile intervals.
LEVEL = 0.95


#: The hyperparameters varied by the grids (Jiang et al. 2020 call each one an "axis").
HYPERPARAMETERS = ("L", "N", "n_train")


def _group_rows(rows, keys) -> list:
    """Indices of the rows that agree on every config key of ``keys``, one list per group (first-seen order)."""
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(tuple(r["config"][k] for k in keys), []).append(i)
    return list(groups.values())


def _groups(rows, h, hypers, fixed):
    """The groups of at least two rows that vary only ``h`` (every other hyperparameter and ``fixed`` equal)."""
    others = [k for k in hypers if k != h]
    return [np.array(v) for v in _group_rows(rows, (*others, *fixed)) if len(v) >= 2]


def kendall_tau(x, y) -> float:
    """Kendall's ``τ_b`` between two sequences (SciPy's ``kendalltau``; Chapter 7).

    Parameters
    ----------
    x, y : array_like
        Finite numbers of the same length (e.g. a proxy's values and the gaps of the same models).

    Returns
    -------
    float
        ``τ_b`` in ``[−1, 1]``; NaN when a sequence is constant or has fewer than 2 entries (no pair).

    Raises
    ------
    TypeError
        ``x`` or ``y`` is not numeric.
    ValueError
        ``x`` and ``y`` differ in shape, or hold NaN or infinite entries.

    Examples
    --------
    >>> round(kendall_tau([1, 2, 3], [1, 3, 2]), 12)  # 2 concordant pairs, 1 discordant, of 3
    0.333333333333
    >>> kendall_tau([1, 2, 3], [5, 5, 5])  # a constant gap ranks nothing
    nan
    """
    from scipy.stats import kendalltau

    x, y = check_array(x, "x"), check_array(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(kendalltau(x, y).statistic)


def granulated_kendall(rows, measure, target: str = "gap_error", hypers=HYPERPARAMETERS, fixed=()) -> dict:
    """Kendall ``τ`` between a measure and the gap, overall and per hyperparameter (Jiang et al. 2020).

    ``overall`` is ``τ`` over all rows; for each hyperparameter ``h``, ``ψ_h`` (key ``h``) is the mean
    over groups of rows that agree on every *other* hyperparameter of ``τ`` within the group; ``Psi``
    is the mean of the defined ``ψ_h``. A group whose gap is constant is skipped; a measure that is
    constant within a group while the gap varies ranks nothing and scores ``τ = 0`` there (as in Jiang
    et al.'s count of concordant minus discordant pairs). The bootstrap intervals of the same
    quantities are :func:`granulated_intervals`.

    Parameters
    ----------
    rows : list of dict
        Results rows (:mod:`bounds_lib.studies.results`): each has ``row["config"][h]`` for every ``h`` of
        ``hypers`` and ``fixed``, and ``row[target]``.
    measure : callable
        ``measure(row) -> float``, e.g. ``lambda r: proxy_value(r, "B_ours_sum")``.
    target : str
        The row key ranked against (the 0-1 error gap by default).
    hypers : tuple of str
        The hyperparameters varied by the grid.
    fixed : tuple of str
        Config keys held fixed in every group without being varied: with ``("seed",)`` each group
        compares models of one seed.

    Returns
    -------
    dict
        ``overall``, one ``ψ_h`` per hyperparameter (key ``h``), ``Psi`` (NaN where undefined), and
        ``groups_h``: the number of groups that entered ``ψ_h``.

    Raises
    ------
    KeyError
        A row lacks a config key of ``hypers`` or ``fixed``, or ``target``.

    Examples
    --------
    >>> rows = [{"config": {"L": L, "N": N, "n_train": 10}, "gap_error": L * N / 10}
    ...         for L in (1, 2) for N in (4, 8)]
    >>> t = granulated_kendall(rows, lambda r: r["config"]["L"] * r["config"]["N"])
    >>> t["overall"], t["L"], t["N"], t["Psi"], t["groups_L"]
    (1.0, 1.0, 1.0, 1.0, 2)
    >>> t["n_train"], t["groups_n_train"]  # one n_train: no group varies it
    (nan, 0)
    """
    rows = list(rows)
    m = np.array([measure(r) for r in rows])
    g = np.array([r[target] for r in rows])
    out = {"overall": kendall_tau(m, g)}
    counts = {}
    for h in hypers:
        taus = []
        for idx in _groups(rows, h, hypers, fixed):
            if np.ptp(g[idx]) == 0:
                continue
            taus.append(0.0 if np.ptp(m[idx]) == 0 else kendall_tau(m[idx], g[idx]))
        out[h] = float(np.mean(taus)) if taus else float("nan")
        counts[f"groups_{h}"] = len(taus)
    defined = [out[h] for h in hypers if np.isfinite(out[h])]
    out["Psi"] = float(np.mean(defined)) if defined else float("nan")
    out.update(counts)
    return out


def scaling_slopes(rows, name: str, along: str, hypers=HYPERPARAMETERS) -> float:
    """Mean least-squares slope of ``log10(proxy)`` against ``log10(along)`` over groups fixing the rest.

    A slope ``a`` means the proxy grows like ``along^a`` (the width or depth exponent of Chapter 7's
    scaling plot).

    Parameters
    ----------
    rows : list of dict
        Results rows (:mod:`bounds_lib.studies.results`).
    name : str
        A proxy name (:func:`bounds_lib.studies.results.proxy_value`).
    along : str
        The hyperparameter on the x-axis (``"N"``, ``"L"`` or ``"n_train"``).
    hypers : tuple of str
        The hyperparameters held fixed within a group (all but ``along``).

    Returns
    -------
    float
        The mean slope over the groups with at least two values of ``along`` (NaN if none).

    Raises
    ------
    KeyError
        A row lacks the proxy or a config key.

    Examples
    --------
    >>> import math
    >>> rows = [{"config": {"L": L, "N": N, "n_train": 64},
    ...          "proxies": {"n_params": math.log10(3 * L * N * N + N)}} for L in (1, 2) for N in (8, 16, 32)]
    >>> round(scaling_slopes(rows, "n_params", "N"), 2)  # 3LN² + N grows like N²
    1.98
    """
    from .results import proxy_value

    rows = list(rows)
    others = [k for k in hypers if k != along]
    slopes = []
    for idx in _group_rows(rows, others):
        grp = [rows[i] for i in idx]
        if len({r["config"][along] for r in grp}) < 2:
            continue
        x = np.log10([r["config"][along] for r in grp])
        y = np.array([proxy_value(r, name) for r in grp])
        slopes.append(float(np.polyfit(x, y, 1)[0]))
    return float(np.mean(slopes)) if slopes else float("nan")


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


def format_number(value: float, digits: int = 2, plus: bool = False) -> str:
    """``value`` with ``digits`` decimals and the true minus, ``+`` too with ``plus``; never ``−0.00``.

    >>> format_number(-0.0512), format_number(-0.004, plus=True), format_number(float("nan"))
    ('−0.05', '+0.00', 'n/a')
    """
    if not np.isfinite(value):
        return "n/a" if np.isnan(value) else ("−" if value < 0 else "+" if plus else "") + "∞"
    text = f"{float(value):+.{digits}f}"
    text = "+" + text[1:] if float(text) == 0 else text  # rounded to zero: no sign the digits show
    # the true minus sign (U+2212) of the book's prose and formulas ("−log n"), not a hyphen
    return (text if plus else text.lstrip("+")).replace("-", "−")


def format_interval(iv: Interval, digits: int = 2) -> str:
    """``+0.12 [−0.05, +0.30]``: the estimate and its interval, signed (:func:`format_number`); ``n/a`` if undefined.

    >>> format_interval(Interval(0.123, -0.05, 0.3, 2000)), format_interval(Interval(-0.001, -0.004, 0.02, 2000))
    ('+0.12 [−0.05, +0.30]', '+0.00 [+0.00, +0.02]')
    """
    value, lo, hi = (format_number(x, digits, plus=True) for x in (iv.value, iv.lo, iv.hi))
    return f"{value} [{lo}, {hi}]" if np.isfinite(iv.value) else "n/a"


def check_sign(iv: Interval, claimed: str, what: str = "the statistic") -> None:
    """Assert that the prose's claim about the sign of ``iv`` holds for its whole interval.

    A chapter calls this before every sentence that states a sign (Chapters 7 and 8), so a rebuilt
    book whose intervals moved fails instead of printing a claim its numbers no longer support.

    Parameters
    ----------
    iv : Interval
        An estimate with its bootstrap interval.
    claimed : {"+", "-", "0"}
        ``"+"``: the interval lies above 0; ``"-"``: below 0; ``"0"``: it contains 0 (cannot be told from 0).
    what : str
        The statistic's name, for the error message.

    Raises
    ------
    TypeError
        ``iv`` is not an :class:`Interval`.
    ValueError
        ``claimed`` is not one of ``"+"``, ``"-"``, ``"0"``.
    AssertionError
        The interval's sign is not the claimed one.

    Examples
    --------
    >>> check_sign(Interval(0.4, 0.1, 0.6, 2000), "+", "tau of B_ours")
    >>> check_sign(Interval(0.4, -0.1, 0.6, 2000), "+", "tau of B_ours")
    Traceback (most recent call last):
        ...
    AssertionError: tau of B_ours: the prose claims sign '+' but the interval is +0.400 [−0.100, +0.600] (sign '0')
    """
    if not isinstance(iv, Interval):
        raise TypeError(f"check_sign needs an Interval, got {type(iv).__name__}")
    if claimed not in ("+", "-", "0"):
        raise ValueError(f"claimed sign must be '+', '-' or '0', got {claimed!r}")
    if iv.sign != claimed:
        raise AssertionError(f"{what}: the prose claims sign {claimed!r} but the interval is "
                             f"{format_interval(iv, 3)} (sign {iv.sign!r})")


def bootstrap_weights(clusters, n_boot: int = N_BOOT, seed: int = 0, top=None) -> np.ndarray:
    """Row weights ``(n_boot, n_rows)`` of a two-stage bootstrap: clusters, then rows inside each; with
    ``top``, of a three-stage one: top clusters, clusters inside each, then rows (Chapters 7–9).

    Each resample draws as many clusters as there are, with replacement; a cluster drawn ``c`` times
    contributes ``Multinomial(c·m, 1/m)`` draws over its ``m`` rows (``c`` independent resamples of its
    seeds). With ``top`` the first stage draws the top clusters (Chapter 9: the teacher draws) and a top
    cluster drawn ``c`` times draws ``Multinomial(c·k, 1/k)`` of its ``k`` clusters; a cluster is the pair
    (top cluster, cluster). When every top cluster holds one cluster the weights are the two-stage ones,
    draw for draw.

    Parameters
    ----------
    clusters : sequence of hashable
        ``clusters[i]`` labels row ``i``'s configuration (e.g. :func:`bounds_lib.studies.trained_report.clusters`).
    n_boot : int
        Number of resamples, ``>= 1``.
    seed : int
        Seed of the generator, ``>= 0`` (fixed, so a chapter prints the same interval on every build).
    top : sequence of hashable, optional
        ``top[i]`` labels row ``i``'s top cluster (e.g. :func:`bounds_lib.studies.replication.teacher_clusters`).

    Returns
    -------
    numpy.ndarray
        Shape ``(n_boot, n_rows)``: how often each row is drawn in each resample; every resample draws
        ``n_rows`` rows in all when the clusters have equal sizes.

    Raises
    ------
    TypeError
        ``n_boot`` or ``seed`` is not an integer.
    ValueError
        ``n_boot < 1``, ``seed < 0``, no rows, or ``top`` of another length than ``clusters``.

    Examples
    --------
    >>> W = bootstrap_weights(["a", "a", "b", "b"], n_boot=3, seed=0)
    >>> W.shape, W.sum(axis=1).tolist()
    ((3, 4), [4.0, 4.0, 4.0])
    >>> bootstrap_weights(["a", "b"], 2, top=["t", "u"]).tolist() == bootstrap_weights(["a", "b"], 2).tolist()
    True
    """
    check_scalar(n_boot, "n_boot (number of resamples)", int, min_val=1)
    check_scalar(seed, "seed", int, min_val=0)
    levels = [list(clusters)] if top is None else [list(top), list(clusters)]
    if not levels[-1]:
        raise ValueError("bootstrap_weights needs at least one row (clusters is empty)")
    if len(levels[0]) != len(levels[-1]):
        raise ValueError(f"top and clusters must label the same rows, got {len(levels[0])} and {len(levels[-1])}")
    paths = [tuple(lv[i] for lv in levels) + (i,) for i in range(len(levels[-1]))]  # a row's clusters, top down
    units = list(dict.fromkeys(p[:1] for p in paths))
    rng = np.random.default_rng(seed)
    W = rng.multinomial(len(units), np.full(len(units), 1.0 / len(units)), size=n_boot)
    for d in range(2, len(levels) + 2):  # the next stage: the clusters inside a drawn unit, finally the rows
        below, kids = list(dict.fromkeys(p[:d] for p in paths)), {}
        for j, v in enumerate(below):
            kids.setdefault(v[:-1], []).append(j)
        counts, W = W, np.zeros((n_boot, len(below)))
        for j, u in enumerate(units):
            m = np.array(kids[u])
            if m.size == 1:
                W[:, m[0]] = counts[:, j]
            else:  # one call for all resamples that drew the unit: the same draws, in the same order
                b = np.flatnonzero(counts[:, j])
                W[np.ix_(b, m)] = rng.multinomial(counts[b, j].astype(np.int64) * m.size, np.full(m.size, 1.0 / m.size))
        units = below
    return W


def _interval(value, draws, level):
    check_scalar(level, "level (of the interval)", float, min_val=0, max_val=1, include_boundaries="neither")
    d = np.asarray(draws, dtype=float)
    ok = d[np.isfinite(d)]
    if ok.size == 0 or not np.isfinite(value):
        return Interval(float(value), np.nan, np.nan, int(d.size), int(d.size - ok.size))
    a = (1 - level) / 2
    lo, hi = np.quantile(ok, [a, 1 - a])
    return Interval(float(value), float(lo), float(hi), int(d.size), int(d.size - ok.size))


def kendall_interval(x, y, W, level: float = LEVEL) -> Interval:
    """``τ_b(x, y)`` on all rows and its bootstrap percentile interval over the resamples ``W``.

    Parameters
    ----------
    x, y : array_like
        One value per row (e.g. a proxy and the gap).
    W : numpy.ndarray
        Bootstrap weights, shape ``(n_boot, n_rows)`` (:func:`bootstrap_weights`).
    level : float
        Coverage of the percentile interval, in ``(0, 1)``.

    Returns
    -------
    Interval
        The point ``τ_b`` (all weights 1: SciPy's) and the percentiles over the resamples where it is
        defined (``n_undefined`` counts the others).

    Raises
    ------
    TypeError
        ``level`` is not a real number.
    ValueError
        ``x``, ``y`` and the columns of ``W`` differ in length, or ``level`` is outside ``(0, 1)``.

    Examples
    --------
    >>> x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    >>> iv = kendall_interval(x, [0.1, 0.3, 0.2, 0.4, 0.6, 0.5], bootstrap_weights(range(6), n_boot=200))
    >>> round(iv.value, 3), iv.lo <= iv.value <= iv.hi, iv.n_boot
    (0.733, True, 200)
    """
    W = np.atleast_2d(np.asarray(W, dtype=float))
    if not len(x) == len(y) == W.shape[1]:
        raise ValueError(f"x, y and the weights W must cover the same rows, got {len(x)}, {len(y)} and "
                         f"{W.shape[1]}")
    point = float(weighted_kendall(x, y, np.ones(len(x)))[0])
    return _interval(point, weighted_kendall(x, y, W), level)


def group_taus(rows, m, h, hypers, fixed=(), target: str = "gap_error") -> np.ndarray:
    """``τ`` inside every group that varies only ``h`` (the terms of ``ψ_h``; NaN where the gap is constant)."""
    m = np.asarray(m, dtype=float)
    g = np.array([r[target] for r in rows])
    return grouped_kendall(m, g, np.ones(len(rows)), _groups(rows, h, hypers, fixed), constant_x=0.0)[:, 0]


def wrong_sign_share(rows, m, h, hypers, fixed=(), target: str = "gap_error") -> tuple:
    """``(share of groups with τ < 0, number of groups with a defined τ)`` along hyperparameter ``h``."""
    t = group_taus(rows, m, h, hypers, fixed, target)
    t = t[np.isfinite(t)]
    return (float(np.mean(t < 0)) if t.size else float("nan"), int(t.size))


def granulated_intervals(rows, m, W, hypers, fixed=(), target: str = "gap_error", level: float = LEVEL) -> dict:
    """Intervals for ``overall`` τ, every ``ψ_h`` and ``Ψ`` of measure values ``m`` (one per row).

    Same definitions as :func:`granulated_kendall`; each resample of ``W`` recomputes every group's
    weighted τ, ``ψ_h`` as the mean over the groups defined in it and ``Ψ`` as the mean of the defined
    ``ψ_h``. The point values are those of :func:`granulated_kendall` (a test checks it).

    Parameters
    ----------
    rows : list of dict
        Results rows with ``row["config"][h]`` for every ``h`` of ``hypers`` and ``fixed``.
    m : array_like
        The measure's value on every row (e.g. :func:`bounds_lib.studies.trained_report.measure`).
    W : numpy.ndarray
        Bootstrap weights of ``rows``, shape ``(n_boot, n_rows)`` (:func:`bootstrap_weights`).
    hypers : tuple of str
        The hyperparameters varied by the grid (:data:`HYPERPARAMETERS`).
    fixed : tuple of str
        Config keys held fixed within every group (e.g. ``("seed",)``).
    target : str
        The row key ranked against.
    level : float
        Coverage of the percentile intervals, in ``(0, 1)``.

    Returns
    -------
    dict
        ``{"overall": Interval, h: Interval for every h, "Psi": Interval}``.

    Raises
    ------
    ValueError
        ``m``, ``rows`` and the columns of ``W`` differ in length, or ``level`` is outside ``(0, 1)``.

    Examples
    --------
    >>> rows = [{"config": {"L": L, "N": N, "n_train": 8}, "gap_error": L * N + 0.5 * (L == 2)}
    ...         for L in (1, 2, 4) for N in (4, 8)]
    >>> m = [r["config"]["L"] * r["config"]["N"] for r in rows]
    >>> t = granulated_intervals(rows, m, bootstrap_weights(range(6), n_boot=100), HYPERPARAMETERS)
    >>> t["L"].value, t["N"].value, t["Psi"].value
    (1.0, 1.0, 1.0)
    """
    m = np.asarray(m, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    if not m.shape[0] == len(rows) == W.shape[1]:
        raise ValueError(f"the measure m, the rows and the weights W must cover the same rows, got {m.shape[0]}, "
                         f"{len(rows)} and {W.shape[1]}")
    g = np.array([r[target] for r in rows])
    out = {"overall": kendall_interval(m, g, W, level)}
    psi_draws, psi_points = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # means of all-NaN resamples stay NaN
        for h in hypers:
            # the resamples and, last, all weights 1 (the point value), every group at once
            taus = grouped_kendall(m, g, np.vstack([W, np.ones(len(rows))]), _groups(rows, h, hypers, fixed), 0.0)
            taus_b, taus_1 = np.ascontiguousarray(taus[:, :-1]), list(taus[:, -1])
            draws = np.nanmean(taus_b, axis=0) if len(taus_b) else np.full(W.shape[0], np.nan)
            point = float(np.nanmean(taus_1)) if taus_1 and np.isfinite(taus_1).any() else float("nan")
            out[h] = _interval(point, draws, level)
            psi_draws.append(draws)
            psi_points.append(point)
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
    n, a, grand = v.size, len(members), v.mean()
    msb = sum(len(x) * (x.mean() - grand) ** 2 for x in members) / (a - 1)
    msw = sum(((x - x.mean()) ** 2).sum() for x in members) / (n - a)
    k = n / a
    return float((msb - msw) / (msb + (k - 1) * msw)) if msb + (k - 1) * msw > 0 else float("nan")


def icc_interval(values, groups, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> Interval:
    """:func:`intraclass_correlation` and its bootstrap interval over the groups (configurations).

    Each resample draws as many groups as there are, with replacement, and recomputes the ICC.

    Parameters
    ----------
    values : array_like
        One value per model (e.g. the gap).
    groups : sequence of hashable
        The configuration of every model (models of one configuration differ only in the seed).
    n_boot : int
        Number of resamples, ``>= 1``.
    seed : int
        Seed of the generator, ``>= 0``.
    level : float
        Coverage of the percentile interval, in ``(0, 1)``.

    Returns
    -------
    Interval
        The ICC of all models and its percentile interval.

    Raises
    ------
    TypeError
        ``n_boot`` or ``seed`` is not an integer, ``level`` not a real number.
    ValueError
        Fewer than two groups, a group with one value, or a parameter out of range.

    Examples
    --------
    >>> iv = icc_interval([1.0, 1.1, 2.0, 2.1, 3.0, 3.2], ["a", "a", "b", "b", "c", "c"], n_boot=50)
    >>> round(iv.value, 3), iv.hi <= 1
    (0.991, True)
    """
    check_scalar(n_boot, "n_boot (number of resamples)", int, min_val=1)
    check_scalar(seed, "seed", int, min_val=0)
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
