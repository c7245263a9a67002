"""Running a service in the foreground until SIGTERM or Ctrl-C, the same way for every service.

User mistakes end with one line on stderr and exit status 2, never a traceback; a clean stop
exits 0. Signals only set a flag: the main thread then stops the service, which drains, acks,
releases its leases and joins its threads (kopf's and arq's shutdown model).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from common.runtime import long_lived_heap_gc

__all__ = ["Runnable", "fail", "run_until_signalled"]


class Runnable(Protocol):
    """Anything with ``start``/``stop`` (what ``start`` returns is ignored)."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


def fail(program: str, message: str) -> int:
    """Report a user mistake in one line; the exit status for it."""
    print(f"{program}: error: {message}", file=sys.stderr)
    return 2


def run_until_signalled(
    service: Runnable,
    *,
    program: str,
    on_started: Callable[[], None] | None = None,
    listen_address: str | None = None,
) -> int:
    """Start ``service``, wait for SIGTERM/SIGINT, stop it; returns the exit status.

    ``on_started`` runs once the service is up (e.g. to print a readiness line);
    ``listen_address`` names what could not be bound when starting fails.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            service.start()
        except OSError as exc:  # a port is taken, most likely
            service.stop()
            where = f"listen on {listen_address}" if listen_address else "start"
            return fail(program, f"cannot {where}: {exc.strerror or exc}")
        if on_started is not None:
            on_started()
        with long_lived_heap_gc():
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        service.stop()
    return 0
