"""The ``Examples`` of the library's docstrings run, and print what they show (run by ``make unit``).

Every module of ``bounds_lib`` and its subpackages (found on disk, so a new module is included without listing it) is
imported and its doctests are run with the flags of ``[tool.pytest.ini_options] doctest_optionflags``
(the same as ``pytest --doctest-modules bounds_lib/<subpackage>/<module>.py``). ``bounds_lib/__main__.py`` is left
out: importing it is harmless (its ``main()`` runs only under ``python -m``), but it has nothing to
show. A module without any example is reported as skipped, not passed.
"""
from __future__ import annotations

import doctest
import importlib
import io
import pkgutil
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # examples that draw must not need a display

import bounds_lib  # noqa: E402

PACKAGE = Path(bounds_lib.__file__).parent
MODULES = ["bounds_lib"] + sorted(m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="bounds_lib.")
                                  if m.name != "bounds_lib.__main__")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_doctests(module) -> tuple[int, int, str]:
    """(examples run, failures, doctest's report) for every docstring of ``module``."""
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    # The finder keeps only objects defined in ``module`` (an imported one is run by its own module).
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, module.__name__):
        runner.run(test, out=report.write)
    return runner.tries, runner.failures, report.getvalue()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    module = importlib.import_module(name)
    attempted, failed, report = run_doctests(module)
    if attempted == 0:
        pytest.skip(f"{name} has no docstring examples")
    assert failed == 0, f"{failed} of {attempted} docstring examples of {name} failed:\n{report}"


def test_a_wrong_example_fails(tmp_path, monkeypatch):
    """Power: an example whose printed value is wrong is reported as a failure."""
    src = tmp_path / "doctest_power_probe.py"
    src.write_text('def f():\n    """\n    >>> 1 + 1\n    3\n    """\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    attempted, failed, report = run_doctests(importlib.import_module("doctest_power_probe"))
    assert (attempted, failed) == (1, 1) and "Expected:\n    3\nGot:\n    2" in report


def test_every_module_on_disk_is_collected():
    """The walk reaches the subpackages' modules, not only the top level."""
    on_disk = {".".join(("bounds_lib",) + p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
               for p in PACKAGE.rglob("*.py")}
    assert set(MODULES) == on_disk - {"bounds_lib.__main__"}
