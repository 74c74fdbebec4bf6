"""Stopping signals of a ``bounds-lib`` run: SIGINT, SIGTERM and SIGHUP roll the outputs back (Chapter 6).

While a run lasts (``_stop_signals_raise``) these signals raise ``_Stopped``, a
``KeyboardInterrupt``, where the program is, so that the outputs of the run are removed; inside
``_signals_held`` (the final renames of :class:`bounds_lib.cli.outputs.OutputSet`) they wait for the
block's end. A closed standard output (``| head``) ends the program quietly (``_quiet_broken_pipe``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

#: Signals that end a run cleanly (its outputs rolled back); held off while the final renames run.
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

#: Signals held off (see ``_signals_held``): nesting depth and the first signal that came meanwhile.
_HOLD = {"depth": 0, "pending": None}


@contextlib.contextmanager
def _signals_held():
    """Hold off SIGINT, SIGTERM and SIGHUP while the block runs; one that came is raised at its end.

    Works with the handlers :func:`bounds_lib.cli.main` installs (:func:`_on_stop_signal`): a handler runs
    in the main thread whichever thread the kernel delivered the signal to, and while a block is held it
    only records the signal. (A per-thread signal mask would not do: BLAS and worker threads leave these
    signals unblocked, so the kernel delivers them there.)
    """
    _HOLD["depth"] += 1
    try:
        yield
    finally:
        _HOLD["depth"] -= 1
        if _HOLD["depth"] == 0 and _HOLD["pending"] is not None:
            signum, _HOLD["pending"] = _HOLD["pending"], None
            raise _Stopped(signum)


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so the outputs roll back as for Ctrl-C."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _on_stop_signal(signum, frame):
    """Raise ``_Stopped`` where the program is — or, inside ``_signals_held``, after the block."""
    if _HOLD["depth"]:
        _HOLD["pending"] = _HOLD["pending"] or signum
        return
    raise _Stopped(signum)


@contextlib.contextmanager
def _stop_signals_raise():
    """While the run lasts, SIGINT, SIGTERM and SIGHUP raise ``_Stopped`` (a ``KeyboardInterrupt``),
    so that the outputs roll back; inside ``_signals_held`` they wait for the block's end."""
    old = {}
    try:
        for sig in _STOP_SIGNALS:
            old[sig] = signal.signal(sig, _on_stop_signal)
    except ValueError:  # not the main thread: signals cannot be handled here
        pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        _HOLD["pending"] = None


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a Unix tool killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush must not fail again
    except (OSError, ValueError, AttributeError):
        pass
    return 128 + 13
