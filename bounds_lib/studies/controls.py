"""Controls, confound analysis, power and exact tests for Chapter 9's robust study.

The study of Chapter 9 ranks measures against the exact generalization gap of trained students of a
planted teacher. A rank statistic means little without the values it takes on measures whose answer is
known, so this module supplies them, as pure functions of the committed rows (``load_results("robust")``,
split by :func:`bounds_lib.studies.study.with_axes`):

* **controls** — :func:`positive_control`, an exact held-out estimate of the gap on ``m`` fresh
  samples, ``Binomial(m, R)/m − R̂`` (it tracks the gap up to sampling noise: the ceiling of every
  statistic), and :func:`shuffled_control`, a measure permuted across models (the floor: chance);
* **the confound** — :func:`gap_variance_by_axis` (how much of the gap's variance each axis of the
  factorial explains), :func:`within_level_tau` (τ and Ψ inside each level of one axis),
  :func:`baseline_measure` (hyperparameter indicators, norm baselines and the oracle rank ``r*``);
* **sign errors** (Dziugaite et al. 2020) — :func:`environments`, :func:`seed_spread_filter` (environments
  whose gap difference is within the seed-to-seed spread dropped), :func:`sign_errors_by_axis` with
  bootstrap intervals and :func:`sign_error_distribution`;
* **power and exact tests** — :func:`detectable_delta_tau` (the smallest planted ``Δτ`` a paired
  bootstrap test detects with a given power, by simulation), :func:`sign_test` and
  :func:`exact_paired_tests` (sign test and Wilcoxon signed-rank, exact two-sided p-values).
"""
from __future__ import annotations

import itertools
import json
import math
import zlib
from dataclasses import dataclass

import numpy as np

from ..core.validation import check_array, check_scalar
from . import stats as S
from . import study as ST

__all__ = ["BASELINES", "EXACT_WILCOXON_MAX", "positive_control", "shuffled_control", "baseline_measure",
           "VarianceShares", "gap_variance_by_axis", "LevelStat", "within_level_tau", "Environment",
           "environments", "seed_spread", "FilterResult", "seed_spread_filter", "sign_errors_by_axis",
           "sign_error_distribution", "PowerResult", "detectable_delta_tau", "detectable_psi", "sign_test",
           "exact_paired_tests"]

#: Baseline measures of :func:`baseline_measure` besides the ``"axis:KEY"`` indicators.
BASELINES = {"sum_frobenius": "log10 Σ‖W‖_F", "prod_spectral": "log10 Π‖W‖₂",
             "prod_spectral_margin": "log10 Π‖W‖₂·‖w‖₂/(γ√n)", "r_star": "the teacher's rank r* (oracle)"}
#: Up to this many non-zero differences, :func:`exact_paired_tests` enumerates all sign flips.
EXACT_WILCOXON_MAX = 16


def _rows(rows, name="rows") -> list:
    rows = list(rows)
    if not rows:
        raise ValueError(f"{name} is empty: the controls need at least one results row")
    if not all(isinstance(r, dict) and isinstance(r.get("config"), dict) for r in rows):
        raise TypeError(f"{name} must be results rows (dicts with a 'config' dict), as load_results gives")
    return rows


def _config_key(config) -> int:
    """A stable 32-bit key of a model's configuration (defaults filled in, so raw and analysed rows agree).

    The teacher draw ``teacher_seed`` counts only when it is not 0 (the committed grid's teacher), so the
    committed rows keep the key they had before the replication added the draw."""
    full = {**ST._CONFIG_DEFAULTS, **config}
    if not full.get("teacher_seed"):
        full.pop("teacher_seed", None)
    return zlib.crc32(json.dumps(full, sort_keys=True, default=str).encode())


# ----------------------------------------------------------------------------- controls


def positive_control(rows, m: int, seed: int = 0, population: str = "test_error",
                     train: str = "train_error") -> np.ndarray:
    """An exact held-out estimate of every model's gap: ``Binomial(m, R)/m − R̂`` (Chapter 9's ceiling).

    ``R`` is the model's exact population error under the noisy training distribution (``test_error``:
    computed over all inputs) and ``R̂`` its training error, so the control is what a test set of ``m``
    fresh labelled samples would report as the gap: unbiased, with standard deviation ``√(R(1−R)/m)``.
    Each model's draw uses its own generator, seeded by ``(seed, a hash of its configuration)``, so a
    model's value does not depend on which other rows are passed (within-level analyses see the same
    draws).

    >>> rows = [{"config": {"seed": s}, "test_error": 0.25, "train_error": 0.0} for s in range(3)]
    >>> v = positive_control(rows, 10 ** 8)
    >>> bool(np.all(np.abs(v - 0.25) < 1e-3)), bool(positive_control(rows[:1], 50)[0] == positive_control(rows, 50)[0])
    (True, True)
    """
    rows = _rows(rows)
    m = check_scalar(m, "m (held-out sample size)", int, min_val=1)
    seed = check_scalar(seed, "seed", int, min_val=0)
    try:
        R = check_array([r[population] for r in rows], f"population error {population!r}", min_val=0, max_val=1)
        Rh = check_array([r[train] for r in rows], f"training error {train!r}", min_val=0, max_val=1)
    except KeyError as exc:
        raise KeyError(f"a row has no {exc.args[0]!r}: positive_control needs the exact population error and the "
                       "training error of every model") from None
    draws = [np.random.default_rng([seed, _config_key(r["config"])]).binomial(m, p) for r, p in zip(rows, R)]
    return np.asarray(draws, dtype=float) / m - Rh


def shuffled_control(values, seed: int = 0) -> np.ndarray:
    """A measure permuted across models with a fixed seed (Chapter 9's negative control: τ ≈ 0 by design).

    >>> sorted(shuffled_control([3.0, 1.0, 2.0], seed=1).tolist())
    [1.0, 2.0, 3.0]
    """
    v = check_array(values, "values (a measure, one per model)", allow_empty=False)
    if v.ndim != 1:
        raise ValueError(f"values must be one-dimensional (one per model), got shape {v.shape}")
    seed = check_scalar(seed, "seed", int, min_val=0)
    return np.random.default_rng(seed).permutation(v)


def baseline_measure(rows, name: str) -> np.ndarray:
    """Values of a baseline of Chapter 9's confound analysis on ``rows``.

    ``"axis:KEY"`` is the hyperparameter indicator: the configuration's value of ``KEY`` (e.g.
    ``"axis:label_noise"``). The others (:data:`BASELINES`): ``sum_frobenius`` and ``prod_spectral``
    (``log10`` as stored), ``prod_spectral_margin`` = ``log10(Π‖W‖₂·‖w‖₂/(γ√n))`` with the margin ``γ``
    of :func:`bounds_lib.studies.study.measure`, and ``r_star``, the teacher's planted rank (full rank
    counted as the teacher's width).

    >>> rows = [{"config": {"teacher_rank": 0, "label_noise": 0.05}}, {"config": {"teacher_rank": 1}}]
    >>> baseline_measure(rows, "r_star").tolist(), baseline_measure(rows, "axis:label_noise").tolist()
    ([16.0, 1.0], [0.05, 0.0])
    """
    from .tasks import TEACHER_SHAPE

    rows = [{**r, "config": {**ST._CONFIG_DEFAULTS, **r["config"]}} for r in _rows(rows)]
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name.startswith("axis:"):
        key = name[5:]
        if any(key not in r["config"] for r in rows):
            raise KeyError(f"a row has no config key {key!r} for the indicator {name!r}")
        return check_array([r["config"][key] for r in rows], name)
    if name == "r_star":
        return np.array([float(r["config"]["teacher_rank"] or TEACHER_SHAPE["N"]) for r in rows])
    if name in ("sum_frobenius", "prod_spectral"):
        return np.array([float(r["proxies"][name]) for r in rows])
    if name == "prod_spectral_margin":
        return np.array([r["proxies"]["prod_spectral"] + math.log10(r["proxies"]["readout_norm"])
                         - math.log10(r["study"]["margin"]) - 0.5 * math.log10(r["config"]["n_train"])
                         for r in rows])
    raise KeyError(f"unknown baseline {name!r}; available: {', '.join(BASELINES)} or 'axis:KEY'")


# ----------------------------------------------------------------------------- the confound


@dataclass(frozen=True)
class VarianceShares:
    """Shares of the gap's variance (:func:`gap_variance_by_axis`): per axis (Shapley/LMG shares of the
    main-effects model's R², summing with ``residual`` to 1) and the one-way shares ``marginal`` (each
    axis alone; they need not sum to 1 when the design is unbalanced)."""

    shares: dict
    residual: float
    marginal: dict

    @property
    def r2(self) -> float:
        return 1.0 - self.residual


def _effect_codes(x) -> np.ndarray:
    """Sum-to-zero effect coding of one factor: ``±1`` for two levels, ``k − 1`` columns for ``k``."""
    levels = sorted(set(x.tolist()))
    if len(levels) == 2:
        return np.where(x == levels[1], 1.0, -1.0)[:, None]
    cols = [(x == v).astype(float) - (x == levels[-1]).astype(float) for v in levels[:-1]]
    return np.column_stack(cols)


def _r2(y, blocks, subset) -> float:
    X = np.column_stack([np.ones(y.size)] + [blocks[h] for h in subset])
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    res = y - X @ beta
    tot = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(res @ res) / tot


def gap_variance_by_axis(rows, axes=ST.AXES + ("n_train",), target: str = "gap_error") -> VarianceShares:
    """The share of the gap's variance each axis explains: a main-effects ANOVA on effect-coded axes.

    Method (Chapter 9's confound analysis): the gap is regressed by least squares on every axis of
    ``axes`` coded ``±1`` (two levels; an axis with ``k`` levels, such as ``n_train`` in the sample-size
    family, gets ``k − 1`` sum-to-zero columns). The model's ``R²`` is split among the axes by the
    Shapley (LMG) rule — an axis's share is its mean gain in ``R²`` over all orders of entering the
    axes — and ``residual = 1 − R²`` (interactions and seed noise), so the shares sum to 1. In a balanced
    two-level factorial the columns are orthogonal and the share of axis ``h`` is the classical
    ``SS_h / SS_total = N β_h² / SS_total``; with exclusions the Shapley rule keeps the sum at ``R²``
    without depending on an order. ``marginal`` is each axis's one-way ``η²`` (between-level sum of
    squares over the total). Axes with a single level among ``rows`` get share 0.

    Raises
    ------
    ValueError
        Fewer than two rows, or a constant gap (no variance to share).
    """
    rows = _rows(rows)
    y = check_array([r[target] for r in rows], target)
    if y.size < 2 or np.ptp(y) == 0:
        raise ValueError("the gap must vary across at least two rows to share its variance")
    xs = {h: np.array([r["config"][h] for r in rows]) for h in axes}
    blocks = {h: _effect_codes(x) for h, x in xs.items() if len(set(x.tolist())) > 1}
    live = list(blocks)
    cache = {(): 0.0}
    for k in range(1, len(live) + 1):
        for sub in itertools.combinations(live, k):
            cache[sub] = _r2(y, blocks, sub)
    p = len(live)
    shares = {h: 0.0 for h in axes}
    for h in live:
        rest = [g for g in live if g != h]
        for k in range(p):
            w = math.factorial(k) * math.factorial(p - k - 1) / math.factorial(p)
            for sub in itertools.combinations(rest, k):
                with_h = tuple(g for g in live if g in sub or g == h)
                shares[h] += w * (cache[with_h] - cache[sub])
    tot = float(((y - y.mean()) ** 2).sum())
    marginal = {h: float(sum((x == v).sum() * (y[x == v].mean() - y.mean()) ** 2 for v in set(x.tolist())) / tot)
                for h, x in xs.items()}
    return VarianceShares(shares, 1.0 - cache[tuple(live)], marginal)


@dataclass(frozen=True)
class LevelStat:
    """τ and Ψ of a measure inside one level of an axis (:func:`within_level_tau`)."""

    n_models: int
    tau: S.Interval
    psi: S.Interval


def _values(rows, measure) -> np.ndarray:
    if isinstance(measure, str):
        if measure in ST.MEASURES:
            return ST.measure(rows, measure)
        return baseline_measure(rows, measure)
    m = check_array(measure, "measure (one value per row)")
    if m.shape != (len(rows),):
        raise ValueError(f"measure must hold one value per row ({len(rows)}), got shape {m.shape}")
    return m


def within_level_tau(rows, measure, axis: str, n_boot: int = 1000, seed: int = 0, level: float = S.LEVEL,
                     target: str = "gap_error", hypers=ST.AXES + ("n_train",)) -> dict:
    """τ and Ψ of ``measure`` with the gap inside every level of ``axis`` (Chapter 9's confound analysis).

    ``measure`` is a name of :data:`bounds_lib.studies.study.MEASURES` or :data:`BASELINES` (or
    ``"axis:KEY"``), or one value per row. For each level of ``axis``, the rows at that level are
    ranked: Kendall ``τ_b`` with its two-stage bootstrap interval (configurations, then seeds;
    :func:`bounds_lib.studies.stats.bootstrap_weights`, ``n_boot`` resamples, generator ``seed``) and
    the granulated ``Ψ`` over the other axes of ``hypers`` on the same resamples
    (:func:`bounds_lib.studies.stats.granulated_intervals`). Returns ``{level: LevelStat}``.
    """
    rows = _rows(rows)
    m = _values(rows, measure)
    if any(axis not in r["config"] for r in rows):
        raise KeyError(f"a row has no config key {axis!r}")
    others = tuple(h for h in hypers if h != axis)
    out = {}
    for v in sorted({r["config"][axis] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["config"][axis] == v]
        sub = [rows[i] for i in idx]
        W = S.bootstrap_weights(ST.clusters(sub), n_boot=n_boot, seed=seed)
        g = np.array([r[target] for r in sub])
        tau = S.kendall_interval(m[idx], g, W, level)
        psi = S.granulated_intervals(sub, m[idx], W, others, (), target, level)["Psi"]
        out[v] = LevelStat(len(idx), tau, psi)
    return out


# ----------------------------------------------------------------------------- sign errors


@dataclass(frozen=True)
class Environment:
    """A pair of configurations differing in exactly one axis (Dziugaite et al. 2020), seed by seed.

    ``pairs``: ``(i, j)`` row indices of the two models of every common seed (``i`` at the lower level);
    ``dgaps``: ``gap_j − gap_i`` per pair; ``scores``: ``½(1 − sgn Δm · sgn Δgap)`` per pair (NaN when no
    measure was given). The environment's ``dgap`` and ``sign_error`` are their means over the pairs."""

    axis: str
    pairs: tuple
    dgaps: tuple
    scores: tuple

    @property
    def dgap(self) -> float:
        return float(np.mean(self.dgaps))

    @property
    def sign_error(self) -> float:
        return float(np.mean(self.scores))


def environments(rows, m=None, target: str = "gap_error", axes=ST.AXES + ("n_train",)) -> list:
    """Every environment of ``rows`` with its gap differences and, given measure values ``m``, sign errors.

    The environments and their sign errors are those of :func:`bounds_lib.studies.study.sign_errors`, in
    the same order (a test checks it); here each keeps its rows and its ``Δgap`` per seed, for the
    filter and the distributions of Chapter 9. ``m``: a measure name or one value per row.
    """
    rows = _rows(rows)
    g = np.array([r[target] for r in rows], dtype=float)
    mv = None if m is None else _values(rows, m)
    out = []
    for h, pairs in ST.environment_pairs(rows, axes):
        dg = tuple(float(g[j] - g[i]) for i, j in pairs)
        sc = tuple(float("nan") if mv is None else float(0.5 * (1 - np.sign(mv[j] - mv[i]) * np.sign(d)))
                   for (i, j), d in zip(pairs, dg))
        out.append(Environment(h, pairs, dg, sc))
    return out


def seed_spread(rows, target: str = "gap_error") -> np.ndarray:
    """The seed-to-seed spread of the gap: ``max − min`` over the seeds of every configuration with ≥ 2."""
    rows = _rows(rows)
    by = {}
    for r, c in zip(rows, ST.clusters(rows)):
        by.setdefault(c, []).append(float(r[target]))
    return np.array([max(v) - min(v) for v in by.values() if len(v) >= 2])


@dataclass(frozen=True)
class FilterResult:
    """What :func:`seed_spread_filter` kept: the environments with their kept pairs, the environments left
    with no pair, the number of model pairs dropped, and the threshold used."""

    threshold: float
    kept: list
    dropped: list
    pairs_dropped: int


def seed_spread_filter(rows, m=None, threshold=None, by: str = "pair", target: str = "gap_error",
                       axes=ST.AXES + ("n_train",)) -> FilterResult:
    """Dziugaite et al. (2020)'s noise filter: comparisons whose gap difference is within seed noise dropped.

    The threshold is by default the median over configurations of the seed-to-seed spread of the gap
    (:func:`seed_spread`, ``max − min`` over seeds): two models whose gaps differ by no more than two
    seeds of one configuration typically do are not asked to be ranked (Chapter 9). ``by="pair"``: every
    pair of models (one seed of an environment, :func:`environments`) with ``|Δgap| ≤ threshold`` is
    dropped, and an environment is kept, with its sign error the mean over its remaining pairs, when
    any pair remains. ``by="environment"``: whole environments whose mean ``|Δgap|`` is within the
    threshold are dropped.
    """
    rows = _rows(rows)
    if by not in ("pair", "environment"):
        raise ValueError(f"by must be 'pair' or 'environment', got {by!r}")
    if threshold is None:
        spread = seed_spread(rows, target)
        if spread.size == 0:
            raise ValueError("no configuration has two seeds: give the threshold explicitly")
        threshold = float(np.median(spread))
    threshold = check_scalar(threshold, "threshold (on |Δgap|)", float, min_val=0)
    kept, dropped, n_pairs = [], [], 0
    for e in environments(rows, m, target, axes):
        if by == "environment":
            keep = range(len(e.pairs)) if abs(e.dgap) > threshold else ()
        else:
            keep = [k for k, d in enumerate(e.dgaps) if abs(d) > threshold]
        n_pairs += len(e.pairs) - len(keep)
        if keep:
            kept.append(Environment(e.axis, *(tuple(t[k] for k in keep) for t in (e.pairs, e.dgaps, e.scores))))
        else:
            dropped.append(e)
    return FilterResult(threshold, kept, dropped, n_pairs)


def sign_errors_by_axis(envs, n_boot: int = 1000, seed: int = 0, level: float = S.LEVEL) -> dict:
    """``{axis or "all": Interval}``: the mean sign error over environments with its bootstrap interval.

    Percentile interval over ``n_boot`` resamples of the environments (with replacement), per axis and
    over all; the same resampling as the pre-registered sign-error statistic of Chapter 9.
    """
    check_scalar(n_boot, "n_boot (number of resamples)", int, min_val=1)
    check_scalar(seed, "seed", int, min_val=0)
    envs = list(envs)
    if not envs or any(not np.isfinite(e.sign_error) for e in envs):
        raise ValueError("sign_errors_by_axis needs environments with sign errors (pass m to environments)")
    by = {"all": [e.sign_error for e in envs]}
    for e in envs:
        by.setdefault(e.axis, []).append(e.sign_error)
    return {k: ST._resample_mean(v, n_boot, seed, level) for k, v in by.items()}


def sign_error_distribution(envs) -> dict:
    """``{axis or "all": (sorted sign errors, empirical CDF, |Δgap| in the same order)}`` of environments.

    The whole distribution (Chapter 9): the CDF per axis, and each error beside its ``|Δgap|``.

    >>> e = [Environment("L", ((0, 1),), (0.2,), (1.0,)), Environment("L", ((2, 3),), (-0.1,), (0.0,))]
    >>> [x.tolist() for x in sign_error_distribution(e)["L"]]
    [[0.0, 1.0], [0.5, 1.0], [0.1, 0.2]]
    """
    by = {"all": list(envs)}
    for e in envs:
        by.setdefault(e.axis, []).append(e)
    out = {}
    for k, es in by.items():
        order = sorted(range(len(es)), key=lambda i: (es[i].sign_error, abs(es[i].dgap)))
        err = np.array([es[i].sign_error for i in order])
        out[k] = (err, np.arange(1, err.size + 1) / err.size, np.array([abs(es[i].dgap) for i in order]))
    return out


# ----------------------------------------------------------------------------- power


@dataclass(frozen=True)
class PowerResult:
    """Simulated power of a test at each planted effect, and the smallest effect reaching ``target``."""

    deltas: tuple
    power: tuple
    target: float
    n_sim: int

    @property
    def detectable(self) -> float:
        """The smallest planted effect whose power is at least ``target`` (NaN if none on the grid)."""
        ok = [d for d, p in zip(self.deltas, self.power) if p >= self.target]
        return float(min(ok)) if ok else float("nan")


def _design(design) -> list:
    if isinstance(design, (int, np.integer)) and not isinstance(design, bool):
        n = check_scalar(design, "design (number of models)", int, min_val=3)
        return list(range(n))
    return ST.clusters(_rows(design, "design"))


def _simulate(labels, rho_a, rho_b, noise_corr, icc, rng):
    """Gap and two measures with Gaussian dependence, sharing a cluster component of weight ``icc``."""
    ca, cb = math.sqrt(1 - rho_a ** 2), math.sqrt(1 - rho_b ** 2)
    C = np.array([[1.0, rho_a, rho_b], [rho_a, 1.0, rho_a * rho_b + noise_corr * ca * cb],
                  [rho_b, rho_a * rho_b + noise_corr * ca * cb, 1.0]])
    L = np.linalg.cholesky(C)
    keys = {k: j for j, k in enumerate(dict.fromkeys(labels))}
    idx = np.array([keys[k] for k in labels])
    shared = rng.standard_normal((len(keys), 3)) @ L.T
    own = rng.standard_normal((len(labels), 3)) @ L.T
    z = math.sqrt(icc) * shared[idx] + math.sqrt(1 - icc) * own
    return z[:, 0], z[:, 1], z[:, 2]


def detectable_delta_tau(design, power: float = 0.8, deltas=(0.0, 0.1, 0.2, 0.3, 0.4), tau_base: float = 0.3,
                         noise_corr: float = 0.5, icc: float = 0.5, paired: bool = True, n_sim: int = 50,
                         n_boot: int = 200, level: float = S.LEVEL, seed: int = 0, top=None) -> PowerResult:
    """The power of Chapter 9's bootstrap tests against planted ``Δτ``, and the smallest ``Δτ`` detected.

    ``design`` is the grid: results rows (their configurations are the bootstrap clusters) or a number
    of models (each its own cluster). Each of ``n_sim`` simulated grids draws, per model, a gap and two
    measures from a Gaussian copula: ``corr(measure, gap) = ρ = sin(πτ/2)``, so the population Kendall
    τ is exactly ``τ`` (Greiner's relation), with ``τ_b = tau_base`` and ``τ_a = tau_base + Δ``; the two
    measures' residuals correlate by ``noise_corr``; a share ``icc`` of every variable's variance is
    common to a configuration's seeds (which leaves each pair's τ unchanged). ``paired``: the test of
    ``τ_a − τ_b > 0`` by :func:`bounds_lib.studies.study.paired_interval`; otherwise the one-sample test
    ``τ_a > 0`` (``tau_base`` ignored, ``τ_a = Δ``). A grid *detects* the effect when the two-stage
    bootstrap interval (``n_boot`` resamples, ``level``) lies above 0 — the pre-registered rule with one
    bootstrap seed instead of ten, so slightly more lenient. ``top``: top clusters of the design's rows
    (the replication's teacher draws), resampled first as :func:`bounds_lib.studies.stats.bootstrap_weights` does.
    """
    labels = _design(design)
    power = check_scalar(power, "power", float, min_val=0, max_val=1, include_boundaries="neither")
    tau_base = check_scalar(tau_base, "tau_base", float, min_val=-1, max_val=1, include_boundaries="neither")
    noise_corr = check_scalar(noise_corr, "noise_corr", float, min_val=-1, max_val=1, include_boundaries="neither")
    icc = check_scalar(icc, "icc (share of variance common to a configuration)", float, min_val=0, max_val=1,
                       include_boundaries="left")
    n_sim = check_scalar(n_sim, "n_sim (number of simulated grids)", int, min_val=1)
    seed = check_scalar(seed, "seed", int, min_val=0)
    d = check_array(deltas, "deltas (planted effects)", allow_empty=False)
    base = tau_base if paired else 0.0
    if d.ndim != 1 or np.any(np.abs(base + d) >= 1):
        raise ValueError(f"deltas must be a list with |{'tau_base + ' if paired else ''}delta| < 1, got {d.tolist()}")
    rng = np.random.default_rng(seed)
    rho_b = math.sin(math.pi * base / 2)
    out = []
    for delta in d:
        rho_a, hits = math.sin(math.pi * (base + delta) / 2), 0
        for _ in range(n_sim):
            g, a, b = _simulate(labels, rho_a, rho_b, noise_corr, icc, rng)
            W = S.bootstrap_weights(labels, n_boot=n_boot, seed=int(rng.integers(2 ** 31)), top=top)
            iv = ST.paired_interval(a, b, g, W, level) if paired else S.kendall_interval(a, g, W, level)
            hits += iv.lo > 0
        out.append(hits / n_sim)
    return PowerResult(tuple(d.tolist()), tuple(out), power, n_sim)


def detectable_psi(rows, hypers, fixed=(), power: float = 0.8, deltas=(0.0, 0.1, 0.2, 0.3), icc: float = 0.5,
                   n_sim: int = 50, n_boot: int = 200, level: float = S.LEVEL, seed: int = 0, top=None) -> PowerResult:
    """The power of Chapter 9's one-sample test ``Ψ > 0`` (the within-axes ranking) against a planted ``τ = Δ``.

    As :func:`detectable_delta_tau` with one measure: per simulated grid, a gap and a measure from a
    Gaussian copula with ``ρ = sin(πΔ/2)`` and a share ``icc`` common to a configuration's seeds; the
    gap replaces ``gap_error`` in ``rows``, whose configurations make Ψ's groups (``hypers``, ``fixed``)
    and the bootstrap clusters. Every pair of models has Kendall τ equal to Δ, so every group's τ, every
    ``ψ_h`` and Ψ have expectation Δ. Detection: the granulated bootstrap interval
    (:func:`bounds_lib.studies.stats.granulated_intervals`, ``n_boot`` resamples, one seed) above 0.
    """
    rows = _rows(rows, "rows")
    labels = _design(rows)
    power = check_scalar(power, "power", float, min_val=0, max_val=1, include_boundaries="neither")
    icc = check_scalar(icc, "icc (share of variance common to a configuration)", float, min_val=0, max_val=1,
                       include_boundaries="left")
    n_sim = check_scalar(n_sim, "n_sim (number of simulated grids)", int, min_val=1)
    rng = np.random.default_rng(check_scalar(seed, "seed", int, min_val=0))
    d = check_array(deltas, "deltas (planted effects)", allow_empty=False)
    if d.ndim != 1 or np.any(np.abs(d) >= 1):
        raise ValueError(f"deltas must be a list with |delta| < 1, got {d.tolist()}")
    out = []
    for delta in d:
        rho, hits = math.sin(math.pi * delta / 2), 0
        for _ in range(n_sim):
            g, a, _ = _simulate(labels, rho, 0.0, 0.0, icc, rng)
            sim = [{**r, "gap_error": float(x)} for r, x in zip(rows, g)]
            W = S.bootstrap_weights(labels, n_boot=n_boot, seed=int(rng.integers(2 ** 31)), top=top)
            hits += S.granulated_intervals(sim, a, W, hypers, fixed, level=level)["Psi"].lo > 0
        out.append(hits / n_sim)
    return PowerResult(tuple(d.tolist()), tuple(out), power, n_sim)


# ----------------------------------------------------------------------------- exact tests


def sign_test(k_plus: int, k_minus: int) -> float:
    """Exact two-sided sign test: the binomial p-value of ``k_plus`` successes in ``k_plus + k_minus``
    trials at ½ (ties dropped beforehand), as Chapter 9 reports beside the bootstrap.

    >>> round(sign_test(7, 2), 4)   # 2 · (C(9,7) + C(9,8) + C(9,9)) / 2⁹ = 92/512
    0.1797
    """
    from scipy.stats import binomtest

    k_plus = check_scalar(k_plus, "k_plus (positive differences)", int, min_val=0)
    k_minus = check_scalar(k_minus, "k_minus (negative differences)", int, min_val=0)
    if k_plus + k_minus == 0:
        return 1.0
    return float(binomtest(k_plus, k_plus + k_minus, 0.5, alternative="two-sided").pvalue)


def _wilcoxon_exact(d) -> float:
    """Two-sided exact p-value of the signed-rank statistic by enumerating all ``2^n`` sign flips
    (midranks for tied ``|d|``: the exact conditional test, valid with ties)."""
    from scipy.stats import rankdata

    r = rankdata(np.abs(d))
    t = float(r[d > 0].sum())
    centre = r.sum() / 2
    flips = (np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1
    null = flips @ r
    return float(np.mean(np.abs(null - centre) >= abs(t - centre) - 1e-9))


def exact_paired_tests(differences) -> dict:
    """The sign test and the Wilcoxon signed-rank test of paired differences, two-sided (Chapter 9).

    Zero differences are dropped (both tests are about the sign of the non-zero ones). The sign test
    is :func:`sign_test`; the Wilcoxon p-value is exact by enumeration of all sign flips when at most
    :data:`EXACT_WILCOXON_MAX` differences remain (``wilcoxon_method = "exact"``, valid with tied
    ``|d|``), otherwise SciPy's ``wilcoxon`` with its default method (``"scipy"``).

    >>> t = exact_paired_tests([0.0, 0.0, 1.0, 2.0, 3.0])
    >>> t["n_zero"], t["n_plus"], t["wilcoxon_p"]   # all three positive: 2 · 1/8
    (2, 3, 0.25)
    """
    from scipy.stats import wilcoxon

    d = check_array(differences, "differences", allow_empty=False)
    if d.ndim != 1:
        raise ValueError(f"differences must be one-dimensional, got shape {d.shape}")
    nz = d[d != 0]
    out = {"n": int(d.size), "n_plus": int((nz > 0).sum()), "n_minus": int((nz < 0).sum()),
           "n_zero": int(d.size - nz.size)}
    out["sign_p"] = sign_test(out["n_plus"], out["n_minus"])
    if nz.size == 0:
        out.update(wilcoxon_p=1.0, wilcoxon_method="exact")
    elif nz.size <= EXACT_WILCOXON_MAX:
        out.update(wilcoxon_p=_wilcoxon_exact(nz), wilcoxon_method="exact")
    else:
        out.update(wilcoxon_p=float(wilcoxon(nz).pvalue), wilcoxon_method="scipy")
    return out
