"""Scale of ``bounds-lib analyze`` on a generated LLaMA-shaped checkpoint (1.1B shapes, or 7B: ``--shape 7b``).

Shapes of TinyLlama-1.1B: 22 layers, hidden N = 2048, 32 query heads and 4 key/value heads (GQA,
d_h = 64), gated feed-forward d_ff = 5632, vocabulary 32000; LLaMA-2-7B: 32 layers, N = 4096, 32 heads,
d_ff = 11008. Random float16 weights in safetensors shards with a ``model.safetensors.index.json``,
written to a temporary folder and deleted afterwards (``--keep DIR`` keeps it and reuses it);
``--layers K`` writes only the first K layers (the totals are then extrapolated and say so).
``--jobs 1 2`` runs once per worker count (the local process pool), ``--dask`` once more each on a Dask
``LocalCluster`` of that many worker processes (the cluster's start is not timed).

One child process per run (so that each run's memory is its own) opens and validates all layers and
runs ``compute_spectra`` as the CLI does (clean mode, float64, no (1,1) norms, one BLAS thread) on
the first ``--analyze-layers K`` layers, in process (``--jobs 1``) or in ``--jobs J`` worker
processes. It reports: wall and process-CPU time per layer and per part (attention, ``M_in = [G|U]``
(N × 2d_ff), ``M_out`` (d_ff × N)), from the progress callback; the peak memory of the child and of
every worker (``VmHWM``: a child's ``ru_maxrss`` would include its parent's memory at the fork, e.g.
the writer's), against the issue's budget 2 × largest stored tensor + 400 MB and against the
library's own estimate; how the pool size was chosen. ``--ffn dense|lean|auto`` forces the dense SVD
or the lean (TSQR from the stored precision) factorization of the feed-forward matrices, or lets
the library choose (lean only where the dense one would not fit the budget); ``--compare-ffn`` runs
dense and lean one after the other and prints their time, memory and the largest difference of the
singular values in units of the agreement tolerance of ``bounds_lib.analysis.devices``. Then an
extrapolation to LLaMA-2-7B and 70B shapes from the measured seconds per unit of ``N²·d_ff``.

Run politely on a shared machine: ``nice -n 10 .venv/bin/python benchmarks/bench_scale_llama.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sharded_checkpoint import write_sharded

SHAPES = {"1b": dict(L=22, N=2048, H=32, Hkv=4, F=5632, vocab=32000),
          "7b": dict(L=32, N=4096, H=32, Hkv=32, F=11008, vocab=32000)}
TARGETS = {"LLaMA-2-7B": SHAPES["7b"], "LLaMA-2-70B": dict(L=80, N=8192, H=64, Hkv=8, F=28672, vocab=32000)}
MB = 2**20


def llama_shapes(L, N, H, Hkv, F, vocab):
    d = N // H
    shapes = {"model.embed_tokens.weight": (vocab, N)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "self_attn.q_proj.weight": (H * d, N), p + "self_attn.k_proj.weight": (Hkv * d, N),
                       p + "self_attn.v_proj.weight": (Hkv * d, N), p + "self_attn.o_proj.weight": (N, H * d),
                       p + "mlp.gate_proj.weight": (F, N), p + "mlp.up_proj.weight": (F, N),
                       p + "mlp.down_proj.weight": (N, F), p + "input_layernorm.weight": (N,),
                       p + "post_attention_layernorm.weight": (N,)})
    shapes["model.norm.weight"] = (N,)
    shapes["lm_head.weight"] = (vocab, N)
    return shapes


def llama_config(L, N, H, Hkv, F, vocab):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": N,
            "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hkv,
            "intermediate_size": F, "hidden_act": "silu", "vocab_size": vocab, "torch_dtype": "float16",
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-5}


def checkpoint(folder: Path, shape: dict, shard_mb: float = 500, seed: int = 0) -> dict:
    """Write (or reuse, if ``folder`` holds one) the checkpoint; its sizes and how it was obtained."""
    shapes = llama_shapes(**shape)
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    largest = max(2 * int(np.prod(s)) for s in shapes.values())
    t = time.perf_counter()
    reused = (folder / "model.safetensors.index.json").is_file()
    if not reused:
        write_sharded(folder, llama_config(**shape), shapes, np.float16, shard_mb, seed)
    total = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    return {"n_params": n_params, "largest": largest, "total": total, "reused": reused,
            "n_shards": len(list(folder.glob("*.safetensors"))), "t_write": time.perf_counter() - t}


CHILD = r"""
import json, sys, time
from threadpoolctl import threadpool_limits
import numpy as np
import bounds_lib.analysis.parallel as PAR
import bounds_lib.analysis.spectra as P
from bounds_lib.checkpoints import detect_architecture, open_checkpoint
from bounds_lib.checkpoints.layers import part_kind

a = json.loads(sys.argv[1])
if a["ffn"] != "auto":  # force the dense SVD or the lean factorization of every feed-forward unit
    lean = a["ffn"] == "lean"
    PAR.lean_unit = lambda spec, part, *x, **k: lean and part_kind(part) != "attention"  # as run_units reads it
marks = []
def progress(done, total):
    marks.append((time.perf_counter(), time.process_time()))
with threadpool_limits(1):
    t0 = time.perf_counter()
    spec = detect_architecture(open_checkpoint(a["folder"]))  # every layer's tensors checked, headers only
    t_open = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    kw = dict(entrywise=False, progress=progress, n_layers=a["k"] if a["k"] < spec.n_layers else None)
    if a["dask"]:  # a LocalCluster of worker processes, one thread each, started before the clock
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=a["jobs"], threads_per_worker=1, processes=True, dashboard_address=":0")
        client = Client(cluster)
        t0, c0 = time.perf_counter(), time.process_time()
        sp = P.compute_spectra(a["folder"], scheduler=client, **kw)
        t1 = time.perf_counter()
        client.close(); cluster.close()
    else:
        sp = P.compute_spectra(a["folder"], jobs=a["jobs"], **kw)
        t1 = time.perf_counter()
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
if a.get("save"):
    np.savez(a["save"], *[m.sigma for m in sp.matrices if m.matrix_type in ("M_in", "M_out")])
print(json.dumps({"t_open_validate": t_open, "t_spectra": t1 - t0, "cpu_spectra": time.process_time() - c0,
                  "marks": [(w - t0, c - c0) for w, c in marks], "layers": sp.L, "L_total": spec.n_layers,
                  "hwm": hwm, "parallel": sp.meta["parallel"]}))
"""

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
       "MKL_NUM_THREADS": "1"}


def run_child(folder, jobs, k, ffn="auto", save=None, dask=False) -> dict:
    args = json.dumps({"folder": str(folder), "jobs": jobs, "k": k, "ffn": ffn, "save": save, "dask": dask})
    p = subprocess.run([sys.executable, "-c", CHILD, args], env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode}): {p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(res, shape, budget, label) -> dict:
    """Print one run; return its seconds per layer (CPU of one core, wall) and peaks."""
    K, L, N, F = res["layers"], res["L_total"], shape["N"], shape["F"]
    par = res["parallel"]
    peaks = par.get("worker_peak_MB", {})
    print(f"{label}: {par['backend']}, {par.get('workers', 1)} worker(s) "
          f"(chosen by {', '.join(par.get('chosen', {}).get('limited_by', ['the cluster']))}); "
          f"{par['units']} units of {K} of {L} layers, {par.get('units_factored_lean', 0)} factored lean")
    out = {"wall_per_layer": res["t_spectra"] / K}
    if par["backend"] == "in process":  # groups finish in order: QK, V, M_in, M_out per layer
        m = np.array(res["marks"])
        c = np.diff(np.concatenate([[0.0], m[:, 1]])).reshape(K, 4)
        w = np.diff(np.concatenate([[0.0], m[:, 0]])).reshape(K, 4)
        per = c.sum(axis=1)
        print(f"  per layer: wall {', '.join(f'{x:.1f}' for x in w.sum(axis=1))} s; process CPU "
              f"{', '.join(f'{x:.1f}' for x in per)} s (median {np.median(per):.1f} s: the time on one free core)")
        att, mi, mo = np.median(c[:, :2].sum(axis=1)), np.median(c[:, 2]), np.median(c[:, 3])
        print(f"  where a layer's CPU goes: attention (reading, {2 * shape['H']} head cores, norms) {att:.1f} s "
              f"({100 * att / np.median(per):.0f}%), M_in = [G|U] ({N}x{2 * F}) {mi:.1f} s "
              f"({100 * mi / np.median(per):.0f}%), M_out ({F}x{N}) {mo:.1f} s ({100 * mo / np.median(per):.0f}%)")
        out["cpu_per_layer"] = float(np.median(per))
    else:
        print(f"  spectra of {K} layers: {res['t_spectra']:.1f} s wall ({res['t_spectra'] / K:.1f} s per layer)")
    peak = max([res["hwm"] / MB] + list(peaks.values()))
    print(f"  peak memory (VmHWM): this process {res['hwm'] / MB:.0f} MB"
          + (f", workers {', '.join(f'{v:.0f}' for v in peaks.values())} MB" if par["backend"] != "in process"
             else "") + f"; budget 2 x largest stored tensor + 400 MB = {budget / MB:.0f} MB: "
          f"largest peak / budget = {peak / (budget / MB):.2f}; library's estimate per worker "
          f"{par['per_worker_estimate_MB']:.0f} MB")
    out["peak_MB"] = peak
    out["worker_peaks_MB"] = list(peaks.values())
    return out


def extrapolate(unit_cpu, budget_of):
    import bounds_lib.analysis.units as UNITS
    from bounds_lib.checkpoints import ArchitectureSpec

    print(f"extrapolation (not measured: CPU seconds per layer ∝ N²·d_ff, {unit_cpu * 1e12:.1f} s per 10^12 on "
          "this machine; memory from the library's per-worker estimate):")
    for name, sh in TARGETS.items():
        t_layer = unit_cpu * sh["N"] ** 2 * sh["F"]
        spec = ArchitectureSpec(family="llama", model_type="llama", n_layers=sh["L"], hidden=sh["N"],
                                n_heads=sh["H"], n_kv_heads=sh["Hkv"], head_dim=sh["N"] // sh["H"], d_ff=sh["F"],
                                activation="silu", prefix="model.", gated_ffn=True)
        budget = budget_of(sh)
        est = {}
        for part in ("attention", "M_in", "M_out"):
            dense = UNITS.WORKER_BASE_BYTES + UNITS.unit_memory_estimate(spec, part)
            lean = dense > budget  # the library's rule (lean_unit)
            est[part] = (UNITS.WORKER_BASE_BYTES + UNITS.unit_memory_estimate(spec, part, lean=True, stored="float16")
                         if lean else dense)
        worst = max(est.values())
        print(f"  {name}: {t_layer:.0f} s per layer, {sh['L'] * t_layer / 60:.0f} CPU min; on 16 free cores "
              f"≈ {sh['L'] * t_layer / 60 / 16:.1f} min ({3 * sh['L']} units: 16 workers stay busy); "
              f"per worker ≈ {worst / MB:.0f} MB against a budget of {budget / MB:.0f} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=tuple(SHAPES), default="1b")
    ap.add_argument("--shard-mb", type=float, default=500)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1],
                    help="worker processes of each run (several: one run each, e.g. 1 2)")
    ap.add_argument("--layers", type=int, default=None, help="layers of the generated checkpoint (default: all)")
    ap.add_argument("--analyze-layers", type=int, default=0,
                    help="analyse only the first K layers and extrapolate the total (0: all)")
    ap.add_argument("--ffn", choices=("auto", "dense", "lean"), default="auto")
    ap.add_argument("--dask", action="store_true",
                    help="also run each --jobs J on a Dask LocalCluster of J worker processes")
    ap.add_argument("--compare-ffn", action="store_true", help="run dense and lean (in process) and compare them")
    ap.add_argument("--keep", type=Path, default=None,
                    help="write the checkpoint here and keep it (a folder that already holds one is reused)")
    ap.add_argument("--smoke", action="store_true", help="a tiny LLaMA shape, to check the script in seconds")
    args = ap.parse_args()
    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["L"] = args.layers
    if args.smoke:
        shape = dict(L=2, N=256, H=4, Hkv=2, F=704, vocab=1000)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bounds-lib-bench-llama-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, CPUs {os.cpu_count()}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    try:
        ck = checkpoint(folder, shape, args.shard_mb)
        how = "reused" if ck["reused"] else f"written in {ck['t_write']:.0f} s"
        print(f"checkpoint: LLaMA shapes {shape}, {ck['n_params'] / 1e9:.2f}B parameters, {ck['n_shards']} shards, "
              f"{ck['total'] / MB:.0f} MB float16 ({how}); "
              f"largest tensor {ck['largest'] / MB:.0f} MB")
        budget = 2 * ck["largest"] + 400 * MB
        k = args.analyze_layers or shape["L"]
        runs = {}
        for jobs in args.jobs:
            runs[jobs] = report(run_child(folder, jobs, k, args.ffn), shape, budget, f"--jobs {jobs}, ffn {args.ffn}")
        dask = {}
        if args.dask:
            for jobs in args.jobs:
                dask[jobs] = report(run_child(folder, jobs, k, args.ffn, dask=True), shape, budget,
                                    f"Dask LocalCluster of {jobs} worker process(es), ffn {args.ffn}")
        for name, rs in (("local", runs), ("Dask LocalCluster", dask)):
            if len(rs) > 1:
                base = rs[min(rs)]["wall_per_layer"]
                print(f"scaling, {name} (wall per layer): "
                      + ", ".join(f"{j} worker(s) {r['wall_per_layer']:.1f} s ({base / r['wall_per_layer']:.2f}x)"
                                  for j, r in rs.items())
                      + f"; load average now {os.getloadavg()[0]:.2f}")
        if args.compare_ffn:
            from bounds_lib.analysis.devices import spectra_agree

            with tempfile.TemporaryDirectory() as tmp:
                got = {}
                for ffn in ("dense", "lean"):
                    res = run_child(folder, 1, k, ffn, save=f"{tmp}/{ffn}.npz")
                    got[ffn] = (report(res, shape, budget, f"--jobs 1, ffn {ffn}"), np.load(f"{tmp}/{ffn}.npz"))
                (rd, zd), (rl, zl) = got["dense"], got["lean"]
                shapes = [(shape["N"], 2 * shape["F"]), (shape["F"], shape["N"])] * k
                worst = max(spectra_agree(zd[f"arr_{i}"], zl[f"arr_{i}"], s)[1] for i, s in enumerate(shapes))
                print(f"lean / dense: CPU per layer {rl['cpu_per_layer'] / rd['cpu_per_layer']:.2f}x, peak memory "
                      f"{rl['peak_MB'] / rd['peak_MB']:.2f}x ({rl['peak_MB']:.0f} vs {rd['peak_MB']:.0f} MB); "
                      f"largest |Δσ| of M_in/M_out = {worst:.3g} × the agreement tolerance")
                runs.setdefault(1, rd)
        cpu = next((r["cpu_per_layer"] for r in runs.values() if "cpu_per_layer" in r), None)
        if cpu is not None:
            L = shape["L"] if args.layers is None else SHAPES[args.shape]["L"]
            print(f"all {L} layers of the {args.shape} shape on one free core: {L} x {cpu:.1f} s = "
                  f"{L * cpu / 60:.1f} min "
                  + ("(measured)" if k == L else f"(extrapolated from the {k} layers measured)"))
            extrapolate(cpu / (shape["N"] ** 2 * shape["F"]),
                        lambda sh: 2 * 2 * sh["vocab"] * sh["N"] + 400 * MB)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
