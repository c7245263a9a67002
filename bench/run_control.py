"""How the end-to-end benches wait for a reader, say what they are doing, and stop.

Every bench polls for a moment (a count reached, a log line seen) with a deadline that grows
with the events awaited, so a reader that died or stalled ends the run with a
:class:`~harness.BenchError` instead of hanging it; and every bench must stop all its child
processes on Ctrl-C or SIGTERM, however the shell started it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TypeVar

from harness import BenchError

T = TypeVar("T")


def wait_for(
    done: Callable[[], bool], what: str, timeout: float, *, alive: Callable[[], None] | None = None
) -> None:
    """Poll ``done`` until true; ``alive`` raises when the thing waited for died."""
    deadline = time.monotonic() + timeout
    while not done():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def timeout_for(events: int) -> float:
    """How long a reader may take for ``events`` before the bench gives up (>= 100/s)."""
    return 120 + events / 100


def progress(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"... {text}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGTERM and SIGINT raise :class:`KeyboardInterrupt`, whose handling stops every child."""
    signal.signal(signal.SIGTERM, _interrupt)  # stop every child process, as on Ctrl-C
    # A shell starts background jobs with SIGINT ignored, and Python then keeps it ignored:
    # Ctrl-C (or a test's SIGINT) must stop the bench however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def measure_in(prefix: str, program: str, measure: Callable[[Path], T]) -> T:
    """``measure`` in a fresh temporary directory (``prefix``), stopped by Ctrl-C or SIGTERM.
    A :class:`BenchError` or an interrupt ends the program, with exit status 1 or 130, after
    one line on stderr saying why; every child process is stopped by then."""
    stop_on_signals()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        try:
            return measure(Path(tmp))
        except BenchError as exc:
            print(f"{program}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            print("interrupted; every child process was stopped", file=sys.stderr)
            raise SystemExit(130) from None
