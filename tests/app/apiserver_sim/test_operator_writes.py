"""The writes of an operator that owns one ConfigMap per Widget, through the official client
over HTTP: what deletes answer, which patches a custom resource takes, and every 409 counted
(from Python and from ``/_sim/``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client

from informer_bus.apiserver_sim import Simulator
from tests.app.apiserver_sim.conftest import widget

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
