"""Chapter 9's conditional analyses: does a measure rank the gap beyond the hyperparameters?

Amendment 2 of the pre-registration (``bounds_lib/data/study_amendment_2.md``, exploratory) asks it in
three ways, on the replication grid, the committed grid and digits:

* **within cells** — a *cell* holds every hyperparameter fixed but depth ``L`` and width ``N``
  (:class:`Design`); :func:`stratified_tau` is Kendall's ``τ_b`` inside every cell, pooled with the
  cell's number of pairs as weight, on the study's bootstrap (:func:`bootstrap`); Ψ within cells is the
  granulated Ψ of :func:`bounds_lib.studies.stats.granulated_intervals` with the cell held fixed;
* **incremental information** — :func:`cross_fitted` predicts the gap from the hyperparameters alone
  (least squares on one-hot main effects and two-way interactions, each fold predicted by the fit on
  the others, :func:`hyper_columns`), and again with the measure as one more column; :func:`incremental`
  is the paired ``Δτ`` of the two predictions (:func:`bounds_lib.studies.study.paired_interval`);
* **𝒦 given all hyperparameters** — :func:`cmi_all`, :func:`bounds_lib.studies.study.conditional_mi`
  with every axis of the design in the conditioning set.

The floors are permutation ranges (:func:`floors`): μ_ours shuffled *within cells* for the within-cell
statistics (it keeps what the cells tell, nothing else), across all models for 𝒦. :func:`power` plants a
synthetic measure with a known within-cell τ into the design's own gaps and counts detections;
:func:`verdict` applies amendment 2's rule. :func:`conditional_report` stores everything as
``study_conditional.json`` (:func:`load_conditional`); the tests recompute its entries.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
from threadpoolctl import threadpool_limits

from . import controls as C
from . import stats as S
from . import study as ST
from . import verdicts as V
from .kendall import grouped_kendall
from .replication import teacher_clusters

__all__ = ["VARIED", "Design", "REPLICATION", "COMMITTED", "DIGITS", "cell_labels", "shuffled_in_cells",
           "bootstrap", "stratified_tau", "stratified_interval", "within_cell_psi", "hyper_columns",
           "cross_fitted", "incremental", "cmi_all", "floors", "measure_row", "plant", "power", "verdict",
           "design_counts", "plot_design", "NAMES", "DIGITS_NAMES", "table", "seed_lows", "conditional_report",
           "analysed_sets", "load_conditional"]

#: The axes left to vary inside a cell (with the training seed).
VARIED = ("L", "N")
#: The planted within-cell τ's of the power simulation.
POWER_DELTAS = tuple(round(0.05 * i, 2) for i in range(7))
_FILE = "study_conditional.json"


@dataclass(frozen=True)
class Design:
    """A data set's axes (all its hyperparameters) and its folds: teacher draws, or training seeds."""
    name: str
    axes: tuple
    folds: str

    @property
    def cell_keys(self) -> tuple:
        """The hyperparameters a cell holds fixed, every axis but :data:`VARIED`."""
        return tuple(a for a in self.axes if a not in VARIED)


#: The replication grid, five axes and the teacher draw, cross-fitted over teacher draws.
REPLICATION = Design("replication", ("L", "N", "label_noise", "teacher_rank", "n_train", "teacher_seed"),
                     "teacher_seed")
#: The committed grid, the six pre-registered axes and n with one teacher, cross-fitted over training seeds.
COMMITTED = Design("committed", ST.AXES + ("n_train",), "seed")
#: Digits, with the axes L, N and η, cross-fitted over training seeds.
DIGITS = Design("digits", ("L", "N", "label_noise"), "seed")


def cell_labels(rows, design: Design) -> np.ndarray:
    """An integer label per row, equal for rows in the same cell of ``design``."""
    keys = [tuple(r["config"][k] for k in design.cell_keys) for r in rows]
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return np.array([index[k] for k in keys])


def cell_groups(cells) -> list:
    """The row indices of every cell, in the order of the cells' labels."""
    cells = np.asarray(cells)
    return [np.flatnonzero(cells == c) for c in np.unique(cells)]


def shuffled_in_cells(values, cells, seed: int = 0, groups=None) -> np.ndarray:
    """``values`` permuted inside every cell (:func:`bounds_lib.studies.controls.shuffled_control`, ``seed``);
    ``groups``: ``cell_groups`` of ``cells``, if already computed.

    >>> shuffled_in_cells(np.arange(4.0), np.array([0, 1, 0, 1]), seed=0)[[0, 2]].tolist() in ([0.0, 2.0], [2.0, 0.0])
    True
    """
    v = np.asarray(values, dtype=float)
    out, perms = v.copy(), {}
    for idx in cell_groups(cells) if groups is None else groups:
        # every cell's generator starts from ``seed``: cells of one size share one permutation
        if idx.size not in perms:
            perms[idx.size] = C.shuffled_control(np.arange(idx.size, dtype=float), seed=seed).astype(int)
        out[idx] = v[idx][perms[idx.size]]
    return out


def bootstrap(rows, design: Design, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """The study's bootstrap weights: three stages (teacher draw, configuration, seed) on the
    replication, two (configuration, seed) where there is one teacher draw."""
    top = teacher_clusters(rows) if design.folds == "teacher_seed" else None
    return S.bootstrap_weights(ST.clusters(rows), n_boot=n_boot, seed=seed, top=top)


def stratified_tau(m, g, cells, W, groups=None) -> np.ndarray:
    """Kendall's ``τ_b`` inside every cell, pooled over cells with the cell's pair count as weight
    (``groups``: ``cell_groups`` of ``cells``, if already computed).

    One value per row of the weights ``W`` (a cell's pairs are ``(w² − w)/2`` for its drawn rows ``w``);
    a cell with a constant drawn gap is left out, one with a constant measure scores 0.

    >>> g = np.array([1.0, 2, 3, 10, 20, 30]); cells = np.array([0, 0, 0, 1, 1, 1])
    >>> m = np.array([3.0, 2, 1, 1, 2, 3])   # τ = −1 in the first cell, +1 in the second
    >>> stratified_tau(-g, g, cells, np.ones(6)).tolist(), stratified_tau(m, g, cells, np.ones(6)).tolist()
    ([-1.0], [0.0])
    """
    m, g = np.asarray(m, dtype=float), np.asarray(g, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    num, den = np.zeros(W.shape[0]), np.zeros(W.shape[0])
    groups = [idx for idx in (cell_groups(cells) if groups is None else groups) if idx.size >= 2]
    if groups:
        t = grouped_kendall(m, g, W, groups, constant_x=0.0)
        tot = np.add.reduceat(W[:, np.concatenate(groups)], np.cumsum([0] + [i.size for i in groups[:-1]]), axis=1).T
        pairs = np.where(np.isfinite(t), 0.5 * (tot * tot - tot), 0.0)
        terms = np.where(np.isfinite(t), t, 0.0) * pairs
        for k in range(len(groups)):  # summed cell by cell, in the cells' order
            num += terms[k]
            den += pairs[k]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def stratified_interval(m, g, cells, W, level: float = S.LEVEL) -> S.Interval:
    """:func:`stratified_tau` on all rows and its percentile interval over the resamples ``W``."""
    point = float(stratified_tau(m, g, cells, np.ones(len(g)))[0])
    return S._interval(point, stratified_tau(m, g, cells, W), level)


def within_cell_psi(rows, m, design: Design, W) -> S.Interval:
    """The granulated Ψ over :data:`VARIED` with the cell's hyperparameters held fixed in every group."""
    return S.granulated_intervals(rows, m, W, VARIED, design.cell_keys)["Psi"]


def hyper_columns(rows, axes) -> np.ndarray:
    """The hyperparameter-only design matrix: an intercept, a one-hot column for every level of every
    axis and for every pair of levels of every pair of axes (main effects and two-way interactions).

    >>> rows = [{"config": {"a": a, "b": b}} for a in (0, 1) for b in (0, 1)]
    >>> hyper_columns(rows, ("a", "b")).shape
    (4, 9)
    """
    vals = {a: [r["config"][a] for r in rows] for a in axes}
    cols = [np.ones(len(rows))]
    for a in axes:
        cols += [np.array([v == lv for v in vals[a]], float) for lv in sorted(set(vals[a]))]
    for a, b in itertools.combinations(axes, 2):
        pairs = list(zip(vals[a], vals[b]))
        cols += [np.array([p == q for p in pairs], float) for q in sorted(set(pairs))]
    return np.column_stack(cols)


def cross_fitted(X, y, folds) -> np.ndarray:
    """Predictions of ``y`` from ``X``, each fold by the minimum-norm least-squares fit on the others."""
    # one BLAS thread: on the shared 2-core machine a threaded 285 × 99 lstsq took 1.7 s, one thread 3 ms
    with threadpool_limits(1):
        return _fitted_folds(X, y, folds)


def _fitted_folds(X, y, folds) -> np.ndarray:
    """:func:`cross_fitted` inside a BLAS limit already set (a loop sets it once: each setting reads the
    process's loaded libraries, 2 ms)."""
    X, y, folds = np.asarray(X, float), np.asarray(y, float), np.asarray(folds)
    if np.unique(folds).size < 2:
        raise ValueError("cross-fitting needs at least two folds")
    out = np.empty_like(y)
    for f in np.unique(folds):
        test = folds == f
        beta = np.linalg.lstsq(X[~test], y[~test], rcond=None)[0]
        out[test] = X[test] @ beta
    return out


def _standard(m) -> np.ndarray:
    m = np.asarray(m, dtype=float)
    s = m.std()
    return (m - m.mean()) / s if s > 0 else np.zeros_like(m)


def incremental(rows, m, design: Design, W, base=None) -> tuple:
    """``(τ of the hyperparameter predictor, τ of predictor + measure, paired Δτ)``, each an Interval.

    The predictions are cross-fitted over ``design.folds`` and held fixed; ``W`` resamples the models.
    ``base``: the hyperparameter-only predictions, if already computed.
    """
    g = np.array([r["gap_error"] for r in rows])
    X = hyper_columns(rows, design.axes)
    folds = [r["config"][design.folds] for r in rows]
    h = cross_fitted(X, g, folds) if base is None else base
    hm = cross_fitted(np.column_stack([X, _standard(m)]), g, folds)
    return S.kendall_interval(h, g, W), S.kendall_interval(hm, g, W), ST.paired_interval(hm, h, g, W)


def cmi_all(rows, m, design: Design) -> float:
    """𝒦 given all hyperparameters: :func:`bounds_lib.studies.study.conditional_mi` with every axis of
    the design in the one conditioning set."""
    return ST.conditional_mi(rows, m, axes=design.axes, k=len(design.axes))[0]


def floors(rows, design: Design, n_perm: int = 1000) -> dict:
    """Permutation ranges of μ_ours: stratified τ and incremental Δτ shuffled within cells, 𝒦 across models.

    Seeds ``0 … n_perm − 1``; point statistics (all weights 1).
    """
    g = np.array([r["gap_error"] for r in rows])
    ours, cells = ST.measure(rows, "B_ours"), cell_labels(rows, design)
    one = np.ones((1, len(rows)))
    X = hyper_columns(rows, design.axes)
    folds = [r["config"][design.folds] for r in rows]
    h = cross_fitted(X, g, folds)
    t_h = S.weighted_kendall(h, g, one)[0]
    taus, deltas, ks = [], [], []
    groups = cell_groups(cells)
    with threadpool_limits(1):
        for s in range(n_perm):
            v = shuffled_in_cells(ours, cells, seed=s, groups=groups)
            taus.append(stratified_tau(v, g, cells, one, groups)[0])
            hm = _fitted_folds(np.column_stack([X, _standard(v)]), g, folds)
            deltas.append(S.weighted_kendall(hm, g, one)[0] - t_h)
            ks.append(cmi_all(rows, C.shuffled_control(ours, seed=s), design))
    return {"tau": list(V.permutation_range(taus)), "delta": list(V.permutation_range(deltas)),
            "cmi": list(V.permutation_range(ks))}


def _values(rows, name: str, cells) -> np.ndarray:
    if name == "shuffled_cells:B_ours":
        return shuffled_in_cells(ST.measure(rows, "B_ours"), cells, seed=0)
    return V.measure_values(rows, name)


def measure_row(rows, name: str, design: Design, W, base=None) -> dict:
    """One measure's entry of the stored table: ``tau``, ``Psi``, ``tau_hm``, ``delta`` (each
    ``[value, lo, hi]``) and ``cmi`` (a value). JSON-ready."""
    g = np.array([r["gap_error"] for r in rows])
    cells = cell_labels(rows, design)
    v = _values(rows, name, cells)
    cell = lambda iv: [iv.value, iv.lo, iv.hi]  # noqa: E731
    _, hm, d = incremental(rows, v, design, W, base)
    return {"tau": cell(stratified_interval(v, g, cells, W)), "Psi": cell(within_cell_psi(rows, v, design, W)),
            "tau_hm": cell(hm), "delta": cell(d), "cmi": cmi_all(rows, v, design)}


# ----------------------------------------------------------------------------- power


def plant(g, cells, delta: float, rng) -> np.ndarray:
    """A synthetic measure with within-cell Kendall τ ``delta`` with ``g`` (Gaussian copula, amendment 2 §4):
    ``ρ·z + √(1 − ρ²)·ε`` with ``z`` the gap's normal scores inside each cell and ``ρ = sin(πΔ/2)``."""
    from scipy.stats import norm, rankdata

    rho = math.sin(math.pi * delta / 2)
    z = np.zeros(len(g))
    for c in np.unique(cells):
        idx = np.flatnonzero(cells == c)
        z[idx] = norm.ppf(rankdata(g[idx]) / (idx.size + 1))
    return rho * z + math.sqrt(1 - rho * rho) * rng.standard_normal(len(g))


def power(rows, design: Design, deltas=POWER_DELTAS, n_sim: int = 100, n_boot: int = 200, k0: int = 0) -> dict:
    """Detection rates of the stratified τ (``"tau"``) and the incremental Δτ (``"delta"``) per planted
    within-cell τ, and each one's ``d80`` (None when no planted effect reaches 80 %). JSON-ready.

    The ``k``-th effect's ``i``-th simulation draws its measure with generator ``1000·(k0 + k) + i`` and
    its resamples with bootstrap seed ``i`` (amendment 2 §4); ``k0`` recomputes one entry of a curve alone.
    """
    g = np.array([r["gap_error"] for r in rows])
    cells = cell_labels(rows, design)
    X = hyper_columns(rows, design.axes)
    folds = [r["config"][design.folds] for r in rows]
    h = cross_fitted(X, g, folds)
    Ws = [bootstrap(rows, design, n_boot, seed=i) for i in range(n_sim)]
    rates = {"tau": [], "delta": []}
    for k, dlt in enumerate(deltas):
        hit_t = hit_d = 0
        for i, W in enumerate(Ws):
            m = plant(g, cells, dlt, np.random.default_rng(1000 * (k0 + k) + i))
            hit_t += stratified_interval(m, g, cells, W).lo > 0
            with threadpool_limits(1):  # the products of paired_interval too
                hm = _fitted_folds(np.column_stack([X, _standard(m)]), g, folds)
                hit_d += ST.paired_interval(hm, h, g, W).lo > 0
        rates["tau"].append(hit_t / n_sim)
        rates["delta"].append(hit_d / n_sim)
    d80 = {k: next((d for d, p in zip(deltas, r) if p >= 0.8), None) for k, r in rates.items()}
    return {"deltas": list(deltas), "rates": rates, "d80": d80, "n_sim": n_sim, "n_boot": n_boot}


# ----------------------------------------------------------------------------- the design in one picture


def design_counts(rows, design: Design) -> tuple:
    """``(cells, inside, counts)``: the cells of ``design`` without the teacher draw (column labels), the
    (L, N) pairs (row labels) and the analysed models per pair and cell, every draw and seed counted."""
    keys = [k for k in design.cell_keys if k != "teacher_seed"]
    cells = sorted({tuple(r["config"][k] for k in keys) for r in rows})
    inside = sorted({tuple(r["config"][k] for k in VARIED) for r in rows})
    counts = np.zeros((len(inside), len(cells)), dtype=int)
    for r in rows:
        counts[inside.index(tuple(r["config"][k] for k in VARIED)),
               cells.index(tuple(r["config"][k] for k in keys))] += 1
    return cells, inside, counts


def plot_design(rows, design: Design = REPLICATION):
    """The replication's design in one picture: the analysed models of every (L, N) pair (columns) in
    every cell of η, r* and n (rows; each row holds the teacher draws, kept apart as cells of amendment 2).

    Each square says how many models were analysed there (draws × seeds, after the exclusion rule), its
    shade the same count; an empty square is a pair the design does not train.
    """
    from ..core.style import book_subplots

    cells, inside, counts = design_counts(rows, design)
    counts = counts.T  # one row per cell, one column per (L, N)
    fig, ax = book_subplots(1, 1, height=0.3 * len(cells) + 1.2)
    shown = np.where(counts > 0, counts, np.nan)
    # the shade repeats the count written in each square (no separate colour key needed)
    ax.imshow(shown, cmap="Blues", vmin=0, vmax=max(1, counts.max()), aspect="auto")
    for (i, j), c in np.ndenumerate(counts):
        if c:
            ax.text(j, i, str(c), ha="center", va="center", fontsize=10,
                    color="white" if c > 0.6 * counts.max() else "black")
    rank = lambda r: "full" if r == 0 else f"{r:g}"  # noqa: E731
    ax.set_yticks(range(len(cells)), [f"η {c[0]:g}, r* {rank(c[1])}, n {c[2]}" for c in cells])
    ax.set_xticks(range(len(inside)), [f"{a}, {b}" for a, b in inside])
    ax.set_xlabel("depth L, width N")
    ax.set_title("analysed models per cell (all teacher draws)")
    return fig


# ----------------------------------------------------------------------------- verdicts and the report


def verdict(tau_lows, delta_lows, cmi: float, cmi_hi: float, d80: dict, delta: float = 0.10) -> str:
    """Amendment 2's rule (§5) from the lower ends of the stratified τ's and Δτ's intervals under every
    bootstrap seed, 𝒦 given all hyperparameters, its floor's upper end and the power's ``d80``.

    >>> verdict([0.1] * 10, [0.05] * 10, 0.3, 0.1, {"tau": 0.1, "delta": 0.1})
    'information beyond the hyperparameters'
    >>> verdict([-0.1], [-0.2], 0.0, 0.1, {"tau": 0.1, "delta": None})
    'no information beyond the hyperparameters shown (not testable at this power)'
    """
    t_all, d_all = all(x > 0 for x in tau_lows), all(x > 0 for x in delta_lows)
    if t_all and d_all and cmi > cmi_hi:
        return "information beyond the hyperparameters"
    if tau_lows[0] <= 0 and delta_lows[0] <= 0:
        seen = all(d80.get(k) is not None and d80[k] <= delta for k in ("tau", "delta"))
        why = "an effect of interest would have been seen" if seen else "not testable at this power"
        return f"no information beyond the hyperparameters shown ({why})"
    return "mixed"


#: The measures of the conditional table (ceiling, measures, baselines, floor), on the teacher grids.
NAMES = ("control:4096", "control:128", *ST.MEASURES, *V.BASELINE_LABELS, "shuffled_cells:B_ours")
#: The measures on digits (no exact positive control there, no teacher rank).
DIGITS_NAMES = ("B_ours", "theta", "B_edelman", "spectral", "pac_bayes", "dist_init", "n_params",
                "axis:label_noise", "shuffled_cells:B_ours")


def table(rows, design: Design, names, n_boot: int = 1000, n_perm: int = 1000) -> dict:
    """Every measure's :func:`measure_row` (bootstrap seed 0), the hyperparameter predictor's τ, the
    floors (:func:`floors`) and the cells' count. JSON-ready."""
    g = np.array([r["gap_error"] for r in rows])
    W = bootstrap(rows, design, n_boot, seed=0)
    base = cross_fitted(hyper_columns(rows, design.axes), g, [r["config"][design.folds] for r in rows])
    iv = S.kendall_interval(base, g, W)
    return {"n_models": len(rows), "n_cells": int(np.unique(cell_labels(rows, design)).size),
            "hyper_tau": [iv.value, iv.lo, iv.hi], "floor": floors(rows, design, n_perm),
            "measures": {k: measure_row(rows, k, design, W, base) for k in names}}


def seed_lows(rows, design: Design, name: str = "B_ours", seeds=range(10), n_boot: int = 1000) -> dict:
    """The lower ends of the stratified τ's and the Δτ's intervals of ``name`` under every bootstrap seed."""
    g = np.array([r["gap_error"] for r in rows])
    cells = cell_labels(rows, design)
    v = _values(rows, name, cells)
    out = {"tau": [], "delta": []}
    for s in seeds:
        W = bootstrap(rows, design, n_boot, seed=s)
        out["tau"].append(stratified_interval(v, g, cells, W).lo)
        out["delta"].append(incremental(rows, v, design, W)[2].lo)
    return out


def conditional_report(sets: dict, n_boot: int = 1000, n_perm: int = 1000, n_sim: int = 100,
                       n_boot_power: int = 200) -> dict:
    """Amendment 2's analyses on ``sets`` = ``{"replication": rows, "committed": rows, "digits": rows}``
    (analysed rows), stored as ``study_conditional.json``. JSON-ready."""
    designs = {"replication": (REPLICATION, NAMES), "committed": (COMMITTED, NAMES), "digits": (DIGITS, DIGITS_NAMES)}
    out = {"n_boot": n_boot, "n_perm": n_perm}
    for key, (design, names) in designs.items():
        rows = sets[key]
        t = table(rows, design, names, n_boot, n_perm)
        t["power"] = power(rows, design, n_sim=n_sim, n_boot=n_boot_power)
        t["seeds"] = seed_lows(rows, design, n_boot=n_boot)
        ours = t["measures"]["B_ours"]
        t["verdict"] = verdict(t["seeds"]["tau"], t["seeds"]["delta"], ours["cmi"], t["floor"]["cmi"][1],
                               t["power"]["d80"])
        out[key] = t
    return out


def analysed_sets() -> dict:
    """The analysed rows (the pre-registered exclusion rule applied) of the three data sets of amendment 2."""
    from .results import load_results

    files = {"replication": "replication", "committed": "robust", "digits": "digits"}
    return {k: ST.with_axes(load_results(f)["rows"])[0] for k, f in files.items()}


def load_conditional() -> dict:
    """The stored :func:`conditional_report` (``bounds_lib/data/study_conditional.json``)."""
    return json.loads(resources.files("bounds_lib").joinpath("data", _FILE).read_text())


if __name__ == "__main__":  # python -m bounds_lib.studies.conditional OUT.json: the stored report, made again
    import sys
    import time

    t0 = time.process_time()
    report = conditional_report(analysed_sets())
    report["cpu_seconds"] = time.process_time() - t0
    with open(sys.argv[1], "w") as f:
        json.dump(report, f, indent=1)
