"""Exit status after a correct error (issue 51, item 1): a refused model, analysed with ``--json``, prints
its one error line and exits 1 — every time, never a crash at interpreter shutdown.

The crash came from the thread that looked up versions and the platform for the JSON report
(``bounds-lib-run-facts``): it could still be importing when the interpreter shut down after the error,
and the process died with SIGSEGV (rc 139) after its message: 8 of 40 runs of a refused LLaMA config in
the issue, 1 of 40 on this project's machine. It was first joined on every way out; since the lookup
takes about a millisecond (:mod:`bounds_lib.core.facts`, issue 52) there is no thread at all, and the
facts are looked up when the report is written.

Two checks: in this process, a refused run starts no thread and looks nothing up, and a report's facts
are looked up once a process; and 100 processes of each refusal path — a config the layout refuses, and
a file the process has no address space to map (``RLIMIT_AS``, as ``ulimit -v``) — all exit 1 with the
one line.
"""
from __future__ import annotations

import collections
import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tiny_checkpoints import bert_encoder_weights, write_tiny_bert

from bounds_lib.cli import analyze as A
from bounds_lib.cli import main

REPEATS = 100
#: Address space a refused run gets on the memory path: Python, NumPy and the library fit, a 4 GiB map does not.
ADDRESS_SPACE = 2560 * 2**20
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "PYTHONHASHSEED": "0",
       "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}


def _refused_config(d: Path) -> Path:
    """A BERT checkpoint whose config says 3 heads of a hidden size 16 (3 does not divide 16)."""
    w = bert_encoder_weights(hidden=16, intermediate=32, layers=1)
    return write_tiny_bert(d, hidden=16, layers=1, heads=4, intermediate=32, weights=w, num_attention_heads=3)


def _unmappable(d: Path) -> Path:
    """A valid BERT checkpoint plus an unused 4 GiB tensor (a sparse file): mapping it needs the address space."""
    write_tiny_bert(d, hidden=16, layers=1, heads=4, intermediate=32,
                    weights=bert_encoder_weights(hidden=16, intermediate=32, layers=1))
    f = d / "model.safetensors"
    raw = f.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    header["unused.big"] = {"dtype": "F32", "shape": [2**30], "data_offsets": [len(data), len(data) + 2**32]}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(f, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + data)
        fh.truncate(8 + len(h) + len(data) + 2**32)
    return d


def _limit_address_space():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _exit_statuses(model: Path, out: Path, fragment: str, limit=None, parallel: int = 4) -> collections.Counter:
    """``{rc: count}`` of :data:`REPEATS` runs of ``bounds-lib analyze model --json out``, ``parallel`` at a
    time; each run's stderr must be the one error line naming ``fragment``."""
    cmd = [sys.executable, "-m", "bounds_lib", "analyze", str(model), "--json", str(out), "--jobs", "1"]
    rcs = collections.Counter()
    for start in range(0, REPEATS, parallel):
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                  preexec_fn=limit) for _ in range(start, min(start + parallel, REPEATS))]
        for p in procs:
            _, err = p.communicate(timeout=120)
            rcs[p.returncode] += 1
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("bounds-lib: error:") and fragment in lines[0], err
    assert not out.exists()
    return rcs


def _counting_lookup(monkeypatch) -> list:
    """Empty facts, and a list that gets one entry per :func:`~bounds_lib.cli.analyze._lookup_facts` call."""
    monkeypatch.setattr(A, "_FACTS", {})
    calls = []
    lookup = A._lookup_facts

    def counted():
        calls.append(threading.current_thread().name)
        lookup()

    monkeypatch.setattr(A, "_lookup_facts", counted)
    return calls


def test_a_refused_run_starts_no_thread_and_looks_nothing_up(tmp_path, capsys, monkeypatch):
    calls = _counting_lookup(monkeypatch)
    before = set(threading.enumerate())
    model = _refused_config(tmp_path / "m")
    for _ in range(2):
        assert main(["analyze", str(model), "--json", str(tmp_path / "r.json"), "--jobs", "1"]) == 1
        assert "3 attention heads do not divide the hidden size 16" in capsys.readouterr().err
        assert set(threading.enumerate()) == before and calls == []


def test_the_facts_are_looked_up_once_a_process_and_written_in_the_report(tmp_path, monkeypatch):
    from bounds_lib.core.facts import dist_version, platform_text

    calls = _counting_lookup(monkeypatch)
    w = bert_encoder_weights(hidden=16, intermediate=32, layers=1)
    model = write_tiny_bert(tmp_path / "m", hidden=16, layers=1, heads=4, intermediate=32, weights=w)
    for k in range(2):
        out = tmp_path / f"r{k}.json"
        assert main(["analyze", str(model), "--json", str(out), "--jobs", "1", "--quiet", "--no-progress"]) == 0
        meta = json.loads(out.read_text())["meta"]
        assert meta["platform"] == platform_text()
        assert (meta["versions"]["bounds_lib"], meta["versions"]["scipy"]) == (dist_version("bounds_lib"),
                                                                             dist_version("scipy"))
    assert calls == ["MainThread"]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["config refused", "no memory to map"])
def test_a_refused_model_exits_1_every_time(path, tmp_path):
    if path == "config refused":
        rcs = _exit_statuses(_refused_config(tmp_path / "m"), tmp_path / "r.json",
                             "3 attention heads do not divide the hidden size 16")
    else:
        if sys.platform != "linux":
            pytest.skip("RLIMIT_AS and sparse files as on Linux")
        rcs = _exit_statuses(_unmappable(tmp_path / "m"), tmp_path / "r.json", "not enough memory to map the file",
                             limit=_limit_address_space)
    print(f"\n{path}: rc histogram over {REPEATS} runs: {dict(rcs)}")
    assert rcs == {1: REPEATS}, dict(rcs)


@pytest.mark.parametrize("raised, line", [
    (MemoryError("a 4×4 float64 matrix (1 MB) and its SVD do not fit"),
     "bounds-lib: error: a 4×4 float64 matrix (1 MB) and its SVD do not fit"),
    (MemoryError(), "bounds-lib: error: MemoryError"),
    (RuntimeError("boom"), "bounds-lib: error: RuntimeError: boom"),
])
def test_a_memory_refusal_is_one_plain_line(tmp_path, capsys, monkeypatch, raised, line):
    """A memory refusal reads as the library's sentence (no ``MemoryError:`` before it); an empty one is
    named; an error of another kind keeps its type's name."""
    def refuse(args):
        raise raised

    monkeypatch.setattr(A, "_cmd_analyze", refuse)
    model = write_tiny_bert(tmp_path / "m")
    capsys.readouterr()  # the writer's progress bar
    assert main(["analyze", str(model), "--jobs", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line], err
