"""One BLAS-thread policy for the API and the command (issue 52): ``threads=`` of ``compute_spectra`` and
``analyze`` (default 1, the command's ``--threads`` default) limits the BLAS libraries that decompose, in
a fresh interpreter where ``numpy.linalg`` was never imported before the call, and so does a limit set
through the environment before import. Each case runs in its own interpreter: which libraries are loaded,
and how many threads they were given, is state of the process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import bounds_lib.analysis.pool as POOL

#: The tests in fresh interpreters read real thread counts: a limit shows only where BLAS has 2 threads.
two_cores = pytest.mark.skipif(POOL._cores() < 2, reason="a thread limit shows only where BLAS has 2 threads")

#: Records the BLAS threads while the units run, and before and after the call, in a fresh interpreter.
_PROBE = r"""
import json, sys
import bounds_lib
from threadpoolctl import threadpool_info

def blas():
    return sorted({i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"})

def libs():
    return len([i for i in threadpool_info() if i.get("user_api") == "blas"])

seen = {"loaded_at_import": libs()}
import bounds_lib.analysis.spectra as S
from bounds_lib.checkpoints import random_bert_state_dict
real = S.run_units
def spy(*a, **kw):
    seen["during"] = blas()
    seen["libs_during"] = libs()
    return real(*a, **kw)
S.run_units = spy
sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
kw = json.loads(sys.argv[1])
fn = bounds_lib.analyze if kw.pop("api", "") == "analyze" else bounds_lib.compute_spectra
fn(sd, config=cfg, **kw)
seen["after"] = blas()
print(json.dumps(seen))
"""


def _fresh(code: str, arg: str, **env) -> dict:
    """The JSON ``code`` prints last, run with ``arg`` in a fresh interpreter without thread settings in its
    environment (but ``env``)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True,
                         env={**clean, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _probe(kw: dict, **env) -> dict:
    return _fresh(_PROBE, json.dumps(kw), **env)


@two_cores
def test_the_default_is_one_thread_though_numpy_linalg_was_not_loaded_before_the_call():
    seen = _probe({})
    assert seen["loaded_at_import"] == 0  # import bounds_lib loads no BLAS: a limit set then would limit nothing
    assert seen["during"] == [1] and seen["libs_during"] >= 1  # NumPy's OpenBLAS (and any other loaded), limited
    assert seen["after"] == [POOL._cores()]  # the machine's default again afterwards


@two_cores
@pytest.mark.parametrize("api", ["compute_spectra", "analyze"])
def test_threads_is_passed_on_and_0_leaves_the_default(api):
    assert _probe({"api": api, "threads": 2})["during"] == [2]
    assert _probe({"api": api, "threads": 0})["during"] == [POOL._cores()]
    assert _probe({"api": api})["during"] == [1]


@two_cores
def test_a_limit_from_the_environment_before_import_holds_too():
    assert _probe({"threads": 0}, OPENBLAS_NUM_THREADS="1")["during"] == [1]


@two_cores
def test_a_limit_set_before_the_libraries_load_limits_nothing():
    """Why :func:`blas_threads` imports ``numpy.linalg`` first: threadpoolctl's limit
    around an import that loads OpenBLAS leaves the new library at its default."""
    code = ("from threadpoolctl import threadpool_limits, threadpool_info\n"
            "with threadpool_limits(1):\n"
            "    import numpy.linalg\n"
            "    print(sorted({i['num_threads'] for i in threadpool_info() if i.get('user_api') == 'blas'}))\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, timeout=60)
    assert out.stdout.strip() == str([POOL._cores()])


def test_threads_is_validated_like_jobs():
    from bounds_lib.analysis.spectra import compute_spectra
    from bounds_lib.checkpoints import random_bert_state_dict

    sd, cfg = random_bert_state_dict(n_layers=1, hidden=8, n_heads=2, d_ff=16)
    with pytest.raises(ValueError, match="threads"):
        compute_spectra(sd, config=cfg, threads=-1)
    with pytest.raises(TypeError, match="threads"):
        compute_spectra(sd, config=cfg, threads=1.5)


#: A library loaded inside a block (SciPy's own OpenBLAS, on ``import scipy.linalg``; torch's OpenMP): the
#: thread counts of every loaded pool inside the block and after it, with and without
#: :func:`limit_new_libraries`, through the kernel's blocked QR, which imports SciPy itself (recorded at its
#: final SVD, once the QR has run), and through the devices' torch import.
_LOADED_INSIDE = r"""
import json, sys
import numpy as np
from threadpoolctl import threadpool_info
import bounds_lib.analysis.devices as D
import bounds_lib.analysis.kernel as K
from bounds_lib.analysis.threads import blas_threads, limit_new_libraries

def counts():
    return sorted((i["filepath"].rsplit("/", 1)[-1], i["num_threads"]) for i in threadpool_info())

how, seen = sys.argv[1], {}
limit_new_libraries()  # outside every block: nothing to limit, and nothing fails
if how == "kernel":
    real = K.svdvals
    def spy(*a, **kw):
        seen["inside"] = counts()
        return real(*a, **kw)
    K.svdvals = spy
with blas_threads(1):
    if how == "kernel":
        K._tsqr_spectrum(np.random.default_rng(0).standard_normal((300, 40)), np.dtype("float64"))
    elif how == "torch":
        D._torch()  # torch's OpenMP (a torch device's SVDs), loaded inside the block
        seen["inside"] = counts()
    else:
        import scipy.linalg.lapack
        if how == "limit":
            limit_new_libraries()
        seen["inside"] = counts()
seen["after"] = counts()
print(json.dumps(seen))
"""


def _loaded_inside(how: str) -> dict:
    return _fresh(_LOADED_INSIDE, how)


@two_cores
@pytest.mark.parametrize("how", ["limit", "kernel", "torch"])
def test_a_library_loaded_inside_the_block_gets_its_limit_and_its_default_back(how):
    """SciPy's OpenBLAS, loaded by the kernel's blocked QR inside the block, runs on the block's one thread
    (with both cores busy, its default two spinning threads made ``--jobs 1`` on a 1.1B-shaped layer more
    than six times slower); after the block every library is back at its default."""
    seen = _loaded_inside(how)
    assert len(seen["inside"]) >= 2  # NumPy's OpenBLAS and SciPy's (or torch's OpenMP)
    assert {n for _, n in seen["inside"]} == {1}
    assert {n for _, n in seen["after"]} == {POOL._cores()}
    assert [lib for lib, _ in seen["after"]] == [lib for lib, _ in seen["inside"]]


@two_cores
def test_without_it_the_library_loaded_inside_keeps_the_machine_default():
    """Why the kernel calls :func:`limit_new_libraries`: the block's limit alone misses SciPy's OpenBLAS."""
    seen = _loaded_inside("import only")
    assert sorted(n for _, n in seen["inside"]) == [1, POOL._cores()]


# --- the same rules in this process, on recorded limits (what each call limits and restores) ----------------


class _Limits:
    """Stands in for ``threadpoolctl.threadpool_limits``: records its limit, whether it is restored."""
    made: list = []

    def __init__(self, limits=None, user_api=None):
        self.limits, self.user_api, self.restored = limits, user_api, False
        _Limits.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore_original_limits()

    def restore_original_limits(self):
        assert not self.restored, "restored twice"
        self.restored = True


@pytest.fixture
def recorded(monkeypatch):
    import threadpoolctl

    _Limits.made = []
    pools = [{"user_api": "blas", "num_threads": 1}]
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", _Limits)
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [dict(p) for p in pools])
    return pools


def test_a_new_library_above_the_limit_is_limited_inside_the_block_and_restored_at_its_end(recorded):
    from bounds_lib.analysis.threads import _OPEN, blas_threads, limit_new_libraries

    limit_new_libraries()  # outside every block: nothing
    assert _Limits.made == []
    with blas_threads(2):
        outer = _Limits.made[0]
        assert (outer.limits, outer.user_api) == (2, None)  # every library: BLAS and OpenMP
        recorded.append({"user_api": "openmp", "num_threads": 2})
        limit_new_libraries()  # within the limit already: nothing
        assert len(_Limits.made) == 1
        recorded.append({"user_api": "blas", "num_threads": 3})
        limit_new_libraries()
        assert len(_Limits.made) == 2 and _Limits.made[1].limits == 2 and not _Limits.made[1].restored
        with blas_threads(1):  # the innermost block's limit is the one given
            limit_new_libraries()
            assert [m.limits for m in _Limits.made[2:]] == [1, 1]
        assert [m.restored for m in _Limits.made] == [False, False, True, True]
        assert len(_OPEN) == 1
    assert all(m.restored for m in _Limits.made) and _OPEN == []


def test_a_block_ended_by_an_error_restores_what_it_limited(recorded):
    from bounds_lib.analysis.threads import _OPEN, blas_threads, limit_new_libraries

    recorded.append({"user_api": "blas", "num_threads": 4})
    with pytest.raises(RuntimeError, match="inside"):
        with blas_threads(1):
            limit_new_libraries()
            raise RuntimeError("inside")
    assert len(_Limits.made) == 2 and all(m.restored for m in _Limits.made) and _OPEN == []


def test_threads_0_limits_nothing_and_opens_no_block(recorded):
    from bounds_lib.analysis.threads import _OPEN, blas_threads, limit_new_libraries

    recorded.append({"user_api": "blas", "num_threads": 4})
    with blas_threads(0):
        assert _OPEN == []
        limit_new_libraries()
    assert _Limits.made == []


# --- the command's own process: OpenBLAS starts with the command's threads (bounds_lib.__main__) ---------

import bounds_lib.__main__ as ENTRY  # noqa: E402


@pytest.mark.parametrize("argv, threads", [
    ([], 1), (["analyze", "m"], 1), (["analyze", "m", "--threads", "1"], 1), (["analyze", "m", "--threads", "3"], 3),
    (["analyze", "m", "--threads=2"], 2),
    (["analyze", "m", "--thr", "4"], 4), (["analyze", "m", "--th=5"], 5),
    (["analyze", "m", "--threads", "0"], None),      # 0: BLAS's own default, not ours
    (["analyze", "m", "--threads", "-1"], None), (["analyze", "m", "--threads", "x"], None),
    (["analyze", "m", "--threads"], None), (["analyze", "m", "--threads", "2", "--threads", "3"], None),
    (["analyze", "m", "--t", "2"], 1),                # --t is ambiguous with --top-k: argparse refuses it
    (["analyze", "--", "--threads", "7"], 1),          # after "--", a positional
])
def test_the_entry_reads_threads_as_the_parser_will(argv, threads):
    assert ENTRY._threads_asked(argv) == threads


def test_the_entry_agrees_with_the_parser_where_it_is_sure():
    from bounds_lib.cli import build_parser

    for argv in (["analyze", "m"], ["analyze", "m", "--threads", "3"], ["analyze", "m", "--thr=4"],
                 ["compare", "a", "b", "--threa", "2"], ["scaling", "a", "b", "--th", "6"]):
        assert build_parser().parse_args(argv).threads == ENTRY._threads_asked(argv), argv


_ENTRY_PROBE = r"""
import json, os, sys
import bounds_lib.__main__ as E
pinned = E._pin_blas_at_load(sys.argv[1:])
import numpy
from threadpoolctl import threadpool_info
print(json.dumps({"pinned": pinned, "env": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "blas": sorted({i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"})}))
"""


@two_cores
def test_the_entry_starts_openblas_with_the_commands_threads():
    assert _fresh(_ENTRY_PROBE, "analyze") == {"pinned": True, "env": "1", "blas": [1]}
    cores = POOL._cores()
    got = _fresh(_ENTRY_PROBE, "--threads=0")  # left to BLAS: one thread per core
    assert got["pinned"] is False and got["env"] is None and got["blas"] == [cores]
    got = _fresh(_ENTRY_PROBE, "analyze", OMP_NUM_THREADS="2")  # the user's variable: theirs
    assert got["pinned"] is False and got["env"] is None and got["blas"] == [2]


@pytest.mark.parametrize("argv, env, pinned", [
    (["analyze", "m"], {}, "1"), (["analyze", "m", "--threads", "4"], {}, "4"),
    (["analyze", "m", "--threads", "0"], {}, None),        # BLAS's own default
    (["analyze", "m"], {"OMP_NUM_THREADS": "3"}, None),     # the user's variables are theirs
    (["analyze", "m"], {"GOTO_NUM_THREADS": "3"}, None), (["analyze", "m"], {"OPENBLAS_NUM_THREADS": "3"}, None),
])
def test_the_entry_pins_only_an_unset_environment_before_numpy_loads(monkeypatch, argv, env, pinned):
    for var in ENTRY.BLAS_LOAD_VARIABLES:  # set, then removed: the test's end puts back what was there
        monkeypatch.setenv(var, "0")
        monkeypatch.delenv(var)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delitem(sys.modules, "numpy")  # as in a fresh process (restored after the test)
    assert ENTRY._pin_blas_at_load(argv) is (pinned is not None)
    assert os.environ.get("OPENBLAS_NUM_THREADS") == (pinned or env.get("OPENBLAS_NUM_THREADS"))
    assert {v: os.environ[v] for v in ENTRY.BLAS_LOAD_VARIABLES if v in os.environ} == (
        {**env, "OPENBLAS_NUM_THREADS": pinned} if pinned else env)


def test_the_entry_pins_with_the_command_line_then_runs_the_command(monkeypatch):
    import bounds_lib.cli as cli

    seen = []
    monkeypatch.setattr(sys, "argv", ["bounds-lib", "analyze", "m", "--threads", "2"])
    monkeypatch.setattr(ENTRY, "_pin_blas_at_load", lambda argv: seen.append(("pin", list(argv))))
    monkeypatch.setattr(cli, "main", lambda: seen.append(("run",)) or 7)
    assert ENTRY.main() == 7 and seen == [("pin", ["analyze", "m", "--threads", "2"]), ("run",)]


def test_the_entry_leaves_a_process_whose_numpy_is_loaded(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("GOTO_NUM_THREADS", raising=False)
    assert "numpy" in sys.modules and ENTRY._pin_blas_at_load(["analyze"]) is False
    assert "OPENBLAS_NUM_THREADS" not in os.environ


@two_cores
def test_the_console_script_runs_with_one_thread_and_raises_it_when_asked(tmp_path):
    """End to end: the command pinned OpenBLAS to 1 thread at load, and --threads 3 still gets 3 threads."""
    from tiny_checkpoints import write_tiny_bert

    model = write_tiny_bert(tmp_path / "m", hidden=16, layers=1, heads=2, intermediate=32)
    clean = {k: v for k, v in os.environ.items() if k not in ENTRY.BLAS_LOAD_VARIABLES}
    for extra, want in (([], 1), (["--threads", "3"], 3)):
        out = tmp_path / f"r{want}.json"
        r = subprocess.run([sys.executable, "-m", "bounds_lib", "analyze", str(model), "--quiet", "--no-progress",
                            "--json", str(out), *extra], capture_output=True, text=True, env=clean, timeout=120)
        assert r.returncode == 0, r.stderr
        assert {b["threads"] for b in json.loads(out.read_text())["meta"]["blas"]} == {want}
