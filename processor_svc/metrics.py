"""The processor's Prometheus metrics, on a registry of its own (never the global default, so
tests and several processors embedded in one process do not collide).

Every series carries ``resource``; per-shard series add ``shard`` and per-handler series add
``handler``. Per-shard gauges are removed when a shard worker ends (a shard this processor no
longer owns must not keep reporting a frozen lag); counters stay, as Prometheus expects.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["HANDLER_LATENCY_BUCKETS", "ProcessorMetrics"]

HANDLER_LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""From 50 µs (a trivial handler) to 10 s (one that calls out and times out)."""


class ProcessorMetrics:
    """What an operator needs to tell a healthy processor from a stuck or lossy one.

    The "no progress" signals (lag in entries and in seconds) matter as much as the error
    counters: a consumer that silently stops reading raises no error at all.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        shard = ["resource", "shard"]
        handler = ["resource", "handler"]
        # --- per shard ---------------------------------------------------------------------
        self.deltas_applied = Counter(
            "informer_bus_processor_deltas_applied",
            "stream deltas applied to a shard's store, by delta type",
            [*shard, "type"], registry=registry,
        )  # fmt: skip
        self.lag_entries = Gauge(
            "informer_bus_processor_lag_entries",
            "entries of the shard's stream not yet acknowledged (undelivered + in flight)",
            shard, registry=registry,
        )  # fmt: skip
        self.lag_seconds = Gauge(
            "informer_bus_processor_lag_seconds",
            "now minus the reflector's observation time of the last applied delta (0 when "
            "caught up)",
            shard, registry=registry,
        )  # fmt: skip
        self.store_size = Gauge(
            "informer_bus_processor_store_objects", "objects in the shard's store",
            shard, registry=registry,
        )  # fmt: skip
        self.synced = Gauge(
            "informer_bus_processor_shard_synced",
            "1 once the shard's initial list reached every handler",
            shard, registry=registry,
        )  # fmt: skip
        self.dead_letters = Counter(
            "informer_bus_processor_dead_letters",
            "entries parked on the dead-letter stream (undecodable, invalid or unappliable)",
            shard, registry=registry,
        )  # fmt: skip
        self.takeovers = Counter(
            "informer_bus_processor_takeovers",
            "shard takeovers (snapshot load + initial list), including recoveries",
            shard, registry=registry,
        )  # fmt: skip
        self.takeover_gaps = Counter(
            "informer_bus_processor_takeover_gaps",
            "takeovers that found unacknowledged entries already trimmed by retention (their "
            "deletions could not be delivered)",
            shard, registry=registry,
        )  # fmt: skip
        self.redis_errors = Counter(
            "informer_bus_processor_redis_errors",
            "failed Redis calls of a shard worker (retried with backoff)",
            shard, registry=registry,
        )  # fmt: skip
        self.ownership_lost = Counter(
            "informer_bus_processor_ownership_lost",
            "fenced scripts refused because the shard lease names someone else",
            shard, registry=registry,
        )  # fmt: skip
        # --- per handler -------------------------------------------------------------------
        self.handler_errors = Counter(
            "informer_bus_processor_handler_errors",
            "handler calls that raised (logged with the object key, never fatal)",
            handler, registry=registry,
        )  # fmt: skip
        self.handler_latency = Histogram(
            "informer_bus_processor_handler_latency_seconds",
            "time one handler call took",
            handler, registry=registry, buckets=HANDLER_LATENCY_BUCKETS,
        )  # fmt: skip
        self.handler_buffer = Gauge(
            "informer_bus_processor_handler_buffer",
            "notifications waiting in a handler's bounded buffer",
            handler, registry=registry,
        )  # fmt: skip
        self.resyncs = Counter(
            "informer_bus_processor_resyncs",
            "periodic resyncs a handler ran (on_update(obj, obj) for every cached object)",
            handler, registry=registry,
        )  # fmt: skip
        # --- per processor (set by the service) --------------------------------------------
        self.owned_shards = Gauge(
            "informer_bus_processor_owned_shards", "shards this processor owns",
            ["resource"], registry=registry,
        )  # fmt: skip
        self.rebalances = Counter(
            "informer_bus_processor_rebalances",
            "assignment changes that moved shards to or from this processor",
            ["resource"], registry=registry,
        )  # fmt: skip

    def forget_shard(self, resource: str, shard: int) -> None:
        """Drop the shard's gauges (its worker ended: the shard may be someone else's now)."""
        labels = (resource, str(shard))
        for gauge in (self.lag_entries, self.lag_seconds, self.store_size, self.synced):
            with contextlib.suppress(KeyError):  # never set
                gauge.remove(*labels)
