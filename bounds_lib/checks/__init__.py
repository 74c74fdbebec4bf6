"""Falsification harness: try to break an inequality ``lhs ≤ rhs``, and every check of the book (Chapters 1–5).

A check of an inequality is only evidence if it could have failed. The harness therefore does three
things for an inequality written as a *ratio* ``r(x) = lhs(x)/rhs(x)`` of a parameter vector ``x``:

1. **random draws** — ``r`` at many random points (:func:`falsify`, ``trials``);
2. **adversarial search** — a local optimiser (SciPy's Nelder–Mead, which needs no gradient) started
   from the best random points maximises ``r`` (:func:`adversarial_search`);
3. **power check** — the same harness run against a deliberately *weakened* bound (a constant
   below the proved one, or the bound divided by 1.1) must report a violation
   (:func:`power_check`); if it does not, the harness could not have detected a wrong constant.

The result of 1–2 is a :class:`Falsification`: the ratios of every trial, the best ratio of every
optimiser start, and the worst ratio overall (a violation is a ratio above ``1 + 1e-9``).

The checks of the chapters live here too, next to the harness; the bound modules keep only the
mathematics they check:

* Chapter 1 — :func:`falsify_norm_inequalities` (:data:`bounds_lib.theory.norms.NORM_INEQUALITIES`);
* Chapter 2 — :func:`falsify_split`, :func:`adversarial_split`, :func:`check_split` (the split lemmas of
  :mod:`bounds_lib.theory.interpolation`);
* Chapter 3 — :func:`falsify_softmax`, :func:`check_softmax`, :func:`falsify_logits`,
  :func:`check_logits`, :func:`falsify_layer_lipschitz`, :func:`check_layer_lipschitz`,
  :func:`adversarial_layer_lipschitz`, :func:`falsify_parameter_perturbation`,
  :func:`adversarial_parameter_perturbation`, :func:`check_parameter_perturbation`,
  :func:`falsify_multihead_gamma`, :func:`check_multihead_gamma`, :func:`check_multihead_gamma_optimiser`,
  :func:`falsify_composition`, :func:`check_composition`, :func:`check_multihead_composition` (the
  factors of :mod:`bounds_lib.theory.propagation`);
* Chapter 4 — :func:`falsify_rounding`, :func:`falsify_shell_inflation`, :func:`check_shells` (the
  lemmas of :mod:`bounds_lib.theory.peeling`);
* Chapter 5 — :func:`falsify_log_factor`, :func:`falsify_frobenius_row` (the orders table of
  :mod:`bounds_lib.theory.orders` against the theorem), :func:`check_log_factor`, :func:`check_theorem_constants`,
  :func:`check_regime_slopes`, :func:`check_orders_in_depth` (SymPy claims).

A statement checked by several claims returns a :class:`CheckResult`: one line saying how many hold.

"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..theory.model import MULTI_HEAD_MATRIX_TYPES, SINGLE_HEAD_MATRIX_TYPES, project_rows, softmax_rows
from ..theory.norms import NORM_INEQUALITIES, RANK_RTOL, as_matrix, numerical_rank, schatten_power, singular_values
from ..theory.interpolation import tail_bound_dimension
from ..theory.peeling import (_RATIO, geometric_ratio, log_alpha_inflation, log_term,
                      rounding_cost_bound, shell_top)
from ..theory.propagation import (SOFTMAX_LINF_L1_RELEASED, SOFTMAX_LINF_L1_TIGHT, composition_bound, log_alpha,
                          log_gamma, log_gamma_multihead, log_layer_lipschitz, log_layer_lipschitz_multihead,
                          multihead_block_forward, multihead_composition_bound)
from ..core.validation import check_scalar

__all__ = [
    "VIOLATION_TOL",
    "OPTIMISER_XTOL",
    "OPTIMISER_FTOL",
    "TINY_DENOMINATOR",
    "TAU_GAP",
    "Falsification",
    "CheckResult",
    "adversarial_search",
    "falsify",
    "power_check",
    "norm_inequality_ratios",
    "falsify_norm_inequalities",
    "falsify_split",
    "adversarial_split",
    "check_split",
    "falsify_softmax",
    "falsify_logits",
    "falsify_layer_lipschitz",
    "check_softmax",
    "check_logits",
    "check_layer_lipschitz",
    "falsify_parameter_perturbation",
    "falsify_multihead_gamma",
    "adversarial_layer_lipschitz",
    "adversarial_parameter_perturbation",
    "check_parameter_perturbation",
    "falsify_composition",
    "falsify_multihead_layer",
    "adversarial_multihead_gamma",
    "falsify_multihead_composition",
    "check_multihead_gamma",
    "check_multihead_gamma_optimiser",
    "check_composition",
    "check_multihead_composition",
    "rounding_ratio",
    "falsify_rounding",
    "falsify_shell_inflation",
    "check_shells",
    "LOG_FACTOR_DOMAIN",
    "log_factors",
    "falsify_log_factor",
    "check_log_factor",
    "falsify_frobenius_row",
    "check_theorem_constants",
    "check_regime_slopes",
    "check_orders_in_depth",
]

#: A ratio above ``1 + VIOLATION_TOL`` counts as a violation (floating-point slack).
VIOLATION_TOL = 1e-9
#: Stopping tolerances of the optimisers (in ``x`` and in the ratio): far below any violation that matters.
OPTIMISER_XTOL, OPTIMISER_FTOL = 1e-10, 1e-12
#: Floor of a denominator that vanishes when two inputs coincide (the numerator is then 0, the ratio 0).
TINY_DENOMINATOR = 1e-300
#: Non-degenerate thresholds lie below ``σ₁`` by at least this relative gap (``τ ≤ (1 − 1e-9)σ₁``).
TAU_GAP = 1e-9


@dataclass(frozen=True)
class Falsification:
    """Outcome of a check of ``lhs ≤ rhs`` (the evidence under every inequality of Chapters 1–5).

    Parameters
    ----------
    name : str
        What was checked (printed in the chapters' tables).
    ratios : numpy.ndarray
        ``lhs/rhs`` of every random trial.
    adversarial : numpy.ndarray
        The best ratio reached from each optimiser start (empty when no search was run).

    Examples
    --------
    >>> f = Falsification("x ≤ 1", np.array([0.5, 0.9]), np.array([0.99]))
    >>> f.trials, f.violations, f.worst_random, f.worst_ratio
    (2, 0, 0.9, 0.99)
    """

    name: str
    ratios: np.ndarray
    adversarial: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def trials(self) -> int:
        """Number of random trials."""
        return int(self.ratios.size)

    @property
    def worst_random(self) -> float:
        """Largest ratio over the random trials."""
        return float(np.max(self.ratios))

    @property
    def worst_adversarial(self) -> float:
        """Largest ratio the optimiser reached (NaN when no search was run)."""
        return float(np.max(self.adversarial)) if self.adversarial.size else float("nan")

    @property
    def worst_ratio(self) -> float:
        """Largest ratio found by either the random trials or the optimiser."""
        return float(np.max(np.concatenate([self.ratios, self.adversarial])))

    @property
    def violations(self) -> int:
        """Trials (random or optimiser starts) with ratio above ``1 + VIOLATION_TOL``."""
        return int(np.count_nonzero(np.concatenate([self.ratios, self.adversarial]) > 1.0 + VIOLATION_TOL))


@dataclass(frozen=True, repr=False)
class CheckResult:
    """Named claims of one statement, each true or false, shown as one line (Chapters 3–5).

    What a chain of ``assert`` lines used to check, as a value a chapter can print: ``summary()``
    says how many claims hold and names those that do not; ``require()`` raises
    :class:`AssertionError` with that line unless every claim holds (the strict book build then
    fails); ``values`` keeps the numbers and expressions the chapter glues.

    Examples
    --------
    >>> r = CheckResult("x", (("1 < 2", True), ("2 < 1", False)))
    >>> r.holds, r.failed
    (False, ['2 < 1'])
    >>> r
    x: 1 of 2 claims hold; fails: 2 < 1
    """

    name: str
    claims: tuple[tuple[str, bool], ...]
    detail: str = ""
    values: dict = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        """Every claim holds."""
        return all(ok for _, ok in self.claims)

    @property
    def failed(self) -> list[str]:
        """The claims that do not hold."""
        return [text for text, ok in self.claims if not ok]

    def summary(self) -> str:
        """One line: the statement, how many claims hold, which fail, and the detail."""
        n_ok = sum(bool(ok) for _, ok in self.claims)
        line = f"{self.name}: {n_ok} of {len(self.claims)} claims hold"
        if self.failed:
            line += "; fails: " + "; ".join(self.failed)
        return line + (f" — {self.detail}" if self.detail else "")

    def require(self) -> "CheckResult":
        """``self`` if every claim holds, else :class:`AssertionError` with :meth:`summary`."""
        if not self.holds:
            raise AssertionError(self.summary())
        return self

    def __repr__(self) -> str:
        return self.summary()


def _worst_ratios(runs: dict, digits: int) -> str:
    """``"worst ratios a 0.98, b 1.02"``: each run's worst ratio, for a check's detail line."""
    return "worst ratios " + ", ".join(f"{k} {f.worst_ratio:.{digits}f}" for k, f in runs.items())


def _safe(ratio):
    """``ratio`` made total: NaN, infinite or raising points count as ratio 0 (the optimiser moves on)."""
    def f(x):
        try:
            v = float(ratio(np.asarray(x, dtype=np.float64)))
        except (ValueError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError):
            return 0.0
        return v if np.isfinite(v) else 0.0
    return f


def adversarial_search(ratio: Callable[[np.ndarray], float], starts, maxiter=400, method="Nelder-Mead"):
    """Maximise ``ratio(x)`` from each start with SciPy's derivative-free ``method`` (Nelder–Mead or
    Powell); return ``(best ratio per start, best x)``.

    ``starts`` is an array of shape ``(k, d)``. The ratio function should map any real vector to a
    valid configuration (e.g. project rows onto the unit ball inside it), so the search is
    unconstrained.
    """
    from scipy.optimize import minimize

    starts = np.atleast_2d(np.asarray(starts, dtype=np.float64))
    if starts.shape[0] == 0 or starts.shape[1] == 0:
        raise ValueError(f"starts must have shape (k, d) with k, d >= 1, got {starts.shape}")
    maxiter = check_scalar(maxiter, "maxiter", int, min_val=1)
    if method not in ("Nelder-Mead", "Powell"):
        raise ValueError(f"method must be 'Nelder-Mead' or 'Powell' (derivative-free), got {method!r}")
    f = _safe(ratio)
    opts = ({"maxiter": maxiter, "xatol": OPTIMISER_XTOL, "fatol": OPTIMISER_FTOL, "adaptive": True}
            if method == "Nelder-Mead" else {"maxiter": maxiter, "xtol": OPTIMISER_XTOL, "ftol": OPTIMISER_FTOL})
    best, best_x = [], None
    for x0 in starts:
        res = minimize(lambda x: -f(x), x0, method=method, options=opts)
        val = max(-float(res.fun), f(x0))
        x = res.x if -float(res.fun) >= f(x0) else x0
        if best_x is None or val > max(best):
            best_x = np.array(x)
        best.append(val)
    return np.array(best), best_x


def falsify(name, ratio, sample, rng, trials=2000, restarts=8, maxiter=400, method="Nelder-Mead"):
    """Random draws ``x = sample(rng)``, then :func:`adversarial_search` from the ``restarts`` best draws.

    Parameters
    ----------
    name : str
        The inequality's name.
    ratio : callable
        ``ratio(x) = lhs(x)/rhs(x)`` of a parameter vector ``x`` (any real vector should be a valid
        configuration); NaN, infinite or raising points count as 0.
    sample : callable
        ``sample(rng)`` draws one parameter vector.
    rng : numpy.random.Generator
        The random source (a chapter's seeded generator keeps its outputs reproducible).
    trials : int
        Random draws, ``>= 1``.
    restarts : int
        Optimiser starts (0: random draws only).
    maxiter : int
        Iterations per optimiser run.
    method : {"Nelder-Mead", "Powell"}
        SciPy's derivative-free optimiser.

    Returns
    -------
    Falsification
        Both sets of ratios.

    Raises
    ------
    TypeError
        ``trials``, ``restarts`` or ``maxiter`` is not an integer.
    ValueError
        ``trials < 1``, ``restarts < 0``, ``maxiter < 1`` or an unknown ``method``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> f = falsify("sin x ≤ x", lambda x: np.sin(x[0]) / x[0], lambda r: r.uniform(0.01, 3, 1), rng,
    ...             trials=200, restarts=2)
    >>> f.violations, f.trials, f.worst_ratio > 0.999   # attained as x → 0, never exceeded
    (0, 200, True)
    """
    trials = check_scalar(trials, "trials", int, min_val=1)
    restarts = check_scalar(restarts, "restarts", int, min_val=0)
    f = _safe(ratio)
    xs = [np.asarray(sample(rng), dtype=np.float64) for _ in range(trials)]
    ratios = np.array([f(x) for x in xs])
    adv = np.zeros(0)
    if restarts:
        order = np.argsort(ratios)[::-1][:restarts]
        adv, _ = adversarial_search(ratio, np.stack([xs[i] for i in order]), maxiter=maxiter, method=method)
    return Falsification(name, ratios, adv)


def power_check(run: Callable[[float], Falsification], weakened):
    """Run the harness ``run(weakening)`` against the proved bound and a weakened one.

    ``run(1.0)`` must check the proved bound; ``run(weakened)`` the weakened bound (the caller
    decides what the weakening means: a smaller constant, or the bound divided by ``weakened``).
    Returns ``(proved, weak)``; raises ``AssertionError`` if the proved bound is violated or the
    weakened one is *not* — then the harness has no power against a wrong constant.
    """
    proved, weak = run(1.0), run(weakened)
    if proved.violations:
        raise AssertionError(f"{proved.name}: the proved bound is violated (worst ratio {proved.worst_ratio:.6g})")
    if not weak.violations:
        raise AssertionError(f"{weak.name}: no violation of the weakened bound (worst ratio {weak.worst_ratio:.6g});"
                             " the harness has no power")
    return proved, weak


# ---------------------------------------------------------------- Chapter 1: inequalities between the norms


def norm_inequality_ratios(W, weaken=1.0) -> dict:
    """``weaken · lhs/rhs`` of every inequality in :data:`~bounds_lib.theory.norms.NORM_INEQUALITIES` at the matrix
    ``W``
    (0 when both sides vanish)."""
    A = as_matrix(W)
    s = singular_values(A)
    r = numerical_rank(s)
    if r == 0:
        return {name: 0.0 for name in NORM_INEQUALITIES}
    k = s[:r]
    out = {}
    for name, (lhs, rhs) in NORM_INEQUALITIES.items():
        b = float(rhs(A, s, k, r))
        out[name] = weaken * float(lhs(A, s, k, r)) / b if b > 0 else 0.0
    return out


def falsify_norm_inequalities(rng, trials=4000, restarts=2, weaken=1.0, shape=(4, 5), maxiter=4000):
    """Check every inequality of :data:`~bounds_lib.theory.norms.NORM_INEQUALITIES` (Chapter 1).

    First by random matrices of random shape (1–39 per side), rank and scale (``10^±3``), then by
    Nelder–Mead (``maxiter`` iterations) over the entries of a ``shape`` matrix from random starts.
    ``weaken > 1`` divides every right side by ``weaken`` (power check; the deterministic one is
    :func:`bounds_lib.checks.witnesses.norm_witnesses`). Returns one :class:`Falsification` per inequality."""
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
        adv, _ = (adversarial_search(lambda x, n=n: norm_inequality_ratios(x.reshape(shape), weaken)[n], starts,
                                     maxiter=maxiter) if restarts else (np.zeros(0), None))
        out.append(Falsification(n + (f" ÷{weaken:g}" if weaken != 1.0 else ""), np.array(rand[n]), adv))
    return out


# ---------------------------------------------------------------- Chapter 2: the split lemmas


def _split_ratios(s, tau, p, k, weaken):
    """The three ratios of the split lemmas for descending spectra ``s`` (rows), threshold ``tau``, index ``p``."""
    tail = np.where(s <= tau[:, None], s, 0.0)
    r1 = np.count_nonzero(s > tau[:, None], axis=1)
    with np.errstate(divide="ignore"):
        Sp = np.where(p[:, None] > 0, s ** p[:, None], 0.0).sum(axis=1)
    rank = np.count_nonzero(s > RANK_RTOL * k * np.maximum(s[:, 0:1], 1.0), axis=1)
    Sp = np.where(p > 0, Sp, rank)
    f2 = np.sqrt(np.sum(tail**2, axis=1))
    # at p = 0 the numerical zeros (σ ≤ RANK_RTOL·k·σ₁) are not in S_0: allow their σ² ≤ (RANK_RTOL k σ₁)² k slack
    slack = (RANK_RTOL * k * np.maximum(s[:, 0], 1.0)) ** 2 * k
    return {"rank": weaken * r1 / np.maximum(Sp / tau**p, TINY_DENOMINATOR),
            "tail_dim": weaken * f2 / tail_bound_dimension(tau, (k, k)),
            "tail_schatten": weaken * f2 / np.sqrt(tau ** (2 - p) * Sp + slack)}


def falsify_split(rng, trials=10_000, nondegenerate=False, weaken=1.0):
    """Random matrices (shapes 1–12, log-uniform scales, thresholds, p ∈ [0, 2]): ratios of
    ``rank(W₁)/(S_p/τ^p)``, ``‖W₂‖_F/(τ√min)``, ``‖W₂‖_F/√(τ^{2−p}S_p)`` (Chapter 2).

    Half of the matrices have a planted power-law spectrum (so ranks and tails are non-trivial).
    ``nondegenerate=True`` draws only thresholds ``τ < σ₁`` (so ``W₁ ≠ 0``; with ``τ ≥ σ₁`` the tail
    bounds are attained trivially). ``weaken > 1`` divides every bound by ``weaken`` (power check).
    Returns three :class:`Falsification` results.
    """
    out = {"rank": [], "tail_dim": [], "tail_schatten": []}
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
    Returns three :class:`Falsification` results (random and optimiser ratios)."""
    out = []
    for key in ("rank", "tail_dim", "tail_schatten"):
        def ratio(x, key=key):
            s = np.sort(np.exp(np.clip(x[:-2], -30, 30)))[::-1][None, :]
            tau = s[:, 0] * (1 - TAU_GAP) / (1 + np.exp(-x[-2]))
            p = np.array([2.0 / (1 + np.exp(-x[-1]))])
            return float(_split_ratios(s, tau, p, s.shape[1], weaken)[key][0])

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
    random then optimiser), lists of :class:`Falsification` in the order rank, tail (dimension),
    tail (Schatten).
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


# -------------------------------- Chapter 3: softmax, logits, layer factor, parameter perturbation, composition


def _spectral(rng, shape, s):
    A = rng.standard_normal(shape)
    return s * A / np.linalg.norm(A, 2)


def falsify_softmax(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖softmax(z) − softmax(z')‖₁ / (c‖z − z'‖∞)`` over random logits (T = 2–16, scales 1e-3–30)."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        T = int(rng.integers(2, 17))
        z = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-3), np.log(30), (per, 1)))
        d = rng.standard_normal((per, T)) * np.exp(rng.uniform(np.log(1e-6), np.log(3), (per, 1)))
        if rng.random() < 0.5:  # near-worst directions: ±δ on a balanced split
            d = np.sign(d) * np.abs(d).max(axis=1, keepdims=True)
        num = np.abs(softmax_rows(z + d) - softmax_rows(z)).sum(axis=1)
        out.append(num / (softmax_const * np.abs(d).max(axis=1)))
    return Falsification("softmax l∞→l1", np.concatenate(out)[:trials])


def falsify_logits(rng, trials=10_000):
    """Ratios ``|x_t W x_sᵀ − x'_t W x'_sᵀ| / (2‖W‖₂ δ)`` for rows in the unit ball (Chapter 3, ``ch03-lem-logits``),
    ``δ = max(‖x_t−x'_t‖, ‖x_s−x'_s‖)``."""
    out, per = [], 500
    for _ in range(int(np.ceil(trials / per))):
        N = int(rng.integers(1, 9))
        W = _spectral(rng, (N, N), float(np.exp(rng.uniform(-2, 2))))
        X = project_rows(rng.standard_normal((per, 4, N)) * rng.uniform(0.1, 3, (per, 1, 1)))
        Xp = project_rows(X + rng.standard_normal((per, 4, N)) * np.exp(rng.uniform(-6, 0, (per, 1, 1))))
        num = np.abs(X[:, 0] @ W * X[:, 1] - (Xp[:, 0] @ W) * Xp[:, 1]).sum(axis=1)
        delta = np.maximum(np.linalg.norm(X[:, 0] - Xp[:, 0], axis=1), np.linalg.norm(X[:, 1] - Xp[:, 1], axis=1))
        out.append(num / (2 * np.linalg.norm(W, 2) * np.maximum(delta, TINY_DENOMINATOR)))
    return Falsification("bilinear logits", np.concatenate(out)[:trials])


def falsify_layer_lipschitz(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the single-head block of
    :mod:`bounds_lib.theory.model` (N = 1–6, T = 1–5, spectral norms 0.2–5, all four activations)."""
    from ..theory import model as M
    out, per = [], 250
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        N, T, act = int(rng.integers(1, 7)), int(rng.integers(1, 6)), acts[i % len(acts)]
        sc = np.exp(rng.uniform(np.log(0.2), np.log(5), 3))
        blk = M.Block(*(_spectral(rng, (N, N), s) for s in sc))
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.1, 2, (per, 1, 1)))
        Xp = project_rows(X + np.exp(rng.uniform(np.log(1e-4), 0, (per, 1, 1))) * rng.standard_normal((per, T, N)))
        num = np.max(np.linalg.norm(M.block_forward(X, blk, act) - M.block_forward(Xp, blk, act), axis=-1), axis=-1)
        den = np.max(np.linalg.norm(X - Xp, axis=-1), axis=-1)
        lam = np.exp(log_layer_lipschitz(sc[2], sc[1], sc[0], M.ACTIVATION_LIPSCHITZ[act], softmax_const))
        out.append(num / (lam * np.maximum(den, TINY_DENOMINATOR)))
    return Falsification("layer Lipschitz Λ", np.concatenate(out)[:trials])


def check_softmax(rng, trials=10_000, points=20_000, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Lemma ``ch03-lem-softmax`` (softmax is ``c``-Lipschitz from ℓ∞ to ℓ1 with ``c = 1``), checked.

    In this order on ``rng``: the exact ``∞→1`` norm of the Jacobian
    (:func:`bounds_lib.theory.propagation.softmax_jacobian_linf_l1`) at ``points`` random logits of 6 tokens
    (scales ``e^{-4}`` to ``e^2``); :func:`falsify_softmax` with ``softmax_const`` and with
    ``softmax_const / 1.1``. Claims: the Jacobian norm is at most ``c`` everywhere and equals ``c``
    at ``z = 0``, ``T = 2`` (the constant cannot be lowered); no difference quotient exceeds ``c``;
    as power, ``c/1.1`` is broken. ``values``: ``jacobian`` (the norms), ``random``, ``weakened``.
    """
    from ..theory.propagation import softmax_jacobian_linf_l1

    points = check_scalar(points, "points", int, min_val=1)
    Z = rng.standard_normal((points, 6)) * np.exp(rng.uniform(-4, 2, (points, 1)))
    jac = softmax_jacobian_linf_l1(Z)
    soft = falsify_softmax(rng, trials=trials, softmax_const=softmax_const)
    weak = falsify_softmax(rng, trials=trials, softmax_const=softmax_const / 1.1)
    claims = (
        (f"Jacobian norm <= c at {points} points", float(jac.max()) <= softmax_const * (1 + 1e-12)),
        ("Jacobian norm = c at z = 0, T = 2", softmax_jacobian_linf_l1(np.zeros(2))[0] == softmax_const),
        (f"no difference quotient above c in {soft.trials} draws",
         soft.trials >= trials and soft.worst_ratio <= 1 + VIOLATION_TOL),
        ("power: c / 1.1 is broken", weak.violations > 0),
    )
    detail = f"max Jacobian norm {jac.max():.6f}; worst quotient ratio {soft.worst_ratio:.10f}"
    return CheckResult("softmax l∞→l1", claims, detail, dict(jacobian=jac, random=soft, weakened=weak))


def check_logits(rng, trials=10_000, weaken=1.1):
    """Lemma ``ch03-lem-logits`` (bilinear logits), checked by :func:`falsify_logits`.

    Claims: no violation in ``trials`` draws; as power, the same draws break the bound divided by
    ``weaken``. ``values``: ``random`` (the :class:`Falsification`), ``weak_violations``.
    """
    logit = falsify_logits(rng, trials=trials)
    weak_viol = int(np.count_nonzero(weaken * logit.ratios > 1))
    claims = (
        (f"no violation in {logit.trials} draws", logit.trials >= trials and logit.worst_ratio <= 1),
        (f"power: the same draws break the bound / {weaken:g}", weak_viol > 0),
    )
    return CheckResult("bilinear logits", claims, f"worst ratio {logit.worst_ratio:.6f}; "
                       f"{weak_viol} violations of the bound / {weaken:g}",
                       dict(random=logit, weak_violations=weak_viol))


def check_layer_lipschitz(rng, trials=10_000, false_const=0.25, **search):
    """Theorem ``ch03-thm-layer`` (the per-layer factor Λ), checked; random draws alone have no power.

    In this order on ``rng``: :func:`falsify_layer_lipschitz` with the tight softmax constant and with
    the false ``false_const``; :func:`adversarial_layer_lipschitz` (keywords ``search``) with both.
    Claims: no violation in the random draws or by the optimiser; the random draws miss the false
    constant (why the optimiser is needed); as power, the optimiser breaks it. ``values``: ``random``,
    ``random_false``, ``optimiser``, ``optimiser_false``.
    """
    runs = dict(
        random=falsify_layer_lipschitz(rng, trials=trials, softmax_const=SOFTMAX_LINF_L1_TIGHT),
        random_false=falsify_layer_lipschitz(rng, trials=trials, softmax_const=false_const),
        optimiser=adversarial_layer_lipschitz(rng, **search),
        optimiser_false=adversarial_layer_lipschitz(rng, softmax_const=false_const, **search),
    )
    claims = (
        (f"no violation in {runs['random'].trials} random draws",
         runs["random"].trials >= trials and runs["random"].violations == 0),
        ("no violation found by the optimiser", runs["optimiser"].violations == 0),
        (f"random draws miss the false constant c = {false_const:g}", runs["random_false"].violations == 0),
        (f"power: the optimiser breaks c = {false_const:g}", runs["optimiser_false"].violations > 0),
    )
    detail = _worst_ratios(runs, 3)
    return CheckResult("layer Lipschitz Λ", claims, detail, runs)


def falsify_parameter_perturbation(rng, trials=10_000, softmax_const=SOFTMAX_LINF_L1_TIGHT, released=False):
    """Ratios ``|f_W(X) − f_{W'}(X)| / (‖w‖ Σ_{ℓ,a} γ^{(ℓ,a)} α^{(ℓ)} ‖W'^{(ℓ,a)} − W^{(ℓ,a)}‖₂)`` for whole
    single-head networks (L = 1–5, N = 2–6, T = 1–4); γ, α from the unperturbed network's norms.
    ``released=True`` uses γ without L_φ (and the released constant if ``softmax_const=2``)."""
    from ..theory import model as M
    out, per = [], 50
    acts = sorted(M.ACTIVATIONS)
    for i in range(int(np.ceil(trials / per))):
        L, N, T, act = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 5)), acts[i % len(acts)]
        sn = float(np.exp(rng.uniform(np.log(0.3), np.log(3))))
        net = M.random_transformer(L, N, rng, spectral_norm=sn, act=act)
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.3))))
        D = np.zeros((L, 3))
        mask = rng.random((L, 3)) < 0.6
        mask[rng.integers(L), rng.integers(3)] = True
        blocks = []
        for ell, b in enumerate(net.blocks):
            new = []
            for a, W in enumerate((b.W_QK, b.W_V, b.W_M)):
                if mask[ell, a]:
                    E = _spectral(rng, W.shape, eps * sn)
                    D[ell, a] = np.linalg.norm(E, 2)
                    W = W + E
                new.append(W)
            blocks.append(M.Block(*new))
        net2 = M.SingleHeadTransformer(tuple(blocks), net.w, act=act)
        X = rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1))
        d = np.abs(M.forward(net, X) - M.forward(net2, X))
        C = np.array([[np.linalg.norm(W, 2) for W in (b.W_QK, b.W_V, b.W_M)] for b in net.blocks])
        g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=None if released else net.L_phi, softmax_const=softmax_const)
        la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
        G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
        out.append(d / (np.linalg.norm(net.w) * np.sum(G * D)))
    return Falsification("network parameter perturbation", np.concatenate(out)[:trials])


def falsify_multihead_gamma(rng, trials=10_000, released=False, softmax_const=SOFTMAX_LINF_L1_TIGHT):
    """Ratios ``‖B_{W'}(X) − B_W(X)‖_{2→∞} / (γ_a ‖ΔW_a‖₂)`` for one perturbed matrix of a multi-head
    block with ``φ = L_φ·tanh`` (``L_φ ∈ {1, 3}``). Returns ``(Falsification, keys)`` where ``keys[i]``
    names the perturbed matrix type. ``released=True`` uses the released γ (no L_φ, ``γ_Mout = 1``, c = 2)."""
    out, keys, per = [], [], 50
    names = MULTI_HEAD_MATRIX_TYPES
    for _ in range(int(np.ceil(trials / per))):
        N, T, H = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        Nf = int(rng.integers(N, 3 * N + 1))
        Lp = float(rng.choice([1.0, 3.0]))
        s = np.exp(rng.uniform(np.log(0.3), np.log(4), 4))
        QK = [_spectral(rng, (N, N), s[0]) for _ in range(H)]
        V = [_spectral(rng, (N, N), s[1]) for _ in range(H)]
        Mi, Mo = _spectral(rng, (N, Nf), s[2]), _spectral(rng, (Nf, N), s[3])
        eps = float(np.exp(rng.uniform(np.log(1e-5), np.log(0.1))))
        which, h = int(rng.integers(4)), int(rng.integers(H))
        P = [list(QK), list(V), Mi, Mo]
        if which < 2:
            P[which][h] = P[which][h] + _spectral(rng, (N, N), eps)
        else:
            P[which] = P[which] + _spectral(rng, P[which].shape, eps)
        X = project_rows(rng.standard_normal((per, T, N)) * rng.uniform(0.2, 3, (per, 1, 1)))
        phi = lambda x, Lp=Lp: Lp * np.tanh(x)  # noqa: E731
        Z, Zp = multihead_block_forward(X, QK, V, Mi, Mo, phi), multihead_block_forward(X, *P, phi)
        d = np.max(np.linalg.norm(Z - Zp, axis=-1), axis=-1)
        CV = np.array([np.linalg.norm(v, 2) for v in V])
        CQ = np.array([np.linalg.norm(q, 2) for q in QK])
        if released:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, softmax_const=SOFTMAX_LINF_L1_RELEASED)
        else:
            g = log_gamma_multihead(s[2], s[3], CV, CQ, L_phi=Lp, softmax_const=softmax_const, phi_bound=Lp)
        gam = np.exp(g[names[which]])
        gam = float(gam[h]) if which < 2 else float(gam)
        out.append(d / (gam * eps))
        keys += [names[which]] * per
    return Falsification("multi-head γ" + (" (released)" if released else ""), np.concatenate(out)[:trials]), \
        np.array(keys[:trials])


def _block_ratio(x, T, N, softmax_const, weaken, qk="identity"):
    """Λ-ratio of the identity-activation block with ``W_QK = qI`` (``qk="identity"``) or the indefinite
    ``q·diag(−1, 1, …, 1)`` (``qk="indefinite"``, the shape of the witness), ``W_V = W_M = I`` at
    ``x = (log q, X, X')``."""
    from ..theory import model as M

    q = float(np.exp(np.clip(x[0], -4.0, 4.0)))
    X = project_rows(x[1:1 + T * N].reshape(T, N))
    Xp = project_rows(x[1 + T * N:1 + 2 * T * N].reshape(T, N))
    den = float(np.max(np.linalg.norm(X - Xp, axis=-1)))
    if den < 1e-12:
        return 0.0
    sign = np.ones(N)
    if qk == "indefinite":
        sign[0] = -1.0
    elif qk != "identity":
        raise ValueError(f"qk must be 'identity' or 'indefinite', got {qk!r}")
    blk = M.Block(q * np.diag(sign), np.eye(N), np.eye(N))
    diff = M.block_forward(X, blk, "identity") - M.block_forward(Xp, blk, "identity")
    num = float(np.max(np.linalg.norm(diff, axis=-1)))
    lam = float(np.exp(log_layer_lipschitz(1.0, 1.0, q, 1.0, softmax_const)))
    return weaken * num / (lam * den)


def adversarial_layer_lipschitz(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, tokens=(2, 3, 4),
                                qs=(0.5, 1.0, 3.0), N=2, trials=60, restarts=2, maxiter=1500, qk="identity"):
    """Adversarial search against Λ (Chapter 3, ``ch03-thm-layer``): for every number of tokens ``T`` and
    logit gain ``q``, random draws of ``(X, X')`` and Nelder–Mead from the best ones maximise
    ``weaken · ‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for the block with ``W_QK = qI``,
    ``W_V = W_M = I`` and identity activation (rows projected onto the unit ball). ``q`` is held fixed
    per search: left free, the optimiser drifts to ``q → 0``, where the ratio tends to 1 for any
    constant. ``qk="indefinite"`` uses ``W_QK = q·diag(−1, 1, …)``, where Λ is attained as ``q → ∞``
    (:func:`bounds_lib.checks.witnesses.layer_qk_witness`). Run it with a wrong ``softmax_const`` (e.g. 0.25) or
    ``weaken = 1.1`` to check its power."""
    parts = []
    for T in tokens:
        for q in qs:
            lq = float(np.log(check_scalar(q, "q (the logit gain)", float, min_val=0.0, include_boundaries="neither")))
            parts.append(falsify("Λ", lambda x, T=T, lq=lq: _block_ratio(np.concatenate([[lq], x]), T, N,
                                                                          softmax_const, weaken, qk),
                                 lambda r, T=T: r.normal(0.0, 0.6, 2 * T * N), rng,
                                 trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("layer Lipschitz Λ, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Parameter-perturbation ratio at ``x = (W: 3L N², E: 3L N², X: T N, log ε)`` (single-head network)."""
    from ..theory import model as M

    k = 3 * L * N * N
    Ws = x[:k].reshape(L, 3, N, N)
    perturbed = np.array([a in perturb for a in SINGLE_HEAD_MATRIX_TYPES])
    Es = x[k:2 * k].reshape(L, 3, N, N) * perturbed[None, :, None, None]
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), w, act=act)
    net2 = M.SingleHeadTransformer(tuple(M.Block(*(W + eps * E)) for W, E in zip(Ws, Es)), w, act=act)
    d = abs(M.forward(net, X) - M.forward(net2, X))
    C = np.array([[np.linalg.norm(W, 2) for W in b] for b in Ws])
    D = np.array([[eps * np.linalg.norm(E, 2) for E in b] for b in Es])
    g = log_gamma(C[:, 2], C[:, 1], C[:, 0], L_phi=net.L_phi, softmax_const=softmax_const)
    la = log_alpha(log_layer_lipschitz(C[:, 2], C[:, 1], C[:, 0], net.L_phi, softmax_const))
    G = np.exp(np.stack([g["QK"], g["V"], np.broadcast_to(g["M"], (L,))], axis=1) + la[:, None])
    bound = float(np.sum(G * D))
    return weaken * d / bound if bound > 0 else 0.0


def adversarial_parameter_perturbation(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2),
                                       N=2, T=2, act="identity", trials=150, restarts=2, maxiter=4000,
                                       perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Adversarial search against the whole-network parameter-perturbation bound (Chapter 3,
    ``ch03-thm-param``): random draws of weights, perturbation directions, input and ``log ε``,
    then Nelder–Mead from the best, maximising ``weaken·|f_W(X) − f_{W'}(X)| / (‖w‖₂ Σ γ α ‖ΔW‖₂)``
    (``‖w‖₂ = 1``); ``perturb`` names the matrix types that are perturbed (``("QK",)`` isolates the
    softmax constant). Power check: a wrong ``softmax_const`` or ``weaken = 1.1``."""
    parts = []
    for L in depths:
        dim = 6 * L * N * N + T * N + 1

        def sample(r, L=L, dim=dim):
            x = r.normal(0.0, 0.8, dim)
            x[-1] = r.uniform(-8.0, -2.0)
            return x

        parts.append(falsify("param", lambda x, L=L: _network_ratio(x, L, N, T, act, softmax_const, weaken, perturb),
                             sample,
                             rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == SINGLE_HEAD_MATRIX_TYPES else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("network parameter perturbation, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def check_parameter_perturbation(rng, trials=10_000):
    """Theorem ``ch03-thm-param`` (the change of the network under a change of its matrices), checked.

    Five runs, in this order on ``rng``: :func:`falsify_parameter_perturbation` (``trials`` random
    draws, tight softmax constant) and :func:`adversarial_parameter_perturbation` for every matrix, for
    ``W^{QK}`` alone, for ``W^{QK}`` with the softmax constant 1/4 and against the bound divided by 1.1.
    Claims: the first three find no violation; as power, the last two do. ``values``: the five
    :class:`Falsification` (``random``, ``optimiser``, ``qk``, ``qk_c_quarter``, ``weakened``).
    """
    runs = dict(
        random=falsify_parameter_perturbation(rng, trials=trials, softmax_const=SOFTMAX_LINF_L1_TIGHT),
        optimiser=adversarial_parameter_perturbation(rng),
        qk=adversarial_parameter_perturbation(rng, perturb=("QK",)),
        qk_c_quarter=adversarial_parameter_perturbation(rng, perturb=("QK",), softmax_const=0.25),
        weakened=adversarial_parameter_perturbation(rng, weaken=1.1),
    )
    claims = (
        (f"no violation in {runs['random'].trials} random draws",
         runs["random"].trials >= trials and runs["random"].violations == 0),
        ("no violation found by the optimiser", runs["optimiser"].violations == 0),
        ("no violation found by the optimiser changing W^QK alone", runs["qk"].violations == 0),
        ("power: softmax constant 1/4 broken through W^QK", runs["qk_c_quarter"].violations > 0),
        ("power: the bound / 1.1 broken", runs["weakened"].violations > 0),
    )
    detail = _worst_ratios(runs, 4)
    return CheckResult("network parameter perturbation", claims, detail, runs)


def _composition_ratio(x, L, N, T, act, softmax_const, weaken, perturb=SINGLE_HEAD_MATRIX_TYPES):
    from ..theory import model as M

    k = 3 * L * N * N
    perturbed = np.array([a in perturb for a in SINGLE_HEAD_MATRIX_TYPES])
    Ws, Es = x[:k].reshape(L, 3, N, N), x[k:2 * k].reshape(L, 3, N, N) * perturbed[None, :, None, None]
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    w = np.ones(N) / np.sqrt(N)
    net = M.SingleHeadTransformer(tuple(M.Block(*W) for W in Ws), w, act=act)
    net_hat = M.SingleHeadTransformer(tuple(M.Block(*(W + eps * E)) for W, E in zip(Ws, Es)), w, act=act)
    lhs, rhs, _, _ = composition_bound(net, net_hat, X, softmax_const)
    return weaken * lhs / rhs if rhs > 0 else 0.0


def falsify_composition(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2), N=2, T=2,
                        acts=("identity", "tanh"), trials=150, restarts=2, maxiter=4000,
                        perturb=SINGLE_HEAD_MATRIX_TYPES):
    """Random draws, then Nelder–Mead, against the composition lemma (``ch03-thm-compose``):
    ``weaken · max_i|f_W − f_Ŵ| / Σ_j κ_j d_j`` over weights, perturbation directions, input and scale.
    ``weaken = 1.1`` checks the search's power; ``perturb=("QK",)`` isolates the softmax constant (the
    whole-network optimum goes through V and M), so a wrong ``softmax_const`` must then be found."""
    parts = []
    for L in depths:
        for act in acts:
            dim = 6 * L * N * N + T * N + 1

            def sample(r, dim=dim):
                x = r.normal(0.0, 0.8, dim)
                x[-1] = r.uniform(-8.0, -2.0)
                return x

            parts.append(falsify("compose", lambda x, L=L, act=act: _composition_ratio(x, L, N, T, act, softmax_const,
                                                                                        weaken, tuple(perturb)),
                                 sample, rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == SINGLE_HEAD_MATRIX_TYPES else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("composition (data metric), optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


# ---------------------------------------------------------------- Chapter 3: the multi-head surrogate

#: Activations of the multi-head searches and their ``L_φ``: ``3tanh`` has ``L_φ = 3`` (so a dropped ``L_φ`` shows).
_MH_ACTS = {"identity": (lambda x: x, 1.0), "tanh": (np.tanh, 1.0), "3tanh": (lambda x: 3.0 * np.tanh(x), 3.0)}


def _mh_layers(x, L, H, N, Nf):
    """``L`` multi-head layers ``(QK_heads, V_heads, M_in, M_out)`` from the first entries of ``x``."""
    k = 2 * H * N * N + 2 * N * Nf
    layers = []
    for ell in range(L):
        y = x[ell * k:(ell + 1) * k]
        QK = [y[h * N * N:(h + 1) * N * N].reshape(N, N) for h in range(H)]
        V = [y[(H + h) * N * N:(H + h + 1) * N * N].reshape(N, N) for h in range(H)]
        o = 2 * H * N * N
        layers.append((QK, V, y[o:o + N * Nf].reshape(N, Nf), y[o + N * Nf:o + 2 * N * Nf].reshape(Nf, N)))
    return layers, L * k


def _mh_layer_ratio(x, H, N, Nf, T, act, softmax_const, weaken):
    """``weaken·‖B(X) − B(X')‖_{2→∞} / (Λ ‖X − X'‖_{2→∞})`` for one multi-head block (Λ multi-head)."""
    (lay,), k = _mh_layers(x, 1, H, N, Nf)
    phi, Lp = _MH_ACTS[act]
    X = project_rows(x[k:k + T * N].reshape(T, N))
    Xp = project_rows(x[k + T * N:k + 2 * T * N].reshape(T, N))
    den = float(np.max(np.linalg.norm(X - Xp, axis=-1)))
    if den < 1e-12:
        return 0.0
    num = float(np.max(np.linalg.norm(multihead_block_forward(X, *lay, phi) - multihead_block_forward(Xp, *lay, phi),
                                      axis=-1)))
    nrm = lambda A: float(np.linalg.norm(A, 2))  # noqa: E731
    lam = float(np.exp(log_layer_lipschitz_multihead(np.array([nrm(lay[2])]), np.array([nrm(lay[3])]),
                                                     np.array([[nrm(v) for v in lay[1]]]),
                                                     np.array([[nrm(q) for q in lay[0]]]), Lp, softmax_const)[0]))
    return weaken * num / (lam * den)


def falsify_multihead_layer(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, H=2, N=2, Nf=2, tokens=(2,),
                            acts=("identity", "tanh", "3tanh"), trials=300, restarts=3, maxiter=3000):
    """Random draws, then Nelder–Mead over weights and inputs, against the multi-head ``Λ`` of
    ``ch03-lem-layer-mh``: ``Λ = L_φ C(M_in) C(M_out) Σ_h C(Ṽ_h)(1 + 2c C(QK_h))``. Power check:
    ``weaken = 1.1`` (the factor is attained as the logits vanish)."""
    parts = []
    for T in tokens:
        for act in acts:
            dim = 2 * H * N * N + 2 * N * Nf + 2 * T * N
            def sample(r, dim=dim):
                x = r.normal(0.0, 0.7, dim)
                x[:H * N * N] *= r.choice([1.0, 0.02])   # half the draws near vanishing logits
                return x

            parts.append(falsify("Λ mh", lambda x, T=T, act=act: _mh_layer_ratio(x, H, N, Nf, T, act, softmax_const,
                                                                                  weaken),
                                 sample, rng, trials=trials, restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification("multi-head Λ, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def _mh_gamma_ratio(x, which, H, N, Nf, T, act, softmax_const, weaken):
    """``weaken·‖B_{W'}(X) − B_W(X)‖_{2→∞} / (γ_a ‖ΔW_a‖₂)``, matrix ``which`` of head 0 perturbed."""
    (lay,), k = _mh_layers(x, 1, H, N, Nf)
    phi, Lp = _MH_ACTS[act]
    shape = {"QK": (N, N), "V": (N, N), "M_in": (N, Nf), "M_out": (Nf, N)}[which]
    size = shape[0] * shape[1]
    E = x[k:k + size].reshape(shape) * float(np.exp(np.clip(x[k + size], -12.0, 0.0)))
    X = project_rows(x[k + size + 1:k + size + 1 + T * N].reshape(T, N))
    QK, V, Mi, Mo = [list(lay[0]), list(lay[1]), lay[2], lay[3]]
    P = [list(QK), list(V), Mi, Mo]
    i = MULTI_HEAD_MATRIX_TYPES.index(which)
    if i < 2:
        P[i][0] = P[i][0] + E
    else:
        P[i] = P[i] + E
    dE = float(np.linalg.norm(E, 2))
    if dE == 0:
        return 0.0
    d = float(np.max(np.linalg.norm(multihead_block_forward(X, QK, V, Mi, Mo, phi)
                                    - multihead_block_forward(X, *P, phi), axis=-1)))
    nrm = lambda A: float(np.linalg.norm(A, 2))  # noqa: E731
    g = log_gamma_multihead(nrm(Mi), nrm(Mo), np.array([nrm(v) for v in V]), np.array([nrm(q) for q in QK]),
                            L_phi=Lp, softmax_const=softmax_const, phi_bound=1.0)
    gam = np.exp(g[which])
    gam = float(np.ravel(gam)[0])
    return weaken * d / (gam * dE)


def adversarial_multihead_gamma(rng, which, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, H=2, N=2, Nf=2, T=2,
                                act="identity", trials=60, restarts=2, maxiter=3000):
    """Nelder–Mead (from the best of ``trials`` random draws) against the multi-head ``γ`` of one matrix
    type (``ch03-lem-gamma-mh``) over the weights, the perturbation and the input. Power check:
    ``weaken = 1.1`` (each γ is attained in a limit the search can approach), or a wrong
    ``softmax_const`` with ``which="QK"``."""
    if which not in MULTI_HEAD_MATRIX_TYPES:
        raise ValueError(f"which must be one of {', '.join(MULTI_HEAD_MATRIX_TYPES)}, got {which!r}")
    size = {"QK": N * N, "V": N * N, "M_in": N * Nf, "M_out": Nf * N}[which]
    dim = 2 * H * N * N + 2 * N * Nf + size + 1 + T * N

    def sample(r):
        x = r.normal(0.0, 0.8, dim)
        x[2 * H * N * N + 2 * N * Nf + size] = r.uniform(-8.0, -2.0)
        return x

    f = falsify("γ mh", lambda x: _mh_gamma_ratio(x, which, H, N, Nf, T, act, softmax_const, weaken), sample, rng,
                trials=trials, restarts=restarts, maxiter=maxiter)
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g})" if weaken != 1.0 else ")")
    return Falsification(f"multi-head γ_{which}, optimiser" + tag, f.ratios, f.adversarial)


def _mh_composition_ratio(x, L, H, N, Nf, T, act, softmax_const, weaken, perturb):
    layers, k = _mh_layers(x, L, H, N, Nf)
    E, _ = _mh_layers(x[k:], L, H, N, Nf)
    eps = float(np.exp(np.clip(x[-1], -12.0, 0.0)))
    X = x[2 * k:2 * k + T * N].reshape(T, N)
    keep = {a: (a in perturb) for a in MULTI_HEAD_MATRIX_TYPES}
    hat = [([q + eps * keep["QK"] * e for q, e in zip(a[0], b[0])],
            [v + eps * keep["V"] * e for v, e in zip(a[1], b[1])],
            a[2] + eps * keep["M_in"] * b[2], a[3] + eps * keep["M_out"] * b[3]) for a, b in zip(layers, E)]
    phi, Lp = _MH_ACTS[act]
    w = np.ones(N) / np.sqrt(N)
    lhs, rhs = multihead_composition_bound(layers, hat, w, X, phi, Lp, softmax_const)
    return weaken * lhs / rhs if rhs > 0 else 0.0


def falsify_multihead_composition(rng, softmax_const=SOFTMAX_LINF_L1_TIGHT, weaken=1.0, depths=(1, 2), H=2, N=2,
                                  Nf=2, T=2, acts=("identity", "tanh"), perturb=MULTI_HEAD_MATRIX_TYPES, trials=100,
                                  restarts=2, maxiter=4000):
    """Random draws, then Nelder–Mead, against the multi-head composition theorem (``ch03-thm-compose-mh``)
    (:func:`bounds_lib.theory.propagation.multihead_composition_bound`). ``perturb=("QK",)`` isolates the softmax
    constant: with a wrong ``softmax_const`` it must find a violation; ``weaken = 1.1`` checks the whole bound."""
    parts = []
    for L in depths:
        for act in acts:
            k = L * (2 * H * N * N + 2 * N * Nf)
            dim = 2 * k + T * N + 1

            def sample(r, dim=dim):
                x = r.normal(0.0, 0.8, dim)
                x[-1] = r.uniform(-8.0, -2.0)
                return x

            parts.append(falsify("compose mh", lambda x, L=L, act=act: _mh_composition_ratio(
                x, L, H, N, Nf, T, act, softmax_const, weaken, tuple(perturb)), sample, rng, trials=trials,
                restarts=restarts, maxiter=maxiter))
    tag = f" (c = {softmax_const:g}" + (f", ÷{weaken:g}" if weaken != 1.0 else "") + \
        ("" if tuple(perturb) == tuple(MULTI_HEAD_MATRIX_TYPES) else ", perturbed: " + "+".join(perturb)) + ")"
    return Falsification("multi-head composition, optimiser" + tag, np.concatenate([f.ratios for f in parts]),
                         np.concatenate([f.adversarial for f in parts]))


def check_multihead_gamma(rng, rng_released, trials=10_000):
    """Lemma ``ch03-lem-gamma-mh`` by random draws (:func:`falsify_multihead_gamma`), and the released γ.

    The lemma's γ on ``rng``, the released γ on ``rng_released``. Claims: no violation of the
    lemma in ``trials`` draws; the released γ is violated; its ``γ_{M_out} = 1`` in particular (worst
    ratio above 1 among the draws perturbing ``M_out``). ``values``: ``proved``, ``proved_keys``,
    ``released``, ``released_keys``, ``worst_released`` (the worst ratio per matrix type).
    """
    mh, mh_keys = falsify_multihead_gamma(rng, trials=trials, released=False)
    rel, rel_keys = falsify_multihead_gamma(rng_released, trials=trials, released=True)
    worst = {k: float(rel.ratios[rel_keys == k].max()) for k in MULTI_HEAD_MATRIX_TYPES if np.any(rel_keys == k)}
    claims = (
        (f"no violation of the lemma in {mh.trials} draws", mh.trials >= trials and mh.violations == 0),
        ("the released gamma is violated", rel.violations > 0),
        ("the released gamma_Mout = 1 is violated", worst.get("M_out", 0.0) > 1),
    )
    detail = (f"worst ratios: lemma {mh.worst_ratio:.3g}, released {rel.worst_ratio:.3g} "
              f"({rel.violations} violations)")
    return CheckResult("multi-head γ, random draws", claims, detail,
                       dict(proved=mh, proved_keys=mh_keys, released=rel, released_keys=rel_keys,
                            worst_released=worst))


def check_multihead_gamma_optimiser(rng, reach=0.95, weaken=1.1, **search):
    """Lemma ``ch03-lem-gamma-mh`` by the optimiser, per matrix type (:func:`adversarial_multihead_gamma`).

    For each type of :data:`bounds_lib.theory.model.MULTI_HEAD_MATRIX_TYPES`, in this order on ``rng``: the
    search against γ, then against γ divided by ``weaken``. Claims, per type: no violation and a
    worst ratio of at least ``reach`` (the search comes close to the bound); as power, γ/``weaken``
    is broken. ``values``: ``proved`` and ``weakened``, dicts of :class:`Falsification` by type.
    """
    proved, weak = {}, {}
    for a in MULTI_HEAD_MATRIX_TYPES:
        proved[a] = adversarial_multihead_gamma(rng, a, **search)
        weak[a] = adversarial_multihead_gamma(rng, a, weaken=weaken, **search)
    claims = tuple((f"gamma_{a}: no violation, reaches {reach:g}", f.violations == 0 and f.worst_ratio >= reach)
                   for a, f in proved.items()) + \
        tuple((f"power: gamma_{a} / {weaken:g} is broken", f.violations > 0) for a, f in weak.items())
    detail = "worst ratios " + ", ".join(f"{a} {f.worst_ratio:.4f} (÷{weaken:g}: {weak[a].worst_ratio:.3f})"
                                         for a, f in proved.items())
    return CheckResult("multi-head γ, optimiser", claims, detail, dict(proved=proved, weakened=weak))


def _compose_claims(runs):
    """The four claims of a composition check: no violation (whole, QK alone); power (÷1.1, false c)."""
    return (
        ("no violation", runs["whole"].violations == 0),
        ("power: the bound / 1.1 is broken", runs["weakened"].violations > 0),
        ("no violation perturbing W^QK alone", runs["qk"].violations == 0),
        ("power: softmax constant 1/2 broken through W^QK", runs["qk_false"].violations > 0),
    )


def check_composition(rng, qk_seed=20260509, trials=60, restarts=1):
    """Theorem ``ch03-thm-compose`` (composition of data-dependent covers), checked.

    :func:`falsify_composition` on ``rng`` against the bound and the bound divided by 1.1; then,
    each from ``numpy.random.default_rng(qk_seed)``, perturbing ``W^{QK}`` alone (depth 1) with the
    tight softmax constant and with ``c = 1/2``. Claims: no violation in either proved run; as
    power, the weakened bound and the false constant are broken. ``values``: ``whole``,
    ``weakened``, ``qk``, ``qk_false``.
    """
    qk = dict(trials=trials, restarts=restarts, depths=(1,), perturb=("QK",))
    runs = dict(whole=falsify_composition(rng, trials=trials, restarts=restarts),
                weakened=falsify_composition(rng, trials=trials, restarts=restarts, weaken=1.1),
                qk=falsify_composition(np.random.default_rng(qk_seed), **qk),
                qk_false=falsify_composition(np.random.default_rng(qk_seed), softmax_const=0.5, **qk))
    detail = _worst_ratios(runs, 5)
    return CheckResult("composition of covers", _compose_claims(runs), detail, runs)


def check_multihead_composition(seed=20260509, qk_seed=7, trials=60, qk_trials=40, restarts=2):
    """Theorem ``ch03-thm-compose-mh`` (composition for the multi-head surrogate), checked.

    :func:`falsify_multihead_composition` from ``numpy.random.default_rng(seed)`` (depths 1 and 2,
    ``3·tanh``, so ``L_φ = 3``) against the bound and the bound divided by 1.1; then from
    ``default_rng(qk_seed)`` perturbing ``QK`` alone (depth 1, identity, ``qk_trials`` draws) with the
    tight constant and with ``c = 1/2``. Claims as :func:`check_composition`. ``values``: ``whole``, ``weakened``,
    ``qk``, ``qk_false``.
    """
    kw = dict(depths=(1, 2), acts=("3tanh",), trials=trials, restarts=restarts)
    kq = dict(depths=(1,), acts=("identity",), trials=qk_trials, restarts=restarts, perturb=("QK",))
    runs = dict(whole=falsify_multihead_composition(np.random.default_rng(seed), **kw),
                weakened=falsify_multihead_composition(np.random.default_rng(seed), weaken=1.1, **kw),
                qk=falsify_multihead_composition(np.random.default_rng(qk_seed), **kq),
                qk_false=falsify_multihead_composition(np.random.default_rng(qk_seed), softmax_const=0.5, **kq))
    detail = _worst_ratios(runs, 4)
    return CheckResult("multi-head composition", _compose_claims(runs), detail, runs)


# ---------------------------------------------------------------- Chapter 4: rounding lemma and shells


def _sawtooth_adversary(objective, lo, hi, dim, rng, starts):
    """Maximise a separable, increasing-between-jumps objective over ``[lo, hi]^dim``.

    Random starts, then per coordinate the best point just above a shell top (where a rounded radius
    is largest relative to the radius) among a fine log-grid — a coordinate ascent that ends at a
    local maximum of each coordinate's sawtooth. Returns the best point found.
    """
    grid = np.geomspace(lo, hi, 4001)
    best_x, best_v = None, -np.inf
    for x in rng.uniform(lo, hi, (starts, dim)):
        v = objective(x)
        for _ in range(2):  # two sweeps of coordinate ascent
            for i in range(dim):
                cand = np.repeat(x[None, :], grid.size, axis=0)
                cand[:, i] = grid
                vals = objective(cand)
                k = int(np.argmax(vals))
                if vals[k] > v:
                    x, v = cand[k].copy(), float(vals[k])
        if v > best_v:
            best_x, best_v = x.copy(), v
    return best_x, best_v


def falsify_shell_inflation(rng, L=12, ratio=None, bound_log=None, trials=10_000, low=0.5, high=4.0,
                            adversarial_starts=3, what="product"):
    """Check ``log inflation ≤ bound_log`` by random draws and an adversarial search (Chapter 4).

    ``what="product"``: the inflation of a product of the ``3(L−1)`` spectral radii of
    ``α⁽⁰⁾`` (the lemma's key step, tight as every radius approaches a shell top from above);
    ``what="alpha"``: the inflation of ``α⁽⁰⁾`` itself
    (:func:`~bounds_lib.theory.peeling.log_alpha_inflation`, tight softmax constant).
    Radii are drawn log-uniformly in ``[low, high]``. ``ratio`` defaults to ``1 + 1/L``; ``bound_log``
    defaults to ``3(L−1)·log ρ``. Returns a :class:`Falsification` whose ratios
    are ``log inflation / bound_log`` (random draws; ``adversarial``: the coordinate-ascent optimum —
    a saw-tooth objective defeats Nelder–Mead, so the search is specialised).
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=1)
    if L < 2:
        raise ValueError("L must be >= 2: α⁽⁰⁾ is a product over layers 1..L-1")
    rho = (geometric_ratio(L) if ratio is None
           else check_scalar(ratio, _RATIO, float, min_val=1.0, include_boundaries="neither"))
    k = 3 * (L - 1)
    bound_log = k * math.log(rho) if bound_log is None else float(bound_log)
    if not bound_log > 0:
        raise ValueError(f"bound_log must be positive, got {bound_log!r}")
    if not (0 < low < high < math.inf):
        raise ValueError(f"need 0 < low < high, got low={low!r}, high={high!r}")

    def objective(x):
        x = np.atleast_2d(x)
        if what == "product":
            return np.sum(np.log(shell_top(x[:, 3:], rho)) - np.log(x[:, 3:]), axis=1)
        return log_alpha_inflation(x[:, 0::3], x[:, 1::3], x[:, 2::3], rho)

    if what not in ("product", "alpha"):
        raise ValueError(f"what must be 'product' or 'alpha', got {what!r}")
    draws = np.exp(rng.uniform(math.log(low), math.log(high), (int(trials), 3 * L)))
    vals = objective(draws)
    adv = np.zeros(0)
    if adversarial_starts:
        _, v = _sawtooth_adversary(objective, low, high, 3 * L, rng, int(adversarial_starts))
        adv = np.array([v])
    name = f"shells rho={rho:.4g}: {what} of {k} radii"
    return Falsification(name, vals / bound_log, adv / bound_log)


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-max(min(x, 700.0), -700.0)))  # clipped: exp(±700) stays finite


def rounding_ratio(x, weaken=1.0):
    """``(log 𝒯(p') − log 𝒯(p)) / (bound/weaken)`` at a point ``x`` of ℝ^d.

    The bound is :func:`~bounds_lib.theory.peeling.rounding_cost_bound`.

    ``x = (a, b, log K, log N, log σ_1, …, log σ_k)``: ``p = 2·sigmoid(a)``, ``p' = p + (2 − p)·sigmoid(b)``,
    ``N = max(1, round(e^{log N}))``, singular values sorted. Any real vector is a valid configuration,
    so an optimiser can search freely (Chapter 4, ``ch04-lem-rounding``). 0 where the bound is 0.
    """
    x = np.asarray(x, dtype=np.float64)
    p = 2.0 * _sigmoid(x[0])
    q = p + (2.0 - p) * _sigmoid(x[1])
    logK = float(np.clip(x[2], -50, 50))
    N = int(max(1, round(math.exp(min(x[3], 12.0)))))
    s = np.sort(np.exp(np.clip(x[4:], -30, 30)))[::-1]
    if not (p > 0 and q > p):
        return 0.0
    lS, lSq = math.log(schatten_power(s, p)), math.log(schatten_power(s, q))
    diff = log_term(lSq, q, logK, N) - log_term(lS, p, logK, N)
    bound = float(rounding_cost_bound(q - p, p, s[0], lS, logK, N)) / weaken
    return diff / bound if bound > 0 else 0.0


def falsify_rounding(rng, trials=2000, restarts=8, weaken=1.0, k=4):
    """Random draws and a Nelder–Mead search for a violation of the rounding lemma (Chapter 4).

    ``weaken > 1`` checks the bound divided by ``weaken`` (a power check: it must be violated).
    Uses :func:`falsify`.
    """
    def sample(r):
        return np.r_[r.normal(-1, 3), r.normal(0, 3), r.uniform(-10, 40), r.uniform(0, 7), r.uniform(-6, 3, k)]

    return falsify(f"rounding lemma (bound / {weaken:g})", lambda x: rounding_ratio(x, weaken), sample, rng,
                   trials=trials, restarts=restarts)


def check_shells(rng, L=12, trials=10_000, adversarial_starts=2):
    """Lemma ``ch04-lem-shells`` at depth ``L``: four falsifications by :func:`falsify_shell_inflation`.

    Claims: dyadic shells (ratio 2) break the ``e³`` bound on the inflation of ``α⁽⁰⁾`` (violations,
    median inflation above 10³); shells of ratio ``1 + 1/L`` keep it within ``e³``; the product of the
    ``3(L−1)`` rounded radii reaches its supremum ``ρ^{3(L−1)}`` (worst ratio above 0.999, no
    violation); and, as power, the supremum divided by 1.1 is broken — by the optimiser only. ``values``:
    the four :class:`Falsification` and the inflations of the random draws (``dyadic``, ``geometric``).
    """
    L = check_scalar(L, "L (number of layers)", int, min_val=2)
    kw = dict(trials=trials, adversarial_starts=adversarial_starts)
    dyadic = falsify_shell_inflation(rng, L, ratio=2.0, bound_log=3.0, what="alpha", **kw)
    geom = falsify_shell_inflation(rng, L, bound_log=3.0, what="alpha", **kw)
    tight = falsify_shell_inflation(rng, L, **kw)
    sup_log = 3 * (L - 1) * math.log(geometric_ratio(L))
    weak = falsify_shell_inflation(rng, L, bound_log=sup_log - math.log(1.1), **kw)
    # bound_log = 3: ratios are log-inflations / 3
    infl_dy, infl_geo = np.exp(3 * dyadic.ratios), np.exp(3 * geom.ratios)
    claims = (
        ("dyadic shells break e^3", dyadic.violations > 0 and float(np.median(infl_dy)) > 1e3),
        ("shells of ratio 1 + 1/L keep alpha within e^3", geom.violations == 0),
        ("the product reaches rho^k", tight.violations == 0 and tight.worst_ratio > 0.999),
        ("power: rho^k / 1.1 is broken by the optimiser", weak.violations > 0 and weak.worst_random <= 1),
    )
    detail = (f"median inflation of alpha^(0): dyadic {np.median(infl_dy):.3g}, "
              f"1 + 1/L {np.median(infl_geo):.3g} (e^3 = {math.e ** 3:.3g})")
    return CheckResult(f"shells at L = {L}", claims, detail,
                       dict(dyadic=dyadic, geometric=geom, tight=tight, weakened=weak,
                            inflation_dyadic=infl_dy, inflation_geometric=infl_geo))


# ---------------------------------------------------------------- Chapter 5: the orders table against the theorem

#: Domain of :func:`falsify_log_factor`: ``(n, T, N, L, C)`` in ``[1, 1e9]×[1, 1e4]×[2, 1e5]×[1, 200]×[1/8, 10]``.
LOG_FACTOR_DOMAIN = ((1.0, 1e9), (1.0, 1e4), (2.0, 1e5), (1.0, 200.0), (0.125, 10.0))


def _log_factor_point(x):
    """``(n, T, N, L, C)`` from ``x ∈ ℝ⁵`` (a sigmoid onto each log-range of :data:`LOG_FACTOR_DOMAIN`)."""
    out = []
    for xi, (lo, hi) in zip(np.asarray(x, dtype=np.float64), LOG_FACTOR_DOMAIN):
        out.append(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * _sigmoid(float(xi))))
    return tuple(out)


def log_factors(n, T, N, L, C):
    """``(√λ̄, table factor)`` of Chapter 5: ``√(log(9nTN) + log⁺(8CN·C^L L))`` and
    ``√(log(nTN) + log⁺(C^L L))`` (:func:`bounds_lib.theory.orders.theorem_log_factor`,
    :func:`bounds_lib.theory.orders.table_log_factor`, evaluated in floating point).

    Examples
    --------
    >>> [round(v, 4) for v in log_factors(1e5, 128, 768, 12, 1.5)]
    [6.4564, 5.5099]
    """
    lK = L * math.log(C) + math.log(L)
    thm = math.sqrt(math.log(9.0 * n * T * N) + max(math.log(8.0 * C * N) + lK, 0.0))
    tab = math.sqrt(math.log(n * T * N) + max(lK, 0.0))
    return thm, tab


def falsify_log_factor(rng, trials=2000, restarts=4, weaken=1.0):
    """Lemma ``ch05-lem-logfactor``: ``table ≤ √λ̄ ≤ κ(nTN)·table`` over :data:`LOG_FACTOR_DOMAIN`.

    Returns ``(upper, lower)``: two :class:`Falsification` of the ratios ``weaken·√λ̄/(κ·table)`` and
    ``weaken·table/√λ̄`` (random draws, then Nelder–Mead from the best). ``weaken = 1.1`` is the power
    check: both sides of the lemma are approached (the upper one as ``N → ∞`` with ``n = T = L = 1``,
    the lower one as ``nTN → ∞``), so both weakened bounds must be violated.
    """
    from ..theory.orders import log_factor_constant

    def up(x):
        n, T, N, L, C = _log_factor_point(x)
        thm, tab = log_factors(n, T, N, L, C)
        return weaken * thm / (log_factor_constant(n * T * N) * tab)

    def low(x):
        thm, tab = log_factors(*_log_factor_point(x))
        return weaken * tab / thm

    def sample(r):
        return r.normal(0.0, 3.0, 5)

    tag = "" if weaken == 1.0 else f" (÷{weaken:g})"
    return (falsify("√λ̄ ≤ κ·table" + tag, up, sample, rng, trials=trials, restarts=restarts, maxiter=800),
            falsify("table ≤ √λ̄" + tag, low, sample, rng, trials=trials, restarts=restarts, maxiter=800))


def check_log_factor(seed=5, trials=2000, restarts=4, old_factor=None, at=None):
    """Lemma ``ch05-lem-logfactor`` checked, and the old table's factor set against it (Chapter 5).

    Two runs of :func:`falsify_log_factor`, each from ``numpy.random.default_rng(seed)``: the lemma
    as proved and both of its sides weakened by 1.1. ``old_factor`` is the factor the earlier table
    used, as a SymPy ratio to the theorem's ``√λ̄`` (default
    ``√(log(nT)(L log C + log L)) / √λ̄``), evaluated at ``at`` (default ``n = 10⁵``, ``T = 128``,
    ``N = 768``, ``C = 1.5``) for ``L = 2, 12, 48``. Claims: no violation of either side; as power,
    both weakened sides are broken; the old factor leaves the band ``[1, κ]`` below (``L = 2``) and
    above (``L = 48``). ``values``: ``up``, ``low``, ``up_weak``, ``low_weak`` (the
    :class:`Falsification`), ``old_at`` (the old ratio per depth) and ``kappa``.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, log_factor_constant, theorem_log_factor

    n, T, N, C, L = (SYMBOLS[k] for k in ("n", "T", "N", "C", "L"))
    if old_factor is None:
        old_factor = sp.sqrt(sp.log(n * T) * (L * sp.log(C) + sp.log(L))) / theorem_log_factor()
    at = {n: 10**5, T: 128, N: 768, C: 1.5} if at is None else at
    up, low = falsify_log_factor(np.random.default_rng(seed), trials=trials, restarts=restarts)
    up_w, low_w = falsify_log_factor(np.random.default_rng(seed), trials=trials, restarts=restarts, weaken=1.1)
    old_at = {Lv: float(old_factor.subs(at).subs(L, Lv)) for Lv in (2, 12, 48)}
    kappa = log_factor_constant(float(at[n] * at[T] * at[N]))
    claims = (
        ("no violation of sqrt(lambda) <= kappa * table", up.violations == 0),
        ("no violation of table <= sqrt(lambda)", low.violations == 0),
        ("power: both sides / 1.1 are broken", up_w.violations > 0 and low_w.violations > 0),
        ("the old factor is below the band at L = 2", old_at[2] < 1),
        ("the old factor is above the band at L = 48", old_at[48] > kappa),
    )
    detail = (f"worst ratios {up.worst_ratio:.4f} (upper), {low.worst_ratio:.4f} (lower); old factor "
              + ", ".join(f"{v:.2f} at L = {k}" for k, v in old_at.items()) + f"; kappa = {kappa:.3f}")
    return CheckResult("the log factor of the table", claims, detail,
                       dict(up=up, low=low, up_weak=up_w, low_weak=low_w, old_at=old_at, kappa=kappa))


def falsify_frobenius_row(rng, trials=600, weaken=1.0, Ns=(4, 16), restarts=3):
    """``min_{p ∈ 𝒫_m} 𝒯(W;p) ≤ min(√(C_F K) N^{3/4}, N)`` for ``N×N`` matrices with ``‖W‖_F ≤ C_F``
    (the Frobenius row of Chapter 5; ``K = C^L L``, ``𝒯`` of :func:`bounds_lib.theory.peeling.log_term`).

    Random spectra (any rank, scaled to ``‖W‖_F = C_F``), then Nelder–Mead over the log-spectrum,
    ``log C_F`` and ``log K``. ``weaken = 1.1`` is the power check: the flat spectrum ``σ_i = C_F/√N``
    attains the bound, so the bound divided by 1.1 must be violated.
    """
    from ..theory.peeling import posthoc_grid

    def make(N):
        grid = posthoc_grid(1, N)

        def ratio(x):
            s = np.exp(np.clip(x[:N], -30.0, 5.0))
            CF, lK = float(np.exp(np.clip(x[N], -5.0, 8.0))), float(np.clip(x[N + 1], -5.0, 30.0))
            s = s * CF / np.linalg.norm(s)
            logS = np.log(np.sum(s[None, :] ** grid[1:, None], axis=1))
            logS = np.r_[math.log(np.count_nonzero(s > 0)), logS]   # p = 0: the rank
            lhs = float(np.min(log_term(logS, grid, lK, N)))
            rhs = min(0.5 * (math.log(CF) + lK) + 0.75 * math.log(N), math.log(N))
            return weaken * math.exp(lhs - rhs)
        return ratio

    def sample(r, N):
        x = r.normal(0.0, 2.0, N + 2)
        if r.random() < 0.3:   # near-flat spectra
            x[:N] = r.normal(0.0, 0.05, N)
        x[N + 1] = r.uniform(-3.0, 12.0)
        return x

    parts = [falsify("Frobenius row", make(N), lambda r, N=N: sample(r, N), rng, trials=trials,
                     restarts=restarts, maxiter=1500) for N in Ns]
    tag = "" if weaken == 1.0 else f" (÷{weaken:g})"
    return Falsification("Frobenius row: inf_p 𝒯 ≤ min(√(C_F K)N^{3/4}, N)" + tag,
                         np.concatenate([f.ratios for f in parts]), np.concatenate([f.adversarial for f in parts]))


def check_theorem_constants(theta2=None, log_theta=None):
    """The constants of Theorem ``ch05-thm-main`` at ``d_j = d_j' = N``: SymPy and the library's ``log θ``.

    ``theta2`` is ``θ_j²`` as a SymPy expression in the symbols of ``bounds_lib.theory.orders.SYMBOLS``
    (``C_s``, ``N``, ``K``) and ``p`` positive; the default is the theorem's
    ``2(2C_sN)^{2/(p+2)}(144N²)^{p/(p+2)}K^{2p/(p+2)}`` (a test passes a wrong one). ``log_theta`` is the
    function the theorem is evaluated with (default :func:`bounds_lib.theory.theorem.log_theta`; a test passes
    a wrong one). Claims: ``θ_j²/𝒯(W;p)² = 2·2^{2/(p+2)}·144^{p/(p+2)}`` symbolically; the same ratio from
    ``log_theta`` against :func:`bounds_lib.theory.peeling.log_term` at 9 grid points ``p ∈ [0, 2]`` and random
    ``log S_p``, ``log K`` (``N = 64``; at ``p = 0``, ``θ² = 2·𝒯(W;0)²``), to ``1e-9``; and
    ``∫₀¹ ε^{-1/2}√log(1/ε) dε = √(2π)`` (``values["integral"]``). Two facts the theorem uses are
    identities and are not claims here: at ``p = 0`` ``r(N + N)/(rN) = 2``, and ``2p/(p+2) ≤ 1 ⇔ p ≤ 2``.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, released_term
    from ..theory.peeling import log_term
    from ..theory.theorem import log_theta as theorem_log_theta

    fn = theorem_log_theta if log_theta is None else log_theta
    C_s, N, K = SYMBOLS["C_s"], SYMBOLS["N"], SYMBOLS["K"]
    pp = sp.Symbol("p", positive=True)
    if theta2 is None:
        theta2 = 2 * (2 * C_s * N) ** (2 / (pp + 2)) * (144 * N * N) ** (pp / (pp + 2)) * K ** (2 * pp / (pp + 2))
    const = sp.expand_log(sp.log(theta2 / released_term(C_s, K, pp) ** 2), force=True)
    want = sp.log(2 * 2 ** (2 / (pp + 2)) * 144 ** (pp / (pp + 2)))
    # the library's log θ against log 𝒯 at points of the grid: the same constant, p = 0 included
    ps, width = np.linspace(0.0, 2.0, 9), 64
    draws = np.random.default_rng(0).uniform(-5.0, 10.0, (16, 2))
    expected = np.where(ps > 0, [float(want.subs(pp, x)) / 2 for x in np.maximum(ps, 1e-3)], 0.5 * math.log(2.0))
    gap = max(float(np.max(np.abs(fn(lS, ps, lK, width, width) - log_term(lS, ps, lK, width) - expected)))
              for lS, lK in draws)
    # ε = e^{-u}: ∫_0^1 ε^{-1/2}√log(1/ε) dε = ∫_0^∞ e^{-u/2}√u du
    u = sp.Symbol("u", positive=True)
    integral = sp.integrate(sp.exp(-u / 2) * sp.sqrt(u), (u, 0, sp.oo))
    claims = (
        ("theta_j^2 / T(W;p)^2 = 2 * 2^(2/(p+2)) * 144^(p/(p+2))", sp.simplify(const - want) == 0),
        ("theorem.log_theta has that constant (and 2 at p = 0) on the grid", gap < 1e-9),
        ("the Dudley integral at lambda = 0 is sqrt(2 pi)", sp.simplify(integral - sp.sqrt(2 * sp.pi)) == 0),
    )
    return CheckResult("Theorem 5.1's constants", claims,
                       f"integral = {sp.sstr(integral)}; log_theta off by {gap:.1e}",
                       dict(integral=integral, log_theta_gap=gap))


def check_regime_slopes(frobenius_term=None):
    """Which ``p`` is the infimum in each regime of the orders table (Chapter 5), by SymPy.

    ``(p+2)²·d/dp log 𝒯`` is ``2(L+1)log C + 2log L + log(N/r)`` in the low-rank regime and
    ``2(L+1)log C + 2log L`` in the spectral-only one (free of ``p``, so ``p = 0`` is the infimum for
    ``C ≥ 1``), and ``2log(C_F K) − log N`` for the Frobenius Hölder term
    (``frobenius_term``, default :func:`bounds_lib.theory.orders.frobenius_holder_term`; a test passes a
    wrong one): of one sign on ``[0, 2]``. ``values["low_rank"]`` is the low-rank slope.
    """
    import sympy as sp

    from ..theory.orders import SYMBOLS, frobenius_holder_term, regime_log_slope

    L, N, C, p, r, C_F = (SYMBOLS[k] for k in ("L", "N", "C", "p", "r", "C_F"))
    term = frobenius_holder_term(p) if frobenius_term is None else frobenius_term

    def same(a, b):
        return sp.simplify(sp.expand_log(a - b, force=True)) == 0

    lr, spec = regime_log_slope("low_rank"), regime_log_slope("spectral")
    fro = sp.diff(sp.log(term), p) * (p + 2) ** 2
    depth = 2 * (L + 1) * sp.log(C) + 2 * sp.log(L)
    claims = (
        ("low-rank slope 2(L+1) log C + 2 log L + log(N/r)", same(lr, depth + sp.log(N / r))),
        ("spectral slope 2(L+1) log C + 2 log L", same(spec, depth)),
        ("Frobenius slope 2 log(C_F K) - log N, free of p",
         same(fro, 2 * sp.log(C_F) + 2 * L * sp.log(C) + 2 * sp.log(L) - sp.log(N))),
    )
    return CheckResult("the infimum over p in each regime", claims, values=dict(low_rank=lr))


def check_orders_in_depth(tables):
    """Every row of the orders table stays exponentially better in depth than both baselines.

    ``tables`` maps each aggregation of ``bounds_lib.theory.orders.AGGREGATIONS`` to an
    :func:`bounds_lib.theory.orders.orders_table`; one claim per regime, aggregation and baseline:
    ``ours / baseline → 0`` as ``L → ∞`` (:func:`bounds_lib.theory.orders.limit_in_depth`).
    """
    from ..theory.orders import REGIMES, limit_in_depth

    claims = tuple((f"{g} ({agg}) / {b} -> 0 in depth",
                    limit_in_depth(t[g]["ours"] / t[g][b]) == 0)
                   for agg, t in tables.items() for g in REGIMES for b in ("edelman", "trauger_tewari"))
    return CheckResult("the orders table in depth", claims)
