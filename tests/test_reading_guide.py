"""The reading guide stays true to the book: a session for every chapter of _toc.yml, and every
runtime and the p* = 0 count it quotes glued from the chapter that computes it (issue 32)."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "book" / "reading_guide.md").read_text()


def _pages():
    """Every notebook page of _toc.yml, a chapter's sub-pages (its appendix) right after it."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [f for part in toc["parts"] for c in part["chapters"]
            for f in [c["file"], *(s["file"] for s in c.get("sections", []))] if f.startswith("notebooks/")]


def _chapters():
    """The chapters of _toc.yml; an appendix page (reference, read with its chapter) has no session."""
    return [f for f in _pages() if "appendix" not in f]


def _sessions():
    # "## Session k — ..." up to the next level-2 heading
    return re.findall(r"^## Session \d+ .*?(?=^## |\Z)", GUIDE, flags=re.M | re.S)


def test_a_session_for_every_chapter():
    chapters = _chapters()
    sessions = _sessions()
    assert len(sessions) == len(chapters)
    for ch, text in zip(chapters, sessions):
        label = Path(ch).name
        assert f"{{ref}}`{label}`" in text, f"no session for {label}"


def test_every_appendix_is_named_in_its_chapters_session():
    appendices = [f for f in _pages() if "appendix" in f]
    assert appendices == ["notebooks/ch09_appendix"]
    for ap in appendices:
        chapter = next(c for c in _chapters() if Path(c).name[:4] == Path(ap).name[:4])
        text = _sessions()[_chapters().index(chapter)]
        assert f"<{Path(ap).name}>`" in text or f"{{ref}}`{Path(ap).name}`" in text, ap


def test_every_runtime_is_glued_from_its_chapter():
    for ch, text in zip(_chapters(), _sessions()):
        time_line = re.search(r"^\*Time\.\*.*$", text, flags=re.M).group(0)
        # the run time comes from the chapter's own page_seconds glue, never typed
        assert re.search(
            rf"\{{glue:text\}}`\.\./{re.escape(ch)}\.md::ch\d_page_seconds", time_line
        ), time_line
        # and no other execution time typed beside it (reading and session times are plans, in min)
        untyped = re.sub(r"\{glue:text\}`[^`]*`", "", time_line)
        assert not re.search(r"\d+\s*(?:s|seconds|minutes)\b", untyped), time_line


def test_quoted_counts_are_glued():
    # the share of p* = 0 matrices is a count from Chapter 6, not "most"
    assert "Most matrices pick" not in GUIDE
    assert "ch06_bert.md::ch6_n_p0" in GUIDE



def test_every_glue_from_another_page_names_its_format():
    """myst-nb splits ``{glue:text}`path::key``` at its last colon before the path, so a glue from another
    page without a format (``:s``, ``:.0f``) looks up the key ``path:`` and warns (the strict build fails)."""
    roles = re.findall(r"\{glue:text\}`([^`]*)`", GUIDE)
    assert roles
    cross = [r for r in roles if "::" in r]
    bad = [r for r in cross if ":" not in r.split("::", 1)[1]]
    assert not bad, bad
