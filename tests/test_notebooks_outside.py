"""The generated notebooks of the real chapters: plain Jupyter Markdown, the book's numbers, and
running from the built wheel outside the repository.

These tests read the book build (``_build``: the jupyter-cache executions and the HTML), which
``make test`` makes first; without one they skip. They are ``slow`` (``make unit`` skips them).

The "outside" test builds the wheel (not editable), installs it with ``pip --no-index`` into a fresh
virtual environment that sees the project's pinned third-party packages through a filtered view of
``.venv``'s site-packages — without ``bounds_lib``, MyST-NB, Sphinx, Jupyter Book and jupytext, as in
a reader's plain Jupyter or Colab — copies the launch notebooks to a temporary folder and executes
every chapter there with nbclient. Every code cell's printed output must equal the book's.
"""

from __future__ import annotations

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

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("pybtex")
pytest.importorskip("myst_nb")

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("BOUNDS_BOOK_BUILD", ROOT / "_build"))
import make_notebooks as mk  # noqa: E402  (book/tools is on sys.path: conftest.py)

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


@pytest.fixture(scope="module")
def editions(tmp_path_factory):
    out = tmp_path_factory.mktemp("editions")
    launch = mk.build_edition("launch", out / "launch", BUILD, log=lambda m: print(m))
    student = mk.build_edition("student", out / "student", BUILD, log=lambda m: print(m))
    return {"launch": [p for p, _ in launch], "student": [p for p, _ in student], "root": out}


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


EXECUTE = r"""
import json, sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient
path, out = Path(sys.argv[1]), Path(sys.argv[2])
nb = nbformat.read(path, as_version=4)
t0 = time.time()
try:
    resources = {"metadata": {"path": str(path.parent)}}
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources=resources).execute()
    status = "ok"
except Exception as exc:
    status = f"{type(exc).__name__}: {str(exc)[-1500:]}"
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


def test_every_chapter_runs_outside_the_repository_from_the_wheel(editions, tmp_path):
    t0 = time.time()
    wheel = _wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "bounds_lib/data/trained_grid.json" in names and "bounds_lib/book.mplstyle" in names
    py = _reader_env(tmp_path)
    # What pip would do in a reader's environment that already has torch & co. (Colab): install the
    # library and nothing else (a torch in range is kept, not replaced).
    plan = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--dry-run", "-q", "--no-index",
                           "--report", "-", str(wheel)], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert [i["metadata"]["name"] for i in json.loads(plan.stdout)["install"]] == ["bounds_lib"]
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index", str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # every runtime dependency satisfied by the pinned environment
    where = subprocess.run([str(py), "-c", "import bounds_lib, importlib.util as u; print(bounds_lib.__file__); "
                            "print(u.find_spec('myst_nb'), u.find_spec('sphinx'), u.find_spec('jupytext'))"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split("\n")
    assert where[0].startswith(str(tmp_path / "venv")) and where[1] == "None None None"
    setup_s = time.time() - t0

    work = tmp_path / "reader" / "notebooks"  # a reader's folder: no repository anywhere above it
    shutil.copytree(editions["root"] / "launch" / "notebooks", work)
    done = tmp_path / "executed"
    done.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0", TQDM_DISABLE="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.pop("MPLBACKEND", None)
    def run(nb_path):  # one kernel per chapter; two chapters at a time (the machines have 2 cores)
        r = subprocess.run([str(py), "-c", EXECUTE, str(nb_path), str(done)], capture_output=True, text=True,
                           env=env, cwd=work)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    t1 = time.time()
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(run, sorted(work.glob("ch*.ipynb"))))
    print(f"wheel + fresh environment: {setup_s:.1f} s; all chapters executed in {time.time() - t1:.0f} s")
    for res in results:
        print(f"{res['chapter']}: {res['status'][:200]} ({res['seconds']} s)")
    assert [x["chapter"] for x in results] == [md.stem for md in CHAPTERS]
    assert all(x["status"] == "ok" for x in results), results

    compared = 0
    for md in CHAPTERS:
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
            compared += len(_printed(b))
    print(f"{compared} printed outputs identical to the book's")
    assert compared > 50


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
