"""Falsification harness: try to break an inequality ``lhs ≤ rhs`` (the evidence under Chapters 1–5).

A check of an inequality is only evidence if it could have failed. The harness therefore does three
things for an inequality written as a *ratio* ``r(x) = lhs(x)/rhs(x)`` of a parameter vector ``x``:

1. **random draws** — ``r`` at many random points (:func:`falsify`, ``trials``);
2. **adversarial search** — a local optimiser (SciPy's Nelder–Mead, which needs no gradient) started
   from the best random points maximises ``r`` (:func:`adversarial_search`);
3. **power check** — the same harness run against a deliberately *weakened* bound (a constant
   below the proved one, or the bound divided by 1.1) must report a violation
   (:func:`power_check`); if it does not, the harness could not have detected a wrong constant.

The result of 1–2 is a :class:`Falsification`: the ratios of every trial, the best ratio of every
optimiser start, and the worst ratio overall (a violation is a ratio above ``1 + 1e-9``). A
statement checked by several claims returns a :class:`CheckResult`: one line saying how many hold.
The checks of the chapters that use the harness are the other modules of :mod:`bounds_lib.checks`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.validation import check_scalar

__all__ = [
    "VIOLATION_TOL",
    "OPTIMISER_XTOL",
    "OPTIMISER_FTOL",
    "TINY_DENOMINATOR",
    "Falsification",
    "CheckResult",
    "adversarial_search",
    "falsify",
    "power_check",
]

#: A ratio above ``1 + VIOLATION_TOL`` counts as a violation (floating-point slack).
VIOLATION_TOL = 1e-9
#: Stopping tolerances of the optimisers (in ``x`` and in the ratio): far below any violation that matters.
OPTIMISER_XTOL, OPTIMISER_FTOL = 1e-10, 1e-12
#: Floor of a denominator that vanishes when two inputs coincide (the numerator is then 0, the ratio 0).
TINY_DENOMINATOR = 1e-300


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


# ---------------------------------------------------------------- samplers and maps shared by the chapters' checks


def _spectral(rng, shape, s):
    """A standard normal matrix of ``shape`` scaled to spectral norm ``s``."""
    A = rng.standard_normal(shape)
    return s * A / np.linalg.norm(A, 2)


def _sigmoid(x):
    """``1/(1 + e^{−x})`` for a float, clipped (``exp(±700)`` stays finite): maps ℝ onto ``(0, 1)``."""
    return 1.0 / (1.0 + math.exp(-max(min(x, 700.0), -700.0)))  # clipped: exp(±700) stays finite
