"""The workqueue's metrics: client-go's series and the protocols a backend implements (6.5).

Kept apart from the queues (:mod:`common.workqueue`, :mod:`common.priority_queue`) because it is
a contract of its own: a backend (:mod:`common.prometheus_workqueue`, or an OpenTelemetry one)
implements :class:`MetricsProvider` without reading the queues, and the queues call one object
per series without knowing the backend. The names are client-go's, so dashboards built for Go
controllers read the same series; each carries the queue's ``name`` as its label.
"""

from __future__ import annotations

from typing import Final, Generic, Protocol, TypeVar, runtime_checkable

from common.rate_limiters import Clock

__all__ = [
    "METRIC_NAMES",
    "UNFINISHED_WORK_UPDATE_PERIOD",
    "WORKQUEUE_ADDS_TOTAL",
    "WORKQUEUE_DEPTH",
    "WORKQUEUE_DEPTH_BY_PRIORITY",
    "WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS",
    "WORKQUEUE_QUEUE_DURATION_SECONDS",
    "WORKQUEUE_RETRIES_TOTAL",
    "WORKQUEUE_UNFINISHED_WORK_SECONDS",
    "WORKQUEUE_WORK_DURATION_SECONDS",
    "CounterMetric",
    "GaugeMetric",
    "HistogramMetric",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PriorityDepthMetric",
    "PriorityMetricsProvider",
    "QueueMetrics",
    "SettableGaugeMetric",
    "reports_metrics",
]

T = TypeVar("T")

WORKQUEUE_DEPTH = "workqueue_depth"
WORKQUEUE_ADDS_TOTAL = "workqueue_adds_total"
WORKQUEUE_QUEUE_DURATION_SECONDS = "workqueue_queue_duration_seconds"
WORKQUEUE_WORK_DURATION_SECONDS = "workqueue_work_duration_seconds"
WORKQUEUE_UNFINISHED_WORK_SECONDS = "workqueue_unfinished_work_seconds"
WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS = "workqueue_longest_running_processor_seconds"
WORKQUEUE_RETRIES_TOTAL = "workqueue_retries_total"

METRIC_NAMES: tuple[str, ...] = (
    WORKQUEUE_DEPTH,
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
)
"""client-go's series, which every queue can report, each labelled ``name`` with its name."""

WORKQUEUE_DEPTH_BY_PRIORITY = "workqueue_depth_by_priority"
"""A priority queue's waiting keys per priority (labels ``name`` and ``priority``), beside
``workqueue_depth``, which stays the total. controller-runtime puts a ``priority`` label on
``workqueue_depth`` itself; a series of its own keeps every existing query of
``workqueue_depth{name=...}`` (the dashboard, the alert rules) reading one series per queue."""

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go's 500 ms)."""


class CounterMetric(Protocol):
    """A value that only goes up (a Prometheus counter)."""

    def inc(self) -> None: ...


class GaugeMetric(Protocol):
    """A value that goes up and down by one (the depth gauge)."""

    def inc(self) -> None: ...

    def dec(self) -> None: ...


class SettableGaugeMetric(Protocol):
    """A value that is overwritten on each update (the unfinished-work gauges)."""

    def set(self, value: float) -> None: ...


class HistogramMetric(Protocol):
    """A distribution of observations, in seconds here."""

    def observe(self, value: float) -> None: ...


class MetricsProvider(Protocol):
    """Creates one queue's metric objects; the argument is the queue name (the ``name`` label).

    One method per series, as in client-go, so an adapter (Prometheus, OpenTelemetry) maps each
    to the metric named in the matching ``WORKQUEUE_*`` constant.
    """

    def new_depth_metric(self, name: str) -> GaugeMetric:
        """``workqueue_depth``: keys waiting to be handed out."""
        ...

    def new_adds_metric(self, name: str) -> CounterMetric:
        """``workqueue_adds_total``: adds that queued a key (stingy no-ops not counted)."""
        ...

    def new_latency_metric(self, name: str) -> HistogramMetric:
        """``workqueue_queue_duration_seconds``: from add to get."""
        ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        """``workqueue_work_duration_seconds``: from get to done."""
        ...

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        """``workqueue_unfinished_work_seconds``: summed age of all in-flight work."""
        ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        """``workqueue_longest_running_processor_seconds``: age of the oldest in-flight work."""
        ...

    def new_retries_metric(self, name: str) -> CounterMetric:
        """``workqueue_retries_total``: calls to ``add_after`` (and so ``add_rate_limited``)."""
        ...


class PriorityDepthMetric(Protocol):
    """Waiting keys per priority: one gauge per priority value, moved up and down by one."""

    def inc(self, priority: int) -> None: ...

    def dec(self, priority: int) -> None: ...


@runtime_checkable
class PriorityMetricsProvider(MetricsProvider, Protocol):
    """A :class:`MetricsProvider` that can also report depth by priority (controller-runtime's
    ``MetricsProviderWithPriority``). A provider without it still serves a priority queue: the
    total depth is reported, the split is not."""

    def new_depth_by_priority_metric(self, name: str) -> PriorityDepthMetric:
        """``workqueue_depth_by_priority``: keys waiting to be handed out, per priority."""
        ...


class _NoopMetric:
    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NOOP_METRIC: Final = _NoopMetric()


def _noop_metric(provider: object, name: str) -> _NoopMetric:
    return _NOOP_METRIC


class NoopMetricsProvider:
    """Reports nothing. Queues given this provider skip metric bookkeeping entirely."""

    # One metric that does nothing serves as every kind (it has inc, dec, set and observe).
    new_depth_metric = new_adds_metric = new_latency_metric = _noop_metric
    new_work_duration_metric = new_unfinished_work_seconds_metric = _noop_metric
    new_longest_running_processor_seconds_metric = new_retries_metric = _noop_metric


def reports_metrics(name: str, provider: MetricsProvider | None) -> bool:
    # client-go's rule: an unnamed queue has no label value to report under, so it reports nothing.
    return bool(name) and provider is not None and not isinstance(provider, NoopMetricsProvider)


class QueueMetrics(Generic[T]):
    """Per-queue metric bookkeeping; every method is called with the queue's lock held."""

    def __init__(self, provider: MetricsProvider, name: str, clock: Clock) -> None:
        self._clock = clock
        self._depth = provider.new_depth_metric(name)
        self._adds = provider.new_adds_metric(name)
        self._latency = provider.new_latency_metric(name)
        self._work_duration = provider.new_work_duration_metric(name)
        self._unfinished_work = provider.new_unfinished_work_seconds_metric(name)
        self._longest_running = provider.new_longest_running_processor_seconds_metric(name)
        # When each waiting key was first added, and when each in-flight key was handed out.
        self._added_at: dict[T, float] = {}
        self._started_at: dict[T, float] = {}

    def added(self, item: T) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(item, self._clock.now())

    def handed_out(self, item: T) -> None:
        now = self._clock.now()
        self._depth.dec()
        self._started_at[item] = now
        added_at = self._added_at.pop(item, None)
        if added_at is not None:
            self._latency.observe(now - added_at)

    def done(self, item: T) -> None:
        started_at = self._started_at.pop(item, None)
        if started_at is not None:
            self._work_duration.observe(self._clock.now() - started_at)

    def update_unfinished_work(self) -> None:
        now = self._clock.now()
        ages = [now - started_at for started_at in self._started_at.values()]
        self._unfinished_work.set(sum(ages))
        self._longest_running.set(max(ages, default=0.0))
