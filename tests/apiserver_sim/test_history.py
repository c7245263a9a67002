"""Point 7: the history window is bounded by count and by age, like etcd compaction."""

from __future__ import annotations

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiClient, Configuration

from apiserver_sim import Simulator, SimulatorSettings


def _watch_from(v1: client.CoreV1Api, rv: str) -> list[str]:
    return [e["type"] for e in watch.Watch().stream(
        v1.list_namespaced_pod, "ns-00", resource_version=rv, timeout_seconds=1)]  # fmt: skip


def test_history_bounded_by_count() -> None:
    settings = SimulatorSettings(history_max_events=20, too_large_wait=0.2)
    with Simulator(settings) as sim, ApiClient(Configuration(host=sim.url)) as api:
        v1 = client.CoreV1Api(api)
        sim.populate("pods", 5, seed=1)
        rv = v1.list_namespaced_pod("ns-00").metadata.resource_version
        sim.churn(rate=0, seconds=5, seed=1, max_events=10)
        assert _watch_from(v1, rv)  # still in the window
        sim.churn(rate=0, seconds=5, seed=2, max_events=30)
        assert sim.state.history_size == 20
        with pytest.raises(client.ApiException) as exc:
            _watch_from(v1, rv)
        assert exc.value.status == 410
        with pytest.raises(client.ApiException) as exc:
            v1.list_namespaced_pod("ns-00", resource_version=rv, resource_version_match="Exact")
        assert exc.value.status == 410


def test_history_bounded_by_age() -> None:
    clock = [1000.0]  # the history's clock, moved by hand: no sleeping, no race with a timer
    settings = SimulatorSettings(history_max_age=30, too_large_wait=0.2)
    with (
        Simulator(settings, clock=lambda: clock[0]) as sim,
        ApiClient(Configuration(host=sim.url)) as api,
    ):
        v1 = client.CoreV1Api(api)
        sim.populate("pods", 3, seed=1)
        rv = v1.list_namespaced_pod("ns-00").metadata.resource_version
        clock[0] += 20
        sim.create("pods", {"metadata": {"name": "late", "namespace": "ns-00"}})
        clock[0] += 20  # the populate events are now 40 s old, "late" 20 s
        assert _watch_from(v1, rv) == ["ADDED"]
        clock[0] += 20
        with pytest.raises(client.ApiException) as exc:
            _watch_from(v1, rv)
        assert exc.value.status == 410
        # The newest state remains listable and watchable from its own RV.
        now = v1.list_namespaced_pod("ns-00").metadata.resource_version
        assert _watch_from(v1, now) == []
