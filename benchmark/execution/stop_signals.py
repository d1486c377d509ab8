"""How a sweep stops: the signals that stop it (a scheduler's SIGTERM, Ctrl-C's SIGINT, a closed
terminal's SIGHUP), the handler that turns the first into a KeyboardInterrupt in the driver, and the
exception that carries the shell's exit status out."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a scheduler's stop, Ctrl-C, a closed terminal


class SweepStopped(KeyboardInterrupt):
    """A sweep stopped by a signal of STOP_SIGNALS, its workers stopped and its line printed;
    ``exit_code`` is 128 + the signal's number (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP),
    as a shell reports a process that signal ended."""

    def __init__(self, signum: int, line: str) -> None:
        super().__init__(line)
        self.signum, self.exit_code = signum, 128 + signum


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """While the sweep runs: the first signal of STOP_SIGNALS raises KeyboardInterrupt in the driver
    (which stops the workers), and any later one is only noted, so the stopping is not cut short.
    Yields the list of the signals received. Off the main thread (where Python takes no signals), nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
