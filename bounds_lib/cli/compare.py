"""``bounds-lib compare A B``: what changed from checkpoint A to B, matrix by matrix, most changed first (Chapter 6).

The numbers are :func:`bounds_lib.analysis.compare.compare`'s; the columns are described in
:data:`bounds_lib.analysis.describe.COMPARE_COLUMNS` (and in ``bounds-lib compare --help``).
"""
from __future__ import annotations

import json
import math
import sys

from .analyze import _csv_text, _fmt, _jsonable, _progress_bar, run_metadata
from .outputs import _finish, _print_table


def format_compare_table(cmp, n_rows: int) -> str:
    """The first ``n_rows`` ranked rows and the whole-model change of both bounds, as terminal text."""
    from ..analysis.describe import architecture_alone

    a, b = cmp.report_a, cmp.report_b
    head = (f"{'#':>3} {'matrix':<10} {'ΔF/‖A‖F':>9} {'Δ2/‖A‖2':>9} {'σ shift':>8} {'overlap':>7} "
            f"{'angle°':>6} {'p* A→B':>11} {'Δlog10 𝒯*':>9}  tensors")
    lines = [f"A: {a.source}", f"B: {b.source}", "", head, "-" * len(head)]
    for i, c in enumerate(cmp.changes[:n_rows], 1):
        lines.append(f"{i:>3} {c.label():<10} {c.rel_change_fro:>9.3g} {c.rel_change_spec:>9.3g} "
                     f"{c.sigma_shift:>8.3g} {c.subspace_overlap:>7.3f} {c.max_principal_angle_deg:>6.1f} "
                     f"{f'{c.p_star_a:.3g}→{c.p_star_b:.3g}':>11} "
                     f"{c.log10_T_star_b - c.log10_T_star_a:>9.3g}  {c.tensors}")
    s = cmp.summary()
    lines += ["", f"  {s['n_changed']} of {s['n_matrices']} matrices changed; p* changed for {s['n_p_star_changed']}",
              f"  B_ours     A {_fmt(a.log_B_ours_sum)}   B {_fmt(b.log_B_ours_sum)}   "
              f"Δlog10 {s['delta_log10_B_ours']:.3g}",
              f"  B_Edelman  A {_fmt(a.log_B_edelman)}   B {_fmt(b.log_B_edelman)}   "
              f"Δlog10 {s['delta_log10_B_edelman']:.3g}"]
    for name, rep in (("A", a), ("B", b)):
        lines.append(f"  {name}: {architecture_alone(rep)['statement']}")
    return "\n".join(lines)


def _cmd_compare(args):
    from ..analysis.compare import compare
    from ..analysis.scoring import ScoringOptions

    if args.rows < 0:
        from .errors import _UserError

        raise _UserError(f"--rows must be >= 0, got {args.rows}")
    show = sys.stderr.isatty() if args.progress is None else args.progress
    bar, close_bar = _progress_bar("spectra", enabled=show)
    try:
        cmp = compare(*args.models, mode=args.mode, top_k=args.top_k, progress=bar, prefix=args.prefix,
                      options=ScoringOptions(logit_scale=args.logit_scale, gamma_L_phi=args.gamma_lphi),
                      allow_download=True if args.allow_download else None, dtype=args.dtype, jobs=args.jobs,
                      n_layers=args.layers, entrywise=args.entrywise, device=args.device, resume=args.resume,
                      download_timeout=args.download_timeout, scheduler=args.scheduler,
                      scheduler_timeout=args.scheduler_timeout, unit_timeout=args.unit_timeout, threads=args.threads)
    finally:
        close_bar()
    args.parallel = cmp.report_a.meta.get("parallel", {})
    texts = {}
    if args.json:
        d = cmp.to_dict()
        d["meta"] = run_metadata(args, {"models": list(args.models)})
        texts[args.json] = json.dumps(_jsonable(d), indent=1, ensure_ascii=False) + "\n"
    if args.csv:
        texts[args.csv] = _csv_text([{k: ("" if isinstance(v, float) and not math.isfinite(v) else v)
                                      for k, v in r.items()} for r in cmp.rows()])
    _finish(args, texts, {})
    _print_table(args, lambda: format_compare_table(cmp, args.rows))
    return 0
