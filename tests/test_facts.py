"""The report's facts read cheaply (:mod:`bounds_lib.core.facts`, issue 52): the same versions as
:mod:`importlib.metadata` and the same platform string as :func:`platform.platform`, on this machine's
every installed distribution and on made-up layouts of ``sys.path`` where the two could part."""
from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import platform
import subprocess
import sys
import zipfile

import pytest

from bounds_lib.core import facts


def _metadata_version(name):
    try:
        return md.version(name)
    except (md.PackageNotFoundError, KeyError):  # KeyError: no Version field, once the backport is imported
        return None


def test_every_installed_distribution_has_importlib_metadatas_version():
    names = sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]})
    assert len(names) > 100  # the book's environment: jupyter-book, torch, numpy, …
    differ = {n: (facts.dist_version(n), md.version(n)) for n in names if facts.dist_version(n) != md.version(n)}
    assert differ == {}
    for spelled in ("Jupyter-Book", "jupyter_book", "JUPYTER.book", "typing-extensions", "Typing_Extensions"):
        assert facts.dist_version(spelled) == _metadata_version(spelled)
    assert facts.dist_version("no-such-distribution-here") is None


def _dist(folder, name, version, kind="dist-info", extra="", tail=""):
    d = folder / f"{name}-{version}{tail}.{kind}"
    d.mkdir(parents=True)
    field = f"Version: {version}\n" if version else ""
    (d / ("METADATA" if kind == "dist-info" else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\n{field}{extra}\nVersion: 9.9 (in the body, not the header)\n")
    return d


def _only_the_path_finder(monkeypatch):
    """``sys.meta_path`` without finders of distributions other than the path's: the standard library's, or
    the ``importlib_metadata`` backport's where a test before this one imported it (it then replaces the
    standard library's)."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not getattr(f, "find_distributions", None)
                                           or facts._searches_the_path(f)])


def _spy_metadata(monkeypatch) -> list:
    calls = []
    real = md.version

    def spy(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(md, "version", spy)
    return calls


def _layouts(tmp_path):
    """``{case: (sys.path, name, version, read by importlib.metadata)}``: where the first entry wins, names
    spelled otherwise, an egg-info folder (its name with a Python tag, as setuptools writes it), the working
    folder (``""``), a header without a version (left to importlib.metadata), a name found nowhere."""
    a, b, c, cwd = tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "cwd"
    _dist(a, "Demo.Pkg", "1.2")
    _dist(b, "demo_pkg", "3.4")
    _dist(c, "legacy", "0.7", kind="egg-info", tail="-py3.11")
    _dist(c, "noversion", "", extra="Summary: a header without a version\n")
    _dist(cwd, "here", "2.5")
    (tmp_path / "empty").mkdir()
    return {
        "the first entry wins": ([str(tmp_path / "empty"), str(tmp_path / "gone"), str(a), str(b)], "demo-pkg",
                                 "1.2", False),
        "the first entry wins, reversed": ([str(b), str(a)], "DEMO_PKG", "3.4", False),
        "an egg-info folder": ([str(c)], "legacy", "0.7", False),
        "the working folder": (["", str(a)], "here", "2.5", False),
        "a header without a version": ([str(c), str(a)], "noversion", None, True),
        "not there": ([str(a), str(b)], "other", None, False),
    }


@pytest.mark.parametrize("case", ["the first entry wins", "the first entry wins, reversed", "an egg-info folder",
                                  "the working folder", "a header without a version", "not there"])
def test_made_up_layouts_agree_with_importlib_metadata(tmp_path, monkeypatch, case):
    path, name, version, asked = _layouts(tmp_path)[case]
    _only_the_path_finder(monkeypatch)
    monkeypatch.setattr(sys, "path", path)
    monkeypatch.chdir(tmp_path / "cwd")
    expected = _metadata_version(name)
    calls = _spy_metadata(monkeypatch)
    assert facts.dist_version(name) == expected == version
    assert calls == ([name] if asked else [])  # a plain layout is read from the folders alone


def test_an_egg_or_an_unreadable_folder_on_the_path_leaves_it_to_importlib_metadata(tmp_path, monkeypatch):
    _only_the_path_finder(monkeypatch)
    egg = tmp_path / "thing-1.0-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: thing\nVersion: 1.0\n\n")
    _dist(tmp_path / "later", "thing", "2.0")
    monkeypatch.setattr(sys, "path", [str(egg), str(tmp_path / "later")])
    calls = _spy_metadata(monkeypatch)
    assert facts.dist_version("thing") == "1.0" and calls == ["thing"]  # the egg's, as importlib.metadata reads
    monkeypatch.setattr(sys, "path", [str(tmp_path / "later")])

    def unreadable(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(facts.os, "listdir", unreadable)
    calls.clear()
    facts.dist_version("thing")
    assert calls == ["thing"]


def test_a_zip_on_the_path_or_two_candidates_in_one_folder_leave_it_to_importlib_metadata(tmp_path, monkeypatch):
    _only_the_path_finder(monkeypatch)
    calls = _spy_metadata(monkeypatch)
    z = tmp_path / "dists.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("zipped-5.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 5.0\n\n")
    later = tmp_path / "later"
    _dist(later, "zipped", "6.0")
    monkeypatch.setattr(sys, "path", [str(z), str(later)])
    assert facts.dist_version("zipped") == "5.0" and calls == ["zipped"]  # inside the zip, as importlib reads it
    two = tmp_path / "two"
    _dist(two, "twice", "1.0")
    _dist(two, "Twice", "2.0")
    monkeypatch.setattr(sys, "path", [str(two)])
    calls.clear()
    got = facts.dist_version("twice")
    assert calls == ["twice"] and got == md.version("twice")
    _dist(tmp_path / "one", "once", "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "one")])
    calls.clear()
    assert facts.dist_version("once") == "1.0" and calls == []  # the plain case reads the folder alone


def _finder(tmp_path):
    """A finder of distributions that knows ``found`` 7.1 and ``elsewhere`` 2.0, outside ``sys.path``."""
    known = {"found": _dist(tmp_path / "x1", "found", "7.1"), "elsewhere": _dist(tmp_path / "x2", "elsewhere", "2.0")}

    class Finder:
        @staticmethod
        def find_distributions(context=None):
            d = known.get(getattr(context, "name", None))
            return iter([md.PathDistribution(d)] if d else [])

        @staticmethod
        def find_spec(*a, **k):
            return None

    return Finder


def test_a_finder_of_distributions_ahead_of_the_path_leaves_it_to_importlib_metadata(tmp_path, monkeypatch):
    _only_the_path_finder(monkeypatch)
    calls = _spy_metadata(monkeypatch)
    _dist(tmp_path / "p", "found", "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "p")])
    monkeypatch.setattr(sys, "meta_path", [_finder(tmp_path), *sys.meta_path])
    assert facts.dist_version("found") == "7.1" and calls == ["found"]


def test_a_finder_behind_the_path_is_asked_only_for_what_the_path_lacks(tmp_path, monkeypatch):
    _only_the_path_finder(monkeypatch)
    calls = _spy_metadata(monkeypatch)
    _dist(tmp_path / "p", "found", "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "p")])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _finder(tmp_path)])
    got = facts.dist_version("found")
    assert calls == []  # the path's, read from its folder alone
    assert got == "1.0" == md.version("found")
    calls.clear()
    assert facts.dist_version("elsewhere") == "2.0" and calls == ["elsewhere"]


def test_the_standard_librarys_finder_alone_reads_the_folders(tmp_path, monkeypatch):
    """A process where the backport was never imported: the path's finder is the standard library's
    ``PathFinder`` (whose ``find_distributions`` the backport deletes on import; put back here)."""
    path_finder = importlib.machinery.PathFinder
    from importlib.metadata import MetadataPathFinder

    monkeypatch.setattr(path_finder, "find_distributions", MetadataPathFinder.find_distributions, raising=False)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not getattr(f, "find_distributions", None)
                                           or f is path_finder])
    calls = _spy_metadata(monkeypatch)
    _dist(tmp_path / "p", "plain", "4.2")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "p")])
    assert facts.dist_version("plain") == "4.2" and calls == []


def test_the_importlib_metadata_backport_once_imported_changes_nothing(tmp_path, monkeypatch):
    """Importing the backport (Jupyter's and Sphinx's stacks do) puts its finder behind the path's: a plain
    layout is still read from its folder alone (in the suite, a test before this one may have imported it)."""
    pytest.importorskip("importlib_metadata")
    calls = _spy_metadata(monkeypatch)
    _dist(tmp_path / "p", "plain", "4.2")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "p")])
    assert facts.dist_version("plain") == "4.2" and calls == []


class FakeUname:
    """``platform.uname()``'s result with given fields; reading ``processor`` (``uname -p``: a subprocess) fails
    unless allowed."""

    def __init__(self, release, machine, processor):
        self.system, self.node, self.release, self.version, self.machine = "Linux", "host", release, "#1 SMP", machine
        self._processor, self.allowed = processor, True

    @property
    def processor(self):
        assert self.allowed, "uname -p was run"
        return self._processor

    def __iter__(self):
        return iter((self.system, self.node, self.release, self.version, self.machine, self.processor))


@pytest.mark.parametrize("release, machine, processor, libc", [
    ("6.1.0-13-amd64", "x86_64", "", ("glibc", "2.36")),            # Debian: uname -p said unknown
    ("5.14.0 (custom) el9/x:y;z\"w", "x86_64", "x86_64", ("glibc", "2.34")),  # Fedora: the machine again
    ("6.6.8-unknown--", "aarch64", "", ("", "")),                     # no glibc found in the executable
    ("6.1.0 XEN", "x86_64", "", ("glibc", "2.36X/")),                 # capitals kept; a trailing dash dropped
])
def test_the_platform_string_is_platform_platforms(monkeypatch, release, machine, processor, libc):
    """Odd releases exercise the clean-up (spaces, slashes, colons, quotes, parentheses, ``unknown``, doubled
    and trailing dashes); ``platform_text`` must not read the processor, and must not fall back to
    ``platform.platform()``, which does."""
    fake = FakeUname(release, machine, processor)
    monkeypatch.setattr(platform, "uname", lambda: fake)
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: libc)
    monkeypatch.setattr(platform, "_platform_cache", {})
    monkeypatch.setattr(sys, "platform", "linux")
    expected = platform.platform()
    fake.allowed = False
    assert facts.platform_text() == expected
    assert "--" not in expected and not expected.endswith("-")


def test_this_machines_platform_string_runs_no_subprocess(monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("platform_text is platform.platform() itself off Linux")
    expected = platform.platform()
    if platform.uname().processor not in ("", platform.machine()):
        pytest.skip("uname -p names a processor here, which platform_text leaves out (its docstring)")

    def refuse(*a, **k):
        raise AssertionError("a subprocess was started")

    monkeypatch.setattr(platform, "_uname_cache", None)  # a fresh uname(), whose processor is not yet read
    monkeypatch.setattr(platform, "_platform_cache", {})
    monkeypatch.setattr(subprocess, "check_output", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert facts.platform_text() == expected
