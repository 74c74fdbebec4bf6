"""Browser test of the built book: every page opened from local files in headless Chromium.

Reads the HTML that the strict build wrote (``_build/html``, which ``make test`` builds from a clean
``_build`` right before pytest; override with ``BOUNDS_BOOK_HTML=/path/to/html``). Debian's
``/usr/bin/chromium`` is driven by Playwright (``executable_path``; no browser download). Every
request that is not a local file is blocked and counted as a failure, so the book must work offline.

Per page it asserts:

* no console error and no uncaught page error;
* no request left the local files (no network) and no local file failed to load;
* math: MathJax is the offline copy (``_static/mathjax``), it finished typesetting, every ``.math``
  element was rendered into an ``mjx-container``, and no formula is a TeX error (``merror``) or
  contains an undefined macro (which MathJax would print in red);
* every ``<img>`` loaded (``complete`` and ``naturalWidth > 0``).

Without a browser it checks that every internal link (``href``/``src``) resolves to an existing file
and every ``#anchor`` exists in its target page, and through the browser that the search page
returns results for words of the book.

It skips, with a printed reason, only when no book has been built or Chromium cannot be installed.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

from book_html import HTML, PAGES, REFRESH, needs_book, needs_browser, probe

# Words the search must find (the book's subject; present in several chapters).
SEARCH_WORDS = ["Schatten", "transformer"]


# --------------------------------------------------------------------------------------------
# Static checks: internal links and anchors (pure Python, no browser)
# --------------------------------------------------------------------------------------------
class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []  # (tag.attr, url)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for attr in ("href", "src"):
            url = a.get(attr)
            if url and tag in {"a", "link", "img", "script", "iframe", "source", "embed"}:
                self.refs.append((f"{tag}.{attr}", url))


_PARSED: dict[Path, _LinkParser] = {}


def _parse(path: Path) -> _LinkParser:
    if path not in _PARSED:
        parser = _LinkParser()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        _PARSED[path] = parser
    return _PARSED[path]


def _broken_links(page: Path) -> list[str]:
    problems = []
    for where, url in _parse(page).refs:
        scheme = urlsplit(url).scheme
        if scheme in {"http", "https", "mailto", "javascript", "data", "tel"} or url.startswith("//"):
            continue  # external: not followed (the test runs offline)
        target, fragment = urldefrag(url)
        target = target.split("?", 1)[0]
        if scheme == "file":
            problems.append(f"{where}={url}: absolute file:// link")
            continue
        dest = page if not target else (page.parent / unquote(target)).resolve()
        if dest.is_dir():
            dest = dest / "index.html"
        if not dest.exists():
            problems.append(f"{where}={url}: missing file {dest}")
            continue
        if HTML not in dest.parents and dest != HTML:
            problems.append(f"{where}={url}: points outside the built book")
            continue
        if fragment and dest.suffix == ".html" and unquote(fragment) not in _parse(dest).ids:
            problems.append(f"{where}={url}: no id '{unquote(fragment)}' in {dest.relative_to(HTML)}")
    return problems


@needs_book
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(HTML)))
def test_internal_links_resolve(page):
    problems = _broken_links(page)
    assert not problems, f"{page.relative_to(HTML)}:\n  " + "\n  ".join(problems)


# --------------------------------------------------------------------------------------------
# Browser checks (fixtures `browser`, `open_page`: tests/book_html.py through conftest.py)
# --------------------------------------------------------------------------------------------
_MATH_REPORT = probe("laptop", "browser.math_report", r"""() => {
  const scripts = [...document.querySelectorAll('script[src]')].map(s => s.getAttribute('src'));
  const mathjaxScripts = scripts.filter(s => /mathjax/i.test(s));
  const math = [...document.querySelectorAll('.math')];
  const unrendered = math.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80));
  const errors = [...document.querySelectorAll('mjx-merror')].map(
      e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120));
  // An undefined macro is not an merror: MathJax's `noundefined` package prints it in red.
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.document && mj.startup.toMML) {
    for (const item of mj.startup.document.math) {
      const mml = mj.startup.toMML(item.root);
      const undef = mml.match(/<mtext mathcolor="red">(\\[^<]*)<\/mtext>/);
      if (undef) errors.push(`undefined macro ${undef[1]} in ${String(item.math).slice(0, 80)}`);
      else if (/<merror/.test(mml)) errors.push(`TeX error in ${String(item.math).slice(0, 80)}`);
    }
  }
  return {mathjaxScripts, nMath: math.length, nRendered: document.querySelectorAll('mjx-container').length,
          unrendered, errors};
}""")

# the book has no lazy images: every image is loaded at the load event and setting 'eager' changes nothing
_IMAGES = probe("laptop", "browser.images_loaded", """async () => {
  const imgs = [...document.images];
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? null :
      new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); setTimeout(r, 10000); })));
  return imgs.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}));
}""")




@needs_browser
@pytest.mark.parametrize("page_path", PAGES, ids=lambda p: str(p.relative_to(HTML)))
def test_page_renders(typeset_page, page_path):
    name = page_path.relative_to(HTML)
    redirect = REFRESH.search(page_path.read_text(encoding="utf-8", errors="replace"))
    if redirect:  # e.g. index.html -> book/intro.html: the target is checked as its own page
        target = (page_path.parent / unquote(redirect.group(1).split("#")[0])).resolve()
        assert target.is_file(), f"{name} redirects to a missing page {target}"
        return
    # the page loaded and typeset, its probes evaluated and 100 ms more for late console messages
    typeset = typeset_page(page_path, "laptop")
    mj, report = typeset.mathjax, typeset.results[_MATH_REPORT]
    if report["nMath"]:
        assert mj["loaded"], f"{name}: page has math but MathJax did not load"
        assert report["mathjaxScripts"], f"{name}: page has math but no MathJax script"
        assert all("_static/mathjax/" in s for s in report["mathjaxScripts"]), (
            f"{name}: MathJax not loaded from the offline copy: {report['mathjaxScripts']}"
        )
        assert not report["unrendered"], f"{name}: math not typeset: {report['unrendered'][:5]}"
    assert not report["errors"], f"{name}: MathJax errors: {report['errors'][:10]}"

    images = typeset.results[_IMAGES]
    broken = [i["src"] for i in images if not i["ok"]]
    assert not broken, f"{name}: images not loaded: {broken}"

    assert not typeset.external, f"{name}: requests left the local files: {typeset.external[:10]}"
    assert not typeset.errors, f"{name}: " + "\n  ".join(typeset.errors[:10])


@needs_browser
@pytest.mark.parametrize("word", SEARCH_WORDS)
def test_search_returns_results(open_page, word):
    page, watch = open_page((HTML / "search.html").as_uri() + f"?q={word}")
    page.wait_for_selector("#search-results ul.search li", timeout=20_000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    assert hits, f"search for {word!r} returned nothing"
    missing = [h for h in hits if h.startswith("file:") and not Path(unquote(urlsplit(h).path)).exists()]
    assert not missing, f"search results point to missing pages: {missing}"
    assert not watch.external and not watch.errors, watch.external + watch.errors
