"""The layout tells one story: every library module is in the README's tree and on the API page,
the old import paths are re-exports only, and docstrings cite the book, never internal notes."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "bounds_lib"
#: Old import paths kept for one release: nothing but imports and a docstring (and the lazy ``__getattr__``).
SHIMS = {"proxies", "experiments", "falsification"}
NOT_ON_API_PAGE = SHIMS | {"__init__", "__main__", "glue"}
MODULES = sorted(p.stem for p in LIB.glob("*.py"))
#: Public modules (private helpers such as ``_moved`` are neither in the tree nor on the API page).
PUBLIC = [m for m in MODULES if not m.startswith("_")]


def _readme_tree() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```text\nbounds_lib/\n(.*?)```", text, re.S)
    assert m, "README.md has no ```text bounds_lib/ tree"
    return m.group(1)


@pytest.mark.parametrize("module", PUBLIC)
def test_every_module_is_in_the_readme_tree(module):
    assert re.search(rf"\b{module}\.py\b", _readme_tree()), f"bounds_lib/{module}.py missing from README's layout tree"


def test_the_readme_tree_names_no_missing_module():
    named = set(re.findall(r"([a-z_]+)\.py", _readme_tree()))
    assert named <= set(MODULES), f"README's tree names modules that do not exist: {sorted(named - set(MODULES))}"


def test_api_page_documents_every_module_but_the_shims():
    api = (ROOT / "book" / "api.md").read_text()
    documented = set(re.findall(r"automodule:: bounds_lib\.([a-z_]+)", api))
    assert documented == set(PUBLIC) - NOT_ON_API_PAGE
    assert not documented & SHIMS


def shim_violations(source: str) -> list[str]:
    """What in a re-export module is more than imports, ``__all__``, a docstring, a lazy ``__getattr__``
    and the ``python -m`` entry point of the old path."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":  # python -m old.path
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
        out.append(f"line {node.lineno}: {type(node).__name__}")
    return out


INTERNAL = re.compile(r"NOTES\.md|shared/|\bissue #?\d+|\b[Hh]elper\b|\bH\d{1,2}\b|/tmp/")


def internal_citations(source: str) -> list[str]:
    """Docstrings (module, classes, functions) that cite internal notes instead of the book."""
    tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [f"{getattr(n, 'name', '<module>')}: {m.group(0)!r}"
            for n in nodes if (m := INTERNAL.search(ast.get_docstring(n) or ""))]


@pytest.mark.parametrize("shim", sorted(SHIMS))
def test_old_import_paths_are_re_exports_only(shim):
    assert shim_violations((LIB / f"{shim}.py").read_text()) == []


@pytest.mark.parametrize("module", MODULES)
def test_docstrings_cite_the_book_not_internal_notes(module):
    assert internal_citations((LIB / f"{module}.py").read_text()) == []


def test_the_scanners_find_what_they_look_for():
    shim = '"""Moved."""\nfrom .x import f\n__all__ = ["f"]\ndef __getattr__(name):\n    return 1\n'
    assert shim_violations(shim) == []
    assert shim_violations(shim + "LIMIT = 3\n") == ["line 6: Assign"]
    assert shim_violations(shim + "def g():\n    pass\n") == ["line 6: FunctionDef"]
    assert internal_citations('def f():\n    """Chapter 4, Lemma ch04-lem-shells."""\n') == []
    assert internal_citations('def f():\n    """See NOTES.md."""\n') == ["f: 'NOTES.md'"]
    assert internal_citations('class C:\n    """Fixed in issue 14 by H3."""\n') == ["C: 'issue 14'"]
