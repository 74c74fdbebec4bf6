"""What a ``bounds-lib`` run checks before any computation: options, output paths, model files (Chapter 6).

Output paths are checked before any work (folder exists and is writable; no two outputs on the same
file; no output on a file the model is read from — its ``config.json``, its weights and shards, a Hub
snapshot's files), so that a run never fails after its long part for a reason known at its start.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import _UserError
from .outputs import _through_links, stream_target

_PLOT_NAMES = {"analyze": ("spectral_decay", "esd", "p_star_histogram", "T_ratio", "norms", "prefix_depth"),
               "scaling": ("scaling",)}


def _writable_folder(folder: Path, what: str):
    """``folder`` (or, if it does not exist yet, its nearest existing parent) must be a writable folder."""
    f = folder
    while not f.exists():
        if f.parent == f:
            break
        f = f.parent
    if not f.is_dir():
        raise _UserError(f"{what}: {f} is not a folder")
    if not os.access(f, os.W_OK | os.X_OK):
        raise _UserError(f"{what}: folder {f} is not writable")


def _model_folder_files(d: Path) -> list:
    """The files of model folder ``d`` a run reads: everything in it, plus the weights and shards
    :func:`bounds_lib.checkpoints.weight_files` chooses (shards in a subfolder named by the index too)."""
    from ..checkpoints import CheckpointError, weight_files

    files = [d / "config.json", *d.iterdir()]
    try:
        files += weight_files(d)
    except CheckpointError:
        pass  # reported, with its own message, when the model is opened
    return files


def _model_input_files(args) -> dict:
    """``{real path: model}`` of every file a model named on the command line is read from: the files of a
    local model folder, or of the Hub cache snapshot a Hub id resolves to (its ``config.json`` is a link
    into the cache's blobs, which a report must not replace)."""
    from ..checkpoints import CheckpointError, resolve_hub_id

    models = [args.model] if args.command == "analyze" else list(args.models)
    files = {}
    for m in models:
        if not str(m).strip():
            continue  # rejected with its own message when opened
        try:
            d = Path(m).expanduser()
            if not d.exists():
                try:  # only the local cache: nothing is downloaded to check the outputs
                    d = resolve_hub_id(str(m), allow_download=False)
                except (CheckpointError, ValueError, OSError, ImportError):
                    continue
            if d.is_dir():
                for f in _model_folder_files(d):
                    files[os.path.realpath(f)] = m
        except (OSError, RuntimeError):
            continue  # the model is checked (with a clear message) when it is opened
    return files


def _output_targets(args) -> dict:
    """``{option: [paths]}`` of every file the run would write."""
    out = {}
    for opt in ("json", "csv", "spectra"):
        if getattr(args, opt, None) is not None:
            out[f"--{opt}"] = [getattr(args, opt)]
    if args.plots is not None:
        out["--plots"] = [args.plots / f"{n}.png" for n in _PLOT_NAMES[args.command]]
    return out


def _check_outputs(args):
    """Everything about the outputs that can fail, checked before any computation."""
    _check_numbers(args)
    _check_resume_and_device(args)
    _check_download_timeout(args)
    for opt in ("json", "csv", "spectra"):
        _check_report_path(opt, getattr(args, opt, None))
    if args.plots is not None:
        if args.plots.exists() and not args.plots.is_dir():
            raise _UserError(f"--plots {args.plots}: exists and is not a folder")
        _writable_folder(args.plots, f"--plots {args.plots}")
    _check_distinct_outputs(args)


def _check_numbers(args):
    """``--layers``, ``--threads``, ``--jobs`` and the two scheduler timeouts are in range."""
    if args.layers is not None and args.layers < 1:
        raise _UserError(f"--layers must be >= 1, got {args.layers}")
    if args.threads < 0:
        raise _UserError(f"--threads must be >= 0, got {args.threads}")
    if args.jobs < 0:
        raise _UserError(f"--jobs must be >= 0, got {args.jobs}")
    if not (math.isfinite(args.scheduler_timeout) and args.scheduler_timeout > 0):
        raise _UserError(f"--scheduler-timeout must be a positive number of seconds, got {args.scheduler_timeout:g}")
    if args.unit_timeout is not None and not (math.isfinite(args.unit_timeout) and args.unit_timeout > 0):
        raise _UserError(f"--unit-timeout must be a positive number of seconds, got {args.unit_timeout:g}")


def _check_resume_and_device(args):
    """The ``--resume`` folder can be written; the ``--device`` is present (unless a scheduler runs the work)."""
    if args.resume is not None:
        if args.resume.exists() and not args.resume.is_dir():
            raise _UserError(f"--resume {args.resume}: exists and is not a folder")
        _writable_folder(args.resume, f"--resume {args.resume}")
    if args.device is not None and args.scheduler is None:
        from ..analysis.devices import resolve_device

        try:
            resolve_device(args.device)
        except (RuntimeError, ValueError) as exc:
            raise _UserError(str(exc)) from None


def _check_download_timeout(args):
    """``--download-timeout`` is a positive number of seconds, at most one week."""
    from ..checkpoints.hub import MAX_DOWNLOAD_TIMEOUT_S

    if not (math.isfinite(args.download_timeout) and 0 < args.download_timeout <= MAX_DOWNLOAD_TIMEOUT_S):
        raise _UserError(f"--download-timeout must be a positive number of seconds, at most "
                         f"{MAX_DOWNLOAD_TIMEOUT_S:g} (one week), got {args.download_timeout:g}")


def _check_report_path(opt: str, path):
    """The ``--json`` or ``--csv`` path ``path`` (``None``: not asked) can be written."""
    if path is None:
        return
    if str(path) in ("", "."):
        raise _UserError(f"--{opt}: the output path is empty")
    try:
        if stream_target(path) is not None:
            return  # '-', /dev/null, a FIFO, this process's stdout: written through, never replaced
    except _UserError as exc:
        raise _UserError(f"--{opt} {exc}") from None
    real = _through_links(path)
    if real.is_dir():
        raise _UserError(f"--{opt} {path}: is a directory")
    if not real.parent.is_dir():
        raise _UserError(f"--{opt} {path}: folder {real.parent} does not exist")
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise _UserError(f"--{opt} {path}: folder {real.parent} is not writable")


def _check_distinct_outputs(args):
    """No two outputs on the same file, none on the plots folder, and none on a file the model is read from."""
    seen = {}
    if args.plots is not None:
        seen[os.path.realpath(args.plots)] = f"--plots {args.plots} (a folder)"
    inputs = _model_input_files(args)
    for opt, paths in _output_targets(args).items():
        for path in paths:
            if opt == "--plots" and os.path.lexists(path) and not os.path.isfile(path):
                raise _UserError(f"{opt} {path}: exists and is not a regular file; a figure replaces only a "
                                 "regular file (move it away)")
            real = os.path.realpath(path)
            if real in seen:
                raise _UserError(f"{opt} {path}: the same file as {seen[real]}; give each output its own path")
            if real in inputs:
                raise _UserError(f"{opt} {path}: is a file of the model folder {inputs[real]} (an input); "
                                 "choose another path")
            seen[real] = f"{opt} {path}"
