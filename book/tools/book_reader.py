"""Sphinx extension for readers: launch buttons that open real notebooks, a clean console.

Loaded through ``_config.yml`` (``sphinx.local_extensions: {book_reader: book/tools}``).

* **Launch buttons.** sphinx-book-theme points Colab and Binder at ``notebooks/chXX.md`` on the
  source branch, which Colab cannot open. The Pages workflow publishes generated notebooks
  (``python book/tools/make_notebooks.py launch``) to the branch ``launch_notebooks_branch``
  (default ``notebooks``); the buttons are rewritten to ``notebooks/chXX.ipynb`` on that branch.
* **Launch buttons only where a notebook is published.** The generator writes a launchable notebook for
  every chapter (``notebooks/chXX_*.md``) and for nothing else; on any other page with code (the front
  page) the Colab/Binder group is removed, so no button opens a file the ``notebooks`` branch lacks
  (``tests/test_published_links.py`` checks every launch link of the built pages against that tree).
* **Download button.** A notebook page that is not a chapter (the front page) offers no ``.ipynb`` or
  ``.md`` download (either would be raw MyST: the generator converts chapters only).
  The executed ``.ipynb`` behind a chapter's download button is the chapter's plain
  Jupyter notebook of ``make notebooks`` (``make_notebooks.convert``: glued numbers, numbered
  statements, linked references, macros cell, install cell), made from this build's own executions
  (its jupyter-cache). Where that is impossible the page keeps MyST-NB's copy with the macros and
  install cells, and the build log says why (the notebook tests fail on the same input).
* **Local search.** Search-result snippets are turned off only when the book is opened from
  ``file://`` (they need ``fetch``, which browsers refuse there); the web site keeps them.
* **PDF.** The MathJax macros of ``_config.yml`` are added to the LaTeX preamble, so ``make pdf``
  typesets the same formulas.
* **Layout.** ``book/_static/reader.css`` (hidden duplicate top navbar, smaller headings on
  phones, horizontally scrolling wide formulas and tables).
* **Alt text.** A figure image without an explicit ``:alt:`` gets its caption as alt text (not its
  file path).
* **Console hygiene.** jupyter-book 1.0 registers sphinx-thebe's inline config script twice
  (``Identifier 'THEBE_JS_URL' has already been declared`` on every page) and the theme logs
  ``Got invalid theme mode`` when no default mode is set; both are fixed per page here. The
  browser test (``tests/test_browser.py``) asserts that pages log no console error.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

import make_notebooks
from make_notebooks import prepare_for_jupyter
from sphinx.util import logging

_log = logging.getLogger(__name__)

_COLAB = re.compile(r"^(?P<pre>.*/github/[^/]+/[^/]+/blob/)(?P<branch>[^/]+)(?P<path>/.+?)\.md$")
_BINDER = re.compile(r"^(?P<pre>.*/v2/(?:gh|gl)/[^/]+/[^/]+/)(?P<branch>[^?]+)\?urlpath=(?P<path>.+?)\.md$")


def retarget_launch_url(url: str, branch: str) -> str:
    """Point a Colab/Binder launch URL of a ``.md`` chapter at its ``.ipynb`` on ``branch``."""
    for rx, fmt in ((_COLAB, "{pre}{branch}{path}.ipynb"), (_BINDER, "{pre}{branch}?urlpath={path}.ipynb")):
        m = rx.match(url)
        if m:
            return fmt.format(pre=m["pre"], branch=branch, path=m["path"])
    return url


def launchable_pages(srcdir) -> set[str]:
    """The pages whose notebook the generator writes (``make notebooks``): the chapters."""
    return {f"notebooks/{p.stem}" for p in make_notebooks.chapters(Path(srcdir) / "notebooks")}


#: The download entries of a notebook page: MyST-NB's ``.ipynb`` and the ``.md`` source.
NOTEBOOK_DOWNLOADS = ("download-notebook-button", "download-source-button")


def remove_notebook_downloads(buttons: list) -> None:
    """Drop the ``.ipynb`` and ``.md`` downloads of a notebook page that is not a chapter (the front page).

    The generator converts only chapters; the front page's glued numbers come from other pages, so its
    ``.ipynb`` would be MyST-NB's copy with raw MyST (roles, directives, no outputs) and its ``.md`` is
    raw MyST too. No download is better than an unclean one; "print to PDF" stays (issue 32).
    """
    for group in buttons:
        if group.get("label") == "download-buttons":
            group["buttons"] = [b for b in group.get("buttons", []) if b.get("label") not in NOTEBOOK_DOWNLOADS]
    buttons[:] = [b for b in buttons if b.get("label") != "download-buttons" or b.get("buttons")]


def _walk_buttons(buttons):
    for b in buttons or []:
        yield b
        yield from _walk_buttons(b.get("buttons"))


def _page_context(app, pagename, templatename, context, doctree):
    context.setdefault("default_mode", "auto")

    scripts = context.get("script_files")
    if scripts:
        seen, unique = set(), []
        for js in scripts:
            attrs = getattr(js, "attributes", {}) or {}
            # The duplicate differs only by filename None vs "" (both mean an inline script).
            name = getattr(js, "filename", js) or ""
            key = (str(name), tuple(sorted((k, str(v)) for k, v in attrs.items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        scripts[:] = unique

    branch = app.config.launch_notebooks_branch
    buttons = context.get("header_buttons")
    launchable = pagename in launchable_pages(app.srcdir)
    if buttons and not launchable:
        # no generated notebook behind this page: no Colab/Binder button
        buttons[:] = [b for b in buttons if b.get("label") != "launch-buttons"]
        if context.get("ipynb_source"):
            remove_notebook_downloads(buttons)
    for button in _walk_buttons(buttons):
        if button.get("type") == "link" and button.get("url"):
            button["url"] = retarget_launch_url(button["url"], branch)

    if context.get("ipynb_source") and launchable:
        path = Path(app.outdir) / "_sources" / context["ipynb_source"]
        if path.is_file():
            nb = _reader_notebook(app, pagename)
            if nb is None:
                nb = prepare_for_jupyter(nbformat.read(path, as_version=4))
            nbformat.write(nb, path)


def _reader_notebook(app, pagename):
    """The plain-Jupyter notebook of a chapter from this build's executions, or None."""
    try:
        if not hasattr(app, "_bounds_index"):
            root = Path(app.srcdir)
            app._bounds_index = make_notebooks.BookIndex(root)
            app._bounds_bib = make_notebooks.Bibliography()
        src = app._bounds_index.sources.get(pagename)
        if src is None:
            return None
        cache = getattr(app.config, "nb_execution_cache_path", "") or str(Path(app.outdir).parent / ".jupyter_cache")
        executed = make_notebooks.cached_execution(src, Path(cache).parent)
        if executed is None:
            _log.info(f"[book_reader] {pagename}: no cached execution; download notebook keeps MyST")
            return None
        nb, _ = make_notebooks.convert(src, app._bounds_index, app._bounds_bib, edition="launch", executed=executed)
        return nb
    except Exception as exc:  # the page must build; tests/test_notebooks_outside.py fails on the same input
        _log.info(f"[book_reader] {pagename}: download notebook keeps MyST ({exc})")
        return None


# Sphinx's search fetches every hit's page to show a snippet; browsers refuse fetch() on file://,
# so a book opened from local files logged one error per hit. Snippets stay on for the web site.
_SEARCH_SUMMARY_JS = (
    'if (location.protocol === "file:" && typeof DOCUMENTATION_OPTIONS !== "undefined") '
    "{ DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false; }"
)


def latex_macros(mathjax3_config) -> str:
    """LaTeX preamble lines defining the book's MathJax macros (one source: ``_config.yml``; one
    renderer: :func:`make_notebooks.newcommands`)."""
    macros = make_notebooks.macros_of(mathjax3_config)
    lines = [make_notebooks.newcommands(macros, latex=True)] if macros else []
    # Formulas in headings also go into PDF bookmarks, where unicode-math's Greek letters
    # (\mitvarphi, ...) are an error: spell the letters as Unicode text there.
    greek = ("alpha beta gamma delta epsilon varepsilon zeta eta theta kappa lambda mu nu xi pi rho sigma tau phi "
             "varphi chi psi omega Gamma Delta Theta Lambda Pi Sigma Phi Psi Omega").split()
    chars = "αβγδϵεζηθκλμνξπρστϕφχψωΓΔΘΛΠΣΦΨΩ"
    defs = "".join(f"\\def\\{g}{{{c}}}" for g, c in zip(greek, chars))
    lines.append(f"\\AtBeginDocument{{\\pdfstringdefDisableCommands{{{defs}}}}}")
    return "\n".join(lines)


STATIC = Path(__file__).resolve().parents[1] / "_static"  # book/_static


def _config_inited(app, config):
    # book/_static/reader.css: fixes found on desktop and phone screenshots.
    if STATIC.is_dir() and str(STATIC) not in map(str, config.html_static_path):
        config.html_static_path = [*config.html_static_path, str(STATIC)]
    # The PDF (make pdf) needs the same macros as MathJax.
    preamble = latex_macros(config.mathjax3_config)
    if preamble:
        elements = dict(config.latex_elements or {})
        elements["preamble"] = elements.get("preamble", "") + "\n% book macros (book_reader)\n" + preamble + "\n"
        config.latex_elements = elements


_PATHLIKE = re.compile(r"(^|/)[^\s/]+\.(png|svg|jpe?g|gif|pdf)$", re.I)


def figure_alt_text(doctree) -> int:
    """Give every figure image without a real alt text the figure's caption as alt text.

    A ``{glue:figure}`` (and a ``{figure}`` without ``:alt:``) gets its image file's path as alt text,
    which tells a screen-reader user nothing; its caption says what the figure shows. An explicit
    ``:alt:`` is kept. Returns how many images were given an alt text.
    """
    from docutils import nodes

    n = 0
    for fig in doctree.findall(nodes.figure):
        captions = [c for c in fig.children if isinstance(c, nodes.caption)]
        if not captions:
            continue
        text = " ".join(captions[0].astext().split())
        for img in fig.findall(nodes.image):
            alt = str(img.get("alt", "")).strip()
            if not alt or alt == img.get("uri") or _PATHLIKE.search(alt):
                img["alt"] = text
                n += 1
    return n


def _doctree_resolved(app, doctree, docname):
    figure_alt_text(doctree)


def setup(app):
    app.add_config_value("launch_notebooks_branch", "notebooks", "html")
    app.connect("config-inited", _config_inited)
    app.connect("doctree-resolved", _doctree_resolved)
    app.add_css_file("reader.css")
    app.add_js_file(None, body=_SEARCH_SUMMARY_JS, priority=210)
    # After sphinx-book-theme's add_launch_buttons (priority 501), which copies the .ipynb.
    app.connect("html-page-context", _page_context, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
