"""The course kit as a reader meets it in Chromium (issue 48): exercise boxes that say how to check an
answer, and wide tables whose header row stays in view on a phone.

* Every exercise box of every chapter shows its number and a visible badge ("self-check" or "worked
  solution below"), and the Exercises section's list links each exercise to its box.
* At 390 px, every wide table with a header row scrolls inside a box no higher than the screen, and after
  scrolling that box down the header row is still at the box's top (before issue 48 it scrolled away).
  The check has power: with the stylesheet's sticky rule removed from the page, the header moves.
"""
from __future__ import annotations

import pytest

from book_html import HTML, needs_browser, probe

PHONE = 390
# chapters with exercises (an appendix page has none)
CHAPTERS = sorted(p for p in (HTML / "notebooks").glob("ch*.html") if "appendix" not in p.stem)

BOXES = probe("laptop", "course_kit.boxes", """() => [...document.querySelectorAll('.bd-article div.exercise')]
  .map(box => {
  const title = box.querySelector('.admonition-title');
  const badge = title && title.querySelector('.exercise-badge');
  const r = badge ? badge.getBoundingClientRect() : null;
  return {id: box.id, title: title ? title.textContent.trim() : '', badge: badge ? badge.textContent : null,
          visible: !!r && r.width > 0 && r.height > 0 && getComputedStyle(badge).visibility === 'visible'};
})""")

LIST_LINKS = probe("laptop", "course_kit.list_links", """() => {
  const sec = document.querySelector('section#exercises');
  const list = sec && sec.querySelector('ul');
  return list ? [...list.querySelectorAll('a')].map(a => a.getAttribute('href')) : [];
}""")

# For each wide table with a header row: scroll its box down and measure the header's offset from the
# box's top. With `strip` the header cells lose their sticky position first (the weakened page).
HEADERS = """(strip) => {
  return [...document.querySelectorAll('.bd-article .table-scrolls')].filter(el => {
    const t = el.tagName === 'TABLE' ? el : el.querySelector('table');
    return t && t.tHead && el.scrollHeight > el.clientHeight + 40;
  }).map(el => {
    const t = el.tagName === 'TABLE' ? el : el.querySelector('table');
    // the weakened page: the header cells without the stylesheet's sticky position (file:// pages cannot
    // edit their stylesheets' rules, so the cells' own style overrides them)
    if (strip) t.tHead.querySelectorAll('th').forEach(th => { th.style.position = 'static'; });
    el.scrollTop = 40;
    const head = t.tHead.rows[0].cells[1] || t.tHead.rows[0].cells[0];
    return {offset: head.getBoundingClientRect().top - el.getBoundingClientRect().top,
            boxHeight: el.clientHeight, screen: window.innerHeight};
  });
}"""


@needs_browser
@pytest.mark.parametrize("page_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_exercise_box_shows_its_number_and_badge(typeset_page, page_path):
    typeset = typeset_page(page_path, "laptop")
    boxes = typeset.results[BOXES]
    assert boxes, page_path.name
    for box in boxes:
        assert box["title"].startswith("Exercise ") and any(c.isdigit() for c in box["title"]), box
        assert box["badge"] in {"self-check", "worked solution below"} and box["visible"], box
    links = typeset.results[LIST_LINKS]
    assert sorted(links) == sorted(f"#{b['id']}" for b in boxes), (links, [b["id"] for b in boxes])
    assert not typeset.errors


WIDE = [p for p in CHAPTERS if p.stem.startswith(("ch05", "ch06", "ch07"))]


@needs_browser
@pytest.mark.parametrize("page_path", WIDE, ids=[p.stem for p in WIDE])
def test_the_header_row_of_a_wide_table_stays_in_view_on_a_phone(open_page, page_path):
    page, _ = open_page(page_path.as_uri(), width=PHONE, height=844)
    page.wait_for_timeout(300)  # book-figures.js marks wide tables on load
    tables = page.evaluate(HEADERS, False)
    for t in tables:
        assert abs(t["offset"]) <= 1, t  # stuck at the top of its box
        assert t["boxHeight"] <= t["screen"], t
    if tables:  # power: without the sticky rule the header leaves the box's top
        weakened = page.evaluate(HEADERS, True)
        assert all(t["offset"] <= -30 for t in weakened), weakened
