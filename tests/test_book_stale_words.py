"""The built book (``_build/html``) carries no tracker words and no stale text: no page's article (the text
the page itself writes: not the theme's header, whose repository buttons may name the issue tracker) says
"issue", "TODO" or "planned, not yet run" (a study that has run), in any case."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from book_html import HTML, PAGES, needs_book

STALE = re.compile(r"\bissues?\b|\bTODO\b|planned, not yet run", re.I)
#: The one use of the word the book means for readers: the repository's issues as its discussion venue
#: (the front page sends questions and errata there, through the theme's button).
VENUE = re.compile(r"repository[’']s issues \(the button")
_HIDDEN = {"script", "style", "noscript", "template"}


class _Text(HTMLParser):
    """The text a reader sees in the article: inside <article>, outside <script>, <style> and the like."""

    def __init__(self):
        super().__init__()
        self.skip, self.article, self.parts = 0, 0, []

    def handle_starttag(self, tag, attrs):
        self.skip += tag in _HIDDEN
        self.article += tag == "article"

    def handle_endtag(self, tag):
        self.skip -= tag in _HIDDEN and self.skip > 0
        self.article -= tag == "article" and self.article > 0

    def handle_data(self, data):
        if self.article and not self.skip:
            self.parts.append(data)


def stale_words(page: Path) -> list[str]:
    """Every stale or tracker word of ``page``'s visible text, with 40 characters of context."""
    p = _Text()
    p.feed(page.read_text(encoding="utf-8", errors="replace"))
    text = VENUE.sub("", " ".join(" ".join(p.parts).split()))
    return [text[max(0, m.start() - 40):m.end() + 40] for m in STALE.finditer(text)]


@needs_book
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(HTML)))
def test_no_stale_or_tracker_words(page):
    found = stale_words(page)
    assert not found, f"{page.relative_to(HTML)}: {found[:5]}"


def test_the_detector_has_power(tmp_path):
    page = tmp_path / "p.html"
    page.write_text("<html><script>var issue = 1; // TODO</script><body><header>Open an issue</header><article>"
                    "<p>As the Issue's §2.2 asks.</p><p>A replication, planned, not yet run.</p>"
                    "<p>The amendment gives no verdict.</p><p>todo: fix</p>"
                    "<p>Tissues and reissued are other words.</p><p>Errata go to the repository’s issues (the "
                    "button at the top).</p><p>See the repository's issues for this.</p></article></body></html>")
    found = stale_words(page)
    assert len(found) == 4 and "Issue's" in found[0] and "planned" in found[1] and "todo" in found[2]
    assert "for this" in found[3]  # the venue's phrase only with its button, not any mention
