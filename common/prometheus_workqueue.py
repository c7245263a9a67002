"""Workqueue metrics in Prometheus, under client-go's names (reference 6.5).

:class:`common.workqueue.MetricsProvider` is deliberately backend-neutral; this is the adapter
the services use. The series are named and labelled exactly like client-go's
``workqueue/metrics.go`` (one ``name`` label: the queue's name, histograms in seconds with
client-go's buckets), so the dashboards and alerts people already run for Go controllers work
unchanged on informer-bus controllers.

A priority queue's depth per priority (``workqueue_depth_by_priority``, labels ``name`` and
``priority``) is an eighth family, beside ``workqueue_depth``, which stays the total so the
queries already written against it keep one series per queue.

All eight metric families are created on the given :class:`~prometheus_client.CollectorRegistry`
when the provider is built, never on the global default registry: several providers (one per
registry) can live in one process, as tests and embedded runs need. Build **one provider per
registry** and share it between queues: a second provider on the same registry would register
the same names twice, which prometheus-client refuses. Queues with the same name share series.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.workqueue_metrics import (
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_DEPTH,
    WORKQUEUE_DEPTH_BY_PRIORITY,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    PriorityDepthMetric,
    PriorityMetricsProvider,
    SettableGaugeMetric,
)

__all__ = ["DURATION_BUCKETS", "NAME_LABEL", "PRIORITY_LABEL", "PrometheusMetricsProvider"]

NAME_LABEL = "name"
"""The one label of every workqueue series: the queue's name, as in client-go."""

PRIORITY_LABEL = "priority"
"""The second label of ``workqueue_depth_by_priority``: the priority, as an integer (``0``,
``-100``), as controller-runtime labels its depth."""

DURATION_BUCKETS: tuple[float, ...] = tuple(10e-9 * 10**i for i in range(10))
"""client-go's ``prometheus.ExponentialBuckets(10e-9, 10, 10)``: 10 ns to 10 s."""


class PrometheusMetricsProvider:
    """A :class:`~common.workqueue.MetricsProvider` that reports to one Prometheus registry.

    Each ``new_*_metric(name)`` returns the family's child for ``name=<queue name>``; the queue
    keeps it and updates it directly, so the hot path pays one prometheus-client call per update
    and no lookup.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        labels = [NAME_LABEL]
        self._depth = Gauge(
            WORKQUEUE_DEPTH, "Current depth of workqueue", labels, registry=registry
        )
        self._adds = Counter(
            WORKQUEUE_ADDS_TOTAL, "Total number of adds handled by workqueue", labels,
            registry=registry,
        )  # fmt: skip
        self._latency = Histogram(
            WORKQUEUE_QUEUE_DURATION_SECONDS,
            "How long in seconds an item stays in workqueue before being requested.",
            labels, registry=registry, buckets=DURATION_BUCKETS,
        )  # fmt: skip
        self._work_duration = Histogram(
            WORKQUEUE_WORK_DURATION_SECONDS,
            "How long in seconds processing an item from workqueue takes.",
            labels, registry=registry, buckets=DURATION_BUCKETS,
        )  # fmt: skip
        self._unfinished_work = Gauge(
            WORKQUEUE_UNFINISHED_WORK_SECONDS,
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads.",
            labels, registry=registry,
        )  # fmt: skip
        self._longest_running = Gauge(
            WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
            "How many seconds has the longest running processor for workqueue been running.",
            labels, registry=registry,
        )  # fmt: skip
        self._retries = Counter(
            WORKQUEUE_RETRIES_TOTAL, "Total number of retries handled by workqueue", labels,
            registry=registry,
        )  # fmt: skip
        self._depth_by_priority = Gauge(
            WORKQUEUE_DEPTH_BY_PRIORITY, "Current depth of workqueue by priority",
            [NAME_LABEL, PRIORITY_LABEL], registry=registry,
        )  # fmt: skip

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return self._depth.labels(name)

    def new_adds_metric(self, name: str) -> CounterMetric:
        return self._adds.labels(name)

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return self._latency.labels(name)

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return self._work_duration.labels(name)

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return self._unfinished_work.labels(name)

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return self._longest_running.labels(name)

    def new_retries_metric(self, name: str) -> CounterMetric:
        return self._retries.labels(name)

    def new_depth_by_priority_metric(self, name: str) -> PriorityDepthMetric:
        return _DepthByPriority(self._depth_by_priority, name)


class _DepthByPriority:
    """One queue's ``workqueue_depth_by_priority``: the child of each priority looked up once."""

    __slots__ = ("_children", "_family", "_name")

    def __init__(self, family: Gauge, name: str) -> None:
        self._family = family
        self._name = name
        self._children: dict[int, Gauge] = {}

    def _child(self, priority: int) -> Gauge:
        child = self._children.get(priority)
        if child is None:
            child = self._children[priority] = self._family.labels(self._name, str(priority))
        return child

    def inc(self, priority: int) -> None:
        self._child(priority).inc()

    def dec(self, priority: int) -> None:
        self._child(priority).dec()


if TYPE_CHECKING:

    def _implements_the_protocol(provider: PrometheusMetricsProvider) -> MetricsProvider:
        return provider

    def _reports_depth_by_priority(provider: PrometheusMetricsProvider) -> PriorityMetricsProvider:
        return provider
