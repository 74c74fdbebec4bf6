"""Regenerated results rows against committed ones, to a measured tolerance (Chapters 7–8).

The committed results files (:mod:`bounds_lib.studies.results`) were trained on one machine. Numbers that come
out of float32 training with torch's CPU kernels (MKL, oneDNN and ATen's vectorised loops, chosen by
the CPU's features), out of NumPy's OpenBLAS/LAPACK and out of their thread counts differ in their last
bits from one CPU kind to the next, so a row regenerated elsewhere is *not* bit for bit the committed
one. What holds, and what this module checks:

* **on one machine, bit for bit**: two regenerations with the same configuration, environment and
  thread count give identical rows (:func:`bitwise_equal`; a test asserts it);
* **on any machine, to a measured tolerance**: every continuous quantity of a regenerated row agrees
  with the committed one within :data:`FACTOR` × the largest spread measured over the CPU code paths
  of ``benchmarks/cpu_spread.py`` (``data/cpu_tolerance.json``); every discrete quantity (the
  configuration, error rates, step counts, p* on its grid, per-example results) agrees exactly.

How deviations are measured (:func:`deviations`): a scalar by ``|a − b| / max(|a|, |b|)``; an entry
of a vector of numbers (a loss curve, the singular values of one matrix) by ``|a − b|`` divided by
the largest magnitude in the committed vector — the norm-wise form in which LAPACK bounds the error of
singular values, which keeps numerically zero entries from dominating. A quantity is named by its path
in the row with list indices dropped (``proxies.B_ours_sum``, ``singular_values.QK[]``).

The rows that the chapters, the tests and the spread measurement regenerate are
:func:`reference_rows` — the cheapest of each committed file.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from importlib import resources

__all__ = [
    "FACTOR",
    "IGNORED_KEYS",
    "ReproductionError",
    "RowComparison",
    "flatten_row",
    "deviations",
    "bitwise_equal",
    "load_tolerances",
    "compare_rows",
    "check_row",
    "spread_summary",
    "spread_markdown",
    "row_cost",
    "cheapest_rows",
    "reference_rows",
    "regenerate",
    "main",
]

#: The tolerance of a continuous quantity is this many times the largest relative spread measured for
#: it across CPU code paths (``benchmarks/cpu_spread.py``).
FACTOR = 10.0
#: Row fields that are not results (the wall-clock training time and the checkpoint's file name).
IGNORED_KEYS = frozenset({"seconds", "weights_file"})
_TOLERANCE_FILE = "cpu_tolerance.json"
TOLERANCE_SCHEMA = "bounds_lib.cpu-tolerance/1"


class ReproductionError(AssertionError):
    """A regenerated row that does not reproduce its committed row within the tolerance."""


# ----------------------------------------------------------------------------- flattening and deviations

def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flatten_row(row: dict) -> dict:
    """The leaves of a results row: ``{path: value}`` with vectors of numbers kept whole.

    A leaf is a number, a string, a boolean, ``None`` or a list of numbers (a *vector*). Nested dicts
    and lists of lists are walked; their paths use ``.key`` and ``[i]``. The keys in
    :data:`IGNORED_KEYS` are left out at the top level.

    Examples
    --------
    >>> flatten_row({"a": 1.0, "b": {"c": [1.0, 2.0], "d": [[3.0], [4.0]]}, "seconds": 9.0})
    {'a': 1.0, 'b.c': [1.0, 2.0], 'b.d[0]': [3.0], 'b.d[1]': [4.0]}
    """
    out = {}

    def walk(path, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}" if path else str(k), x)
        elif isinstance(v, list) and v and all(_is_number(x) for x in v):
            out[path] = list(v)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{path}[{i}]", x)
        else:
            out[path] = v

    walk("", {k: v for k, v in row.items() if k not in IGNORED_KEYS})
    return out


def quantity(path: str) -> str:
    """The quantity a leaf belongs to: its path without list indices (``'b.d[1]'`` → ``'b.d[]'``)."""
    import re

    return re.sub(r"\[\d+\]", "[]", path)


def _rel(a: float, b: float, scale: float) -> float:
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)) or scale == 0.0:
        return math.inf
    return abs(a - b) / scale


def deviations(fresh: dict, committed: dict) -> dict:
    """Per quantity, the largest deviation of ``fresh`` from ``committed`` and whether it is discrete.

    Returns ``{quantity: (deviation, discrete)}``. ``discrete`` is true for integers, booleans,
    strings and ``None``; their deviation is 0 if equal and ``inf`` if not. A leaf present in one row
    only, a vector of another length or a number against a non-number is a deviation ``inf``.

    Examples
    --------
    >>> d = deviations({"x": 1.0 + 1e-9, "v": [2.0, 1e-12], "n": 3}, {"x": 1.0, "v": [2.0, 0.0], "n": 3})
    >>> round(d["x"][0] / 1e-9, 6), d["v"][0], d["n"]
    (1.0, 5e-13, (0.0, True))
    """
    a, b = flatten_row(fresh), flatten_row(committed)
    out: dict = {}

    def put(q, dev, discrete):
        old = out.get(q, (0.0, discrete))
        out[q] = (max(old[0], dev), old[1] and discrete)

    for path in a.keys() | b.keys():
        q = quantity(path)
        if path not in a or path not in b:
            put(q, math.inf, False)
            continue
        x, y = a[path], b[path]
        if isinstance(y, list):
            if not isinstance(x, list) or len(x) != len(y):
                put(q, math.inf, False)
                continue
            scale = max(abs(v) for v in y)
            put(q, max(_rel(float(u), float(v), scale) for u, v in zip(x, y)), False)
        elif isinstance(y, float) and isinstance(x, float):
            put(q, _rel(x, y, max(abs(x), abs(y))), False)
        else:
            put(q, 0.0 if (x == y and type(x) is type(y)) else math.inf, True)
    return out


def bitwise_equal(fresh: dict, committed: dict) -> bool:
    """Every leaf identical (``==`` on the JSON values), :data:`IGNORED_KEYS` left out."""
    return flatten_row(fresh) == flatten_row(committed)


# ----------------------------------------------------------------------------- the measured tolerance

def load_tolerances(path=None) -> dict:
    """The measured spreads and tolerances (``data/cpu_tolerance.json``, or ``path``), checked.

    Returns the file's dict; ``["tolerance"]`` maps each continuous quantity to its tolerance and
    ``["spread"]`` to the largest relative spread measured. Refused with :class:`ValueError`: another
    schema, a negative or non-finite tolerance, a tolerance below ``FACTOR`` × its spread.
    """
    if path is None:
        text = resources.files("bounds_lib").joinpath("data", _TOLERANCE_FILE).read_text()
        source = f"bounds_lib/data/{_TOLERANCE_FILE}"
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        source = str(path)
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("schema") != TOLERANCE_SCHEMA:
        raise ValueError(f"{source}: not a tolerance file of format {TOLERANCE_SCHEMA!r}")
    tol, spread, factor = data.get("tolerance"), data.get("spread"), data.get("factor")
    if not isinstance(tol, dict) or not isinstance(spread, dict) or tol.keys() != spread.keys():
        raise ValueError(f"{source}: 'tolerance' and 'spread' must map the same quantities")
    for q, t in tol.items():
        if not (_is_number(t) and math.isfinite(t) and t >= 0 and t >= factor * spread[q] * (1 - 1e-12)):
            raise ValueError(f"{source}: tolerance of {q!r} is {t!r}; it must be finite, >= 0 and "
                             f">= factor × spread = {factor * spread[q]:.3g}")
    return data


@dataclass
class RowComparison:
    """The outcome of :func:`compare_rows`: which quantities are outside their tolerance."""

    deviation: dict
    tolerance: dict
    failures: list = field(default_factory=list)
    bitwise: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def worst(self) -> tuple:
        """The continuous quantity closest to its tolerance, as ``(quantity, deviation, tolerance)``."""
        cont = [(q, d, self.tolerance[q]) for q, (d, disc) in self.deviation.items()
                if not disc and self.tolerance.get(q, 0.0) > 0]
        if not cont:
            return ("", 0.0, 0.0)
        return max(cont, key=lambda t: t[1] / t[2])

    def summary(self) -> str:
        n = len(self.deviation)
        if self.bitwise:
            return f"all {n} quantities identical bit for bit"
        if self.ok:
            q, d, t = self.worst
            return (f"all {n} quantities within tolerance (discrete ones exact); closest: {q} "
                    f"{d:.1e} of {t:.1e}")
        shown = "; ".join(f"{q}: {d:.2e} > {t:.1e}" for q, d, t in self.failures[:5])
        more = f" (and {len(self.failures) - 5} more)" if len(self.failures) > 5 else ""
        return f"{len(self.failures)} of {n} quantities outside tolerance: {shown}{more}"


def compare_rows(fresh: dict, committed: dict, tolerances: dict | None = None) -> RowComparison:
    """Compare a regenerated row with its committed row quantity by quantity.

    A discrete quantity must be equal; a continuous one must deviate (:func:`deviations`) by at most
    its tolerance — ``tolerances`` (``{quantity: tol}``), by default the measured ones of
    :func:`load_tolerances`. A continuous quantity without a measured tolerance must be equal.
    """
    tol = load_tolerances()["tolerance"] if tolerances is None else dict(tolerances)
    dev = deviations(fresh, committed)
    failures = [(q, d, 0.0 if disc else tol.get(q, 0.0)) for q, (d, disc) in sorted(dev.items())
                if d > (0.0 if disc else tol.get(q, 0.0))]
    return RowComparison(dev, tol, failures, bitwise_equal(fresh, committed))


def check_row(fresh: dict, committed: dict, tolerances: dict | None = None) -> RowComparison:
    """:func:`compare_rows`, raising :class:`ReproductionError` with its summary if a quantity fails."""
    result = compare_rows(fresh, committed, tolerances)
    if not result.ok:
        raise ReproductionError(f"the committed row is not reproduced: {result.summary()}")
    return result


_GROUPS = (("losses and errors", ("train_", "test_", "gap_", "loss_curve", "population_error")),
           ("bound proxies", ("proxies.",)), ("singular values", ("singular_values", "init_singular_values")),
           ("study measures (Ch. 9)", ("study.",)))


def _group(q: str) -> str:
    return next((g for g, prefixes in _GROUPS if q.startswith(prefixes)), "configuration")


def spread_summary(table: dict | None = None) -> dict:
    """The measured table in a few numbers (Chapter 7 shows them; every value comes from the file).

    Returns ``groups`` — per group of quantities (losses and errors, bound proxies, singular values,
    Chapter 9's study measures; everything else is the configuration):
    how many continuous quantities moved, the largest spread and tolerance, how many never moved (and
    must be equal) — the numbers of settings (``n_settings``, ``n_changed``: those that changed some
    bit), and per committed file the screened and well-conditioned rows with the largest deviation of
    the others (``screen``).
    """
    t = load_tolerances() if table is None else table
    groups: dict = {}
    for q, sp in t["spread"].items():
        g = groups.setdefault(_group(q), {"moved": 0, "exact": 0, "spread": 0.0, "tolerance": 0.0})
        if sp > 0:
            g["moved"] += 1
            g["spread"], g["tolerance"] = max(g["spread"], sp), max(g["tolerance"], t["tolerance"][q])
        else:
            g["exact"] += 1
    screen: dict = {}
    for s in t["screen"]:
        f = screen.setdefault(s["results"], {"screened": 0, "well_conditioned": 0, "worst_other": 0.0,
                                             "discrete_differs": 0})
        f["screened"] += 1
        f["well_conditioned"] += s["well_conditioned"]
        f["discrete_differs"] += s["discrete_differs"]
        if not s["well_conditioned"]:
            f["worst_other"] = max(f["worst_other"], s["max_deviation"])
    return {"groups": groups, "screen": screen, "n_settings": len(t["settings"]),
            "n_changed": sum(s["bits_differ_from_default"] for s in t["settings"]),
            "factor": t["factor"], "threshold": t["screen_threshold"], "machine": t["machine"]}


def spread_markdown(table: dict | None = None) -> str:
    """:func:`spread_summary`'s groups as a Markdown table (quantity group, spread, tolerance)."""
    g = spread_summary(table)["groups"]
    lines = ["| quantities | moved | largest relative spread | tolerance | never moved (must be equal) |",
             "|---|---:|---:|---:|---:|"]
    for name in [n for n, _ in _GROUPS] + ["configuration"]:
        if name in g:
            x = g[name]
            sp = f"{x['spread']:.1e}" if x["moved"] else "0"
            tol = f"{x['tolerance']:.1e}" if x["moved"] else "exact"
            lines.append(f"| {name} | {x['moved']} | {sp} | {tol} | {x['exact']} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- which rows, regenerated how

def row_cost(row: dict) -> int:
    """A machine-independent training cost of a row: ``L · N² · n_train · steps taken``."""
    c = row["config"]
    return c["L"] * c["N"] ** 2 * c["n_train"] * row.get("steps_taken", c["steps"])


def cheapest_rows(name: str, k: int) -> list:
    """Indices of the ``k`` cheapest rows (:func:`row_cost`, ties by position) of committed ``name``."""
    from .results import load_results

    rows = load_results(name)["rows"]
    return sorted(range(len(rows)), key=lambda i: (row_cost(rows[i]), i))[:k]


def reference_rows(name: str) -> list:
    """The reference rows of committed results ``name``: the well-conditioned rows the measurement chose.

    ``benchmarks/cpu_spread.py`` regenerates the cheapest rows of each file under two CPU code paths and
    keeps those whose training is well conditioned (every discrete quantity equal to the committed one,
    every continuous one within ``screen_threshold``); the spreads, hence the tolerances, are measured
    on them. Each returned row is the committed row; its configuration is checked against the one the
    measurement recorded (a results file changed since is refused).
    """
    from .results import load_results

    table = load_tolerances()
    chosen = [r for r in table["reference_rows"] if r["results"] == name]
    if not chosen:
        names = sorted({r["results"] for r in table["reference_rows"]})
        raise ValueError(f"no reference rows for results {name!r}; measured: {', '.join(names)}")
    rows = load_results(name)["rows"]
    out = []
    for r in chosen:
        row = rows[r["index"]] if r["index"] < len(rows) else None
        if row is None or row["config"] != r["config"]:
            raise ValueError(f"results {name!r} row {r['index']} is not the row the tolerance was measured on; "
                             "rerun benchmarks/cpu_spread.py")
        out.append(row)
    return out


def regenerate(row: dict, threads: int = 1) -> dict:
    """Retrain the configuration of ``row`` on ``threads`` torch threads; the new row, as JSON gives it.

    The thread count is restored afterwards.
    """
    import torch

    from .grid import run_config
    from .training import TrainConfig

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return json.loads(json.dumps(run_config(TrainConfig(**row["config"]))))
    finally:
        torch.set_num_threads(before)


def _row_spec(text: str) -> tuple:
    name, sep, index = text.partition(":")
    if not sep or not index.isdigit():
        raise argparse.ArgumentTypeError(f"expected RESULTS:INDEX (e.g. study:12), got {text!r}")
    return name, int(index)


def _rows_to_do(args, ap) -> list:
    """``[(results, index, committed row)]`` that ``main`` regenerates, each configuration checked.

    Raises :class:`ValueError` (:class:`~bounds_lib.studies.results.ResultsError` included) for a committed file
    that is corrupted or edited, a row that is not the one the tolerance was measured on, or a
    configuration :class:`~bounds_lib.studies.training.TrainConfig` refuses — before anything trains.
    """
    from .results import RESULTS_FILES, load_results
    from .training import TrainConfig

    if args.rows:
        for name, i in args.rows:
            if name not in RESULTS_FILES:
                ap.error(f"unknown results {name!r}; supported: {', '.join(RESULTS_FILES)}")
        picked = [(name, i, load_results(name)["rows"]) for name, i in args.rows]
        for name, i, rows in picked:
            if i >= len(rows):
                ap.error(f"results {name!r} has {len(rows)} rows; no row {i}")
        todo = [(name, i, rows[i]) for name, i, rows in picked]
    else:
        entries = load_tolerances()["reference_rows"]
        todo = []
        for name in dict.fromkeys(r["results"] for r in entries):
            indices = [r["index"] for r in entries if r["results"] == name]
            todo += [(name, i, row) for i, row in zip(indices, reference_rows(name))]
    for name, i, row in todo:  # every configuration is checked before the first one trains
        config = row["config"]
        if not isinstance(config, dict):
            raise ValueError(f"results {name!r} row {i}: 'config' must be an object, got {type(config).__name__}")
        try:
            TrainConfig(**config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"results {name!r} row {i}: its configuration cannot be trained ({exc})") from None
    return todo


def main(argv=None) -> int:
    """``python -m bounds_lib.studies.reproduce``: regenerate committed rows on this machine and compare them.

    ``check`` (default) regenerates the reference rows, prints one line per row and exits 1 if one is
    not reproduced within the tolerance; ``regenerate --rows RESULTS:INDEX …`` prints the regenerated
    rows as JSON (what ``benchmarks/cpu_spread.py`` collects under each CPU code path).
    """
    ap = argparse.ArgumentParser(prog="python -m bounds_lib.studies.reproduce",
                                 description="Regenerate committed results rows on this machine.")
    ap.add_argument("action", nargs="?", choices=("check", "regenerate"), default="check")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the grids ran)")
    ap.add_argument("--rows", nargs="+", type=_row_spec, default=None, metavar="RESULTS:INDEX",
                    help="rows to regenerate (regenerate only; default: the reference rows)")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    if args.action == "check" and args.rows:
        ap.error("--rows goes with regenerate; check always uses the reference rows")
    try:
        todo = _rows_to_do(args, ap)
    except (ValueError, TypeError) as exc:  # ResultsError included: a committed file edited or corrupted
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 1
    out, bad = [], 0
    for name, i, row in todo:
        fresh = regenerate(row, args.threads)
        if args.action == "regenerate":
            out.append({"results": name, "index": i, "row": fresh})
            continue
        result = compare_rows(fresh, row)
        bad += not result.ok
        print(f"{name}[{i}]: {'ok' if result.ok else 'NOT REPRODUCED'} — {result.summary()}")
    if args.action == "regenerate":
        json.dump(out, sys.stdout)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
