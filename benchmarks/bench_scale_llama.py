"""Scale of ``bounds-lib analyze`` on a generated LLaMA-shaped checkpoint of about 1.1B parameters.

Shapes of TinyLlama-1.1B: 22 layers, hidden N = 2048, 32 query heads and 4 key/value heads (GQA,
d_h = 64), gated feed-forward d_ff = 5632, vocabulary 32000; random float16 weights (about 2.2 GB)
in several safetensors shards with a ``model.safetensors.index.json``, written to a temporary folder
and deleted afterwards (``--keep DIR`` keeps it).

One child process opens and validates all layers, runs the library's default analysis (clean mode,
float64, one BLAS thread per job, ``--jobs`` layers at a time) on all of them or on the first
``--analyze-layers K`` (then the total is extrapolated; each layer costs the same), and reports:
wall and process-CPU time per layer (from the progress callback; CPU time is what one free core
would take, on a busy machine wall time is longer), the total, where the time of a layer goes (the
two dense SVDs of ``M_in = [G | U]`` (N × 2d_ff) and
``M_out`` (d_ff × N) against the head products), and its own peak RSS (``wait4`` rusage) against
the budget 2 × largest tensor (as stored) + 400 MB. Then an extrapolation to LLaMA-2-7B and
LLaMA-2-70B shapes from the measured seconds per unit of ``N²·d_ff`` (the cost of a values-only SVD
of an N × c·d_ff matrix grows as N²·d_ff; the head work, N·d_h² per head, is a few percent).

Run once, on a shared machine politely: ``nice -n 10 .venv/bin/python benchmarks/bench_scale_llama.py``.
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

SHAPES_1B = dict(L=22, N=2048, H=32, Hkv=4, F=5632, vocab=32000)
TARGETS = {"LLaMA-2-7B": dict(L=32, N=4096, H=32, Hkv=32, F=11008, vocab=32000),
           "LLaMA-2-70B": dict(L=80, N=8192, H=64, Hkv=8, F=28672, vocab=32000)}


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


def write_checkpoint(folder: Path, shard_mb: float, seed=0, **shape):
    shapes = llama_shapes(**shape)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": shape["N"],
              "num_hidden_layers": shape["L"], "num_attention_heads": shape["H"],
              "num_key_value_heads": shape["Hkv"], "intermediate_size": shape["F"], "hidden_act": "silu",
              "vocab_size": shape["vocab"], "torch_dtype": "float16"}
    n_shards, total, largest = write_sharded(folder, config, shapes, np.float16, shard_mb, seed)
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    return n_shards, total, largest, n_params


CHILD = r"""
import json, sys, time
from threadpoolctl import threadpool_limits
import bounds_lib.spectra as P  # compute_spectra and the dense SVD it calls (timed below)
from bounds_lib.scoring import score
from bounds_lib.checkpoints import detect_architecture, open_checkpoint

folder, jobs, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dense = []  # process CPU seconds of each dense SVD (+ its norms): M_in, M_out, M_in, ...
inner = P._dense_spectrum
def timed(W):
    c = time.process_time()
    r = inner(W)
    if W.shape[0] != W.shape[1]:  # the head products in paper mode are square; M_in / M_out are not
        dense.append((W.shape, time.process_time() - c))
    return r
P._dense_spectrum = timed
wall, cpu = [], []
def progress(done, total):
    if done % 4 == 0:
        wall.append(time.perf_counter())
        cpu.append(time.process_time())
with threadpool_limits(1):
    t0, c0 = time.perf_counter(), time.process_time()
    spec = detect_architecture(open_checkpoint(folder))  # every layer's tensors checked, headers only
    t_open = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    sp = P.compute_spectra(folder, jobs=jobs, progress=progress, n_layers=k if k < spec.n_layers else None)
    t1 = time.perf_counter()
    rep = score(sp)
    t2 = time.perf_counter()
print(json.dumps({"t_open_validate": t_open, "t_spectra": t1 - t0, "t_score": t2 - t1,
                  "wall_done": [w - t0 for w in wall], "cpu_done": [c - c0 for c in cpu],
                  "dense": [[list(s), t] for s, t in dense], "layers": sp.L, "L_total": spec.n_layers,
                  "log10_B_ours": rep.summary()["B_ours_sum"]["log10"]}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shard-mb", type=float, default=500)
    ap.add_argument("--jobs", type=int, default=1, help="layers at a time (the CLI default is one per core)")
    ap.add_argument("--layers", type=int, default=SHAPES_1B["L"], help="layers of the generated checkpoint")
    ap.add_argument("--analyze-layers", type=int, default=0,
                    help="analyse only the first K layers and extrapolate the total (0: all; on a busy machine)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="write the checkpoint here and keep it (a folder that already holds one is reused)")
    ap.add_argument("--smoke", action="store_true", help="a tiny LLaMA shape, to check the script in seconds")
    args = ap.parse_args()
    shape = {**SHAPES_1B, "L": args.layers}
    if args.smoke:
        shape = dict(L=2, N=256, H=4, Hkv=2, F=704, vocab=1000)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bounds-lib-bench-llama-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, CPUs {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f}, date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    try:
        t = time.perf_counter()
        reused = args.keep is not None and (folder / "model.safetensors.index.json").is_file()
        if reused:  # reuse what an earlier --keep kept
            shapes = llama_shapes(**shape)
            n_shards = len(list(folder.glob("*.safetensors")))
            total = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
            largest = max(2 * int(np.prod(s)) for s in shapes.values())
            n_params = sum(int(np.prod(s)) for s in shapes.values())
        else:
            n_shards, total, largest, n_params = write_checkpoint(folder, args.shard_mb, **shape)
        t_write = time.perf_counter() - t
        MB = 2**20
        print(f"checkpoint: LLaMA shapes {shape}, {n_params / 1e9:.2f}B parameters, {n_shards} shards, "
              f"{total / MB:.0f} MB float16 ({'reused' if reused else f'written in {t_write:.0f} s'}); largest tensor "
              f"{largest / MB:.0f} MB")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        k = args.analyze_layers or shape["L"]
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            t = time.perf_counter()
            p = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(args.jobs), str(k)], env=env,
                                 stdout=out, stderr=err, text=True)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - t
            out.seek(0)
            err.seek(0)
            if p.returncode != 0:
                raise SystemExit(f"child failed ({p.returncode}): {err.read()[-3000:]}")
            res = json.loads(out.read().strip().splitlines()[-1])
        peak = ru.ru_maxrss * 1024
        budget = 2 * largest + 400 * MB
        w = np.diff(np.concatenate([[0.0], res["wall_done"]]))
        c = np.diff(np.concatenate([[0.0], res["cpu_done"]]))
        K, L, N, F = res["layers"], res["L_total"], shape["N"], shape["F"]
        d_in = np.array([t for s, t in res["dense"] if s[1] == 2 * F])
        d_out = np.array([t for s, t in res["dense"] if s[0] == F])
        print(f"child (clean, float64, jobs={args.jobs}, one BLAS thread; "
              f"user+system CPU {ru.ru_utime + ru.ru_stime:.0f} s, "
              f"wall {wall:.0f} s): opening and validating all {L} layers {res['t_open_validate']:.2f} s; "
              f"spectra of {K} of {L} layers {res['t_spectra']:.0f} s wall; scoring {res['t_score']:.2f} s")
        print(f"  per layer: wall {', '.join(f'{x:.0f}' for x in w)} s; "
              f"process CPU {', '.join(f'{x:.0f}' for x in c)} s "
              f"(median {np.median(c):.0f} s: the time on one free core)")
        print(f"  where a layer's CPU goes: SVD+norms of M_in = [G|U] ({N}x{2 * F}) {np.median(d_in):.0f} s "
              f"({100 * np.median(d_in) / np.median(c):.0f}%), of M_out ({F}x{N}) {np.median(d_out):.0f} s "
              f"({100 * np.median(d_out) / np.median(c):.0f}%), reading, widening, "
              f"{2 * shape['H']} head cores and norms the rest "
              f"({100 * (1 - (np.median(d_in) + np.median(d_out)) / np.median(c)):.0f}%)")
        total_cpu = L * np.median(c) + res["t_open_validate"] + res["t_score"] * L / K
        print(f"  all {L} layers on one free core: {L} x {np.median(c):.0f} s + opening = {total_cpu / 60:.1f} min "
              + ("(measured)" if K == L else f"(extrapolated from the {K} layers measured)"))
        widest = 8 * N * 2 * F  # M_in = [G|U] in float64, the largest matrix the analysis holds
        print(f"  peak RSS {peak / MB:.0f} MB; budget 2 x largest tensor (as stored, float16) + 400 MB = "
              f"{budget / MB:.0f} MB: peak / budget = {peak / budget:.2f}; with the largest matrix as analysed "
              f"(M_in in float64, {widest / MB:.0f} MB): "
              f"2 x {widest / MB:.0f} + 400 = {(2 * widest + 400 * MB) / MB:.0f} MB, "
              f"peak / budget = {peak / (2 * widest + 400 * MB):.2f}")
        unit = np.median(c) / (N * N * F)
        print(f"extrapolation (CPU seconds per layer ∝ N²·d_ff: {unit * 1e12:.1f} s per 10^12 on this machine):")
        for name, sh in TARGETS.items():
            t_layer = unit * sh["N"] ** 2 * sh["F"]
            mem = 8 * sh["N"] * 2 * sh["F"] * 2 / MB  # float64 M_in and the SVD's copy of it
            print(f"  {name}: {t_layer:.0f} s per layer, {sh['L'] * t_layer / 60:.0f} min on one core; with --jobs J "
                  f"on J free cores about {sh['L'] * t_layer / 60:.0f}/J min if layers scale linearly (not measured "
                  f"here); memory per job in flight ≈ {mem:.0f} MB (float64 M_in and the SVD's copy of it)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
