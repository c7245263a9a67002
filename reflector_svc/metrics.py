"""The reflector's Prometheus metrics, on a registry of its own (never the global default, so
tests and embedded runs do not collide). Every series carries the ``resource`` label."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ReflectorMetrics"]


class ReflectorMetrics:
    """The counters an operator needs to tell a healthy reflector from a struggling one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        metrics = _PerResource(registry)
        counter, gauge, histogram = metrics.counter, metrics.gauge, metrics.histogram
        self.lists = counter(
            "informer_bus_reflector_lists", "LIST calls (initial lists and relists)"
        )
        self.relists = counter(
            "informer_bus_reflector_relists", "relists after the first list (410s, errors)"
        )
        self.expired = counter(
            "informer_bus_reflector_expired", "410 Expired answers (LIST or WATCH)"
        )
        self.watch_restarts = counter(
            "informer_bus_reflector_watch_restarts", "watches (re)opened, by the reason", "reason"
        )
        self.deltas_published = counter(
            "informer_bus_reflector_deltas_published", "deltas written to shard streams", "type"
        )
        self.deltas_skipped = counter(
            "informer_bus_reflector_deltas_skipped",
            "deltas the shards already had (replays after a crash or failover)",
        )
        self.bad_input = counter(
            "informer_bus_reflector_bad_input",
            "unusable objects (no name, failed transform, oversized, wrong kind, ...), skipped",
            "reason",
        )
        self.bad_watch_lines = counter(
            "informer_bus_reflector_bad_watch_lines",
            "watch lines that are not a usable event, by reason; each ends the watch, which "
            "resumes from the last event published (a relist only if the position keeps failing)",
            "reason",
        )
        self.shard_key_fallbacks = counter(
            "informer_bus_reflector_shard_key_fallbacks",
            "objects sharded by their own key because they lack what the resource's shard key "
            "names (label_missing: no such label), by reason",
            "reason",
        )
        self.moves = counter(
            "informer_bus_reflector_moves",
            "objects moved to another shard (a new owner, a relabel, a new shard key): "
            "incoming halves written",
        )
        self.errors = counter(
            "informer_bus_reflector_errors", "list/watch/publish failures, by kind", "kind"
        )
        self.publish_wait_shortfalls = counter(
            "informer_bus_reflector_publish_wait_shortfalls",
            "publish round trips fewer replicas confirmed than --redis-wait-replicas asks "
            "(not counted as published; retried from Redis's checkpoints)",
        )
        self.publish_latency = histogram(
            "informer_bus_reflector_publish_latency_seconds",
            "time to write one batch of deltas to Redis",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.last_resource_version = gauge(
            "informer_bus_reflector_last_resource_version",
            "resourceVersion of the last event or list published (as a number)",
        )
        self.trimmed = counter(
            "informer_bus_reflector_trimmed_entries", "stream entries removed by retention"
        )
        self.forced_trims = counter(
            "informer_bus_reflector_forced_trims",
            "trims past entries a consumer group still needed (hard cap reached), by the "
            "group that lost them",
            "group",
        )
        self.group_lag = gauge(
            "informer_bus_reflector_group_lag_entries",
            "entries of the resource's shard streams a consumer group has not acknowledged "
            "(undelivered + pending), summed over the shards; set by the leader every retention "
            "pass, so it is there when the group's own processors are stopped (autoscaling)",
            "group",
        )
        self.leader = gauge(
            "informer_bus_reflector_leader", "1 while this replica leads the resource"
        )
        self.synced = gauge(
            "informer_bus_reflector_synced", "1 once the resource's shards are synced"
        )

    def add_resource(self, resource: str) -> None:
        """Create the resource's unlabelled-by-anything-else series at 0 before anything
        happens: a standby then reports ``leader 0`` (so "no replica leads" is visible instead
        of an absent series), and a counter's first increment is a rise ``rate()`` and
        ``increase()`` see (a series born at 1 looks unchanged to Prometheus)."""
        for metric in (self.leader, self.synced):
            metric.labels(resource=resource).set(0)
        for counter in (
            self.lists, self.relists, self.expired, self.deltas_skipped, self.moves,
            self.trimmed,
        ):  # fmt: skip
            counter.labels(resource=resource)


class _PerResource:
    """Builds metrics on one registry, each labelled ``resource`` first (then ``labels``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def counter(self, name: str, documentation: str, *labels: str) -> Counter:
        return Counter(name, documentation, ["resource", *labels], registry=self._registry)

    def gauge(self, name: str, documentation: str, *labels: str) -> Gauge:
        return Gauge(name, documentation, ["resource", *labels], registry=self._registry)

    def histogram(
        self, name: str, documentation: str, *labels: str, buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(
            name, documentation, ["resource", *labels], registry=self._registry, buckets=buckets
        )
