"""Sphinx extension: the course kit inside the built site, launch links from one setting, exercise badges.

Loaded through ``_config.yml`` (``sphinx.local_extensions: {course_kit: book/tools}``).

* **The kit.** When an HTML build finishes, ``make_notebooks.build_kit`` writes into ``_build/html/kit``
  every file a course hands out (the chapters as notebooks with and without outputs, the student
  edition zip, the reading guide's notebook, the PDF where ``make pdf`` made one). A page links them as
  ``[text](kit:student-edition.zip)``; the ``kit:`` scheme becomes a link relative to the page, so it
  works from disk, from any host and from the Pages site alike. ``kit:book.pdf`` stays a link only
  where a PDF exists; otherwise it becomes text saying ``make pdf`` writes it.
* **Launch links from one setting.** ``[text](launch:binder)`` opens the whole book's notebooks on
  Binder: the address comes from ``repository.url`` of ``_config.yml`` (as do the chapters'
  Colab/Binder buttons and the install cells) and the branch from ``launch_notebooks_branch``.
* **Exercise badges.** Every exercise box gets, after its number, a badge: "self-check" where
  :data:`bounds_lib.teaching.exercises.SELF_CHECKS` has one, "worked solution below" where
  :data:`~bounds_lib.teaching.exercises.WITHOUT_SELF_CHECK` says why there is none (a proof, an
  explanation). An exercise in neither list fails the build.
* **The reading guide's download** is its notebook in the kit (its numbers filled in), not its MyST
  source.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from docutils import nodes
from sphinx.util import logging

import make_notebooks

_log = logging.getLogger(__name__)

SCHEMES = ("kit", "launch")
BADGE_CHECK = "self-check"
BADGE_SOLUTION = "worked solution below"


def launch_url(repository_url: str, branch: str, target: str = "binder") -> str:
    """The Binder address that opens the launch tree's ``notebooks/`` folder on ``branch``.

    ``repository_url`` is ``https://github.com/OWNER/REPO`` (``repository.url`` of ``_config.yml``).
    """
    m = re.match(r"^https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", repository_url or "")
    if not m:
        raise ValueError(f"repository.url {repository_url!r} is not https://github.com/OWNER/REPO; "
                         "Binder launch links need a GitHub repository")
    if target != "binder":
        raise ValueError(f"launch:{target}: the only launch target for the whole book is launch:binder")
    return f"https://mybinder.org/v2/gh/{m[1]}/{m[2]}/{quote(branch)}?urlpath=tree/notebooks"


def kit_href(docname: str, path: str) -> str:
    """The link from page ``docname`` to ``kit/path`` of the built site (relative)."""
    return "../" * docname.count("/") + f"{make_notebooks.KIT}/{path}"


def pdf_path(app) -> Path:
    return Path(app.outdir).parent / "latex" / make_notebooks.PDF


def resolve_links(app, doctree, docname: str) -> int:
    """Turn the ``kit:`` and ``launch:`` references of a page into real links; returns how many."""
    n = 0
    for ref in list(doctree.findall(nodes.reference)):
        uri = ref.get("refuri", "")
        scheme, _, path = uri.partition(":")
        if scheme not in SCHEMES or uri.startswith(("kit://", "launch://")):
            continue
        n += 1
        if scheme == "launch":
            repo = (app.config.html_theme_options or {}).get("repository_url", "")
            ref["refuri"] = launch_url(repo, app.config.launch_notebooks_branch, path)
        elif path not in make_notebooks.kit_files(Path(app.srcdir), pdf=True):
            raise ValueError(f"{docname}: kit:{path} names no file of the course kit "
                             f"(it has {', '.join(make_notebooks.kit_files(Path(app.srcdir), pdf=True))})")
        elif path == make_notebooks.PDF and not pdf_path(app).is_file():
            ref.replace_self(nodes.emphasis("", f"{ref.astext()} (not in this build: make pdf writes it)"))
        elif app.builder.format != "html":
            ref.replace_self(nodes.Text(ref.astext()))
        else:
            ref["refuri"] = kit_href(docname, path)
    return n


def exercise_badges(doctree) -> int:
    """Add the self-check / worked-solution badge to every exercise box's title; returns how many."""
    from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

    from bounds_lib.teaching.exercises import SELF_CHECKS, WITHOUT_SELF_CHECK

    n = 0
    for box in doctree.findall(lambda x: isinstance(x, (exercise_node, exercise_enumerable_node))):
        label = box.get("label", "")
        if label in SELF_CHECKS:
            text, cls = BADGE_CHECK, "exercise-badge-check"
        elif label in WITHOUT_SELF_CHECK:
            text, cls = BADGE_SOLUTION, "exercise-badge-solution"
        else:
            raise ValueError(f"exercise {label!r} has neither a self-check (bounds_lib.teaching.exercises."
                             "SELF_CHECKS) nor a reason in WITHOUT_SELF_CHECK")
        # sphinx-exercise's post-transform has replaced its exercise_title by a plain title ("Exercise 3.1")
        title = box.children[0] if box.children and isinstance(box.children[0], nodes.title) else None
        if title is None or any("exercise-badge" in c.get("classes", []) for c in title.findall(nodes.inline)):
            continue
        title += nodes.inline("", text, classes=["exercise-badge", cls])
        n += 1
    return n


def _doctree_resolved(app, doctree, docname):
    try:
        resolve_links(app, doctree, docname)
        exercise_badges(doctree)
    except ValueError as exc:  # a strict build (-W) fails on it, with this one line
        _log.warning(f"[course_kit] {exc}", location=docname)


#: Pages whose source download (raw MyST) is replaced by their notebook in the kit.
PAGE_NOTEBOOKS = {"book/reading_guide": "reading_guide.ipynb"}


def _page_context(app, pagename, templatename, context, doctree):
    """The reading guide's download button gives its notebook (numbers filled in), not its MyST source."""
    if pagename not in PAGE_NOTEBOOKS:
        return
    url = context["pathto"](f"{make_notebooks.KIT}/{PAGE_NOTEBOOKS[pagename]}", 1)
    for group in context.get("header_buttons") or []:
        for b in group.get("buttons") or []:
            if b.get("label") == "download-source-button":
                b.update(url=url, text=".ipynb", tooltip="Download this page as a notebook",
                         label="download-notebook-button")


def _outdated(app, env, added, changed, removed):
    """Pages with a ``kit:book.pdf`` link are rebuilt when a PDF appears or goes."""
    have = pdf_path(app).is_file()
    if getattr(env, "course_kit_pdf", None) == have:
        return []
    env.course_kit_pdf = have
    return [d for d in env.found_docs if d in getattr(env, "course_kit_pdf_pages", set())]


def _doctree_read(app, doctree):
    if any(r.get("refuri") == f"kit:{make_notebooks.PDF}" for r in doctree.findall(nodes.reference)):
        pages = getattr(app.env, "course_kit_pdf_pages", set())
        pages.add(app.env.docname)
        app.env.course_kit_pdf_pages = pages


def _merge(app, env, docnames, other):
    env.course_kit_pdf_pages = getattr(env, "course_kit_pdf_pages", set()) | getattr(
        other, "course_kit_pdf_pages", set())


def _build_finished(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    if getattr(app.config, "nb_execution_mode", "cache") == "off":  # make book-noexec: nothing to fill it
        _log.info("[course_kit] notebooks not executed in this build: no course kit written")
        return
    out = make_notebooks.build_kit(Path(app.outdir), Path(app.outdir).parent, Path(app.srcdir),
                                   log=lambda msg: _log.info(f"[course_kit] {msg}"))
    _log.info(f"[course_kit] {len(out['written'])} files in {Path(app.outdir) / make_notebooks.KIT}")
    for why in out["failed"]:
        _log.warning(f"[course_kit] {why}")


def _config_inited(app, config):
    schemes = config.myst_url_schemes
    if not isinstance(schemes, dict):
        schemes = {s: None for s in (schemes or ("http", "https", "mailto", "ftp"))}
    config.myst_url_schemes = {**schemes, **{s: None for s in SCHEMES}}


def setup(app):
    app.connect("config-inited", _config_inited)
    app.connect("doctree-read", _doctree_read)
    app.connect("env-merge-info", _merge)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _doctree_resolved)
    app.connect("html-page-context", _page_context, priority=503)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
