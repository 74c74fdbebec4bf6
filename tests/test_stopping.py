"""The pool and Dask paths stop when told (issue 35): a signal or a unit's error cancels the units not
started and ends the workers at once; workers die with their parent; every Dask wait has a deadline;
the pool reads its own cgroup's memory limit; a memory failure is called one; the report names the device
used.

Each behaviour is tested end to end where it matters (the ``bounds-lib`` process, its worker processes
found through ``/proc``), and each test failed on the code before the change: the executor's own exit
waited for every pending unit, workers outlived a SIGKILLed parent, ``distributed.Client`` waited without
end on a silent listener, a scheduler without workers was waited on forever.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import bounds_lib.analysis.cluster as CLUSTER
import bounds_lib.analysis.pool as POOL
from tiny_checkpoints import bert_encoder_weights, write_tiny_bert

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

EXE = str(Path(sys.executable).with_name("bounds-lib"))
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "HF_HUB_OFFLINE": "1"}
LAYERS = 3  # 9 units: each layer's attention, M_in (768×6144), M_out — about a second each of SVD


@pytest.fixture(scope="module")
def slow_dir(tmp_path_factory):
    """A BERT-layout checkpoint whose feed-forward units take about a second each (2 · 4.6e9 flop)."""
    return write_tiny_bert(tmp_path_factory.mktemp("slow"), hidden=768, layers=LAYERS, heads=12, intermediate=6144,
                           weights=bert_encoder_weights(hidden=768, intermediate=6144, layers=LAYERS))


def _children(pid) -> set:
    """Pids of the live processes whose parent is ``pid``."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(d.name))
    return out


def _alive(pid) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _wait(cond, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _start(args, log, **popen):
    env = {**ENV, "BOUNDS_LIB_UNIT_LOG": str(log)}
    return subprocess.Popen([EXE, "analyze", *map(str, args), "--quiet", "--no-progress"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _lines(log) -> list:
    try:
        return [json.loads(x) for x in Path(log).read_text().splitlines() if x.strip()]
    except OSError:
        return []


needs_two = pytest.mark.skipif(POOL._cores() < 2, reason="a process pool needs two cores here")


@needs_two
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_cancels_the_units_not_started_and_ends_the_workers(slow_dir, tmp_path, sig):
    log, out = tmp_path / "units.jsonl", tmp_path / "r.json"
    p = _start([slow_dir, "--jobs", "2", "--json", out], log)
    try:
        assert _wait(lambda: len(_lines(log)) >= 1, 300), "no unit finished"
        workers = _children(p.pid)
        assert len(workers) >= 2, workers  # the two workers (and multiprocessing's resource tracker)
        t = time.monotonic()
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
        stopped_in = time.monotonic() - t
    finally:
        p.kill()
    assert p.returncode == 128 + int(sig), err
    assert stopped_in < 8, f"took {stopped_in:.1f} s to stop"
    done = len(_lines(log))
    assert done < 3 * LAYERS - 2, f"{done} of {3 * LAYERS} units ran after the signal was sent"
    assert _wait(lambda: not any(_alive(w) for w in workers), 5), "a worker outlived the run"
    assert not out.exists()  # nothing half-written


def _stopped_while_waiting(poll=True, gate_s=10.0):
    """SIGTERM sent to this process 0.3 s into ``parallel._finished`` (under the CLI's handlers) while
    the one unit waits on a gate for ``gate_s`` s: ``(the Stopped raised, seconds to it)``."""
    from concurrent.futures import ThreadPoolExecutor

    import bounds_lib.analysis.parallel as PAR
    from bounds_lib.cli import signals
    from bounds_lib.core import interrupts

    gate = threading.Event()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(gate.wait, gate_s)
        t = time.monotonic()
        try:
            with signals._stop_signals_raise():
                timer.start()
                with interrupts.signals_held():
                    for _ in (PAR._finished([fut]) if poll else [fut.result()]):
                        pass
        except interrupts.Stopped as exc:
            return exc, time.monotonic() - t
        finally:
            gate.set()
            timer.cancel()
    raise AssertionError("no Stopped raised")


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="handlers need the main thread")
def test_a_signal_is_raised_between_two_waits_never_inside_the_executor():
    """The CI failure this guards against (a run that printed "stopped by SIGHUP" and never exited): the
    handler raised inside the executor's locks. Held, the signal is raised by ``raise_pending`` in
    ``_finished`` within a poll step, with no frame of ``threading`` or ``concurrent.futures`` below it."""
    import traceback

    exc, took = _stopped_while_waiting()
    assert exc.signum == signal.SIGTERM
    frames = traceback.extract_tb(exc.__traceback__)
    assert [f.name for f in frames[-2:]] == ["_finished", "raise_pending"], frames
    assert not any(("concurrent" + os.sep + "futures") in f.filename or f.filename.endswith("threading.py")
                   for f in frames), frames
    assert took < 3, f"stopped {took:.1f} s after the signal (the poll step is 0.2 s)"
    # without the checkpoints in the wait the held signal waits for the unit: the check can fail
    exc, took = _stopped_while_waiting(poll=False, gate_s=1.5)
    assert took >= 1.4 and traceback.extract_tb(exc.__traceback__)[-1].name == "raise_pending"


@needs_two
def test_a_sigkilled_parent_leaves_no_live_worker(slow_dir, tmp_path):
    log = tmp_path / "units.jsonl"
    p = _start([slow_dir, "--jobs", "2"], log)
    try:
        assert _wait(lambda: len(_children(p.pid)) >= 2 and len(_lines(log)) >= 1, 300)
        workers = _children(p.pid)
        p.kill()
        p.wait(10)
    finally:
        p.kill()
    assert _wait(lambda: not any(_alive(w) for w in workers), 5), "workers outlived their SIGKILLed parent"


@needs_two
def test_a_worker_sigkilled_mid_run_is_one_clear_error_and_nothing_written(slow_dir, tmp_path):
    """As the kernel's OOM killer ends a worker: the run stops with one line naming the likely cause, exit 1,
    the other worker ended, no report written."""
    log, out = tmp_path / "units.jsonl", tmp_path / "r.json"
    p = _start([slow_dir, "--jobs", "2", "--json", out], log)
    try:
        assert _wait(lambda: len(_lines(log)) >= 1, 300), "no unit finished"
        workers = _children(p.pid)
        victim = max(workers)  # a worker (the resource tracker starts first, with the lowest pid)
        os.kill(victim, signal.SIGKILL)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "a worker process died" in lines[0] and "out-of-memory" in lines[0], err
    assert not out.exists()
    assert _wait(lambda: not any(_alive(w) for w in workers), 5)


def test_the_watchdog_alone_ends_a_worker_whose_parent_died(tmp_path):
    """Without the kernel's parent-death signal (prctl disabled here), the watchdog thread ends the worker."""
    pidfile = tmp_path / "child.pid"
    child = ("import ctypes, os, sys, time\n"
             "def no(*a, **k): raise OSError('prctl disabled by the test')\n"
             "ctypes.CDLL = no\n"
             "from bounds_lib.analysis.pool import _worker_init\n"
             "_worker_init(os.getppid())\n"
             f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
             "time.sleep(120)\n")
    parent = (f"import subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
              "time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", parent], env=ENV)
    try:
        assert _wait(lambda: pidfile.is_file() and pidfile.read_text().strip(), 60)
        worker = int(pidfile.read_text())
        assert _alive(worker)
        p.kill()
        p.wait(10)
        assert _wait(lambda: not _alive(worker), 3 + 2 * POOL._WATCHDOG_S), "the watchdog did not end the worker"
    finally:
        p.kill()


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
    r = subprocess.run([sys.executable, "-c", "from bounds_lib.analysis.pool import _worker_init\n_worker_init(1)\n"
                        "import time; time.sleep(30)"], env=ENV, timeout=60)
    assert r.returncode == 1


@needs_two
def test_an_error_in_one_unit_stops_the_others(tmp_path):
    """A NaN in the first layer's weights fails its unit; the units not started are not computed."""
    w = bert_encoder_weights(hidden=768, intermediate=6144, layers=LAYERS)
    w["encoder.layer.0.intermediate.dense.weight"][3, 5] = np.nan
    folder = write_tiny_bert(tmp_path / "nan", hidden=768, layers=LAYERS, heads=12, intermediate=6144, weights=w)
    log = tmp_path / "units.jsonl"
    t = time.monotonic()
    p = _start([folder, "--jobs", "2"], log)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1 and "NaN" in err and "Traceback" not in err, err
    done = len(_lines(log))
    assert done < 3 * LAYERS - 2, f"{done} of {3 * LAYERS} units ran after one failed ({time.monotonic() - t:.1f} s)"


def _silent_listener():
    """A TCP server that accepts connections and never says a word; ``(address, close)``."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()

    def close():
        stop.set()
        for c in conns:
            c.close()
        srv.close()

    return f"tcp://127.0.0.1:{srv.getsockname()[1]}", close


def _garbage_server():
    """A TCP server that answers every connection with bytes that are not Dask's protocol."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve():
        while True:
            try:
                c = srv.accept()[0]
                c.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + os.urandom(256))
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{srv.getsockname()[1]}", srv.close


@pytest.mark.parametrize("server", [_silent_listener, _garbage_server], ids=["silent", "garbage"])
def test_a_scheduler_address_that_never_completes_the_handshake_exits_within_its_timeout(slow_dir, tmp_path,
                                                                                        server):
    pytest.importorskip("distributed")
    address, close = server()
    try:
        t = time.monotonic()
        r = subprocess.run([EXE, "analyze", str(slow_dir), "--scheduler", address, "--scheduler-timeout", "2",
                            "--quiet", "--no-progress"], env=ENV, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t
    finally:
        close()
    assert r.returncode == 1, r.stderr
    err = r.stderr.strip()
    assert err.startswith("bounds-lib: error: cannot reach a Dask scheduler") and "\n" not in err, err
    assert "within 2 s" in err
    assert took < 2 + 10, f"{took:.1f} s"  # the deadline, plus starting Python and the library


def test_a_scheduler_with_no_workers_is_one_clear_error(slow_dir):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, dashboard_address=":0") as cluster:
        t = time.monotonic()
        r = subprocess.run([EXE, "analyze", str(slow_dir), "--scheduler", cluster.scheduler_address,
                            "--scheduler-timeout", "2", "--quiet", "--no-progress"], env=ENV, capture_output=True,
                           text=True, timeout=120)
        took = time.monotonic() - t
    assert r.returncode == 1 and "has no workers" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert took < 2 + 15, f"{took:.1f} s"


def test_tasks_pending_on_a_cluster_without_workers_are_an_error_within_the_timeout():
    """dask_results: a cluster that has no worker (lost, or never started) while tasks are pending is an
    error after ``timeout`` — not a wait without end."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        fut = client.submit(time.sleep, 0.1, pure=False)
        t = time.monotonic()
        with pytest.raises(CLUSTER.ClusterError, match="no workers for 1 s with 1 tasks pending"):
            for _ in CLUSTER.dask_results(client, [fut], timeout=1):
                pass
        assert time.monotonic() - t < 1 + 6


def test_a_unit_timeout_bounds_a_stuck_worker():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0",
                                  processes=False) as cluster, distributed.Client(cluster) as client:
        fut = client.submit(time.sleep, 4, pure=False)
        t = time.monotonic()
        with pytest.raises(CLUSTER.ClusterError, match=r"no result from the Dask cluster for 1\.5 s"):
            for _ in CLUSTER.dask_results(client, [fut], timeout=5, unit_timeout=1.5):
                pass
        assert time.monotonic() - t < 1.5 + 2


def test_the_grid_scheduler_has_the_same_deadlines(monkeypatch, tmp_path):
    pytest.importorskip("distributed")
    from bounds_lib.studies import grid

    monkeypatch.setattr(CLUSTER, "SCHEDULER_TIMEOUT_S", 1.0)
    address, close = _silent_listener()
    box = {}

    def dispatch():  # in a thread: a wait without end must fail this test, not hang it
        try:
            grid._dispatch([{}], [0], None, 1, address, lambda i, row: None)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    try:
        t = time.monotonic()
        th = threading.Thread(target=dispatch, daemon=True)
        th.start()
        th.join(30)
        assert not th.is_alive(), "the grid's --scheduler still waits after 30 s (deadline 1 s)"
        assert isinstance(box.get("error"), CLUSTER.ClusterError), box
        assert "cannot reach a Dask scheduler" in str(box["error"]) and "within 1 s" in str(box["error"])
        assert time.monotonic() - t < 6
    finally:
        close()


def test_the_unit_timeout_option_is_checked(slow_dir, capsys):
    from bounds_lib.cli import main

    assert main(["analyze", str(slow_dir), "--unit-timeout", "0", "--quiet", "--no-progress"]) == 1
    assert "--unit-timeout must be a positive number of seconds, got 0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# Memory: the process's own cgroup; a memory failure called one
# ---------------------------------------------------------------------------------------------------


def _tree(tmp_path, files: dict, own: str) -> tuple:
    root = tmp_path / "cg"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    proc = tmp_path / "self-cgroup"
    proc.parent.mkdir(parents=True, exist_ok=True)
    proc.write_text(own)
    return root, proc


def test_cgroup_v2_reads_the_process_own_group_and_its_tightest_ancestor(tmp_path):
    GB = 2**30
    root, proc = _tree(tmp_path, {
        "memory.max": "max", "memory.current": str(50 * GB),  # the machine: no limit
        "slurm/memory.max": str(64 * GB), "slurm/memory.current": str(10 * GB),  # the job: 54 GB left
        "slurm/job_7/memory.max": str(8 * GB), "slurm/job_7/memory.current": str(3 * GB),  # the step: 5 GB left
        "slurm/job_7/step_0/memory.max": "max", "slurm/job_7/step_0/memory.current": str(GB)},
        "0::/slurm/job_7/step_0\n")
    assert POOL._cgroup_memory_left(root, proc) == 5 * GB
    # the old reading (the hierarchy's root only) saw no limit at all
    root2, proc2 = _tree(tmp_path / "b", {"memory.max": "max", "memory.current": "1"}, "0::/\n")
    assert POOL._cgroup_memory_left(root2, proc2) is None


def test_cgroup_v1_and_a_hybrid_layout(tmp_path):
    MB = 2**20
    root, proc = _tree(tmp_path, {
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "5",
        "memory/box/memory.limit_in_bytes": str(900 * MB), "memory/box/memory.usage_in_bytes": str(100 * MB),
        "unified/cgroup.procs": ""}, "4:memory:/box\n0::/\n")
    assert POOL._cgroup_memory_left(root, proc) == 800 * MB
    root, proc = _tree(tmp_path / "none", {}, "0::/x\n")
    assert POOL._cgroup_memory_left(root, proc) is None


def test_a_cgroup_limit_limits_the_pool(monkeypatch):
    monkeypatch.setattr(POOL, "_cgroup_memory_left", lambda: 300 * 2**20)
    avail, where = POOL.available_memory()
    assert avail == 300 * 2**20 and "cgroup" in where
    k, why = POOL.choose_workers(8, 10, 200 * 2**20)
    assert k == 1 and "memory" in why["limited_by"]


def test_a_file_that_cannot_be_mapped_for_lack_of_memory_is_not_called_bad(monkeypatch, tmp_path, capsys):
    import safetensors

    from bounds_lib.checkpoints import formats
    from bounds_lib.cli import main

    folder = write_tiny_bert(tmp_path / "m", weights=bert_encoder_weights(hidden=32, intermediate=64, layers=2))

    def no_memory(*a, **k):
        raise safetensors.SafetensorError("Error while deserializing header: Cannot allocate memory (os error 12)")

    monkeypatch.setattr(safetensors, "safe_open", no_memory)
    with pytest.raises(MemoryError, match="not enough memory to map the file"):
        formats._library_check(folder / "model.safetensors")
    assert main(["analyze", str(folder), "--quiet", "--no-progress", "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert "not enough memory" in err and "rejects the file" not in err


def test_a_worker_killed_mid_unit_is_one_clear_error(monkeypatch, tmp_path):
    """A worker ended by a signal (as the OOM killer does) is a ClusterError naming memory, not a traceback
    (the process pool of ``bounds_lib.analysis.pool.process_pool`` turns the broken pool into it)."""
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    from bounds_lib.analysis.spectra import compute_spectra

    folder = write_tiny_bert(tmp_path / "m", weights=bert_encoder_weights(hidden=32, intermediate=64, layers=2))

    class Broken:  # a pool whose worker died before its first unit
        _processes = {}

        def __init__(self, *a, **k):
            pass

        def submit(self, *a, **k):
            raise BrokenProcessPool("A process in the process pool was terminated abruptly")

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Broken)
    monkeypatch.setattr(POOL, "_cores", lambda: 2)
    with pytest.raises(CLUSTER.ClusterError, match="out-of-memory killer"):
        compute_spectra(folder, jobs=2)


def test_the_report_names_the_device_used_not_auto(tmp_path):
    from bounds_lib.cli import main

    folder = write_tiny_bert(tmp_path / "m", weights=bert_encoder_weights(hidden=32, intermediate=64, layers=2))
    out = tmp_path / "r.json"
    assert main(["analyze", str(folder), "--device", "auto", "--json", str(out), "--quiet", "--no-progress"]) == 0
    import torch

    assert json.loads(out.read_text())["meta"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
