"""Peak memory of ``bounds-lib analyze`` on a generated, sharded, BERT-Large-shaped checkpoint.

The benchmark writes a random checkpoint with BERT-Large's shapes (24 layers, hidden 1024, 16 heads,
feed-forward 4096, vocabulary 30522; float32, about 1.3 GB) in several safetensors shards plus a
``model.safetensors.index.json``, runs ``bounds-lib analyze`` on it in a child process, and reads the
child's peak resident set size (``getrusage(RUSAGE_CHILDREN).ru_maxrss``). Goal: peak ≤ 2 × the
largest tensor + 400 MB. The checkpoint is written to a temporary folder and deleted afterwards
(``--keep DIR`` keeps it).

Run: ``.venv/bin/python benchmarks/bench_memory.py [--layers 24] [--shard-mb 300]``.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sharded_checkpoint import write_sharded


def bert_large_shapes(L, N=1024, F=4096, vocab=30522, positions=512):
    shapes = {"embeddings.word_embeddings.weight": (vocab, N),
              "embeddings.position_embeddings.weight": (positions, N),
              "embeddings.token_type_embeddings.weight": (2, N),
              "embeddings.LayerNorm.weight": (N,), "embeddings.LayerNorm.bias": (N,)}
    for l in range(L):
        p = f"encoder.layer.{l}."
        for name, shp in (("attention.self.query", (N, N)), ("attention.self.key", (N, N)),
                          ("attention.self.value", (N, N)), ("attention.output.dense", (N, N)),
                          ("intermediate.dense", (F, N)), ("output.dense", (N, F))):
            shapes[p + name + ".weight"] = shp
            shapes[p + name + ".bias"] = (shp[0],)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + ln + ".weight"] = (N,)
            shapes[p + ln + ".bias"] = (N,)
    shapes["pooler.dense.weight"] = (N, N)
    shapes["pooler.dense.bias"] = (N,)
    return shapes


def write_checkpoint(folder: Path, L: int, shard_mb: float, seed=0):
    """Write shards one at a time (the generator itself never holds more than one shard)."""
    config = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 1024, "num_hidden_layers": L,
              "num_attention_heads": 16, "intermediate_size": 4096, "hidden_act": "gelu", "vocab_size": 30522,
              "max_position_embeddings": 512, "type_vocab_size": 2}
    return write_sharded(folder, config, bert_large_shapes(L), np.float32, shard_mb, seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--shard-mb", type=float, default=300)
    ap.add_argument("--keep", type=Path, default=None, help="write the checkpoint here and keep it")
    ap.add_argument("--mode", choices=("clean", "paper"), default="clean")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bounds-lib-bench-large-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        n_shards, total, largest = write_checkpoint(folder, args.layers, args.shard_mb)
        t_write = time.perf_counter() - t
        exe = os.path.join(os.path.dirname(sys.executable), "bounds-lib")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t = time.perf_counter()
        r = subprocess.run([exe, "analyze", str(folder), "--quiet", "--no-progress", "--mode", args.mode],
                           env=env, capture_output=True, text=True)
        t_run = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"bounds-lib failed: {r.stderr}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
        if peak <= before * 1024:
            print("warning: the child's peak did not exceed an earlier child's; the number below is an upper bound")
        MB = 2**20
        budget = 2 * largest + 400 * MB
        print(f"checkpoint: BERT-Large shapes, {args.layers} layers, {n_shards} shards, {total / MB:.0f} MB float32 "
              f"(written in {t_write:.1f} s); largest tensor {largest / MB:.1f} MB")
        print(f"bounds-lib analyze --mode {args.mode}: {t_run:.1f} s, peak RSS {peak / MB:.0f} MB")
        print(f"budget 2 x largest tensor + 400 MB = {budget / MB:.0f} MB; peak / budget = {peak / budget:.2f}; "
              f"peak / checkpoint size = {peak / total:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
