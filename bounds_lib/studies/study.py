"""The robust evaluation of Chapter 9: measures as the theory writes them, and statistics that hold up.

Chapter 9 asks whether the spectrum-adaptive bound tracks generalization on a planted-spectrum teacher
(:func:`bounds_lib.studies.tasks.planted_teacher`), where the population error is exact. Its protocol is
pre-registered in ``bounds_lib/data/study_preregistration.md``; :data:`HYPOTHESES` is the same list in code.

Measured on each trained model (:func:`study_measures`, stored in ``row["study"]`` by the grid runner):
the training margins' 10th percentile ``γ``, the distance to initialisation ``‖θ − θ₀‖₂``, Bartlett et
al.'s spectral complexity, the corrected ``Θ`` of Chapter 5, and a perturbation sharpness with the
PAC-Bayes bound whose prior sits at the initialisation (Jiang et al. 2020; Dziugaite & Roy 2017).

Statistics (:func:`paired_interval`, :func:`sign_errors`, :func:`seed_sweep`, :func:`verdict`):
Kendall τ and its paired differences on the same bootstrap resamples (:mod:`bounds_lib.studies.stats`),
Dziugaite et al. (2020)'s sign error over environments, and the Monte Carlo error of interval endpoints
across bootstrap seeds, from which each hypothesis gets *supported*, *borderline* or *refuted*.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import stats as S

__all__ = ["AXES", "SIGMA_GRID", "PAC_DELTA", "MARGIN_QUANTILE", "MEASURES", "HYPOTHESES", "Hypothesis",
           "training_margins", "spectral_complexity", "distance_to_init", "perturbation_sharpness",
           "pac_bayes_bound", "study_measures", "with_axes", "measure", "clusters", "paired_interval",
           "sign_errors", "environment_pairs", "sign_error_summary", "conditional_mi", "statistic",
           "pstar_rank_differences", "seed_sweep", "verdict", "SweepResult", "margin_gap_bound",
           "plot_bounds_vs_gap", "verdict_rows"]

#: The axes of the factorial grid (config keys), each at two levels; ``n_train`` varies in the family.
AXES = ("L", "N", "lr", "weight_decay", "label_noise", "teacher_rank")
#: The perturbation scales searched by :func:`perturbation_sharpness`: ``2^{−k/2}``, ``k = 0…29``.
SIGMA_GRID = 2.0 ** (-np.arange(30) / 2.0)
#: Confidence of the PAC-Bayes bound.
PAC_DELTA = 0.05
#: The margin ``γ`` is this quantile of the training margins ``y_i f(x_i)`` (Jiang et al. 2020).
MARGIN_QUANTILE = 0.10
#: Allowed rise of the perturbed training error in :func:`perturbation_sharpness`.
SHARPNESS_TOLERANCE = 0.1
#: Perturbation draws per ``σ``.
SHARPNESS_DRAWS = 8


# ----------------------------------------------------------------------------- measures of one model


def training_margins(model, X, y) -> np.ndarray:
    """Margins ``y_i f(x_i)`` of a torch model on its training set (float64)."""
    import torch

    with torch.no_grad():
        return (y * model(X)).to(torch.float64).numpy()


def spectral_complexity(sigma1, norms21, readout_norm) -> float:
    """``log10`` of ``‖w‖₂ Π_j‖W_j‖₂ · (1 + Σ_j (‖W_j‖_{2,1}/‖W_j‖₂)^{2/3})^{3/2}`` (Bartlett et al. 2017).

    The reference matrices are 0 and the readout is the last layer (its ratio ``‖w‖_{2,1}/‖w‖₂`` is 1:
    the ``1 +``). Chapter 9 divides it by ``γ√n``.

    >>> round(10 ** spectral_complexity([2.0], [2.0], 1.0), 12)   # 2 · (1 + 1)^{3/2}
    5.656854249492
    """
    s1 = np.asarray(sigma1, dtype=float)
    r = np.asarray(norms21, dtype=float) / s1
    return float((np.sum(np.log10(s1)) + math.log10(readout_norm)
                  + 1.5 * math.log10(1.0 + np.sum(r ** (2.0 / 3.0)))))


def distance_to_init(model, model0) -> float:
    """``‖θ − θ₀‖₂``: the Euclidean distance of all parameters from their initial values."""
    sq = 0.0
    for p, p0 in zip(model.parameters(), model0.parameters()):
        sq += float(((p.detach().double() - p0.detach().double()) ** 2).sum())
    return math.sqrt(sq)


def perturbation_sharpness(model, X, y, train_error, seed, grid=SIGMA_GRID, draws=SHARPNESS_DRAWS,
                           tolerance=SHARPNESS_TOLERANCE):
    """``(σ', ê_Q)``: the largest ``σ`` of ``grid`` whose Gaussian perturbation keeps the training error low.

    For ``σ`` on ``grid`` (descending), ``ê_Q(σ)`` is the mean training 0-1 error of ``draws`` copies of
    the model with every parameter perturbed by ``𝒩(0, σ²)`` (a torch generator seeded by ``seed``); ``σ'``
    is found by bisection (assuming ``ê_Q`` grows with ``σ``) as the largest ``σ`` with
    ``ê_Q(σ) ≤ train_error + tolerance`` — the smallest grid point if none. Jiang et al. (2020)'s
    sharpness is ``1/σ'²``.
    """
    import copy

    import torch

    def err_q(sigma):
        gen = torch.Generator().manual_seed(int(seed))
        errs = []
        for _ in range(draws):
            m = copy.deepcopy(model)
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * sigma)
                errs.append(float((y * m(X) <= 0).double().mean()))
        return float(np.mean(errs))

    lo, hi = 0, len(grid) - 1   # grid descending: find the first index whose error is acceptable
    e_hi = err_q(grid[hi])
    if e_hi > train_error + tolerance:
        return float(grid[hi]), e_hi
    best = (hi, e_hi)
    while lo < hi:
        mid = (lo + hi) // 2
        e = err_q(grid[mid])
        if e <= train_error + tolerance:
            hi, best = mid, (mid, e)
        else:
            lo = mid + 1
    return float(grid[best[0]]), best[1]


def pac_bayes_bound(dist2, sigma, err_q, n, delta=PAC_DELTA, n_grid=len(SIGMA_GRID)) -> float:
    """``ê_Q + √((‖θ−θ₀‖²/(2σ²) + log(2√n/δ) + log G)/(2n))``: a PAC-Bayes bound with the prior at init.

    Posterior ``Q = 𝒩(θ, σ²I)``, prior ``P = 𝒩(θ₀, σ²I)`` (``KL = ‖θ−θ₀‖²/(2σ²)``); Maurer's bound relaxed
    by Pinsker, with a union bound over the ``G`` grid points of ``σ``. It bounds the error of the
    stochastic classifier ``Q``, given its training error ``ê_Q`` (here a Monte Carlo estimate).

    >>> b = pac_bayes_bound(0.0, 1.0, 0.0, 100, delta=0.05, n_grid=1)
    >>> round(b, 12) == round(math.sqrt(math.log(2 * 10 / 0.05) / 200), 12)
    True
    """
    kl = dist2 / (2.0 * sigma ** 2)
    return float(err_q + math.sqrt((kl + math.log(2.0 * math.sqrt(n) / delta) + math.log(n_grid)) / (2.0 * n)))


def study_measures(res) -> dict:
    """Chapter 9's measures of one trained :class:`~bounds_lib.studies.training.TrainResult` (a teacher-task run).

    Returns a dict of plain values: ``margin`` (γ, the 10th percentile of the training margins),
    ``dist_init``, ``log10_spectral`` (:func:`spectral_complexity`), ``sigma_sharp`` and ``err_q``
    (:func:`perturbation_sharpness`), ``pac_bayes`` (:func:`pac_bayes_bound`); the corrected theorem's
    ``log10_theta`` and ``theta_gap_bound`` are added by the grid runner from the stored spectra.
    """
    import torch

    from ..theory.norms import norm_21
    from .tasks import sample
    from .training import TRAIN_STREAM, initial_model

    config, tm = res.config, res.torch_model
    dtype = next(tm.parameters()).dtype
    X, y, _ = sample(config.task(), config.n_train, TRAIN_STREAM)
    X, y = torch.as_tensor(X, dtype=dtype), torch.as_tensor(y, dtype=dtype)
    margins = training_margins(tm, X, y)
    model = res.model
    mats = [getattr(b, f"W_{a}") for b in model.blocks for a in ("QK", "V", "M")]
    s1 = [float(np.linalg.norm(W, 2)) for W in mats]
    n21 = [norm_21(W) for W in mats]
    dist = distance_to_init(tm, initial_model(config, dtype))
    sigma, err_q = perturbation_sharpness(tm, X, y, res.train_error, seed=1000 + config.seed)
    return {"margin": float(np.quantile(margins, MARGIN_QUANTILE)), "dist_init": dist,
            "log10_spectral": spectral_complexity(s1, n21, float(np.linalg.norm(model.w))),
            "sigma_sharp": sigma, "err_q": err_q,
            "pac_bayes": pac_bayes_bound(dist ** 2, sigma, err_q, config.n_train)}


# ----------------------------------------------------------------------------- rows and measures of the study

#: The measures of Chapter 9 (keys of :func:`measure`) and their labels; all ``log10`` except where noted.
MEASURES = {
    "B_ours": "B_ours/γ√n", "theta": "Θ/γ√n (corrected)", "B_edelman": "B_Edelman/γ√n",
    "spectral": "spectral/γ√n", "dist_init": "‖θ−θ₀‖₂", "n_params": "# parameters", "mean_p_star": "mean p*",
    "sharpness": "sharpness 1/σ'²", "pac_bayes": "PAC-Bayes (prior at init)", "steps_taken": "steps taken",
    "train_error": "training error", "neg_log_n": "−log n",
}
#: Defaults of the config keys that results rows leave out at their default (:meth:`TrainConfig.as_dict`).
_CONFIG_DEFAULTS = {"weight_decay": 0.0, "label_noise": 0.0, "teacher_rank": 0, "teacher_seed": 0}


def with_axes(rows) -> tuple:
    """``(analysed, excluded)``: the rows with every axis in ``config`` (defaults filled in), split by
    whether they reached the common training loss (the pre-registered exclusion rule). The teacher draw
    ``teacher_seed`` defaults to 0, the committed grid's teacher (Chapter 9's replication draws more).

    >>> ok, out = with_axes([{"config": {"L": 1}, "reached_target": True},
    ...                      {"config": {"L": 2, "label_noise": 0.05}, "reached_target": False}])
    >>> ok[0]["config"]["teacher_rank"], len(out), out[0]["config"]["label_noise"]
    (0, 1, 0.05)
    """
    ok, out = [], []
    for r in rows:
        r = {**r, "config": {**_CONFIG_DEFAULTS, **r["config"]}}
        (ok if r.get("reached_target") else out).append(r)
    return ok, out


def measure(rows, name: str) -> np.ndarray:
    """Values of the Chapter 9 measure ``name`` (a key of :data:`MEASURES`) on ``rows``.

    The bounds are written as the theory writes them, in ``log10``: ``B_ours`` is
    ``log10(B_ours·‖w‖₂/(γ√n))`` (the released ``Σ T* + √L``, times the readout norm that scales the
    network's output, over the margin ``γ`` that turns the 0-1 loss into a ``1/γ``-Lipschitz ramp, over
    ``√n``); ``B_edelman`` and ``spectral`` likewise; ``theta`` is ``log10(Θ/(γ√n))`` (``Θ`` already
    carries the readout radius). ``sharpness`` is ``log10 1/σ'²``, ``pac_bayes`` and ``dist_init`` their
    ``log10``; ``mean_p_star``, ``steps_taken``, ``train_error`` plain values, ``neg_log_n`` is ``−ln n``.

    Raises
    ------
    KeyError
        An unknown measure, or rows without the study's measures (``row["study"]``).
    """
    from .results import proxy_value

    if name not in MEASURES:
        raise KeyError(f"unknown measure {name!r}; available: {', '.join(MEASURES)}")
    def value(r):
        n, p = r["config"]["n_train"], r["proxies"]
        if name == "mean_p_star":
            return proxy_value(r, "mean_p_star")
        if name in ("steps_taken", "train_error"):
            return float(r[name])
        if name == "neg_log_n":
            return -math.log(n)
        if name == "n_params":
            return p["n_params"]
        st = r["study"]
        scale = -math.log10(st["margin"]) - 0.5 * math.log10(n)  # over γ√n
        w = math.log10(p["readout_norm"])
        return {"B_ours": lambda: p["B_ours_sum"] + w + scale, "theta": lambda: st["log10_theta"] + scale,
                "B_edelman": lambda: p["B_edelman"] + w + scale, "spectral": lambda: st["log10_spectral"] + scale,
                "dist_init": lambda: math.log10(st["dist_init"]),
                "sharpness": lambda: -2.0 * math.log10(st["sigma_sharp"]),
                "pac_bayes": lambda: math.log10(st["pac_bayes"])}[name]()

    out = [value(r) for r in rows]
    return np.array(out)


# ----------------------------------------------------------------------------- statistics


def paired_interval(a, b, target, W, level: float = S.LEVEL) -> S.Interval:
    """``τ(a, target) − τ(b, target)`` and its paired bootstrap interval ("A beats B", Chapter 9).

    Both τ's are computed on the *same* resamples ``W`` (:func:`bounds_lib.studies.stats.bootstrap_weights`), so
    the interval is that of the difference, not two overlapping intervals.

    >>> x = np.arange(12.0); g = x + np.tile([0.0, 0.5], 6)
    >>> iv = paired_interval(x, -x, g, S.bootstrap_weights(range(12), n_boot=200))
    >>> iv.value, iv.lo > 0
    (2.0, True)
    """
    W = np.atleast_2d(np.asarray(W, dtype=float))
    one = np.ones((1, len(target)))
    point = float(S.weighted_kendall(a, target, one)[0] - S.weighted_kendall(b, target, one)[0])
    return S._interval(point, S.weighted_kendall(a, target, W) - S.weighted_kendall(b, target, W), level)


def sign_errors(rows, m, target: str = "gap_error", axes=AXES + ("n_train",)) -> list:
    """Dziugaite et al. (2020)'s sign error of measure values ``m`` in every environment.

    An environment is a pair of configurations that differ in exactly one axis ``h`` (all other axes
    equal); for every seed that trained both, the pair of models scores ``½(1 − sgn Δm · sgn Δgap)``
    (0: ranked right, 1: ranked backwards, ½: a tie), and the environment's sign error is the mean over
    its seeds. Returns ``[(h, sign error), …]``, one entry per environment.

    >>> rows = [{"config": {"L": L, "seed": s}, "gap_error": L + s} for L in (1, 2) for s in (0, 1)]
    >>> sign_errors(rows, [1, 1, 2, 2], axes=("L",)), sign_errors(rows, [2, 2, 1, 1], axes=("L",))
    ([('L', 0.0)], [('L', 1.0)])
    """
    m = np.asarray(m, dtype=float)
    g = np.array([r[target] for r in rows])
    return [(h, float(np.mean([0.5 * (1 - np.sign(m[j] - m[i]) * np.sign(g[j] - g[i])) for i, j in pairs])))
            for h, pairs in environment_pairs(rows, axes)]


def environment_pairs(rows, axes=AXES + ("n_train",)):
    """Every environment of ``rows`` (Chapter 9) as ``(axis h, ((i, j), …))``: for two levels of ``h`` with
    every other axis equal, the row indices of the models of each seed that trained both, ``i`` at the lower
    level. The order is :func:`sign_errors`'s (axes, then first-seen configurations, then level pairs)."""
    for h in axes:
        others = [k for k in axes if k != h]
        envs = {}
        for i, r in enumerate(rows):
            key = tuple(r["config"][k] for k in others)
            envs.setdefault(key, {}).setdefault(r["config"][h], {})[r["config"]["seed"]] = i
        for levels in envs.values():
            vals = sorted(levels)
            for a in range(len(vals)):
                for b in range(a + 1, len(vals)):
                    A, B = levels[vals[a]], levels[vals[b]]
                    pairs = tuple((A[s], B[s]) for s in sorted(set(A) & set(B)))
                    if pairs:
                        yield h, pairs


def sign_error_summary(errors) -> dict:
    """``{axis or "all": (mean, 90th percentile, max, number of environments)}`` of :func:`sign_errors`.

    >>> sign_error_summary([("L", 0.0), ("L", 1.0), ("N", 0.5)])["all"]
    (0.5, 0.9, 1.0, 3)
    """
    by = {"all": [e for _, e in errors]}
    for h, e in errors:
        by.setdefault(h, []).append(e)
    return {k: (float(np.mean(v)), float(np.quantile(v, 0.9)), float(np.max(v)), len(v)) for k, v in by.items()}


def _resample_mean(values, n_boot, seed, level, shift=0.0, sign=1.0):
    v = sign * (np.asarray(values, dtype=float) - shift)
    rng = np.random.default_rng(seed)
    draws = v[rng.integers(v.size, size=(n_boot, v.size))].mean(axis=1)
    return S._interval(float(v.mean()), draws, level)


def _pair_codes(rows, axes):
    """All pairs ``i < j`` of rows and, for every axis, the code of the pair's two values of it."""
    i, j = np.triu_indices(len(rows), k=1)
    codes = {}
    for h in axes:
        vals = {v: c for c, v in enumerate(sorted({r["config"][h] for r in rows}))}
        x = np.array([vals[r["config"][h]] for r in rows])
        codes[h] = x[i] * len(vals) + x[j]
    return i, j, codes


def _normalised_cmi(cells, vm, vg) -> float:
    """Plug-in ``I(V_m; V_g | U) / H(V_g | U)`` from integer cell codes and signs in ``{0, 1, 2}``."""
    n_cells = int(cells.max()) + 1
    counts = np.bincount(cells * 9 + vm * 3 + vg, minlength=n_cells * 9).reshape(n_cells, 3, 3).astype(float)
    p = counts / counts.sum()
    pu = p.sum(axis=(1, 2), keepdims=True)
    pm = p.sum(axis=2, keepdims=True)
    pg = p.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        mi = np.nansum(p * np.log(p * pu / (pm * pg)))
        h = -np.nansum(pg * np.log(pg / pu))
    return float(mi / h) if h > 0 else float("nan")


def conditional_mi(rows, m, target: str = "gap_error", axes=AXES + ("n_train",), k: int = 1,
                   n_perm: int = 0, seed: int = 0) -> tuple:
    """Jiang et al. (2020)'s conditional mutual information of a measure and the gap, with a permutation null.

    Over all pairs of models, ``V_m = sgn(m_i − m_j)`` and ``V_g = sgn(gap_i − gap_j)``; ``U_S`` is the pair's
    values of the axes in ``S``. The score is ``K = min_{|S| = k} I(V_m; V_g | U_S) / H(V_g | U_S)`` (plug-in
    estimates; ``k = 0`` is the plain normalised mutual information): 0 when, on some conditioning set, the
    measure's order says nothing about the gap's. With ``n_perm > 0`` the measure is permuted across models
    ``n_perm`` times (generator ``seed``) and the share of permutations reaching ``K`` is its p-value.

    Returns ``(K, the minimising S, p-value or NaN)``.

    >>> rng = np.random.default_rng(0)
    >>> rows = [{"config": {"L": L, "N": N}, "gap_error": rng.random()} for L in (1, 2) for N in (1, 2) for _ in "ab"]
    >>> g = [r["gap_error"] for r in rows]
    >>> K, S_min, _ = conditional_mi(rows, g, axes=("L", "N"), k=1)   # the gap itself: all information
    >>> round(K, 12), len(S_min)
    (1.0, 1)
    >>> conditional_mi(rows, [1.0] * 8, axes=("L", "N"), k=1)[0]        # a constant: none
    0.0
    """
    import itertools

    m = np.asarray(m, dtype=float)
    g = np.array([r[target] for r in rows])
    i, j, codes = _pair_codes(rows, axes)
    sets = list(itertools.combinations(axes, k))
    cells = []
    for S_ in sets:
        c = np.zeros(i.size, dtype=np.int64)
        for h in S_:
            c = c * (int(codes[h].max()) + 1) + codes[h]
        cells.append(np.unique(c, return_inverse=True)[1])
    vg = (np.sign(g[i] - g[j]) + 1).astype(np.int64)

    def score(mm):
        vm = (np.sign(mm[i] - mm[j]) + 1).astype(np.int64)
        vals = [_normalised_cmi(c, vm, vg) for c in cells]
        if not np.isfinite(vals).any():  # the gap's order is fixed by every conditioning set
            return float("nan"), None
        a = int(np.nanargmin(vals))
        return vals[a], sets[a]

    K, S_min = score(m)
    p = float("nan")
    if n_perm > 0:
        rng = np.random.default_rng(seed)
        null = np.array([score(rng.permutation(m))[0] for _ in range(n_perm)])
        p = float((1 + np.sum(null >= K)) / (1 + n_perm))
    return K, S_min, p


@dataclass(frozen=True)
class Hypothesis:
    """A pre-registered hypothesis: its id, its text and the statistic whose sign it claims (Chapter 9).

    ``kind``: ``"tau"`` (τ of ``a`` with the gap), ``"diff"`` (τ of ``a`` minus τ of ``b``, paired),
    ``"psi"`` (the granulated Ψ of ``a``), ``"sign_error"`` (½ minus the mean sign error of ``a`` over
    environments) or ``"pstar_rank"`` (the mean paired difference of mean ``p*`` between students of the
    rank-1 and of the full-rank teacher, equal in every other axis and the seed).
    """

    id: str
    text: str
    kind: str
    a: str
    b: str | None = None
    claimed: str = "+"


#: The hypotheses of ``bounds_lib/data/study_preregistration.md`` (a test checks that they agree).
HYPOTHESES = (
    Hypothesis("H1", "B_ours/γ√n ranks the gap", "tau", "B_ours"),
    Hypothesis("H2", "the corrected Θ/γ√n ranks the gap", "tau", "theta"),
    Hypothesis("H3", "B_ours ranks better than B_Edelman", "diff", "B_ours", "B_edelman"),
    Hypothesis("H4", "B_ours ranks better than the fit baseline steps taken", "diff", "B_ours", "steps_taken"),
    Hypothesis("H5", "B_ours ranks better than −log n", "diff", "B_ours", "neg_log_n"),
    Hypothesis("H6", "B_ours ranks the gap within axes on average (Ψ)", "psi", "B_ours"),
    Hypothesis("H7", "B_ours's sign error is better than chance", "sign_error", "B_ours"),
    Hypothesis("H8", "the PAC-Bayes bound (prior at init) ranks better than B_ours", "diff", "pac_bayes", "B_ours"),
    Hypothesis("H9", "students of the rank-1 teacher choose larger p*", "pstar_rank", "mean_p_star"),
)


def clusters(rows) -> list:
    """The configuration of every row without its seed (the bootstrap's clusters)."""
    return [tuple(sorted((k, v) for k, v in r["config"].items() if k != "seed")) for r in rows]


def statistic(h: Hypothesis, rows, seed: int = 0, n_boot: int = 1000, level: float = S.LEVEL,
              target: str = "gap_error", W=None) -> S.Interval:
    """The statistic of hypothesis ``h`` on ``rows`` with its interval under bootstrap seed ``seed``.

    τ-based kinds use the two-stage bootstrap over configurations and seeds
    (:func:`bounds_lib.studies.stats.bootstrap_weights`; pass ``W`` to reuse resamples); ``sign_error`` resamples
    environments and ``pstar_rank`` resamples the paired differences.
    """
    g = np.array([r[target] for r in rows])
    if h.kind in ("tau", "diff", "psi") and W is None:
        W = S.bootstrap_weights(clusters(rows), n_boot=n_boot, seed=seed)
    if h.kind == "tau":
        return S.kendall_interval(measure(rows, h.a), g, W, level)
    if h.kind == "diff":
        return paired_interval(measure(rows, h.a), measure(rows, h.b), g, W, level)
    if h.kind == "psi":
        return S.granulated_intervals(rows, measure(rows, h.a), W, AXES + ("n_train",), (), target, level)["Psi"]
    if h.kind == "sign_error":
        errs = [e for _, e in sign_errors(rows, measure(rows, h.a), target)]
        return _resample_mean(errs, n_boot, seed, level, shift=0.5, sign=-1.0)
    if h.kind == "pstar_rank":
        return _resample_mean(pstar_rank_differences(rows), n_boot, seed, level)
    raise ValueError(f"unknown hypothesis kind {h.kind!r}")


def pstar_rank_differences(rows) -> np.ndarray:
    """Mean ``p*`` of the rank-1 teacher's student minus the full-rank one's, for every matched pair."""
    m = measure(rows, "mean_p_star")
    key = {}
    for i, r in enumerate(rows):
        c = r["config"]
        key.setdefault(tuple(sorted((k, v) for k, v in c.items() if k != "teacher_rank")), {})[c["teacher_rank"]] = i
    return np.array([m[d[1]] - m[d[0]] for d in key.values() if 0 in d and 1 in d])


@dataclass(frozen=True)
class SweepResult:
    """One statistic under several bootstrap seeds: the intervals, the Monte Carlo error of their endpoints
    (standard deviation over seeds) and the verdict of the pre-registered rule (:func:`verdict`)."""

    intervals: tuple
    claimed: str

    @property
    def value(self) -> float:
        return self.intervals[0].value

    @property
    def lo_sd(self) -> float:
        return float(np.std([iv.lo for iv in self.intervals], ddof=1)) if len(self.intervals) > 1 else 0.0

    @property
    def hi_sd(self) -> float:
        return float(np.std([iv.hi for iv in self.intervals], ddof=1)) if len(self.intervals) > 1 else 0.0

    @property
    def n_claimed(self) -> int:
        """Bootstrap seeds whose interval excludes 0 on the claimed side."""
        return sum(iv.sign == self.claimed for iv in self.intervals)

    @property
    def verdict(self) -> str:
        return verdict([iv.sign for iv in self.intervals], self.claimed)

    @property
    def widest(self) -> S.Interval:
        """The union of the intervals over seeds (the range a reader should keep in mind)."""
        return S.Interval(self.value, min(iv.lo for iv in self.intervals), max(iv.hi for iv in self.intervals),
                          self.intervals[0].n_boot)


def verdict(signs, claimed: str = "+") -> str:
    """The pre-registered verdict from the interval signs under every bootstrap seed tried.

    ``"supported"``: every interval excludes 0 on the claimed side; ``"borderline"``: some do, some do
    not (the sign depends on the bootstrap seed); ``"refuted (reversed)"``: every interval excludes 0 on
    the other side; ``"refuted (no effect shown)"``: otherwise.

    >>> verdict("+++"), verdict("++0"), verdict("---"), verdict("00-")
    ('supported', 'borderline', 'refuted (reversed)', 'refuted (no effect shown)')
    """
    signs = list(signs)
    other = {"+": "-", "-": "+"}[claimed]
    k = sum(s == claimed for s in signs)
    if k == len(signs):
        return "supported"
    if k > 0:
        return "borderline"
    return "refuted (reversed)" if all(s == other for s in signs) else "refuted (no effect shown)"


def seed_sweep(h: Hypothesis, rows, seeds=range(10), n_boot: int = 1000, level: float = S.LEVEL,
               target: str = "gap_error") -> SweepResult:
    """:func:`statistic` of ``h`` under every bootstrap seed of ``seeds`` (the pre-registered 0–9)."""
    return SweepResult(tuple(statistic(h, rows, s, n_boot, level, target) for s in seeds), h.claimed)


def margin_gap_bound(row) -> float:
    """Chapter 5's theorem turned into a bound on the 0-1 gap of a Chapter 9 row, through the ramp loss.

    The ramp at margin ``γ`` is ``1/γ``-Lipschitz and bounded by 1, and lies between the 0-1 error and the
    margin error ``R̂_γ`` (training examples with margin below ``γ``; at most ``MARGIN_QUANTILE`` since ``γ``
    is that quantile of the training margins). So ``R − R̂ ≤ R̂_γ + 24Θ/(γ√n) + 3√((log(4/δ)+Π)/(2n))``,
    computed from the stored ``24Θ/√n + 3√(…)`` (``theta_gap_bound``, loss constants 1) and ``log10 Θ``.

    >>> row = {"config": {"n_train": 100}, "study": {"margin": 0.5, "log10_theta": 1.0, "theta_gap_bound": 24.5}}
    >>> round(margin_gap_bound(row), 12)   # 0.1 + 0.5 + 24/0.5
    48.6
    """
    st, n = row["study"], row["config"]["n_train"]
    main = 24.0 * 10.0 ** st["log10_theta"] / math.sqrt(n)
    return MARGIN_QUANTILE + (st["theta_gap_bound"] - main) + main / st["margin"]


# ----------------------------------------------------------------------------- figures and tables


def plot_bounds_vs_gap(rows, target: str = "gap_error"):
    """Two panels: the measured gap against the corrected theorem's gap bound (left) and against the
    PAC-Bayes bound (right; it bounds the stochastic classifier's population error), log scale, with the
    line ``bound = 1`` above which a bound on a 0-1 quantity says nothing. Colours: the teacher's rank.

    >>> rows = [{"config": {"teacher_rank": t, "n_train": 100}, "gap_error": 0.1, "test_error": 0.2,
    ...          "study": {"theta_gap_bound": 1e3, "log10_theta": 3.0, "margin": 0.5, "pac_bayes": 0.9}}
    ...         for t in (0, 1)]
    >>> len(plot_bounds_vs_gap(rows).axes)
    2
    """
    from ..core.style import book_subplots

    fig, (a, b) = book_subplots(1, 2, height=3.0)
    colours = {1: "C0", 0: "C3"}
    names = {1: "rank-1 teacher", 0: "full-rank teacher"}
    for t in (1, 0):
        rs = [r for r in rows if r["config"]["teacher_rank"] == t]
        g = [r[target] for r in rs]
        a.scatter(g, [margin_gap_bound(r) for r in rs], s=12, color=colours[t], label=names[t])
        b.scatter([r["test_error"] for r in rs], [r["study"]["pac_bayes"] for r in rs], s=12, color=colours[t],
                  label=names[t])
    for ax in (a, b):
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
    a.set_xlabel("measured gap (exact)")
    a.set_ylabel("corrected bound on the 0-1 gap")
    b.set_xlabel("population error (exact)")
    b.set_ylabel("PAC-Bayes bound")
    a.set_title("Chapter 5's theorem")
    b.set_title("prior at initialisation")
    fig.legend(*a.get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig


def verdict_rows(sweeps: dict) -> list:
    """``[(id, text, estimate with the seed-0 interval, widest interval over seeds, MC sd of the endpoints,
    seeds with the claimed sign, verdict)]`` for :func:`seed_sweep` results keyed by hypothesis id.

    Intervals print with 2 decimals, or 4 where an endpoint that is not 0 would otherwise print as 0.
    """
    out = []
    for h in HYPOTHESES:
        sw = sweeps[h.id]
        ends = [e for iv in sw.intervals for e in (iv.lo, iv.hi) if np.isfinite(e)]
        # 4 decimals where an endpoint that is not 0 would print as ±0.00 (the sign must stay visible)
        d = 4 if any(0 < abs(e) < 0.005 for e in ends) else 2
        out.append((h.id, h.text, S.format_interval(sw.intervals[0], d), S.format_interval(sw.widest, d),
                    f"{sw.lo_sd:.3f} / {sw.hi_sd:.3f}", f"{sw.n_claimed} of {len(sw.intervals)}", sw.verdict))
    return out
