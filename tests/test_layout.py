"""The layout tells one story: the library's folders are its layers, the import graph has no circle
and never climbs back, no module is a re-export shim of an old path, rooms stay small, every module is
in the README's tree and on the API page, and docstrings cite the book, never internal notes.

The scanners are tested on planted defects (a back-import, a circle through a function-level import,
a re-added shim), in a copy of the real package."""
from __future__ import annotations

import ast
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

import bounds_lib

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "bounds_lib"
LAYERS = bounds_lib.LAYERS
#: The flat module names the library had before its subpackages; none may come back as a module.
OLD_FLAT = ("validation", "_logspace", "style", "glue", "norms", "model", "interpolation", "propagation", "peeling",
            "orders", "theorem", "checks_orders", "witnesses", "spectra", "scoring", "parallel", "devices", "report",
            "plotting", "tasks", "torch_model", "training", "grid", "results", "reproduce", "stats", "trained_report",
            "study", "exercises", "interactive", "experiments", "proxies", "falsification", "_moved")
MAX_MODULE_LINES = 600
MAX_FUNCTION_CODE_LINES = 60
#: Functions allowed over the limit, each with its reason.
LONG_FUNCTIONS: dict[str, str] = {}
#: Modules allowed over the limit, each with its reason.
LONG_MODULES: dict[str, str] = {}
NOT_ON_API_PAGE = {"bounds_lib.__main__", "bounds_lib.core.glue"}


def module_name(path: Path, root: Path) -> str:
    parts = ("bounds_lib",) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def modules(root: Path = LIB) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def import_graph(root: Path = LIB) -> dict[str, set[str]]:
    """``{module: modules it imports}`` inside the library, function-level imports included.

    ``from .pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg`` (its
    ``__init__``, which imports the package's modules: so importing a sibling through the package
    makes a circle)."""
    mods = modules(root)
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("bounds_lib")]
                edges |= {t for t in targets if t in mods}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                elif (node.module or "").startswith("bounds_lib"):
                    base = node.module
                else:
                    continue
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
        graph[name] = edges - {name}
    return graph


def layer(module: str) -> int:
    """The layer index of a module. ``bounds_lib`` itself (the version, :data:`bounds_lib.LAYERS`, entry
    points imported lazily by name: no import edge) sits below all; ``bounds_lib.__main__`` above all."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else len(LAYERS)


def back_imports(graph) -> list[str]:
    """Edges from a lower layer to a higher one."""
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs if layer(b) > layer(a))


def circles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def shim_violations(source: str) -> list[str]:
    """What in a module is more than imports, ``__all__``, a docstring and a lazy ``__getattr__``: an empty
    list means the module is a re-export shim."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
        out.append(f"line {node.lineno}: {type(node).__name__}")
    return out


def shims(root: Path = LIB) -> list[str]:
    """Modules (not a package's ``__init__``, which is its subpackage's documented API) that only re-export."""
    return sorted(n for n, p in modules(root).items()
                  if p.name != "__init__.py" and p.name != "__main__.py" and not shim_violations(p.read_text()))


def private_re_exports(root: Path = LIB) -> list[str]:
    """Private names a package ``__init__`` imports from its modules (its API is public names only)."""
    out = []
    for name, path in modules(root).items():
        if path.name != "__init__.py" or path.parent == root:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                out += [f"{name}: {a.name}" for a in node.names if a.name.startswith("_") and a.name != "__future__"]
    return out


def code_lines(node, lines) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    rows = {i for b in body for i in range(b.lineno, b.end_lineno + 1)}
    return sum(1 for i in rows if lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def long_functions(root: Path = LIB) -> list[str]:
    out = []
    for name, path in modules(root).items():
        src = path.read_text()
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = code_lines(node, lines)
                key = f"{name}.{node.name}"
                if n > MAX_FUNCTION_CODE_LINES and key not in LONG_FUNCTIONS:
                    out.append(f"{key}: {n} lines of code")
    return out


# ------------------------------------------------------------------------------------------------ the real tree

def test_every_layer_is_a_subpackage_and_every_module_sits_in_one():
    assert sorted(p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(LAYERS)
    top = sorted(p.name for p in LIB.glob("*.py"))
    assert top == ["__init__.py", "__main__.py"], f"modules outside the layers: {top}"


def test_the_import_graph_has_no_circle():
    assert circles(import_graph()) == []


def test_no_layer_imports_a_higher_one():
    assert back_imports(import_graph()) == []


def test_no_shim_and_no_old_module_path():
    assert shims() == []
    assert private_re_exports() == []
    for old in OLD_FLAT:
        assert importlib.util.find_spec(f"bounds_lib.{old}") is None, f"bounds_lib.{old} still imports"


def test_rooms_are_small():
    big = [f"{n}: {len(p.read_text().splitlines())} lines" for n, p in modules().items()
           if len(p.read_text().splitlines()) > MAX_MODULE_LINES and n not in LONG_MODULES]
    assert big == []
    assert long_functions() == []


def _readme_tree() -> list[str]:
    """Module paths (``theory/norms.py``) and folders the README's ``bounds_lib/`` tree names."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```text\nbounds_lib/\n(.*?)```", text, re.S)
    assert m, "README.md has no ```text bounds_lib/ tree"
    paths, folder = [], ""
    for line in m.group(1).splitlines():
        e = re.match(r"^([│ ]*)[├└]── (\S+)", line)
        if not e:
            continue
        depth, entry = len(e.group(1)) // 4, e.group(2)
        if depth == 0:
            folder = entry if entry.endswith("/") else ""
            paths.append(entry)
        else:
            paths.append(folder + entry)
    return paths


def test_the_readme_tree_is_the_package():
    files = {str(p.relative_to(LIB)) for p in LIB.rglob("*.py")}
    folders = {str(p.parent.relative_to(LIB)) + "/" for p in LIB.rglob("__init__.py") if p.parent != LIB}
    named = set(_readme_tree())
    implied = {f + "__init__.py" for f in folders}  # a folder's entry stands for its __init__
    assert (files | folders) - named - implied == set(), "modules missing from README's tree"
    assert {p for p in named if p.endswith(".py")} - files == set(), "README's tree names modules that do not exist"


def test_the_readme_layer_table_is_the_layer_order():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (\d) \| `(\w+)/` \|", text, re.M)
    assert [(int(i), name) for i, name in rows] == list(enumerate(LAYERS))


def test_api_page_documents_every_public_module():
    api = (ROOT / "book" / "api.md").read_text()
    documented = set(re.findall(r"automodule:: (bounds_lib[\w.]*)", api))
    public = {n for n in modules() if not any(part.startswith("_") for part in n.split(".")[1:])}
    assert documented == public - NOT_ON_API_PAGE


INTERNAL = re.compile(r"NOTES\.md|shared/|\bissue #?\d+|\b[Hh]elper\b|\bH\d{1,2}\b|/tmp/")


def internal_citations(source: str) -> list[str]:
    """Docstrings (module, classes, functions) that cite internal notes instead of the book."""
    tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [f"{getattr(n, 'name', '<module>')}: {m.group(0)!r}"
            for n in nodes if (m := INTERNAL.search(ast.get_docstring(n) or ""))]


@pytest.mark.parametrize("module", sorted(modules()))
def test_docstrings_cite_the_book_not_internal_notes(module):
    assert internal_citations(modules()[module].read_text()) == []


# ------------------------------------------------------------------------------- the scanners on planted defects

@pytest.fixture
def copy(tmp_path) -> Path:
    dest = tmp_path / "bounds_lib"
    shutil.copytree(LIB, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return dest


def _append(path: Path, text: str):
    path.write_text(path.read_text() + text)


def test_a_planted_back_import_is_found(copy):
    before = set(back_imports(import_graph(copy)))
    _append(copy / "theory" / "norms.py",
            "\n\ndef _planted():\n    from ..analysis import scoring\n    return scoring\n")
    planted = {"bounds_lib.theory.norms -> bounds_lib.analysis.scoring"}
    assert set(back_imports(import_graph(copy))) - before == planted


def test_a_planted_circle_through_a_function_level_import_is_found(copy):
    # theory.model imports theory.norms; a lazy import back closes a circle (as spectra <-> parallel once did)
    _append(copy / "theory" / "norms.py", "\n\ndef _planted():\n    from . import model\n    return model\n")
    assert ["bounds_lib.theory.model", "bounds_lib.theory.norms"] not in circles(import_graph(LIB))
    assert ["bounds_lib.theory.model", "bounds_lib.theory.norms"] in circles(import_graph(copy))


def test_importing_a_sibling_through_its_package_is_a_circle(copy):
    # checks/__init__ imports every checks module: a checks module importing the package closes a circle
    (copy / "checks" / "planted.py").write_text('"""x"""\nfrom . import CheckResult\n\nX = CheckResult\n')
    _append(copy / "checks" / "__init__.py", "\nfrom .planted import X\n")
    assert any("bounds_lib.checks.planted" in c for c in circles(import_graph(copy)))


def test_a_re_added_shim_is_found(copy):
    (copy / "studies" / "experiments.py").write_text(
        '"""Old home of the grid."""\nfrom .grid import main\n__all__ = ["main"]\n')
    assert set(shims(copy)) - set(shims(LIB)) == {"bounds_lib.studies.experiments"}
    _append(copy / "theory" / "__init__.py", "from .peeling import _RATIO\n")
    assert set(private_re_exports(copy)) - set(private_re_exports(LIB)) == {"bounds_lib.theory: _RATIO"}


def test_a_long_function_is_found(copy):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_CODE_LINES + 1))
    _append(copy / "core" / "glue.py", f'\n\ndef planted():\n    """Doc."""\n{body}')
    assert set(long_functions(copy)) - set(long_functions(LIB)) == {
        f"bounds_lib.core.glue.planted: {MAX_FUNCTION_CODE_LINES + 1} lines of code"}


def test_the_mutation_runner_knows_every_module():
    spec = importlib.util.spec_from_file_location("run_mutation", ROOT / "tests" / "mutation" / "run_mutation.py")
    rm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rm)
    for key in rm.TESTS:
        target = LIB / rm.dotted(key).replace(".", "/")
        assert target.is_dir() or target.with_suffix(".py").is_file(), key
        for t in rm.tests_for(key):
            file, _, test = t.partition("::")  # a test's node id names its file and a test function in it
            assert (ROOT / file).is_file(), (key, t)
            assert not test or f"def {test}(" in (ROOT / file).read_text(), (key, t)


def test_the_mutation_runner_copies_every_local_module_conftest_imports():
    """A helper ``conftest.py`` imports, directly or through another helper, missing from ``SUPPORT`` fails
    every mutation run's first test run: mutmut then reports every mutant as not checked
    (``tests/schedule.py`` once was missing, and then ``book/tools/phone_math_report.py``, which
    ``tests/book_html.py`` imports)."""
    spec = importlib.util.spec_from_file_location("run_mutation", ROOT / "tests" / "mutation" / "run_mutation.py")
    rm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rm)

    def local_imports(path: str) -> set:
        tree = ast.parse((ROOT / path).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        return {f"{d}/{m}.py" for m in imported for d in ("tests", "book/tools") if (ROOT / d / f"{m}.py").is_file()}

    local, todo = set(), ["tests/conftest.py"]
    while todo:
        new = local_imports(todo.pop()) - local
        local |= new
        todo.extend(new)
    assert {"tests/book_html.py", "book/tools/phone_math_report.py"} <= local  # found through book_html
    assert local - set(rm.SUPPORT) == set()
    assert all((ROOT / f).is_file() for f in rm.SUPPORT)


def test_the_shim_and_citation_scanners_find_what_they_look_for():
    shim = '"""Moved."""\nfrom .x import f\n__all__ = ["f"]\ndef __getattr__(name):\n    return 1\n'
    assert shim_violations(shim) == []
    assert shim_violations(shim + "LIMIT = 3\n") == ["line 6: Assign"]
    assert shim_violations(shim + "def g():\n    pass\n") == ["line 6: FunctionDef"]
    assert internal_citations('def f():\n    """Chapter 4, Lemma ch04-lem-shells."""\n') == []
    assert internal_citations('def f():\n    """See NOTES.md."""\n') == ["f: 'NOTES.md'"]
    assert internal_citations('class C:\n    """Fixed in issue 14 by H3."""\n') == ["C: 'issue 14'"]
