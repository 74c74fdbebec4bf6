"""Old home of the trained-model experiments (Chapters 7–8); kept for one release as re-exports.

Everything that lived here has one home now:

* :mod:`bounds_lib.grid` — the training grids (presets, configurations, :func:`~bounds_lib.grid.run_config`,
  :func:`~bounds_lib.grid.run_grid`) and the command line :func:`~bounds_lib.grid.main`;
* :mod:`bounds_lib.results` — the results files (:data:`~bounds_lib.results.RESULTS_SCHEMA`,
  :func:`~bounds_lib.results.load_results`, reading, checking, merging), the row accessors
  (:func:`~bounds_lib.results.proxy_value`, :func:`~bounds_lib.results.variant_name`,
  :func:`~bounds_lib.results.unpack_correct`) and the single-head checkpoints
  (:func:`~bounds_lib.results.save_model`, :func:`~bounds_lib.results.load_model`);
* :mod:`bounds_lib.stats` — the rank statistics (:func:`~bounds_lib.stats.kendall_tau`,
  :func:`~bounds_lib.stats.granulated_kendall`, :func:`~bounds_lib.stats.scaling_slopes`) next to
  their bootstrap intervals;
* :mod:`bounds_lib.scoring` — the proxies of a single-head model
  (:func:`~bounds_lib.scoring.single_head_proxies`, :data:`~bounds_lib.scoring.PROXY_NAMES`) and the
  matrix types (``MATRIX_TYPES`` here is :data:`bounds_lib.scoring.SINGLE_HEAD_MATRIX_TYPES`).

The documented command keeps working and writes the same files::

    python -m bounds_lib.experiments --out bounds_lib/data/trained_grid.json

New code imports from the modules above; this module will be removed in the next release.
"""
from __future__ import annotations

from .grid import (COMMON_LOSS_GRID, FULL_GRID, PRESETS, SMALL_COMMON_LOSS_GRID, SMALL_GRID, SMALL_STUDY_GRID,
                   STUDY_GRID, grid_configs, main, parse_select, run_config, run_grid, select_configs,
                   study_configs)
from .results import (RESULTS_FILES, RESULTS_SCHEMA, ResultsError, check_results, load_model, load_results,
                      merge_results, proxy_value, read_results, save_model, unpack_correct, variant_name)
from .scoring import PROXY_NAMES, single_head_proxies
from .scoring import SINGLE_HEAD_MATRIX_TYPES as MATRIX_TYPES
from .stats import HYPERPARAMETERS, granulated_kendall, kendall_tau, scaling_slopes

__all__ = [
    "MATRIX_TYPES",
    "PROXY_NAMES",
    "single_head_proxies",
    "grid_configs",
    "run_config",
    "run_grid",
    "PRESETS",
    "FULL_GRID",
    "SMALL_GRID",
    "COMMON_LOSS_GRID",
    "SMALL_COMMON_LOSS_GRID",
    "STUDY_GRID",
    "SMALL_STUDY_GRID",
    "RESULTS_SCHEMA",
    "ResultsError",
    "check_results",
    "read_results",
    "load_results",
    "merge_results",
    "RESULTS_FILES",
    "parse_select",
    "select_configs",
    "study_configs",
    "variant_name",
    "unpack_correct",
    "save_model",
    "load_model",
    "HYPERPARAMETERS",
    "proxy_value",
    "kendall_tau",
    "granulated_kendall",
    "scaling_slopes",
    "main",
]

if __name__ == "__main__":  # pragma: no cover  (python -m bounds_lib.experiments: the grid's command line)
    raise SystemExit(main())
