"""The workqueue (client-go-semantics.md 6.1-6.5).

Delays run on a FakeClock. The only real waits are short "nothing happens" windows (NOTHING_YET)
and generous upper bounds on events that should happen at once (SOON).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.rate_limiters import FakeClock, ItemExponentialFailureRateLimiter
from common.workqueue import (
    METRIC_NAMES,
    UNFINISHED_WORK_UPDATE_PERIOD,
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    DelayingQueue,
    NoopMetricsProvider,
    Queue,
    QueueShutDown,
    RateLimitingQueue,
)

NOTHING_YET = 0.05
"""Real seconds we wait to be fairly sure something does *not* happen."""
SOON = 5.0
"""Real seconds within which something that should happen at once surely has."""


def drain(queue: Queue[str]) -> list[str]:
    """Every item the queue hands out until it is shut down and empty, each marked done."""
    items: list[str] = []
    while True:
        try:
            item = queue.get(timeout=SOON)
        except QueueShutDown:
            return items
        items.append(item)
        queue.done(item)


def poll_until(condition: Callable[[], bool]) -> None:
    """Poll briefly for a state another thread reaches without signalling us."""
    deadline = time.monotonic() + SOON
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=100.0)


@pytest.fixture
def delaying(clock: FakeClock) -> Iterator[DelayingQueue[str]]:
    queue = DelayingQueue[str](clock=clock)
    yield queue
    queue.shut_down()


# --- 6.1 FIFO, stingy, one worker per item -------------------------------------------------------


def test_6_1_items_come_out_in_fifo_order() -> None:
    queue = Queue[str]()
    for item in "abc":
        queue.add(item)
    queue.shut_down()

    assert drain(queue) == ["a", "b", "c"]


def test_6_1_adding_waiting_item_is_noop() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.add("b")
    queue.add("a")

    assert queue.len() == 2
    queue.shut_down()
    assert drain(queue) == ["a", "b"]


def test_6_1_item_in_flight_is_not_handed_out_again_until_done() -> None:
    queue = Queue[str]()
    queue.add("a")
    assert queue.get() == "a"

    queue.add("a")

    assert queue.len() == 0
    with pytest.raises(TimeoutError):
        queue.get(timeout=NOTHING_YET)
    queue.done("a")
    assert queue.len() == 1
    assert queue.get(timeout=SOON) == "a"
    queue.done("a")


def test_6_1_readded_many_times_during_processing_is_requeued_once() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.get()
    for _ in range(3):
        queue.add("a")

    queue.done("a")
    queue.shut_down()

    assert drain(queue) == ["a"]


def test_6_1_done_without_readd_does_not_requeue() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.done(queue.get())

    assert queue.len() == 0


def test_6_1_requeued_item_goes_to_the_back() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.get()
    queue.add("a")
    queue.add("b")

    queue.done("a")
    queue.shut_down()

    assert drain(queue) == ["b", "a"]


def test_6_1_done_for_item_not_in_flight_raises() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.done(queue.get())

    with pytest.raises(ValueError, match="not being processed"):
        queue.done("a")
    with pytest.raises(ValueError):
        queue.done("never-added")


@pytest.mark.parametrize("workers", [4, 8])
def test_6_1_item_is_never_handed_to_two_workers_at_once(workers: int) -> None:
    keys = [f"key-{i}" for i in range(6)]
    queue = Queue[str]()
    lock = threading.Lock()
    in_flight: set[str] = set()
    overlaps: list[str] = []
    # One sequence orders adds and gets, to prove no add is lost (see the final assertion).
    sequence = itertools.count()
    last_add: dict[str, int] = {}
    last_get: dict[str, int] = {}

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(1500):
            key = rng.choice(keys)
            with lock:
                last_add[key] = next(sequence)  # taken before add: any later get is after it
            queue.add(key)
            time.sleep(0)  # spread the adds over the time workers are busy

    def work() -> None:
        while True:
            try:
                key = queue.get()
            except QueueShutDown:
                return
            with lock:
                if key in in_flight:
                    overlaps.append(key)
                in_flight.add(key)
                last_get[key] = next(sequence)
            time.sleep(0.0001)  # hold the key in flight while producers re-add it
            with lock:
                in_flight.discard(key)
            queue.done(key)

    worker_threads = [threading.Thread(target=work) for _ in range(workers)]
    producer_threads = [threading.Thread(target=produce, args=(seed,)) for seed in range(3)]
    for thread in worker_threads + producer_threads:
        thread.start()
    for thread in producer_threads:
        thread.join()
    queue.shut_down()  # workers still finish everything already added
    for thread in worker_threads:
        thread.join()

    assert overlaps == []
    assert last_add.keys() == last_get.keys()
    assert all(last_get[key] > last_add[key] for key in last_add), "an add was lost"


@given(
    operations=st.lists(
        st.tuples(st.sampled_from(["add", "get", "done"]), st.sampled_from("abc")), max_size=60
    )
)
def test_6_1_queue_matches_a_simple_model(operations: list[tuple[str, str]]) -> None:
    queue = Queue[str]()
    model_queue: list[str] = []
    model_dirty: set[str] = set()
    model_processing: set[str] = set()

    for operation, item in operations:
        if operation == "add" and item not in model_dirty:
            model_dirty.add(item)
            if item not in model_processing:
                model_queue.append(item)
            queue.add(item)
        elif operation == "get" and model_queue:
            expected = model_queue.pop(0)
            model_dirty.discard(expected)
            model_processing.add(expected)
            assert queue.get(timeout=0) == expected
        elif operation == "done" and item in model_processing:
            model_processing.remove(item)
            if item in model_dirty:
                model_queue.append(item)
            queue.done(item)
        assert queue.len() == len(model_queue)


# --- 6.2 blocking get, shutdown, drain -----------------------------------------------------------


def test_6_2_get_blocks_while_empty() -> None:
    queue = Queue[str]()
    got: list[str] = []
    returned = threading.Event()

    def get_one() -> None:
        got.append(queue.get())
        returned.set()

    getter = threading.Thread(target=get_one)
    getter.start()
    assert not returned.wait(NOTHING_YET)
    queue.add("a")
    getter.join(SOON)

    assert got == ["a"]
    queue.done("a")


def test_6_2_get_timeout_raises_timeout_error() -> None:
    queue = Queue[str]()

    with pytest.raises(TimeoutError):
        queue.get(timeout=0)
    with pytest.raises(TimeoutError):
        queue.get(timeout=NOTHING_YET)


def test_6_2_shut_down_wakes_every_blocked_getter() -> None:
    queue = Queue[str]()
    outcomes: list[str] = []
    lock = threading.Lock()

    def get_one() -> None:
        try:
            queue.get()
        except QueueShutDown:
            with lock:
                outcomes.append("shut down")

    getters = [threading.Thread(target=get_one) for _ in range(3)]
    for getter in getters:
        getter.start()
    queue.shut_down()
    for getter in getters:
        getter.join(SOON)

    assert outcomes == ["shut down"] * 3


def test_6_2_shutdown_is_reported_only_once_empty() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.add("b")

    queue.shut_down()

    assert queue.shutting_down()
    assert queue.get() == "a"
    assert queue.get() == "b"
    with pytest.raises(QueueShutDown):
        queue.get()
    with pytest.raises(QueueShutDown):
        queue.get(timeout=0)


def test_6_2_add_after_shutdown_is_ignored() -> None:
    queue = Queue[str]()
    queue.shut_down()

    queue.add("a")

    assert queue.len() == 0
    with pytest.raises(QueueShutDown):
        queue.get()


def test_6_2_item_readded_before_shutdown_is_still_requeued_on_done() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.get()
    queue.add("a")
    queue.shut_down()
    queue.add("b")  # ignored

    queue.done("a")

    assert drain(queue) == ["a"]


def test_6_2_shut_down_is_idempotent_and_a_context_manager_calls_it() -> None:
    with Queue[str]() as queue:
        queue.add("a")
    assert queue.shutting_down()
    queue.shut_down()
    assert drain(queue) == ["a"]


def test_6_2_shut_down_with_drain_waits_until_nothing_is_processing() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.add("b")
    first, second = queue.get(), queue.get()
    drained = threading.Event()

    def shut_down_with_drain() -> None:
        queue.shut_down_with_drain()
        drained.set()

    drainer = threading.Thread(target=shut_down_with_drain)
    drainer.start()
    poll_until(queue.shutting_down)

    assert not drained.wait(NOTHING_YET)
    queue.add("c")  # ignored: shutting down
    queue.done(first)
    assert not drained.wait(NOTHING_YET)
    queue.done(second)
    drainer.join(SOON)

    assert drained.is_set()
    with pytest.raises(QueueShutDown):
        queue.get()


def test_6_2_shut_down_with_drain_returns_at_once_when_idle() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.done(queue.get())

    queue.shut_down_with_drain()

    assert queue.shutting_down()


def test_6_2_shut_down_stops_a_pending_drain() -> None:
    queue = Queue[str]()
    queue.add("a")
    queue.get()
    drainer = threading.Thread(target=queue.shut_down_with_drain)
    drainer.start()
    poll_until(queue.shutting_down)  # the drain has begun: shut_down() must now end it

    queue.shut_down()
    drainer.join(SOON)

    assert not drainer.is_alive()
    queue.done("a")


# --- 6.3 add_after -------------------------------------------------------------------------------


def test_6_3_item_is_not_ready_before_its_delay(
    delaying: DelayingQueue[str], clock: FakeClock
) -> None:
    delaying.add_after("a", 1.0)
    assert delaying.len() == 0

    clock.step(0.5)
    with pytest.raises(TimeoutError):
        delaying.get(timeout=NOTHING_YET)

    clock.step(0.5)
    assert delaying.get(timeout=SOON) == "a"
    delaying.done("a")


@pytest.mark.parametrize("delay", [0.0, -1.0])
def test_6_3_delay_of_zero_or_less_adds_at_once(delaying: DelayingQueue[str], delay: float) -> None:
    delaying.add_after("a", delay)

    assert delaying.len() == 1


def test_6_3_duplicate_keeps_the_earliest_ready_time(
    delaying: DelayingQueue[str], clock: FakeClock
) -> None:
    delaying.add_after("early-second", 10.0)
    delaying.add_after("early-second", 1.0)
    delaying.add_after("early-first", 1.0)
    delaying.add_after("early-first", 10.0)

    clock.step(1.0)

    assert {delaying.get(timeout=SOON), delaying.get(timeout=SOON)} == {
        "early-second",
        "early-first",
    }
    delaying.done("early-second")
    delaying.done("early-first")
    clock.step(9.0)  # the later, discarded ready times must not add them again
    with pytest.raises(TimeoutError):
        delaying.get(timeout=NOTHING_YET)


def test_6_3_delayed_items_come_out_in_ready_order(
    delaying: DelayingQueue[str], clock: FakeClock
) -> None:
    delays = {f"item-{i}": random.Random(i).uniform(0.1, 10.0) for i in range(200)}
    for item, delay in delays.items():
        delaying.add_after(item, delay)

    clock.step(10.0)
    got = [delaying.get(timeout=SOON) for _ in delays]

    assert got == sorted(delays, key=delays.__getitem__)


def test_6_3_delayed_item_already_waiting_is_not_queued_twice(
    delaying: DelayingQueue[str], clock: FakeClock
) -> None:
    delaying.add("a")
    delaying.add_after("a", 1.0)
    delaying.add_after("marker", 1.0)  # same time, later in line: due together with "a"

    clock.step(1.0)
    poll_until(lambda: delaying.len() == 2)  # "marker" is in: the waiter handled "a" too

    assert delaying.len() == 2
    assert [delaying.get(), delaying.get()] == ["a", "marker"]


def test_6_3_add_after_after_shutdown_is_ignored(clock: FakeClock) -> None:
    queue = DelayingQueue[str](clock=clock)
    queue.shut_down()

    queue.add_after("a", 0.0)
    queue.add_after("b", 1.0)
    clock.step(1.0)

    assert queue.len() == 0


def test_6_3_shut_down_joins_the_waiter_thread(clock: FakeClock) -> None:
    before = set(threading.enumerate())
    queue = DelayingQueue[str](name="joined", clock=clock)
    started = [thread for thread in threading.enumerate() if thread not in before]
    assert len(started) == 1

    queue.shut_down()

    assert not started[0].is_alive()  # joined before shut_down returned: no polling needed


def test_6_3_shut_down_with_drain_also_joins_the_waiter_thread(clock: FakeClock) -> None:
    before = set(threading.enumerate())
    queue = DelayingQueue[str](clock=clock)
    (waiter,) = [thread for thread in threading.enumerate() if thread not in before]

    queue.shut_down_with_drain()

    assert not waiter.is_alive()


def test_6_3_shutdown_drops_items_still_delayed(clock: FakeClock) -> None:
    queue = DelayingQueue[str](clock=clock)
    queue.add_after("a", 1.0)

    queue.shut_down()
    clock.step(1.0)

    with pytest.raises(QueueShutDown):
        queue.get()


def test_6_3_real_clock_delay() -> None:
    with DelayingQueue[str]() as queue:
        queue.add_after("a", 0.02)
        assert queue.len() == 0

        assert queue.get(timeout=SOON) == "a"
        queue.done("a")


# --- 6.4 rate-limited adds -----------------------------------------------------------------------


def test_6_4_add_rate_limited_adds_after_the_limiters_delay(clock: FakeClock) -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=60.0)
    with RateLimitingQueue(limiter, clock=clock) as queue:
        queue.add_rate_limited("a")
        queue.add_rate_limited("a")  # second failure: 2 s, but the earlier 1 s wins (6.3)
        assert queue.num_requeues("a") == 2
        assert queue.len() == 0

        clock.step(1.0)
        assert queue.get(timeout=SOON) == "a"
        queue.done("a")

        queue.forget("a")
        assert queue.num_requeues("a") == 0


def test_6_4_default_limiter_runs_on_the_queues_clock(clock: FakeClock) -> None:
    with RateLimitingQueue[str](clock=clock) as queue:
        for i in range(101):
            queue.add_rate_limited(f"k{i}")  # 100 fit the burst; the 101st waits 0.1 s

        clock.step(0.005)
        first = {queue.get(timeout=SOON) for _ in range(100)}
        assert first == {f"k{i}" for i in range(100)}
        with pytest.raises(TimeoutError):
            queue.get(timeout=NOTHING_YET)

        clock.step(0.1)
        assert queue.get(timeout=SOON) == "k100"


# --- 6.5 metrics ---------------------------------------------------------------------------------


class RecordedMetric:
    """Fits every metric protocol; remembers what the queue reported."""

    def __init__(self, changed: threading.Condition) -> None:
        self._changed = changed
        self.value = 0.0
        self.observations: list[float] = []

    def _record(self, update: Callable[[], None]) -> None:
        with self._changed:
            update()
            self._changed.notify_all()

    def inc(self) -> None:
        self._record(lambda: setattr(self, "value", self.value + 1))

    def dec(self) -> None:
        self._record(lambda: setattr(self, "value", self.value - 1))

    def set(self, value: float) -> None:
        self._record(lambda: setattr(self, "value", value))

    def observe(self, value: float) -> None:
        self._record(lambda: self.observations.append(value))


class RecordingProvider:
    """Records each metric under (metric name, queue name): the name/label pair a scrape shows."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.metrics: dict[tuple[str, str], RecordedMetric] = {}

    def _new(self, metric_name: str, queue_name: str) -> RecordedMetric:
        metric = RecordedMetric(self.changed)
        self.metrics[metric_name, queue_name] = metric
        return metric

    def new_depth_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_DEPTH, name)

    def new_adds_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_ADDS_TOTAL, name)

    def new_latency_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_QUEUE_DURATION_SECONDS, name)

    def new_work_duration_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_WORK_DURATION_SECONDS, name)

    def new_unfinished_work_seconds_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_UNFINISHED_WORK_SECONDS, name)

    def new_longest_running_processor_seconds_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS, name)

    def new_retries_metric(self, name: str) -> RecordedMetric:
        return self._new(WORKQUEUE_RETRIES_TOTAL, name)

    def __getitem__(self, metric_name: str) -> RecordedMetric:
        (metric,) = [m for (name, _), m in self.metrics.items() if name == metric_name]
        return metric

    def wait_until(self, predicate: Callable[[], bool]) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout=SOON)


def test_6_5_metric_names_match_client_go() -> None:
    assert METRIC_NAMES == (
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
    )


def test_6_5_queue_reports_every_metric_labelled_with_its_name(clock: FakeClock) -> None:
    provider = RecordingProvider()

    with RateLimitingQueue[str](name="pods", metrics=provider, clock=clock):
        pass

    assert sorted(provider.metrics) == sorted((name, "pods") for name in METRIC_NAMES)


def test_6_5_depth_adds_latency_and_work_duration(clock: FakeClock) -> None:
    provider = RecordingProvider()
    queue = Queue[str](name="pods", metrics=provider, clock=clock)
    queue.add("a")
    queue.add("a")  # stingy: not an add
    queue.add("b")
    assert provider[WORKQUEUE_ADDS_TOTAL].value == 2
    assert provider[WORKQUEUE_DEPTH].value == 2

    clock.step(1.5)
    queue.get()
    assert provider[WORKQUEUE_DEPTH].value == 1
    assert provider[WORKQUEUE_QUEUE_DURATION_SECONDS].observations == [1.5]

    clock.step(2.0)
    queue.done("a")
    assert provider[WORKQUEUE_WORK_DURATION_SECONDS].observations == [2.0]
    queue.shut_down()


def test_6_5_unfinished_work_gauges(clock: FakeClock) -> None:
    provider = RecordingProvider()
    queue = Queue[str](name="pods", metrics=provider, clock=clock)
    queue.add("a")
    queue.get()
    clock.step(3.0)
    queue.add("b")
    queue.get()
    clock.step(1.0)

    queue.update_unfinished_work()

    assert provider[WORKQUEUE_UNFINISHED_WORK_SECONDS].value == 5.0
    assert provider[WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS].value == 4.0
    queue.shut_down()


def test_6_5_delaying_queue_updates_unfinished_work_periodically(clock: FakeClock) -> None:
    provider = RecordingProvider()
    with DelayingQueue[str](name="pods", metrics=provider, clock=clock) as queue:
        queue.add("a")
        queue.get()
        longest = provider[WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS]

        clock.step(UNFINISHED_WORK_UPDATE_PERIOD)

        assert provider.wait_until(lambda: longest.value == UNFINISHED_WORK_UPDATE_PERIOD)
        queue.done("a")


def test_6_5_retries_count_add_after_and_add_rate_limited(clock: FakeClock) -> None:
    provider = RecordingProvider()
    limiter = ItemExponentialFailureRateLimiter[str](base_delay=1.0, max_delay=60.0)
    with RateLimitingQueue(limiter, name="pods", metrics=provider, clock=clock) as queue:
        queue.add_rate_limited("a")
        queue.add_rate_limited("b")
        queue.add_after("c", 5.0)
        queue.add("d")  # a plain add is not a retry

        assert provider[WORKQUEUE_RETRIES_TOTAL].value == 3
    queue.add_rate_limited("a")  # after shutdown: ignored, not counted
    assert provider[WORKQUEUE_RETRIES_TOTAL].value == 3


@pytest.mark.parametrize(
    ("name", "provider"), [("", RecordingProvider()), ("pods", NoopMetricsProvider())]
)
def test_6_5_unnamed_or_noop_queue_creates_no_metrics(
    name: str, provider: RecordingProvider | NoopMetricsProvider
) -> None:
    with RateLimitingQueue[str](name=name, metrics=provider) as queue:
        queue.add("a")
        queue.done(queue.get())

    if isinstance(provider, RecordingProvider):
        assert provider.metrics == {}
