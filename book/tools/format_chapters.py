"""Format the code of chapters for reading: comments above the line they explain, lines ≤ 80 characters.

Usage: python book/tools/format_chapters.py notebooks/ch07_trained.md [...] [--check]

Two steps on every code cell of each chapter (the Markdown is not touched):

1. **Comments move above their line.** A comment at the end of a code line (found with Python's own
   tokenizer, so a ``#`` inside a string is left alone) becomes a comment line above it, with the
   line's indentation — what the book's style asks for, and what lets a formatter wrap the code.
2. **ruff format** at 80 characters (at the 13 px code font of book-layout.css, the code column of a
   page at 1280 px holds 84, and 81 inside an exercise's solution), through jupytext's pipe, which
   keeps the MyST cells, their tags and IPython magics as they are.

``--check`` changes nothing and exits 1 if a chapter would change (or a visible line stays too long).
"""
from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

LINE = 80


def comments_above(source: str) -> str:
    """``source`` with every end-of-line comment moved to its own line above (same indentation).

    >>> print(comments_above("x = 1  # one\\ny = '# not a comment'\\n"))
    # one
    x = 1
    y = '# not a comment'
    <BLANKLINE>
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source  # not plain Python (a magic, a fragment): leave it to the reader
    lines = source.splitlines(keepends=True)
    moves = {}
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        row, col = tok.start
        before = lines[row - 1][:col]
        if before.strip():  # code before the comment on the same line
            moves[row] = (col, tok.string)
    if not moves:
        return source
    out = []
    for i, line in enumerate(lines, start=1):
        if i in moves:
            col, text = moves[i]
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{text}\n")
            end = "\n" if line.endswith("\n") else ""
            out.append(line[:col].rstrip() + end)
        else:
            out.append(line)
    return "".join(out)


# Tags that take a cell's code off the page; a hide-input/hide-cell cell opens with a click, so its
# lines must fit the column too.
REMOVED = {"remove-input", "remove-cell"}


def long_visible_lines(md: Path, limit: int = LINE) -> list[str]:
    """Lines longer than ``limit`` in the code cells a reader can see (all but the removed ones)."""
    import jupytext

    nb = jupytext.read(md, fmt="md:myst")
    out = []
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or REMOVED & set(cell.metadata.get("tags", [])):
            continue
        out += [f"{md.name} cell {k}: {len(ln)} chars: {ln.strip()[:60]}" for ln in cell.source.splitlines()
                if len(ln) > limit]
    return out


def format_chapter(md: Path, ruff: str) -> str:
    """The chapter's text with its code formatted (comments above, then ruff format)."""
    import jupytext

    nb = jupytext.read(md, fmt="md:myst")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = comments_above(cell.source)
    tmp = md.with_name(f".{md.stem}.formatting.md")
    try:
        jupytext.write(nb, tmp, fmt="md:myst")
        subprocess.run([sys.executable, "-m", "jupytext", "--pipe",
                        f"{ruff} format --line-length {LINE} --stdin-filename cell.py -", str(tmp)],
                       check=True, capture_output=True, text=True)
        return tmp.read_text()
    finally:
        tmp.unlink(missing_ok=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chapter would change")
    a = ap.parse_args(argv)
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    bad = 0
    for md in a.chapters:
        new = format_chapter(md, ruff)
        if a.check:
            changed = new != md.read_text()
            long = long_visible_lines(md)
            for line in long:
                print(f"too long: {line}")
            if changed:
                print(f"{md}: would be reformatted")
            bad += changed or bool(long)
        else:
            md.write_text(new)
            for line in long_visible_lines(md):
                print(f"still too long (a string or a URL?): {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
