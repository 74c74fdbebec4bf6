"""bounds_lib — executable companion to Sakai & Imaizumi (arXiv 2605.07297).

The entry points a notebook user wants are available at the top level::

    import bounds_lib
    report = bounds_lib.analyze("path/or/hub-id")          # spectra + scores of a checkpoint
    spectra = bounds_lib.compute_spectra(source)
    report = bounds_lib.score(spectra)
    source = bounds_lib.open_checkpoint("path/or/hub-id")    # also a .onnx export (extra "onnx")
    cmp = bounds_lib.compare("base", "fine-tune")           # what changed, matrix by matrix

They are imported on first use (module ``__getattr__``), so ``import bounds_lib`` stays light: it
loads neither NumPy's linear algebra nor torch, nor ``importlib.metadata`` (about 25 ms with the
e-mail parser it reads package metadata with). ``__version__`` is the installed distribution's
(``pyproject.toml`` is its one home), looked up on first use as well.

The library is built in layers, lowest first (:data:`LAYERS`): ``core`` (input rules, figure style),
``theory`` (the mathematics of Chapters 1–5), ``checks`` (their checks and witnesses), ``checkpoints``
(reading real weights), ``analysis`` (spectra, scheduling, scoring: Chapter 6), ``studies`` (training,
grids and the studies of Chapters 7–9), ``teaching`` (exercises, interactive figures) and ``cli``
(the ``bounds-lib`` command). A module imports only from its own layer or lower ones.
"""
from __future__ import annotations

import importlib

#: The subpackages from the lowest layer to the highest; a module never imports from a higher one
#: (the import graph, function-level imports included, is checked by the test suite).
LAYERS = ("core", "theory", "checks", "checkpoints", "analysis", "studies", "teaching", "cli")

# public name -> module that defines it (imported lazily)
_LAZY = {
    "analyze": "bounds_lib.analysis.scoring",
    "compute_spectra": "bounds_lib.analysis.spectra",
    "score": "bounds_lib.analysis.scoring",
    "open_checkpoint": "bounds_lib.checkpoints",
    "compare": "bounds_lib.analysis.compare",
}

__all__ = ["__version__", "analyze", "compute_spectra", "score", "open_checkpoint", "compare"]


def _installed_version() -> str:
    """The installed distribution's version (``"0+unknown"`` in a source tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bounds_lib")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        globals()[name] = value = _installed_version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bounds_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
