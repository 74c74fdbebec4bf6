"""``bounds-lib analyze``: spectra, p* and the bound proxies of one model, and their reports (Chapter 6).

``_analyze_one`` computes and scores one model's spectra (also for ``bounds-lib scaling``);
:func:`format_table` is the terminal table, ``_csv_text`` and ``_jsonable`` the CSV and JSON
reports, :func:`run_metadata` what every JSON report says about the run.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import math
import os
import platform
import sys
import time

from ..analysis.describe import report_rows
from .errors import PROG, printable
from .outputs import _finish, _print_table


def _progress_bar(label: str, enabled: bool):
    """A :mod:`tqdm` bar on stderr, driven by ``compute_spectra``'s ``progress(done, total)`` callback.

    Returns ``(callback, close)``; nothing is shown (and tqdm is not imported) when ``enabled`` is false.
    """
    if not enabled:
        return (lambda done, total: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(desc=label, total=None, file=sys.stderr, disable=not enabled, unit=" groups", leave=True)

    def callback(done: int, total: int):
        if bar.total != total:
            bar.reset(total=total)
        bar.update(done - bar.n)

    return callback, bar.close


#: What a JSON report says about the run that is the same for every run of this process (:func:`_lookup_facts`).
_FACTS: dict = {}


def _lookup_facts():
    """The platform and the installed versions of bounds_lib and SciPy, into :data:`_FACTS`, once a process.

    From the kernel, the C library and the ``.dist-info`` folders (:mod:`bounds_lib.core.facts`): about a
    millisecond, where ``platform.platform()`` and :mod:`importlib.metadata` took 35–50 ms of CPU, a third
    of what an analysis of all-MiniLM-L6-v2 spends beyond its SVDs. They used to run in a thread beside the
    SVDs, which a busy machine did not hide and which had to be joined on every way out. SciPy's version is
    read without importing SciPy (the analysis may not need it)."""
    from ..core.facts import dist_version, platform_text

    _FACTS.update(platform=platform_text(), bounds_lib=dist_version("bounds_lib") or "0+unknown",
                  scipy=dist_version("scipy") or "?")


def run_metadata(args, extra=None) -> dict:
    """Library versions, BLAS threads, dtype, mode, command line and time of the run."""
    import numpy

    if not _FACTS:
        _lookup_facts()
    versions = {"bounds_lib": _FACTS["bounds_lib"], "numpy": numpy.__version__, "scipy": _FACTS["scipy"],
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
        "platform": _FACTS["platform"],
        "versions": versions,
        "blas": blas,
        "dtype": args.dtype,
        "mode": args.mode,
        "logit_scale": args.logit_scale,
        "entrywise_11_norms_of_heads": args.entrywise,
        "jobs": args.jobs,  # as asked (0: chosen by the library; meta.parallel says what it chose)
        "device": _device_used(args.device),
    }
    parallel = getattr(args, "parallel", None)
    if parallel:  # how the work was spread: backend, workers and why (memory, cores), resumed units
        meta["parallel"] = ({"backend": parallel.get("backend")} if getattr(args, "reproducible", False)
                            else parallel)
    if not getattr(args, "reproducible", False):
        meta["time_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    meta.update(extra or {})
    return meta


def _fmt(log_x: float) -> str:
    """A positive number given by its natural log: plain when moderate, ``10^x`` otherwise."""
    l10 = log_x / math.log(10)
    if -3 < l10 < 6:
        return f"{math.exp(log_x):.4g}"
    return f"10^{l10:.2f}"


def format_table(report, spectra=None) -> str:
    """Per-layer terminal table, a per-expert table for a mixture-of-experts model, the model-level proxies."""
    import numpy as np

    from ..theory.model import MULTI_HEAD_MATRIX_TYPES

    a = report.arch
    lines = [f"{report.source}",
             f"  {a.model_type}: L={a.n_layers} N={a.hidden} heads={a.n_heads} kv_heads={a.n_kv_heads} "
             f"d_h={a.head_dim} d_ff={a.d_ff} {a.activation} (L_φ={report.L_phi:.4g}) | mode={report.mode} "
             f"dtype={report.dtype} "
             f"logit scale={report.logit_scale:.4g} | grid m={round(1 / report.grid[1])} ({report.grid.size} points)",
             ""]
    head = (f"{'layer':>5} {'max σ1 QK':>10} {'max σ1 Ṽ':>10} {'σ1 M_in':>9} {'σ1 M_out':>9} "
            f"{'rank QK':>8} {'rank Ṽ':>7} {'log10 depth α':>13} {'mean p*':>8} {'Σ 𝒯*':>10}")
    # α is the paper's depth weight (a Lipschitz product), not a power-law exponent: the table says so
    lines += [head, "-" * len(head)]
    for l in range(report.L):
        ms = {t: report.select(t, l) for t in MULTI_HEAD_MATRIX_TYPES}
        allm = report.select(layer=l)
        lines.append(
            f"{l:>5} {max(m.sigma1 for m in ms['QK']):>10.4g} {max(m.sigma1 for m in ms['V']):>10.4g} "
            f"{max(m.sigma1 for m in ms['M_in']):>9.4g} {max(m.sigma1 for m in ms['M_out']):>9.4g} "
            f"{np.mean([m.rank for m in ms['QK']]):>8.3g} {np.mean([m.rank for m in ms['V']]):>7.3g} "
            f"{report.log_alpha[l] / math.log(10):>13.2f} {np.mean([m.p_star for m in allm]):>8.3f} "
            f"{_fmt(float(np.logaddexp.reduce([m.log_T_star for m in allm]))):>10}")
    if a.n_experts:
        lines += _expert_table(report)
    s = report.summary()
    lines += ["",
              f"  B_ours (Σ 𝒯* + √L, released)        {_fmt(report.log_B_ours_sum)}",
              f"  B_ours (√Σ 𝒯*² + √L)                {_fmt(report.log_B_ours_rss)}",
              f"  B_Edelman ((2,1) norms, released)   {_fmt(report.log_B_edelman)}",
              f"  B_Edelman with (1,1) norms [extension, not released]  "
              f"{_fmt(report.log_B_11) if math.isfinite(report.log_B_11) else 'not computed (opt in: --entrywise)'}",
              f"  p* = 0 for {100 * s['fraction_p_star_zero']:.0f}% of {s['n_matrices']} matrices "
              "(𝒯(W;0) = √(rank·N) in the released proxy: a rank count)"]
    return "\n".join(lines + _meaning_lines(report, spectra))


def _meaning_lines(report, spectra=None) -> list:
    """What the numbers mean for this model, and what stands out (descriptive), below the table."""
    from ..analysis.describe import architecture_alone, standouts

    lines = ["", "  log10 depth α: the paper's depth weight α = Π_{k>ℓ} Λ_k (a Lipschitz product; not a power-law "
             "exponent)", f"  meaning: {architecture_alone(report)['statement']}",
             "  stands out from its kind (descriptive, |log10 value/median of kind|):"]
    for r in standouts(report, 3, spectra):
        lines.append(f"    {r['label']:<10} {r['quantity']:<23} {r['value']:.3g} (median of {r['kind']}: "
                     f"{r['median_of_kind']:.3g})")
    return lines


def _expert_table(report) -> list:
    """Lines of the per-expert table: every expert's ``M_in = [G | U]`` and ``M_out`` of every layer."""
    E = report.arch.n_experts
    head = (f"{'layer':>5} {'expert':>6} {'σ1 M_in':>9} {'σ1 M_out':>9} {'rank M_in':>9} {'rank M_out':>10} "
            f"{'p* M_in':>8} {'p* M_out':>8} {'𝒯* M_in':>10} {'𝒯* M_out':>10}")
    lines = ["", f"  {E} experts per layer (σ1 M_in / M_out above: the largest over them; the router is not a "
             "matrix of the bound):", head, "-" * len(head)]
    for l in range(report.L):
        for e in range(E):
            m_in, m_out = (next(m for m in report.select(t, l) if m.expert == e) for t in ("M_in", "M_out"))
            lines.append(f"{l:>5} {e:>6} {m_in.sigma1:>9.4g} {m_out.sigma1:>9.4g} {m_in.rank:>9d} {m_out.rank:>10d} "
                         f"{m_in.p_star:>8.3f} {m_out.p_star:>8.3f} {_fmt(m_in.log_T_star):>10} "
                         f"{_fmt(m_out.log_T_star):>10}")
    return lines


def _csv_text(rows) -> str:
    import csv

    rows = [{k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _spectra_text(sp, path) -> str:
    """Every singular value of ``sp``: a long CSV (one row per σ_i) when ``path`` ends in ``.csv``, else JSON."""
    from ..analysis.describe import spectra_rows

    if str(path).lower().endswith(".csv"):
        return _csv_text(spectra_rows(sp, long=True))
    return json.dumps(_jsonable({"model": sp.source, "mode": sp.mode, "dtype": sp.dtype,
                                 "matrices": spectra_rows(sp)}), ensure_ascii=False) + "\n"


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
    if isinstance(x, str):
        return printable(x)  # a folder name that is not UTF-8 (surrogate escapes) as \\xNN
    return x


def _device_used(asked) -> str:
    """The device the SVDs ran on (``auto`` resolved: ``cuda`` or ``cpu``)."""
    from ..analysis.devices import resolve_device

    try:
        return resolve_device(asked).name
    except (RuntimeError, ValueError, TypeError):  # checked before the run; a device gone since then
        return str(asked)


def _analyze_one(model, args, label=None):
    from ..analysis.scoring import ScoringOptions, score
    from ..analysis.spectra import compute_spectra

    show = sys.stderr.isatty() if args.progress is None else args.progress
    bar, close_bar = _progress_bar(label or "spectra", enabled=show)
    t0 = time.perf_counter()
    try:
        sp = compute_spectra(model, mode=args.mode, dtype=args.dtype, n_layers=args.layers, progress=bar,
                             entrywise=args.entrywise, allow_download=True if args.allow_download else None,
                             jobs=args.jobs, download_timeout=args.download_timeout, prefix=args.prefix,
                             scheduler=args.scheduler, scheduler_timeout=args.scheduler_timeout,
                             unit_timeout=args.unit_timeout,
                             resume=args.resume, device=args.device, threads=args.threads)
    finally:
        close_bar()
    t1 = time.perf_counter()
    opts = ScoringOptions(logit_scale=args.logit_scale, gamma_L_phi=args.gamma_lphi)
    rep = score(sp, opts)
    rep.meta.update({"seconds_spectra": t1 - t0, "seconds_score": time.perf_counter() - t1})
    args.parallel = sp.meta.get("parallel", {})
    return sp, rep, opts


def _figures(sp, rep, opts) -> dict:
    """The figures of ``--plots``, each made when it is written (:mod:`bounds_lib.analysis.plotting`)."""
    from ..analysis import plotting as P

    return {
        "spectral_decay": lambda: P.figure_spectral_decay(sp),
        "esd": lambda: P.figure_esd(sp),
        "p_star_histogram": lambda: P.figure_p_star_histogram(rep),
        "T_ratio": lambda: P.figure_T_ratio(rep),
        "norms": lambda: P.figure_norms(rep),
        "prefix_depth": lambda: P.figure_prefix_depth(sp, opts),
    }


def _cmd_analyze(args):
    sp, rep, opts = _analyze_one(args.model, args)
    texts = {}
    if args.json:  # what the report says about the run (only the JSON report has it)
        extra = {"model": args.model, "source": rep.source}
        if not args.reproducible:
            extra["timings_s"] = dict(rep.meta)
        d = rep.to_dict()
        d["meta"] = run_metadata(args, extra)
        texts[args.json] = json.dumps(_jsonable(d), indent=1, ensure_ascii=False) + "\n"
    if args.csv:
        texts[args.csv] = _csv_text(report_rows(rep))
    if getattr(args, "spectra", None) is not None:
        texts[args.spectra] = _spectra_text(sp, args.spectra)
    _finish(args, texts, _figures(sp, rep, opts) if args.plots is not None else {})
    _print_table(args, lambda: format_table(rep, sp))
    return 0
