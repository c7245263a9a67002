"""The delta builder computes each delta's shard key once and carries it to the publisher; a
``label:NAME`` shard key that falls back to the object's own key is counted and logged at most
once a minute, never refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from common.deltas import Delta, DeltaType
from common.object_keys import DeletedFinalStateUnknown
from common.rate_limiters import FakeClock
from common.shard_routing import ShardKeyChoice
from common.throttled_log import ThrottledLog
from reflector_svc.delta_builder import DeltaBuilder, log
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.watch_events import WatchEvent


def configmap(name: str, labels: dict[str, str] | None = None, owner: str | None = None) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": "shop", "resourceVersion": "7"}
    if labels is not None:
        metadata["labels"] = labels
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner, "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def builder(shard_key: str, metrics: ReflectorMetrics, clock: FakeClock | None = None) -> Any:
    extra: dict[str, Any] = {}
    if clock is not None:
        extra["_fallback_log"] = ThrottledLog(log, clock, 60.0)
    return DeltaBuilder(
        "configmaps", "ConfigMap", None, 1_000_000, metrics.bad_input,
        shard_key=ShardKeyChoice.parse(shard_key), fallbacks=metrics.shard_key_fallbacks,
        **extra,
    )  # fmt: skip


def fallbacks(metrics: ReflectorMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "informer_bus_reflector_shard_key_fallbacks_total",
        {"resource": "configmaps", "reason": "label_missing"},
    )
    return value or 0.0


def test_each_delta_carries_its_shard_key_and_by_key_carries_nothing() -> None:
    metrics = ReflectorMetrics(CollectorRegistry())
    by_owner = builder("owner", metrics)
    event = WatchEvent("MODIFIED", configmap("cm", owner="web"))
    delta = by_owner.event_delta(event)
    assert delta is not None and delta.shard_key == "shop/web"
    orphan = by_owner.event_delta(WatchEvent("ADDED", configmap("lonely")))
    assert orphan is not None and orphan.shard_key == "shop/lonely"
    by_namespace = builder("namespace", metrics).event_delta(event)
    assert by_namespace is not None and by_namespace.shard_key == "shop"
    by_key = builder("key", metrics).event_delta(event)
    assert by_key is not None and by_key.shard_key is None
    # A relist's delta too, a tombstone from its last object.
    tombstone = Delta(
        DeltaType.DELETED, DeletedFinalStateUnknown("shop/cm", configmap("cm", owner="web"))
    )
    relisted = by_owner.pending(tombstone)
    assert relisted is not None and relisted.shard_key == "shop/web"
    given = by_owner.pending(Delta(DeltaType.UPDATED, configmap("cm", owner="web")), "precomputed")
    assert given is not None and given.shard_key == "precomputed"


def test_objects_without_the_label_are_counted_and_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = ReflectorMetrics(CollectorRegistry())
    clock = FakeClock()
    by_team = builder("label:team", metrics, clock)
    caplog.set_level(logging.WARNING, logger=log.name)
    labelled = by_team.event_delta(WatchEvent("ADDED", configmap("a", {"team": "blue"})))
    assert labelled is not None and labelled.shard_key == "blue"
    assert fallbacks(metrics) == 0
    for name in ("b", "c", "d"):
        delta = by_team.event_delta(WatchEvent("ADDED", configmap(name, {"app": "x"})))
        assert delta is not None and delta.shard_key == f"shop/{name}", "its own key"
    assert fallbacks(metrics) == 3
    lines = [r.getMessage() for r in caplog.records if "instead of label:team" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "label_missing" in lines[0] and "shop/b" in lines[0]
    clock.step(61)
    by_team.event_delta(WatchEvent("ADDED", configmap("e")))
    lines = [r.getMessage() for r in caplog.records if "instead of label:team" in r.getMessage()]
    assert len(lines) == 2 and "2 similar failures not logged" in lines[1]
    assert fallbacks(metrics) == 4
