"""Editions: every chapter written (launch or student), the manifest, verify, the command line.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import zipfile
from pathlib import Path

import nbformat

from .assembly import convert
from .bibliography import Bibliography
from .common import ROOT, MystError
from .glue import cached_execution, execute_chapter
from .index import BookIndex, ChapterSource, docname, read_chapter

__all__ = ["BINDER_POSTBUILD", "EditionIncomplete", "MANIFEST", "build_edition", "chapters", "main",
           "verify_edition", "zip_edition"]

def chapters(src: Path = ROOT / "notebooks") -> list[Path]:
    return sorted(src.glob("ch*.md"))


BINDER_POSTBUILD = """#!/bin/bash
# Binder (repo2docker) runs this once when it builds the image of the `notebooks` branch.
set -euo pipefail
# torch==...+cpu (constraints.txt) comes from PyTorch's CPU index, which also keeps the image small.
pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt '.[notebooks]'
"""


MANIFEST = "MANIFEST.json"


class EditionIncomplete(RuntimeError):
    """Some chapters could not be generated: the others are written, the manifest names the missing."""

    def __init__(self, failed: dict, written: list):
        self.failed, self.written = failed, written
        names = "; ".join(f"{name}: {why}" for name, why in failed.items())
        super().__init__(f"{len(failed)} chapter(s) not generated ({names}); the {len(written)} others were written")


def _execution(src: ChapterSource, build: Path | None, edition: str, log=print, execute: bool = True):
    """The chapter's executed notebook: the book build's, else (launch edition) executed here.

    The student edition carries no outputs and is never executed: without the build's execution its
    glued values link to the online book (``make student`` on a clean tree takes seconds)."""
    nb = cached_execution(src, build)
    if nb is None and edition == "student":
        where = f"in {build}" if build else "(no book build: make book)"
        log(f"{src.path.name}: no execution {where}; glued values link to the online book (nothing executed)")
    elif nb is None and not execute:
        raise RuntimeError(f"no execution of {src.path.name} in {build} (the book build executes every chapter)")
    elif nb is None:
        log(f"{src.path.name}: no matching execution in {build}; executing it now (nbclient)")
        nb = execute_chapter(src)
    return nb


def _failure(exc: BaseException) -> str:
    """One line saying why a chapter failed (an executed cell's error name and value, not the traceback)."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"a cell raised {ename}: {str(evalue).splitlines()[0] if evalue else ''}".rstrip(": ")
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def build_edition(edition: str, out: Path, build: Path | None = ROOT / "_build", only=None,
                  root: Path = ROOT, log=print, index: BookIndex | None = None,
                  bib: Bibliography | None = None, execute: bool = True) -> list[tuple[Path, int]]:
    """Write the ``launch`` or ``student`` edition of the chapters into ``out``.

    A chapter that cannot be converted (a MyST error) or executed (a failing cell) does not stop the
    others: every other chapter is converted and written, ``out/MANIFEST.json`` lists the written and
    the failed chapters, and :class:`EditionIncomplete` is raised naming each failed chapter and why.
    :func:`verify_edition` (``make_notebooks.py verify``) refuses such a tree at publish time.
    ``index`` and ``bib``: the book's, when the caller has read them already (the course kit);
    ``execute=False``: a launch chapter without an execution in ``build`` fails instead of being run.
    """
    out = Path(out)
    index = index or BookIndex(root)
    bib_file = root / "book" / "references.bib"
    bib = bib or Bibliography(bib_file if bib_file.is_file() else ROOT / "book" / "references.bib")
    srcs = [index.sources.get(docname(p, root)) or read_chapter(p, root, index.chapter_numbers)
            for p in (only or chapters(root / "notebooks"))]
    failed, checked = {}, []
    for src in srcs:  # MyST errors first, before any chapter is executed
        try:
            convert(src, index, bib, edition=edition, check_only=True, commit="")
            checked.append(src)
        except MystError as exc:
            failed[src.path.name] = str(exc)
    results = []
    # Convert everything before writing anything: the tree is replaced as a whole.
    usable = build if build and build.is_dir() else None
    for src in checked:
        try:
            executed = _execution(src, usable, edition, log, execute)
            nb, removed = convert(src, index, bib, edition=edition, executed=executed)
        except Exception as exc:  # a failing cell, a glued value missing after a failed run
            failed[src.path.name] = _failure(exc)
            log(f"{src.path.name}: FAILED — {failed[src.path.name]}")
            continue
        results.append((src, nb, removed))
    shutil.rmtree(out, ignore_errors=True)
    folder = out / "notebooks" if edition == "launch" else out
    folder.mkdir(parents=True)
    written = []
    for src, nb, removed in results:
        dest = folder / f"{src.path.stem}.ipynb"
        nbformat.write(nb, dest)
        written.append((dest, removed))
    if edition == "launch":
        (out / "binder").mkdir()
        post = out / "binder" / "postBuild"
        post.write_text(BINDER_POSTBUILD)
        post.chmod(0o755)
        (out / "binder" / "runtime.txt").write_text("python-3.11\n")
    manifest = {"edition": edition, "written": [src.path.stem for src, _, _ in results],
                "failed": {Path(k).stem: v for k, v in failed.items()}}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if failed:
        raise EditionIncomplete(failed, written)
    return written


def zip_edition(folder: Path, dest: Path, top: str = "student-edition") -> list[str]:
    """Zip the notebooks of ``folder`` under ``top/`` (fixed times: the same edition gives the same zip)."""
    names = []
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(folder.glob("*.ipynb")):
            info = zipfile.ZipInfo(f"{top}/{f.name}", date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, f.read_bytes())
            names.append(info.filename)
    return names


def verify_edition(out: Path, root: Path = ROOT) -> list[str]:
    """Problems that make the generated tree ``out`` unfit to publish (empty list: fit).

    Every chapter of the book (``notebooks/ch*.md``) must be written, none failed, and each notebook
    named in the manifest must exist.
    """
    out = Path(out)
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return [f"{out / MANIFEST}: cannot be read ({exc}); generate the edition first"]
    problems = [f"{name}: failed ({why})" for name, why in manifest.get("failed", {}).items()]
    folder = out / "notebooks" if manifest.get("edition") == "launch" else out
    for md in chapters(root / "notebooks"):
        if md.stem not in manifest.get("written", []) and md.stem not in manifest.get("failed", {}):
            problems.append(f"{md.stem}: missing from the edition")
    for stem in manifest.get("written", []):
        if not (folder / f"{stem}.ipynb").is_file():
            problems.append(f"{stem}: listed as written but {folder / (stem + '.ipynb')} does not exist")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd, help_ in (("launch", "notebooks for the Colab/Binder `notebooks` branch"),
                       ("student", "notebooks without outputs and solutions")):
        p = sub.add_parser(cmd, help=help_)
        p.add_argument("--out", type=Path, default=ROOT / "_build" / cmd)
        p.add_argument("--build", type=Path, default=ROOT / "_build",
                       help="book build whose jupyter-cache holds the executions (chapters without one are executed)")
        p.add_argument("--root", type=Path, default=ROOT, help="root of the book (_toc.yml, notebooks/)")
        p.add_argument("chapters", nargs="*", type=Path, help="chapter .md files (default: every notebooks/ch*.md)")
        if cmd == "student":
            p.add_argument("--zip", type=Path, help="also zip the edition into this file (the handout)")
    v = sub.add_parser("verify", help="refuse a generated tree with a missing or failed chapter (before publishing)")
    v.add_argument("out", type=Path)
    v.add_argument("--root", type=Path, default=ROOT)
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        problems = verify_edition(a.out, a.root.resolve())
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        if not problems:
            print(f"{a.out}: every chapter present")
        return 1 if problems else 0
    failed = {}
    try:
        written = build_edition(a.cmd, a.out, a.build, [p.resolve() for p in a.chapters] or None, a.root.resolve())
    except EditionIncomplete as exc:
        written, failed = exc.written, exc.failed
    for dest, removed in written:
        extra = f" ({removed} solution{'s' if removed != 1 else ''} removed)" if a.cmd == "student" else ""
        print(f"{a.cmd} notebook: {dest}{extra}")
    for name, why in failed.items():
        print(f"error: {name} not generated: {why}", file=sys.stderr)
    if getattr(a, "zip", None) and not failed:
        a.zip.parent.mkdir(parents=True, exist_ok=True)
        print(f"student edition zip: {a.zip} ({len(zip_edition(a.out, a.zip))} notebooks)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
