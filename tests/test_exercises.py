"""Student-edition self-checks (:mod:`bounds_lib.exercises`, issue #19).

A right answer passes and a wrong one fails (off by a relative 1e-3, off by one, the wrong shape, no
answer yet); what the check prints never contains the answer; every registered exercise exists in
its chapter; and the student edition of Chapters 4, 5 and 6 has a check cell right after the answer cell
of each such exercise (the generator's ``strip_solutions`` on the real chapters).
"""
from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import pytest
import sympy as sp

from bounds_lib import exercises as E
from bounds_lib import orders as O

ROOT = Path(__file__).resolve().parents[1]
jupytext = pytest.importorskip("jupytext")


def _closed_form(exercise):
    """Each answer by the solution's route (closed form or the solution's scan), not the check's."""
    S = O.SYMBOLS
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
    raise KeyError(exercise)


def _run(exercise, answer):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ok = E.check(exercise, answer)
    return ok, out.getvalue()


def _spellings(v):
    return {repr(v), f"{v:.3g}", f"{v:.4g}", f"{v:.6g}", f"{v:g}", str(int(v)) if v >= 10 else repr(v)}


@pytest.mark.parametrize("exercise", list(E.SELF_CHECKS))
def test_a_right_answer_passes_and_wrong_ones_fail(exercise):
    right = _closed_form(exercise)
    answer = right[0] if len(right) == 1 else right
    assert _run(exercise, answer) == (True, "correct\n")
    off = tuple(v * (1 + 1e-3) for v in right) if not E.SELF_CHECKS[exercise].integer else (right[0] + 1,)
    for wrong in (off[0] if len(off) == 1 else off, ..., (*right, 1.0), float("nan"), True, "7"):
        ok, printed = _run(exercise, wrong)
        assert not ok and printed.startswith("not yet"), (wrong, printed)


@pytest.mark.parametrize("exercise", list(E.SELF_CHECKS))
def test_the_check_never_shows_the_answer(exercise):
    right = _closed_form(exercise)
    sc = E.SELF_CHECKS[exercise]
    texts = [_run(exercise, a)[1] for a in (right if len(right) > 1 else right[0], ..., 0.123)]
    texts += [sc.hint, sc.asks, E.check_cell(exercise)]
    for v in right:
        for s in _spellings(v):
            assert not any(s in t for t in texts), (s, texts)


def test_an_exercise_without_a_check_is_named():
    with pytest.raises(KeyError, match="no self-check for exercise 'ch99-ex-x'; exercises with one: ch04-ex-p0"):
        E.check("ch99-ex-x", 1.0)


def test_registered_exercises_exist_in_their_chapters():
    for exercise in E.SELF_CHECKS:
        chapter = next(ROOT.glob(f"notebooks/{exercise[:4]}_*.md"))
        assert re.search(rf"^:label: {re.escape(exercise)}$", chapter.read_text(encoding="utf-8"), re.M), exercise


@pytest.mark.parametrize("chapter", ["ch04_peeling", "ch05_main_bound", "ch06_bert"])
def test_student_edition_has_a_check_cell_after_each_checked_exercise(chapter):
    import make_notebooks as mk  # book/tools is on sys.path: conftest.py

    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md", fmt="md:myst")
    student, _ = mk.strip_solutions(nb)
    code = [c.source for c in student.cells if c.cell_type == "code"]
    mine = [e for e in E.SELF_CHECKS if e.startswith(chapter[:4])]
    assert mine
    for exercise in mine:
        cell = E.check_cell(exercise)
        assert code.count(cell) == 1, exercise
        assert code[code.index(cell) - 1] == mk.ANSWER
        # the cell runs as written and says there is no answer yet
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell, exercise, "exec"), {})
        assert out.getvalue().startswith("not yet — the answer should be")
