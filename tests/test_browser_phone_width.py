"""No page is wider than a 390 px phone (issue 32): long inline code (``bounds_lib.theory.propagation.
multihead_composition_bound()`` as a link) made Chapters 1 and 3 and the API page 413 / 472 / 687 px
wide. ``book/_static/reader.css`` lets inline code break anywhere; wide display formulas and tables
scroll inside their own box (tested in test_browser_layout.py), so the page itself never scrolls
sideways.
"""
from __future__ import annotations

import pytest

from book_html import HTML, PAGES, REFRESH, needs_browser, probe

PHONE = 390
CONTENT_PAGES = [p for p in PAGES if not REFRESH.search(p.read_text(encoding="utf-8", errors="replace"))
                 and p.name not in {"genindex.html", "search.html", "py-modindex.html"}]

# the page's width, and the elements that stick out of the viewport (not those inside a scrolling box)
_WIDEST = probe("window390", "phone_width.widest", """(w) => {
  const inScroller = e => { for (let a = e.parentElement; a; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return true; }
    return false; };
  const out = [...document.querySelectorAll('.bd-article *')].filter(e => {
      const r = e.getBoundingClientRect(); return r.width > 0 && r.right > w + 1 && !inScroller(e); })
    .filter(e => ![...e.children].some(c => c.getBoundingClientRect().right > w + 1))
    .slice(0, 5).map(e => `<${e.tagName.toLowerCase()} class="${e.className}">`
      + e.textContent.trim().slice(0, 60) + ` (right edge ${Math.round(e.getBoundingClientRect().right)} px)`);
  return {width: document.documentElement.scrollWidth, out};
}""", PHONE)


@needs_browser
@pytest.mark.parametrize("page_path", CONTENT_PAGES, ids=lambda p: str(p.relative_to(HTML)))
def test_no_page_is_wider_than_a_phone(typeset_page, page_path):
    found = typeset_page(page_path, "window390").results[_WIDEST]  # a 390 x 844 window
    assert found["width"] <= PHONE, (f"{page_path.relative_to(HTML)} is {found['width']} px wide at {PHONE} px:\n  "
                                     + "\n  ".join(found["out"]))
