"""Where ``make test``'s time goes: each chapter's execution time and the slowest tests, as one table.

The chapters' times are those of a book build, read from its jupyter-cache (``_build/.jupyter_cache``:
the ``execution_seconds`` MyST-NB and ``book/tools/parallel_execution.py`` record for every executed
notebook — the numbers of the book's {nb-exec-table} page). The tests' times are the per-test
durations (setup + call + teardown) of a pytest run, read from its JUnit XML file.

    .venv/bin/python benchmarks/bench_build.py                       # read _build and the last --junit file
    .venv/bin/python benchmarks/bench_build.py --junit run.xml       # a JUnit file of an earlier pytest run
    # measure everything, without touching _build: a clean strict build into a temporary folder
    # (timed), then the whole suite as `make test` runs it (timed) against that build
    .venv/bin/python benchmarks/bench_build.py --run-build --run-tests --markdown benchmarks/BUILD_TIMES.md
    # refresh the order `make test` hands tests out in (tests/schedule.py) from a quiet run's JUnit file
    .venv/bin/python benchmarks/bench_build.py --junit run.xml --durations tests/durations.json

Nothing here asserts a time (the tests check correctness, never speed). The printed header gives the
machine (cores, load average) so that a reader can judge the numbers.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def makefile_value(name: str) -> str:
    """A ``NAME := value`` / ``NAME ?= value`` line of the Makefile (the strict flags, the test options)."""
    m = re.search(rf"^{name}\s*[:?]?=\s*(.*)$", (ROOT / "Makefile").read_text(), re.M)
    if not m:
        raise SystemExit(f"the Makefile defines no {name}")
    return m.group(1).strip()


def chapter_times(build: Path) -> list[tuple[str, float]]:
    """``[(chapter, seconds)]`` of the latest execution of every notebook in ``build``'s jupyter-cache."""
    from jupyter_cache import get_cache

    path = build / ".jupyter_cache"
    if not path.is_dir():
        return []
    latest: dict[str, tuple] = {}
    for rec in get_cache(str(path)).list_cache_records():
        seconds = (rec.data or {}).get("execution_seconds")
        if seconds is None:
            continue
        name = Path(rec.uri).stem
        if name not in latest or rec.created > latest[name][0]:
            latest[name] = (rec.created, float(seconds))
    return sorted(((name, s) for name, (_, s) in latest.items()), key=lambda x: x[0])


#: A chapter's line in the strict build's output (``book/tools/parallel_execution.py``).
_EXECUTED = re.compile(r"^\[parallel_execution\] (?:\S+/)?([\w-]+): ([0-9.]+) s$", re.M)


def chapter_times_from_log(log: Path) -> list[tuple[str, float]]:
    """``[(chapter, seconds)]`` from the output of a strict build (``make test``'s log), where the build
    folder itself is gone (a later run in the same clone removed it)."""
    return sorted(((m[1], float(m[2])) for m in _EXECUTED.finditer(log.read_text(encoding="utf-8", errors="replace"))),
                  key=lambda x: x[0])


def test_times(junit: Path) -> list[tuple[str, float, str]]:
    """``[(test id, seconds, outcome)]`` from a pytest JUnit XML file, slowest first."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        module = cls.replace(".", "/") + ".py" if cls else "?"
        outcome = "skipped" if case.find("skipped") is not None else (
            "failed" if case.find("failure") is not None or case.find("error") is not None else "passed")
        rows.append((f"{module}::{name}", float(case.get("time", 0.0)), outcome))
    return sorted(rows, key=lambda r: -r[1])


def run_build(out: Path) -> float:
    """A clean strict build (the Makefile's flags) into ``out``; its wall time."""
    flags = makefile_value("STRICT").split()
    t0 = time.perf_counter()
    subprocess.run([str(Path(PY).with_name("jupyter-book")), "build", str(ROOT), *flags, "--all", "--path-output",
                    str(out)], check=True, cwd=ROOT)
    return time.perf_counter() - t0


def pytest_args() -> str:
    """The Makefile's PYTEST_ARGS as make expands it (TEST_JOBS is one more than the cores): how `make test`
    runs pytest."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-%: ; @printf '%s\\n' '$($*)'",
                          "print-PYTEST_ARGS"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run_tests(junit: Path, build: Path | None, extra: list[str]) -> tuple[float, int]:
    """The whole suite as ``make test`` runs it (its PYTEST_ARGS), against ``build``; wall time, exit code."""
    env = dict(os.environ)
    if build is not None:
        env.update(BOUNDS_BOOK_BUILD=str(build), BOUNDS_BOOK_HTML=str(build / "html"))
    args = shlex.split(pytest_args())
    t0 = time.perf_counter()
    rc = subprocess.run([PY, "-m", "pytest", *args, f"--junitxml={junit}", *extra], cwd=ROOT, env=env).returncode
    return time.perf_counter() - t0, rc


def write_durations(path: Path, tests) -> None:
    """``{test id: seconds}`` of the passed tests of at least ``schedule.MIN_SECONDS`` (the hint
    ``tests/conftest.py`` orders the suite by), longest first, written whole or not at all."""
    sys.path.insert(0, str(ROOT / "tests"))
    from schedule import MIN_SECONDS

    data = {t: round(s, 1) for t, s, outcome in tests if outcome == "passed" and s >= MIN_SECONDS}
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def table(chapters, tests, top: int, walls: dict[str, float]) -> str:
    lines = ["| what | name | seconds |", "|---|---|---:|"]
    for name, s in chapters:
        lines.append(f"| chapter | `{name}` | {s:.1f} |")
    if chapters:
        lines.append(f"| chapters | sum of the executions | {sum(s for _, s in chapters):.1f} |")
    for test, s, outcome in tests[:top]:
        lines.append(f"| test | `{test}`{'' if outcome == 'passed' else f' ({outcome})'} | {s:.1f} |")
    if tests:
        lines.append(f"| tests | sum over {len(tests)} tests (all workers) | {sum(s for _, s, _ in tests):.1f} |")
    for what, s in walls.items():
        lines.append(f"| wall | {what} | {s:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "_build", help="the book build to read (default: _build)")
    ap.add_argument("--junit", type=Path, help="a pytest JUnit XML file to read the test durations from")
    ap.add_argument("--build-log", type=Path,
                    help="read the chapters' times from this output of a strict build instead of a build folder")
    ap.add_argument("--run-build", action="store_true", help="first make a clean strict build in a temporary folder")
    ap.add_argument("--run-tests", action="store_true", help="run the whole suite as `make test` does (junit kept)")
    ap.add_argument("--pytest-args", default="", help="more pytest arguments for --run-tests (one string)")
    ap.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list (default 25)")
    ap.add_argument("--markdown", type=Path, help="also write the table, with its header, to this file")
    ap.add_argument("--durations", type=Path,
                    help="also write the passed tests' seconds (those of at least tests/schedule.py's MIN_SECONDS) "
                         "to this JSON file: tests/durations.json, the order `make test` hands tests out in")
    ap.add_argument("--note", default="", help="a paragraph for the markdown file (what else ran, what to read)")
    args = ap.parse_args(argv)

    walls: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_build_"))
    build = args.build
    if args.run_build:
        walls["clean strict build (jupyter-book build --all)"] = run_build(tmp)
        build = tmp / "_build"
    junit = args.junit
    if args.run_tests:
        junit = tmp / "junit.xml"
        wall, rc = run_tests(junit, build if build.is_dir() else None, shlex.split(args.pytest_args))
        walls[f"test suite (pytest {pytest_args()}, exit code {rc})"] = wall
    chapters = chapter_times_from_log(args.build_log) if args.build_log else chapter_times(build)
    tests = test_times(junit) if junit and junit.is_file() else []

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    header = (f"Measured {datetime.datetime.now():%Y-%m-%d %H:%M} on {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}; load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
              f"(1 / 5 / 15 min) at the end.\nChapters: "
              + (f"{args.build_log} (the build's output)" if args.build_log else f"{build}/.jupyter_cache")
              + (f"; tests: {junit}" if tests else "; tests: none (no --junit / --run-tests)") + ".")
    text = table(chapters, tests, args.top, walls)
    print(header + "\n\n" + text)
    if args.markdown:
        args.markdown.write_text(
            "# Build and test times\n\nWritten by `benchmarks/bench_build.py` (see its docstring for the "
            "command).\n\n" + header + "\n\n" + (args.note.strip() + "\n\n" if args.note.strip() else "")
            + text + "\n")
    if args.durations:
        if not tests:
            print("--durations needs test times (--junit or --run-tests)", file=sys.stderr)
            return 1
        write_durations(args.durations, tests)
    if not chapters and not tests:
        print("nothing to report: no jupyter-cache in the build folder and no JUnit file", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
