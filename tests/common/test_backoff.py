"""Reference 1.2: backoff 0.8 s doubling to 30 s, jitter in [d, 2d), reset after 2 quiet minutes."""

from __future__ import annotations

import random

import pytest

from common.backoff import Backoff


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_1_2_delays_double_from_0_8_to_a_30_second_cap_with_jitter() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, rng=random.Random(1))
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    for base in bases:
        delay = backoff.next_delay()
        assert base <= delay < 2 * base
        clock.now += 1


def test_1_2_jitter_spreads_delays_over_the_whole_interval() -> None:
    delays = [Backoff(rng=random.Random(seed)).next_delay() for seed in range(200)]
    assert min(delays) < 0.9 and max(delays) > 1.5


def test_1_2_two_quiet_minutes_start_the_sequence_over() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, rng=random.Random(2))
    for _ in range(5):
        backoff.next_delay()
    clock.now += 119
    assert backoff.next_delay() >= 12.8
    clock.now += 120
    assert backoff.next_delay() < 1.6


def test_explicit_reset() -> None:
    backoff = Backoff(rng=random.Random(3))
    for _ in range(4):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() < 1.6


def test_nonsense_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=0)
