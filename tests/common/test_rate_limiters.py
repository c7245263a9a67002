"""Rate limiters (client-go-semantics.md 6.4), timed on a FakeClock: no test sleeps for real."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.rate_limiters import (
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    MonotonicClock,
    RateLimiter,
    default_controller_rate_limiter,
)

# --- exponential per-item backoff ----------------------------------------------------------------


def test_6_4_exponential_delay_doubles_on_every_when() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)

    delays = [limiter.when("a") for _ in range(5)]

    assert delays == pytest.approx([0.005, 0.010, 0.020, 0.040, 0.080])
    assert limiter.num_requeues("a") == 5


def test_6_4_exponential_delay_is_capped_at_max_delay() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)

    delays = [limiter.when("a") for _ in range(40)]

    # 0.005 * 2**17 = 655 s is the last step under the cap; from 2**18 on it is 1000 s.
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0] * 22
    assert delays == sorted(delays)


def test_6_4_exponential_huge_failure_count_does_not_overflow() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=math.inf)

    delays = [limiter.when("a") for _ in range(1100)]

    # 2**1024 no longer fits a float: the limiter must answer "the cap", not raise.
    assert delays[1023] == math.ldexp(1.0, 1023)
    assert delays[1024:] == [math.inf] * 76


def test_6_4_exponential_forget_resets_the_backoff() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)
    for _ in range(3):
        limiter.when("a")

    limiter.forget("a")

    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_6_4_exponential_counts_failures_per_item() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=0.005, max_delay=1000.0)
    limiter.when("a")
    limiter.when("a")

    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.num_requeues("a") == 2
    assert limiter.num_requeues("b") == 1
    limiter.forget("never-seen")  # forgetting an unknown item is harmless


def test_6_4_exponential_rejects_negative_delays() -> None:
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter[str](base_delay=-1.0)


@given(base=st.floats(1e-6, 10.0), cap=st.floats(0.0, 1e6), calls=st.integers(1, 200))
def test_6_4_exponential_delays_never_shrink_nor_pass_the_cap(
    base: float, cap: float, calls: int
) -> None:
    limiter = ItemExponentialFailureRateLimiter[int](base_delay=base, max_delay=cap)

    delays = [limiter.when(1) for _ in range(calls)]

    assert delays == sorted(delays)
    assert all(0.0 <= delay <= cap for delay in delays)


# --- token bucket --------------------------------------------------------------------------------


def test_6_4_bucket_first_burst_immediate_then_reservations_queue_up() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)

    burst = [limiter.when(f"k{i}") for i in range(100)]
    queued = [limiter.when(f"k{i}") for i in range(100, 103)]

    assert burst == [0.0] * 100
    assert queued == pytest.approx([0.1, 0.2, 0.3])


def test_6_4_bucket_refills_as_the_clock_advances() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter[str](qps=10.0, burst=100, clock=clock)
    for _ in range(102):
        limiter.when("a")  # bucket now 2 tokens in debt

    clock.step(0.2)  # pays the debt exactly
    assert limiter.when("a") == pytest.approx(0.1)

    clock.step(1000.0)  # refill stops at the burst size
    assert [limiter.when("a") for _ in range(100)] == [0.0] * 100
    assert limiter.when("a") == pytest.approx(0.1)


def test_6_4_bucket_tracks_no_items() -> None:
    limiter = BucketRateLimiter[str](qps=1.0, burst=1, clock=FakeClock())
    limiter.when("a")
    limiter.when("a")

    limiter.forget("a")

    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(2.0)  # forget does not give tokens back


def test_6_4_bucket_with_infinite_qps_never_delays() -> None:
    limiter = BucketRateLimiter[str](qps=math.inf, burst=1, clock=FakeClock())

    assert [limiter.when("a") for _ in range(10)] == [0.0] * 10


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_6_4_bucket_rejects_a_bucket_that_never_fills(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        BucketRateLimiter[str](qps=qps, burst=burst, clock=FakeClock())


@given(qps=st.floats(0.1, 1000.0), burst=st.integers(1, 50), calls=st.integers(1, 200))
def test_6_4_bucket_without_time_passing_delays_the_nth_call_by_its_place_in_line(
    qps: float, burst: int, calls: int
) -> None:
    limiter = BucketRateLimiter[int](qps=qps, burst=burst, clock=FakeClock())

    delays = [limiter.when(0) for _ in range(calls)]

    expected = [max(0, n - burst + 1) / qps for n in range(calls)]
    assert delays == pytest.approx(expected)


# --- composition ---------------------------------------------------------------------------------


def test_6_4_max_of_takes_the_longest_delay_and_the_most_requeues() -> None:
    fast_slow = ItemFastSlowRateLimiter[str](fast_delay=0.5, slow_delay=5.0, max_fast_attempts=1)
    exponential = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=100.0)
    limiter = MaxOfRateLimiter(fast_slow, exponential)

    delays = [limiter.when("a") for _ in range(5)]

    assert delays == pytest.approx([1.0, 5.0, 5.0, 8.0, 16.0])
    assert limiter.num_requeues("a") == 5


def test_6_4_max_of_forget_forgets_in_every_limiter() -> None:
    first = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=100.0)
    second = ItemFastSlowRateLimiter[str](fast_delay=0.5, slow_delay=5.0, max_fast_attempts=1)
    limiter = MaxOfRateLimiter(first, second)
    limiter.when("a")
    limiter.when("a")

    limiter.forget("a")

    assert first.num_requeues("a") == 0
    assert second.num_requeues("a") == 0
    assert limiter.num_requeues("a") == 0


def test_6_4_max_of_nothing_never_delays() -> None:
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter()

    assert limiter.when("a") == 0.0
    assert limiter.num_requeues("a") == 0


def test_6_4_default_controller_limiter_is_exponential_5ms_to_1000s() -> None:
    limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())

    delays = [limiter.when("a") for _ in range(4)]

    assert delays == pytest.approx([0.005, 0.010, 0.020, 0.040])
    assert limiter.num_requeues("a") == 4
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_6_4_default_controller_limiter_caps_each_item_at_1000s() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = default_controller_rate_limiter(clock)

    for _ in range(30):
        clock.step(10_000.0)  # keep the bucket full so only the per-item limit shows
        delay = limiter.when("a")

    assert delay == 1000.0


def test_6_4_default_controller_limiter_bucket_is_10_qps_burst_100() -> None:
    limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())

    first_failures = [limiter.when(f"k{i}") for i in range(100)]
    after_burst = [limiter.when(f"k{i}") for i in range(100, 102)]

    assert first_failures == pytest.approx([0.005] * 100)
    assert after_burst == pytest.approx([0.1, 0.2])


def test_6_4_fast_slow_switches_after_max_fast_attempts() -> None:
    limiter = ItemFastSlowRateLimiter[str](fast_delay=0.01, slow_delay=10.0, max_fast_attempts=3)

    delays = [limiter.when("a") for _ in range(5)]

    assert delays == [0.01, 0.01, 0.01, 10.0, 10.0]
    assert limiter.num_requeues("a") == 5
    assert limiter.when("b") == 0.01
    limiter.forget("a")
    assert limiter.when("a") == 0.01


def test_6_4_fast_slow_rejects_negative_settings() -> None:
    with pytest.raises(ValueError):
        ItemFastSlowRateLimiter[str](fast_delay=0.01, slow_delay=1.0, max_fast_attempts=-1)


# --- clocks --------------------------------------------------------------------------------------


def test_fake_clock_moves_only_when_stepped() -> None:
    clock = FakeClock(start=5.0)
    assert clock.now() == 5.0

    clock.step(1.5)

    assert clock.now() == 6.5
    with pytest.raises(ValueError):
        clock.step(-1.0)


def test_fake_clock_step_wakes_a_waiter_whose_deadline_passed() -> None:
    clock = FakeClock()
    condition = threading.Condition()
    waiting = threading.Event()
    woke_at: list[float] = []

    def wait_for_deadline() -> None:
        with condition:
            waiting.set()
            while clock.now() < 10.0:
                clock.wait(condition, deadline=10.0)
            woke_at.append(clock.now())

    waiter = threading.Thread(target=wait_for_deadline)
    waiter.start()
    assert waiting.wait(5.0)
    clock.step(4.0)
    clock.step(6.0)
    waiter.join(5.0)

    assert not waiter.is_alive()
    assert woke_at == [10.0]


def test_fake_clock_wait_returns_at_once_when_the_deadline_passed() -> None:
    clock = FakeClock(start=3.0)
    condition = threading.Condition()

    with condition:
        clock.wait(condition, deadline=3.0)  # would block forever if it waited


def test_monotonic_clock_waits_until_the_deadline() -> None:
    clock = MonotonicClock()
    condition = threading.Condition()
    deadline = clock.now() + 0.02

    with condition:
        while clock.now() < deadline:
            clock.wait(condition, deadline)

    assert clock.now() >= deadline
