"""Links to published files: the student edition and the PDF, and the Colab/Binder launch targets.

* ``[text](published:NAME)`` (book/tools/book_reader.py) must name a file that
  ``.github/workflows/pages.yml`` puts into the published site (``_build/html``): ``book.pdf`` and
  ``student-edition.zip``; the front page and the reading guide link both (issue 32).
* Every Colab/Binder link of every built page must open a notebook on the ``notebooks`` branch that the
  generator writes (``make notebooks``: ``_build/launch``, or, when that tree has not been generated
  here, the names it writes, ``notebooks/<chapter>.ipynb``). Before issue 32 the front page's buttons
  opened ``book/intro.ipynb``, which the generator never writes.
"""
from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

import book_reader
import make_notebooks
from book_html import HTML, PAGES, needs_book

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
SITE = book_reader.published_site(CONFIG["repository"]["url"])
BRANCH = CONFIG["sphinx"]["config"]["launch_notebooks_branch"]
PUBLISHED_LINK = re.compile(r"\]\(published:([^)\s]+)\)")


def published_files() -> set[str]:
    """The files the Pages workflow adds to the site's root (``_build/html``), read from its steps."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["build"]["steps"]
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")]
    assert [s["with"]["path"] for s in uploads] == ["_build/html"]
    out = set()
    for step in steps:
        run = step.get("run", "")
        # cp SOMETHING _build/html/NAME
        out |= set(re.findall(r"\bcp\s+\S+\s+_build/html/(\S+)", run))
        # (cd _build && python -m zipfile -c html/NAME FOLDER)
        out |= set(re.findall(r"zipfile\s+-c\s+html/(\S+)", run))
    return out


def test_the_workflow_publishes_the_student_edition_and_the_pdf():
    assert {"book.pdf", "student-edition.zip"} <= published_files()
    # the zip is the student edition that `make student` writes
    assert re.search(r"make student\b", WORKFLOW.read_text())
    assert re.search(r"zipfile -c html/student-edition\.zip student\b", WORKFLOW.read_text())


def test_published_site_is_derived_from_the_repository():
    assert book_reader.published_site("https://github.com/Owner/repo") == "https://owner.github.io/repo/"
    assert book_reader.published_site("https://github.com/o/r.git") == "https://o.github.io/r/"
    assert book_reader.published_site("https://gitlab.com/o/r") is None
    assert SITE is not None


def _sources():
    return sorted([*(ROOT / "book").glob("*.md"), *(ROOT / "notebooks").glob("ch*.md")])


def test_every_published_link_names_a_published_file():
    files = published_files()
    seen = {}
    for src in _sources():
        for name in PUBLISHED_LINK.findall(src.read_text(encoding="utf-8")):
            assert name in files, f"{src.name} links published:{name}, which pages.yml does not publish"
            seen.setdefault(src.name, set()).add(name)
    for page in ("intro.md", "reading_guide.md"):
        assert seen.get(page, set()) >= {"student-edition.zip", "book.pdf"}, page


class _Hrefs(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


def _hrefs(page: Path) -> list[str]:
    p = _Hrefs()
    p.feed(page.read_text(encoding="utf-8", errors="replace"))
    return p.hrefs


@needs_book
def test_built_pages_link_the_published_files():
    files = published_files()
    for page in PAGES:
        for href in _hrefs(page):
            if href.startswith(SITE):
                assert href[len(SITE):] in files, (page.relative_to(HTML), href)
    for rel in ("book/intro.html", "book/reading_guide.html"):
        hrefs = set(_hrefs(HTML / rel))
        assert {SITE + "student-edition.zip", SITE + "book.pdf"} <= hrefs, rel


def generated_tree() -> tuple[set[str], str]:
    """The files of the launch tree (``make notebooks``) and where they came from."""
    tree = Path(os.environ.get("BOUNDS_LAUNCH_TREE", ROOT / "_build" / "launch"))
    if (tree / make_notebooks.MANIFEST).is_file():
        return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}, str(tree)
    # not generated here: the names build_edition writes (one notebook per chapter)
    return {f"notebooks/{p.stem}.ipynb" for p in make_notebooks.chapters(ROOT / "notebooks")}, "chapters()"


def launch_target(href: str) -> tuple[str, str] | None:
    """``(branch, path in the repository)`` of a Colab or Binder link, else None."""
    u = urlsplit(href)
    if u.netloc == "colab.research.google.com":
        m = re.match(r"^/github/[^/]+/[^/]+/blob/([^/]+)/(.+)$", u.path)
        assert m, href
        return m[1], m[2]
    if u.netloc == "mybinder.org":
        m = re.match(r"^/v2/gh/[^/]+/[^/]+/([^/]+)$", u.path)
        assert m, href
        path = parse_qs(u.query)["urlpath"][0]
        return m[1], re.sub(r"^(?:lab/)?tree/", "", path)
    return None


def test_launch_target_parsing():
    colab = "https://colab.research.google.com/github/o/r/blob/notebooks/notebooks/ch04_peeling.ipynb"
    binder = "https://mybinder.org/v2/gh/o/r/notebooks?urlpath=tree/book/intro.ipynb"
    assert launch_target(colab) == ("notebooks", "notebooks/ch04_peeling.ipynb")
    assert launch_target(binder) == ("notebooks", "book/intro.ipynb")
    assert launch_target("https://example.org/x") is None


@needs_book
def test_every_launch_link_opens_a_generated_notebook():
    files, where = generated_tree()
    targets = {}
    for page in PAGES:
        for href in _hrefs(page):
            t = launch_target(href)
            if t:
                targets.setdefault(t, []).append(page.relative_to(HTML).as_posix())
    assert targets, "no launch link in the built book"
    for (branch, path), pages in targets.items():
        assert branch == BRANCH, (branch, pages)
        assert path in files, f"{pages[0]} launches {path}, which the generator does not write ({where})"
    # every chapter launches (the buttons were not removed wholesale)
    launched = {p for _, p in targets}
    assert {f"notebooks/{p.stem}.ipynb" for p in make_notebooks.chapters(ROOT / "notebooks")} <= launched


@pytest.mark.parametrize("page, launchable", [("notebooks/ch04_peeling", True), ("book/intro", False),
                                              ("book/api", False)])
def test_only_chapters_get_launch_buttons(page, launchable):
    assert (page in book_reader.launchable_pages(ROOT)) is launchable


def _download_group(*labels):
    return {"type": "group", "label": "download-buttons",
            "buttons": [{"type": "link", "label": lab, "url": f"x/{lab}"} for lab in labels]}


def test_a_notebook_page_that_is_no_chapter_loses_its_notebook_downloads():
    buttons = [_download_group("download-notebook-button", "download-source-button", "download-pdf-button"),
               {"type": "javascript", "label": "fullscreen"}]
    book_reader.remove_notebook_downloads(buttons)
    assert [b["label"] for b in buttons[0]["buttons"]] == ["download-pdf-button"]
    assert buttons[1]["label"] == "fullscreen"
    # a group left empty goes
    buttons = [_download_group("download-notebook-button", "download-source-button")]
    book_reader.remove_notebook_downloads(buttons)
    assert buttons == []


@needs_book
def test_the_front_page_offers_no_raw_myst_download():
    """The front page has no generated notebook: its download was MyST-NB's copy (raw MyST, no outputs)
    and its ``.md`` source; both links go (issue 32). Chapters keep their downloads."""
    front = [h for h in _hrefs(HTML / "book" / "intro.html") if "_sources/" in h]
    assert not [h for h in front if h.endswith((".ipynb", ".md"))], front
    chapter = _hrefs(HTML / "notebooks" / "ch04_peeling.html")
    assert any(h.endswith("_sources/notebooks/ch04_peeling.ipynb") for h in chapter)
