"""Browser tests: a chapter's key statements read on a phone without sideways scrolling (issue #19).

At 390 px (a phone: touch, device pixel ratio 2) every display equation inside a theorem box
(``{prf:theorem}``) or a key-result box (an admonition of class ``important``) fits its box:
``scrollWidth ≤ clientWidth``, so nothing of it hides behind the scroll fade of
``book-math.js``. Its equation number stays inside the box and does not overlap the formula (on
phones it wraps above the formula, at the right, when the two do not fit one line:
``book-layout.css``). Ordinary displays elsewhere may still scroll with a visible cue
(``tests/test_browser_layout.py::test_display_equations_show_scrolling_on_phone``).

The power test plants a display wider than any phone into Chapter 5's theorem box, typeset by the
page's own MathJax, and asserts that the same check reports it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from book_html import HTML, PAGES, REFRESH, WAIT_MATHJAX, needs_browser, probe

CHAPTERS = [p for p in PAGES if p.parent.name == "notebooks"
            and not REFRESH.search(p.read_text(encoding="utf-8", errors="replace"))]
MAIN = next((p for p in CHAPTERS if p.name == "ch05_main_bound.html"), None)
KEY_BOXES = "div.proof.theorem, div.admonition.important"

# Every display of a key box, with its widths, and whether its number overlaps it or leaves the box.
_KEY_DISPLAYS = r"""sel => {
  const tex = new Map();
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.document) {
    for (const item of mj.startup.document.math) {
      if (item.display && item.typesetRoot) tex.set(item.typesetRoot, String(item.math).replace(/\s+/g, ' ').trim());
    }
  }
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1;
  const overlap = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
                          && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const out = [];
  for (const box of document.querySelectorAll(sel)) {
    const title = box.querySelector('.admonition-title');
    for (const e of box.querySelectorAll('mjx-container[display="true"]')) {
      if (!e.getClientRects().length) continue;
      const num = e.parentElement.querySelector(':scope > span.eqno');
      const nr = num && num.getBoundingClientRect(), er = e.getBoundingClientRect();
      out.push({box: (box.id || '') + ' ' + (title ? title.textContent.trim().slice(0, 60) : ''),
                scroll: e.scrollWidth, client: e.clientWidth,
                number: num ? num.textContent.replace('#', '').trim() : '',
                numberBad: !!num && (overlap(nr, er) || !inside(nr, box.getBoundingClientRect())),
                tex: (tex.get(e) || e.textContent).slice(0, 120)});
    }
  }
  return out;
}"""
KEY = probe("phone", "theorems.key_displays", _KEY_DISPLAYS, KEY_BOXES)

# A display wider than a phone, typeset by the page's MathJax and put into the first key box.
_PLANT = r"""async sel => {
  const box = document.querySelector(sel);
  const div = document.createElement('div');
  div.className = 'math notranslate nohighlight';
  const terms = Array.from({length: 14}, (_, i) => `\\sigma_{${i}}^{p}`).join(' + ');
  div.appendChild(MathJax.tex2chtml(`S_p(W) = ${terms}`, {display: true}));
  box.querySelector('section').appendChild(div);
  MathJax.startup.document.clear();
  MathJax.startup.document.updateDocument();
  return box.id;
}"""


def _ids(p: Path) -> str:
    return str(p.relative_to(HTML))


def _phone_page(browser, page_path: Path):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                              device_scale_factor=2)
    page = ctx.new_page()
    page.goto(page_path.as_uri(), wait_until="load", timeout=30_000)
    page.evaluate(WAIT_MATHJAX)
    return ctx, page


def _offenders(displays: list[dict]) -> list[str]:
    return [f"{d['box'].strip()}: {d['scroll']} px in {d['client']} px"
            + (f", number {d['number']} overlaps it or leaves the box" if d["numberBad"] else "")
            + f": {d['tex']}"
            for d in displays if d["scroll"] > d["client"] + 1 or d["numberBad"]]


@needs_browser
@pytest.mark.parametrize("page_path", CHAPTERS, ids=_ids)
def test_key_statement_displays_fit_a_phone(typeset_page, page_path):
    bad = _offenders(typeset_page(page_path, "phone").results[KEY])
    assert not bad, (f"{_ids(page_path)}: {len(bad)} display(s) of a theorem or key-result box do not fit "
                     "390 px (stack them: aligned, a line break at a sum or a relation):\n  " + "\n  ".join(bad))


@needs_browser
@pytest.mark.skipif(MAIN is None, reason="Chapter 5 is not in the build")
def test_power_a_wide_display_planted_in_the_theorem_box_is_found(browser):
    ctx, page = _phone_page(browser, MAIN)
    try:
        before = page.evaluate(_KEY_DISPLAYS, "div.proof.theorem")
        where = page.evaluate(_PLANT, "div.proof.theorem")
        page.wait_for_timeout(100)
        after = page.evaluate(_KEY_DISPLAYS, "div.proof.theorem")
    finally:
        ctx.close()
    assert where == "ch05-thm-main" and len(after) == len(before) + 1
    found = _offenders(after)
    # MathJax's text of the planted formula (it is not in the page's list of typeset TeX)
    assert any("σ13" in f or "sigma_{13}" in f for f in found), f"the planted display was not reported: {found}"
    # the theorem's own displays (5.1) and (5.2) are among those measured, with their numbers
    assert {"(5.1)", "(5.2)"} <= {d["number"] for d in before}
