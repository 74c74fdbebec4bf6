"""Visible code cells are short: at most 15 lines in every chapter (issue #11, STYLE.md).

A cell is visible unless it is tagged ``remove-input``, ``remove-cell``, ``hide-input`` or
``hide-cell`` (bookkeeping: glue calls, table assembly). Lines are the cell's source lines, blank
lines inside the cell included, trailing blank lines not. Cells in exercise solutions count: a
reader opens them.

``python tests/test_code_cells.py`` prints the count per chapter.
"""
from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext") if __name__ != "__main__" else __import__("jupytext")

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("ch*.md"))
MAX_LINES = 15
HIDDEN = {"remove-input", "remove-cell", "hide-input", "hide-cell"}


def long_cells(path: Path, max_lines: int = MAX_LINES) -> list[tuple[int, int, str]]:
    """(cell number, lines, first line) of every visible code cell longer than ``max_lines``."""
    nb = jupytext.read(path, fmt="md:myst")
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or HIDDEN & set(cell.metadata.get("tags", [])):
            continue
        lines = cell.source.rstrip("\n").splitlines()
        if len(lines) > max_lines:
            out.append((i, len(lines), lines[0][:60]))
    return out


def test_counter_sees_long_and_hidden_cells(tmp_path):
    body = "\n".join(f"x{i} = {i}" for i in range(16))
    md = tmp_path / "ch99_x.md"
    md.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
                  "  display_name: Python 3\n---\n\n# T\n\n```{code-cell} ipython3\n" + body + "\n```\n\n"
                  "```{code-cell} ipython3\n:tags: [remove-input]\n\n" + body + "\n```\n\n"
                  "```{code-cell} ipython3\n" + "\n".join(body.splitlines()[:15]) + "\n```\n")
    assert [n for _, n, _ in long_cells(md)] == [16]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_visible_code_cells_are_short(chapter):
    long = long_cells(chapter)
    assert not long, (f"{chapter.name}: {len(long)} visible code cell(s) over {MAX_LINES} lines (move analysis "
                      "into bounds_lib, hide bookkeeping with remove-input):\n  "
                      + "\n  ".join(f"cell {i}: {n} lines, starts {first!r}" for i, n, first in long))


# Chapters whose code has been through book/tools/format_chapters.py (comments above the line, ruff
# format at 80 characters: the code column at 1280 px holds 84, a solution's 81; Chapter 9 written to the same rule).
FORMATTED = ["ch01_setting.md", "ch02_interpolation.md", "ch03_propagation.md", "ch04_peeling.md",
             "ch05_main_bound.md", "ch06_bert.md", "ch07_trained.md", "ch08_spectrum.md",
             "ch09_robust_study.md", "ch09_appendix.md"]


@pytest.mark.parametrize("name", FORMATTED)
def test_visible_code_lines_fit_the_column_and_comments_sit_above(name):
    import format_chapters as fc  # book/tools is on sys.path: conftest.py

    md = ROOT / "notebooks" / name
    assert fc.long_visible_lines(md) == []
    nb = jupytext.read(md, fmt="md:myst")
    trailing = [ln for c in nb.cells if c.cell_type == "code" and not HIDDEN & set(c.metadata.get("tags", []))
                for ln in c.source.splitlines() if fc.comments_above(ln + "\n") != ln + "\n"]
    assert trailing == [], f"{name}: comments at the end of a line: {trailing[:3]}"


def test_line_checks_have_power(tmp_path):
    import format_chapters as fc

    md = tmp_path / "ch99_x.md"
    md.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
                  "  display_name: Python 3\n---\n\n# T\n\n```{code-cell} ipython3\nx = 1  # why\n"
                  + "y = " + "1 + " * 30 + "1\n```\n")
    assert len(fc.long_visible_lines(md)) == 1
    # a hide-input cell opens with a click: its lines count; a removed cell's do not
    long = "y = " + "1 + " * 30 + "1"
    tagged = tmp_path / "ch98_x.md"
    tagged.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n"
                      "  name: python3\n  display_name: Python 3\n---\n\n# T\n\n"
                      "```{code-cell} ipython3\n:tags: [hide-input]\n\n" + long + "\n```\n\n"
                      "```{code-cell} ipython3\n:tags: [remove-input]\n\n" + long + "\n```\n")
    assert [line.split(":")[0] for line in fc.long_visible_lines(tagged)] == ["ch98_x.md cell 1"]
    assert fc.comments_above("x = 1  # why\n") == "# why\nx = 1\n"
    assert fc.comments_above("    f(a,  # first\n      b)\n") == "    # first\n    f(a,\n      b)\n"
    assert fc.comments_above("s = '# no'\n") == "s = '# no'\n" and fc.comments_above("%time x\n") == "%time x\n"


if __name__ == "__main__":
    for ch in CHAPTERS:
        long = long_cells(ch)
        print(f"{ch.name:28s} {len(long):3d} visible cells over {MAX_LINES} lines"
              + (f" (longest {max(n for _, n, _ in long)})" if long else ""))
