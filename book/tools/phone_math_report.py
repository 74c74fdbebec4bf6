"""Inline formulas that do not fit a phone's line: every page's offenders at 390 px (issue #19).

    python book/tools/phone_math_report.py [--html _build/html] [--width 390] [PAGE ...]

PAGE is a path relative to the HTML folder (default: every content page). For each page it prints the
inline MathJax formulas (``mjx-container`` without ``display="true"``) whose box reaches past the
content box of their text column (the nearest block around them: a paragraph, a list item, a table
cell), or that an ancestor with ``overflow: hidden``/``clip`` cuts, with the section they are in, how
wide they are against the column, and their TeX. MathJax 3 does not break a formula across lines, so
such a formula is cut on the phone. Closed ``<details>`` (dropdowns) are opened first, so that
formulas in hidden solutions are measured too. Exit status 1 when there is an offender.

``tests/test_browser_math.py`` runs the same measurement (:data:`MEASURE`) on every page of the build.
Uses Debian's ``/usr/bin/chromium`` through Playwright, offline, like the browser tests.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}
NOT_PAGES = {"_static", "_sources", "_images", "_downloads", "_panels_static"}
SKIP_NAMES = {"genindex.html", "search.html", "py-modindex.html"}
# A page that only redirects (index.html -> book/intro.html).
REFRESH = re.compile(r'<meta[^>]+http-equiv="refresh"[^>]+content="\d+;\s*url=([^"]+)"', re.I)

# MathJax measures the x-height of the text around the formulas once, when it typesets, and scales every
# formula to it. In an emulated phone (2 device pixels per CSS pixel) a headless Chromium under load can
# answer that measurement as at 1 device pixel, where it rounds the x-height to whole pixels: DejaVu Sans
# at 16 px gives 9 px instead of 8.75, and every formula of that page comes out 2.9 % wider (scale
# 127.3 % instead of 123.7 %). That failed the phone check of Chapter 3 in one CI run, and hit up to
# 14 % of the loads of Chapters 3 and 5 here with more busy processes than cores. This asks MathJax to
# measure again, once per kind of surrounding text; where the answer differs from the scale its formulas
# carry (by more than its own rounding to 0.1 %), it typesets the page's formulas again from their
# compiled form, measured anew, and lets book-math.js mark the wide displays again (it does on resize).
# Returns how many kinds of text were stale.
RESCALE = r"""async () => {
  const mj = window.MathJax;
  if (!mj || !mj.getMetricsFor || !mj._ || !mj.startup || !mj.startup.document || !mj.startup.output) return 0;
  const factor = mj.startup.output.options.scale || 1;
  const seen = new Set();
  let stale = 0;
  for (const e of document.querySelectorAll('mjx-container[jax="CHTML"]')) {
    const p = e.parentElement, s = p && getComputedStyle(p);
    if (!s) continue;
    const display = e.getAttribute('display') === 'true';
    const key = [s.fontFamily, s.fontSize, s.fontWeight, s.fontStyle, display].join('|');
    if (seen.has(key)) continue;
    seen.add(key);
    const want = mj.getMetricsFor(p, display).scale * factor;
    const have = e.style.fontSize ? parseFloat(e.style.fontSize) / 100 : 1;
    if (Math.abs(want - have) > 0.0015) stale++;
  }
  if (stale) {
    mj.startup.document.state(mj._.core.MathItem.STATE.CONVERT);
    mj.startup.document.render();
    window.dispatchEvent(new Event('resize'));
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  }
  return stale;
}"""

# Opens every <details>, waits for MathJax (measured anew where its scale is stale: RESCALE), then
# measures every visible inline formula of the article.
# A formula is an offender when its box reaches more than 1 px past the content box of its column (the
# nearest ancestor that is not inline), past the box of an ancestor that clips (overflow hidden or
# clip), or past the edge of the screen — unless an ancestor scrolls sideways (overflow auto/scroll and
# wider than its box: a wide table), which lets the reader reach it.
MEASURE = r"""async () => {
  document.querySelectorAll('.bd-article details:not([open])').forEach(d => { d.open = true; });
  const mj = window.MathJax;
  if (!mj) return {mathjax: false, total: 0, offenders: []};
  if (mj.startup && mj.startup.promise) { await mj.startup.promise; }
  if (mj.typesetPromise) { await mj.typesetPromise(); }
  // the web fonts too: a formula measured before its font is in can be wider or narrower
  if (document.fonts && document.fonts.ready) { await document.fonts.ready; }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  await (""" + RESCALE + r""")();
  const tex = new Map();
  if (mj.startup && mj.startup.document) {
    for (const item of mj.startup.document.math) {
      if (!item.display && item.typesetRoot) tex.set(item.typesetRoot, String(item.math).replace(/\s+/g, ' ').trim());
    }
  }
  const px = v => parseFloat(v) || 0;
  const content = el => {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return {left: r.left + px(s.borderLeftWidth) + px(s.paddingLeft),
            right: r.right - px(s.borderRightWidth) - px(s.paddingRight)};
  };
  const all = [...document.querySelectorAll('.bd-article mjx-container:not([display="true"])')]
      .filter(e => e.getClientRects().length);
  const offenders = [];
  for (const e of all) {
    const r = e.getBoundingClientRect();
    let col = e.parentElement;
    while (col && getComputedStyle(col).display.startsWith('inline')) col = col.parentElement;
    const c = content(col);
    let why = null;
    if (r.right > c.right + 1 || r.left < c.left - 1) {
      why = `${Math.round(r.width)} px in a ${Math.round(c.right - c.left)} px column`;
    }
    let scrolls = false;
    for (let a = e.parentElement; a && !why && a !== document.documentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && a.scrollWidth > a.clientWidth + 1) scrolls = true;
      if (ox === 'hidden' || ox === 'clip') {
        const b = a.getBoundingClientRect();
        if (r.right > b.right + 1 || r.left < b.left - 1) {
          why = `cut by <${a.tagName.toLowerCase()} class="${a.className}"> (overflow-x: ${ox})`;
        }
      }
    }
    if (!why && !scrolls && r.right > document.documentElement.clientWidth + 1) why = 'past the edge of the screen';
    if (!why) continue;
    let h = null;
    for (let s = e.closest('section'); s && !h; s = s.parentElement && s.parentElement.closest('section')) {
      h = s.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
    }
    offenders.push({why, width: Math.round(r.width),
                    section: h ? h.textContent.replace(/#$/, '').trim().slice(0, 80) : '',
                    tex: (tex.get(e) || e.textContent).slice(0, 200)});
  }
  return {mathjax: true, total: all.length, offenders};
}"""


def content_pages(html: Path) -> list[Path]:
    """The pages of a build that carry content (no redirects, no generated indices)."""
    out = []
    for p in sorted(html.rglob("*.html")):
        rel = p.relative_to(html)
        if set(rel.parts[:-1]) & NOT_PAGES or p.name in SKIP_NAMES:
            continue
        if REFRESH.search(p.read_text(encoding="utf-8", errors="replace")):
            continue
        out.append(p)
    return out


def measure(browser, page_path: Path, width: int = PHONE["width"]) -> dict:
    """:data:`MEASURE` on ``page_path`` in a fresh phone context (touch, 2× pixels), offline."""
    ctx = browser.new_context(viewport={"width": width, "height": PHONE["height"]}, is_mobile=True,
                              has_touch=True, device_scale_factor=2)
    ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:")) else r.abort())
    try:
        page = ctx.new_page()
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        return page.evaluate(MEASURE)
    finally:
        ctx.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--width", type=int, default=PHONE["width"], help="viewport width in CSS px (390)")
    ap.add_argument("pages", nargs="*", help="pages relative to --html (default: every content page)")
    a = ap.parse_args(argv)
    if not (a.html / "index.html").is_file():
        print(f"phone_math_report: no built book at {a.html} (no index.html)", file=sys.stderr)
        return 2
    pages = [a.html / p for p in a.pages] if a.pages else content_pages(a.html)
    missing = [str(p) for p in pages if not p.is_file()]
    if missing:
        print(f"phone_math_report: no such page: {', '.join(missing)}", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    n_bad = n_all = 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        try:
            for p in pages:
                res = measure(browser, p, a.width)
                n_all += res["total"]
                n_bad += len(res["offenders"])
                rel = p.relative_to(a.html)
                print(f"{rel}: {len(res['offenders'])} of {res['total']} inline formulas do not fit at {a.width} px")
                for o in res["offenders"]:
                    print(f"  [{o['section']}] {o['why']}: {o['tex']}")
        finally:
            browser.close()
    print(f"total: {n_bad} of {n_all} inline formulas on {len(pages)} pages do not fit at {a.width} px")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
