"""No inline formula cut on a phone (issue #19): at 390 px every inline formula fits its line.

MathJax 3 does not break a formula across lines, so an inline formula wider than its text column
runs past the column's edge and the page cuts it. On every content page of the build (``_build/html``,
or ``BOUNDS_BOOK_HTML``), opened on a 390 px touch screen with every dropdown opened, each visible
inline ``mjx-container`` must lie inside the content box of its column, inside every ancestor that
clips, and on the screen unless a wide table around it scrolls. The measurement is
``book/tools/phone_math_report.py``'s (which prints the offenders of a whole build); the power test
plants formulas that are too long, clipped, and safely inside a scrolling table in a tiny page.
"""
from __future__ import annotations

import pytest

import phone_math_report as pmr  # book/tools is on sys.path: conftest.py
from book_html import HTML, PAGES, REFRESH, WAIT_MATHJAX, needs_browser, probe

CONTENT = [p for p in PAGES if not REFRESH.search(p.read_text(encoding="utf-8", errors="replace"))
           and p.name not in pmr.SKIP_NAMES]


# it opens the dropdowns: measured after the read-only probes of the phone viewport
INLINE = probe("phone", "math.inline_formulas", pmr.MEASURE, changes_page=True)


def _ids(p) -> str:
    return str(p.relative_to(HTML))


@needs_browser
@pytest.mark.parametrize("page_path", CONTENT, ids=_ids)
def test_inline_formulas_fit_a_phone_line(typeset_page, page_path):
    res = typeset_page(page_path, "phone").results[INLINE]  # pmr.measure's context and script
    bad = res["offenders"]
    assert not bad, (f"{_ids(page_path)}: {len(bad)} of {res['total']} inline formulas do not fit at 390 px "
                     "(rewrite or split them; `python book/tools/phone_math_report.py` lists them all):\n  "
                     + "\n  ".join(f"[{o['section']}] {o['why']}: {o['tex']}" for o in bad))


LONG = (r"\sum_{i=1}^{n} x_i^2 + \sum_{j=1}^{m} y_j^2 + \sum_{k=1}^{q} z_k^2 + \int_0^1 f(t)\,dt"
        r" + \int_0^1 g(t)\,dt + \int_0^1 h(t)\,dt")
CLIPPED = r"x_1 + x_2 + x_3 + x_4 + x_5 + x_6"
ROW = r"b_1 + b_2 + b_3 + b_4 + b_5 + b_6 + b_7 + b_8 + b_9"
_PLANTED = rf"""<!DOCTYPE html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<script>window.MathJax = {{tex: {{inlineMath: [['$', '$']]}}}};</script>
<script defer src="MATHJAX"></script></head>
<body style="margin: 0 24px"><article class="bd-article"><section><h2>Planted</h2>
<p>A short formula $a + b$ fits.</p>
<p>Too long: ${LONG}$ and the end.</p>
<div style="overflow: hidden; width: 120px"><div style="width: 400px">${CLIPPED}$</div></div>
<div style="overflow-x: auto"><table><tr><td style="white-space: nowrap">$a_1 + a_2$</td>
  <td style="white-space: nowrap">${ROW}$</td><td style="white-space: nowrap">${ROW}$</td></tr></table></div>
<p>$${LONG}$$</p>
</section></article></body></html>"""


@needs_browser
def test_detector_reports_a_planted_long_formula(typeset_page, tmp_path):
    mathjax = HTML / "_static" / "mathjax" / "tex-chtml.js"
    if not mathjax.is_file():
        pytest.skip(f"the build has no offline MathJax at {mathjax}")
    page = tmp_path / "planted.html"
    page.write_text(_PLANTED.replace("MATHJAX", mathjax.as_uri()), encoding="utf-8")
    res = typeset_page(page, "phone").results[INLINE]
    assert res["mathjax"] and res["total"] == 6, res  # 6 inline formulas; the display is not counted
    found = {o["tex"]: o["why"] for o in res["offenders"]}
    # reported: the long one runs past its paragraph; the other fits its 400 px block, which a 120 px
    # box clips. Not reported: the short one, and the two in a table that scrolls sideways.
    assert set(found) == {LONG, CLIPPED}, found
    assert "column" in found[LONG] and found[CLIPPED].startswith("cut by <div"), found
    assert all(o["section"] == "Planted" for o in res["offenders"])


# Typeset while the text is in Liberation Sans (x-height 0.528 em), then shown in DejaVu Sans (0.547 em):
# MathJax's scale is then stale, as when a loaded browser answered its measurement with rounded metrics.
_STALE = r"""<!DOCTYPE html><html><head><meta charset="utf-8">
<style>p { font: 16px "Liberation Sans"; } p.later { font-family: "DejaVu Sans"; }</style>
<script>window.MathJax = {tex: {inlineMath: [['$', '$']]}};</script>
<script defer src="MATHJAX"></script></head>
<body><article class="bd-article"><p>Inline $a^2 + b^2 = c^2$ and $\sum_i x_i$, then
$$\int_0^1 f(t)\,dt \le \max_t f(t)$$</p></article></body></html>"""
_SCALES = r"""() => [...document.querySelectorAll('mjx-container')].map(e => {
  const fresh = MathJax.getMetricsFor(e.parentElement, e.getAttribute('display') === 'true').scale;
  return [parseFloat(e.style.fontSize) / 100, fresh, e.textContent.length];
})"""


@needs_browser
def test_a_stale_mathjax_scale_is_measured_again(open_page, tmp_path):
    """WAIT_MATHJAX (and so every probe, and phone_math_report's MEASURE) typesets again where MathJax's
    scale no longer matches the text's x-height, and leaves a page whose scale is right alone."""
    mathjax = HTML / "_static" / "mathjax" / "tex-chtml.js"
    if not mathjax.is_file():
        pytest.skip(f"the build has no offline MathJax at {mathjax}")
    page_file = tmp_path / "stale.html"
    page_file.write_text(_STALE.replace("MATHJAX", mathjax.as_uri()), encoding="utf-8")
    page, _ = open_page(page_file.as_uri(), width=390, height=844)
    assert page.evaluate(WAIT_MATHJAX) == {"loaded": True, "rescaled": 0}  # right from the start: untouched
    before = page.evaluate(_SCALES)
    assert len(before) == 3 and all(abs(have - fresh) < 0.0015 for have, fresh, _ in before), before
    page.evaluate("() => document.querySelector('p').classList.add('later')")
    stale = page.evaluate(_SCALES)
    # the plant makes the condition: the fresh scale is larger than the one typeset (by 6.5 % in this
    # context), by far more than MathJax's own rounding to 0.1 %
    assert all(fresh / have > 1.02 for have, fresh, _ in stale), stale
    done = page.evaluate(WAIT_MATHJAX)
    assert done == {"loaded": True, "rescaled": 2}, done  # the inline and the display kind of text
    after = page.evaluate(_SCALES)
    assert [n for *_, n in after] == [n for *_, n in before]  # the same formulas, typeset once each
    assert all(abs(have - fresh) < 0.0015 for have, fresh, _ in after), after
