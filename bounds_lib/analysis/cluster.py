"""Dask distributed clients whose every wait has a deadline (Chapter 6, at scale).

:func:`bounds_lib.analysis.parallel.run_units` (``scheduler=``) and the training grid
(:mod:`bounds_lib.studies.grid`) send one task per unit to a Dask cluster through
:func:`dask_session`: a client connected *and* with a worker within a deadline (:func:`dask_client`),
results fetched as they finish with every wait bounded (:func:`dask_results`), and on any error the
caller's pending tasks cancelled. Whatever goes wrong with the cluster is one :class:`ClusterError`.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

__all__ = ["ClusterError", "SCHEDULER_TIMEOUT_S", "dask_client", "dask_results", "dask_session"]

#: Seconds to wait for a Dask scheduler to answer before giving up (``--scheduler-timeout``).
SCHEDULER_TIMEOUT_S = 10.0


class ClusterError(RuntimeError):
    """Dask distributed is missing, a scheduler cannot be reached, a worker cannot open the checkpoint, or a
    worker process died."""


def dask_client(scheduler, timeout: float, what: str = "--scheduler", hint: str = "leave out --scheduler to run here"):
    """``(client, ours)``: a ``distributed.Client`` for an address (ours to close) or the one given, connected
    *and* with at least one worker within ``timeout`` seconds, else :class:`ClusterError`. The client is
    made in a separate thread whose wait is bounded here: ``distributed.Client(timeout=…)`` alone waits
    without end on a listener that accepts and never answers."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(f"{what} needs Dask distributed, which is not installed: "
                           "pip install 'bounds_lib[grid]'") from None
    if isinstance(scheduler, Client):
        client, ours = scheduler, False
    else:
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise TypeError(f"scheduler must be a Dask scheduler address ('tcp://host:port') or a "
                            f"distributed.Client, got {type(scheduler).__name__} {scheduler!r}")
        box = {}

        def connect():
            try:
                box["client"] = Client(scheduler, timeout=f"{timeout}s")
            except BaseException as exc:  # noqa: BLE001 - reported below, in the caller's thread
                box["error"] = exc

        t = threading.Thread(target=connect, daemon=True, name="bounds-lib-dask-connect")
        t.start()
        t.join(timeout)
        if "client" not in box:
            exc = box.get("error")
            why = ("it accepted the connection but did not complete Dask's handshake" if exc is None
                   else " ".join(str(exc).split()) or type(exc).__name__)
            raise ClusterError(f"cannot reach a Dask scheduler at {scheduler!r} within {timeout:g} s ({why}); start "
                               "one with 'dask scheduler' and workers with 'dask worker ADDRESS --nthreads 1', or "
                               f"{hint}")
        client, ours = box["client"], True
    address = scheduler if isinstance(scheduler, str) else client.scheduler.address
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        if ours:
            client.close(timeout=2)
        raise ClusterError(f"the Dask scheduler at {address} has no workers (none joined within {timeout:g} s); "
                           f"start some with 'dask worker {address} --nthreads 1', or {hint}") from None
    return client, ours


def dask_results(client, futures, *, timeout: float, unit_timeout: float | None = None):
    """Yield each of ``futures`` with its result as it finishes, every wait bounded: when the scheduler has
    had no worker for ``timeout`` s, or no result came for ``unit_timeout`` s (``None``: no limit while
    workers are alive), :class:`ClusterError`. A task's own error is raised as it is."""
    from distributed import wait

    pending = set(futures)
    last = time.monotonic()
    alone_since = None
    while pending:
        try:
            done, pending = wait(pending, timeout=min(1.0, timeout), return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        for fut in done:
            yield fut, fut.result()
            last = time.monotonic()
        if done:
            alone_since = None
            continue
        now = time.monotonic()
        if unit_timeout is not None and now - last > unit_timeout:
            raise ClusterError(f"no result from the Dask cluster for {unit_timeout:g} s ({len(pending)} tasks "
                               "pending): a worker is stuck or too slow (--unit-timeout)")
        try:
            workers = len(client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - an unreachable scheduler counts as having no worker
            workers = 0
        if workers:
            alone_since = None
        elif alone_since is None:
            alone_since = now
        elif now - alone_since > timeout:
            raise ClusterError(f"the Dask scheduler has had no workers for {timeout:g} s with {len(pending)} tasks "
                               "pending (they were lost or stopped); start workers or run without --scheduler")


@contextmanager
def dask_session(scheduler, timeout: float, what: str = "--scheduler",
                 hint: str = "leave out --scheduler to run here"):
    """``(client, futures)`` for a ``with`` block: the client of :func:`dask_client` (same arguments) and an
    empty ``{future: index}`` dict that the block fills with the tasks it submits (and may empty as they
    finish). On any exception in the block — a task's error, a deadline, ``KeyboardInterrupt`` — the
    futures still in the dict are cancelled when the client is the caller's; a client made here is closed
    on leaving (within ``min(5, timeout)`` s), which releases its tasks."""
    client, ours = dask_client(scheduler, timeout, what=what, hint=hint)
    futures = {}
    try:
        yield client, futures
    except BaseException:
        if futures and not ours:  # a client of the caller's: its cluster stops our pending tasks
            try:
                client.cancel(list(futures), force=True)
            except Exception:  # noqa: BLE001 - the scheduler may be gone; the error that got here matters
                pass
        raise
    finally:
        if ours:
            client.close(timeout=min(5.0, timeout))  # its tasks are released with it
