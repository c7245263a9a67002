"""Point 3: LIST with limit/continue snapshots, resourceVersion rules and 410/504 errors."""

from __future__ import annotations

import orjson
import pytest
from kubernetes import client

from apiserver_sim import Simulator


def _status(exc: pytest.ExceptionInfo[client.ApiException]) -> dict[str, object]:
    body: dict[str, object] = orjson.loads(exc.value.body)
    return body


def test_pagination_is_a_consistent_snapshot(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 25, seed=1)
    first = v1.list_pod_for_all_namespaces(limit=10)
    snapshot_rv = first.metadata.resource_version
    assert first.metadata.remaining_item_count == 15
    keys = sorted(sim.ground_truth())
    # Change the world between pages: the rest of the list must not notice.
    doomed = keys[-1]
    sim.delete("pods", doomed)
    sim.update("pods", keys[15], {"metadata": {"labels": {"changed": "yes"}}})
    sim.populate("pods", 5, seed=2)
    items = list(first.items)
    token = first.metadata._continue
    pages = 1
    while token:
        page = v1.list_pod_for_all_namespaces(limit=10, _continue=token)
        assert page.metadata.resource_version == snapshot_rv
        items += page.items
        token = page.metadata._continue
        pages += 1
    assert pages == 3
    assert page.metadata.remaining_item_count is None
    listed = [f"{p.metadata.namespace}/{p.metadata.name}" for p in items]
    assert listed == keys
    assert doomed in listed
    assert all(not (p.metadata.labels or {}).get("changed") for p in items)
    assert len(v1.list_pod_for_all_namespaces().items) == 29


def test_namespaced_pagination(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 40, seed=1)
    seen = []
    token = None
    while True:
        page = v1.list_namespaced_pod("ns-03", limit=3, _continue=token)
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert len(seen) == 4 and all(p.metadata.namespace == "ns-03" for p in page.items)


def test_resource_version_semantics(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 5, seed=1)
    old_rv = v1.list_pod_for_all_namespaces().metadata.resource_version
    sim.populate("pods", 3, seed=2)
    now_rv = v1.list_pod_for_all_namespaces().metadata.resource_version
    assert int(now_rv) > int(old_rv)
    # unset and "0" serve the newest state here
    assert len(v1.list_pod_for_all_namespaces(resource_version="0").items) == 8
    # Exact: the state at old_rv
    exact = v1.list_pod_for_all_namespaces(resource_version=old_rv, resource_version_match="Exact")
    assert exact.metadata.resource_version == old_rv
    assert len(exact.items) == 5
    # legacy: an RV with a limit means Exact too
    legacy = v1.list_pod_for_all_namespaces(resource_version=old_rv, limit=100)
    assert len(legacy.items) == 5
    # NotOlderThan: at least as new
    newer = v1.list_pod_for_all_namespaces(
        resource_version=old_rv, resource_version_match="NotOlderThan"
    )
    assert int(newer.metadata.resource_version) >= int(old_rv)
    assert len(newer.items) == 8
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(resource_version_match="Exact")
    assert exc.value.status == 422


def test_compacted_rv_and_expired_continue_are_410(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 6, seed=1)
    first = v1.list_pod_for_all_namespaces(limit=2)
    old_rv = first.metadata.resource_version
    sim.populate("pods", 1, seed=2)
    sim.compact()
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(resource_version=old_rv, resource_version_match="Exact")
    assert exc.value.status == 410
    assert _status(exc)["reason"] == "Expired"
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    assert exc.value.status == 410
    status = _status(exc)
    assert "continue parameter is too old" in str(status["message"])
    inconsistent = status["metadata"]["continue"]  # type: ignore[index]
    rest = v1.list_pod_for_all_namespaces(limit=100, _continue=inconsistent)
    assert len(rest.items) == 5  # the remainder, at the newest state


def test_future_rv_is_too_large(sim: Simulator, v1: client.CoreV1Api) -> None:
    future = str(sim.resource_version + 100)
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(
            resource_version=future, resource_version_match="NotOlderThan"
        )
    assert exc.value.status == 504
    status = _status(exc)
    assert status["reason"] == "Timeout"
    assert "Too large resource version" in str(status["message"])
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"  # type: ignore[index]
