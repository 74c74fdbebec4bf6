"""Browser tests of how far a reader scrolls, on the built book (``_build/html``), at 1280 × 800:

* Chapter 9's main page is one sitting: at most 15 laptop screens, at most 60 printed intervals, and a
  stated reading time of at most 30 minutes that covers its words at 200 words a minute;
* every chapter's key result (its ``important`` box) and first figure start within its first 3 screens;
* the measurements are printed (``-s``), so a run reports the screens of every chapter and of the appendix.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from book_html import HTML, PAGES, needs_browser, probe

WIDTH, HEIGHT = 1280, 800
MAX_SCREENS_MAIN = 15
MAX_INTERVALS_MAIN = 60
MAX_READING_MIN = 30
WORDS_PER_MINUTE = 200
FIRST_SCREENS = 3
# chapters, not their appendix pages (reference, read after the chapter: measured, not held to the budget)
CHAPTERS = [p for p in PAGES if p.parent.name == "notebooks" and re.match(r"ch\d\d_", p.name)
            and "appendix" not in p.name]
MAIN = HTML / "notebooks" / "ch09_robust_study.html"
APPENDIX = HTML / "notebooks" / "ch09_appendix.html"
# a printed interval: "+0.05 [−0.04, +0.25]" (minus signs as U+2212 or '-')
INTERVAL = re.compile(r"\[\s*[+\-−]?\d*\.?\d+\s*,\s*[+\-−]?\d*\.?\d+\s*\]")
READING = re.compile(r"Reading:?\s*(?:about\s*)?(\d+)\s*min", re.I)

# What the page measures, in CSS px from the top of the document: its height, where the first figure
# and the first "important" box start, and the article's text.
_MEASURE = probe("screen800", "screens.measure", """() => {
  const art = document.querySelector('article') || document.body;
  const top = el => el ? el.getBoundingClientRect().top + window.scrollY : null;
  const fig = art.querySelector('figure, img');
  const key = art.querySelector('.admonition.important, .important');
  return {height: document.documentElement.scrollHeight, figure: top(fig), key: top(key),
          text: art.innerText};
}""")


def measure(typeset_page, path: Path) -> dict:
    """Screens (page height / 800), where the first figure and key result start (in screens), the
    printed intervals and the words of the article, at 1280 × 800, once MathJax has typeset the page."""
    m = typeset_page(path, "screen800").results[_MEASURE]
    scr = lambda px: None if px is None else px / HEIGHT  # noqa: E731
    reading = READING.search(m["text"])
    return {"screens": m["height"] / HEIGHT, "figure": scr(m["figure"]), "key": scr(m["key"]),
            "intervals": len(INTERVAL.findall(m["text"])), "words": len(m["text"].split()),
            "reading_min": int(reading.group(1)) if reading else None}


def _ids(p: Path) -> str:
    return p.name


def _one_sitting(m: dict) -> list[str]:
    bad = []
    if m["screens"] > MAX_SCREENS_MAIN:
        bad.append(f"{m['screens']:.1f} screens > {MAX_SCREENS_MAIN}")
    if m["intervals"] > MAX_INTERVALS_MAIN:
        bad.append(f"{m['intervals']} printed intervals > {MAX_INTERVALS_MAIN}")
    if m["reading_min"] is None or m["reading_min"] > MAX_READING_MIN:
        bad.append(f"reading time {m['reading_min']} min not stated or > {MAX_READING_MIN}")
    elif m["words"] / WORDS_PER_MINUTE > m["reading_min"]:
        bad.append(f"{m['words']} words need more than the stated {m['reading_min']} min")
    return bad


@needs_browser
def test_chapter_9_main_page_is_one_sitting(typeset_page):
    m = measure(typeset_page, MAIN)
    app = measure(typeset_page, APPENDIX)
    print(f"\nch09 main: {m['screens']:.1f} screens, {m['intervals']} intervals, {m['words']} words, reading "
          f"{m['reading_min']} min; appendix: {app['screens']:.1f} screens, {app['intervals']} intervals")
    assert not _one_sitting(m), _one_sitting(m)


@needs_browser
@pytest.mark.parametrize("path", CHAPTERS, ids=_ids)
def test_key_result_and_first_figure_within_three_screens(typeset_page, path):
    m = measure(typeset_page, path)
    print(f"\n{path.name}: {m['screens']:.1f} screens; first figure at {m['figure']}, key result at {m['key']}")
    late = {k: m[k] for k in ("figure", "key") if m[k] is not None and m[k] > FIRST_SCREENS}
    assert not late, f"{path.name}: starts beyond screen {FIRST_SCREENS}: {late}"


@needs_browser
def test_the_measures_have_power(typeset_page, tmp_path):
    filler = "<p>" + "word " * 60 + "</p>"
    late = tmp_path / "late.html"
    late.write_text("<html><body><article>" + filler * 80 + '<div class="admonition important">Key</div>'
                    '<figure><img alt="a figure of the planted page" src="x.png" width="10" height="10">'
                    "</figure>" + filler * 400 + "</article></body></html>")
    m = measure(typeset_page, late)
    assert m["key"] > FIRST_SCREENS and m["figure"] > FIRST_SCREENS
    bad = _one_sitting(m)
    assert any("screens" in b for b in bad) and any("reading time" in b for b in bad)
    dense = tmp_path / "dense.html"
    dense.write_text("<html><body><article><p>Reading: about 1 min.</p>" + "<p>+0.05 [−0.04, +0.25]</p>" * 61
                     + "</article></body></html>")
    m = measure(typeset_page, dense)
    assert m["intervals"] == 61 and m["reading_min"] == 1
    assert any("intervals" in b for b in _one_sitting(m))
