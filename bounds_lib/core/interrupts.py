"""Stopping signals raised where it is safe: held off inside a block, raised at the block's end or at a
checkpoint the code chooses (Chapter 6).

A handler that raises where the program happens to be can land inside another library's critical
section — between a lock's acquire and the ``try`` that releases it, inside a process pool's ``submit`` —
and leave that library unable to finish (a run that printed "stopped" and then never exited, because
the pool's manager thread waited for a lock the interrupted thread still held). So the code that waits
on workers holds the signals (:func:`signals_held`) and raises them between two waits
(:func:`raise_pending`), where it holds no lock.

The handler is installed by the program that owns the process (:mod:`bounds_lib.cli` installs
:func:`on_stop_signal` for SIGINT, SIGTERM and SIGHUP); a library caller keeps Python's own handlers, and
then holding changes nothing.
"""
from __future__ import annotations

import contextlib

__all__ = ["Stopped", "on_stop_signal", "raise_pending", "signals_held"]

#: Signals held off (see :func:`signals_held`): nesting depth and the first signal that came meanwhile.
_HOLD = {"depth": 0, "pending": None}


class Stopped(KeyboardInterrupt):
    """A stopping signal (``signum``), raised where the program is so that its outputs roll back as for
    Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def on_stop_signal(signum, frame):
    """The handler: raise :class:`Stopped` now — or, inside :func:`signals_held`, record the signal."""
    if _HOLD["depth"]:
        _HOLD["pending"] = _HOLD["pending"] or signum
        return
    raise Stopped(signum)


def raise_pending():
    """Raise the signal that came while held, if one did (a checkpoint inside :func:`signals_held`)."""
    if _HOLD["pending"] is not None:
        signum, _HOLD["pending"] = _HOLD["pending"], None
        raise Stopped(signum)


@contextlib.contextmanager
def signals_held():
    """Hold off the stopping signals while the block runs; one that came is raised at its end (or earlier,
    at a :func:`raise_pending` inside it).

    A handler runs in the main thread whichever thread the kernel delivered the signal to, and while a
    block is held it only records the signal. (A per-thread signal mask would not do: BLAS and worker
    threads leave these signals unblocked, so the kernel delivers them there.)
    """
    _HOLD["depth"] += 1
    try:
        yield
    finally:
        _HOLD["depth"] -= 1
        if _HOLD["depth"] == 0:
            raise_pending()


def clear():
    """Forget a recorded signal (the program's handlers are being removed)."""
    _HOLD["pending"] = None
