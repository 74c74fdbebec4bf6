"""Links to the course kit and the Colab/Binder launch targets, all from one repository setting.

* ``[text](kit:NAME)`` (book/tools/course_kit.py) must name a file that the book build writes into
  ``_build/html/kit`` (``make_notebooks.kit_files``): the student edition, the chapters' notebooks with
  and without outputs, the reading guide's notebook, the PDF where ``make pdf`` made one. The built pages
  link them relatively, so the site works from disk and from any host (issue 48; before it, the links
  pointed at a published site that no build produced).
* Every Colab/Binder link of every built page must open a notebook (or the ``notebooks/`` folder) of the
  build's launch tree (``_build/html/kit``, what the Pages workflow pushes to the ``notebooks`` branch;
  ``_build/launch`` of ``make notebooks``; or, when neither has been generated here, the names the
  generator writes). Before issue 32 the front page's buttons opened ``book/intro.ipynb``, which the
  generator never writes.
* The repository address is written once (``repository.url`` of ``_config.yml``); the launch links and
  the install cells derive from it.
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
import course_kit
import make_notebooks
from book_html import HTML, PAGES, needs_book

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO = CONFIG["repository"]["url"]
BRANCH = CONFIG["sphinx"]["config"]["launch_notebooks_branch"]
KIT_LINK = re.compile(r"\]\(kit:([^)\s]+)\)")
CHAPTERS = [p.stem for p in make_notebooks.chapters(ROOT / "notebooks")]


def _sources():
    return sorted([*(ROOT / "book").glob("*.md"), *(ROOT / "notebooks").glob("ch*.md")])


def test_every_kit_link_names_a_file_the_build_writes():
    files = set(make_notebooks.kit_files(ROOT, pdf=True))
    seen = {}
    for src in _sources():
        text = src.read_text(encoding="utf-8")
        assert "](published:" not in text, f"{src.name}: published: links point at a site no build produces"
        for name in KIT_LINK.findall(text):
            assert name in files, f"{src.name} links kit:{name}, which the build does not write"
            seen.setdefault(src.name, set()).add(name)
    handouts = {"student-edition.zip", "book.pdf", "reading_guide.ipynb"}
    assert seen.get("reading_guide.md", set()) >= handouts
    # the front page links everything, each chapter with and without outputs
    assert seen.get("intro.md", set()) == files


def test_the_kit_lists_each_chapter_twice_and_the_handouts():
    files = make_notebooks.kit_files(ROOT)
    assert [f for f in files if f.startswith("notebooks/")] == [f"notebooks/{c}.ipynb" for c in CHAPTERS]
    assert [f for f in files if f.startswith("no-outputs/")] == [f"no-outputs/{c}.ipynb" for c in CHAPTERS]
    assert "book.pdf" not in files and "book.pdf" in make_notebooks.kit_files(ROOT, pdf=True)


@pytest.mark.parametrize("page, href", [("book/intro", "../kit/student-edition.zip"),
                                        ("index", "kit/student-edition.zip"),
                                        ("notebooks/sub/x", "../../kit/student-edition.zip")])
def test_kit_links_are_relative_to_the_page(page, href):
    assert course_kit.kit_href(page, "student-edition.zip") == href


def test_the_launch_link_derives_from_the_repository_setting():
    assert course_kit.launch_url("https://github.com/Org/repo", "nb") == (
        "https://mybinder.org/v2/gh/Org/repo/nb?urlpath=tree/notebooks")
    assert course_kit.launch_url("https://github.com/o/r.git/", "notebooks").startswith("https://mybinder.org/v2/gh/o/r/")
    with pytest.raises(ValueError, match="not https://github.com/OWNER/REPO"):
        course_kit.launch_url("https://gitlab.com/o/r", "nb")
    with pytest.raises(ValueError, match="only launch target"):
        course_kit.launch_url(REPO, "nb", "colab")
    # the install cells name the same repository (no second address anywhere)
    assert f"git+{REPO}@" in make_notebooks.install_cell_source("import numpy", ref="abc")
    for src in [*_sources(), ROOT / "book" / "tools" / "book_reader.py", ROOT / "book" / "tools" / "course_kit.py"]:
        assert REPO not in src.read_text(encoding="utf-8"), f"{src.name} repeats the repository address"


def test_the_workflow_publishes_the_build_as_it_is():
    """The Pages workflow uploads ``_build/html`` as built (the kit inside it), PDF first, then the book."""
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["build"]["steps"]
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")]
    assert [s["with"]["path"] for s in uploads] == ["_build/html"]
    text = WORKFLOW.read_text()
    assert "published" not in text and "zipfile" not in text and "cp _build/latex/book.pdf" not in text
    runs = [s.get("run", "") for s in steps]
    pdf = next(k for k, r in enumerate(runs) if "make pdf" in r)
    rebuild = next(k for k, r in enumerate(runs) if k > pdf and re.search(r"make book\b", r))
    tests = next(k for k, r in enumerate(runs) if "pytest" in r)
    assert pdf < rebuild < tests  # the tests read the site with its PDF link
    assert "_build/html/kit" in text  # the notebooks branch gets the kit's launch tree


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


def generated_tree() -> tuple[set[str], str]:
    """The files of the build's launch tree and where they came from."""
    for tree in (Path(os.environ["BOUNDS_LAUNCH_TREE"]) if "BOUNDS_LAUNCH_TREE" in os.environ else None,
                 HTML / make_notebooks.KIT, ROOT / "_build" / "launch"):
        if tree is not None and (tree / make_notebooks.MANIFEST).is_file():
            return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}, str(tree)
    # not generated here: the names build_edition writes (one notebook per chapter)
    return {f"notebooks/{c}.ipynb" for c in CHAPTERS}, "chapters()"


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
    assert launch_target(course_kit.launch_url(REPO, BRANCH)) == (BRANCH, "notebooks")
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
    folders = {Path(f).parent.as_posix() for f in files}
    for (branch, path), pages in targets.items():
        assert branch == BRANCH, (branch, pages)
        assert path in files or path in folders, (
            f"{pages[0]} launches {path}, which the launch tree does not contain ({where})")
    # every chapter launches (the buttons were not removed wholesale), and the front page the whole book
    launched = {p for _, p in targets}
    assert {f"notebooks/{c}.ipynb" for c in CHAPTERS} <= launched
    assert ("notebooks", ["book/intro.html"]) in [(p, pages) for (_, p), pages in targets.items()]


@needs_book
def test_the_front_page_links_the_kit_and_the_kit_exists():
    hrefs = set(_hrefs(HTML / "book" / "intro.html"))
    pdf = (HTML / make_notebooks.KIT / make_notebooks.PDF).is_file()
    for name in make_notebooks.kit_files(ROOT, pdf=pdf):
        assert f"../kit/{name}" in hrefs, name
        assert (HTML / make_notebooks.KIT / name).is_file(), name
    # no PDF in this build: no link to one, the text says how to make it
    text = (HTML / "book" / "intro.html").read_text()
    assert pdf or ("../kit/book.pdf" not in hrefs and "make pdf writes it" in text)


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
