"""The generated notebooks of the real chapters: plain Jupyter Markdown, the book's numbers, and
running from the built wheel outside the repository.

These tests read the book build (``_build``: the jupyter-cache executions and the HTML), which
``make test`` makes first; without one they skip. They are ``slow`` (``make unit`` skips them), and
their expensive fixtures (the editions, the wheel and the reader's environment) are made once per
run, also under pytest-xdist (``made_once``: a file lock in the run's shared temporary folder).

**Outside the repository, from the wheel — without executing every chapter a second time.** The
strict build (``make test`` runs it first) already executes every chapter once, to the end, and
fails on any raising cell; since issue 28 it runs each one in a fresh temporary folder outside the
repository (``execute.run_in_temp`` in ``_config.yml``; ``book/tools/parallel_execution.py`` honours
it), with only ``bounds_lib`` importable from the repository (setuptools' strict editable finder).
Executing every chapter again here, in a reader's environment, cost as much CPU as the build's own
executions. What that build cannot vouch for is what differs between its kernels and a reader's,
and that is what this module checks, each part able to fail:

1. *the wheel* (not the editable install): it holds every file of the library but the listed
   exceptions, and ``pip --no-index`` installs it, and nothing else, into a fresh virtual
   environment that sees the project's pinned third-party packages through a filtered view of
   ``.venv``'s site-packages — without ``bounds_lib``, MyST-NB, Sphinx, Jupyter Book and jupytext,
   as in a reader's plain Jupyter or Colab;
2. *every import*: in that environment, from a folder outside the repository, every library module
   and every import statement of every chapter's code runs, each ``bounds_lib`` module comes from the
   installed wheel, and no book tooling is importable or imported;
3. *the install cell* of every generated notebook runs there and installs nothing (all it asks for
   is present);
4. *two whole chapters* run there, from a reader's folder, as their generated notebooks, and every
   code cell prints what the book printed: ``ch05_main_bound`` (the most printed outputs, the MiniLM
   checkpoint package, SymPy) and ``ch08_spectrum`` (the package data, the book's plot style); both
   glue through ``bounds_lib.core.glue`` without MyST-NB;
5. *no chapter names a repository path* in its code (``__file__``, a relative path to a file of the
   repository: that is how a chapter would reach the repository from a temporary folder), and the
   build configuration still runs the chapters in temporary folders.

What is left unproved for the other seven chapters: a repository file reached by an absolute path
that check 5 does not see. ``BOUNDS_OUTSIDE_CHAPTERS=all`` (or a comma-separated list of chapter names)
runs check 4 on every chapter, as the test did before issue 28 (two chapters at a time).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("pybtex")
pytest.importorskip("myst_nb")

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("BOUNDS_BOOK_BUILD", ROOT / "_build"))
import make_notebooks as mk  # noqa: E402  (book/tools is on sys.path: conftest.py)
import parallel_execution  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.book,
    pytest.mark.skipif(not (BUILD / ".jupyter_cache").is_dir() or not (BUILD / "html").is_dir(),
                       reason="needs the book build (_build with .jupyter_cache and html): `make book` or `make test`"),
]

CHAPTERS = mk.chapters()
TEXT_KEYS = ("text/plain", "text/markdown", "text/latex", "text/html")

# Kept out of the fresh environment: the library itself (installed from the wheel) and the book
# tooling a reader's Jupyter does not have.
NOT_IN_READER_ENV = ["bounds_lib*", "__editable__*", "*.pth", "myst_nb*", "myst_parser*", "jupyter_book*",
                     "sphinx*", "jupytext*", "pip", "pip-*"]


def made_once(tmp_path_factory, name: str, make):
    """``make(folder) -> JSON-able result``, made once per test run even under pytest-xdist.

    Without xdist this is a plain session cache. Under xdist (``make test``) the first worker that
    needs it makes it in the run's shared temporary folder while holding a file lock; the other
    workers wait and read the same result (the pytest-xdist documentation's recipe for expensive
    session fixtures). Never shared between runs: the folder is the run's own.
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent: this run's folder, shared by its workers
    folder, done = base / name, base / f"{name}.json"
    with FileLock(str(base / f"{name}.lock")):
        if not done.is_file():
            folder.mkdir()
            done.write_text(json.dumps(make(folder)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def editions(tmp_path_factory):
    def make(out):
        launch = mk.build_edition("launch", out / "launch", BUILD, log=lambda m: print(m))
        student = mk.build_edition("student", out / "student", BUILD, log=lambda m: print(m))
        return {"launch": [str(p) for p, _ in launch], "student": [str(p) for p, _ in student], "root": str(out)}

    made = made_once(tmp_path_factory, "editions", make)
    return {"launch": [Path(p) for p in made["launch"]], "student": [Path(p) for p in made["student"]],
            "root": Path(made["root"])}


def _source_raw_counts(md: Path) -> int:
    src = mk.read_chapter(md)
    return sum(sum(mk.raw_myst_tokens(c.source).values()) for c in src.nb.cells if c.cell_type == "markdown")


def test_no_raw_myst_in_any_generated_markdown_cell(editions):
    rows = []
    for kind in ("launch", "student"):
        for path in editions[kind]:
            nb = nbformat.read(path, as_version=4)
            after = mk.notebook_raw_myst(nb)
            assert after == 0, f"{path.name} ({kind}): {mk.raw_report(nb)}"
            nbformat.validate(nb)
    for md in CHAPTERS:
        before = _source_raw_counts(md)
        rows.append(f"{md.stem}: raw MyST tokens {before} -> 0")
        assert before > 0  # the detector sees the chapters' MyST (power)
    print("\n".join(rows))
    assert [p.stem for p in editions["launch"]] == [md.stem for md in CHAPTERS]


def _images(cell) -> list[str]:
    out = [v for att in cell.get("attachments", {}).values() for k, v in att.items() if k.startswith("image/")]
    for o in cell.get("outputs", []):
        out += [v for k, v in o.get("data", {}).items() if k.startswith("image/")]
    return out


def test_no_figure_twice_in_a_generated_notebook(editions):
    """A glued figure is shown once, as the attachment of its caption: not also under its code cell."""
    for path in editions["launch"]:
        nb = nbformat.read(path, as_version=4)
        glued = [c for c in nb.cells if c.cell_type == "code" and "glue(" in c.source
                 and any(k.startswith("image/") for o in c.get("outputs", []) for k in o.get("data", {}))]
        images = [img for c in nb.cells for img in _images(c)]
        assert not glued, f"{path.name}: {len(glued)} cell(s) that glue a figure also show one under the cell"
        assert len(images) == len(set(images)), f"{path.name}: {len(images) - len(set(images))} figure(s) twice"
    assert sum(len(_images(c)) for p in editions["launch"] for c in nbformat.read(p, as_version=4).cells) > 20


_CAPTION = re.compile(r'<span class="caption-number">(?P<text>[^<]+?)\s*</span>')
_EQNO = re.compile(r'<span class="eqno">\((?P<n>[\d.]+)\)')


def _html_numbers(md: Path) -> list[str]:
    html = (BUILD / "html" / "notebooks" / f"{md.stem}.html").read_text()
    return sorted([m["text"].strip() for m in _CAPTION.finditer(html)] + [f"({m['n']})" for m in _EQNO.finditer(html)])


def _notebook_numbers(nb) -> list[str]:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    kinds = "|".join(sorted({k.capitalize() for k in mk.PRF_TYPES} | {"Exercise"}))
    found = [f"{m[1]} {m[2]}" for m in re.finditer(rf"\*\*({kinds}) (\d+\.\d+)\b", text)]
    found += [f"Fig. {m[1]}" for m in re.finditer(r"^\*Fig\. (\d+\.\d+):", text, re.M)]
    found += [f"({m[1]})" for m in re.finditer(r"\\tag\{(\d+\.\d+)\}", text)]
    return sorted(found)


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_numbers_match_the_book(editions, md):
    """Every numbered statement, exercise, figure and equation of the page, with the page's number."""
    launch = nbformat.read(editions["root"] / "launch" / "notebooks" / f"{md.stem}.ipynb", as_version=4)
    html = _html_numbers(md)
    assert html, f"no numbered element found in the page of {md.stem}"
    assert _notebook_numbers(launch) == html
    # The student edition keeps the numbering (solutions are gone, not renumbered).
    student = nbformat.read(editions["root"] / "student" / f"{md.stem}.ipynb", as_version=4)
    assert set(_notebook_numbers(student)) == set(html)


def _wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "bounds_lib", src / "bounds_lib", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp / "dist"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp / "dist").glob("bounds_lib-*.whl")
    return wheel


def _reader_env(tmp: Path) -> Path:
    """A fresh venv whose third-party packages are a filtered view of .venv's (no bounds_lib, no book tooling)."""
    venv = tmp / "venv"
    # No pip or setuptools of its own (3.11's ensurepip brings an old setuptools that would shadow the
    # pinned one); pip runs from this environment with --python.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    view = tmp / "view"
    view.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not any(fnmatch.fnmatch(entry.name.lower(), pat) for pat in NOT_IN_READER_ENV):
            (view / entry.name).symlink_to(entry)
    venv_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    (venv_site / "reader_view.pth").write_text(f"{view}\n")
    return py


#: Files of the library the wheel does not ship, with the reason (package data is ``*.mplstyle`` and
#: ``data/*.json``, pyproject.toml). Each must exist (the list does not go stale).
NOT_SHIPPED = {
    "bounds_lib/data/study_preregistration.md": "the pre-registration document of Chapter 9: read by people and "
                                                 "by tests/test_study.py in the repository, by no library code",
    "bounds_lib/data/study_amendment_1.md": "its first amendment (dated, committed before any new grid): read by "
                                            "people, by no library code",
    "bounds_lib/data/study_amendment_2.md": "its second amendment (dated, committed before the conditional "
                                            "analyses): read by people, by no library code",
}
BOOK_TOOLING = ("myst_nb", "myst_parser", "sphinx", "jupyter_book", "jupytext")


@pytest.fixture(scope="session")
def reader(tmp_path_factory):
    """The wheel, a reader's environment with it installed (both made once per run), and this worker's
    reader's folder outside the repository."""
    def make(tmp):
        t0 = time.time()
        wheel = _wheel(tmp)
        py = _reader_env(tmp)
        # What pip would do in a reader's environment that already has torch & co. (Colab): install the
        # library and nothing else (a torch in range is kept, not replaced).
        plan = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--dry-run", "-q",
                               "--no-index", "--report", "-", str(wheel)], capture_output=True, text=True)
        r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index",
                            str(wheel)], capture_output=True, text=True)
        print(f"wheel + fresh environment: {time.time() - t0:.1f} s")
        return {"wheel": str(wheel), "py": str(py), "venv": str(tmp / "venv"), "install": [r.returncode, r.stderr],
                "plan": [plan.returncode, plan.stdout, plan.stderr]}

    made = made_once(tmp_path_factory, "reader", make)
    assert made["install"][0] == 0, made["install"][1]  # every runtime dependency satisfied by the pinned environment
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0", TQDM_DISABLE="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.pop("MPLBACKEND", None)
    env = parallel_execution.kernel_env(env)  # the book's kernels' thread settings: the same numbers
    work = tmp_path_factory.mktemp("reader") / "notebooks"  # a reader's folder: no repository anywhere above it
    work.mkdir()
    return {"wheel": Path(made["wheel"]), "py": Path(made["py"]), "venv": Path(made["venv"]), "plan": made["plan"],
            "env": env, "work": work}


def _run(reader, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(reader["py"]), "-c", code, *args], capture_output=True, text=True,
                          env=reader["env"], cwd=reader["work"])


def test_the_wheel_ships_the_library_and_installs_alone(reader):
    returncode, stdout, stderr = reader["plan"]
    assert returncode == 0, stderr
    assert [i["metadata"]["name"] for i in json.loads(stdout)["install"]] == ["bounds_lib"]
    names = set(zipfile.ZipFile(reader["wheel"]).namelist())
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "bounds_lib").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    assert set(NOT_SHIPPED) <= files, "NOT_SHIPPED names a file that no longer exists"
    missing = sorted(files - names - set(NOT_SHIPPED))
    assert not missing, f"library files missing from the wheel: {missing}"
    assert "bounds_lib/data/trained_grid.json" in names and "bounds_lib/core/book.mplstyle" in names
    assert not set(NOT_SHIPPED) & names, "a NOT_SHIPPED file is in the wheel: drop it from the list"


def _chapter_imports(md: Path) -> list[str]:
    """Every import statement of the chapter's code cells, as source lines."""
    out = []
    for cell in mk.read_chapter(md).nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse("\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        out += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return out


IMPORTS = r"""
import importlib, importlib.util, json, sys
modules, lines = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for m in modules:
    importlib.import_module(m)
for line in lines:
    exec(line, {})
tooling = json.loads(sys.argv[3])
print(json.dumps({
    "files": {k: getattr(v, "__file__", None) for k, v in sys.modules.items() if k.split(".")[0] == "bounds_lib"},
    "importable": [t for t in tooling if importlib.util.find_spec(t) is not None],
    "imported": sorted({k.split(".")[0] for k in sys.modules} & set(tooling)),
}))
"""


def test_every_module_and_every_chapter_import_resolves_from_the_wheel(reader):
    names = zipfile.ZipFile(reader["wheel"]).namelist()
    modules = sorted(n[:-3].replace("/", ".") for n in names
                     if n.startswith("bounds_lib/") and n.endswith(".py") and not n.endswith("__main__.py"))
    modules = [m[: -len(".__init__")] if m.endswith(".__init__") else m for m in modules]
    lines = sorted({line for md in CHAPTERS for line in _chapter_imports(md)})
    assert len(modules) > 20 and len(lines) > 20  # the lists are real (power)
    assert any("bounds_lib" in line for line in lines) and any("torch" in line for line in lines)
    r = _run(reader, IMPORTS, json.dumps(modules), json.dumps(lines), json.dumps(BOOK_TOOLING))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(modules) <= set(got["files"]), sorted(set(modules) - set(got["files"]))
    outside = [f for f in got["files"].values() if f and not f.startswith(str(reader["venv"]))]
    assert not outside, f"bounds_lib modules not from the installed wheel: {outside}"
    assert got["importable"] == [] and got["imported"] == [], got


INSTALL = r"""
import json, subprocess, sys
calls = []
subprocess.run = lambda *a, **k: calls.append(a)  # the cell's only action: installing what is missing
exec(sys.argv[1], {})
print(json.dumps(calls))
"""


def test_every_install_cell_installs_nothing_where_the_library_is_installed(editions, reader):
    seen = 0
    for path in editions["launch"]:
        nb = nbformat.read(path, as_version=4)
        (cell,) = [c for c in nb.cells if mk.INSTALL_TAG in c.metadata.get("tags", [])]
        assert "pip" in cell.source and "find_spec" in cell.source
        r = _run(reader, INSTALL, cell.source)
        assert r.returncode == 0, f"{path.name}: {r.stderr[-2000:]}"
        assert json.loads(r.stdout.strip().splitlines()[-1]) == [], f"{path.name}'s install cell would install"
        seen += 1
    assert seen == len(CHAPTERS)


EXECUTE = r"""
import json, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient
path, out = Path(sys.argv[1]), Path(sys.argv[2])
t0 = time.time()
for attempt in range(3):  # as book/tools/parallel_execution.py: a kernel that never started is started again
    nb = nbformat.read(path, as_version=4)
    try:
        resources = {"metadata": {"path": str(path.parent)}}
        NotebookClient(nb, timeout=1200, kernel_name="python3", resources=resources).execute()
        status = "ok"
    except Exception as exc:
        status = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        if "before replying to kernel_info" in str(exc) and attempt < 2:
            print(f"kernel did not start ({exc}); starting another", file=sys.stderr, flush=True)
            time.sleep(1 + attempt)
            continue
    break
nbformat.write(nb, out / path.name)
print(json.dumps({"chapter": path.stem, "status": status, "seconds": round(time.time() - t0, 1)}), flush=True)
"""


def _printed(cell) -> list[str]:
    items = []
    for out in cell.get("outputs", []):
        meta = out.get("metadata", {}).get("scrapbook")
        if meta and meta.get("mime_prefix"):
            continue  # glued without display: the page shows it in the text, the shim shows nothing
        if out["output_type"] == "stream":
            items.append(f"{out['name']}:{''.join(out['text'])}")
        elif out["output_type"] in ("execute_result", "display_data"):
            for key in TEXT_KEYS:
                if key in out.get("data", {}):
                    val = out["data"][key]
                    items.append(f"{key}:{''.join(val) if isinstance(val, list) else json.dumps(val)}")
        elif out["output_type"] == "error":
            items.append(f"error:{out.get('ename')}")
    # Streams are merged on the page (nb_merge_streams); merge them here too.
    merged = []
    for it in items:
        if merged and it.startswith("stdout:") and merged[-1].startswith("stdout:"):
            merged[-1] += it[len("stdout:"):]
        else:
            merged.append(it)
    return merged


#: The chapters check 4 executes, unless ``BOUNDS_OUTSIDE_CHAPTERS`` says ``all`` or names others.
_CHOSEN = os.environ.get("BOUNDS_OUTSIDE_CHAPTERS", "ch05_main_bound,ch08_spectrum").strip()
OUTSIDE = CHAPTERS if _CHOSEN == "all" else [md for md in CHAPTERS if md.stem in _CHOSEN.split(",")]


def test_chapters_run_outside_the_repository_from_the_wheel(editions, reader, tmp_path):
    """Check 4: the chosen chapters' generated notebooks, executed in the reader's environment and
    folder, print in every code cell what the book printed."""
    assert OUTSIDE, f"BOUNDS_OUTSIDE_CHAPTERS={_CHOSEN!r} names no chapter of {[md.stem for md in CHAPTERS]}"
    work = reader["work"]
    for md in OUTSIDE:
        shutil.copy(editions["root"] / "launch" / "notebooks" / f"{md.stem}.ipynb", work)
    done = tmp_path / "executed"
    done.mkdir()

    def run(md):  # one kernel per chapter; two chapters at a time (the machines have 2 cores)
        r = subprocess.run([str(reader["py"]), "-c", EXECUTE, str(work / f"{md.stem}.ipynb"), str(done)],
                           capture_output=True, text=True, env=reader["env"], cwd=work)
        assert r.returncode == 0, r.stderr[-3000:]
        return dict(json.loads(r.stdout.strip().splitlines()[-1]), stderr=r.stderr[-2000:])

    t1 = time.time()
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(run, OUTSIDE))
    print(f"{len(OUTSIDE)} chapter(s) executed in {time.time() - t1:.0f} s")
    for res in results:
        print(f"{res['chapter']}: {res['status'][:200]} ({res['seconds']} s)")
    assert all(x["status"] == "ok" for x in results), results  # with each kernel's stderr

    compared = {}
    for md in OUTSIDE:
        src = mk.read_chapter(md)
        book = mk.cached_execution(src, BUILD)
        assert book is not None, f"{md.name}: the book build has no execution of this source"
        ran = nbformat.read(done / f"{md.stem}.ipynb", as_version=4)
        ours = [c for c in ran.cells if c.cell_type == "code" and mk.INSTALL_TAG not in c.metadata.get("tags", [])]
        theirs = [c for c in book.cells if c.cell_type == "code"]
        assert [c.source.strip() for c in ours] == [c.source.strip() for c in theirs]
        for k, (a, b) in enumerate(zip(ours, theirs)):
            if "skip-execution" in a.metadata.get("tags", []):
                continue
            assert _printed(a) == _printed(b), f"{md.stem} code cell {k} prints differently outside the repository"
            compared[md.stem] = compared.get(md.stem, 0) + len(_printed(b))
    print(f"printed outputs identical to the book's: {compared}")
    assert all(compared.get(md.stem) for md in OUTSIDE), f"a chapter with nothing compared: {compared}"


# A path-like string literal: a relative path with a folder or a file suffix (absolute paths are
# not repository paths a chapter could rely on elsewhere: they are reported too).
_PATHLIKE = re.compile(r"^(\.{1,2}/|/)?[\w.-]+(/[\w.-]+)*(\.[A-Za-z0-9]{1,8})?$")


def repository_references(code: str, root: Path = ROOT) -> list[str]:
    """What in ``code`` reaches the repository from a chapter: ``__file__``, or a string literal that
    names an existing path of the repository relative to the chapter's folder or the repository root."""
    found = []
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "__file__":
            found.append("__file__")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip()
            if not text or len(text) > 200 or "\n" in text or not _PATHLIKE.match(text):
                continue
            if "/" not in text and "." not in text.lstrip("."):
                continue  # a bare word ("rank", "norms") is not a path
            for base in (root / "notebooks", root):
                target = (base / text).resolve() if not text.startswith("/") else Path(text)
                if target.exists() and (target == root or root in target.parents) and target != base:
                    found.append(text)
                    break
    return found


def test_no_chapter_reaches_the_repository_by_a_path():
    """Check 5, with its power: planted references are found; the configuration runs chapters in temporary folders."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"].get("run_in_temp") is True, "the strict build must run chapters in temporary folders"
    planted = ('x = open("../bounds_lib/data/trained_grid.json")\n'
               'from pathlib import Path\nroot = Path(__file__).parents[1]\nstyle = "bounds_lib/core/book.mplstyle"\n'
               'words = ["rank", "ch08", "a b", ".", "..", "numbers.json", "x/y.txt", "ch08_spectrum.md"]\n')
    assert sorted(repository_references(planted)) == ["../bounds_lib/data/trained_grid.json", "__file__",
                                                      "bounds_lib/core/book.mplstyle", "ch08_spectrum.md"]
    for md in CHAPTERS:
        for k, cell in enumerate(c for c in mk.read_chapter(md).nb.cells if c.cell_type == "code"):
            code = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
            assert not repository_references(code), f"{md.stem} code cell {k}: {repository_references(code)}"


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_download_button_notebook_is_plain_jupyter(md):
    """The .ipynb behind the page's download button (book_reader) is the converted notebook."""
    path = BUILD / "html" / "_sources" / "notebooks" / f"{md.stem}.ipynb"
    if not path.is_file():
        pytest.skip(f"{path} not built")
    nb = nbformat.read(path, as_version=4)
    assert mk.notebook_raw_myst(nb) == 0, mk.raw_report(nb)
    assert mk.MACROS_TAG in nb.cells[0].metadata.get("tags", [])
    assert any(mk.INSTALL_TAG in c.metadata.get("tags", []) for c in nb.cells[:4])
