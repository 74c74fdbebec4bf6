"""Stopping signals of a ``bounds-lib`` run: SIGINT, SIGTERM and SIGHUP roll the outputs back (Chapter 6).

While a run lasts (``_stop_signals_raise``) these signals raise
:class:`bounds_lib.core.interrupts.Stopped`, a ``KeyboardInterrupt``, where the program is, so that the
outputs of the run are removed; inside :func:`bounds_lib.core.interrupts.signals_held` (the final renames
of :class:`bounds_lib.cli.outputs.OutputSet`, the waits on worker processes) they wait for the block's
end or for a checkpoint. A closed standard output (``| head``) ends the program quietly (``_quiet_broken_pipe``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

from ..core import interrupts

#: Signals that end a run cleanly (its outputs rolled back); held off while the final renames run.
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

@contextlib.contextmanager
def _stop_signals_raise():
    """While the run lasts, SIGINT, SIGTERM and SIGHUP raise ``Stopped`` (a ``KeyboardInterrupt``),
    so that the outputs roll back; inside ``signals_held`` they wait for the block's end."""
    old = {}
    try:
        for sig in _STOP_SIGNALS:
            old[sig] = signal.signal(sig, interrupts.on_stop_signal)
    except ValueError:  # not the main thread: signals cannot be handled here
        pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        interrupts.clear()


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a Unix tool killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush must not fail again
    except (OSError, ValueError, AttributeError):
        pass
    return 128 + 13
