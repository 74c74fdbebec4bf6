"""``bounds-lib scaling``: the paper's depth and width figures for a family of checkpoints (Chapter 6)."""
from __future__ import annotations

import json

from .analyze import _analyze_one, _csv_text, _jsonable, run_metadata
from .outputs import _finish, _print_table


def _cmd_scaling(args):
    from ..analysis import plotting as P

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
    texts = {}
    if args.json:
        texts[args.json] = json.dumps(_jsonable({"models": rows, "meta": run_metadata(args)}), indent=1,
                                      ensure_ascii=False) + "\n"
    if args.csv:
        texts[args.csv] = _csv_text(rows)
    _finish(args, texts, {"scaling": lambda: P.figure_scaling([r for _, r in reports])})
    def table():
        head = f"{'model':<44} {'L':>3} {'N':>5} {'log10 B_ours':>13} {'log10 B_Edelman':>16} {'p*=0':>6}"
        lines = [head, "-" * len(head)]
        for r in rows:
            lines.append(f"{r['model'][-44:]:<44} {r['L']:>3} {r['N']:>5} {r['log10_B_ours_sum']:>13.3f} "
                         f"{r['log10_B_edelman']:>16.3f} {100 * r['fraction_p_star_zero']:>5.0f}%")
        return "\n".join(lines)

    _print_table(args, table)
    return 0
