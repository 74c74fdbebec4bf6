"""No bound left unmarked: every lemma and theorem of Chapters 1–5 has a witness or a "no witness: why" row.

The statements come from the chapters' ``{prf:}`` blocks (the parser of ``tests/test_proof_map.py``); a
statement has a witness when some witness of :mod:`bounds_lib.checks.witnesses` or
:mod:`bounds_lib.checks.ch3_witnesses` carries its label; the marked ones are the first column of the
table between ``<!-- no-witness: begin -->`` and ``<!-- no-witness: end -->`` on ``book/proof_map.md``. The
README states the counts in words a test can read; they are checked here.
"""
import re
from pathlib import Path

from bounds_lib.checks import ch3_witnesses as W3, witnesses as W
from tests.test_proof_map import parse

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^\| \{prf:ref\}`([^`]+)` \|", re.M)


def statements():
    """Labels of every lemma and theorem of Chapters 1–5, in reading order."""
    return [s.label for s in parse() if s.kind in ("lemma", "theorem")]


def witnessed():
    """Labels that some witness carries."""
    ws = W3.chapter3_witnesses() + [w for c in (1, 2, 4, 5) for w in W.chapter_witnesses(c)]
    return {w.label for w in ws}


def marked(page=None):
    """The statements of the "no witness: why" table on the proof map."""
    text = (ROOT / "book" / "proof_map.md").read_text() if page is None else page
    block = text.split("<!-- no-witness: begin -->")[1].split("<!-- no-witness: end -->")[0]
    return _ROW.findall(block)


def unmarked(stmts, wit, marks):
    """Statements with neither a witness nor a row; rows of witnessed or unknown statements."""
    return ([s for s in stmts if s not in wit and s not in marks],
            [m for m in marks if m in wit or m not in stmts])


def test_every_statement_has_a_witness_or_a_mark():
    missing, stale = unmarked(statements(), witnessed(), marked())
    assert missing == [], f"no witness and no 'no witness: why' row on the proof map: {missing}"
    assert stale == [], f"rows for statements that have a witness or do not exist: {stale}"
    assert len(set(marked())) == len(marked())


def test_the_check_fails_when_a_row_is_dropped():
    marks = marked()
    missing, _ = unmarked(statements(), witnessed(), marks[1:])
    assert missing == marks[:1]
    _, stale = unmarked(statements(), witnessed(), marks + ["ch03-thm-layer"])
    assert stale == ["ch03-thm-layer"]


def test_readme_states_the_counts():
    stmts, wit = statements(), witnessed()
    n_wit = sum(s in wit for s in stmts)
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"Of the (\d+) lemmas and theorems of Chapters 1–5, (\d+) have a witness; the other (\d+)", readme)
    assert m, "README.md must state how many lemmas and theorems have a witness"
    assert tuple(map(int, m.groups())) == (len(stmts), n_wit, len(stmts) - n_wit)
