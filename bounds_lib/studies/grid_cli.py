"""The options of the training-grid command ``python -m bounds_lib.studies.grid`` (Chapters 7–9).

:func:`build_parser` is the command line :func:`bounds_lib.studies.grid.main` reads; :func:`write_results`
writes a results file (:mod:`bounds_lib.studies.results`) the way every committed one was written.
"""
from __future__ import annotations

import argparse
import json

from .results import GRID_COMMAND

__all__ = ["build_parser", "preset_key", "write_results"]


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """The argument parser of ``python -m bounds_lib.studies.grid`` (``--out``, ``--preset``, ``--jobs``, …).

    Examples
    --------
    >>> args = build_parser().parse_args(["--out", "r.json", "--preset", "study", "--small"])
    >>> args.preset, args.small, args.jobs, preset_key(args)
    ('study', True, 1, 'study-small')
    """
    ap = argparse.ArgumentParser(prog=GRID_COMMAND, description=description)
    ap.add_argument("--out", required=True, help="results JSON file to write")
    ap.add_argument("--preset", choices=("full", "common-loss", "study", "robust", "robust-large",
                                         "robust-replication", "digits", "robust-replication-large"), default="full",
                    help="'full': the fixed-step grid of trained_grid.json; 'common-loss': every model trained "
                         "to a common training loss (trained_common_loss.json); 'study': the spectrum-shaping "
                         "study of Chapter 8 (spectrum_study.json); 'robust': the pre-registered robust study "
                         "of Chapter 9 on the planted teacher (study_robust.json); 'robust-large': its larger "
                         "replication, for a cluster (--scheduler); 'robust-replication' and 'digits': the "
                         "replication grid of Chapter 9's amendment (three teacher draws per rank, five seeds) "
                         "and its real-data task; 'robust-replication-large': the replication for a cluster")
    ap.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="dispatch the configs through this Dask distributed scheduler (default: local)")
    ap.add_argument("--small", action="store_true", help="tiny grid of the preset with the same format (seconds)")
    ap.add_argument("--stop-loss", type=float, default=None,
                    help="train each model until its full-batch training loss is <= this (overrides the preset)")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="the step budget: steps per model, or the most with a stop loss (overrides the preset)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    ap.add_argument("--weights-dir", default=None,
                    help="also save every trained model here (one checkpoint directory each, see save_model)")
    ap.add_argument("--reuse", default=None, nargs="+",
                    help="earlier results file(s): copy rows with identical configs instead of retraining")
    ap.add_argument("--select", default=None, nargs="+", metavar="KEY=V1,V2",
                    help="train only the configs whose field KEY takes one of the values (e.g. random_labels=true)")
    ap.add_argument("--merge", default=None, nargs="+", metavar="FILE",
                    help="write the rows of these complete results files, concatenated, to --out (no training)")
    ap.add_argument("--note", default=None, help="free text stored as metadata['note'] (provenance)")
    return ap


def preset_key(args) -> str:
    """The key of :data:`bounds_lib.studies.grid.PRESETS` that ``--preset`` and ``--small`` name."""
    if args.preset == "full":
        return "small" if args.small else "full"
    return args.preset + ("-small" if args.small else "")


def write_results(path, result: dict):
    """Write ``result`` to ``path`` as indented JSON with a final newline."""
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
