"""The notebook generator behind `make student` and `make notebooks` (book/tools/make_notebooks.py)."""

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "book" / "tools" / "make_notebooks.py")
mk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mk)

CHAPTER = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

(chxx_demo)=
# A demo chapter

Intro with $\\norm{W}_2$.

```{code-cell} ipython3
from myst_nb import glue
x = 1
```

## Exercises

```{exercise-start}
:label: ex-demo-1
```
Compute the thing.
```{exercise-end}
```

```{solution-start} ex-demo-1
:class: dropdown
```
SECRET prose of the first solution.

```{code-cell} ipython3
secret_answer = 42
```

More SECRET prose.
```{solution-end}
```

Text between exercises.

```{exercise} Second
:label: ex-demo-2
Another one.
```

````{solution} ex-demo-2
:class: dropdown
SECRET inline solution with a fence inside:
```python
print("SECRET")
```
````

```{code-cell} ipython3
:tags: [solution]
also_secret = 1
```

```{code-cell} ipython3
after = 2
```
'''


def _read(tmp_path):
    md = tmp_path / "chxx_demo.md"
    md.write_text(CHAPTER)
    return jupytext.read(md)


def test_student_edition_removes_every_solution(tmp_path):
    nb, n = mk.strip_solutions(mk.clear_outputs(_read(tmp_path)))
    mk.plain_exercises(nb)
    mk.prepare_for_jupyter(nb)
    text = "\n".join(c.source for c in nb.cells)
    assert n == 3
    assert "SECRET" not in text and "secret_answer" not in text and "also_secret" not in text
    assert "solution-start" not in text and "solution-end" not in text and "{solution}" not in text
    assert text.count(mk.PLACEHOLDER) == 2
    assert "**Exercise** (ex-demo-1)." in text and "Compute the thing." in text
    assert "Text between exercises." in text and "after = 2" in text and "x = 1" in text
    assert "(chxx_demo)=" not in text
    answers = [c for c in nb.cells if c.cell_type == "code" and c.source == mk.ANSWER]
    assert len(answers) == 1
    nbformat.validate(nb)


def test_generated_notebooks_start_with_macros_and_install_cell(tmp_path):
    nb = mk.prepare_for_jupyter(_read(tmp_path))
    mk.prepare_for_jupyter(nb)  # idempotent
    assert nb.cells[0].source.startswith("# A demo chapter")
    macros, install = nb.cells[1], nb.cells[2]
    assert mk.MACROS_TAG in macros.metadata["tags"] and "\\newcommand{\\norm}[1]" in macros.source
    assert mk.INSTALL_TAG in install.metadata["tags"] and install.cell_type == "code"
    assert sum(mk.INSTALL_TAG in c.metadata.get("tags", []) for c in nb.cells) == 1
    assert "myst-nb" in install.source and "bounds_lib @ git+" in install.source
    compile(install.source, "<install cell>", "exec")
    nbformat.validate(nb)


def test_unclosed_gated_solution_is_an_error(tmp_path):
    nb = _read(tmp_path)
    nb.cells = [c for c in nb.cells if "solution-end" not in c.source]
    with pytest.raises(ValueError, match="solution-start"):
        mk.strip_solutions(nb)


def test_launch_urls_point_at_generated_notebooks():
    spec = importlib.util.spec_from_file_location("book_reader", ROOT / "book" / "tools" / "book_reader.py")
    import sys

    sys.path.insert(0, str(ROOT / "book" / "tools"))
    try:
        br = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(br)
    finally:
        sys.path.remove(str(ROOT / "book" / "tools"))
    colab = "https://colab.research.google.com/github/org/repo/blob/main/notebooks/ch01_setting.md"
    binder = "https://mybinder.org/v2/gh/org/repo/main?urlpath=tree/notebooks/ch01_setting.md"
    assert br.retarget_launch_url(colab, "notebooks") == (
        "https://colab.research.google.com/github/org/repo/blob/notebooks/notebooks/ch01_setting.ipynb")
    assert br.retarget_launch_url(binder, "notebooks") == (
        "https://mybinder.org/v2/gh/org/repo/notebooks?urlpath=tree/notebooks/ch01_setting.ipynb")
    assert br.retarget_launch_url("https://example.org/x.md", "nb") == "https://example.org/x.md"
