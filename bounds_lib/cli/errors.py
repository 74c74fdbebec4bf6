"""The program's name, its one-line errors, and how a message or file name is printed (Chapter 6)."""
from __future__ import annotations

PROG = "bounds-lib"


class _UserError(Exception):
    """A problem with the command line or the outputs the user can fix: printed as one line, exit status 1."""


def printable(text: str) -> str:
    """``text`` with the bytes of an undecodable file name (surrogate escapes) written as ``\\xNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
