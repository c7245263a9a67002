"""PrometheusMetricsProvider: client-go's workqueue series on a given registry (reference 6.5)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from common.prometheus_workqueue import DURATION_BUCKETS, PrometheusMetricsProvider
from common.rate_limiters import FakeClock, ItemExponentialFailureRateLimiter
from common.workqueue import (
    METRIC_NAMES,
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    RateLimitingQueue,
)
from processor_svc.controller import Controller
from tests.support.controllers import make_context, synced_lister
from tests.support.waiting import wait_until


def value(registry: CollectorRegistry, sample: str, queue: str) -> float | None:
    return registry.get_sample_value(sample, {"name": queue})


def test_every_series_after_queue_activity() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    queue = RateLimitingQueue[str](
        ItemExponentialFailureRateLimiter[str](0.001, 0.01),
        name="pods-controller",
        metrics=PrometheusMetricsProvider(registry),
        clock=clock,
    )
    try:
        queue.add("a")
        queue.add("b")
        queue.add("a")  # stingy: not counted
        clock.step(1.0)
        item = queue.get()
        assert item == "a"
        clock.step(2.0)  # "a" has been in flight for 2 s; the waiter refreshes the gauges
        wait_until(
            lambda: value(registry, WORKQUEUE_UNFINISHED_WORK_SECONDS, "pods-controller") == 2.0
        )
        assert (
            value(registry, WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS, "pods-controller") == 2.0
        )
        queue.done(item)
        queue.add_rate_limited("a")
    finally:
        queue.shut_down()

    assert value(registry, WORKQUEUE_DEPTH, "pods-controller") == 1.0  # "b" still waiting
    assert value(registry, WORKQUEUE_ADDS_TOTAL, "pods-controller") == 2.0
    assert value(registry, WORKQUEUE_RETRIES_TOTAL, "pods-controller") == 1.0
    latency = f"{WORKQUEUE_QUEUE_DURATION_SECONDS}_sum"
    assert value(registry, latency, "pods-controller") == 1.0
    work = f"{WORKQUEUE_WORK_DURATION_SECONDS}_sum"
    assert value(registry, work, "pods-controller") == 2.0
    assert value(registry, f"{WORKQUEUE_WORK_DURATION_SECONDS}_count", "pods-controller") == 1.0

    exposition = generate_latest(registry).decode()
    for name in METRIC_NAMES:
        assert f'{name}{{name="pods-controller"}}' in exposition or (
            f'{name}_count{{name="pods-controller"}}' in exposition
        ), name


def test_histograms_use_client_go_buckets() -> None:
    buckets = DURATION_BUCKETS
    assert buckets == pytest.approx([10e-9 * 10**i for i in range(10)])
    assert buckets[0] == pytest.approx(1e-8)
    assert buckets[-1] == pytest.approx(10.0)
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)
    provider.new_latency_metric("q").observe(0.5)
    assert (
        registry.get_sample_value(
            f"{WORKQUEUE_QUEUE_DURATION_SECONDS}_bucket", {"name": "q", "le": "1.0"}
        )
        == 1.0
    )


def test_registries_are_independent() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    PrometheusMetricsProvider(first).new_adds_metric("q").inc()
    PrometheusMetricsProvider(second)
    assert first.get_sample_value(WORKQUEUE_ADDS_TOTAL, {"name": "q"}) == 1.0
    assert second.get_sample_value(WORKQUEUE_ADDS_TOTAL, {"name": "q"}) is None
    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusMetricsProvider(first)  # one provider per registry


def test_a_controller_reports_under_its_name() -> None:
    registry = CollectorRegistry()
    lister, _ = synced_lister()

    class Noop(Controller):
        def reconcile(self, key: str) -> None:
            pass

    controller = Noop(make_context(lister, metrics=PrometheusMetricsProvider(registry)))
    controller.start()
    try:
        controller.enqueue("default/a")
        wait_until(
            lambda: value(registry, f"{WORKQUEUE_WORK_DURATION_SECONDS}_count", "noop") == 1.0
        )
    finally:
        controller.stop()
    assert value(registry, WORKQUEUE_ADDS_TOTAL, "noop") == 1.0
    assert value(registry, WORKQUEUE_DEPTH, "noop") == 0.0
