"""Workqueue metrics in Prometheus, under client-go's names (reference 6.5).

:class:`common.workqueue.MetricsProvider` is deliberately backend-neutral; this is the adapter
the services use. The series are named and labelled exactly like client-go's
``workqueue/metrics.go`` (one ``name`` label: the queue's name, histograms in seconds with
client-go's buckets), so the dashboards and alerts people already run for Go controllers work
unchanged on informer-bus controllers.

All seven metric families are created on the given :class:`~prometheus_client.CollectorRegistry`
when the provider is built, never on the global default registry: several providers (one per
registry) can live in one process, as tests and embedded runs need. Build **one provider per
registry** and share it between queues: a second provider on the same registry would register
the same names twice, which prometheus-client refuses. Queues with the same name share series.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.workqueue import (
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    SettableGaugeMetric,
)

__all__ = ["DURATION_BUCKETS", "NAME_LABEL", "PrometheusMetricsProvider"]

NAME_LABEL = "name"
"""The one label of every workqueue series: the queue's name, as in client-go."""

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


if TYPE_CHECKING:

    def _implements_the_protocol(provider: PrometheusMetricsProvider) -> MetricsProvider:
        return provider
