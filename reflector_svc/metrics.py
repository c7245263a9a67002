"""The reflector's Prometheus metrics, on a registry of its own (never the global default, so
tests and embedded runs do not collide). Every series carries the ``resource`` label."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ReflectorMetrics"]


class ReflectorMetrics:
    """The counters an operator needs to tell a healthy reflector from a struggling one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.lists = Counter(
            "informer_bus_reflector_lists", "LIST calls (initial lists and relists)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.relists = Counter(
            "informer_bus_reflector_relists", "relists after the first list (410s, errors)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.expired = Counter(
            "informer_bus_reflector_expired", "410 Expired answers (LIST or WATCH)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.watch_restarts = Counter(
            "informer_bus_reflector_watch_restarts", "watches (re)opened, by the reason",
            ["resource", "reason"], registry=registry,
        )  # fmt: skip
        self.deltas_published = Counter(
            "informer_bus_reflector_deltas_published", "deltas written to shard streams",
            ["resource", "type"], registry=registry,
        )  # fmt: skip
        self.deltas_skipped = Counter(
            "informer_bus_reflector_deltas_skipped",
            "deltas the shards already had (replays after a crash or failover)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.bad_input = Counter(
            "informer_bus_reflector_bad_input",
            "unusable objects (no name, failed transform, oversized, wrong kind, ...), skipped",
            ["resource", "reason"], registry=registry,
        )  # fmt: skip
        self.bad_watch_lines = Counter(
            "informer_bus_reflector_bad_watch_lines",
            "watch lines that are not a usable event, by reason; each ends the watch, which "
            "resumes from the last event published (a relist only if the position keeps failing)",
            ["resource", "reason"], registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "informer_bus_reflector_errors", "list/watch/publish failures, by kind",
            ["resource", "kind"], registry=registry,
        )  # fmt: skip
        self.publish_latency = Histogram(
            "informer_bus_reflector_publish_latency_seconds",
            "time to write one batch of deltas to Redis",
            ["resource"], registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )  # fmt: skip
        self.last_resource_version = Gauge(
            "informer_bus_reflector_last_resource_version",
            "resourceVersion of the last event or list published (as a number)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.trimmed = Counter(
            "informer_bus_reflector_trimmed_entries", "stream entries removed by retention",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.forced_trims = Counter(
            "informer_bus_reflector_forced_trims",
            "trims past entries a consumer group still needed (hard cap reached)",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.leader = Gauge(
            "informer_bus_reflector_leader", "1 while this replica leads the resource",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.synced = Gauge(
            "informer_bus_reflector_synced", "1 once the resource's shards are synced",
            ["resource"], registry=registry,
        )  # fmt: skip
