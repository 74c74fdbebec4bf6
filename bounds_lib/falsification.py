"""Falsification harness: try to break an inequality ``lhs ≤ rhs`` (Chapters 1–5).

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
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["VIOLATION_TOL", "Falsification", "adversarial_search", "falsify", "power_check"]

#: A ratio above ``1 + VIOLATION_TOL`` counts as a violation (floating-point slack).
VIOLATION_TOL = 1e-9


@dataclass(frozen=True)
class Falsification:
    """Outcome of a check of ``lhs ≤ rhs``: ``ratios = lhs/rhs`` of the random trials and, when an
    adversarial search was run, ``adversarial`` = the best ratio reached from each optimiser start."""

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


def _count(x, name, minimum):
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


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
    maxiter = _count(maxiter, "maxiter", 1)
    if method not in ("Nelder-Mead", "Powell"):
        raise ValueError(f"method must be 'Nelder-Mead' or 'Powell' (derivative-free), got {method!r}")
    f = _safe(ratio)
    opts = ({"maxiter": maxiter, "xatol": 1e-10, "fatol": 1e-12, "adaptive": True} if method == "Nelder-Mead"
            else {"maxiter": maxiter, "xtol": 1e-10, "ftol": 1e-12})
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
    """Random draws ``x = sample(rng)`` (``trials`` of them), then :func:`adversarial_search` from the
    ``restarts`` best draws. Returns a :class:`Falsification` with both sets of ratios."""
    trials = _count(trials, "trials", 1)
    restarts = _count(restarts, "restarts", 0)
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
