"""How far do committed results rows move between CPU code paths? The measurement behind the tolerance.

Regenerates committed rows of Chapters 7–8 (``python -m bounds_lib.studies.reproduce regenerate``) in fresh
processes, each under one CPU code path this machine can take — torch's ATen kernels
(``ATEN_CPU_CAPABILITY``), MKL's code path (``MKL_CBWR``), oneDNN's instruction set
(``ONEDNN_MAX_CPU_ISA``), NumPy's OpenBLAS kernels (``OPENBLAS_CORETYPE``) and NumPy's own SIMD
dispatch (``NPY_DISABLE_CPU_FEATURES``), one and two threads — and writes

* ``bounds_lib/data/cpu_tolerance.json``: the settings, which of them changed any bit, the screen of
  candidate rows, the reference rows chosen, per quantity the largest relative spread over every
  pair of {committed row, each setting's row} and the tolerance ``FACTOR`` × spread;
* ``benchmarks/CPU_SPREAD.md``: the same as tables.

Two stages. **Screen**: the ``--screen`` cheapest rows of each committed file are regenerated under
two code paths (this machine's default and ``ATEN_CPU_CAPABILITY=default``); a row is *well
conditioned* when, against the committed row (made on another CPU kind) and between the two, every
discrete quantity is equal and every continuous one within ``--threshold``. Training that amplifies
last-bit differences (most of Chapter 8's longer runs do) cannot be checked to a tolerance with power,
and the screen says how many rows are like that. **Spread**: the well-conditioned rows (at most
``--per-file`` per file) are regenerated under every setting.

    .venv/bin/python benchmarks/cpu_spread.py            # about 6 minutes on 2 cores
    .venv/bin/python benchmarks/cpu_spread.py --smoke    # two settings, one row per file, no files written
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import pathlib
import platform
import subprocess
import sys

from bounds_lib.studies import reproduce as P
from bounds_lib.studies.results import RESULTS_FILES, load_results

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT_JSON = ROOT / "bounds_lib" / "data" / "cpu_tolerance.json"
OUT_MD = ROOT / "benchmarks" / "CPU_SPREAD.md"

# (name, environment, torch threads): one factor changed at a time from this machine's default, then
# the oldest code path of every library at once.
SETTINGS = [
    ("default, 1 thread", {}, 1),
    ("default, 2 threads", {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}, 2),
    ("ATEN_CPU_CAPABILITY=default", {"ATEN_CPU_CAPABILITY": "default"}, 1),
    ("ATEN_CPU_CAPABILITY=avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, 1),
    ("ATEN_CPU_CAPABILITY=avx512", {"ATEN_CPU_CAPABILITY": "avx512"}, 1),
    ("MKL_CBWR=COMPATIBLE", {"MKL_CBWR": "COMPATIBLE"}, 1),
    ("MKL_CBWR=SSE4_2", {"MKL_CBWR": "SSE4_2"}, 1),
    ("MKL_CBWR=AVX2", {"MKL_CBWR": "AVX2"}, 1),
    ("ONEDNN_MAX_CPU_ISA=SSE41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}, 1),
    ("ONEDNN_MAX_CPU_ISA=AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, 1),
    ("OPENBLAS_CORETYPE=Prescott", {"OPENBLAS_CORETYPE": "Prescott"}, 1),
    ("OPENBLAS_CORETYPE=Haswell", {"OPENBLAS_CORETYPE": "Haswell"}, 1),
    ("OPENBLAS_CORETYPE=Zen", {"OPENBLAS_CORETYPE": "Zen"}, 1),
    ("NPY_DISABLE_CPU_FEATURES=X86_V4 AVX512_ICL", {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL"}, 1),
    ("all oldest paths, 2 threads", {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                     "ONEDNN_MAX_CPU_ISA": "SSE41", "OPENBLAS_CORETYPE": "Prescott",
                                     "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL",
                                     "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}, 2),
]
# the variables this script sets; they are cleared from the parent's environment for every run
CONTROLLED = sorted({k for _, env, _ in SETTINGS for k in env} | {"MKL_NUM_THREADS"})


def regenerate(specs, env, threads):
    """Rows ``[(results, index)]`` regenerated in a fresh process under ``env``: ``{(name, i): row}``."""
    base = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    base |= {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": str(threads)} | env
    cmd = [sys.executable, "-m", "bounds_lib.studies.reproduce", "regenerate", "--threads", str(threads),
           "--rows", *[f"{n}:{i}" for n, i in specs]]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=base, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"regenerate failed under {env}: {proc.stderr.strip().splitlines()[-1:]}")
    return {(r["results"], r["index"]): r["row"] for r in json.loads(proc.stdout)}


def worst(dev):
    """Largest continuous deviation and whether any discrete quantity (or a vector's length) differs."""
    cont = [d for d, disc in dev.values() if not disc and math.isfinite(d)]
    broken = any(math.isinf(d) or (disc and d > 0) for d, disc in dev.values())
    return (max(cont) if cont else 0.0), broken


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--screen", type=int, default=12,
                    help="cheapest rows screened per file (default 12; 2 of the random-label file, whose runs "
                         "take 8–140 s each)")
    ap.add_argument("--per-file", type=int, default=3, help="reference rows kept per file (default 3)")
    ap.add_argument("--threshold", type=float, default=1e-5,
                    help="largest continuous deviation of a well-conditioned row (default 1e-5)")
    ap.add_argument("--smoke", action="store_true", help="two settings, one screened row per file; write nothing")
    args = ap.parse_args(argv)
    settings = SETTINGS[:3:2] if args.smoke else SETTINGS
    n_screen = 1 if args.smoke else args.screen
    data = {name: load_results(name)["rows"] for name in RESULTS_FILES}

    # stage 1: the screen, under the first and third settings (default and ATEN's scalar kernels)
    cand = [(name, i) for name in RESULTS_FILES
            for i in P.cheapest_rows(name, min(n_screen, 2) if name == "common_loss_rand256" else n_screen)]
    a = regenerate(cand, settings[0][1], settings[0][2])
    b = regenerate(cand, settings[-1 if args.smoke else 2][1], 1)
    screen, chosen = [], []
    for name, i in cand:
        com = data[name][i]
        devs = [worst(P.deviations(x, y)) for x, y in ((a[name, i], com), (b[name, i], com), (a[name, i], b[name, i]))]
        dev, broken = max(d for d, _ in devs), any(br for _, br in devs)
        good = not broken and dev <= args.threshold
        screen.append({"results": name, "index": i, "max_deviation": dev, "discrete_differs": broken,
                       "well_conditioned": good})
        if good and sum(c[0] == name for c in chosen) < args.per_file:
            chosen.append((name, i))
        print(f"screen {name}[{i}]: {dev:.1e}{' discrete differs' if broken else ''}"
              f"{'  -> reference' if (name, i) in chosen else ''}", flush=True)

    # stage 2: every setting on the reference rows
    runs = []
    for label, env, threads in settings:
        runs.append(regenerate(chosen, env, threads))
        print(f"ran {label}", flush=True)
    spread, changed = {}, []
    for k, (label, env, threads) in enumerate(settings):
        changed.append({"setting": label, "env": env, "threads": threads,
                        "bits_differ_from_default": any(not P.bitwise_equal(runs[k][c], runs[0][c]) for c in chosen),
                        "bits_differ_from_committed": any(not P.bitwise_equal(runs[k][c], data[c[0]][c[1]])
                                                          for c in chosen)})
    for c in chosen:
        versions = [data[c[0]][c[1]]] + [r[c] for r in runs]
        for x, y in itertools.combinations(versions, 2):
            for q, (d, disc) in P.deviations(x, y).items():
                if disc:
                    if d > 0:
                        sys.exit(f"{c}: discrete quantity {q} differs between code paths; not well conditioned")
                    continue
                spread[q] = max(spread.get(q, 0.0), d)
    tolerance = {q: P.FACTOR * s for q, s in spread.items()}
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    import numpy
    import torch

    table = {
        "schema": P.TOLERANCE_SCHEMA,
        "note": "written by benchmarks/cpu_spread.py; tolerance = factor x largest relative spread",
        "date": datetime.date.today().isoformat(),
        "machine": {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__, "numpy": numpy.__version__,
                    "torch_capability": torch.backends.cpu.get_cpu_capability()},
        "factor": P.FACTOR, "screen_threshold": args.threshold,
        "settings": changed, "screen": screen,
        "reference_rows": [{"results": n, "index": i, "config": data[n][i]["config"]} for n, i in chosen],
        "spread": dict(sorted(spread.items())), "tolerance": dict(sorted(tolerance.items())),
    }
    if args.smoke:
        print(json.dumps({"spread": table["spread"]}, indent=1)[:2000])
        return 0
    OUT_JSON.write_text(json.dumps(table, indent=1) + "\n")
    OUT_MD.write_text(markdown(table))
    print(f"wrote {OUT_JSON.relative_to(ROOT)} and {OUT_MD.relative_to(ROOT)}")
    return 0


def markdown(t):
    lines = ["# Spread of committed results across CPU code paths", "",
             f"Measured by `benchmarks/cpu_spread.py` on {t['date']} ({t['machine']['cpu']}, "
             f"{t['machine']['cores']} cores, torch {t['machine']['torch']}, NumPy {t['machine']['numpy']}). "
             f"Tolerance = {t['factor']:g} × the largest relative spread over every pair of "
             "{committed row, each setting's regenerated row}; a quantity that never moved must be equal. "
             "The library reads the JSON twin of this file (`bounds_lib/data/cpu_tolerance.json`).", "",
             "## Settings", "", "| setting | threads | bits differ from default | from committed |",
             "|---|---|---|---|"]
    for s in t["settings"]:
        lines.append(f"| {s['setting']} | {s['threads']} | {'yes' if s['bits_differ_from_default'] else 'no'} | "
                     f"{'yes' if s['bits_differ_from_committed'] else 'no'} |")
    n_good = sum(s["well_conditioned"] for s in t["screen"])
    lines += ["", f"## Screen ({n_good} of {len(t['screen'])} rows well conditioned, threshold "
              f"{t['screen_threshold']:.0e})", "",
              "| results | row | largest deviation | discrete differs | reference |",
              "|---|---|---|---|---|"]
    ref = {(r["results"], r["index"]) for r in t["reference_rows"]}
    for s in t["screen"]:
        is_ref = "yes" if (s["results"], s["index"]) in ref else ""
        lines.append(f"| {s['results']} | {s['index']} | {s['max_deviation']:.1e} | "
                     f"{'yes' if s['discrete_differs'] else 'no'} | {is_ref} |")
    lines += ["", "## Spread and tolerance per quantity", "", "| quantity | largest relative spread | tolerance |",
              "|---|---|---|"]
    for q, s in t["spread"].items():
        lines.append(f"| `{q}` | {s:.2e} | {t['tolerance'][q]:.2e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
