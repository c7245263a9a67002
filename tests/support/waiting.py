"""The one way tests wait for a state another thread or process reaches without signalling it.

Tests poll instead of sleeping a fixed time: a fixed sleep is either too short on a loaded machine
(flaky) or too long everywhere (slow). The poll starts at a millisecond and doubles up to
``interval``, so a condition that is nearly there is seen at once (in-process threads), while a
long wait on child processes reads Redis at most every ``interval`` seconds and leaves the two
cores to the processes under test. Tests that time what they wait for (lease hand-overs) pass a
small ``interval``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")

FIRST_POLL = 0.001
"""Seconds before the second call of the predicate; doubled after each call up to ``interval``."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 5.0,
    what: str | Callable[[], str] = "condition",
    *,
    interval: float = 0.05,
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that value; after
    ``timeout`` seconds raise ``AssertionError`` naming ``what`` (text, or a function giving it
    once the wait failed) and the predicate's last value.

    The predicate is called once more after the deadline passed before the timeout is reported,
    so a condition reached during the last pause is not a failure."""
    deadline = time.monotonic() + timeout
    pause = min(FIRST_POLL, interval)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = what() if callable(what) else what
            raise AssertionError(
                f"timed out after {timeout} s waiting for {text} (last: {value!r})"
            )
        time.sleep(pause)
        pause = min(pause * 2, interval)
