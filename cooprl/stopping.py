"""How a run is asked to stop: Ctrl-C (SIGINT) and the schedulers' SIGTERM (`timeout`, SLURM, `kill`) get the same
answer: a checkpoint after the step in progress, one line, and the exit status a shell gives the signal (130, 143).

Outside the training loop (loading models, evaluating) SIGTERM raises `Terminated`, a KeyboardInterrupt, so that
every place that cleans up after Ctrl-C (a run folder given back, a one-line message) does so after SIGTERM too.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)

# the exit statuses of a run stopped by a signal (after saving), as shells report a command that the signal ended
INTERRUPTED = 128 + signal.SIGINT    # 130: Ctrl-C
TERMINATED = 128 + signal.SIGTERM    # 143: SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived where the run could not stop at a safe point: handled as Ctrl-C is, exit status 143."""


def exit_status_of(signal_name: str | None) -> int:
    """Return the exit status of a run that `signal_name` ("SIGTERM", else Ctrl-C) stopped."""
    return TERMINATED if signal_name == "SIGTERM" else INTERRUPTED


def signal_of(stop: KeyboardInterrupt) -> str:
    """Return the name of the signal that `stop` stands for: SIGTERM for Terminated, else SIGINT (Ctrl-C)."""
    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


class TerminateAsInterrupt:
    """Within it SIGTERM raises `Terminated` (in the main thread), as SIGINT raises KeyboardInterrupt."""

    def __enter__(self) -> "TerminateAsInterrupt":
        main = threading.current_thread() is threading.main_thread()   # (signal handlers are the main thread's)
        self._previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


class StopFlag:
    """Turns the first Ctrl-C or SIGTERM into a request to stop at the next safe point (`requested`: the signal's
    name); a second one stops at once (KeyboardInterrupt, or Terminated for SIGTERM)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopFlag":
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        self.requested = name
        what = "Ctrl-C" if signum == signal.SIGINT else name
        log.warning("%s: saving a checkpoint after this step, then stopping (press again to stop at once)", what)

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
