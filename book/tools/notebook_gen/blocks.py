"""Block structure of MyST markdown: text, code fences, directives (nested).

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .common import MystError

__all__ = ["Code", "Directive", "Text", "iter_directives", "parse_blocks"]

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
