"""bounds_lib.core.interrupts: stopping signals held inside a block, raised at its end or at a checkpoint.

The handler is called directly (as the interpreter would, in the main thread); one test sends a real
SIGTERM through the handlers the CLI installs.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

import pytest

from bounds_lib.cli import signals
from bounds_lib.core import interrupts as I


@contextlib.contextmanager
def _not_stopped():
    """A ``Stopped`` here is a failure of the test (not a KeyboardInterrupt that ends the whole run)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        pytest.fail(f"raised {exc!r} where nothing was pending")


@pytest.fixture(autouse=True)
def _clean():
    I.clear()
    yield
    assert I._HOLD["depth"] == 0
    I.clear()


def test_outside_a_hold_the_handler_raises_at_once():
    with pytest.raises(I.Stopped) as info:
        I.on_stop_signal(signal.SIGTERM, None)
    assert info.value.signum == signal.SIGTERM and isinstance(info.value, KeyboardInterrupt)
    assert info.value.args == (signal.SIGTERM,)
    assert I._HOLD["pending"] is None


def test_inside_a_hold_the_first_signal_is_raised_at_the_block_end():
    reached = []
    with pytest.raises(I.Stopped) as info:
        with I.signals_held():
            I.on_stop_signal(signal.SIGHUP, None)
            I.on_stop_signal(signal.SIGTERM, None)  # a second signal does not replace the first
            reached.append("after the signals")
    assert reached == ["after the signals"] and info.value.signum == signal.SIGHUP
    assert I._HOLD["pending"] is None  # raised once, then forgotten
    with _not_stopped(), I.signals_held():
        pass


def test_a_nested_hold_raises_only_at_the_outer_end():
    order = []
    with pytest.raises(I.Stopped):
        with I.signals_held():
            with _not_stopped(), I.signals_held():
                I.on_stop_signal(signal.SIGINT, None)
            order.append("inner block ended without raising")
    assert order == ["inner block ended without raising"]


def test_raise_pending_is_a_checkpoint_inside_the_hold():
    with _not_stopped():
        I.raise_pending()  # nothing pending: nothing raised
    with _not_stopped(), I.signals_held():
        I.raise_pending()
        I.on_stop_signal(signal.SIGTERM, None)
        with pytest.raises(I.Stopped) as info:
            I.raise_pending()
        assert info.value.signum == signal.SIGTERM and I._HOLD["pending"] is None
    # the block's end did not raise it again


def test_an_exception_in_the_block_restores_the_depth():
    with _not_stopped(), pytest.raises(ZeroDivisionError):
        with I.signals_held():
            1 / 0
    assert I._HOLD["depth"] == 0
    with pytest.raises(I.Stopped):
        I.on_stop_signal(signal.SIGTERM, None)


def test_clear_forgets_a_recorded_signal():
    with _not_stopped(), I.signals_held():
        I.on_stop_signal(signal.SIGTERM, None)
        I.clear()
    with _not_stopped():
        I.raise_pending()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="handlers need the main thread")
def test_a_real_signal_through_the_cli_handlers_waits_for_the_block():
    old = signal.getsignal(signal.SIGTERM)
    log = []
    with pytest.raises(I.Stopped) as info:
        with signals._stop_signals_raise():
            with I.signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                log.append("block went on")
    assert log == ["block went on"] and info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is old  # the handlers are put back
