"""Facts about the installation a report records — versions and the platform — looked up cheaply.

A report of ``bounds-lib analyze`` names the platform and the versions it ran with. The standard library's
ways cost more than the rest of a small run's bookkeeping: ``importlib.metadata`` imports the e-mail
parser it reads package metadata with (25–37 ms), and ``platform.platform()`` runs ``uname -p`` in a
subprocess (10–26 ms, a fork of a process that holds NumPy) for a field that Linux leaves out. The two
functions here give the same answers from what is already on disk or in the kernel (a few tenths of a
millisecond), and fall back to the standard library wherever they could differ from it.
"""
from __future__ import annotations

import importlib.machinery
import os
import platform
import re
import sys

_SEPARATORS = re.compile(r"[-_.]+")


def _normalized(name: str) -> str:
    """A distribution name as ``importlib.metadata`` compares them (``Jupyter-Book`` → ``jupyter_book``)."""
    return _SEPARATORS.sub("_", name).lower()


def _header_version(path: str) -> str | None:
    """The ``Version:`` field of a core-metadata file's header, ``None`` when the file or the field is missing."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():  # the header ends at the first blank line
                    return None
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _searches_the_path(finder) -> bool:
    """The standard library's finder of distributions on ``sys.path``, or the ``importlib_metadata``
    backport's: importing the backport (Jupyter's and Sphinx's stacks do) takes that search away from the
    standard library's ``PathFinder`` and installs its own ``MetadataPathFinder``, the same search."""
    if finder is importlib.machinery.PathFinder:
        return True
    return (type(finder).__module__, type(finder).__qualname__) == ("importlib_metadata", "MetadataPathFinder")


def _from_folders(name: str, path: list[str]) -> tuple[bool, str | None]:
    """``(decided, version)`` by ``importlib.metadata``'s rule — the first entry of ``path`` with a
    ``<name>-….dist-info`` or ``.egg-info`` folder holds the distribution — read from that folder.
    Undecided (``False``) wherever the rule would need more than folders and plain files: another finder of
    distributions ahead of the path's on ``sys.meta_path`` (one behind it is asked only when the path has
    nothing), an entry that is a file (a zip) or an egg, two candidate folders in one entry, a folder
    without a readable ``Version``."""
    finders = [f for f in sys.meta_path if getattr(f, "find_distributions", None)]
    if not finders or not _searches_the_path(finders[0]):
        return False, None
    want = _normalized(name)
    for entry in path:
        base = entry or "."
        if base.lower().endswith(".egg"):
            return False, None  # an egg's EGG-INFO, which importlib.metadata reads as well
        if not os.path.isdir(base):
            if os.path.exists(base):
                return False, None  # a zip or egg file: importlib.metadata looks inside, this does not
            continue
        try:
            children = os.listdir(base)
        except OSError:
            return False, None
        hits = [c for c in children if c.lower().endswith((".dist-info", ".egg-info"))
                and _normalized(c.rpartition(".")[0].partition("-")[0]) == want]
        if not hits:
            continue
        if len(hits) > 1:
            return False, None  # which one importlib.metadata reads depends on the listing's order
        folder = os.path.join(base, hits[0])
        meta = "METADATA" if hits[0].lower().endswith(".dist-info") else "PKG-INFO"
        version = _header_version(os.path.join(folder, meta)) if os.path.isdir(folder) else None
        return (version is not None), version
    return len(finders) == 1, None  # not on the path: a finder behind it may still know the name


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name`` — ``importlib.metadata.version(name)`` — or ``None``
    where it is not installed or states no version, without importing ``importlib.metadata`` where the
    answer is plain.

    Examples
    --------
    >>> import importlib.metadata
    >>> dist_version("numpy") == importlib.metadata.version("numpy")
    True
    >>> dist_version("no-such-distribution-here") is None
    True
    """
    decided, version = _from_folders(name, list(sys.path))
    if decided:
        return version
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(name)
    except (PackageNotFoundError, KeyError):  # KeyError: no Version field, where the backport handles it
        return None


def platform_text() -> str:
    """``platform.platform()`` without its ``uname -p`` subprocess where that adds nothing.

    On Linux ``platform.platform()`` is ``system-release-machine[-processor]-with-<libc><version>``, and the
    processor (``uname -p``) is left out when it is ``unknown`` (Debian's coreutils) or the machine again
    (Fedora's): the same string from the kernel's ``uname`` and the C library. Where ``uname -p`` prints a
    third thing the processor is missing here; every other system gets ``platform.platform()`` itself."""
    if not sys.platform.startswith("linux"):
        return platform.platform()
    u = platform.uname()  # its processor field is resolved (the subprocess) only when read
    libc, version = platform.libc_ver()
    text = "-".join(x.strip() for x in (u.system, u.release, u.machine, "with", libc + version) if x)
    for ch in ' /\\:;"()':  # platform.platform()'s clean-up of a file-name-like string
        text = text.replace(ch, "_" if ch == " " else "-")
    text = text.replace("unknown", "")
    while "--" in text:
        text = text.replace("--", "-")
    return text.rstrip("-")
