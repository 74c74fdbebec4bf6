"""``bounds-lib`` — the paper's Section 6 analysis for any checkpoint, from the terminal (Chapter 6).

    bounds-lib analyze MODEL [--mode clean|paper] [--json F] [--csv F] [--plots DIR] ...
    bounds-lib compare A B [--json F] [--csv F] [--rows N] [--top-k K] ...
    bounds-lib scaling MODEL MODEL ... [--json F] [--csv F] [--plots DIR]
    bounds-lib --version

``MODEL`` is a local model directory or a Hugging Face Hub id resolved through the local cache
(downloads only with ``--allow-download`` or ``BOUNDS_LIB_ALLOW_DOWNLOAD=1``, never while
``HF_HUB_OFFLINE`` is set; a download waits at most ``--download-timeout`` seconds).

Outputs are all or nothing: every report and figure is computed completely and written to a
temporary file next to its destination, then all are renamed into place together, under a lock on
each destination folder (a second run writing there waits for the renames, up to a minute, so two
runs never leave a mixed set or roll back over each other); if anything fails (or the run is
interrupted by SIGINT, SIGTERM or SIGHUP, which are held off during the renames) the files of this
run are removed and replaced files restored, so the message "nothing was written" is true when
printed. Output paths are checked before any work (folder exists and is writable; no two outputs on
the same file; no output on a file the model is read from — its ``config.json``, its weights and
shards, a Hub snapshot's files). An existing report keeps its file mode; an output path that is a
symbolic link is written *through* (the file it points to is replaced, the link stays); ``-`` is
standard output (the table is then not printed), and an output that is not a regular file
(``/dev/null``, a FIFO, ``/dev/stdout``) is written through, never replaced; a socket or block
device is refused.
``--reproducible`` omits times and timings from the JSON report, so that two runs give identical
bytes. Errors print one line and exit with status 1 (``--debug`` shows the traceback); bad usage
exits with status 2; a stopping signal exits with 128 + its number; a closed pipe (``| head``) ends
the program quietly with status 141, as for Unix tools stopped by SIGPIPE.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from pathlib import Path

from . import analyze, compare, errors, outputs, preflight, scaling, signals
from .errors import PROG, printable

__all__ = ["main", "build_parser"]


def _parse_logit_scale(text: str):
    if text in ("1", "none"):
        return 1.0
    if text in ("inv_sqrt_dh", "inv-sqrt-dh", "1/sqrt(d_h)"):
        return "inv_sqrt_dh"
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'inv_sqrt_dh', got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"logit scale must be positive and finite, got {text!r}")
    return v


def _parse_device(text: str) -> str:
    """``--device``: a name :func:`bounds_lib.analysis.devices.resolve_device` knows (whether it is present is
    checked later)."""
    from ..analysis.devices import DEVICE_CHOICES, is_device_name

    if is_device_name(text):
        return text
    raise argparse.ArgumentTypeError(f"unknown device {text!r}; supported: {', '.join(DEVICE_CHOICES)}")


class _VersionAction(argparse.Action):
    """``--version``: the installed version, looked up only when asked (``importlib.metadata`` costs ~25 ms)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        import bounds_lib

        print(f"{PROG} {bounds_lib.__version__}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """An argument parser that suggests the closest option or command for a mistyped one (``--jsno``: ``--json``)."""

    def error(self, message):
        parser_options = [o for a in self._actions for o in a.option_strings]
        for a in self._actions:  # the options of every command, for an error reported by the top parser
            for sp in getattr(a, "choices", None) or {}:
                if isinstance(a.choices, dict) and isinstance(a.choices[sp], argparse.ArgumentParser):
                    parser_options += [o for b in a.choices[sp]._actions for o in b.option_strings]
        super().error(message + _suggestion(message, parser_options))


def _suggestion(message: str, options: list) -> str:
    """`` (did you mean --json?)`` for each unknown option or command of ``message`` with a close match."""
    import difflib
    import re

    words = []
    if message.startswith("unrecognized arguments:"):
        words = [w.split("=")[0] for w in message.split(":", 1)[1].split() if w.startswith("-")]
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        options, words = re.findall(r"'([^']*)'", choice.group(2)) or options, [choice.group(1)]
    hints = [f"{m[0]} for {w}" for w in words if (m := difflib.get_close_matches(w, sorted(set(options)), n=1))]
    return f" (did you mean: {', '.join(hints)}?)" if hints else ""


def build_parser() -> argparse.ArgumentParser:
    """The ``bounds-lib`` argument parser: ``analyze``, ``compare`` and ``scaling`` and their options."""
    from ..analysis.describe import COLUMNS, COMPARE_COLUMNS, columns_help

    raw = argparse.RawDescriptionHelpFormatter
    p = _Parser(prog=PROG, description="Spectrum-adaptive bound proxies (Sakai & Imaizumi, "
                "arXiv 2605.07297, Section 6) for Transformer checkpoints.")
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("analyze", help="spectra, p*, and the bound proxies of one model", formatter_class=raw,
                       epilog="columns of --csv and of the JSON report's matrices:\n" + columns_help(COLUMNS))
    a.add_argument("model", help="model directory, Hub id, or an ONNX export (.onnx)")
    _add_common_options(a)
    a.add_argument("--spectra", type=Path, metavar="FILE",
                   help="write every singular value: long CSV (layer, head, expert, kind, tensors, i, sigma) when "
                        "FILE ends in .csv, else JSON")
    c = sub.add_parser("compare", help="two checkpoints of one architecture, matrix by matrix (what a fine-tune "
                       "changed), most changed first", formatter_class=raw,
                       epilog="columns of --csv and of the JSON report's matrices:\n" + columns_help(COMPARE_COLUMNS))
    c.add_argument("models", nargs=2, metavar="MODEL", help="A then B: model directories, Hub ids or ONNX exports")
    _add_model_options(c)
    c.add_argument("--json", type=Path, help="write the comparison as JSON (atomically; - for stdout)")
    c.add_argument("--csv", type=Path, help="write one row per matrix, ranked; - for stdout")
    c.add_argument("--rows", type=int, default=10, help="rows of the terminal table (default 10)")
    c.add_argument("--top-k", type=int, default=10, help="size of the top singular subspaces whose principal "
                   "angles are compared (default 10)")
    c.set_defaults(plots=None)
    _add_compute_options(c)
    _add_run_options(c)
    s = sub.add_parser("scaling", help="the paper's depth and width figures for a family of checkpoints")
    s.add_argument("models", nargs="+", help="model directories or Hub ids")
    _add_common_options(s)
    return p


def _add_common_options(sp):
    """The options both commands take, in the order ``--help`` lists them."""
    _add_model_options(sp)
    _add_output_options(sp)
    _add_compute_options(sp)
    _add_run_options(sp)


def _add_model_options(sp):
    """How the spectra are computed and scored: mode, dtype, logit scale, γ, layers, tensor-name prefix."""
    sp.add_argument("--mode", choices=("clean", "paper"), default="clean",
                    help="clean: QR-core spectra with exact zeros (default); paper: explicit N×N products "
                         "and full SVDs as the released code")
    sp.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    sp.add_argument("--logit-scale", type=_parse_logit_scale, default=1.0,
                    help="multiply every QK_h: 1 (released, default), inv_sqrt_dh, or a number")
    sp.add_argument("--gamma-lphi", action="store_true", help="put L_φ into γ (the released γ omits it)")
    sp.add_argument("--layers", type=int, default=None, help="analyse only the first K layers (a prefix)")
    sp.add_argument("--prefix", default=None, metavar="NAME_PREFIX",
                    help="the tensor-name prefix of the layer stack to analyse when the weights hold "
                         "several (e.g. 'teacher.'); without it such a file is refused")


def _add_output_options(sp):
    """The reports and figures: ``--json``, ``--csv``, ``--plots``."""
    sp.add_argument("--json", type=Path, help="write the full report as JSON (atomically; - for stdout)")
    sp.add_argument("--csv", type=Path,
                    help="write one row per matrix (analyze) or per model (scaling); - for stdout")
    sp.add_argument("--plots", type=Path, help="write the figures as PNG files into this folder")


def _add_compute_options(sp):
    """Where and how the decompositions run: threads, jobs, a Dask scheduler, resuming, the device."""
    sp.add_argument("--threads", type=int, default=1,
                    help="BLAS threads (default 1: the matrices are small, and threaded BLAS on a busy "
                         "machine can be many times slower; 0 leaves the BLAS default)")
    sp.add_argument("--jobs", type=int, default=0,
                    help="worker processes, each decomposing one part of a layer at a time with --threads "
                         "BLAS threads (default 0: chosen — one per free CPU core where the work pays for "
                         "starting them, fewer if memory allows fewer, else this process alone; 1: in this "
                         "process, the Python API's default, jobs=1; results are identical for every value)")
    sp.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="dispatch the parts of the layers through this Dask distributed scheduler (extra "
                         "'grid'); the model folder must be at the same path on every worker")
    sp.add_argument("--scheduler-timeout", type=float, default=10.0, metavar="SECONDS",
                    help="give up when the scheduler does not answer, has no worker or loses all its "
                         "workers for this many seconds (default 10)")
    sp.add_argument("--unit-timeout", type=float, default=None, metavar="SECONDS",
                    help="with --scheduler: give up when no part of a layer has finished for this many "
                         "seconds (default: no limit while the cluster has workers)")
    sp.add_argument("--resume", type=Path, default=None, metavar="DIR",
                    help="store every finished part in DIR at once and reuse the parts found there (same "
                         "checkpoint, mode, dtype, device): an interrupted run resumes where it stopped")
    sp.add_argument("--device", type=_parse_device, default=None, metavar="{cpu,cuda,cuda:K,auto,torch-cpu}",
                    help="where the dense SVDs run: cpu (NumPy/LAPACK, the default), cuda or cuda:K (torch on "
                         "that GPU, float64 unless --dtype float32), auto (cuda when torch sees one, else cpu), "
                         "torch-cpu (the torch code path on the CPU)")


def _add_run_options(sp):
    """The (1,1) norms, Hub downloads, reproducible reports, the progress bar, ``--quiet`` and ``--debug``."""
    ew = sp.add_mutually_exclusive_group()
    ew.add_argument("--entrywise", dest="entrywise", action="store_true", default=False,
                    help="also compute the (1,1) norms of the head products and the (1,1) extension of "
                         "B_Edelman (opt-in: they need every explicit N×N head product, about 15%% more "
                         "time; nothing else uses them; the Python API computes them by default, "
                         "entrywise=True)")
    ew.add_argument("--no-entrywise", dest="entrywise", action="store_false",
                    help="skip the (1,1) norms (the default)")
    sp.add_argument("--allow-download", action="store_true",
                    help="download Hub models missing from the local cache (unless HF_HUB_OFFLINE is set)")
    sp.add_argument("--download-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="give up a Hub download after this many seconds (default 600, at most one "
                         "week); every request also waits at most 20 s for the server")
    sp.add_argument("--reproducible", action="store_true",
                    help="omit times and timings from the JSON report (identical runs give identical bytes)")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="always show the progress bar (default: only on a terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false")
    sp.add_argument("--quiet", action="store_true", help="no table on stdout")
    sp.add_argument("--debug", action="store_true", help="show tracebacks")


#: The cyclic garbage collector's thresholds while the command runs as its own process (:func:`_tune_process`).
GC_THRESHOLDS = (200_000, 30, 30)


def _tune_process():
    """Settings for a process that is this command (not a caller's, which calls :func:`main` with ``argv``).

    The allocator keeps freed arrays for the next ones (:func:`bounds_lib.analysis.pool.tune_allocator`:
    a tenth of an all-MiniLM-L6-v2 run went to page faults), and the garbage collector runs every
    200 000 allocations instead of 700 (:data:`GC_THRESHOLDS`): importing the library and scoring create
    some 100 000 objects and hardly a cycle, and the default thresholds spent 10-15 ms collecting nothing."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)  # first: importing the analysis modules below is most of the objects
    from ..analysis.pool import tune_allocator

    tune_allocator()


def main(argv=None) -> int:
    """Entry point of the ``bounds-lib`` console script; returns the exit status.

    Called without ``argv`` (the console script, ``python -m bounds_lib``) the process is the command's own
    and is tuned for it (``_tune_process``); when it ends, its objects are frozen (``gc.freeze``), so
    that the interpreter's exit frees them without a last traversal by the cyclic garbage collector
    (20-30 ms: every object NumPy and the library made; the outputs are written and closed by then). A
    caller passing ``argv`` keeps its process as it is."""
    own_process = argv is None
    try:
        rc = _main(list(sys.argv[1:] if argv is None else argv), own_process)
    finally:
        if own_process:
            import gc

            gc.freeze()
    if own_process and rc in _STOPPED:
        _end_stopped(rc)
    return rc


#: The exit statuses of a run stopped by SIGHUP, SIGINT or SIGTERM (128 + the signal's number).
_STOPPED = frozenset(128 + int(s) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM))


def _end_stopped(rc: int):
    """End a stopped command's own process now, with its status: its line is printed, nothing was written
    or what was is complete, the workers are ended. The interpreter's shutdown would still join the
    executors' threads first, and once (1 run in some hundreds, under load) one of them kept a process
    that had printed "stopped by SIGHUP" alive past 30 s."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(rc)


def _main(argv: list, own_process: bool) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors: argparse prints and exits with 2
    args.argv = argv
    try:
        with signals._stop_signals_raise():
            if own_process:
                _tune_process()
            preflight._check_outputs(args)
            run = {"analyze": analyze._cmd_analyze, "compare": compare._cmd_compare,
                   "scaling": scaling._cmd_scaling}[args.command]
            from ..analysis.threads import blas_threads

            with blas_threads(args.threads):  # the API's policy (scoring and plots included)
                rc = run(args)
            sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's final flush
        return rc
    except BrokenPipeError:
        return signals._quiet_broken_pipe()
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        signum = getattr(exc, "signum", signal.SIGINT)
        what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print(f"\n{PROG}: {what}; {outputs._written_note(args)}", file=sys.stderr)
        return 128 + int(signum)
    except Exception as exc:  # one clear line unless --debug
        if args.debug:
            raise
        msg = " ".join(str(exc).split()) or type(exc).__name__
        from ..analysis.cluster import ClusterError

        # the library's own refusals read as a sentence; anything else is named by its type
        if not isinstance(exc, (errors._UserError, ValueError, TypeError, OSError, MemoryError, ClusterError)):
            msg = f"{type(exc).__name__}: {msg}"
        sys.stderr.write("\n" if getattr(sys.stderr, "isatty", lambda: False)() else "")
        print(f"{PROG}: error: {printable(msg)}", file=sys.stderr)
        return 1
