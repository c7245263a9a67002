"""Retry delays with client-go's shape (reference 1.2).

Delays start at 0.8 s and double up to 30 s, each drawn uniformly from ``[d, 2d)`` so that many
replicas failing together do not retry together, and the sequence starts over after two quiet
minutes. The clock and the random source are injectable so tests check the sequence without
sleeping.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Hands out the next delay on every :meth:`next_delay` call; :meth:`reset` starts over."""

    def __init__(
        self,
        *,
        initial: float = 0.8,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or jitter < 0 or reset_after <= 0:
            raise ValueError("backoff needs 0 < initial <= maximum, factor >= 1, jitter >= 0")
        self._initial = initial
        self._maximum = maximum
        self._factor = factor
        self._jitter = jitter
        self._reset_after = reset_after
        self._clock = clock
        self._rng = rng or random.Random()
        self._current = initial
        self._last_failure: float | None = None

    def next_delay(self) -> float:
        """The delay before the next attempt (call it once per failure)."""
        now = self._clock()
        if self._last_failure is not None and now - self._last_failure >= self._reset_after:
            self._current = self._initial
        self._last_failure = now
        base = self._current
        self._current = min(self._current * self._factor, self._maximum)
        return base + self._rng.random() * self._jitter * base

    def reset(self) -> None:
        """Forget past failures: the next delay is the initial one again."""
        self._current = self._initial
        self._last_failure = None
