"""Scale of ``bounds-lib analyze`` on a generated LLaMA-shaped checkpoint of about 1.1B parameters.

Shapes of TinyLlama-1.1B: 22 layers, hidden N = 2048, 32 query heads and 4 key/value heads (GQA,
d_h = 64), gated feed-forward d_ff = 5632, vocabulary 32000; random float16 weights (about 2.2 GB)
in several safetensors shards with a ``model.safetensors.index.json``, written to a temporary folder
and deleted afterwards (``--keep DIR`` keeps it).

One child process runs the library's default analysis (clean mode, float64, one BLAS thread per
job, ``--jobs`` layers at a time) and reports: wall time per layer (from the progress callback),
total, where the time of one layer goes (the two dense SVDs of ``M_in = [G | U]`` (N × 2d_ff) and
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
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    shapes = llama_shapes(**shape)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": shape["N"],
              "num_hidden_layers": shape["L"], "num_attention_heads": shape["H"],
              "num_key_value_heads": shape["Hkv"], "intermediate_size": shape["F"], "hidden_act": "silu",
              "vocab_size": shape["vocab"], "torch_dtype": "float16"}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    groups, cur, size = [], [], 0
    for name, shp in shapes.items():
        nbytes = 2 * int(np.prod(shp))
        if cur and size + nbytes > shard_mb * 2**20:
            groups.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += nbytes
    groups.append(cur)
    weight_map, total = {}, 0
    for i, names in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = {n: (0.02 * rng.standard_normal(shapes[n], dtype=np.float32)).astype(np.float16) for n in names}
        save_file(tensors, folder / fname, metadata={"format": "pt"})
        total += sum(t.nbytes for t in tensors.values())
        del tensors
        weight_map.update({n: fname for n in names})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    largest = max(2 * int(np.prod(s)) for s in shapes.values())
    return len(groups), total, largest, n_params


CHILD = r"""
import json, sys, time
from threadpoolctl import threadpool_limits
from bounds_lib.checkpoints import detect_architecture, iter_layers, open_checkpoint
from bounds_lib.proxies import _dense_spectrum, compute_spectra, layer_spectra, score

folder, jobs = sys.argv[1], int(sys.argv[2])
stamps = []
def progress(done, total):
    if done % 4 == 0:
        stamps.append(time.perf_counter())
with threadpool_limits(1):
    t0 = time.perf_counter()
    sp = compute_spectra(folder, jobs=jobs, progress=progress)
    t1 = time.perf_counter()
    rep = score(sp)
    t2 = time.perf_counter()
    # where one layer's time goes (layer 0 again, sequentially)
    src = open_checkpoint(folder)
    lw = next(iter_layers(src, detect_architecture(src), layers=[0]))
    a = time.perf_counter(); _dense_spectrum(lw.M_in); b = time.perf_counter()
    _dense_spectrum(lw.M_out); c = time.perf_counter()
    layer_spectra(lw, "clean", entrywise=False); e = time.perf_counter()
print(json.dumps({"t_spectra": t1 - t0, "t_score": t2 - t1, "layer_done": [s - t0 for s in stamps],
                  "t_svd_M_in": b - a, "t_svd_M_out": c - b, "t_layer0": e - c,
                  "log10_B_ours": rep.summary()["B_ours_sum"]["log10"], "open_s": sp.meta["seconds_open"]}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shard-mb", type=float, default=500)
    ap.add_argument("--jobs", type=int, default=1, help="layers at a time (the CLI default is one per core)")
    ap.add_argument("--layers", type=int, default=SHAPES_1B["L"])
    ap.add_argument("--keep", type=Path, default=None)
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
        n_shards, total, largest, n_params = write_checkpoint(folder, args.shard_mb, **shape)
        t_write = time.perf_counter() - t
        MB = 2**20
        print(f"checkpoint: LLaMA shapes {shape}, {n_params / 1e9:.2f}B parameters, {n_shards} shards, "
              f"{total / MB:.0f} MB float16 (written in {t_write:.0f} s); largest tensor {largest / MB:.0f} MB")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            t = time.perf_counter()
            p = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(args.jobs)], env=env,
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
        done = np.array(res["layer_done"])
        per_layer = np.diff(np.concatenate([[res["open_s"]], done]))
        L, N, F = shape["L"], shape["N"], shape["F"]
        print(f"analysis (clean, float64, jobs={args.jobs}, one BLAS thread each): spectra {res['t_spectra']:.1f} s "
              f"(opening and validating {res['open_s']:.2f} s), scoring {res['t_score']:.2f} s; child wall "
              f"{wall:.1f} s (incl. the layer-0 breakdown)")
        print(f"  per layer: median {np.median(per_layer):.2f} s, min {per_layer.min():.2f} s, max {per_layer.max():.2f} s")
        lay = res["t_layer0"]
        print(f"  one layer sequentially {lay:.2f} s: SVD of M_in (N x 2d_ff) {res['t_svd_M_in']:.2f} s "
              f"({100 * res['t_svd_M_in'] / lay:.0f}%), SVD of M_out (d_ff x N) {res['t_svd_M_out']:.2f} s "
              f"({100 * res['t_svd_M_out'] / lay:.0f}%), heads, reading and norms the rest "
              f"({100 * (lay - res['t_svd_M_in'] - res['t_svd_M_out']) / lay:.0f}%)")
        print(f"  peak RSS {peak / MB:.0f} MB; budget 2 x largest tensor + 400 MB = {budget / MB:.0f} MB; "
              f"peak / budget = {peak / budget:.2f}")
        unit = lay / (N * N * F)
        print(f"extrapolation (seconds per layer ∝ N²·d_ff, {unit * 1e12:.3f} s per 10^12 N²·d_ff on this machine, "
              "one core per layer):")
        for name, s in TARGETS.items():
            t_layer = unit * s["N"] ** 2 * s["F"]
            mem = 8 * s["N"] * 2 * s["F"] * 3 / MB  # float64 M_in, its SVD copy, gate+up read
            print(f"  {name}: {t_layer:.0f} s per layer, {s['L'] * t_layer / 60:.0f} min with 1 job, "
                  f"{s['L'] * t_layer / 60 / 16:.1f} min with 16 jobs on 16 free cores if layers scale linearly "
                  "(not measured here); "
                  f"working set per job ≈ {mem:.0f} MB (float64 M_in, the SVD's copy, gate and up)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
