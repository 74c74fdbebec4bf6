"""Old home of the Chapter 6 analysis — a thin re-export, kept for one release.

The code now lives in three modules (import from there):

* :mod:`bounds_lib.spectra` — :func:`~bounds_lib.spectra.compute_spectra`,
  :class:`~bounds_lib.spectra.ModelSpectra`, :class:`~bounds_lib.spectra.MatrixSpectrum`,
  :class:`~bounds_lib.spectra.SpectraCache`, :func:`~bounds_lib.spectra.head_product_spectra`,
  :func:`~bounds_lib.spectra.layer_spectra`, :data:`~bounds_lib.spectra.MODES`;
* :mod:`bounds_lib.scoring` — :func:`~bounds_lib.scoring.score`, :func:`~bounds_lib.scoring.analyze`,
  :class:`~bounds_lib.scoring.ScoringOptions`, :class:`~bounds_lib.scoring.MatrixScore`,
  :class:`~bounds_lib.scoring.BoundReport`, :func:`~bounds_lib.scoring.log10_or_value`, and the matrix
  types (``KINDS`` here is :data:`~bounds_lib.scoring.MULTI_HEAD_MATRIX_TYPES`);
* :mod:`bounds_lib.plotting` — the ``figure_*`` functions (``KIND_LABELS`` here is
  :data:`~bounds_lib.plotting.MATRIX_TYPE_LABELS`).
"""
from __future__ import annotations

from .plotting import MATRIX_TYPE_LABELS as KIND_LABELS
from .plotting import (
    figure_norms,
    figure_p_star_histogram,
    figure_prefix_depth,
    figure_scaling,
    figure_spectral_decay,
    figure_T_ratio,
)
from .scoring import MULTI_HEAD_MATRIX_TYPES as KINDS
from .scoring import BoundReport, MatrixScore, ScoringOptions, analyze, log10_or_value, score
from .spectra import (
    MODES,
    MatrixSpectrum,
    ModelSpectra,
    SpectraCache,
    compute_spectra,
    head_product_spectra,
    layer_spectra,
)

__all__ = [
    "KINDS",
    "MODES",
    "MatrixSpectrum",
    "ModelSpectra",
    "SpectraCache",
    "head_product_spectra",
    "layer_spectra",
    "compute_spectra",
    "ScoringOptions",
    "MatrixScore",
    "BoundReport",
    "score",
    "analyze",
    "log10_or_value",
    "KIND_LABELS",
    "figure_spectral_decay",
    "figure_p_star_histogram",
    "figure_T_ratio",
    "figure_norms",
    "figure_prefix_depth",
    "figure_scaling",
]
