"""Generate the launchable notebooks and the student edition from the chapters' MyST sources.

The chapters live in ``notebooks/*.md`` (jupytext MyST). Nothing here is committed: every
``.ipynb`` is written under ``_build`` at build time.

* ``launch``  -> ``_build/launch``: the tree that the Pages workflow pushes to the ``notebooks``
  branch, which the book's Colab and Binder buttons open. ``notebooks/chXX_*.ipynb`` (executed
  copies from ``_build/jupyter_execute`` when the book was built, else converted from the ``.md``),
  each with a first "run it yourself" cell that installs ``bounds_lib`` where it is missing, plus
  ``binder/postBuild`` and ``binder/runtime.txt`` so Binder installs the pinned library on Python 3.11.
* ``student`` -> ``_build/student``: notebooks without outputs and with every solution removed
  (sphinx-exercise gated ``solution-start``/``solution-end`` blocks, ``{solution}`` directives, and
  cells tagged ``solution``), each with the install cell.

Usage (from the repository root; ``make notebooks`` and ``make student`` call these)::

    python book/tools/make_notebooks.py launch  [--out _build/launch]
    python book/tools/make_notebooks.py student [--out _build/student]

The same install cell is prepended to the executed ``.ipynb`` behind the book's download button
by the Sphinx extension ``book_reader`` (``book/tools/book_reader.py``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TAG = "colab-install"
SOLUTION_TAG = "solution"
DEFAULT_REPO = "https://github.com/bounds-lib/spectrum-adaptive-bounds"


def repository(config: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """(url, branch) of the repository from ``_config.yml`` (``repository.url``/``branch``)."""
    try:
        import yaml

        repo = (yaml.safe_load(config.read_text()) or {}).get("repository", {})
        return repo.get("url", DEFAULT_REPO).rstrip("/"), repo.get("branch", "main")
    except (OSError, ImportError):
        return DEFAULT_REPO, "main"


def install_cell_source(source_text: str = "", repo_url: str | None = None, ref: str | None = None) -> str:
    """Code of the first cell of every generated notebook: install what the chapter imports.

    It installs only what is missing, so it is a no-op in the repository's own environment and on
    Binder (whose image installs the library), and installs ``bounds_lib`` from the repository (plus
    ``myst-nb`` when the chapter uses ``glue``) on Colab.
    """
    url, branch = repository()
    url, ref = repo_url or url, ref or branch
    needs = [("bounds_lib", f"bounds_lib @ git+{url}@{ref}")]
    if "myst_nb" in source_text:
        needs.append(("myst_nb", "myst-nb"))
    if "ipywidgets" in source_text:
        needs.append(("ipywidgets", "ipywidgets"))
    needs_src = ",\n    ".join(f"({m!r}, {p!r})" for m, p in needs)
    return (
        "# Run it yourself (Colab, or any Python without bounds_lib): installs only what is missing.\n"
        "# The book build never runs this cell. If pip replaced torch on Colab, restart the session once.\n"
        "import importlib.util, subprocess, sys\n"
        f"_needs = [\n    {needs_src},\n]\n"
        "_missing = [pkg for mod, pkg in _needs if importlib.util.find_spec(mod) is None]\n"
        "if _missing:\n"
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *_missing], check=True)\n'
    )


def _text(nb) -> str:
    return "\n".join(c.source for c in nb.cells)


def add_install_cell(nb, **kw):
    """Insert the install cell after the title cell (once; tagged ``colab-install``/``remove-cell``)."""
    if any(INSTALL_TAG in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        return nb
    cell = nbformat.v4.new_code_cell(
        install_cell_source(_text(nb), **kw), metadata={"tags": [INSTALL_TAG, "remove-cell"]}
    )
    cell.pop("id", None)
    at = 0
    if nb.cells and nb.cells[0].cell_type == "markdown" and re.search(r"^# ", nb.cells[0].source, re.M):
        at = 1
    nb.cells.insert(at, cell)
    _fix_ids(nb)
    return nb


MACROS_TAG = "book-macros"


def mathjax_macros(config: Path = ROOT / "_config.yml") -> dict:
    """The book's TeX macros (``sphinx.config.mathjax3_config.tex.macros`` of ``_config.yml``)."""
    try:
        import yaml

        cfg = yaml.safe_load(config.read_text()) or {}
        return cfg["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"] or {}
    except (OSError, ImportError, KeyError, TypeError):
        return {}


def add_macros_cell(nb, macros: dict | None = None):
    """Insert a markdown cell defining the book's TeX macros, so formulas render in Jupyter.

    The book defines ``\\norm``, ``\\Pinorm``, ... once for MathJax in ``_config.yml``; a notebook
    opened in Jupyter, Binder or Colab does not see that file. The cell renders as one short line.
    """
    if any(MACROS_TAG in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        return nb
    macros = mathjax_macros() if macros is None else macros
    if not macros:
        return nb
    defs = []
    for name, body in macros.items():
        if isinstance(body, list):
            defs.append(f"\\newcommand{{\\{name}}}[{body[1]}]{{{body[0]}}}")
        else:
            defs.append(f"\\newcommand{{\\{name}}}{{{body}}}")
    cell = nbformat.v4.new_markdown_cell(
        "*Notation macros of the book (see the Notation page):* $" + "".join(defs) + "$",
        metadata={"tags": [MACROS_TAG, "remove-cell"]},
    )
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" and re.search(r"^# ", nb.cells[0].source, re.M) else 0
    nb.cells.insert(at, cell)
    _fix_ids(nb)
    return nb


_TARGET_LINE = re.compile(r"^\([\w.:-]+\)=[ \t]*\n?", re.M)


def prepare_for_jupyter(nb):
    """Title, then the macros cell, then the install cell: what every generated notebook gets.

    MyST target lines such as ``(ch01_setting)=`` are dropped from markdown cells: Jupyter would
    print them as text.
    """
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _TARGET_LINE.sub("", cell.source)
    add_install_cell(nb)
    add_macros_cell(nb)
    return nb


def _fix_ids(nb):
    """Give every cell a fresh, unique id (nbformat >= 4.5 requires them)."""
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        for i, c in enumerate(nb.cells):
            c["id"] = f"cell-{i:03d}"


_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}")


PLACEHOLDER = "**Solution:** removed in the student edition (the online book has it)."
ANSWER = "# Your answer here\n"


def _block_end(lines: list[str], i: int, fence: str) -> int:
    """Index just after the directive block whose opening fence is on line ``i``."""
    j = i + 1
    while j < len(lines) and lines[j].strip() != fence:
        j += 1
    return j + 1


def strip_solutions(nb):
    """Return ``(nb, n)``: the notebook with every solution removed and the number removed.

    * gated solutions (sphinx-exercise ``solution-start`` ... ``solution-end``, with the code and
      markdown between them, wherever the fences sit inside markdown cells) become a placeholder
      line and an empty code cell to answer in;
    * ``{solution}`` directive blocks inside markdown cells become the placeholder line;
    * cells tagged ``solution`` are dropped.
    """
    cells, inside, count = [], False, 0
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            if inside:
                continue
            if SOLUTION_TAG in cell.get("metadata", {}).get("tags", []):
                count += 1
                continue
            cells.append(cell)
            continue
        lines, i, buf = cell.source.splitlines(keepends=True), 0, []

        def flush(extra_code: bool = False):
            text = "".join(buf).strip("\n")
            if text.strip():
                new = nbformat.v4.new_markdown_cell(text)
                new.metadata = dict(cell.get("metadata", {}))
                cells.append(new)
            buf.clear()
            if extra_code:
                cells.append(nbformat.v4.new_code_cell(ANSWER))

        while i < len(lines):
            m = _FENCE_OPEN.match(lines[i].lstrip())
            name = m["name"] if m else None
            if not inside and name == "solution-start":
                inside, count = True, count + 1
                i = _block_end(lines, i, m["fence"])
            elif inside and name == "solution-end":
                inside = False
                i = _block_end(lines, i, m["fence"])
                buf.append(PLACEHOLDER + "\n")
                flush(extra_code=True)
            elif not inside and name == "solution":
                count += 1
                i = _block_end(lines, i, m["fence"])
                buf.append(PLACEHOLDER + "\n")
            else:
                if not inside:
                    buf.append(lines[i])
                i += 1
        flush()
    if inside:
        raise ValueError("a `solution-start` has no matching `solution-end`")
    nb.cells = cells
    _fix_ids(nb)
    return nb, count


def plain_exercises(nb):
    """Replace sphinx-exercise's gated ``exercise-start``/``exercise-end`` fences by plain markdown.

    Jupyter and Colab do not render MyST directives, so in the student notebooks an exercise opens
    with a bold "Exercise" line (its label in brackets) and the closing fence disappears.
    """
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "exercise-" not in cell.source:
            continue
        lines, out, i = cell.source.splitlines(keepends=True), [], 0
        while i < len(lines):
            m = _FENCE_OPEN.match(lines[i].lstrip())
            if m and m["name"] in {"exercise-start", "exercise-end"}:
                j = _block_end(lines, i, m["fence"])
                if m["name"] == "exercise-start":
                    label = next((ln.split(":", 2)[2].strip() for ln in lines[i + 1 : j - 1]
                                  if ln.strip().startswith(":label:")), "")
                    out.append(f"**Exercise**{f' ({label})' if label else ''}.\n\n")
                i = j
                continue
            out.append(lines[i])
            i += 1
        cell.source = "".join(out).strip("\n")
    return nb


def clear_outputs(nb):
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def read_chapter(md: Path):
    import jupytext

    return jupytext.read(md)


def chapters(src: Path = ROOT / "notebooks") -> list[Path]:
    return sorted(src.glob("ch*.md"))


BINDER_POSTBUILD = """#!/bin/bash
# Binder (repo2docker) runs this once when it builds the image of the `notebooks` branch.
set -euo pipefail
# torch==...+cpu (constraints.txt) comes from PyTorch's CPU index, which also keeps the image small.
pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt -e '.[book]'
"""


def build_launch(out: Path, executed: Path | None) -> list[Path]:
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "notebooks").mkdir(parents=True)
    written = []
    for md in chapters():
        ex = executed / "notebooks" / f"{md.stem}.ipynb" if executed else None
        nb = nbformat.read(ex, as_version=4) if ex and ex.is_file() else read_chapter(md)
        prepare_for_jupyter(nb)
        dest = out / "notebooks" / f"{md.stem}.ipynb"
        nbformat.write(nb, dest)
        written.append(dest)
    (out / "binder").mkdir()
    post = out / "binder" / "postBuild"
    post.write_text(BINDER_POSTBUILD)
    post.chmod(0o755)
    (out / "binder" / "runtime.txt").write_text("python-3.11\n")
    return written


def build_student(out: Path) -> list[tuple[Path, int]]:
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written = []
    for md in chapters():
        nb, n = strip_solutions(clear_outputs(read_chapter(md)))
        plain_exercises(nb)
        prepare_for_jupyter(nb)
        dest = out / f"{md.stem}.ipynb"
        nbformat.write(nb, dest)
        written.append((dest, n))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    la = sub.add_parser("launch", help="notebooks for the Colab/Binder `notebooks` branch")
    la.add_argument("--out", type=Path, default=ROOT / "_build" / "launch")
    la.add_argument("--executed", type=Path, default=ROOT / "_build" / "jupyter_execute",
                    help="folder of executed notebooks to copy outputs from (skipped if missing)")
    st = sub.add_parser("student", help="notebooks with solutions removed")
    st.add_argument("--out", type=Path, default=ROOT / "_build" / "student")
    a = ap.parse_args(argv)
    if a.cmd == "launch":
        executed = a.executed if a.executed.is_dir() else None
        for p in build_launch(a.out, executed):
            print(f"launch notebook: {p.relative_to(a.out)}")
        print(f"{'executed copies' if executed else 'unexecuted conversions'} written to {a.out}")
    else:
        for p, n in build_student(a.out):
            print(f"student notebook: {p.name} ({n} solution{'s' if n != 1 else ''} removed)")
        print(f"student edition written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
