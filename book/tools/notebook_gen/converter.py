"""The converter: MyST roles, directives, glued values and figures into plain Jupyter Markdown.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import base64
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from .bibliography import Bibliography
from .blocks import _DOLLAR_LABEL, _HEADING, _TARGET_LINE, Code, Directive, Text, parse_blocks
from .common import MystError
from .index import ADMONITIONS, PRF_TYPES, BookIndex, Target, html_id

__all__ = ["Converter"]

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
    # {glue:text}`../notebooks/chXX.md::key` (a value glued on another page): {docname: glue records}
    other_glue: dict = field(default_factory=dict)
    # no execution at hand (a student edition made without running anything): a glued value becomes a
    # link to the online page that shows it, instead of an error
    values_online: bool = False

    # ---- links ---------------------------------------------------------------------------
    def url(self, doc: str, anchor: str = "") -> str:
        return f"{self.base_url}/{doc}.html" + (f"#{anchor}" if anchor else "")

    def link(self, text: str, target: Target) -> str:
        return f"[{text}]({self.url(target.doc, target.anchor)})"

    # ---- roles ---------------------------------------------------------------------------
    def role(self, name: str, content: str, line: int) -> str:
        err = lambda msg: MystError(self.path, line, msg)  # noqa: E731
        if name in {"glue:text", "glue", "glue:any", "glue:md"}:
            page, sep, rest = content.rpartition("::")  # path.md::key:format (a value of another page)
            key, _, fmt = rest.partition(":")
            key = f"{page}{sep}{key}"
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

    def exercise_badge(self, label: str | None) -> str:
        """What the book's exercise box shows after its number: self-check, or where the solution is."""
        from bounds_lib.teaching.exercises import SELF_CHECKS, WITHOUT_SELF_CHECK

        if label in SELF_CHECKS:
            return " *[self-check below]*" if self.edition == "student" else " *[self-check]*"
        if label in WITHOUT_SELF_CHECK:
            return " *[worked solution online]*" if self.edition == "student" else " *[worked solution below]*"
        return ""

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
            cand = posixpath.normpath(cand).removesuffix(".md")
            if (self.index.root / f"{cand}.md").is_file():
                return cand
        return None

    def _glue(self, key: str, line: int) -> dict | None:
        """The glued record ``key`` (``path.md::name`` for a value glued on another page); None when
        there is no execution to read it from and ``values_online`` says to link it instead."""
        if self.check_only:
            return {"text/plain": "0", "text/markdown": "", "image/png": ""}
        glue, doc = self.glue, self.doc
        if "::" in key:
            path, _, key = key.partition("::")
            doc = self._resolve_doc(path)
            if doc is None:
                raise MystError(self.path, line, f"glued value from {path!r}: no such page")
            glue = self.other_glue.get(doc, {})
        if key in glue:
            return glue[key]
        if self.values_online:
            return None
        raise MystError(self.path, line, f"glued value {key!r} not found in {doc}'s execution "
                                         "(is it glued in a code cell? was the book built from this source?)")

    def value_link(self, key: str) -> str:
        """A glued value that no execution provides: a link to the page that shows it."""
        path, sep, _ = key.rpartition("::")
        doc = (self._resolve_doc(path) if sep else None) or self.doc
        return f"[(value: see the book)]({self.url(doc)})"

    def glue_text(self, key: str, fmt: str, line: int) -> str:
        from myst_nb.core.variables import format_plain_text

        data = self._glue(key, line)
        if data is None:
            return self.value_link(key)
        if "text/plain" not in data:
            raise MystError(self.path, line, f"glued value {key!r} has no text/plain representation")
        try:
            return format_plain_text(data["text/plain"], fmt or "s")
        except Exception as exc:
            raise MystError(self.path, line, f"cannot format glued value {key!r} with {fmt!r}: {exc}") from None

    def glue_md(self, key: str, line: int) -> str:
        data = self._glue(key, line)
        if data is None:
            return self.value_link(key)
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
            head = f"**Exercise{number}{title}.**{self.exercise_badge(label)}"
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
            if data is None:
                return ["", f"*Figure: [see the book]({self.url(self.doc, html_id(d.options.get('name', '')))}).*", ""]
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
