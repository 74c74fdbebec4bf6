"""Raw-MyST detector (what must never reach a generated notebook).

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import re

from .blocks import _FENCE

__all__ = ["RAW_MYST", "notebook_raw_myst", "raw_myst_tokens"]

RAW_MYST = {
    "role": re.compile(r"\{[A-Za-z][\w:.+-]*\}\x00"),
    "directive": re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})\{[A-Za-z][\w:.+-]*\}", re.M),
    "target": re.compile(r"^\([^()\s]+\)=\s*$", re.M),
    "equation-label": re.compile(r"\$\$\s*\([^()\s]+\)\s*$", re.M),
    "option": re.compile(r"^:(?:label|name|class|nonumber|tags|format|figwidth|width|align):", re.M),
}


def _prose(text: str) -> str:
    """Markdown without its plain code fences, inline code spans replaced by a NUL marker."""
    out, fence, directives = [], None, []
    for ln in text.split("\n"):
        m = _FENCE.match(ln)
        closes = lambda f: m and m["fence"][0] == f[0] and len(m["fence"]) >= len(f) and not m["info"].strip()  # noqa: E731
        if fence:
            if closes(fence):
                fence = None
            continue
        if m and directives and closes(directives[-1]):
            directives.pop()
        elif m and m["info"].strip().startswith("{"):
            directives.append(m["fence"])
        elif m and m["fence"][0] != ":":
            fence = m["fence"]
            continue
        out.append(ln)
    # Code spans (a role's content looks like one) become NUL; fence lines are not code spans.
    segments, seg = [], []
    for ln in out:
        if _FENCE.match(ln):
            segments += [re.sub(r"(`+)(?!`).*?[^`]\1(?!`)", "\x00", "\n".join(seg), flags=re.S), ln]
            seg = []
        else:
            seg.append(ln)
    segments.append(re.sub(r"(`+)(?!`).*?[^`]\1(?!`)", "\x00", "\n".join(seg), flags=re.S))
    return "\n".join(segments)


def raw_myst_tokens(text: str) -> dict[str, int]:
    """Count raw MyST constructs in markdown prose (roles, directives, targets, labels, options);
    code fences and code spans are not prose."""
    prose = _prose(text)
    return {k: len(rx.findall(prose)) for k, rx in RAW_MYST.items()}


def notebook_raw_myst(nb) -> int:
    return sum(sum(raw_myst_tokens(c.source).values()) for c in nb.cells if c.cell_type == "markdown")
