"""Self-checks for the computational exercises: right or wrong, without the answer (the student edition).

The student edition of a chapter (``make student``) removes every solution; after an exercise that has
a self-check it leaves a cell such as::

    from bounds_lib.exercises import check

    answer = ...  # K (a number)
    check("ch04-ex-p0", answer)

:func:`check` prints ``correct`` or ``not yet — hint: …`` and returns ``True`` or ``False``. It never
prints, returns or stores the answer: it **recomputes** it with the library on the reader's machine,
by a route other than the solution's closed form where there is one (a bisection on the library's own
term, a root finder on the library's orders), and compares with a stated tolerance.

Why recompute instead of comparing salted hashes of rounded answers: a hash of a rounded number
fails whenever the answer lies near a rounding boundary, and floating-point results differ in their
last bits between CPU kinds and BLAS builds (the book measures this in ``bounds_lib.reproduce``), so
a hash made on one machine can reject a right answer on another. A recomputation on the reader's own
machine with a relative tolerance far above those last bits and far below the difference a wrong
method makes (``rtol`` below, per answer) has neither problem. The price is that a reader can read
this module's source and find the answer; the check is for learning, not an exam.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

__all__ = ["SelfCheck", "SELF_CHECKS", "check", "check_cell"]


@dataclass(frozen=True)
class SelfCheck:
    """One exercise's check: what to pass, how to recompute it, how close counts, and a hint."""

    exercise: str
    asks: str
    compute: Callable[[], tuple]
    rtol: float
    hint: str
    integer: bool = False


def _ch04_p0():
    # smallest K with T(W;0) <= T(W;2) for rank r = 16, S_2 = 4, N = 256: bisection in log K on the
    # library's log term (the solution uses the closed form)
    from .peeling import log_term

    r, S2, N = 16, 4.0, 256

    def p0_wins(logK):
        return log_term(math.log(r), 0.0, logK, N) <= log_term(math.log(S2), 2.0, logK, N)

    lo, hi = -30.0, 30.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if p0_wins(mid) else (mid, hi)
    return (math.exp(hi),)


def _ch05_lowrank():
    # first depth L at which this bound (sum) is below Edelman et al.'s and stays below up to L = 200
    import numpy as np
    import sympy as sp

    from .orders import SYMBOLS as S
    from .orders import edelman_order, ours_order

    L, C, N = S["L"], S["C"], S["N"]
    q = ours_order("low_rank", "sum", log_factor=True) / edelman_order("low_rank")
    f = sp.lambdify(L, q.subs({C: 1.1, N: 768, S["r"]: 64, S["n"]: 10**5, S["T"]: 128}))
    below = np.array([f(float(v)) < 1 for v in range(1, 201)])
    first = int(np.argmax(below))
    if not below[first:].all():
        raise RuntimeError("the ratio crosses 1 more than once on L = 1..200")
    return (first + 1,)


def _ch05_crossover():
    # widths N at which this bound's Frobenius row (rss) equals Edelman et al.'s: without and with the
    # log factor (n = 1e5, T = 128), by a root finder on the library's orders
    import sympy as sp
    from scipy.optimize import brentq

    from .orders import SYMBOLS as S
    from .orders import orders_table

    N = S["N"]
    at = {S["L"]: 12, S["C"]: sp.Rational(3, 2), S["C_F"]: 4, S["n"]: 10**5, S["T"]: 128}
    roots = []
    for log_factor in (False, True):
        row = orders_table("rss", log_factor=log_factor)["frobenius"]
        g = sp.lambdify(N, (row["ours"] / row["edelman"]).subs(at))
        roots.append(brentq(lambda x: g(x) - 1, 2.0, 1e9, xtol=1e-12, rtol=1e-14))
    return tuple(roots)


def _ch06_arch():
    # B_ours (sum, rss) of BERT-base's shapes when every p* = 0 at full rank: the library's term at p = 0
    # for each of the L(2H + 2) matrices, aggregated by the library (the solution uses the closed forms)
    import numpy as np

    from .peeling import aggregate_rss, aggregate_sum, log_term

    L, N, H = 12, 768, 12
    d_h = N // H
    ranks = [d_h] * (2 * H) + [N, N]
    per_layer = [log_term(math.log(r), 0.0, 0.0, N) for r in ranks]
    log_T0 = np.array(per_layer * L, dtype=float)
    return (math.exp(aggregate_sum(log_T0, L)), math.exp(aggregate_rss(log_T0, L)))


#: The exercises with a self-check, by label (the student edition adds a check cell after each).
SELF_CHECKS: dict[str, SelfCheck] = {c.exercise: c for c in (
    SelfCheck("ch04-ex-p0", "K (a number)", _ch04_p0, 1e-6,
              "compare T(W;0) with T(W;2) at r = 16, S_2 = 4, N = 256 and solve the inequality for K"),
    SelfCheck("ch05-ex-lowrank", "L (an integer)", _ch05_lowrank, 0.0,
              "write the ratio of the two rows and evaluate it for L = 1, 2, ...; the first L below 1",
              integer=True),
    SelfCheck("ch05-ex-crossover", "(N without the log factor, N with it), two numbers", _ch05_crossover,
              1e-6, "the two branches of the minimum meet where both ratios equal 1; "
                    "with the log factor solve ratio(N) = 1 numerically below that width"),
    SelfCheck("ch06-ex-arch", "(B_ours sum, B_ours rss) for BERT-base, L = 12, N = 768, H = 12; two numbers",
              _ch06_arch, 1e-9, "at p = 0 each matrix contributes sqrt(rank·N); count the 2H head products of "
                                "rank d_h = N/H and the two feed-forward matrices of rank N in each layer"),
)}


def _numbers(answer, n: int, integer: bool):
    """``answer`` as a tuple of ``n`` finite numbers, or None (a wrong shape or type)."""
    items = answer if isinstance(answer, (tuple, list)) else (answer,)
    if len(items) != n:
        return None
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, float)) and not hasattr(a, "__float__"):
            return None
        try:
            v = float(a)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(v) or (integer and v != round(v)):
            return None
        out.append(v)
    return tuple(out)


def check(exercise: str, answer, *, quiet: bool = False) -> bool:
    """Print ``correct`` or ``not yet — hint: …`` for ``answer`` to ``exercise``; return whether it is right.

    Parameters
    ----------
    exercise : str
        The exercise's label, e.g. ``"ch04-ex-p0"`` (:data:`SELF_CHECKS` lists them).
    answer : number or tuple of numbers
        What the exercise asks for (``SELF_CHECKS[exercise].asks``); ``...`` (no answer yet) is wrong.
    quiet : bool
        Print nothing (the return value only).

    Raises
    ------
    KeyError
        ``exercise`` has no self-check; the message lists those that do.
    """
    if exercise not in SELF_CHECKS:
        raise KeyError(f"no self-check for exercise {exercise!r}; exercises with one: {', '.join(SELF_CHECKS)}")
    sc = SELF_CHECKS[exercise]
    want = sc.compute()
    got = _numbers(answer, len(want), sc.integer)
    if got is None:
        ok, message = False, f"not yet — the answer should be {sc.asks}"
    else:
        ok = all(abs(g - w) <= sc.rtol * abs(w) for g, w in zip(got, want))
        message = "correct" if ok else f"not yet — hint: {sc.hint}"
    if not quiet:
        print(message)
    return ok


def check_cell(exercise: str) -> str:
    """The source of the student edition's check cell for ``exercise`` (which must have a self-check)."""
    sc = SELF_CHECKS[exercise]
    return ("# Check your answer: prints 'correct' or a hint, never the answer\n"
            "from bounds_lib.exercises import check\n\n"
            f"answer = ...  # {sc.asks}\n"
            f"check({exercise!r}, answer)\n")
