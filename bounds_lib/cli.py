"""``bounds-lib`` — the paper's Section 6 analysis for any checkpoint, from the terminal (Chapter 6).

    bounds-lib analyze MODEL [--mode clean|paper] [--json F] [--csv F] [--plots DIR] ...
    bounds-lib scaling MODEL MODEL ... [--json F] [--csv F] [--plots DIR]

``MODEL`` is a local model directory or a Hugging Face Hub id resolved through the local cache
(downloads only with ``--allow-download`` or ``BOUNDS_LIB_ALLOW_DOWNLOAD=1``, never while
``HF_HUB_OFFLINE`` is set). Every report is computed completely before anything is written, and
files are written atomically (a temporary file in the same folder, then ``os.replace``): a failed
run leaves no partial report. Errors print one line and exit with status 1 (``--debug`` shows the
traceback); bad usage exits with status 2.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "build_parser", "run_metadata", "format_table", "write_atomic", "ProgressBar"]

PROG = "bounds-lib"


class ProgressBar:
    """A one-line progress bar with elapsed time and ETA on ``stream`` (stderr by default)."""

    def __init__(self, label: str, stream=None, enabled: bool = True, width: int = 28):
        self.label, self.stream, self.enabled, self.width = label, stream or sys.stderr, enabled, width
        self.t0 = time.perf_counter()
        self._last = -1.0

    def __call__(self, done: int, total: int):
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        el = now - self.t0
        frac = done / total if total else 1.0
        eta = el / frac - el if frac > 0 else float("nan")
        bar = "#" * int(round(frac * self.width))
        self.stream.write(f"\r{self.label} [{bar:<{self.width}}] {done}/{total} {el:5.1f}s elapsed, ETA {eta:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def write_atomic(path, data: str | bytes):
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run_metadata(args, extra=None) -> dict:
    """Library versions, BLAS threads, dtype, mode, command line and time of the run."""
    import numpy
    import scipy

    import bounds_lib

    versions = {"bounds_lib": bounds_lib.__version__, "numpy": numpy.__version__, "scipy": scipy.__version__,
                "python": platform.python_version()}
    for mod in ("torch", "transformers", "safetensors", "huggingface_hub"):
        if mod in sys.modules:
            versions[mod] = getattr(sys.modules[mod], "__version__", "?")
    blas = []
    try:
        from threadpoolctl import threadpool_info

        blas = [{"api": i.get("internal_api"), "threads": i.get("num_threads"), "version": i.get("version")}
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # pragma: no cover - threadpoolctl missing
        blas = [{"env_OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}]
    meta = {
        "command": [PROG] + list(getattr(args, "argv", [])),
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "versions": versions,
        "blas": blas,
        "dtype": args.dtype,
        "mode": args.mode,
        "logit_scale": args.logit_scale,
        "entrywise_11_norms_of_heads": args.entrywise,
        "jobs": args.jobs or (os.cpu_count() or 1),
    }
    meta.update(extra or {})
    return meta


def _fmt(log_x: float) -> str:
    """A positive number given by its natural log: plain when moderate, ``10^x`` otherwise."""
    l10 = log_x / math.log(10)
    if -3 < l10 < 6:
        return f"{math.exp(log_x):.4g}"
    return f"10^{l10:.2f}"


def format_table(report) -> str:
    """Per-layer terminal table plus the model-level proxies."""
    import numpy as np

    a = report.arch
    lines = [f"{report.source}",
             f"  {a.model_type}: L={a.n_layers} N={a.hidden} heads={a.n_heads} kv_heads={a.n_kv_heads} "
             f"d_h={a.head_dim} d_ff={a.d_ff} | mode={report.mode} dtype={report.dtype} "
             f"logit scale={report.logit_scale:.4g} | grid m={round(1 / report.grid[1])} ({report.grid.size} points)",
             ""]
    head = (f"{'layer':>5} {'max σ1 QK':>10} {'max σ1 Ṽ':>10} {'σ1 M_in':>9} {'σ1 M_out':>9} "
            f"{'rank QK':>8} {'rank Ṽ':>7} {'log10 α':>8} {'mean p*':>8} {'Σ T*':>10}")
    lines += [head, "-" * len(head)]
    for l in range(report.L):
        ms = {k: report.select(k, l) for k in ("QK", "V", "M_in", "M_out")}
        allm = report.select(layer=l)
        lines.append(
            f"{l:>5} {max(m.sigma1 for m in ms['QK']):>10.4g} {max(m.sigma1 for m in ms['V']):>10.4g} "
            f"{ms['M_in'][0].sigma1:>9.4g} {ms['M_out'][0].sigma1:>9.4g} "
            f"{np.mean([m.rank for m in ms['QK']]):>8.3g} {np.mean([m.rank for m in ms['V']]):>7.3g} "
            f"{report.log_alpha[l] / math.log(10):>8.2f} {np.mean([m.p_star for m in allm]):>8.3f} "
            f"{_fmt(float(np.logaddexp.reduce([m.log_T_star for m in allm]))):>10}")
    s = report.summary()
    lines += ["",
              f"  B_ours (Σ T* + √L, released)        {_fmt(report.log_B_ours_sum)}",
              f"  B_ours (√Σ T*² + √L)                {_fmt(report.log_B_ours_rss)}",
              f"  B_Edelman ((2,1) norms, released)   {_fmt(report.log_B_edelman)}",
              f"  B_Edelman with (1,1) norms [extension, not released]  "
              f"{_fmt(report.log_B_edelman_11) if math.isfinite(report.log_B_edelman_11) else 'not computed (--no-entrywise)'}",
              f"  p* = 0 for {100 * s['fraction_p_star_zero']:.0f}% of {s['n_matrices']} matrices "
              "(T(W;0) = √(rank·N): a rank count)"]
    return "\n".join(lines)


def _csv_text(rows) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _jsonable(x):
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Spectrum-adaptive bound proxies (Sakai & Imaizumi, "
                                "arXiv 2605.07297, Section 6) for Transformer checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        sp.add_argument("--mode", choices=("clean", "paper"), default="clean",
                        help="clean: QR-core spectra with exact zeros (default); paper: explicit N×N products "
                             "and full SVDs as the released code")
        sp.add_argument("--dtype", choices=("float64", "float32"), default="float64")
        sp.add_argument("--logit-scale", type=_parse_logit_scale, default=1.0,
                        help="multiply every QK_h: 1 (released, default), inv_sqrt_dh, or a number")
        sp.add_argument("--gamma-lphi", action="store_true", help="put L_φ into γ (the released γ omits it)")
        sp.add_argument("--layers", type=int, default=None, help="analyse only the first K layers (a prefix)")
        sp.add_argument("--json", type=Path, help="write the full report as JSON (atomically)")
        sp.add_argument("--csv", type=Path, help="write one row per matrix (analyze) or per model (scaling)")
        sp.add_argument("--plots", type=Path, help="write the figures as PNG files into this folder")
        sp.add_argument("--threads", type=int, default=1,
                        help="BLAS threads (default 1: the matrices are small, and threaded BLAS on a busy "
                             "machine can be many times slower; 0 leaves the BLAS default)")
        sp.add_argument("--jobs", type=int, default=0,
                        help="layers decomposed concurrently, one BLAS thread each (default 0: one per CPU "
                             "core; results are identical for every value)")
        sp.add_argument("--no-entrywise", dest="entrywise", action="store_false",
                        help="skip the (1,1) norms of the head products (they need the explicit N×N products; "
                             "the (1,1) extension of B_Edelman is then not reported)")
        sp.add_argument("--allow-download", action="store_true",
                        help="download Hub models missing from the local cache (unless HF_HUB_OFFLINE is set)")
        g = sp.add_mutually_exclusive_group()
        g.add_argument("--progress", dest="progress", action="store_true", default=None,
                       help="always show the progress bar (default: only on a terminal)")
        g.add_argument("--no-progress", dest="progress", action="store_false")
        sp.add_argument("--quiet", action="store_true", help="no table on stdout")
        sp.add_argument("--debug", action="store_true", help="show tracebacks")

    a = sub.add_parser("analyze", help="spectra, p*, and the bound proxies of one model")
    a.add_argument("model", help="model directory or Hub id")
    common(a)
    s = sub.add_parser("scaling", help="the paper's depth and width figures for a family of checkpoints")
    s.add_argument("models", nargs="+", help="model directories or Hub ids")
    common(s)
    return p


class _UserError(Exception):
    pass


def _check_outputs(args):
    for opt in ("json", "csv"):
        path = getattr(args, opt)
        if path is not None:
            if path.exists() and path.is_dir():
                raise _UserError(f"--{opt} {path}: is a directory")
            if not path.parent.is_dir():
                raise _UserError(f"--{opt} {path}: folder {path.parent} does not exist")
    if args.plots is not None and args.plots.exists() and not args.plots.is_dir():
        raise _UserError(f"--plots {args.plots}: exists and is not a folder")
    if args.layers is not None and args.layers < 1:
        raise _UserError(f"--layers must be >= 1, got {args.layers}")
    if args.threads < 0:
        raise _UserError(f"--threads must be >= 0, got {args.threads}")
    if args.jobs < 0:
        raise _UserError(f"--jobs must be >= 0, got {args.jobs}")


def _write_plots(folder: Path, figures: dict):
    """Render every figure into a temporary folder first, then move the files into ``folder``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".bounds-lib-plots-", dir=folder))
    try:
        for name, make in figures.items():
            fig = make()
            fig.savefig(tmp / f"{name}.png", dpi=110)
            plt.close(fig)
        for f in tmp.iterdir():
            os.replace(f, folder / f.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:  # a failed run leaves nothing behind, not even the folder it made
            shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)


def _analyze_one(model, args, label=None):
    from .proxies import ScoringOptions, compute_spectra, score

    show = sys.stderr.isatty() if args.progress is None else args.progress
    bar = ProgressBar(label or "spectra", enabled=show)
    t0 = time.perf_counter()
    sp = compute_spectra(model, mode=args.mode, dtype=args.dtype, layers=args.layers, progress=bar,
                         entrywise=args.entrywise, allow_download=True if args.allow_download else None,
                         jobs=args.jobs)
    t1 = time.perf_counter()
    opts = ScoringOptions(logit_scale=args.logit_scale, gamma_L_phi=args.gamma_lphi)
    rep = score(sp, opts)
    rep.meta.update({"seconds_spectra": t1 - t0, "seconds_score": time.perf_counter() - t1})
    return sp, rep, opts


def _cmd_analyze(args):
    from . import proxies as P

    sp, rep, opts = _analyze_one(args.model, args)
    meta = run_metadata(args, {"model": args.model, "source": rep.source, "timings_s": dict(rep.meta)})
    outputs = {}
    if args.json:
        d = rep.to_dict()
        d["meta"] = meta
        outputs[args.json] = json.dumps(_jsonable(d), indent=1, ensure_ascii=False) + "\n"
    if args.csv:
        outputs[args.csv] = _csv_text([m.to_row() for m in rep.matrices])
    if args.plots:
        _write_plots(args.plots, {
            "spectral_decay": lambda: P.figure_spectral_decay(sp),
            "p_star_histogram": lambda: P.figure_p_star_histogram(rep),
            "T_ratio": lambda: P.figure_T_ratio(rep),
            "norms": lambda: P.figure_norms(rep),
            "prefix_depth": lambda: P.figure_prefix_depth(sp, opts),
        })
    for path, text in outputs.items():
        write_atomic(path, text)
    if not args.quiet:
        print(format_table(rep))
    return 0


def _cmd_scaling(args):
    from . import proxies as P

    reports = []
    for i, model in enumerate(args.models):
        _, rep, _ = _analyze_one(model, args, label=f"[{i + 1}/{len(args.models)}] {model}"[-40:])
        reports.append((model, rep))
    rows = []
    for model, r in reports:
        s = r.summary()
        rows.append({"model": model, "L": r.L, "N": r.N, "heads": r.arch.n_heads,
                     "log10_B_ours_sum": s["B_ours_sum"]["log10"], "log10_B_ours_rss": s["B_ours_rss"]["log10"],
                     "log10_B_edelman": s["B_edelman"]["log10"],
                     "log10_B_edelman_11_extension": s["B_edelman_11_extension"]["log10"],
                     "fraction_p_star_zero": s["fraction_p_star_zero"]})
    outputs = {}
    if args.json:
        outputs[args.json] = json.dumps(_jsonable({"models": rows, "meta": run_metadata(args)}), indent=1,
                                        ensure_ascii=False) + "\n"
    if args.csv:
        outputs[args.csv] = _csv_text(rows)
    if args.plots:
        _write_plots(args.plots, {"scaling": lambda: P.figure_scaling([r for _, r in reports])})
    for path, text in outputs.items():
        write_atomic(path, text)
    if not args.quiet:
        head = f"{'model':<44} {'L':>3} {'N':>5} {'log10 B_ours':>13} {'log10 B_Edelman':>16} {'p*=0':>6}"
        print(head)
        print("-" * len(head))
        for r in rows:
            print(f"{r['model'][-44:]:<44} {r['L']:>3} {r['N']:>5} {r['log10_B_ours_sum']:>13.3f} "
                  f"{r['log10_B_edelman']:>16.3f} {100 * r['fraction_p_star_zero']:>5.0f}%")
    return 0


def main(argv=None) -> int:
    """Entry point of the ``bounds-lib`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors: argparse prints and exits with 2
    args.argv = argv
    try:
        _check_outputs(args)
        run = _cmd_analyze if args.command == "analyze" else _cmd_scaling
        if args.threads == 0:
            return run(args)
        from threadpoolctl import threadpool_limits

        from . import proxies  # noqa: F401  (loads numpy's and scipy's BLAS: threadpoolctl limits loaded ones only)

        with threadpool_limits(args.threads):
            return run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"\n{PROG}: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line unless --debug
        if args.debug:
            raise
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, (_UserError, ValueError, OSError)):
            msg = f"{type(exc).__name__}: {msg}"
        sys.stderr.write(f"\n" if getattr(sys.stderr, "isatty", lambda: False)() else "")
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 1
