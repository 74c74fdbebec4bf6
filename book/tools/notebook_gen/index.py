"""Book index: numbers and titles of every label, from all chapters and reference pages.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .blocks import _DOLLAR_LABEL, _HEADING, _TARGET_LINE, Directive, Text, parse_blocks
from .common import ROOT
from .config import _yaml, toc_chapters

__all__ = ["ADMONITIONS", "BookIndex", "ChapterSource", "PRF_TYPES", "Target", "docname", "html_id",
           "read_chapter"]

PRF_TYPES = {
    "theorem", "lemma", "definition", "remark", "conjecture", "corollary", "algorithm", "criterion",
    "axiom", "example", "property", "observation", "proposition", "assumption", "notation",
}
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
               "seealso", "admonition"}


@dataclass
class Target:
    kind: str  # section, doc, equation, figure, exercise, prf:<type>, term
    doc: str  # docname, e.g. notebooks/ch02_interpolation
    anchor: str
    title: str = ""
    number: str = ""


@dataclass
class ChapterSource:
    path: Path
    doc: str
    number: int | None
    nb: object  # jupytext notebook
    cell_lines: list[int]  # 1-based line of each cell's first source line


def docname(path: Path, root: Path = ROOT) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
    except ValueError:  # a chapter outside the book (a test, a draft)
        return path.stem


def html_id(label: str) -> str:
    """The HTML id Sphinx gives a label (docutils ``make_id``)."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _cell_lines(text: str, nb) -> list[int]:
    lines, cursor = [], 0
    for cell in nb.cells:
        body = cell.source.strip("\n")
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        pos, size = (text.find(body, cursor), len(body)) if body else (-1, 0)
        if pos < 0 and first:  # jupytext normalised something: fall back to the first line
            pos, size = text.find(first, cursor), len(first)
        if pos < 0:
            lines.append(text.count("\n", 0, cursor) + 1)
            continue
        lines.append(text.count("\n", 0, pos) + 1)
        cursor = pos + size
    # Line numbers count from the cell's first source line, which may be blank.
    for k, cell in enumerate(nb.cells):
        lines[k] -= len(cell.source) - len(cell.source.lstrip("\n"))
    return lines


def read_chapter(md: Path, root: Path = ROOT, numbers: dict | None = None) -> ChapterSource:
    import jupytext

    text = md.read_text()
    nb = jupytext.reads(text, fmt="md:myst")
    numbers = toc_chapters(root) if numbers is None else numbers
    doc = docname(md, root)
    return ChapterSource(md, doc, numbers.get(doc), nb, _cell_lines(text, nb))


def _strip_inline_roles(text: str) -> str:
    return re.sub(r"\{[A-Za-z][\w:.+-]*\}`([^`]*)`", lambda m: m.group(1).split("<")[0].strip(), text)


class BookIndex:
    """Numbers and titles of the book's labels (sections, equations, figures, exercises, prf)."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        self.targets: dict[str, Target] = {}
        self.doc_titles: dict[str, str] = {}
        self.chapter_numbers = toc_chapters(root)
        self.sources: dict[str, ChapterSource] = {}
        toc = _yaml(root / "_toc.yml")
        docs = [toc.get("root", "")]
        for part in toc.get("parts", []):
            docs += [c["file"] for c in part.get("chapters", [])]
        for doc in docs:
            md = root / f"{doc}.md"
            if md.is_file():
                self.index(read_chapter(md, root, self.chapter_numbers))

    def index(self, src: ChapterSource) -> None:
        self.sources[src.doc] = src
        num = src.number
        counters: dict[str, int] = {}
        sec = [0, 0, 0, 0, 0, 0]
        pending: list[str] = []

        def count(kind: str) -> str:
            counters[kind] = counters.get(kind, 0) + 1
            return f"{num}.{counters[kind]}" if num else str(counters[kind])

        def walk(blocks):
            for b in blocks:
                if isinstance(b, Text):
                    for ln in b.lines:
                        t = _TARGET_LINE.match(ln)
                        h = _HEADING.match(ln)
                        dl = _DOLLAR_LABEL.match(ln)
                        if t:
                            pending.append(t["label"])
                        elif h:
                            level = len(h["hashes"])
                            title = _strip_inline_roles(h["text"])
                            if level == 1 and src.doc not in self.doc_titles:
                                self.doc_titles[src.doc] = title
                            sec[level - 1] += 1
                            sec[level:] = [0] * (6 - level)
                            secnum = ".".join(str(x) for x in [num, *sec[1:level]]) if num else ""
                            for label in pending:
                                self.targets[label] = Target("section", src.doc, "" if level == 1 else html_id(label),
                                                             title, secnum)
                            pending.clear()
                        elif dl:
                            self.targets[dl["label"]] = Target("equation", src.doc, "equation-" + dl["label"],
                                                               number=count("equation"))
                        elif ln.strip():
                            pending.clear()
                elif isinstance(b, Directive):
                    pending.clear()
                    self._index_directive(b, src, count)
                    if b.name.startswith("prf:") or b.name in ADMONITIONS | {"dropdown", "exercise", "solution"}:
                        walk(parse_blocks(b.body, b.body_line, src.path))

        for cell, line in zip(src.nb.cells, src.cell_lines):
            if cell.cell_type == "markdown":
                walk(parse_blocks(cell.source.splitlines(), line, src.path))

    def _index_directive(self, d: Directive, src: ChapterSource, count) -> None:
        label = d.options.get("label") or d.options.get("name")
        nonumber = "nonumber" in d.options
        if d.name.startswith("prf:") and d.name[4:] in PRF_TYPES:
            kind = d.name[4:]
            number = "" if nonumber else count(kind)
            if label:
                self.targets[label] = Target("prf:" + kind, src.doc, html_id(label), d.arg, number)
        elif d.name in {"exercise", "exercise-start"}:
            number = "" if nonumber else count("exercise")
            if label:
                self.targets[label] = Target("exercise", src.doc, html_id(label), d.arg, number)
        elif d.name == "math" and label:
            self.targets[label] = Target("equation", src.doc, "equation-" + label, number=count("equation"))
        elif d.name in {"figure", "glue:figure"} and label:
            self.targets[label] = Target("figure", src.doc, html_id(label),
                                         " ".join(x.strip() for x in d.body if x.strip())[:80], count("figure"))
