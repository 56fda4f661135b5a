"""cooprl/stopping.py: Ctrl-C and SIGTERM ask a run to stop at its next safe point, a second one stops it at once,
and outside the loop SIGTERM is a KeyboardInterrupt (Terminated) that every Ctrl-C clean-up catches."""

import os
import signal

import pytest

from cooprl.stopping import INTERRUPTED, TERMINATED, StopFlag, TerminateAsInterrupt, Terminated, exit_status_of


@pytest.mark.parametrize("sig, name, second", [(signal.SIGINT, "SIGINT", KeyboardInterrupt),
                                               (signal.SIGTERM, "SIGTERM", Terminated)])
def test_the_first_signal_asks_to_stop_and_the_second_stops_at_once(sig, name, second, caplog):
    before = signal.getsignal(sig)
    with StopFlag() as flag:
        os.kill(os.getpid(), sig)
        assert flag.requested == name
        said = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
        assert f"{said}: saving a checkpoint after this step" in caplog.text
        with pytest.raises(second):
            os.kill(os.getpid(), sig)
    assert signal.getsignal(sig) is before   # the handlers are given back


def test_a_sigint_then_a_sigterm_stops_at_once_as_sigterm():
    with StopFlag() as flag, pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.requested == "SIGINT"
        os.kill(os.getpid(), signal.SIGTERM)


def test_outside_the_loop_sigterm_is_a_keyboard_interrupt_of_its_own():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as stopped, TerminateAsInterrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert isinstance(stopped.value, Terminated)
    assert signal.getsignal(signal.SIGTERM) is before


def test_exit_statuses_are_the_shell_s():
    assert (INTERRUPTED, TERMINATED) == (130, 143)
    assert [exit_status_of(s) for s in ("SIGTERM", "SIGINT", None)] == [143, 130, 130]
