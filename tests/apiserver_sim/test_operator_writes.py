"""The writes of an operator that owns one ConfigMap per Widget, through the official client
over HTTP: ownerReferences and identity kept, optimistic concurrency on replace, delete
preconditions and answers, and every 409 counted (from Python and from ``/_sim/``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, watch

from apiserver_sim import CONFIGMAPS, Simulator
from tests.support.objects import widget

W = ("example.com", "v1", "default", "widgets")
"""group, version, namespace, plural of the widgets in ``default``."""


def _owned_config_map(owner: dict[str, Any], **data: str) -> client.V1ConfigMap:
    meta = owner["metadata"]
    ref = client.V1OwnerReference(
        api_version="example.com/v1", kind="Widget", name=meta["name"], uid=meta["uid"],
        controller=True, block_owner_deletion=True,
    )  # fmt: skip
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=f"{meta['name']}-config", owner_references=[ref]),
        data=data,
    )


def _conflicts_over_http(sim: Simulator, http: urllib3.PoolManager) -> Any:
    resp = http.request("GET", f"{sim.url}/_sim/conflicts")
    assert resp.status == 200
    return orjson.loads(resp.data)


def test_owned_config_map_lifecycle(
    sim: Simulator, v1: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    owner = custom.create_namespaced_custom_object(*W, widget("w", size=1))
    created = v1.create_namespaced_config_map("default", _owned_config_map(owner, size="1"))
    (ref,) = created.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid) == ("Widget", "w", owner["metadata"]["uid"])
    assert ref.controller and ref.block_owner_deletion
    assert created.metadata.generation == 1
    # Replace with the cached resourceVersion (the operator's update): data changes, the
    # ownerReference, uid and creationTimestamp stay; generation follows the data.
    desired = _owned_config_map(owner, size="2")
    desired.metadata.resource_version = created.metadata.resource_version
    replaced = v1.replace_namespaced_config_map("w-config", "default", desired)
    assert replaced.data == {"size": "2"}
    assert replaced.metadata.owner_references == created.metadata.owner_references
    assert replaced.metadata.uid == created.metadata.uid
    assert replaced.metadata.creation_timestamp == created.metadata.creation_timestamp
    assert replaced.metadata.generation == 2
    # A merge patch of labels leaves ownerReferences and the generation alone.
    patched = v1.patch_namespaced_config_map(
        "w-config", "default", {"metadata": {"labels": {"app": "w"}}}
    )
    assert patched.metadata.owner_references == created.metadata.owner_references
    assert patched.metadata.generation == 2
    # Replacing with what is stored already is no write at all (no event wakes the operator).
    unchanged = _owned_config_map(owner, size="2")
    unchanged.metadata.labels = {"app": "w"}
    unchanged.metadata.resource_version = patched.metadata.resource_version
    rv_before = sim.resource_version
    again = v1.replace_namespaced_config_map("w-config", "default", unchanged)
    assert again.metadata.resource_version == patched.metadata.resource_version
    assert sim.resource_version == rv_before
    # Delete with the uid precondition: the answer is a Success Status naming what went.
    status = v1.delete_namespaced_config_map(
        "w-config", "default",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=created.metadata.uid)),
    )  # fmt: skip
    assert (status["kind"], status["status"]) == ("Status", "Success")
    assert status["details"] == {"name": "w-config", "kind": "configmaps",
                                 "uid": created.metadata.uid}  # fmt: skip
    assert "default/w-config" not in sim.ground_truth(CONFIGMAPS)
    assert sim.conflicts() == {}


def test_widget_generation_and_delete(sim: Simulator, custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(*W, widget("w", size=1))
    labelled = custom.patch_namespaced_custom_object(*W, "w", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    resized = custom.patch_namespaced_custom_object(*W, "w", {"spec": {"size": 2}})
    assert resized["metadata"]["generation"] == 2
    assert resized["metadata"]["uid"] == created["metadata"]["uid"]
    assert resized["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    # Custom resources take JSON and merge patches, not strategic merge (no Go struct).
    with pytest.raises(client.ApiException) as exc:
        custom.patch_namespaced_custom_object(
            *W, "w", {"spec": {"size": 3}}, _content_type="application/strategic-merge-patch+json"
        )
    assert exc.value.status == 415
    gone = custom.delete_namespaced_custom_object(*W, "w")
    assert gone["status"] == "Success"
    assert gone["details"] == {"name": "w", "group": "example.com", "kind": "widgets",
                               "uid": created["metadata"]["uid"]}  # fmt: skip
    assert sim.ground_truth("widgets") == {}


def test_every_409_is_counted(
    sim: Simulator,
    v1: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    http: urllib3.PoolManager,
) -> None:
    owner = custom.create_namespaced_custom_object(*W, widget("w", size=1))
    created = v1.create_namespaced_config_map("default", _owned_config_map(owner, size="1"))
    v1.patch_namespaced_config_map("w-config", "default", {"data": {"size": "2"}})
    stale = _owned_config_map(owner, size="3")
    stale.metadata.resource_version = created.metadata.resource_version
    with pytest.raises(client.ApiException) as exc:
        v1.replace_namespaced_config_map("w-config", "default", stale)
    assert exc.value.status == 409 and '"reason":"Conflict"' in exc.value.body
    with pytest.raises(client.ApiException) as exc:
        v1.create_namespaced_config_map("default", _owned_config_map(owner, size="1"))
    assert exc.value.status == 409 and '"reason":"AlreadyExists"' in exc.value.body
    stale_rv = created.metadata.resource_version
    for pre in (client.V1Preconditions(uid="not-its-uid"),
                client.V1Preconditions(resource_version=stale_rv)):  # fmt: skip
        with pytest.raises(client.ApiException) as exc:
            v1.delete_namespaced_config_map(
                "w-config", "default", body=client.V1DeleteOptions(preconditions=pre)
            )
        assert exc.value.status == 409
    with pytest.raises(client.ApiException) as exc:
        custom.create_namespaced_custom_object(*W, widget("w", size=1))
    assert exc.value.status == 409
    expected = {
        "configmaps": {
            "create": {"AlreadyExists": 1},
            "delete": {"Conflict": 2},
            "update": {"Conflict": 1},
        },
        "widgets.example.com": {"create": {"AlreadyExists": 1}},
    }
    assert sim.conflicts() == expected
    # The same counts over HTTP, for a test whose simulator runs in another process.
    assert _conflicts_over_http(sim, http) == {"conflicts": expected, "total": 5}
    stats = orjson.loads(http.request("GET", f"{sim.url}/_sim/stats").data)
    assert stats["conflicts"] == 5
    reset = http.request("POST", f"{sim.url}/_sim/reset-conflicts")
    assert orjson.loads(reset.data) == {"conflicts": expected, "total": 5}
    assert sim.conflicts() == {}
    assert _conflicts_over_http(sim, http) == {"conflicts": {}, "total": 0}
    # Refusals that are not 409s are not conflicts.
    with pytest.raises(client.ApiException) as exc:
        v1.read_namespaced_config_map("missing", "default")
    assert exc.value.status == 404
    assert sim.conflicts() == {}


def test_config_maps_and_widgets_select_and_watch_across_namespaces(
    sim: Simulator, v1: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    """What the operator's informers see: its ConfigMaps by label in every namespace, and
    neither its no-op replaces nor anything but status changes from its status writes."""
    rv = v1.list_config_map_for_all_namespaces().metadata.resource_version
    for namespace in ("default", "kube-system"):
        owner = custom.create_namespaced_custom_object(
            "example.com", "v1", namespace, "widgets", widget("w", namespace, size=1)
        )
        cm = _owned_config_map(owner, size="1")
        cm.metadata.labels = {"app.kubernetes.io/managed-by": "widget-operator"}
        stored = v1.create_namespaced_config_map(namespace, cm)
        v1.replace_namespaced_config_map("w-config", namespace, stored)  # the same again
        custom.patch_namespaced_custom_object_status(
            "example.com", "v1", namespace, "widgets", "w", {"status": {"configMap": "w-config"}}
        )
    v1.create_namespaced_config_map("default", {"metadata": {"name": "other"}, "data": {}})
    managed = v1.list_config_map_for_all_namespaces(
        label_selector="app.kubernetes.io/managed-by=widget-operator"
    )
    assert sorted((c.metadata.namespace, c.metadata.name) for c in managed.items) == [
        ("default", "w-config"), ("kube-system", "w-config")
    ]  # fmt: skip
    by_name = v1.list_config_map_for_all_namespaces(field_selector="metadata.name=other")
    assert [c.metadata.name for c in by_name.items] == ["other"]
    events = list(watch.Watch().stream(
        v1.list_config_map_for_all_namespaces, resource_version=rv, timeout_seconds=1,
        label_selector="app.kubernetes.io/managed-by=widget-operator",
    ))  # fmt: skip
    assert [(e["type"], e["object"].metadata.namespace) for e in events] == [
        ("ADDED", "default"), ("ADDED", "kube-system")
    ]  # fmt: skip
    widget_events = list(watch.Watch().stream(
        custom.list_cluster_custom_object, "example.com", "v1", "widgets",
        resource_version=rv, timeout_seconds=1,
    ))  # fmt: skip
    seen = [(e["type"], e["object"]["metadata"]["namespace"], e["object"]["metadata"]["generation"],
             e["object"].get("status")) for e in widget_events]  # fmt: skip
    status = {"configMap": "w-config"}
    assert seen == [
        ("ADDED", "default", 1, None), ("MODIFIED", "default", 1, status),
        ("ADDED", "kube-system", 1, None), ("MODIFIED", "kube-system", 1, status),
    ]  # fmt: skip
