"""The course kit: what a course hands out, written into the built site (``_build/html/kit``).

Part of the notebook generator (``book/tools/make_notebooks.py``); ``book/tools/course_kit.py`` calls
:func:`build_kit` when ``make book`` finishes, so a site opened from disk, served by a university or
mirrored elsewhere carries every file its pages link (relative links, nothing published elsewhere):

* ``notebooks/chXX_*.ipynb`` — each chapter as a plain Jupyter notebook with the book's outputs (the
  launch edition: the tree the Colab and Binder buttons open on the ``notebooks`` branch), ``binder/``
  and ``MANIFEST.json`` as ``make notebooks`` writes them;
* ``no-outputs/chXX_*.ipynb`` — the same notebooks without outputs (solutions kept);
* ``student-edition.zip`` — the student edition (``make student``: no outputs, no solutions, a
  self-check cell under each exercise with a single answer);
* ``reading_guide.ipynb`` — the reading guide with its numbers filled in (plain Markdown, no raw MyST);
* ``book.pdf`` — only where a PDF build (``make pdf``) left one in ``_build/latex``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from .assembly import clear_outputs, convert
from .bibliography import Bibliography
from .common import ROOT
from .editions import MANIFEST, build_edition, zip_edition
from .glue import cached_execution, glue_data
from .index import BookIndex, read_chapter

__all__ = ["KIT", "PDF", "READING_GUIDE", "STUDENT_ZIP", "build_kit", "kit_files", "reading_guide_notebook"]

KIT = "kit"
STUDENT_ZIP = "student-edition.zip"
READING_GUIDE = "reading_guide.ipynb"
PDF = "book.pdf"


def kit_files(root: Path = ROOT, pdf: bool = False) -> list[str]:
    """The files of the kit a build writes, relative to ``_build/html/kit`` (what pages may link)."""
    from .editions import chapters

    stems = [p.stem for p in chapters(root / "notebooks")]
    return [*(f"notebooks/{s}.ipynb" for s in stems), *(f"no-outputs/{s}.ipynb" for s in stems),
            STUDENT_ZIP, READING_GUIDE, *([PDF] if pdf else [])]


def reading_guide_notebook(build: Path, root: Path = ROOT, index: BookIndex | None = None,
                           bib: Bibliography | None = None):
    """The reading guide as a plain Jupyter notebook, its numbers read from the chapters' executions."""
    index = index or BookIndex(root)
    md = root / "book" / "reading_guide.md"
    src = index.sources.get("book/reading_guide") or read_chapter(md, root, index.chapter_numbers)
    other = {}
    for doc, chapter in index.sources.items():
        if doc.startswith("notebooks/"):
            executed = cached_execution(chapter, build)
            if executed is not None:
                other[doc] = glue_data(executed)
    nb, _ = convert(src, index, bib or Bibliography(), edition="launch", other_glue=other, install=False)
    return nb


def build_kit(html: Path, build: Path, root: Path = ROOT, log=print) -> dict[str, list[str]]:
    """Write the course kit into ``html/kit`` from the executions of the build in ``build``.

    Returns ``{"written": [...], "failed": [...]}`` (paths relative to the kit). Nothing is executed: a
    chapter without an execution in ``build``, or that cannot be converted, is left out and named; the
    rest is written.
    """
    kit = Path(html) / KIT
    failed = []
    book = {"index": BookIndex(root), "bib": Bibliography()}
    try:
        build_edition("launch", kit, build, root=root, log=log, execute=False, **book)
    except RuntimeError as exc:  # EditionIncomplete: the others are written
        failed.append(str(exc))
    manifest = kit / MANIFEST
    bare = kit / "no-outputs"
    bare.mkdir(parents=True, exist_ok=True)
    for f in sorted((kit / "notebooks").glob("*.ipynb")):
        nbformat.write(clear_outputs(nbformat.read(f, as_version=4)), bare / f.name)
    student = Path(build) / "student"
    try:
        build_edition("student", student, build, root=root, log=log, **book)
    except RuntimeError as exc:
        failed.append(str(exc))
    zip_edition(student, kit / STUDENT_ZIP)
    if not (Path(root) / "book" / "reading_guide.md").is_file():  # a book without a guide has none to hand out
        log(f"{READING_GUIDE}: this book has no book/reading_guide.md; none written")
    else:
        try:
            nbformat.write(reading_guide_notebook(build, root, **book), kit / READING_GUIDE)
        except (ValueError, OSError) as exc:  # MystError: the site is written without it, and says so
            failed.append(f"{READING_GUIDE}: {exc}")
    pdf = Path(build) / "latex" / PDF
    if pdf.is_file():
        shutil.copyfile(pdf, kit / PDF)
    written = sorted(p.relative_to(kit).as_posix() for p in kit.rglob("*") if p.is_file() and p != manifest)
    return {"written": written, "failed": failed}
