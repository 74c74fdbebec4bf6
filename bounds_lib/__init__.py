"""bounds_lib — executable companion to Sakai & Imaizumi (arXiv 2605.07297).

The entry points a notebook user wants are available at the top level::

    import bounds_lib
    report = bounds_lib.analyze("path/or/hub-id")          # spectra + scores of a checkpoint
    spectra = bounds_lib.compute_spectra(source)
    report = bounds_lib.score(spectra)
    source = bounds_lib.open_checkpoint("path/or/hub-id")

They are imported on first use (module ``__getattr__``), so ``import bounds_lib`` stays light: it
loads neither NumPy's linear algebra nor torch. The version is the installed distribution's
(``pyproject.toml`` is its one home).

The library is built in layers, lowest first (:data:`LAYERS`): ``core`` (input rules, figure style),
``theory`` (the mathematics of Chapters 1–5), ``checks`` (their checks and witnesses), ``checkpoints``
(reading real weights), ``analysis`` (spectra, scheduling, scoring: Chapter 6), ``studies`` (training,
grids and the studies of Chapters 7–9), ``teaching`` (exercises, interactive figures) and ``cli``
(the ``bounds-lib`` command). A module imports only from its own layer or lower ones.
"""
from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("bounds_lib")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

#: The subpackages from the lowest layer to the highest; a module never imports from a higher one
#: (the import graph, function-level imports included, is checked by the test suite).
LAYERS = ("core", "theory", "checks", "checkpoints", "analysis", "studies", "teaching", "cli")

# public name -> module that defines it (imported lazily)
_LAZY = {
    "analyze": "bounds_lib.analysis.scoring",
    "compute_spectra": "bounds_lib.analysis.spectra",
    "score": "bounds_lib.analysis.scoring",
    "open_checkpoint": "bounds_lib.checkpoints",
}

__all__ = ["__version__", "analyze", "compute_spectra", "score", "open_checkpoint"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bounds_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
