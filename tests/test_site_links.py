"""A link checker over the built site (``_build/html``): every link resolves to a file the build produced.

For every page, every ``href`` and ``src`` is sorted into one of four kinds:

* **internal** — a relative link (a page, an image, a script, a download such as ``kit/…`` or
  ``_sources/…``): the file must exist under ``_build/html`` and, for a link with ``#anchor`` into an
  HTML page, the page must have an element with that id;
* **launch** — a Colab or Binder link: it must open a notebook (or, for the whole book, the
  ``notebooks/`` folder) of the build's launch tree, ``_build/html/kit`` (the tree the Pages workflow
  pushes to the ``notebooks`` branch);
* **external** — any other ``http(s):``/``mailto:`` address: listed, never fetched (no network in tests);
* nothing else: a ``kit:``, ``launch:`` or ``published:`` link that reached the HTML, a ``file:`` link or
  an absolute path is a defect.

``test_the_checker_finds_each_kind_of_broken_link`` shows the checker failing on a small site with one
broken link of each kind.
"""
from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from book_html import HTML, PAGES, needs_book

EXTERNAL_SCHEMES = {"http", "https", "mailto"}
IGNORED_SCHEMES = {"javascript", "data"}


class _Links(HTMLParser):
    """The ``href``/``src`` of a page's elements, and the ids it defines."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None and tag not in {"base"}:
                self.links.append((tag, a[key]))


def read_page(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def launch_target(href: str) -> str | None:
    """The path in the launch tree that a Colab or Binder link opens, else None."""
    u = urlsplit(href)
    if u.netloc == "colab.research.google.com":
        m = re.match(r"^/github/[^/]+/[^/]+/blob/[^/]+/(.+)$", u.path)
        return m[1] if m else "?"
    if u.netloc == "mybinder.org":
        path = parse_qs(u.query).get("urlpath", [""])[0]
        return re.sub(r"^(?:lab/)?tree/", "", path) or "?"
    return None


def check_site(html: Path, launch_tree: Path) -> tuple[Counter, list[str], list[str]]:
    """``(counts by kind, external links, problems)`` of every link of every page under ``html``."""
    pages = sorted(p for p in html.rglob("*.html") if "_static" not in p.relative_to(html).parts)
    ids: dict[Path, set[str]] = {}
    parsed = {p: read_page(p) for p in pages}
    for p, links in parsed.items():
        ids[p.resolve()] = links.ids
    counts, external, problems = Counter(), set(), []
    tree = {f.relative_to(launch_tree).as_posix() for f in launch_tree.rglob("*") if f.is_file()}
    folders = {str(Path(f).parent.as_posix()) for f in tree}
    for page, links in parsed.items():
        where = page.relative_to(html).as_posix()
        for tag, href in links.links:
            u = urlsplit(href)
            if u.scheme in IGNORED_SCHEMES or href in {"", "#"}:
                continue
            target = launch_target(href)
            if target is not None:
                counts["launch"] += 1
                if target not in tree and target not in folders:
                    problems.append(f"{where}: launch link {href} opens {target}, not in {launch_tree}")
                continue
            if u.scheme in EXTERNAL_SCHEMES:
                counts["external"] += 1
                external.add(href)
                continue
            if u.scheme or href.startswith("/"):
                problems.append(f"{where}: {href} is neither relative nor a web address")
                continue
            kind = "anchor" if not u.path else ("download" if _is_download(u.path) else "internal")
            counts[kind] += 1
            file = (page.parent / unquote(u.path)).resolve() if u.path else page.resolve()
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file():
                problems.append(f"{where}: {href} -> no file {file}")
                continue
            try:
                file.relative_to(html.resolve())
            except ValueError:
                problems.append(f"{where}: {href} leaves the site")
                continue
            if u.fragment and file.suffix == ".html" and unquote(u.fragment) not in ids.get(file, set()):
                problems.append(f"{where}: {href} -> {file.name} has no id {u.fragment!r}")
    return counts, sorted(external), problems


def _is_download(path: str) -> bool:
    return path.endswith((".ipynb", ".zip", ".pdf", ".md", ".py")) or "/kit/" in f"/{path}"


@needs_book
def test_every_link_of_the_built_site_resolves():
    counts, external, problems = check_site(HTML, HTML / "kit")
    print(f"\nlinks checked: {dict(counts)}; {len(external)} distinct external addresses (not fetched):")
    for href in external:
        print("  ", href)
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems[:40])
    # the checker saw what it is there for
    assert counts["internal"] > 1000 and counts["anchor"] > 100, counts
    assert counts["download"] >= 2 * 9 + 2 and counts["launch"] >= 2 * 9 + 1, counts
    assert len(PAGES) > 10


def _site(tmp_path: Path, body: str) -> tuple[Path, Path]:
    html, tree = tmp_path / "html", tmp_path / "html" / "kit"
    (tree / "notebooks").mkdir(parents=True)
    (tree / "notebooks" / "ch01.ipynb").write_text("{}")
    (html / "other.html").write_text('<h1 id="top">Other</h1>')
    (html / "index.html").write_text(f'<p id="here">x</p>{body}')
    return html, tree


GOOD = ('<a href="other.html#top">a</a><a href="#here">b</a><a href="kit/notebooks/ch01.ipynb">c</a>'
        '<a href="https://colab.research.google.com/github/o/r/blob/notebooks/notebooks/ch01.ipynb">d</a>'
        '<a href="https://mybinder.org/v2/gh/o/r/notebooks?urlpath=tree/notebooks">e</a>'
        '<a href="https://arxiv.org/abs/2605.07297">f</a><a href="javascript:void(0)">g</a>')


def test_the_checker_accepts_a_good_site_and_counts_its_links(tmp_path):
    counts, external, problems = check_site(*_site(tmp_path, GOOD))
    assert problems == []
    assert counts == Counter(internal=1, anchor=1, download=1, launch=2, external=1)
    assert external == ["https://arxiv.org/abs/2605.07297"]


def test_the_checker_finds_each_kind_of_broken_link(tmp_path):
    bad = {
        '<a href="missing.html">x</a>': "no file",
        '<a href="other.html#nowhere">x</a>': "has no id 'nowhere'",
        '<a href="#nowhere">x</a>': "has no id 'nowhere'",
        '<img src="_images/gone.png">': "no file",
        '<a href="kit/student-edition.zip">x</a>': "no file",
        '<a href="https://colab.research.google.com/github/o/r/blob/notebooks/book/intro.ipynb">x</a>':
            "opens book/intro.ipynb",
        '<a href="https://mybinder.org/v2/gh/o/r/notebooks?urlpath=tree/lectures">x</a>': "opens lectures",
        '<a href="kit:student-edition.zip">x</a>': "neither relative nor a web address",
        '<a href="published:book.pdf">x</a>': "neither relative nor a web address",
        '<a href="/abs/page.html">x</a>': "neither relative nor a web address",
        '<a href="../outside.html">x</a>': "leaves the site",
    }
    (tmp_path / "outside.html").write_text("outside the site")
    for snippet, message in bad.items():
        sub = tmp_path / f"s{abs(hash(snippet))}"
        sub.mkdir()
        if "outside" in snippet:
            (sub / "outside.html").write_text("outside the site")
        _, _, problems = check_site(*_site(sub, GOOD + snippet))
        assert len(problems) == 1, (snippet, problems)
        assert message in problems[0], (snippet, problems)
