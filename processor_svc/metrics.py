"""The processor's Prometheus metrics, on a registry of its own (never the global default, so
tests and several processors embedded in one process do not collide).

Every series carries ``resource`` and ``group`` (the processor's consumer group, so that two
applications on one watch are told apart on one dashboard); per-shard series add ``shard`` and
per-handler series add ``handler``. Per-shard gauges are removed when a shard worker ends (a
shard this processor no longer owns must not keep reporting a frozen lag); counters stay, as
Prometheus expects."""

from __future__ import annotations

import contextlib
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from common.deltas import DeltaType
from common.redis_layout import PROCESSOR_GROUP

__all__ = ["HANDLER_LATENCY_BUCKETS", "ProcessorMetrics", "ShardMetrics"]

HANDLER_LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""From 50 µs (a trivial handler) to 10 s (one that calls out and times out)."""

_PREFIX: Final = "informer_bus_processor_"
_HELP: Final = {
    # per shard
    "deltas_applied": "stream deltas applied to a shard's store, by delta type",
    "lag_entries": "entries of the shard's stream not yet acknowledged (undelivered + in flight)",
    "lag_seconds": "now minus the reflector's observation time of the last applied delta (0 when "
    "caught up)",
    "store_objects": "objects in the shard's store",
    "shard_synced": "1 once the shard's initial list reached every handler",
    "dead_letters": "entries parked on the dead-letter stream (undecodable, invalid or "
    "unappliable)",
    "entries_outside_view": "stream entries outside the group's view (--namespace, "
    "--label-selector, --field-selector), acknowledged without parsing their object",
    "takeovers": "shard takeovers (snapshot load + initial list), including recoveries",
    "takeover_gaps": "takeovers that found unacknowledged entries already trimmed by retention "
    "(their deletions could not be delivered)",
    "redis_errors": "failed Redis calls of a shard worker (retried with backoff)",
    "ownership_lost": "fenced scripts refused because the shard lease names someone else",
    "replica_bad_entries": "entries or snapshot objects of a replicated resource's shard that "
    "could not be decoded or applied (logged and skipped: a replica parks nothing)",
    # per handler
    "handler_errors": "handler calls that raised (logged with the object key, never fatal)",
    "handler_latency_seconds": "time one handler call took",
    "handler_buffer": "notifications waiting in a handler's bounded buffer",
    "resyncs": "periodic resyncs a handler ran (on_update(obj, obj) for every cached object)",
    # per processor
    "move_waits_expired": "moves between two shards of this process whose incoming half gave "
    "up waiting for the outgoing half (10 s): the object was briefly in both",
    "owned_shards": "shards this processor owns",
    "shard_count": "shards of each co-sharded resource (--shard-count): the group's members' "
    "owned_shards should add up to it",
    "rebalances": "assignment changes that moved shards to or from this processor",
}
"""Each series' help text, by its name after ``informer_bus_processor_``."""
_SCOPE: Final = ("resource", "group")
"""The labels every series starts with."""


class ProcessorMetrics:
    """What an operator needs to tell a healthy processor from a stuck or lossy one.

    The "no progress" signals (lag in entries and in seconds) matter as much as the error
    counters: a consumer that silently stops reading raises no error at all.
    """

    def __init__(self, registry: CollectorRegistry, group: str = PROCESSOR_GROUP) -> None:
        self.registry = registry
        self.group: Final = group
        """The ``group`` label of every series."""

        def counter(name: str, *labels: str) -> Counter:
            return Counter(_PREFIX + name, _HELP[name], [*_SCOPE, *labels], registry=registry)

        def gauge(name: str, *labels: str) -> Gauge:
            return Gauge(_PREFIX + name, _HELP[name], [*_SCOPE, *labels], registry=registry)

        # --- per shard ---------------------------------------------------------------------
        self.deltas_applied = counter("deltas_applied", "shard", "type")
        self.lag_entries = gauge("lag_entries", "shard")
        self.lag_seconds = gauge("lag_seconds", "shard")
        self.store_size = gauge("store_objects", "shard")
        self.synced = gauge("shard_synced", "shard")
        self.dead_letters = counter("dead_letters", "shard")
        self.outside_view = counter("entries_outside_view", "shard")
        self.takeovers = counter("takeovers", "shard")
        self.takeover_gaps = counter("takeover_gaps", "shard")
        self.redis_errors = counter("redis_errors", "shard")
        self.ownership_lost = counter("ownership_lost", "shard")
        self.replica_bad_entries = counter("replica_bad_entries", "shard")
        # --- per handler -------------------------------------------------------------------
        self.handler_errors = counter("handler_errors", "handler")
        latency = "handler_latency_seconds"
        self.handler_latency = Histogram(
            _PREFIX + latency, _HELP[latency], [*_SCOPE, "handler"],
            registry=registry, buckets=HANDLER_LATENCY_BUCKETS,
        )  # fmt: skip
        self.handler_buffer = gauge("handler_buffer", "handler")
        self.resyncs = counter("resyncs", "handler")
        # --- per processor (set by the service) --------------------------------------------
        self.owned_shards = gauge("owned_shards")
        self.shard_count = gauge("shard_count")
        self.move_waits_expired = counter("move_waits_expired")
        self.rebalances = counter("rebalances")

    def add_co_sharded(self, resource: str, shard_count: int) -> None:
        """Report the resource's shard count, and ``owned_shards`` 0 until a shard is taken:
        "shards nobody owns" is then a comparison of two series that exist from the start."""
        self.shard_count.labels(resource, self.group).set(shard_count)
        self.owned_shards.labels(resource, self.group).set(0)

    def forget_shard(self, resource: str, shard: int) -> None:
        """Drop the shard's gauges (its worker ended: the shard may be someone else's now)."""
        labels = (resource, self.group, str(shard))
        for gauge in (self.lag_entries, self.lag_seconds, self.store_size, self.synced):
            with contextlib.suppress(KeyError):  # never set
                gauge.remove(*labels)


class ShardMetrics:
    """The label children of one shard, bound once (``labels()`` costs a dict lookup and a
    lock per call; the shard worker's hot path increments these directly)."""

    def __init__(self, metrics: ProcessorMetrics, resource: str, shard: int) -> None:
        labels = (resource, metrics.group, str(shard))
        self.applied = {
            delta_type: metrics.deltas_applied.labels(*labels, delta_type.value)
            for delta_type in DeltaType
        }
        self.lag_entries = metrics.lag_entries.labels(*labels)
        self.lag_seconds = metrics.lag_seconds.labels(*labels)
        self.store_size = metrics.store_size.labels(*labels)
        self.synced = metrics.synced.labels(*labels)
        self.dead_letters = metrics.dead_letters.labels(*labels)
        self.skipped = metrics.outside_view.labels(*labels)
        self.takeovers = metrics.takeovers.labels(*labels)
        self.takeover_gaps = metrics.takeover_gaps.labels(*labels)
        self.redis_errors = metrics.redis_errors.labels(*labels)
        self.ownership_lost = metrics.ownership_lost.labels(*labels)
