"""The cache of typeset pages (``book_html.typeset_page``) measures every probe on the page as loaded.

Read-only probes share one load per page and viewport; a probe that changes the page (opens dropdowns)
runs after all of them, and a second such probe gets a fresh load. A planted page with a closed
dropdown shows it: each probe reports how many dropdowns were open before it ran. The same check fails
on a weakened runner that evaluates every probe on one page in name order. Under pytest-xdist the
workers share one measurement per page and viewport, and its failure, through the run's folder.
"""
from __future__ import annotations

from book_html import Probe, Typeset, _shared, measure_typeset, needs_browser

_COUNT_OPEN = "() => document.querySelectorAll('details[open]').length"
_OPEN_ALL = """() => { const before = document.querySelectorAll('details[open]').length;
  document.querySelectorAll('details').forEach(d => { d.open = true; }); return before; }"""
PROBES = {
    "a_opens": Probe(_OPEN_ALL, changes_page=True),  # sorts before the read-only one
    "b_reads": Probe(_COUNT_OPEN),
    "c_opens": Probe(_OPEN_ALL, changes_page=True),
}
PAGE = "<html><body><article><details><summary>s</summary><p>hidden</p></details></article></body></html>"


def _page_as_loaded(results: dict) -> list[str]:
    """The probes that did not see the page as loaded (no dropdown open)."""
    return sorted(name for name, seen in results.items() if seen != 0)


def _weakened(context, url: str, probes: dict) -> dict:
    page = context.new_page()
    try:
        page.goto(url, wait_until="load")
        return {name: page.evaluate(probes[name].script) for name in sorted(probes)}
    finally:
        page.close()


@needs_browser
def test_every_probe_sees_the_page_as_loaded(browser, tmp_path):
    page = tmp_path / "dropdown.html"
    page.write_text(PAGE, encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        typeset = measure_typeset(context, page.as_uri(), PROBES)
        weakened = _weakened(context, page.as_uri(), PROBES)
    finally:
        context.close()
    assert set(typeset.results) == set(PROBES) and not typeset.errors and not typeset.external
    assert _page_as_loaded(typeset.results) == [], typeset.results
    # power: one page for all, in name order: the read-only probe and the second opener see it opened
    assert _page_as_loaded(weakened) == ["b_reads", "c_opens"], weakened


def test_workers_share_one_measurement_and_its_failure(tmp_path):
    # under pytest-xdist the first worker to ask measures; the others read its result (or its failure)
    calls = []

    def measure():
        calls.append(1)
        return Typeset({"loaded": True}, {"p": [1, 2]}, ["console: x"], [])

    expected = measure()
    calls.clear()
    first, second = (_shared(tmp_path, ("file:///a.html", "phone"), measure) for _ in range(2))
    assert first == second == expected and len(calls) == 1  # the second worker did not measure again

    def broken():
        raise TimeoutError("Page.goto: Timeout 30000ms exceeded")

    failed = _shared(tmp_path, ("file:///b.html", "phone"), broken)
    assert isinstance(failed, RuntimeError) and "TimeoutError: Page.goto" in str(failed)
    again = _shared(tmp_path, ("file:///b.html", "phone"), measure)  # the failure is shared too
    assert isinstance(again, RuntimeError) and len(calls) == 1
