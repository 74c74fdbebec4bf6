"""The strict build really is strict: a raising cell or a Sphinx warning fails it.

Each case builds a one-page scratch book with the repository's own ``_config.yml`` (and its local
extensions, ``book/tools``: the notebooks are executed by ``parallel_execution.py`` into the
jupyter-cache before Sphinx reads them) and the Makefile's ``STRICT`` flags, so that a change that
weakens the configuration or the parallel execution fails here.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JB = Path(sys.executable).with_name("jupyter-book")

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Scratch page
"""


def strict_flags():
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^STRICT := (.+)$", text, re.M)
    assert m, "Makefile defines STRICT"
    return m.group(1).split()


def build(tmp_path, body, pages=None, env=None):
    """Build a scratch book whose root page is ``body``; ``pages``: ``{name: body}`` of more pages."""
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    for folder in ("tools", "_static"):  # local Sphinx extensions and static files named in _config.yml
        if (ROOT / "book" / folder).is_dir():
            shutil.copytree(ROOT / "book" / folder, tmp_path / "book" / folder)
    toc = "format: jb-book\nroot: page\n"
    if pages:
        toc += "chapters:\n" + "".join(f"  - file: {name}\n" for name in pages)
    (tmp_path / "_toc.yml").write_text(toc)
    (tmp_path / "page.md").write_text(HEADER + body)
    for name, text in (pages or {}).items():
        (tmp_path / f"{name}.md").write_text(HEADER.replace("# Scratch page", f"# {name}") + text)
    # the scratch pages' run times stay out of this machine's history (book/tools/parallel_execution.py)
    env = dict(os.environ, HF_HUB_OFFLINE="1", BOUNDS_NB_HISTORY=str(tmp_path / "history.json"), **(env or {}))
    return subprocess.run([str(JB), "build", str(tmp_path), *strict_flags(), "--all"],
                          capture_output=True, text=True, timeout=300, env=env)


pytestmark = [
    pytest.mark.slow,  # five scratch book builds, ~40 s
    pytest.mark.skipif(not JB.exists(), reason="jupyter-book is not installed in this environment"),
]


def test_clean_page_builds(tmp_path):
    r = build(tmp_path, "\n```{code-cell} ipython3\nprint(1 + 1)\n```\n")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (tmp_path / "_build" / "html" / "page.html").exists()


def test_raising_cell_fails_the_build(tmp_path):
    r = build(tmp_path, "\n```{code-cell} ipython3\nassert 1 == 2, 'a failing check'\n```\n")
    assert r.returncode != 0
    assert "AssertionError" in r.stdout + r.stderr


def test_sphinx_warning_fails_the_build(tmp_path):
    r = build(tmp_path, "\nSee {ref}`a-label-that-does-not-exist`.\n")
    assert r.returncode != 0
    assert "a-label-that-does-not-exist" in r.stdout + r.stderr


def test_missing_glue_fails_the_build(tmp_path):
    r = build(tmp_path, "\n```{code-cell} ipython3\nx = 1\n```\n\nValue {glue:text}`never_glued`.\n")
    assert r.returncode != 0
    assert "never_glued" in r.stdout + r.stderr


# A notebook that records when its kernel ran (start, end) in a file outside the book.
TIMED = """
```{{code-cell}} ipython3
import time
t0 = time.time()
time.sleep(2)
with open({log!r}, "a") as f:
    f.write(f"{name} {{t0}} {{time.time()}}\\n")
```
"""


def test_notebooks_execute_in_parallel_once_each_from_the_cache(tmp_path):
    """Two notebooks run at the same time (two jobs), each exactly once: MyST-NB reads both from the
    cache that ``parallel_execution`` filled (a cache key computed differently would make MyST-NB
    execute a notebook again, which the extension reports as a warning, an error under ``-W``)."""
    log = tmp_path / "runs.log"
    build_dir = tmp_path / "book_root"
    build_dir.mkdir()
    pages = {"second": TIMED.format(log=str(log), name="second") + "\n```{code-cell} ipython3\n"
             ":tags: [hide-input]\n\nprint('tagged cell')\n```\n"}
    r = build(build_dir, TIMED.format(log=str(log), name="page"), pages=pages, env={"BOUNDS_NB_JOBS": "2"})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    runs = {name: (float(a), float(b)) for name, a, b in (line.split() for line in log.read_text().splitlines())}
    assert len(log.read_text().splitlines()) == 2 and set(runs) == {"page", "second"}, log.read_text()
    (a0, a1), (b0, b1) = runs["page"], runs["second"]
    assert a0 < b1 and b0 < a1, f"the two notebooks did not overlap in time: {runs}"
    assert "executing 2 notebook(s), 2 at a time" in out
    assert out.count("Using cached notebook") == 2 and "Executing notebook using" not in out
    assert "tagged cell" in (build_dir / "_build" / "html" / "second.html").read_text()
