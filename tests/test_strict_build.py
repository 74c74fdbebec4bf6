"""The strict build really is strict: a raising cell or a Sphinx warning fails it.

Each case builds a one-page scratch book with the repository's own ``_config.yml`` and the
Makefile's ``STRICT`` flags, so that a change that weakens the configuration fails here.
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


def build(tmp_path, body):
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    for folder in ("tools", "_static"):  # local Sphinx extensions and static files named in _config.yml
        if (ROOT / "book" / folder).is_dir():
            shutil.copytree(ROOT / "book" / folder, tmp_path / "book" / folder)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (tmp_path / "page.md").write_text(HEADER + body)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([str(JB), "build", str(tmp_path), *strict_flags(), "--all"],
                          capture_output=True, text=True, timeout=300, env=env)


pytestmark = [
    pytest.mark.slow,  # four scratch book builds, ~30 s
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
