"""Every wait of the Dask clients, with Dask replaced by recorders (:mod:`bounds_lib.analysis.cluster`): connecting
within a deadline, the workers' deadline, results as they finish with the unit and no-worker deadlines under a
stepped clock, and what a session cancels and closes. The same paths against real listeners and schedulers are in
tests/test_stopping.py and tests/test_parallel.py (seconds each); here each message is compared whole."""
from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest

distributed = pytest.importorskip("distributed")

from bounds_lib.analysis import cluster as CL  # noqa: E402

HINT = "leave out --scheduler to run here"


class FakeClient:
    """A ``distributed.Client`` that records its calls in ``log``; ``behaviour`` decides how it connects."""

    log: list = []
    behaviour = "ok"  # "ok", an exception to raise, or a threading.Event to block on
    workers_error = None

    def __init__(self, address=None, timeout=None):
        FakeClient.log.append(("Client", address, timeout))
        b = FakeClient.behaviour
        if isinstance(b, BaseException):
            raise b
        if isinstance(b, threading.Event):
            b.wait(10)
        self.scheduler = SimpleNamespace(address="tcp://given:8786")

    def wait_for_workers(self, n, timeout):
        FakeClient.log.append(("wait_for_workers", n, timeout))
        if FakeClient.workers_error is not None:
            raise FakeClient.workers_error

    def close(self, timeout):
        FakeClient.log.append(("close", timeout))

    def cancel(self, futures, force):
        FakeClient.log.append(("cancel", sorted(futures), force))


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr(distributed, "Client", FakeClient)
    monkeypatch.setattr(FakeClient, "log", [])
    monkeypatch.setattr(FakeClient, "behaviour", "ok")
    monkeypatch.setattr(FakeClient, "workers_error", None)
    return FakeClient


# --- dask_client ---------------------------------------------------------------------------------------


def test_an_address_is_connected_within_the_deadline_and_its_workers_awaited(client):
    c, ours = CL.dask_client("tcp://h:1", 3.0)
    assert isinstance(c, FakeClient) and ours is True
    assert client.log == [("Client", "tcp://h:1", "3.0s"), ("wait_for_workers", 1, 3.0)]


def test_a_client_given_is_used_as_it_is_and_not_ours(client):
    given = object.__new__(FakeClient)
    given.scheduler = SimpleNamespace(address="tcp://given:8786")
    c, ours = CL.dask_client(given, 2.5)
    assert c is given and ours is False and client.log == [("wait_for_workers", 1, 2.5)]


@pytest.mark.parametrize("bad", ["", "   ", 8786, None])
def test_a_scheduler_that_is_no_address_is_a_type_error(client, bad):
    with pytest.raises(TypeError) as e:
        CL.dask_client(bad, 1.0)
    assert str(e.value) == ("scheduler must be a Dask scheduler address ('tcp://host:port') or a distributed.Client, "
                            f"got {type(bad).__name__} {bad!r}")
    assert client.log == []


def test_without_distributed_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(CL.ClusterError) as e:
        CL.dask_client("tcp://h:1", 1.0, what="the grid's --scheduler")
    assert str(e.value) == ("the grid's --scheduler needs Dask distributed, which is not installed: "
                            "pip install 'bounds_lib[grid]'")
    assert e.value.__suppress_context__
    with pytest.raises(CL.ClusterError, match=r"^--scheduler needs Dask distributed"):  # the default
        CL.dask_client("tcp://h:1", 1.0)


@pytest.mark.parametrize("error, why", [
    (OSError("Timed out trying\n   to connect to tcp://h:1"), "Timed out trying to connect to tcp://h:1"),
    (ValueError(""), "ValueError"),
])
def test_a_failed_connection_says_why_and_what_to_do(client, error, why):
    client.behaviour = error
    with pytest.raises(CL.ClusterError) as e:
        CL.dask_client("tcp://h:1", 1.5, hint="run the grid here")
    assert str(e.value) == (f"cannot reach a Dask scheduler at 'tcp://h:1' within 1.5 s ({why}); start one with "
                            "'dask scheduler' and workers with 'dask worker ADDRESS --nthreads 1', or "
                            "run the grid here")


def test_a_handshake_that_never_completes_ends_at_the_deadline(client, monkeypatch):
    client.behaviour = threading.Event()
    started = []
    real = threading.Thread

    def thread(**k):
        started.append((k["daemon"], k["name"]))
        return real(**k)

    monkeypatch.setattr(threading, "Thread", thread)
    try:
        with pytest.raises(CL.ClusterError) as e:
            CL.dask_client("tcp://h:1", 0.2)
    finally:
        client.behaviour.set()
    assert "(it accepted the connection but did not complete Dask's handshake)" in str(e.value)
    assert "within 0.2 s" in str(e.value) and started == [(True, "bounds-lib-dask-connect")]


@pytest.mark.parametrize("error", [TimeoutError("t"), OSError("o")])
def test_no_workers_within_the_deadline_closes_our_client_only(client, error):
    client.workers_error = error
    with pytest.raises(CL.ClusterError) as e:
        CL.dask_client("tcp://h:1", 4.0)
    assert str(e.value) == ("the Dask scheduler at tcp://h:1 has no workers (none joined within 4 s); start some with "
                            f"'dask worker tcp://h:1 --nthreads 1', or {HINT}")
    assert e.value.__suppress_context__ and client.log[-1] == ("close", 2)
    client.log.clear()
    given = object.__new__(FakeClient)
    given.scheduler = SimpleNamespace(address="tcp://given:8786")
    with pytest.raises(CL.ClusterError, match="^the Dask scheduler at tcp://given:8786 has no workers"):
        CL.dask_client(given, 4.0)
    assert ("close", 2) not in client.log


# --- dask_results -------------------------------------------------------------------------------------------


class Future:
    def __init__(self, name):
        self.name = name

    def result(self):
        return f"result of {self.name}"

    def __lt__(self, other):
        return self.name < other.name


@pytest.fixture
def cluster(monkeypatch):
    """``distributed.wait`` answering from ``script`` (a list of sets done, or "timeout"), a stepped clock,
    and a client whose ``scheduler_info`` answers from ``workers`` (a count, or an exception)."""
    state = SimpleNamespace(script=[], clock=[], workers=[], waits=[])

    def wait(pending, timeout, return_when):
        state.waits.append((timeout, return_when))
        step = state.script.pop(0)
        if step == "timeout":
            raise TimeoutError
        return step, pending - step

    def info():
        w = state.workers.pop(0)
        if isinstance(w, BaseException):
            raise w
        return {"workers": dict.fromkeys(range(w))}

    monkeypatch.setattr(distributed, "wait", wait)
    monkeypatch.setattr(CL.time, "monotonic", lambda: state.clock.pop(0))
    state.client = SimpleNamespace(scheduler_info=info)
    return state


def test_results_come_as_they_finish_and_each_wait_is_at_most_a_second(cluster):
    a, b = Future("a"), Future("b")
    cluster.script = [{b}, set(), {a}]
    cluster.clock = [0.0, 0.5, 1.0, 1.5]
    cluster.workers = [2]
    got = list(CL.dask_results(cluster.client, [a, b], timeout=30.0))
    assert got == [(b, "result of b"), (a, "result of a")]
    assert cluster.waits == [(1.0, "FIRST_COMPLETED")] * 3
    cluster.script, cluster.clock = [{a}], [0.0, 0.1]
    list(CL.dask_results(cluster.client, [a], timeout=0.25))
    assert cluster.waits[-1] == (0.25, "FIRST_COMPLETED")  # a shorter deadline, a shorter wait


def test_no_result_for_the_unit_timeout_is_an_error(cluster):
    a = Future("a")
    cluster.script = ["timeout", "timeout", "timeout"]
    cluster.clock = [0.0, 4.0, 5.0, 5.5]  # start; 4 s: still within 5 s; 5.5 s: past it
    cluster.workers = [1, 1]
    with pytest.raises(CL.ClusterError) as e:
        list(CL.dask_results(cluster.client, [a], timeout=30.0, unit_timeout=5.0))
    assert str(e.value) == ("no result from the Dask cluster for 5 s (1 tasks pending): a worker is stuck or too "
                            "slow (--unit-timeout)")


def test_the_unit_timeout_counts_from_the_last_result(cluster):
    a, b = Future("a"), Future("b")
    cluster.script = [{a}, "timeout", {b}]
    cluster.clock = [0.0, 9.0, 14.0, 14.5]  # a at 9 s; exactly 5 s later: not yet past the 5 s
    cluster.workers = [1]
    assert [r for _, r in CL.dask_results(cluster.client, [a, b], timeout=30.0, unit_timeout=5.0)] == [
        "result of a", "result of b"]


def test_a_scheduler_without_workers_for_the_timeout_is_an_error(cluster):
    a = Future("a")
    cluster.script = ["timeout"] * 6
    # no workers from 1 s; one back at 2 s (the count restarts); none again from 3 s; at 6.5 s, 3.5 s alone > 3 s
    cluster.clock = [0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 6.5]
    cluster.workers = [0, 2, RuntimeError("scheduler gone"), 0, 0, 0]
    with pytest.raises(CL.ClusterError) as e:
        list(CL.dask_results(cluster.client, [a], timeout=3.0))
    assert str(e.value) == ("the Dask scheduler has had no workers for 3 s with 1 tasks pending (they were lost or "
                            "stopped); start workers or run without --scheduler")
    assert cluster.clock == [] and cluster.workers == []


def test_a_result_resets_the_time_alone(cluster):
    a, b = Future("a"), Future("b")
    cluster.script = ["timeout", {a}, "timeout", "timeout", {b}]
    cluster.clock = [0.0, 1.0, 2.5, 3.0, 5.5, 6.0]  # alone from 1 s; a at 2.5 s; alone again from 3 s, 2.5 s < 3 s
    cluster.workers = [0, 0, 0]
    assert len(list(CL.dask_results(cluster.client, [a, b], timeout=3.0))) == 2


# --- dask_session ----------------------------------------------------------------------------------------


def test_a_session_closes_the_client_it_made_within_five_seconds(client):
    with CL.dask_session("tcp://h:1", 30.0) as (c, futures):
        assert futures == {} and isinstance(c, FakeClient)
    assert client.log[-1] == ("close", 5.0)
    with pytest.raises(KeyboardInterrupt):
        with CL.dask_session("tcp://h:1", 2.0) as (c, futures):
            futures["f"] = 0
            raise KeyboardInterrupt
    assert client.log[-1] == ("close", 2.0) and not any(e[0] == "cancel" for e in client.log)


def test_a_session_on_the_callers_client_cancels_its_pending_tasks_on_an_error(client):
    given = object.__new__(FakeClient)
    given.scheduler = SimpleNamespace(address="tcp://given:8786")
    with pytest.raises(ValueError, match="a unit failed"):
        with CL.dask_session(given, 2.0, what="x", hint="y") as (c, futures):
            futures.update({"f1": 0, "f2": 1})
            raise ValueError("a unit failed")
    assert client.log[-1] == ("cancel", ["f1", "f2"], True) and ("close", 2.0) not in client.log
    client.log.clear()
    with CL.dask_session(given, 2.0) as (c, futures):  # no error: nothing cancelled, nothing closed
        futures["f"] = 0
    with pytest.raises(ValueError):
        with CL.dask_session(given, 2.0) as (c, futures):  # an error with nothing pending: nothing to cancel
            raise ValueError
    assert client.log == [("wait_for_workers", 1, 2.0)] * 2


def test_a_cancel_that_fails_leaves_the_blocks_own_error(client, monkeypatch):
    given = object.__new__(FakeClient)
    given.scheduler = SimpleNamespace(address="tcp://given:8786")
    monkeypatch.setattr(FakeClient, "cancel", lambda self, f, force: (_ for _ in ()).throw(OSError("gone")))
    with pytest.raises(ValueError, match="the unit's error"):
        with CL.dask_session(given, 2.0) as (c, futures):
            futures["f"] = 0
            raise ValueError("the unit's error")


def test_the_session_passes_what_and_hint_to_the_client(client):
    client.workers_error = TimeoutError()
    with pytest.raises(CL.ClusterError, match="or run the grid here$"):
        with CL.dask_session("tcp://h:1", 1.0, what="the grid", hint="run the grid here"):
            pass
    assert CL.SCHEDULER_TIMEOUT_S == 10.0
