"""Chapter 9's statistics read between their controls, the power of every test and the amended verdicts.

:mod:`bounds_lib.studies.controls` computes the controls and the confound analyses of Chapter 9 on the
committed rows; this module puts them to work the way amendment 1 of the pre-registration
(``bounds_lib/data/study_amendment_1.md``) reads them:

* **measures by name** — :func:`measure_values` accepts the study's measures, the baselines of
  :func:`bounds_lib.studies.controls.baseline_measure` and the controls ``"control:M"`` (an exact held-out
  estimate on ``M`` fresh samples) and ``"shuffled:NAME"`` (a measure permuted across models);
* **the floor** — the permutation range of a statistic on a shuffled measure (:func:`permuted_taus`,
  :func:`permuted_psis`, :func:`permuted_sign_errors`, :func:`permutation_range`), computed for many
  permutations at once;
* **the manipulation check** — :func:`manipulation_check`: the positive control ranks first by every
  statistic and the shuffled measure sits inside its permutation range;
* **shared resamples** — :func:`sweep` gives :func:`bounds_lib.studies.study.seed_sweep`'s result with the
  bootstrap weights of every seed drawn once (:func:`shared_weights`) instead of once per statistic;
* **power** — :func:`power_nuisance` sets the simulation's nuisance parameters from the data,
  :func:`power_curve` runs :func:`bounds_lib.studies.controls.detectable_delta_tau` one effect at a time
  (each reproducible on its own), :func:`committed_power` the whole table, stored as
  ``study_power.json`` (:func:`load_power`);
* **verdicts** — :func:`amended_verdict`, the amendment's vocabulary (supported, borderline, refuted,
  not testable at this power) from the intervals under every bootstrap seed, the power and the exact
  tests.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ..core.validation import check_array, check_scalar
from . import controls as C
from . import stats as S
from . import study as ST

__all__ = ["CONTROLS", "BASELINE_LABELS", "DELTA_OF_INTEREST", "POWER_DELTAS", "POWER_TESTS", "measure_values",
           "shuffled_within", "label", "permuted_taus", "permuted_psis", "permuted_sign_errors", "permutation_range",
           "ControlCheck", "manipulation_check", "shared_weights", "sweep", "power_nuisance", "power_curve",
           "psi_power_curve", "committed_power", "load_power", "amended_verdict", "SignErrors",
           "sign_error_report", "cmi_floor", "interval_cell", "markdown_table", "plot_sign_error_cdf",
           "sign_error_sweep", "Claim", "p_text", "amended_line"]

#: The controls of Chapter 9's tables, two exact held-out estimates (ceiling) and a shuffled μ_ours (floor).
CONTROLS = {"control:4096": "positive control, m = 4096", "control:128": "positive control, m = 128",
            "shuffled:B_ours": "shuffled μ_ours (negative control)"}
#: Hyperparameter indicators and norm baselines ranked like the measures, with their labels.
BASELINE_LABELS = {"axis:label_noise": "η indicator", "axis:L": "L indicator", "axis:N": "N indicator",
                   "axis:n_train": "n indicator", "sum_frobenius": "log Σ‖W‖_F",
                   "prod_spectral": "log Π‖W‖₂", "prod_spectral_margin": "log Π‖W‖₂·‖w‖/(γ√n)",
                   "r_star": "oracle r*"}
#: Smallest effects of interest, by kind of statistic (amendment 1, section 3).
DELTA_OF_INTEREST = {"tau": 0.10, "diff": 0.10, "psi": 0.10, "sign_error": 0.05, "pstar_rank": 0.05}
#: The planted effects of the power simulation, 0, 0.05, ..., 0.50.
POWER_DELTAS = tuple(round(0.05 * i, 2) for i in range(11))
#: The simulated tests on the committed grid, ``(id, a, b or None, level of η or None)`` each.
POWER_TESTS = (("tau", "B_ours", None, None), ("H3", "B_ours", "B_edelman", None),
               ("H4", "B_ours", "steps_taken", None), ("H5", "B_ours", "neg_log_n", None),
               ("H8", "pac_bayes", "B_ours", None), ("A1", "B_ours", None, 0.0), ("A2", "B_ours", None, 0.05),
               ("A3", "B_ours", "n_params", 0.0))
_POWER_FILE = "study_power.json"


def measure_values(rows, name: str, seed: int = 0) -> np.ndarray:
    """One value per row of the measure, baseline or control called ``name`` (Chapter 9's tables).

    ``"control:M"``: :func:`bounds_lib.studies.controls.positive_control` with ``m = M``;
    ``"shuffled:NAME"``: :func:`bounds_lib.studies.controls.shuffled_control` of ``NAME``'s values on
    ``rows`` (so a subset is shuffled within itself); a name of :data:`bounds_lib.studies.study.MEASURES`;
    otherwise :func:`bounds_lib.studies.controls.baseline_measure`.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if name.startswith("control:"):
        return C.positive_control(rows, int(name[8:]), seed=seed)
    if name.startswith("shuffled:"):
        return C.shuffled_control(measure_values(rows, name[9:]), seed=seed)
    if name in ST.MEASURES:
        return ST.measure(rows, name)
    return C.baseline_measure(rows, name)


def shuffled_within(rows, values, axis: str, seed: int = 0) -> np.ndarray:
    """``values`` permuted within every level of ``axis`` (each level by ``shuffled_control``, ``seed``).

    The negative control of a within-level analysis of Chapter 9: computed on the same models.

    >>> rows = [{"config": {"a": i % 2}} for i in range(6)]
    >>> v = shuffled_within(rows, np.arange(6.0), "a")
    >>> sorted(v[::2].tolist()), sorted(v[1::2].tolist())
    ([0.0, 2.0, 4.0], [1.0, 3.0, 5.0])
    """
    v = check_array(values, "values (a measure, one per model)", allow_empty=False)
    out = np.empty_like(v)
    for level in {r["config"][axis] for r in rows}:
        idx = [i for i, r in enumerate(rows) if r["config"][axis] == level]
        out[idx] = C.shuffled_control(v[idx], seed=seed)
    return out


def label(name: str) -> str:
    """The label a table of Chapter 9 prints for ``name``."""
    return {**CONTROLS, **BASELINE_LABELS, **ST.MEASURES}.get(name, name)


# ----------------------------------------------------------------------------- the floor


def _tau_b_rows(X, y) -> np.ndarray:
    """Kendall ``τ_b`` of every row of ``X`` with ``y`` (NaN where a row or ``y`` is constant)."""
    i, j = np.triu_indices(y.size, k=1)
    sy = np.sign(y[j] - y[i])
    sx = np.sign(X[:, j] - X[:, i])
    den = np.sqrt((sx != 0).sum(axis=1) * float((sy != 0).sum()))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sx * sy).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _permutations(values, n_perm: int) -> np.ndarray:
    v = check_array(values, "values (a measure, one per model)", allow_empty=False)
    n_perm = check_scalar(n_perm, "n_perm (number of permutations)", int, min_val=1)
    return np.stack([C.shuffled_control(v, seed=s) for s in range(n_perm)])


def permuted_taus(values, target, n_perm: int = 1000) -> np.ndarray:
    """``τ_b`` with ``target`` of ``shuffled_control(values, seed=s)`` for ``s = 0 … n_perm − 1``.

    The permutation distribution of Chapter 9's negative control, all permutations at once.

    >>> t = permuted_taus([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], n_perm=50)
    >>> bool(np.all(np.abs(t) <= 1)), t.shape
    (True, (50,))
    """
    X = _permutations(values, n_perm)
    y = check_array(target, "target (the gap, one per model)")
    if y.shape != X.shape[1:]:
        raise ValueError(f"target must hold one value per model ({X.shape[1]}), got shape {y.shape}")
    return _tau_b_rows(X, y)


def permuted_psis(rows, values, n_perm: int = 1000, hypers=ST.AXES + ("n_train",),
                  target: str = "gap_error", fixed=()) -> np.ndarray:
    """The granulated ``Ψ`` of ``shuffled_control(values, seed=s)`` for ``s = 0 … n_perm − 1``.

    Same definition as :func:`bounds_lib.studies.stats.granulated_kendall` (groups whose gap is
    constant skipped, a measure constant in a group scores 0 there), every permutation at once;
    ``fixed``: config keys held fixed in every group, as there.
    """
    X = _permutations(values, n_perm)
    g = np.array([r[target] for r in rows], dtype=float)
    psi = []
    for h in hypers:
        taus = [np.nan_to_num(_tau_b_rows(X[:, idx], g[idx]), nan=0.0)
                for idx in S._groups(rows, h, hypers, fixed) if np.ptp(g[idx]) > 0]
        if taus:
            psi.append(np.mean(taus, axis=0))
    return np.mean(psi, axis=0) if psi else np.full(n_perm, np.nan)


def permuted_sign_errors(envs, values, n_perm: int = 1000) -> np.ndarray:
    """Mean sign error over the environments ``envs`` of ``shuffled_control(values, seed=s)`` per ``s``.

    ``envs``: :func:`bounds_lib.studies.controls.environments` (or a filter's kept environments); each
    environment scores the mean over its pairs of ``½(1 − sgn Δm · sgn Δgap)``, as there.
    """
    X = _permutations(values, n_perm)
    out = np.zeros(n_perm)
    envs = list(envs)
    for e in envs:
        i, j = (np.array(t) for t in zip(*e.pairs))
        s = 0.5 * (1 - np.sign(X[:, j] - X[:, i]) * np.sign(np.array(e.dgaps)))
        out += s.mean(axis=1)
    return out / len(envs)


def permutation_range(draws, level: float = S.LEVEL) -> tuple:
    """The central ``level`` range of a permutation distribution: its two quantiles."""
    d = check_array(draws, "draws", allow_empty=False)
    d = d[np.isfinite(d)]
    a = (1 - level) / 2
    return float(np.quantile(d, a)), float(np.quantile(d, 1 - a))


@dataclass(frozen=True)
class ControlCheck:
    """Amendment 1's manipulation check of one statistic: which measure scores best, whether it is the
    positive control, and whether the shuffled measure's value lies in its permutation range."""

    statistic: str
    best: str
    shuffled: float
    floor: tuple

    @property
    def ceiling_ok(self) -> bool:
        return self.best.startswith("control:")

    @property
    def floor_ok(self) -> bool:
        return self.floor[0] <= self.shuffled <= self.floor[1]

    @property
    def passed(self) -> bool:
        return self.ceiling_ok and self.floor_ok


def manipulation_check(statistic: str, values: dict, floor: tuple, smaller_is_better: bool = False,
                       shuffled: str = "shuffled:B_ours", positive: str = "control:4096") -> ControlCheck:
    """Chapter 9's manipulation check for ``statistic`` given ``{name: value}`` over all ranked measures.

    (a) the positive control ``positive`` must score best of all measures (largest τ, Ψ, CMI;
    smallest sign error with ``smaller_is_better``); (b) the shuffled measure's value must lie inside
    ``floor``, its permutation range. Names that are other controls (``control:*`` besides
    ``positive``) compete too.

    >>> c = manipulation_check("τ", {"control:4096": 0.9, "B_ours": 0.3, "shuffled:B_ours": 0.01}, (-0.1, 0.1))
    >>> c.best, c.passed
    ('control:4096', True)
    """
    finite = {k: v for k, v in values.items() if np.isfinite(v)}
    if positive not in finite or shuffled not in finite:
        raise KeyError(f"values must include {positive!r} and {shuffled!r}")
    pick = min if smaller_is_better else max
    best = pick(finite, key=finite.get)
    if finite[best] == finite[positive]:
        best = positive
    return ControlCheck(statistic, best, float(finite[shuffled]), tuple(map(float, floor)))


# ----------------------------------------------------------------------------- shared resamples


def shared_weights(rows, seeds=range(10), n_boot: int = 1000) -> list:
    """The two-stage bootstrap weights of ``rows`` for every seed of ``seeds``, drawn once for all statistics."""
    labels = ST.clusters(rows)
    return [S.bootstrap_weights(labels, n_boot=n_boot, seed=s) for s in seeds]


def sweep(h: ST.Hypothesis, rows, weights, seeds=range(10), n_boot: int = 1000) -> ST.SweepResult:
    """:func:`bounds_lib.studies.study.seed_sweep` of ``h`` with precomputed ``weights`` (same result).

    ``weights[i]`` must be :func:`shared_weights`'s resamples for ``seeds[i]``; τ-based kinds reuse them,
    the others resample as the study does.
    """
    seeds = list(seeds)
    if len(weights) != len(seeds):
        raise ValueError(f"one weight matrix per seed: {len(weights)} for {len(seeds)} seeds")
    uses_w = h.kind in ("tau", "diff", "psi")
    return ST.SweepResult(tuple(ST.statistic(h, rows, s, n_boot, W=W if uses_w else None)
                                for s, W in zip(seeds, weights)), h.claimed)


# ----------------------------------------------------------------------------- power


def _level_rows(rows, level):
    return list(rows) if level is None else [r for r in rows if r["config"]["label_noise"] == level]


def power_nuisance(rows, a: str, b: str | None = None, level=None) -> dict:
    """The power simulation's nuisance parameters from the data, as amendment 1 (section 3) fixes them.

    ``tau_base``: τ of the competitor ``b`` with the gap (0 for a one-sample test); ``noise_corr``:
    ``sin(π τ_ab / 2)`` with ``τ_ab`` the Kendall τ between the two measures (0 without ``b``); ``icc``:
    the gap's ICC(1) over the configurations of ``rows`` with two analysed seeds (all levels). With
    ``level``, τ's are computed within that level of η.
    """
    sub = _level_rows(rows, level)
    g = np.array([r["gap_error"] for r in sub])
    labels = ST.clusters(rows)
    gap_all = np.array([r["gap_error"] for r in rows])
    two = [i for i, c in enumerate(labels) if labels.count(c) == 2]
    icc = S.intraclass_correlation(gap_all[two], [labels[i] for i in two])
    if b is None:
        return {"tau_base": 0.0, "noise_corr": 0.0, "icc": icc, "n_models": len(sub)}
    ma, mb = measure_values(sub, a), measure_values(sub, b)
    return {"tau_base": S.kendall_tau(mb, g), "noise_corr": math.sin(math.pi * S.kendall_tau(ma, mb) / 2),
            "icc": icc, "n_models": len(sub)}


def power_curve(design, deltas=POWER_DELTAS, paired: bool = True, seed: int = 0, **kw) -> C.PowerResult:
    """:func:`bounds_lib.studies.controls.detectable_delta_tau` one planted effect at a time.

    The ``k``-th effect runs with generator seed ``seed + k``, so any single entry of the curve can be
    recomputed alone (Chapter 9's stored power table is tested that way). ``kw`` passes ``tau_base``,
    ``noise_corr``, ``icc``, ``n_sim``, ``n_boot``, ``power``.
    """
    d = check_array(deltas, "deltas (planted effects)", allow_empty=False)
    runs = [C.detectable_delta_tau(design, deltas=(float(x),), paired=paired, seed=seed + k, **kw)
            for k, x in enumerate(d)]
    return C.PowerResult(tuple(d.tolist()), tuple(r.power[0] for r in runs), runs[0].target, runs[0].n_sim)


def psi_power_curve(rows, hypers, fixed=(), deltas=POWER_DELTAS, seed: int = 0, **kw) -> C.PowerResult:
    """:func:`bounds_lib.studies.controls.detectable_psi` (the power of Chapter 9's test ``Ψ > 0``) one planted
    effect at a time, the ``k``-th with generator seed ``seed + k`` as :func:`power_curve`. ``kw`` passes
    ``icc``, ``n_sim``, ``n_boot``, ``top``, ``power``."""
    d = check_array(deltas, "deltas (planted effects)", allow_empty=False)
    runs = [C.detectable_psi(rows, hypers, fixed, deltas=(float(x),), seed=seed + k, **kw) for k, x in enumerate(d)]
    return C.PowerResult(tuple(d.tolist()), tuple(r.power[0] for r in runs), runs[0].target, runs[0].n_sim)


def committed_power(rows, n_sim: int = 100, n_boot: int = 200, seed: int = 0) -> dict:
    """The power table of Chapter 9 on the committed grid: every test of :data:`POWER_TESTS`.

    Returns a JSON-ready dict: the settings and, per test id, its nuisance parameters, the planted
    effects, the simulated power at each and ``d80`` (the smallest effect with power ≥ 0.8, None if
    none). The one-sample τ test on all models (id ``"tau"``) serves both τ > 0 hypotheses.
    """
    out = {"n_sim": n_sim, "n_boot": n_boot, "seed": seed, "deltas": list(POWER_DELTAS), "tests": {}}
    for tid, a, b, level in POWER_TESTS:
        nu = power_nuisance(rows, a, b, level)
        sub = _level_rows(rows, level)
        pr = power_curve(sub, POWER_DELTAS, paired=b is not None, seed=seed, n_sim=n_sim, n_boot=n_boot,
                         tau_base=nu["tau_base"], noise_corr=nu["noise_corr"], icc=max(nu["icc"], 0.0))
        d80 = pr.detectable
        out["tests"][tid] = {"a": a, "b": b, "level": level, **nu, "power": list(pr.power),
                             "d80": None if not np.isfinite(d80) else d80}
    return out


def load_power() -> dict:
    """The stored power table of :func:`committed_power` (``bounds_lib/data/study_power.json``)."""
    text = resources.files("bounds_lib").joinpath("data", _POWER_FILE).read_text()
    return json.loads(text)


# ----------------------------------------------------------------------------- verdicts


def amended_verdict(signs, ends, claimed: str = "+", delta: float = 0.1, d80=None, exact=None) -> str:
    """Amendment 1's verdict from the interval signs and claimed-side ends under every bootstrap seed.

    ``signs``: ``"+"``, ``"-"`` or ``"0"`` per seed; ``ends``: each interval's claimed-side end (its upper
    end for a ``"+"`` claim); ``delta``: the smallest effect of interest; ``d80``: the smallest effect
    detected with 80 % power (None: not simulated); ``exact``: two-sided p-values of the exact tests
    with the sign of their estimate, ``[(p, sign), …]`` (None where no exact test applies).
    *supported*: every interval excludes 0 on the claimed side and every exact test has ``p < 0.05``
    with the claimed sign; *borderline*: some seeds but not all, or the bootstrap and the exact tests
    disagree; *refuted (reversed)*, *refuted (no effect of interest)*: every claimed-side end below
    ``delta``; *refuted (no effect shown)*: ``d80 ≤ delta``; otherwise *not testable at this power*
    (``"power not simulated"`` when ``d80`` is None).

    >>> amended_verdict("+++", [0.3] * 3, exact=[(0.18, "+")]), amended_verdict("000", [0.4] * 3, d80=0.3)
    ('borderline', 'not testable at this power')
    """
    signs, other = list(signs), {"+": "-", "-": "+"}[claimed]
    exact_ok = exact is None or all(p < 0.05 and s == claimed for p, s in exact)
    if all(s == claimed for s in signs):
        return "supported" if exact_ok else "borderline"
    if any(s == claimed for s in signs):
        return "borderline"
    if all(s == other for s in signs):
        return "refuted (reversed)"
    toward = [e if claimed == "+" else -e for e in ends]
    if all(e < delta for e in toward):
        return "refuted (no effect of interest)"
    if d80 is None:
        return "power not simulated"
    return "refuted (no effect shown)" if d80 <= delta else "not testable at this power"


# ----------------------------------------------------------------------------- the tables of Chapter 9


@dataclass(frozen=True)
class SignErrors:
    """Sign errors of one measure (:func:`sign_error_report`): intervals over all environments and over
    those the seed-spread filter keeps, per axis, the worst environment of each, and the environments."""

    unfiltered: dict
    filtered: dict
    worst: float
    worst_filtered: float
    envs: list
    kept: list


def sign_error_report(rows, values, threshold=None, n_boot: int = 1000, seed: int = 0) -> SignErrors:
    """Chapter 9's sign errors of measure ``values``: unfiltered and after the seed-spread filter.

    :func:`bounds_lib.studies.controls.sign_errors_by_axis` (mean with a percentile interval over
    resampled environments, per axis and ``"all"``) on :func:`bounds_lib.studies.controls.environments`
    and on the environments :func:`bounds_lib.studies.controls.seed_spread_filter` keeps (pairs within
    the seed-to-seed spread dropped, ``threshold`` its default median spread when None).
    """
    envs = C.environments(rows, values)
    kept = C.seed_spread_filter(rows, values, threshold=threshold).kept
    return SignErrors(C.sign_errors_by_axis(envs, n_boot, seed), C.sign_errors_by_axis(kept, n_boot, seed),
                      max(e.sign_error for e in envs), max(e.sign_error for e in kept), envs, kept)


def cmi_floor(rows, values, n_perm: int = 1000, k: int = 1, level: float = S.LEVEL) -> tuple:
    """The permutation range of the conditional mutual information ``𝒦_k`` of a shuffled measure.

    :func:`bounds_lib.studies.study.conditional_mi` of ``shuffled_control(values, seed=s)`` for
    ``s = 0 … n_perm − 1``; returns the central ``level`` range (Chapter 9's CMI floor).
    """
    n_perm = check_scalar(n_perm, "n_perm (number of permutations)", int, min_val=1)
    v = check_array(values, "values (a measure, one per model)", allow_empty=False)
    draws = [ST.conditional_mi(rows, C.shuffled_control(v, seed=s), k=k)[0] for s in range(n_perm)]
    return permutation_range(draws, level)


def interval_cell(iv: S.Interval, digits: int = 2) -> str:
    """An interval for a table cell, ``n/a`` when undefined (:func:`bounds_lib.studies.stats.format_interval`)."""
    return S.format_interval(iv, digits) if np.isfinite(iv.value) else "n/a"


def markdown_table(header, body) -> str:
    """A Markdown table from a header and rows of cells (strings)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in body])


def plot_sign_error_cdf(panels: dict, floor, ceiling, labels=("shuffled μ_ours", "positive control, m = 4096")):
    """Empirical CDFs of the filtered sign error, one small panel per measure (Chapter 9).

    ``panels``: ``{title: sign errors per environment}``; ``floor`` and ``ceiling``: the sign errors of
    the negative and positive controls, drawn in every panel in grey and green for reference.
    Two panels per row; a shared colour key below.
    """
    from ..core.style import book_subplots

    n = len(panels)
    fig, axes = book_subplots((n + 1) // 2, 2, height=2.3, sharex=True, sharey=True)
    axes = np.atleast_1d(axes).ravel()
    for ax, (title, errs) in zip(axes, panels.items()):
        for v, colour, lab in ((floor, "0.55", labels[0]), (ceiling, "C2", labels[1]), (errs, "C0", "measure")):
            x = np.sort(np.asarray(v, dtype=float))
            ax.step(np.r_[0, x, 1], np.r_[0, np.arange(1, x.size + 1) / x.size, 1], where="post", color=colour,
                    label=lab)
        ax.set_title(title)
        ax.set_xlim(-0.03, 1.03)
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[::2]:
        ax.set_ylabel("share of environments")
    for ax in axes[max(0, n - 2):n]:
        ax.set_xlabel("sign error")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig


def sign_error_sweep(envs, seeds=range(10), n_boot: int = 1000) -> ST.SweepResult:
    """``½ − mean sign error`` over ``envs`` with its interval under every bootstrap seed (claimed ``+``).

    The statistic of the filtered sign-error hypothesis of Chapter 9's amendment: environments
    resampled as :func:`bounds_lib.studies.controls.sign_errors_by_axis` does.
    """
    ivs = []
    for s in seeds:
        iv = C.sign_errors_by_axis(envs, n_boot, s)["all"]
        ivs.append(S.Interval(0.5 - iv.value, 0.5 - iv.hi, 0.5 - iv.lo, iv.n_boot))
    return ST.SweepResult(tuple(ivs), "+")


@dataclass(frozen=True)
class Claim:
    """One line of Chapter 9's verdict table: a hypothesis, its statistic under every bootstrap seed,
    its kind (for the effect of interest), the power ``d80`` (None: not simulated), the exact tests
    ``[(name, p, sign)]`` and the pre-registered verdict (None for an exploratory line)."""

    id: str
    text: str
    sweep: ST.SweepResult
    kind: str
    d80: float | None = None
    exact: tuple = ()
    preregistered: str | None = None


def p_text(p: float) -> str:
    """A p-value for a table: ``p = 0.180`` with three decimals, ``p < 0.001`` below that (never ``0.000``).

    >>> p_text(0.18), p_text(0.0004), p_text(0.001)
    ('p = 0.180', 'p < 0.001', 'p = 0.001')
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a p-value is in [0, 1], got {p!r}")
    return "p < 0.001" if p < 0.0005 else f"p = {p:.3f}"


def amended_line(c: Claim) -> tuple:
    """``(id, text, estimate [interval] at seed 0, seeds with the claimed sign, exact tests, d80,
    pre-registered verdict, amendment 1's verdict)``, cells of Chapter 9's verdict table.

    Intervals print with 2 decimals, or 4 where an endpoint that is not 0 would print as 0.
    """
    sw = c.sweep
    ends = [e for iv in sw.intervals for e in (iv.lo, iv.hi) if np.isfinite(e)]
    d = 4 if any(0 < abs(e) < 0.005 for e in ends) else 2
    claimed_end = [iv.hi if sw.claimed == "+" else iv.lo for iv in sw.intervals]
    exact = [(p, s) for _, p, s in c.exact] or None
    v = amended_verdict([iv.sign for iv in sw.intervals], claimed_end, sw.claimed, DELTA_OF_INTEREST[c.kind],
                        c.d80, exact)
    tests = "; ".join(f"{n} {p_text(p)}" for n, p, _ in c.exact) or "—"
    power = "not simulated" if c.d80 is None else (f"{c.d80:.2f}" if np.isfinite(c.d80) else "> 0.50")
    return (c.id, c.text, S.format_interval(sw.intervals[0], d), f"{sw.n_claimed} of {len(sw.intervals)}", tests,
            power, c.preregistered or "exploratory", v)
