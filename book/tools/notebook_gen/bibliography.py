"""Bibliography: author-year labels and a reference list (pybtex).

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

from pathlib import Path

from .common import ROOT

__all__ = ["Bibliography"]

class Bibliography:
    def __init__(self, bib: Path = ROOT / "book" / "references.bib"):
        from pybtex.database import parse_file

        self.data = parse_file(str(bib))
        self._formatted = None
        # pybtex's render_as(name) looks the renderer up through the installed packages' entry points on
        # every call (0.15 s each in a 365-package environment: 214 of the 257 s that writing the course
        # kit took, for 457 citations); the backends are looked up once here and each label made once.
        from pybtex.backends.markdown import Backend as MarkdownBackend
        from pybtex.backends.plaintext import Backend as TextBackend

        self._text, self._markdown = TextBackend(), MarkdownBackend()
        self._labels: dict[str, tuple[str, str]] = {}

    def _plain(self, text: str) -> str:
        from pybtex.richtext import Text as RichText

        try:
            return RichText.from_latex(text).render(self._text)
        except Exception:  # pragma: no cover - malformed LaTeX in a name
            return text.replace("{", "").replace("}", "")

    def label(self, key: str) -> tuple[str, str]:
        """(authors, year) as sphinxcontrib-bibtex's author_year style writes them."""
        if key not in self._labels:
            self._labels[key] = self._label(key)
        return self._labels[key]

    def _label(self, key: str) -> tuple[str, str]:
        entry = self.data.entries[key]
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [self._plain(" ".join(p.prelast_names + p.last_names)) for p in people]
        if len(last) == 1:
            who = last[0]
        elif len(last) == 2:
            who = f"{last[0]} and {last[1]}"
        elif last:
            who = f"{last[0]} et al."
        else:
            who = key
        return who, entry.fields.get("year", "n.d.")

    def entry_markdown(self, key: str) -> str:
        if self._formatted is None:
            from pybtex.plugin import find_plugin

            style = find_plugin("pybtex.style.formatting", "plain")()
            entries = style.format_entries(self.data.entries.values())
            self._formatted = {e.key: e.text.render(self._markdown) for e in entries}
        return self._formatted[key]
