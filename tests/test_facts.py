"""The report's facts read cheaply (:mod:`bounds_lib.core.facts`, issue 52): the same versions as
:mod:`importlib.metadata` and the same platform string as :func:`platform.platform`, on this machine's
every installed distribution and on made-up layouts of ``sys.path`` where the two could part."""
from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
import sys
import zipfile
from collections import namedtuple

import pytest

from bounds_lib.core import facts


def _metadata_version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def test_every_installed_distribution_has_importlib_metadatas_version():
    names = sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]})
    assert len(names) > 100  # the book's environment: jupyter-book, torch, numpy, …
    differ = {n: (facts.dist_version(n), md.version(n)) for n in names if facts.dist_version(n) != md.version(n)}
    assert differ == {}
    for spelled in ("Jupyter-Book", "jupyter_book", "JUPYTER.book", "typing-extensions", "Typing_Extensions"):
        assert facts.dist_version(spelled) == _metadata_version(spelled)
    assert facts.dist_version("no-such-distribution-here") is None


def _dist(folder, name, version, kind="dist-info", extra=""):
    d = folder / f"{name}-{version}.{kind}"
    d.mkdir(parents=True)
    field = f"Version: {version}\n" if version else ""
    (d / ("METADATA" if kind == "dist-info" else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\n{field}{extra}\nVersion: 9.9 (in the body, not the header)\n")
    return d


def _layouts(tmp_path):
    """``{case: (sys.path, name)}``: where the first entry wins, names spelled otherwise, egg-info, files."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _dist(a, "Demo.Pkg", "1.2")
    _dist(b, "demo_pkg", "3.4")
    _dist(c, "legacy", "0.7", kind="egg-info")
    _dist(c, "noversion", "", extra="Summary: a header without a version\n")
    (tmp_path / "empty").mkdir()
    return {
        "the first entry wins": ([str(tmp_path / "empty"), str(tmp_path / "gone"), str(a), str(b)], "demo-pkg"),
        "the first entry wins, reversed": ([str(b), str(a)], "DEMO_PKG"),
        "an egg-info folder": ([str(c)], "legacy"),
        "a header without a version": ([str(c), str(a)], "noversion"),
        "not there": ([str(a), str(b)], "other"),
    }


@pytest.mark.parametrize("case", ["the first entry wins", "the first entry wins, reversed", "an egg-info folder",
                                  "a header without a version", "not there"])
def test_made_up_layouts_agree_with_importlib_metadata(tmp_path, monkeypatch, case):
    path, name = _layouts(tmp_path)[case]
    monkeypatch.setattr(sys, "path", path)
    assert facts.dist_version(name) == _metadata_version(name)
    expected = {"the first entry wins": "1.2", "the first entry wins, reversed": "3.4", "an egg-info folder": "0.7",
                "a header without a version": None, "not there": None}[case]
    assert facts.dist_version(name) == expected


def _spy_metadata(monkeypatch) -> list:
    calls = []
    real = md.version

    def spy(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(md, "version", spy)
    return calls


def test_a_zip_on_the_path_or_two_candidates_in_one_folder_leave_it_to_importlib_metadata(tmp_path, monkeypatch):
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


def test_another_finder_of_distributions_leaves_it_to_importlib_metadata(tmp_path, monkeypatch):
    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter([md.PathDistribution(_dist(tmp_path / "elsewhere", "found", "7.1"))])

        @staticmethod
        def find_spec(*a, **k):
            return None

    calls = _spy_metadata(monkeypatch)
    _dist(tmp_path / "p", "found", "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "p")])
    monkeypatch.setattr(sys, "meta_path", [Finder, *sys.meta_path])
    assert facts.dist_version("found") == "7.1" and calls == ["found"]


FakeUname = namedtuple("FakeUname", "system node release version machine processor")


@pytest.mark.parametrize("release, machine, processor, libc", [
    ("6.1.0-13-amd64", "x86_64", "unknown", ("glibc", "2.36")),   # Debian: uname -p says unknown
    ("5.14.0 (custom) el9", "x86_64", "x86_64", ("glibc", "2.34")),  # Fedora: the machine again; odd release
    ("6.6.8;musl", "aarch64", "", ("", "")),                      # no glibc found in the executable
])
def test_the_platform_string_is_platform_platforms(monkeypatch, release, machine, processor, libc):
    fake = FakeUname("Linux", "host", release, "#1 SMP", machine, processor if processor != "unknown" else "")
    monkeypatch.setattr(platform, "uname", lambda: fake)
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: libc)
    monkeypatch.setattr(platform, "_platform_cache", {})
    monkeypatch.setattr(sys, "platform", "linux")
    assert facts.platform_text() == platform.platform()


def test_this_machines_platform_string_runs_no_subprocess(monkeypatch):
    expected = platform.platform()
    if sys.platform.startswith("linux") and platform.uname().processor not in ("", platform.machine()):
        pytest.skip("uname -p names a processor here, which platform_text leaves out (its docstring)")

    def refuse(*a, **k):
        raise AssertionError("a subprocess was started")

    monkeypatch.setattr(subprocess, "check_output", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert facts.platform_text() == expected
