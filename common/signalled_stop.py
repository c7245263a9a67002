"""Stopping on SIGINT, SIGTERM or SIGHUP, the same way in every service and tool.

One rule for all of them (``docs/operations.md``, "Stopping: signals and exit status"):

* The **first** signal asks for a clean stop and says how long it may take: ``SIGINT:
  stopping (up to N s; a second signal ends it at once)``. A clean stop exits 0 whichever of
  the three signals asked for it (Ctrl-C, ``kill``, a closing terminal).
* A **second** signal while stopping ends the process at once, saying what it abandons (the
  caller describes it: a processor's unacknowledged shards and running handler calls), with
  status ``128 + signal`` (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell reports
  a process killed by that signal. The same signal again within :data:`SAME_REQUEST` seconds
  is the first one delivered twice, not a second request: ``timeout -s INT`` signals its child
  and then its whole process group, and so does ``kill -INT -PGID``.
* The stop taking longer than its bound ``N`` ends the process the same way, with status 1:
  so "up to N s" is a promise, not an estimate.

Ending "at once" is ``os._exit`` after the log handlers are flushed: no thread, daemon or not,
and no ``join`` can keep the process alive past it. The signal handler only sets a flag on the
first signal (or raises ``interrupt``, for a tool whose stop needs nothing finished: the
printing subscriber), so the clean stop runs on the main thread as before; the handler stays
installed during the stop, which is what lets the second signal through.

A signal ignored by whoever started the process (``nohup``, or SIGINT for a background job of
a non-interactive shell) stays ignored: they asked the process to outlive it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

__all__ = [
    "EXIT_STOP_TIMED_OUT",
    "SAME_REQUEST",
    "STOP_SIGNALS",
    "SignalledStop",
    "abandoned_exit_status",
]

log = logging.getLogger(__name__)

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_STOP_TIMED_OUT: Final = 1
"""The exit status of a stop that outlived its bound (and was ended)."""
SAME_REQUEST: Final = 0.5
"""Seconds within which the first signal, delivered again, is still the first request."""

_Handler = Callable[[int, FrameType | None], object] | int | None


def abandoned_exit_status(signum: int) -> int:
    """``128 + signum``: what a shell reports for a process that a signal ended."""
    return 128 + signum


class SignalledStop:
    """The stop signals of one process, handled by the rule of the module docstring.

    ``program`` names the process in what it prints when logging is not configured.
    ``bound()``: the seconds the stop may take, asked at the first signal. ``abandons()``: what
    ending the stop now leaves undone, one phrase (``""``: nothing worth saying), asked when
    the process is ended. ``interrupt``: an exception to raise from the handler on the first
    signal, to interrupt what the main thread is doing (``None``: only :attr:`requested` is
    set, and the main thread looks at it).

    :meth:`install` from the main thread; :meth:`restore` puts the previous handlers back and
    disarms the bound (a tool that returns to a caller); a service leaves them in place until
    the process exits, so that a signal during the interpreter's exit still ends it.
    """

    def __init__(
        self,
        program: str,
        *,
        bound: Callable[[], float],
        abandons: Callable[[], str],
        interrupt: type[BaseException] | None = None,
    ) -> None:
        self.program = program
        self.requested = threading.Event()
        """Set by the first signal."""
        self.signum: int | None = None
        """The first signal's number."""
        self._first_at = 0.0
        self._bound = bound
        self._abandons = abandons
        self._interrupt = interrupt
        self._disarmed = threading.Event()
        self._previous: dict[int, _Handler] = {}
        self.finishing = _Finishing(self)
        """``with stop.finishing:`` a step the first signal must not cut in two (a line being
        printed): its ``interrupt`` is raised when the step is done."""

    @property
    def signal_name(self) -> str:
        return "" if self.signum is None else signal.Signals(self.signum).name

    def install(self) -> SignalledStop:
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current == signal.SIG_IGN:
                continue  # the launcher's ignore stands (nohup, a background job)
            self._previous[int(signum)] = current
            signal.signal(signum, self._on_signal)
        return self

    def restore(self) -> None:
        self._disarmed.set()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> SignalledStop:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            if signum == self.signum and time.monotonic() - self._first_at < SAME_REQUEST:
                return  # the first one again (a process group's copy)
            self.end(f"second signal ({name}) while stopping", abandoned_exit_status(signum))
        self.signum = signum
        self._first_at = time.monotonic()
        self.requested.set()
        bound = self._bound()
        self.say(
            f"{name}: stopping (up to {bound:g} s; a second signal ends it at once)", logging.INFO
        )
        threading.Thread(
            target=self._end_when_late, args=(bound,), name="stop-deadline", daemon=True
        ).start()
        if self._interrupt is not None and not self.finishing.active:
            raise self._interrupt

    def interrupt_now(self) -> None:
        """Raise ``interrupt`` if the first signal came (and one is given)."""
        if self._interrupt is not None and self.requested.is_set():
            raise self._interrupt

    def _end_when_late(self, bound: float) -> None:
        if not self._disarmed.wait(bound):
            self.end(f"did not stop within {bound:g} s", EXIT_STOP_TIMED_OUT)

    def end(self, why: str, status: int) -> None:
        """Say why and what is abandoned, flush, and end the process with ``status``."""
        try:
            abandoned = self._abandons()
        except Exception as exc:  # describing must never keep the process from ending
            abandoned = f"(could not tell what: {exc!r})"
        self.say(
            f"{why}: exiting with status {status}"
            + (f", abandoning {abandoned}" if abandoned else ""),
            logging.WARNING,
        )
        for flushable in [*logging.getLogger().handlers, sys.stdout, sys.stderr]:
            with contextlib.suppress(Exception):  # a closed stream, a reader that went away
                flushable.flush()
        os._exit(status)

    def say(self, text: str, level: int) -> None:
        """Log ``text`` when logging is configured, else print it on stderr."""
        if logging.getLogger().handlers:
            log.log(level, "%s", text)
        else:
            print(f"{self.program}: {text}", file=sys.stderr, flush=True)


class _Finishing:
    """:attr:`SignalledStop.finishing`: a plain class, entered once per printed line."""

    __slots__ = ("_stop", "active")

    def __init__(self, stop: SignalledStop) -> None:
        self._stop = stop
        self.active = False

    def __enter__(self) -> None:
        self.active = True

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.active = False
        if kind is None:
            self._stop.interrupt_now()
