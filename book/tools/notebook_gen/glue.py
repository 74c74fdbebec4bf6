"""Glue values from the book's executions.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from .common import _tags
from .index import ChapterSource

__all__ = ["cached_execution", "execute_chapter", "glue_data", "strip_glue_outputs"]

def glue_data(nb) -> dict[str, dict]:
    """``{name: mimebundle}`` of every value a notebook glued (``myst_nb.glue``)."""
    data = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            prefix = meta.get("mime_prefix", "")
            data[meta["name"]] = {k[len(prefix):]: v for k, v in out.get("data", {}).items() if k.startswith(prefix)}
    return data


def strip_glue_outputs(nb):
    """Remove the glue records from the cells' outputs (the page shows them in the text)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if "scrapbook" not in o.get("metadata", {})]
    return nb


def _code_sources(nb) -> list[str]:
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


#: What each executed notebook holds, by (file, modification time, size): its code and whether it glued
#: anything. The course kit matches 19 pages against the same dozen executions (reading each once
#: instead of once per page: 9 of the 33 s it took under a profiler).
_SIGNATURES: dict[tuple, tuple[list[str], bool]] = {}


def _signature(f: Path) -> tuple[list[str], bool] | None:
    st = f.stat()
    key = (str(f), st.st_mtime_ns, st.st_size)
    if key not in _SIGNATURES:
        try:
            nb = nbformat.read(f, as_version=4)
        except Exception:
            return None
        _SIGNATURES[key] = (_code_sources(nb), bool(glue_data(nb)))
    return _SIGNATURES[key]


def cached_execution(src: ChapterSource, build: Path | None):
    """The executed notebook of the book build whose code is this chapter's, or None."""
    if build is None:
        return None
    want = _code_sources(src.nb)
    for folder in (build / ".jupyter_cache" / "executed", build / "jupyter_execute"):
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*.ipynb")):
            sig = _signature(f)
            if sig is not None and sig[0] == want and (folder.name == "executed" or sig[1]):
                return nbformat.read(f, as_version=4)
    return None


def execute_chapter(src: ChapterSource, timeout: int = 900):
    """Execute the chapter in its folder with nbclient (when the book build has no execution)."""
    from nbclient import NotebookClient

    nb = copy.deepcopy(src.nb)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    keep = [k for k, c in enumerate(nb.cells) if "skip-execution" not in _tags(c)]
    run = copy.deepcopy(nb)
    run.cells = [run.cells[k] for k in keep]
    NotebookClient(run, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(src.path.parent)}}).execute()
    for k, done in zip(keep, run.cells):
        if done.cell_type == "code":
            nb.cells[k].outputs, nb.cells[k].execution_count = done.outputs, done.execution_count
    return nb
