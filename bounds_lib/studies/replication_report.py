"""Chapter 9's confirmatory analysis: the pre-registered replication grid, read as amendment 1 fixes it.

Amendment 1 of the pre-registration (``bounds_lib/data/study_amendment_1.md``, sections 5–6) re-tests
the nine pre-registered hypotheses, a filtered sign error, a teacher-clustered p* test and three
within-level hypotheses on a new grid with three teacher draws per rank and five seeds per
configuration. This module applies :mod:`bounds_lib.studies.verdicts`' machinery to that grid:

* **the three-stage bootstrap** — :func:`weights`: teacher draws (the top cluster,
  :func:`bounds_lib.studies.replication.teacher_clusters`), configurations within a drawn teacher, seeds
  within a drawn configuration;
* **groups and environments within a teacher draw** — :func:`rank_intervals` (τ, ψ per axis, Ψ with
  the draw held fixed in every group) and :func:`environments` (pairs of configurations differing in
  one axis, matched by seed *and* teacher draw), :func:`sign_error_report` with the seed-spread filter;
* **the hypotheses** — :func:`hypothesis_sweep` (a statistic under every bootstrap seed),
  :func:`pstar_pairs` and :func:`pstar_cluster_sweep` (the teacher draw as the cluster);
* **the confound tables** — :func:`confound_tables`: the gap's variance per axis and the conditional
  mutual information with its permutation floor;
* **the exclusion rule's sensitivity** — :func:`sensitivity_sets` and :func:`sensitivity`: every
  confirmatory statistic again (a) with the excluded models kept at their 3000-step state and (b) with
  the noisy arm retrained for 6000 steps (amendment 1, section 6);
* **power at this grid's size** — :func:`replication_power`, the simulation of
  :func:`bounds_lib.studies.verdicts.power_curve` on the replication's design with the nuisance
  parameters recorded from the committed grid, stored as ``study_power_replication.json``
  (:func:`load_replication_power`).
"""
from __future__ import annotations

import json
from importlib import resources

import numpy as np

from . import controls as C
from . import stats as S
from . import study as ST
from . import verdicts as V
from .replication import teacher_clusters

__all__ = ["HYPERS", "FIXED", "REPLICATION_TESTS", "POWER_DELTAS", "weights", "rank_intervals", "environments",
           "sign_error_report", "hypothesis_sweep", "pstar_pairs", "pstar_cluster_sweep",
           "replication_power", "load_replication_power", "RANKED", "WITHIN", "DIGITS", "DIGITS_HYPERS",
           "claims_sweeps", "ranking", "within_levels", "digits_ranking", "confound_tables", "sensitivity_sets",
           "sensitivity", "confirmatory_report", "load_report", "interval"]

#: The axes the replication varies. Learning rate and weight decay are held at their base values, and a
#: group "varying" an axis held fixed would hold only the seeds of one configuration.
HYPERS = ("L", "N", "label_noise", "teacher_rank", "n_train")
#: Config keys held fixed in every group and environment (the teacher draw).
FIXED = ("teacher_seed",)
#: The simulated tests of the replication, ``(id, a, b or None, level of η or None)``, as on the committed grid.
REPLICATION_TESTS = V.POWER_TESTS
#: The planted effects simulated on the replication, 0, 0.05, ..., 0.30 (``d80`` above 0.30 is reported as such).
POWER_DELTAS = tuple(round(0.05 * i, 2) for i in range(7))
_POWER_FILE = "study_power_replication.json"
_REPORT_FILE = "study_replication_report.json"
#: The measures of the replication's ranking table (ceiling, the measures, the baselines, floor).
RANKED = ("control:4096", "control:128", *ST.MEASURES, *V.BASELINE_LABELS, "shuffled:B_ours")
#: The measures ranked within each level of η (the shuffled one permuted within the level).
WITHIN = ("control:4096", "control:128", "B_ours", "n_params", "B_edelman", "pac_bayes", "shuffled:B_ours")
#: The measures ranked on digits, without a positive control (digits' gap is itself a held-out estimate).
DIGITS = ("B_ours", "theta", "B_edelman", "spectral", "pac_bayes", "dist_init", "n_params", "axis:label_noise",
          "shuffled:B_ours")
#: The axes of the digits grid.
DIGITS_HYPERS = ("L", "N", "label_noise")


def weights(rows, seeds=range(10), n_boot: int = 1000) -> list:
    """The three-stage bootstrap weights of ``rows`` (teacher draw → configuration → seed), one matrix per seed."""
    top = teacher_clusters(rows)
    return [S.bootstrap_weights(ST.clusters(rows), n_boot=n_boot, seed=s, top=top) for s in seeds]


def rank_intervals(rows, values, W) -> dict:
    """τ overall, ψ per axis and Ψ of ``values`` with the gap, each group inside one teacher draw (Chapter 9)."""
    return S.granulated_intervals(rows, values, W, HYPERS, FIXED)


def environments(rows, m=None) -> list:
    """The environments of the replication: configurations differing in one axis, same teacher draw and seed."""
    return [e for e in C.environments(rows, m, axes=HYPERS + FIXED) if e.axis not in FIXED]


def sign_error_report(rows, values, n_boot: int = 1000, seed: int = 0) -> V.SignErrors:
    """:func:`bounds_lib.studies.verdicts.sign_error_report` on the replication's environments.

    The seed-spread threshold is the median over configurations (teacher draw included) of the gap's
    range over seeds; pairs within it are dropped (amendment 1, section 2.4).
    """
    envs = environments(rows, values)
    kept = [e for e in C.seed_spread_filter(rows, values, axes=HYPERS + FIXED).kept if e.axis not in FIXED]
    return V.SignErrors(C.sign_errors_by_axis(envs, n_boot, seed), C.sign_errors_by_axis(kept, n_boot, seed),
                        max(e.sign_error for e in envs), max(e.sign_error for e in kept), envs, kept)


def _one(h: ST.Hypothesis, rows, W, seed: int, n_boot: int) -> S.Interval:
    g = np.array([r["gap_error"] for r in rows])
    if h.kind == "tau":
        return S.kendall_interval(ST.measure(rows, h.a), g, W)
    if h.kind == "diff":
        return ST.paired_interval(ST.measure(rows, h.a), ST.measure(rows, h.b), g, W)
    if h.kind == "psi":
        return rank_intervals(rows, ST.measure(rows, h.a), W)["Psi"]
    if h.kind == "sign_error":
        errs = [e.sign_error for e in environments(rows, ST.measure(rows, h.a))]
        return ST._resample_mean(errs, n_boot, seed, S.LEVEL, shift=0.5, sign=-1.0)
    if h.kind == "pstar_rank":
        return ST._resample_mean(pstar_pairs(rows)[0], n_boot, seed, S.LEVEL)
    raise ValueError(f"unknown hypothesis kind {h.kind!r}")


def hypothesis_sweep(h: ST.Hypothesis, rows, Ws, seeds=range(10), n_boot: int = 1000) -> ST.SweepResult:
    """Hypothesis ``h`` on the replication under every bootstrap seed, as pre-registered.

    τ, Δτ and Ψ use the three-stage weights ``Ws`` (:func:`weights`, one per seed); the sign error
    resamples the environments (matched by teacher draw), ``p*`` the matched pairs, as on the committed grid.
    """
    seeds = list(seeds)
    if len(Ws) != len(seeds):
        raise ValueError(f"one weight matrix per seed: {len(Ws)} for {len(seeds)} seeds")
    return ST.SweepResult(tuple(_one(h, rows, W, s, n_boot) for s, W in zip(seeds, Ws)), h.claimed)


def pstar_pairs(rows) -> tuple:
    """``(differences, draws)``: mean ``p*`` of the rank-1 student minus the full-rank one's, for every
    pair matched by configuration, seed and teacher draw, and each pair's teacher draw
    (Chapter 9's teacher-clustered p* test).

    >>> ps = lambda r: {"QK": [1.0 + r], "V": [1.0 + r], "M": [1.0 + r]}
    >>> rows = [{"config": {"teacher_rank": r, "seed": 0, "teacher_seed": t, "n_train": 8},
    ...          "proxies": {"p_star": ps(r)}} for t in (0, 1) for r in (0, 1)]
    >>> d, draws = pstar_pairs(rows)
    >>> d.tolist(), draws
    ([1.0, 1.0], [0, 1])
    """
    m = ST.measure(rows, "mean_p_star")
    key = {}
    for i, r in enumerate(rows):
        c = {**ST._CONFIG_DEFAULTS, **r["config"]}
        k = tuple(sorted((a, v) for a, v in c.items() if a != "teacher_rank"))
        key.setdefault(k, {})[c["teacher_rank"]] = (i, c["teacher_seed"])
    pairs = [d for d in key.values() if 0 in d and 1 in d]
    return np.array([m[d[1][0]] - m[d[0][0]] for d in pairs]), [d[0][1] for d in pairs]


def pstar_cluster_sweep(rows, seeds=range(10), n_boot: int = 1000) -> ST.SweepResult:
    """The teacher-clustered p* test of Chapter 9: the mean matched ``p*`` difference, bootstrapped with
    teacher draws as clusters, then pairs."""
    d, draws = pstar_pairs(rows)
    ivs = []
    for s in seeds:
        W = S.bootstrap_weights(list(range(d.size)), n_boot=n_boot, seed=s, top=draws)
        ivs.append(S._interval(float(d.mean()), (W @ d) / W.sum(axis=1), S.LEVEL))
    return ST.SweepResult(tuple(ivs), "+")


def replication_power(rows, stored: dict, tests=REPLICATION_TESTS, deltas=POWER_DELTAS, n_sim: int = 100,
                      n_boot: int = 200, seed: int = 0) -> dict:
    """The power of every test of ``tests`` at the replication's size and cluster structure (Chapter 9).

    ``rows``: the replication's analysed rows (the design: their configurations, teacher draws as top
    clusters; a test at a level of η uses that level's rows); ``stored``: the committed grid's power
    table (:func:`bounds_lib.studies.verdicts.load_power`), whose nuisance parameters (``tau_base``,
    ``noise_corr``, ``icc``) are reused, as amendment 1 (section 3) fixes them. Effect ``k`` runs with
    generator seed ``seed + k`` (:func:`bounds_lib.studies.verdicts.power_curve`). JSON-ready.
    """
    out = {"n_sim": n_sim, "n_boot": n_boot, "seed": seed, "deltas": list(deltas), "tests": {}}
    for tid, a, b, level in tests:
        nu = stored["tests"][tid]
        sub = [r for r in rows if level is None or r["config"]["label_noise"] == level]
        pr = V.power_curve(sub, deltas, paired=b is not None, seed=seed, n_sim=n_sim, n_boot=n_boot,
                           tau_base=nu["tau_base"], noise_corr=nu["noise_corr"], icc=max(nu["icc"], 0.0),
                           top=teacher_clusters(sub))
        d80 = pr.detectable
        out["tests"][tid] = {"a": a, "b": b, "level": level, "n_models": len(sub), "tau_base": nu["tau_base"],
                             "noise_corr": nu["noise_corr"], "icc": nu["icc"], "power": list(pr.power),
                             "d80": None if not np.isfinite(d80) else d80}
    return out


def load_replication_power() -> dict:
    """The stored power table of :func:`replication_power` (``bounds_lib/data/study_power_replication.json``)."""
    return json.loads(resources.files("bounds_lib").joinpath("data", _POWER_FILE).read_text())


# ----------------------------------------------------------------------------- the stored report


def _cells(iv: S.Interval) -> list:
    return [iv.value, iv.lo, iv.hi]


def interval(cells, n_boot: int = 1000) -> S.Interval:
    """A stored ``[value, lo, hi]`` back as an :class:`bounds_lib.studies.stats.Interval`."""
    return S.Interval(float(cells[0]), float(cells[1]), float(cells[2]), n_boot)


def claims_sweeps(rows, seeds=range(10), n_boot: int = 1000) -> dict:
    """Every confirmatory statistic of the replication under every bootstrap seed (amendment 1, section 5).

    ``{id: {"kind", "claimed", "intervals": [[value, lo, hi] per seed]}}`` for the nine pre-registered
    hypotheses, the filtered sign error of μ_ours, the p* test with teacher draws as clusters and the
    three within-level hypotheses (keys as in Chapter 9's verdict table).
    """
    Ws = weights(rows, seeds, n_boot)
    out = {h.id: (h.kind, hypothesis_sweep(h, rows, Ws, seeds, n_boot)) for h in ST.HYPOTHESES}
    kept = sign_error_report(rows, ST.measure(rows, "B_ours"), n_boot).kept
    out["H7′"] = ("sign_error", V.sign_error_sweep(kept, seeds, n_boot))
    out["H9′"] = ("pstar_rank", pstar_cluster_sweep(rows, seeds, n_boot))
    for aid, lv, h in (("A1", 0.0, ST.Hypothesis("A1", "", "tau", "B_ours")),
                       ("A2", 0.05, ST.Hypothesis("A2", "", "tau", "B_ours")),
                       ("A3", 0.0, ST.Hypothesis("A3", "", "diff", "B_ours", "n_params"))):
        sub = [r for r in rows if r["config"]["label_noise"] == lv]
        out[aid] = (h.kind, hypothesis_sweep(h, sub, weights(sub, seeds, n_boot), seeds, n_boot))
    return {k: {"kind": kind, "claimed": sw.claimed, "intervals": [_cells(iv) for iv in sw.intervals]}
            for k, (kind, sw) in out.items()}


def ranking(rows, names=RANKED, n_boot: int = 1000, n_perm: int = 1000) -> dict:
    """τ and Ψ (bootstrap seed 0), filtered mean sign error of every measure of ``names``, and the floor.

    The floor: the permutation ranges of τ, Ψ and the filtered sign error of shuffled μ_ours.
    """
    W = weights(rows, (0,), n_boot)[0]
    g = np.array([r["gap_error"] for r in rows])
    out = {"measures": {}}
    for k in names:
        v = V.measure_values(rows, k)
        t = rank_intervals(rows, v, W)
        se = sign_error_report(rows, v, n_boot)
        out["measures"][k] = {"tau": _cells(t["overall"]), "Psi": _cells(t["Psi"]),
                              "sef": _cells(se.filtered["all"]), "se": _cells(se.unfiltered["all"])}
    ours = V.measure_values(rows, "B_ours")
    kept = sign_error_report(rows, ours, n_boot).kept
    out["floor"] = {"tau": V.permutation_range(V.permuted_taus(ours, g, n_perm)),
                    "Psi": V.permutation_range(V.permuted_psis(rows, ours, n_perm, HYPERS, fixed=FIXED)),
                    "sef": V.permutation_range(V.permuted_sign_errors(kept, ours, n_perm))}
    return out


def within_levels(rows, names=WITHIN, n_boot: int = 1000, n_perm: int = 1000) -> dict:
    """τ and Ψ (bootstrap seed 0, three stages) of ``names`` inside each level of η, with each level's floor."""
    ours = V.measure_values(rows, "B_ours")
    shuffled = V.shuffled_within(rows, ours, "label_noise")
    out = {}
    for lv in sorted({r["config"]["label_noise"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["config"]["label_noise"] == lv]
        sub, g = [rows[i] for i in idx], np.array([rows[i]["gap_error"] for i in idx])
        W = weights(sub, (0,), n_boot)[0]
        rest = tuple(h for h in HYPERS if h != "label_noise")
        cell = {"n_models": len(sub)}
        for k in names:
            v = shuffled[idx] if k == "shuffled:B_ours" else V.measure_values(sub, k)
            t = S.granulated_intervals(sub, v, W, rest, FIXED)
            cell[k] = {"tau": _cells(t["overall"]), "Psi": _cells(t["Psi"])}
        cell["floor"] = {"tau": V.permutation_range(V.permuted_taus(ours[idx], g, n_perm)),
                         "Psi": V.permutation_range(V.permuted_psis(sub, ours[idx], n_perm, rest, fixed=FIXED))}
        out[repr(lv)] = cell
    return out


def digits_ranking(rows, names=DIGITS, n_boot: int = 1000) -> dict:
    """τ and Ψ (two-stage bootstrap, seed 0) of ``names`` on the digits models, overall and within η."""
    out = {"n_models": len(rows), "n_test": sorted({r["config"]["n_test"] for r in rows}), "measures": {}}
    W = S.bootstrap_weights(ST.clusters(rows), n_boot=n_boot, seed=0)
    for k in names:
        t = S.granulated_intervals(rows, V.measure_values(rows, k), W, DIGITS_HYPERS)
        out["measures"][k] = {"tau": _cells(t["overall"]), "Psi": _cells(t["Psi"])}
    for lv in sorted({r["config"]["label_noise"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["config"]["label_noise"] == lv]
        sub = [rows[i] for i in idx]
        Wl = S.bootstrap_weights(ST.clusters(sub), n_boot=n_boot, seed=0)
        for k in [k for k in ("B_ours", "n_params") if k in names]:
            t = S.granulated_intervals(sub, V.measure_values(sub, k), Wl, ("L", "N"))
            out["measures"][k][f"tau@{lv!r}"] = _cells(t["overall"])
            out["measures"][k][f"Psi@{lv!r}"] = _cells(t["Psi"])
    return out


def confound_tables(rows, names=RANKED, n_perm: int = 1000) -> dict:
    """The confound tables of the committed grid, on the replication (amendment 1, sections 2.1 and 2.3).

    ``shares``, ``marginal``, ``residual``: the gap's variance per axis
    (:func:`bounds_lib.studies.controls.gap_variance_by_axis`, the teacher draw an axis of three levels);
    ``cmi``: ``{measure: [𝒦₀, 𝒦₁, minimising axes]}`` (:func:`bounds_lib.studies.study.conditional_mi`
    over the same axes); ``cmi_floor``: the range of 𝒦₁ over ``n_perm`` permutations of μ_ours (seeds
    ``0 … n_perm − 1``). JSON-ready.
    """
    axes = HYPERS + FIXED
    vs = C.gap_variance_by_axis(rows, axes=axes)
    out = {"shares": dict(vs.shares), "marginal": dict(vs.marginal), "residual": vs.residual, "cmi": {}}
    for k in names:
        v = V.measure_values(rows, k)
        k1, best, _ = ST.conditional_mi(rows, v, axes=axes, k=1)
        out["cmi"][k] = [ST.conditional_mi(rows, v, axes=axes, k=0)[0], k1, list(best)]
    ours = V.measure_values(rows, "B_ours")
    out["cmi_floor"] = list(V.permutation_range(
        [ST.conditional_mi(rows, C.shuffled_control(ours, s), axes=axes, k=1)[0] for s in range(n_perm)]))
    return out


def sensitivity_sets(replication_rows, budget: dict) -> dict:
    """The rows of the exclusion rule's two sensitivity analyses (amendment 1, section 6), in the
    replication's order.

    ``replication_rows``: every model of the replication, excluded ones included; ``budget``: the results
    of the noisy arm trained with the larger step budget (``load_results("replication_6000")``: its
    ``metadata["select"]`` names the arm, its rows the arm's models, matched by configuration apart from
    the step budget).

    * ``"a"`` — every model, the excluded ones at their state when the budget ran out, except those whose
      training margin is not positive (``"a_no_margin"`` of them: they do not separate their training
      set, and the margin-normalised bounds γ⁻¹… are undefined there — a deviation from the amendment,
      which did not foresee it);
    * ``"b"`` — the analysed models outside the arm, and the arm's models that reached the common loss
      within the larger budget (``"arm_reached"`` of ``"arm"``).

    A model of the arm missing from ``budget`` is an error (the analysis (b) needs the whole arm).
    """
    full = [{**r, "config": {**ST._CONFIG_DEFAULTS, **r["config"]}} for r in replication_rows]
    select = budget["metadata"].get("select") or {}
    if not select:
        raise ValueError("the budget results name no arm (metadata['select'] is empty)")
    in_arm = lambda r: all(r["config"].get(k) in v for k, v in select.items())  # noqa: E731
    same = lambda c: C._config_key({a: v for a, v in c.items() if a != "steps"})  # noqa: E731  (the budget differs)
    longer = {same(r["config"]): r for r in budget["rows"]}
    b, arm = [], 0
    for r in full:
        if not in_arm(r):
            b += [r] if r.get("reached_target") else []
            continue
        arm += 1
        k = same(r["config"])
        if k not in longer:
            raise ValueError(f"the arm's model {r['config']} has no row in the budget results")
        if longer[k].get("reached_target"):
            b.append({**longer[k], "config": {**ST._CONFIG_DEFAULTS, **longer[k]["config"]}})
    a = [r for r in full if r.get("reached_target") or r["study"]["margin"] > 0]
    return {"a": a, "a_no_margin": len(full) - len(a), "b": b, "arm": arm,
            "arm_reached": sum(bool(r.get("reached_target")) for r in budget["rows"])}


def sensitivity(replication_rows, budget: dict, seeds=(0,), n_boot: int = 1000) -> dict:
    """Every confirmatory statistic (:func:`claims_sweeps`) on the two sensitivity sets of
    :func:`sensitivity_sets`, under bootstrap ``seeds`` (the stored report: seed 0). JSON-ready."""
    sets = sensitivity_sets(replication_rows, budget)
    out = {k: sets[k] for k in ("a_no_margin", "arm", "arm_reached")}
    for k in ("a", "b"):
        out[k] = {"n_models": len(sets[k]), "claims": claims_sweeps(sets[k], seeds, n_boot)}
    return out


def confirmatory_report(rows, digits_rows, n_boot: int = 1000, n_perm: int = 1000, all_rows=None,
                        budget=None) -> dict:
    """Chapter 9's confirmatory tables in one JSON-ready dict (stored as ``study_replication_report.json``).

    ``rows``: the replication's analysed rows; ``digits_rows``: the digits models' analysed rows;
    ``all_rows`` (every model, excluded ones included) with ``budget`` (the noisy arm at the larger step
    budget) add the exclusion rule's sensitivity (:func:`sensitivity`, bootstrap seed 0). Every
    entry is recomputable alone with the same arguments (bootstrap seeds 0–9 for the sweeps, 0 for the
    tables; permutation seeds ``0 … n_perm − 1``).
    """
    out = {"n_boot": n_boot, "n_perm": n_perm, "sweeps": claims_sweeps(rows, n_boot=n_boot),
           "ranking": ranking(rows, n_boot=n_boot, n_perm=n_perm),
           "within": within_levels(rows, n_boot=n_boot, n_perm=n_perm),
           "digits": digits_ranking(digits_rows, n_boot=n_boot)}
    out["confound"] = confound_tables(rows, n_perm=n_perm)
    if all_rows is not None and budget is not None:
        out["sensitivity"] = sensitivity(all_rows, budget, n_boot=n_boot)
    return out


def load_report() -> dict:
    """The stored :func:`confirmatory_report` (``bounds_lib/data/study_replication_report.json``)."""
    return json.loads(resources.files("bounds_lib").joinpath("data", _REPORT_FILE).read_text())
