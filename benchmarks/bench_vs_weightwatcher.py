"""``bounds-lib analyze`` against WeightWatcher's ``analyze()`` on one generated LLaMA-shaped checkpoint, side by side.

The checkpoint is the one ``bench_scale_llama.py --keep DIR`` writes (default: 1.1B shapes, its first
``--layers`` layers). Each tool runs in its own child process, alternately, ``--repeats`` times, with
one BLAS thread (``OPENBLAS/OMP/MKL_NUM_THREADS=1``):

* ``bounds-lib analyze DIR --quiet --no-progress --jobs J`` (the CLI, as a user runs it);
* WeightWatcher 0.7 (the ``bench`` extra): ``LlamaForCausalLM.from_pretrained(DIR)`` in float32 (its
  default dtype), then ``WeightWatcher(model=m).analyze()`` with its defaults.

Each child reports its wall time, its CPU time and its own peak memory (``VmHWM``). The tools do not
analyse the same matrices: bounds-lib the per-head ``QK_h``/``Ṽ_h`` (QR cores) and ``M_in``,
``M_out`` of every layer; WeightWatcher every ``Linear``/``Embedding`` weight as stored (the
projections, ``gate``/``up``/``down``, the embedding and the LM head) with a full SVD; the count of
each is printed. The ratio is "what it costs to get each tool's per-layer report of this model".

``nice -n 10 .venv/bin/python benchmarks/bench_vs_weightwatcher.py --model DIR``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1",
       "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}

TAIL = r"""
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"wall": time.perf_counter() - T0, "cpu": time.process_time() - C0, "hwm": hwm, "n": N}))
"""
OURS = r"""
import json, sys, time
T0, C0 = time.perf_counter(), time.process_time()
from bounds_lib.cli import main
rc = main(["analyze", sys.argv[1], "--quiet", "--no-progress", "--jobs", sys.argv[2], "--json", sys.argv[3]])
assert rc == 0
N = len(json.load(open(sys.argv[3]))["matrices"])
""" + TAIL
WW = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
T0, C0 = time.perf_counter(), time.process_time()
import torch, transformers, weightwatcher as ww
torch.set_num_threads(1)
m = transformers.LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
details = ww.WeightWatcher(model=m).analyze()
N = len(details)
""" + TAIL


def child(code, *args) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode}): {p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a checkpoint folder written by bench_scale_llama.py --keep")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--jobs", default="1", help="bounds-lib's --jobs (default 1: one core, as WeightWatcher)")
    args = ap.parse_args()
    import weightwatcher

    cfg = json.load(open(os.path.join(args.model, "config.json")))
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, WeightWatcher {weightwatcher.__version__}, "
          f"CPUs {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"model {args.model}: LLaMA, {cfg['num_hidden_layers']} layers, N = {cfg['hidden_size']}, d_ff = "
          f"{cfg['intermediate_size']}, vocabulary {cfg['vocab_size']}; one BLAS thread each, bounds-lib --jobs "
          f"{args.jobs}; {args.repeats} alternating repetition(s)")
    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(child(OURS, args.model, args.jobs, "/tmp/bench_vs_ww_report.json"))
        theirs.append(child(WW, args.model))
    MB = 2**20
    for name, rs, what in (("bounds-lib analyze", ours, "matrices"), ("WeightWatcher analyze()", theirs, "layers")):
        print(f"  {name:<24} wall {np.median([r['wall'] for r in rs]):8.1f} s, CPU "
              f"{np.median([r['cpu'] for r in rs]):8.1f} s, peak {max(r['hwm'] for r in rs) / MB:7.0f} MB "
              f"({rs[0]['n']} {what} reported)")
    w = np.median([r["wall"] for r in theirs]) / np.median([r["wall"] for r in ours])
    m = max(r["hwm"] for r in theirs) / max(r["hwm"] for r in ours)
    print(f"  ratio WeightWatcher / bounds-lib = {w:.1f}x in wall time, {m:.1f}x in peak memory "
          f"(load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
