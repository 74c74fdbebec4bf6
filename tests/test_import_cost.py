"""What a ``bounds-lib analyze`` process loads and how it sets itself up (issue 34: all-MiniLM-L6-v2 at its
SVD floor, ``benchmarks/POOL.md``).

On a safetensors checkpoint the command needs NumPy, safetensors, threadpoolctl and the library. It must not
import what this run never uses: torch, transformers, matplotlib (no ``--plots``), SciPy, Dask, the Hub
client (a local folder), tqdm (no progress bar), :mod:`importlib.metadata` (its e-mail parser, 25–37 ms:
a JSON report's versions are read from the ``.dist-info`` folders, :mod:`bounds_lib.core.facts`),
:mod:`hashlib` (OpenSSL; the checkpoint's identity uses CPython's own BLAKE2), :mod:`csv` (no ``--csv``),
:mod:`socket`, or ``numpy.ma`` (17 ms, imported by the first ``np.median`` or ``np.unique``: the pool's decision and the
report's standouts take their medians with ``bounds_lib.analysis.pool._median``). Each was an eager
import once, or could become one; together they were a tenth of a MiniLM run. The versions the report
states stay those of :mod:`importlib.metadata`, and the process tuning (allocator, garbage collector,
and its objects frozen at the end) applies to the command's own process, never to a caller of
:func:`bounds_lib.cli.main`.
"""
import gc
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys

import pytest

from tiny_checkpoints import bert_encoder_weights, write_tiny_bert

from bounds_lib.cli import GC_THRESHOLDS, main

#: Modules an analysis of a local safetensors checkpoint never needs.
NOT_NEEDED = ("torch", "transformers", "matplotlib", "scipy", "dask", "distributed", "huggingface_hub", "tqdm",
              "hashlib", "pandas", "numpy.ma", "statistics")
#: ... nor, with or without a JSON report, the package metadata reader and what it imports (``--csv`` aside).
METADATA = ("importlib.metadata", "email", "csv", "socket")

#: The console script, plus what the process holds at the end (printed after the report, which goes to a file).
RUN = ("import gc, json, sys\n"
       "from bounds_lib.cli import main\n"
       "rc = main()\n"
       "print(json.dumps({'rc': rc, 'modules': sorted(sys.modules), 'gc': gc.get_threshold(),\n"
       "                  'frozen': gc.get_freeze_count()}))\n")


def _model(tmp_path):
    w = bert_encoder_weights(hidden=16, intermediate=32, layers=2)
    return write_tiny_bert(tmp_path / "model", weights=w, hidden=16, intermediate=32, layers=2, heads=2)


def _run(tmp_path, *extra, report=True):
    out = tmp_path / "r.json"
    args = ["--json", str(out)] if report else []
    p = subprocess.run([sys.executable, "-c", RUN, "analyze", str(_model(tmp_path)), "--quiet", "--no-progress",
                        *args, *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1]), (json.loads(out.read_text()) if report else None)


@pytest.mark.parametrize("jobs", ["0", "1"])
@pytest.mark.parametrize("report", [True, False])
def test_an_analysis_imports_nothing_it_does_not_use(tmp_path, jobs, report):
    res, _ = _run(tmp_path, "--jobs", jobs, report=report)
    assert res["rc"] == 0
    loaded = [m for m in NOT_NEEDED + METADATA if m in res["modules"]]
    assert loaded == [], f"bounds-lib analyze imported {loaded}: import them where they are used"
    assert "bounds_lib.analysis.plotting" not in res["modules"]  # only with --plots


def test_the_report_states_the_versions_and_platform_as_before(tmp_path):
    _, rep = _run(tmp_path, "--jobs", "1")
    v = rep["meta"]["versions"]
    assert v["bounds_lib"] == md.version("bounds_lib")
    assert v["scipy"] == md.version("scipy")
    assert rep["meta"]["platform"] == platform.platform()


def test_the_command_tunes_its_own_process_only(tmp_path):
    res, _ = _run(tmp_path, "--jobs", "1")
    assert tuple(res["gc"]) == GC_THRESHOLDS
    assert res["frozen"] > 10_000  # the objects left at exit: no last collection walks them
    before = gc.get_threshold(), gc.get_freeze_count()
    assert main(["analyze", str(_model(tmp_path / "again")), "--quiet", "--no-progress", "--jobs", "1"]) == 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before  # a caller passing argv keeps its process


def test_import_bounds_lib_reads_no_metadata_until_the_version_is_asked():
    code = ("import sys, bounds_lib; a = 'importlib.metadata' in sys.modules; v = bounds_lib.__version__;"
            "print(a, v, 'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", md.version("bounds_lib"), "True"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_allocator_is_tuned_unless_the_user_tunes_it():
    code = "from bounds_lib.analysis.pool import tune_allocator; print(tune_allocator())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    try:
        os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        pytest.skip("not glibc")
    run = lambda e: subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,  # noqa: E731
                                   check=True).stdout.strip()
    assert run(env) == "True"
    assert run({**env, "MALLOC_ARENA_MAX": "2"}) == "False"
    assert run({**env, "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}) == "False"
