"""The notebook generator behind `make notebooks` and `make student` (book/tools/make_notebooks.py).

Fast tests on a small fake book (two chapters, every MyST construct the chapters use); the real
chapters are converted in tests/test_notebooks_outside.py (after the book build).
"""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")
pytest.importorskip("pybtex")

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "book" / "tools" / "make_notebooks.py"
import make_notebooks as mk  # noqa: E402  (book/tools is on sys.path: conftest.py)

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

CH1 = HEADER + '''
(ch01_demo)=
# First demo

```{prf:lemma} A first lemma
:label: ch01-lem-first

Statement $\\norm{W}_2 \\le 1$.
```

(ch01-sec)=
## A section
'''

CH2 = HEADER + '''
(ch02_demo)=
# A demo chapter

Intro with $\\norm{W}_2$, as in {cite}`sakai2026spectrum`, using {prf:ref}`ch01-lem-first`
and {ref}`the section <ch01-sec>` of {ref}`Chapter 1 <ch01_demo>`.

```{code-cell} ipython3
from bounds_lib.core.glue import glue
glue("x_val", 3.14159, display=False)
glue("n_val", 42)
```

The value is {glue:text}`x_val:.2f` and the count {glue:text}`n_val:d`.

## Statements

```{prf:definition} A class
:label: ch02-def

A class $\\cF$.
```

````{prf:theorem} Main
:label: ch02-thm

It holds that

```{math}
:label: ch02-eq-main
a \\le b
```
````

```{prf:proof}
By {prf:ref}`ch02-def` and {eq}`ch02-eq-main`.
```

```{admonition} Careful
:class: warning

Mind {numref}`fig-demo`.
```

```{glue:figure} fig_demo
:name: fig-demo

A caption with {glue:text}`n_val`.
```

```python
print("{cite}`not-a-role-in-code`")
```

## Exercises

```{exercise-start}
:label: ex-demo-1
```
Compute the thing of {eq}`ch02-eq-main`.
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

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def _book(tmp_path, ch2=CH2):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "ch01_demo.md").write_text(CH1)
    (tmp_path / "notebooks" / "ch02_demo.md").write_text(ch2)
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: notebooks/ch01_demo\nparts:\n  - caption: Demo\n    numbered: true\n"
        "    chapters:\n      - file: notebooks/ch01_demo\n      - file: notebooks/ch02_demo\n")
    return mk.BookIndex(tmp_path)


def _executed(src):
    """What the book build's jupyter-cache holds for the demo chapter: outputs and glue records."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.source) for c in src.nb.cells if c.cell_type == "code"]
    rec = lambda name, data, prefix: nbformat.v4.new_output(  # noqa: E731
        "display_data", data={prefix + k: v for k, v in data.items()},
        metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})
    nb.cells[0].outputs = [
        rec("x_val", {"text/plain": "3.14159"}, mk.GLUE_PREFIX),
        rec("n_val", {"text/plain": "42"}, ""),
        rec("fig_demo", {"image/png": PNG, "text/plain": "<Figure>"}, mk.GLUE_PREFIX),
        nbformat.v4.new_output("stream", name="stdout", text="printed 1.5\n"),
    ]
    return nb


def _convert(tmp_path, edition, ch2=CH2):
    index = _book(tmp_path, ch2)
    src = index.sources["notebooks/ch02_demo"]
    return mk.convert(src, index, mk.Bibliography(), edition=edition, executed=_executed(src),
                      base_url="https://example.org/book", commit="0123456789abcdef")


def _markdown(nb):
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_launch_notebook_is_plain_jupyter_markdown(tmp_path):
    nb, removed = _convert(tmp_path, "launch")
    text = _markdown(nb)
    assert removed == 0
    assert mk.notebook_raw_myst(nb) == 0
    # macros cell first, then the numbered title, then the install cell
    assert mk.MACROS_TAG in nb.cells[0].metadata["tags"] and "\\newcommand{\\norm}[1]" in nb.cells[0].source
    assert nb.cells[1].source == "# 2. A demo chapter"
    assert mk.INSTALL_TAG in nb.cells[2].metadata["tags"]
    # glue values formatted as on the page, in text and in captions
    assert "The value is 3.14 and the count 42." in text
    assert "*Fig. 2.1: A caption with 42.*" in text
    assert any("fig-demo.png" in c.get("attachments", {}) for c in nb.cells)
    # numbering per chapter and per kind, references as linked text
    assert "**Definition 2.1 (A class).** A class $\\cF$." in text
    assert "**Theorem 2.1 (Main).** It holds that" in text and "\\tag{2.1}" in text
    assert "*Proof.* By [Definition 2.1](https://example.org/book/notebooks/ch02_demo.html#ch02-def) and " \
           "[(2.1)](https://example.org/book/notebooks/ch02_demo.html#equation-ch02-eq-main). ∎" in text
    assert "[Lemma 1.1](https://example.org/book/notebooks/ch01_demo.html#ch01-lem-first)" in text
    assert "[the section](https://example.org/book/notebooks/ch01_demo.html#ch01-sec)" in text
    assert "[Chapter 1](https://example.org/book/notebooks/ch01_demo.html)" in text
    assert "> **Careful.** Mind [Fig. 2.1](https://example.org/book/notebooks/ch02_demo.html#fig-demo)." in text
    assert "## 2.1. Statements" in text and "## 2.2. Exercises" in text
    assert "**Exercise 2.1.**" in text and "**Exercise 2.2 (Second).** Another one." in text
    assert "**Solution to [Exercise 2.1](https://example.org/book/notebooks/ch02_demo.html#ex-demo-1).**" in text
    # citations author-year, with the reference list at the end
    assert "as in [Sakai and Imaizumi, 2026]" in text
    assert nb.cells[-1].source.startswith("## References") and "Spectrum" in nb.cells[-1].source
    # code fences are left alone, outputs are the book's, glue records are not shown twice
    assert '```python\nprint("{cite}`not-a-role-in-code`")\n```' in text
    first_code = next(c for c in nb.cells if c.cell_type == "code" and "glue(" in c.source)
    assert [o.get("text") for o in first_code.outputs] == ["printed 1.5\n"]
    assert "@0123456789abcdef" in nb.cells[2].source
    nbformat.validate(nb)


def test_student_edition_removes_every_solution_and_keeps_numbers(tmp_path):
    nb, removed = _convert(tmp_path, "student")
    text = "\n".join(c.source for c in nb.cells)
    assert removed == 3
    assert "SECRET" not in text and "secret_answer" not in text and "also_secret" not in text
    assert mk.PLACEHOLDER not in text  # the placeholder links to the solution online
    page = "https://example.org/book/notebooks/ch02_demo.html"
    assert text.count(mk.PLACEHOLDER_LINK.format(url=f"{page}#ex-demo-1")) == 1
    assert text.count(mk.PLACEHOLDER_LINK.format(url=f"{page}#ex-demo-2")) == 1
    assert "**Exercise 2.1.**" in text and "Compute the thing of [(2.1)]" in text
    assert "**Exercise 2.2 (Second).**" in text
    assert "Text between exercises." in text and "after = 2" in text
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert [c.source for c in nb.cells if c.cell_type == "code"].count(mk.ANSWER) == 1
    assert mk.notebook_raw_myst(nb) == 0
    nbformat.validate(nb)


@pytest.mark.parametrize("snippet, message", [
    ("```{tab-set}\nx\n```\n", "unknown MyST directive {tab-set}"),
    ("Text {kbdx}`Ctrl` here.\n", "unknown MyST role {kbdx}"),
    ("Value {glue:text}`nowhere`.\n", "glued value 'nowhere' not found"),
    ("See {prf:ref}`no-such-label`.\n", "target 'no-such-label' is defined nowhere"),
    ("Cite {cite}`nobody2099`.\n", "citation key 'nobody2099' is not in book/references.bib"),
])
def test_bad_myst_fails_with_file_and_line(tmp_path, snippet, message):
    ch2 = CH2.replace("## Statements\n", "## Statements\n\n" + snippet)
    line = ch2.splitlines().index("## Statements") + 3
    with pytest.raises(mk.MystError, match="unknown|not found|defined nowhere|not in book|never closed") as exc:
        _convert(tmp_path, "launch", ch2)
    assert message in str(exc.value)
    assert exc.value.path.name == "ch02_demo.md" and exc.value.line == line


def test_unclosed_fence_is_an_error(tmp_path):
    ch2 = CH2.replace("of {ref}`Chapter 1 <ch01_demo>`.\n",
                      "of {ref}`Chapter 1 <ch01_demo>`.\n\n```{prf:lemma} X\n:label: l-x\nopen\n")
    line = ch2.splitlines().index("```{prf:lemma} X") + 1
    with pytest.raises(mk.MystError, match="never closed") as exc:
        _convert(tmp_path, "launch", ch2)
    # jupytext reads the code cell after an unclosed fence as part of it: the error is at the fence
    # or at the first fence the unclosed one swallowed.
    assert line <= exc.value.line <= line + 4


def test_cli_names_the_chapter_with_an_unknown_directive_and_writes_only_the_others(tmp_path):
    _book(tmp_path)
    bad = tmp_path / "notebooks" / "ch02_demo.md"
    bad.write_text(HEADER + "\n# Bad\n\nSome text.\n\n```{mystery} arg\nbody\n```\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(TOOL), "student", "--out", str(out), "--build", str(tmp_path / "none"),
                        "--root", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1
    line = bad.read_text().splitlines().index("```{mystery} arg") + 1
    assert f"{bad}:{line}: unknown MyST directive {{mystery}}" in r.stderr
    assert sorted(p.name for p in out.glob("*.ipynb")) == ["ch01_demo.ipynb"]
    assert mk.verify_edition(out, tmp_path)[0].startswith(f"ch02_demo: failed ({bad}:{line}: unknown MyST")


def test_raw_myst_detector_has_power():
    text = "(lbl)=\n# T\n{glue:text}`a` and {eq}`b`\n```{prf:lemma}\n:label: x\n```\n$$ a $$ (eq1)\n"
    counts = mk.raw_myst_tokens(text)
    assert counts == {"role": 2, "directive": 1, "target": 1, "equation-label": 1, "option": 1}
    assert sum(mk.raw_myst_tokens("Plain **markdown** with $x$ and `code`.").values()) == 0


def test_unclosed_gated_solution_is_an_error(tmp_path):
    src = _book(tmp_path).sources["notebooks/ch02_demo"]
    src.nb.cells = [c for c in src.nb.cells if "solution-end" not in c.source]
    with pytest.raises(ValueError, match="solution-start"):
        mk.strip_solutions(src.nb)


def test_install_cell_pins_commit_and_asks_extra_only_when_needed():
    plain = mk.install_cell_source("import numpy as np", repo_url="https://github.com/o/r", ref="abc123")
    assert "'bounds_lib @ git+https://github.com/o/r@abc123'" in plain and "[notebooks]" not in plain
    heavy = mk.install_cell_source("import transformers\n", repo_url="https://github.com/o/r", ref="abc123")
    assert "bounds_lib[notebooks] @ git+https://github.com/o/r@abc123" in heavy
    assert "'transformers'" in heavy and "myst" not in heavy
    compile(heavy, "<install cell>", "exec")
    # the second real checkpoint's reader needs onnx (and the chapter pandas) without importing them
    implied = mk.install_cell_source("from bounds_lib.checkpoints.onnx_graph import paraphrase_minilm_l3_path\n",
                                     repo_url="https://github.com/o/r", ref="abc123")
    assert "[notebooks]" in implied and "'onnx', 'pandas'" in implied


def test_pages_url():
    assert mk.pages_url("https://github.com/Org/repo") == "https://org.github.io/repo"
    assert mk.pages_url("https://github.com/org/org.github.io") == "https://org.github.io"


def test_launch_urls_point_at_generated_notebooks():
    import book_reader as br  # the Sphinx extension (book/tools is on sys.path: conftest.py)

    colab = "https://colab.research.google.com/github/org/repo/blob/main/notebooks/ch01_setting.md"
    binder = "https://mybinder.org/v2/gh/org/repo/main?urlpath=tree/notebooks/ch01_setting.md"
    assert br.retarget_launch_url(colab, "notebooks") == (
        "https://colab.research.google.com/github/org/repo/blob/notebooks/notebooks/ch01_setting.ipynb")
    assert br.retarget_launch_url(binder, "notebooks") == (
        "https://mybinder.org/v2/gh/org/repo/notebooks?urlpath=tree/notebooks/ch01_setting.ipynb")
    assert br.retarget_launch_url("https://example.org/x.md", "nb") == "https://example.org/x.md"


def test_a_failing_chapter_is_named_and_the_others_are_still_written(tmp_path):
    """A cell that raises in one chapter: that chapter is reported, the others are written, and the
    tree is refused at publish time (``verify``)."""
    bad = CH2.replace("after = 2\n", "raise RuntimeError('planted failure')\n")
    _book(tmp_path, bad)
    out = tmp_path / "out"
    with pytest.raises(mk.EditionIncomplete, match=r"ch02_demo\.md: a cell raised RuntimeError: planted failure"):
        mk.build_edition("launch", out, None, root=tmp_path, log=lambda m: None)
    assert (out / "notebooks" / "ch01_demo.ipynb").is_file()
    assert not (out / "notebooks" / "ch02_demo.ipynb").exists()
    problems = mk.verify_edition(out, tmp_path)
    assert len(problems) == 1 and problems[0].startswith("ch02_demo: failed (a cell raised RuntimeError")
    # the command line: exit 1, the failed chapter on stderr, the written one on stdout
    proc = subprocess.run([sys.executable, str(TOOL), "launch", "--out", str(out), "--build", str(tmp_path / "none"),
                           "--root", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "error: ch02_demo.md not generated: a cell raised RuntimeError" in proc.stderr
    assert "ch01_demo.ipynb" in proc.stdout
    verify = subprocess.run([sys.executable, str(TOOL), "verify", str(out), "--root", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 1 and "ch02_demo: failed" in verify.stderr


def test_verify_refuses_a_missing_chapter_and_accepts_a_complete_edition(tmp_path):
    _book(tmp_path, CH1.replace("ch01", "ch02"))  # two chapters that need no execution
    out = tmp_path / "out"
    assert mk.verify_edition(out, tmp_path)[0].endswith("generate the edition first")
    mk.build_edition("student", out, None, root=tmp_path, log=lambda m: None)
    assert mk.verify_edition(out, tmp_path) == []
    (out / "ch01_demo.ipynb").unlink()
    assert mk.verify_edition(out, tmp_path) == [
        f"ch01_demo: listed as written but {out / 'ch01_demo.ipynb'} does not exist"]
    (tmp_path / "notebooks" / "ch03_new.md").write_text(CH1.replace("ch01", "ch03"))
    assert "ch03_new: missing from the edition" in mk.verify_edition(out, tmp_path)


GUIDE = """(guide)=
# A guide

Session on {ref}`ch02_demo`: the value is {glue:text}`../notebooks/ch02_demo.md::x_val:.1f` and the
count {glue:text}`../notebooks/ch02_demo.md::n_val:d`. Hand out the [edition](kit:student-edition.zip).
"""


def _kit_book(tmp_path):
    """The fake book with a reading guide, and a book build whose jupyter-cache holds both chapters."""
    index = _book(tmp_path)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "reading_guide.md").write_text(GUIDE)
    cache = tmp_path / "_build" / ".jupyter_cache" / "executed"
    cache.mkdir(parents=True)
    for k, doc in enumerate(("notebooks/ch01_demo", "notebooks/ch02_demo")):
        src = index.sources[doc]
        nbformat.write(_executed(src) if "ch02" in doc else nbformat.v4.new_notebook(), cache / f"{k}.ipynb")
    return tmp_path / "_build"


def test_the_course_kit_holds_every_handout(tmp_path):
    build = _kit_book(tmp_path)
    html = build / "html"
    out = mk.build_kit(html, build, tmp_path, log=lambda m: None)
    assert out["failed"] == []
    assert out["written"] == sorted([*mk.kit_files(tmp_path), "binder/postBuild", "binder/runtime.txt"])
    kit = html / mk.KIT
    executed = nbformat.read(kit / "notebooks" / "ch02_demo.ipynb", as_version=4)
    bare = nbformat.read(kit / "no-outputs" / "ch02_demo.ipynb", as_version=4)
    outputs = lambda nb: sum(len(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code")  # noqa: E731
    assert outputs(executed) > 0 and outputs(bare) == 0
    assert "SECRET" in _markdown(bare)  # without outputs, with the solutions
    with zipfile.ZipFile(kit / mk.STUDENT_ZIP) as z:
        assert z.namelist() == ["student-edition/ch01_demo.ipynb", "student-edition/ch02_demo.ipynb"]
        student = nbformat.reads(z.read("student-edition/ch02_demo.ipynb").decode(), as_version=4)
    assert "SECRET" not in "\n".join(c.source for c in student.cells) and outputs(student) == 0
    guide = nbformat.read(kit / mk.READING_GUIDE, as_version=4)
    text = _markdown(guide)
    assert "the value is 3.1 and the\ncount 42" in text and mk.notebook_raw_myst(guide) == 0
    assert not any(mk.INSTALL_TAG in c.metadata.get("tags", []) for c in guide.cells)  # no code: no install
    assert mk.PDF not in out["written"]
    (build / "latex").mkdir()
    (build / "latex" / mk.PDF).write_bytes(b"%PDF-1.5")
    assert mk.PDF in mk.build_kit(html, build, tmp_path, log=lambda m: None)["written"]


def test_a_student_edition_without_executions_links_its_values_and_runs_nothing(tmp_path, monkeypatch):
    import notebook_gen.editions as editions

    _book(tmp_path)
    executed = []

    def execute(src):
        executed.append(src.path.name)
        raise RuntimeError("not executed in this test")

    monkeypatch.setattr(editions, "execute_chapter", execute)
    out = tmp_path / "out"
    mk.build_edition("student", out, None, root=tmp_path, log=lambda m: None)
    assert executed == []
    text = _markdown(nbformat.read(out / "ch02_demo.ipynb", as_version=4))
    page = "https://bounds-lib.github.io/spectrum-adaptive-bounds/notebooks/ch02_demo.html"
    assert f"The value is [(value: see the book)]({page}) and the count [(value: see the book)]({page})." in text
    assert f"*Figure: [see the book]({page}#fig-demo).*" in text
    # the launch edition does execute (its outputs are the point)
    with pytest.raises(mk.EditionIncomplete, match="not executed in this test"):
        mk.build_edition("launch", tmp_path / "launch", None, root=tmp_path, log=lambda m: None)
    assert executed == ["ch01_demo.md", "ch02_demo.md"]


def test_a_value_glued_on_another_page_needs_that_pages_execution(tmp_path):
    index = _book(tmp_path)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "reading_guide.md").write_text(GUIDE)
    with pytest.raises(mk.MystError, match="glued value 'x_val' not found in notebooks/ch02_demo's execution"):
        mk.reading_guide_notebook(tmp_path / "no-build", tmp_path, index)


def test_the_course_kit_executes_nothing(tmp_path, monkeypatch):
    """A build without executions (make book-noexec's is skipped outright) gets no launch notebooks, and the
    kit names each chapter it lacks, instead of running the book a second time."""
    import notebook_gen.editions as editions

    _book(tmp_path)
    monkeypatch.setattr(editions, "execute_chapter", lambda src: pytest.fail(f"{src.path.name} executed"))
    out = mk.build_kit(tmp_path / "_build" / "html", tmp_path / "_build", tmp_path, log=lambda m: None)
    assert "no execution of ch02_demo.md" in out["failed"][0] and "ch01_demo.md" in out["failed"][0]
    assert mk.STUDENT_ZIP in out["written"]  # the student edition links its values instead
