"""The process pool's parts, called in this process: the allocator setting, a worker's start (parent-death signal,
watchdog, initializer, frozen start-up objects), stopping a pool, and :func:`process_pool`'s exits.

The real pools, signals and killed parents are in tests/test_stopping.py; there these functions run in spawned
workers, where neither a spy nor mutation testing sees them. Here every outside call is replaced by a recorder."""
from __future__ import annotations

import ctypes
import gc
import signal
import threading
from types import SimpleNamespace

import pytest

import bounds_lib.analysis.pool as POOL
from bounds_lib.analysis.cluster import ClusterError

MB = 2**20


class _Exit(Exception):
    """What the patched ``os._exit`` raises (its code in ``args[0]``)."""


def _exit(code):
    raise _Exit(code)


# --- the allocator -------------------------------------------------------------------------------------


@pytest.fixture
def libc(monkeypatch):
    """A glibc whose ``mallopt`` records its calls and answers ``answers`` (1: set)."""
    calls = []
    lib = SimpleNamespace(answers={}, calls=calls)
    lib.mallopt = lambda p, v: calls.append((p, v)) or lib.answers.get(p, 1)
    monkeypatch.setattr(POOL.sys, "platform", "linux")
    for k in [k for k in POOL.os.environ if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(POOL.os, "confstr", lambda name: "glibc 2.36")
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: lib)
    return lib


def test_the_allocator_gets_both_settings_on_glibc(libc):
    assert POOL.tune_allocator() is True
    assert libc.calls == [(-3, 32 * MB), (-1, 64 * MB)] == list(POOL.MALLOC_SETTINGS)


def test_a_refused_setting_is_reported_after_both_were_tried(libc):
    libc.answers[-3] = 0
    assert POOL.tune_allocator() is False
    assert libc.calls == [(-3, 32 * MB), (-1, 64 * MB)]


@pytest.mark.parametrize("env", [{"MALLOC_ARENA_MAX": "2"}, {"MALLOC_TRIM_THRESHOLD_": "1"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}])
def test_the_users_own_malloc_settings_are_left_alone(libc, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert POOL.tune_allocator() is False and libc.calls == []


def test_other_systems_and_c_libraries_are_left_alone(libc, monkeypatch):
    monkeypatch.setattr(POOL.sys, "platform", "darwin")
    assert POOL.tune_allocator() is False
    monkeypatch.setattr(POOL.sys, "platform", "linux2")  # any Linux
    assert POOL.tune_allocator() is True
    libc.calls.clear()
    monkeypatch.setattr(POOL.os, "confstr", lambda name: (_ for _ in ()).throw(ValueError(name)))  # musl
    assert POOL.tune_allocator() is False and libc.calls == []


@pytest.mark.parametrize("error", [OSError, AttributeError])
def test_a_c_library_without_mallopt_is_left_alone(libc, monkeypatch, error):
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: (_ for _ in ()).throw(error("no")))
    assert POOL.tune_allocator() is False


def test_the_confstr_asked_is_glibcs_version(libc, monkeypatch):
    asked = []
    monkeypatch.setattr(POOL.os, "confstr", lambda name: asked.append(name) or "glibc 2.36")
    POOL.tune_allocator()
    assert asked == ["CS_GNU_LIBC_VERSION"]


# --- the BLAS threads a worker copies ----------------------------------------------------------------


@pytest.mark.parametrize("info, threads", [
    ([{"user_api": "blas", "num_threads": 4}, {"user_api": "openmp", "num_threads": 1},
      {"user_api": "blas", "num_threads": 3}], 3),
    ([{"user_api": "openmp", "num_threads": 2}, {"num_threads": 1}], None),
])
def test_the_blas_threads_are_the_fewest_of_the_blas_libraries(monkeypatch, info, threads):
    import threadpoolctl

    from bounds_lib.analysis import threads as THREADS

    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: info)
    assert THREADS._blas_threads() == threads


# --- a worker's start --------------------------------------------------------------------------------


@pytest.fixture
def worker(monkeypatch):
    """Everything :func:`_worker_init` touches, recorded in ``log`` in call order."""
    log = []
    w = SimpleNamespace(log=log, ppid=[7], threads=[])
    monkeypatch.setattr(POOL, "tune_allocator", lambda: log.append("tune"))
    lib = SimpleNamespace(prctl=lambda *a: log.append(("prctl",) + a))
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: log.append(("CDLL", name, k)) or lib)
    monkeypatch.setattr(POOL.os, "getppid", lambda: w.ppid[0] if len(w.ppid) == 1 else w.ppid.pop(0))
    monkeypatch.setattr(POOL.os, "_exit", _exit)
    monkeypatch.setattr(gc, "freeze", lambda: log.append("freeze"))

    class Thread:
        def __init__(self, target, daemon, name):
            self.target, self.daemon, self.name = target, daemon, name
            w.threads.append(self)

        def start(self):
            log.append(("thread", self.daemon, self.name))

    monkeypatch.setattr(threading, "Thread", Thread)
    return w


def test_a_worker_arms_the_parent_death_signal_starts_its_watchdog_then_the_initializer(worker):
    POOL._worker_init(7, lambda: worker.log.append("initializer"))
    assert worker.log == ["tune", ("CDLL", None, {"use_errno": True}), ("prctl", 1, int(signal.SIGKILL), 0, 0, 0),
                          ("thread", True, "bounds-lib-parent-watchdog"), "initializer", "freeze"]
    POOL._worker_init(7)  # no initializer: the rest unchanged
    assert worker.log[6:] == worker.log[:4] + ["freeze"]


def test_a_worker_whose_parent_already_died_exits_before_its_watchdog(worker):
    with pytest.raises(_Exit) as e:
        POOL._worker_init(8, lambda: worker.log.append("initializer"))
    assert e.value.args == (1,)
    assert worker.threads == [] and "initializer" not in worker.log and "freeze" not in worker.log


def test_without_prctl_or_sigkill_the_watchdog_still_starts(worker, monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: (_ for _ in ()).throw(OSError("no libc")))
    POOL._worker_init(7)
    assert worker.log == ["tune", ("thread", True, "bounds-lib-parent-watchdog"), "freeze"]
    worker.log.clear()
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: SimpleNamespace())  # no prctl: AttributeError
    POOL._worker_init(7)
    assert worker.log == ["tune", ("thread", True, "bounds-lib-parent-watchdog"), "freeze"]
    worker.log.clear()
    monkeypatch.delattr(signal, "SIGKILL")  # Windows
    monkeypatch.setattr(ctypes, "CDLL", lambda name, **k: worker.log.append("CDLL"))
    POOL._worker_init(7)
    assert worker.log == ["tune", ("thread", True, "bounds-lib-parent-watchdog"), "freeze"]


def test_the_watchdog_checks_every_half_second_and_exits_when_the_parent_changes(worker, monkeypatch):
    sleeps = []
    monkeypatch.setattr(POOL.time, "sleep", sleeps.append)
    POOL._worker_init(7)
    worker.ppid[:] = [7, 7, 7, 1, 1]  # the init's own check, two watchdog checks, then re-parented to init
    worker.ppid.pop(0)
    with pytest.raises(_Exit) as e:
        worker.threads[0].target()
    assert e.value.args == (1,) and sleeps == [0.5, 0.5] and POOL._WATCHDOG_S == 0.5


# --- stopping a pool ---------------------------------------------------------------------------------


class _Proc:
    def __init__(self, name, log, alive_after_join=False, alive=True):
        self.name, self.log, self.alive, self.stubborn = name, log, alive, alive_after_join

    def is_alive(self):
        return self.alive

    def terminate(self):
        self.log.append(("terminate", self.name))

    def join(self, timeout):
        self.log.append(("join", self.name, timeout))
        self.alive = self.alive and self.stubborn

    def kill(self):
        self.log.append(("kill", self.name))
        self.alive = False


def test_stopping_a_pool_cancels_terminates_waits_out_the_grace_then_kills(monkeypatch):
    log = []
    procs = {1: _Proc("a", log), 2: _Proc("b", log, alive_after_join=True), 3: _Proc("c", log, alive=False)}
    pool = SimpleNamespace(_processes=procs, shutdown=lambda **k: log.append(("shutdown", k)),
                           _call_queue=SimpleNamespace(cancel_join_thread=lambda: log.append("cancel_join_thread")))
    clock = iter([100.0, 101.0, 102.5, 104.0])
    monkeypatch.setattr(POOL.time, "monotonic", lambda: next(clock))
    POOL._stop_pool(pool, grace=3.0)
    assert log == [("shutdown", {"wait": False, "cancel_futures": True}), "cancel_join_thread",
                   ("terminate", "a"), ("terminate", "b"),
                   ("join", "a", 2.0), ("join", "b", 0.5), ("kill", "b"), ("join", "b", 1.0),
                   ("join", "c", 0.0)]  # past the deadline: no wait, never negative


def test_the_default_grace_is_three_seconds_and_a_bare_pool_is_stopped_too(monkeypatch):
    log = []
    pool = SimpleNamespace(_processes={1: _Proc("a", log)}, shutdown=lambda **k: log.append("shutdown"))
    clock = iter([10.0, 10.0, 20.0, 30.0])
    monkeypatch.setattr(POOL.time, "monotonic", lambda: next(clock))
    POOL._stop_pool(pool)  # no _call_queue
    assert log == ["shutdown", ("terminate", "a"), ("join", "a", 3.0)]
    log.clear()
    POOL._stop_pool(SimpleNamespace(shutdown=lambda **k: log.append("shutdown"), _processes=None))
    POOL._stop_pool(SimpleNamespace(shutdown=lambda **k: log.append("shutdown")))  # no _processes at all
    assert log == ["shutdown", "shutdown"]


# --- process_pool's exits ----------------------------------------------------------------------------


@pytest.fixture
def executor(monkeypatch):
    """A stand-in ``ProcessPoolExecutor`` recording how it was made and ended; ``_stop_pool`` recorded."""
    import concurrent.futures

    made, log = [], []

    class Executor:
        def __init__(self, **k):
            made.append(k)

        def shutdown(self, **k):
            log.append(("shutdown", k))

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Executor)
    monkeypatch.setattr(POOL, "_stop_pool", lambda pool: log.append(("stop", type(pool).__name__)))
    return SimpleNamespace(made=made, log=log)


def _init():
    pass


def test_a_pool_is_spawned_with_the_worker_start_and_shut_down_waiting(executor):
    with POOL.process_pool(3, _init) as pool:
        assert executor.log == []
    (k,) = executor.made
    assert k["max_workers"] == 3 and k["mp_context"].get_start_method() == "spawn"
    assert k["initializer"] is POOL._worker_init and k["initargs"] == (POOL.os.getpid(), _init)
    assert type(pool).__name__ == "Executor" and executor.log == [("shutdown", {"wait": True})]


@pytest.mark.parametrize("error", [ValueError("a unit failed"), KeyboardInterrupt()])
def test_an_error_in_the_block_stops_the_pool_and_passes_through(executor, error):
    with pytest.raises(type(error)) as e:
        with POOL.process_pool(2):
            raise error
    assert e.value is error and executor.log == [("stop", "Executor")]
    assert executor.made[0]["initargs"] == (POOL.os.getpid(), None)


def test_a_broken_pool_is_one_clear_error_with_the_message_given(executor):
    from concurrent.futures.process import BrokenProcessPool

    with pytest.raises(ClusterError) as e:
        with POOL.process_pool(2, died="a worker died: try --jobs 1"):
            raise BrokenProcessPool("A process in the process pool was terminated abruptly")
    assert str(e.value) == "a worker died: try --jobs 1" and e.value.__suppress_context__
    assert executor.log == [("stop", "Executor")]
    with pytest.raises(ClusterError) as e:
        with POOL.process_pool(2):
            raise BrokenProcessPool("x")
    assert str(e.value) == POOL._WORKER_DIED and "out-of-memory killer" in str(e.value)
