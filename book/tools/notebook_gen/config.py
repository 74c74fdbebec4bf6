"""Book configuration: repository, online pages, macros, chapter numbers.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .common import ROOT

__all__ = ["git_commit", "macros_of", "mathjax_macros", "newcommands", "pages_url", "repository",
           "toc_chapters"]

_YAML: dict[tuple, dict] = {}


def _yaml(path: Path) -> dict:
    """The parsed YAML file, read again only when it changed (every notebook of the course kit asks
    ``_config.yml`` for the repository and the macros: 9 of the 33 s it took under a profiler)."""
    import copy

    import yaml

    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _YAML:
        _YAML[key] = yaml.safe_load(path.read_text()) or {}
    return copy.deepcopy(_YAML[key])


def repository(config: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """(url, branch) of the repository: ``repository.url`` and ``branch`` of ``_config.yml``.

    The one place the address is written (the launch buttons, the install cells and the links to the
    online book all come from it); a fork sets its own there. A configuration without it is refused.
    """
    repo = _yaml(config).get("repository", {}) or {}
    url = str(repo.get("url") or "").rstrip("/")
    if not url:
        raise ValueError(f"{config}: set repository.url (the address of the book's repository on GitHub)")
    return url, str(repo.get("branch") or "main")


def pages_url(repo_url: str) -> str:
    """GitHub Pages address of a ``https://github.com/OWNER/NAME`` repository."""
    m = re.match(r"https?://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", repo_url)
    if not m:
        return repo_url.rstrip("/")
    owner, name = m.groups()
    if name.lower() == f"{owner.lower()}.github.io":
        return f"https://{owner.lower()}.github.io"
    return f"https://{owner.lower()}.github.io/{name}"


def macros_of(mathjax3_config) -> dict:
    """The TeX macros of a ``mathjax3_config`` mapping (``tex.macros``; ``{}`` when there are none)."""
    return ((mathjax3_config or {}).get("tex") or {}).get("macros") or {}


def mathjax_macros(config: Path = ROOT / "_config.yml") -> dict:
    """The book's TeX macros (``sphinx.config.mathjax3_config.tex.macros`` of ``_config.yml``)."""
    try:
        return macros_of(_yaml(config)["sphinx"]["config"]["mathjax3_config"])
    except (OSError, ImportError, KeyError, TypeError, AttributeError):
        return {}


def newcommands(macros: dict, *, latex: bool = False) -> str:
    """The book's macros as TeX definitions — the one renderer (notebooks' macros cell, PDF preamble).

    ``macros`` maps a name to its body, or to ``[body, number of arguments]`` (MathJax's form).
    MathJax (``latex=False``): ``\\newcommand{\\name}[n]{body}``, concatenated. LaTeX (``latex=True``,
    ``book_reader``'s PDF preamble): ``\\providecommand{\\name}{}\\renewcommand{\\name}[n]{{body}}``, one
    per line; the body is one group there (MathJax accepts ``L_\\cL``, LaTeX needs ``L_{\\cL}``),
    except ``\\operatorname`` bodies, which keep their operator spacing.
    """
    defs = []
    for name, body in macros.items():
        nargs, body = (body[1], body[0]) if isinstance(body, (list, tuple)) else (0, body)
        args = f"[{nargs}]" if nargs else ""
        if not latex:
            defs.append(f"\\newcommand{{\\{name}}}{args}{{{body}}}")
            continue
        if not body.startswith("\\operatorname"):
            body = "{" + body + "}"
        defs.append(f"\\providecommand{{\\{name}}}{{}}\\renewcommand{{\\{name}}}{args}{{{body}}}")
    return ("\n" if latex else "").join(defs)


def toc_chapters(root: Path = ROOT) -> dict[str, int]:
    """``{docname: chapter number}`` of the numbered chapters of ``_toc.yml`` (numbering runs on
    across numbered parts, as in the book)."""
    toc = _yaml(root / "_toc.yml")
    numbers, n = {}, 0
    for part in toc.get("parts", []):
        if not part.get("numbered"):
            continue
        for ch in part.get("chapters", []):
            n += 1
            numbers[ch["file"]] = n
    return numbers


def git_commit(root: Path = ROOT) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
