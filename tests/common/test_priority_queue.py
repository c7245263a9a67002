"""The priority queue: fresh work before bulk work, the workqueue's rules otherwise.

Delays run on a FakeClock; the queue is real (its waiter thread included).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from common.priority_queue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue
from common.prometheus_workqueue import PrometheusMetricsProvider
from common.rate_limiters import FakeClock, ItemExponentialFailureRateLimiter
from common.workqueue import QueueShutDown, RateLimitingQueue
from common.workqueue_metrics import WORKQUEUE_DEPTH, WORKQUEUE_DEPTH_BY_PRIORITY
from tests.support.waiting import wait_until

SOON = 5.0
"""Real seconds within which something that should happen at once surely has."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=100.0)


@pytest.fixture
def queue(clock: FakeClock) -> Iterator[PriorityQueue[str]]:
    with PriorityQueue[str](clock=clock) as q:
        yield q


def take_all(queue: PriorityQueue[str]) -> list[tuple[str, int]]:
    """Every waiting key with its priority, in hand-out order, each marked done."""
    taken: list[tuple[str, int]] = []
    while queue.len():
        item, priority = queue.get_with_priority(timeout=SOON)
        queue.done(item)
        taken.append((item, priority))
    return taken


def test_fresh_keys_are_handed_out_before_low_priority_ones_fifo_within_each(
    queue: PriorityQueue[str],
) -> None:
    for key in ("list-1", "list-2", "list-3"):
        queue.add(key, LOW_PRIORITY)
    queue.add("fresh-1")
    queue.add("fresh-2", NORMAL_PRIORITY)
    queue.add("urgent", 10)

    assert take_all(queue) == [
        ("urgent", 10),
        ("fresh-1", NORMAL_PRIORITY),
        ("fresh-2", NORMAL_PRIORITY),
        ("list-1", LOW_PRIORITY),
        ("list-2", LOW_PRIORITY),
        ("list-3", LOW_PRIORITY),
    ]


def test_a_waiting_key_added_at_a_higher_priority_is_promoted_never_demoted(
    queue: PriorityQueue[str],
) -> None:
    queue.add("a", LOW_PRIORITY)
    queue.add("b", LOW_PRIORITY)
    queue.add("fresh")
    queue.add("b")  # a fresh event for a key still waiting from the initial list
    queue.add("fresh", LOW_PRIORITY)  # a lower priority leaves it where it is

    assert queue.len() == 3  # still stingy: each key waits once
    # "b" keeps its place among equals: it was added before "fresh" (controller-runtime's rule)
    assert take_all(queue) == [("b", 0), ("fresh", 0), ("a", LOW_PRIORITY)]


def test_a_key_re_added_in_flight_is_requeued_on_done_at_the_highest_priority(
    queue: PriorityQueue[str],
) -> None:
    queue.add("a", LOW_PRIORITY)
    queue.add("other", LOW_PRIORITY)
    item, priority = queue.get_with_priority(timeout=SOON)
    assert (item, priority) == ("a", LOW_PRIORITY)

    queue.add("a", LOW_PRIORITY)
    queue.add("a")  # raised while in flight
    assert queue.len() == 1  # never handed to a second worker meanwhile
    queue.done("a")

    assert take_all(queue) == [("a", NORMAL_PRIORITY), ("other", LOW_PRIORITY)]


def test_a_delayed_key_comes_back_at_its_priority(
    queue: PriorityQueue[str], clock: FakeClock
) -> None:
    queue.add_after("retry-low", 1.0, LOW_PRIORITY)
    queue.add_after("retry-high", 1.0, 5)
    queue.add_after("retry-high", 2.0, LOW_PRIORITY)  # later and lower: the earlier, higher wins
    queue.add("fresh")
    queue.add_after("now", 0.0, 7)  # no delay: at once, at its priority
    assert queue.len() == 2
    clock.step(1.0)
    wait_until(lambda: queue.len() == 4)  # the waiter thread moved the due keys in

    assert take_all(queue) == [
        ("now", 7),
        ("retry-high", 5),
        ("fresh", NORMAL_PRIORITY),
        ("retry-low", LOW_PRIORITY),
    ]


def test_add_rate_limited_keeps_the_priority_and_counts_the_failure(clock: FakeClock) -> None:
    limiter = ItemExponentialFailureRateLimiter[str](1.0, 10.0)
    with PriorityQueue[str](limiter, clock=clock) as queue:
        queue.add_rate_limited("a", LOW_PRIORITY)
        assert queue.num_requeues("a") == 1
        assert queue.len() == 0
        clock.step(1.0)
        assert queue.get_with_priority(timeout=SOON) == ("a", LOW_PRIORITY)
        queue.done("a")
        queue.forget("a")
        assert queue.num_requeues("a") == 0


def test_shut_down_drains_by_priority_then_raises(queue: PriorityQueue[str]) -> None:
    queue.add("low", LOW_PRIORITY)
    queue.add("fresh")
    queue.shut_down()
    queue.add("ignored")
    assert take_all(queue) == [("fresh", 0), ("low", LOW_PRIORITY)]
    with pytest.raises(QueueShutDown):
        queue.get_with_priority(timeout=SOON)


def test_depth_is_reported_in_total_and_by_priority(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)

    def depth(priority: int | None = None) -> float | None:
        if priority is None:
            return registry.get_sample_value(WORKQUEUE_DEPTH, {"name": "pods"})
        labels = {"name": "pods", "priority": str(priority)}
        return registry.get_sample_value(WORKQUEUE_DEPTH_BY_PRIORITY, labels)

    with PriorityQueue[str](name="pods", metrics=provider, clock=clock) as queue:
        for key in ("a", "b", "c"):
            queue.add(key, LOW_PRIORITY)
        queue.add("fresh")
        assert (depth(), depth(LOW_PRIORITY), depth(NORMAL_PRIORITY)) == (4, 3, 1)
        queue.add("b")  # promoted: one moves from -100 to 0
        assert (depth(), depth(LOW_PRIORITY), depth(NORMAL_PRIORITY)) == (4, 2, 2)
        queue.get(timeout=SOON)
        assert (depth(), depth(LOW_PRIORITY), depth(NORMAL_PRIORITY)) == (3, 2, 1)
        take_all(queue)
        assert (depth(), depth(LOW_PRIORITY), depth(NORMAL_PRIORITY)) == (0, 0, 0)


# One priority for every key: the hand-out order is the FIFO queue's, whatever the operations.
_OPS = st.lists(
    st.tuples(st.sampled_from(["add", "get", "done"]), st.sampled_from("abcdef")), max_size=60
)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, priority=st.sampled_from([LOW_PRIORITY, NORMAL_PRIORITY]))
def test_at_one_priority_it_behaves_exactly_like_the_fifo_queue(
    ops: list[tuple[str, str]], priority: int
) -> None:
    with PriorityQueue[str]() as prioritised, RateLimitingQueue[str]() as fifo:
        for op, key in ops:
            if op == "add":
                prioritised.add(key, priority)
                fifo.add(key)
            elif op == "get" and fifo.len():
                assert prioritised.get_with_priority(timeout=SOON) == (fifo.get(SOON), priority)
            elif op == "done":
                outcomes = []
                for q in (prioritised, fifo):
                    try:
                        q.done(key)
                        outcomes.append("done")
                    except ValueError:
                        outcomes.append("not in flight")
                assert outcomes[0] == outcomes[1]
            assert prioritised.len() == fifo.len()
