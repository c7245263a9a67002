"""The status subresource, as an operator uses it: the main resource's writes keep the stored
status, ``/status`` writes change nothing but status and never bump generation, and discovery
lists ``PLURAL/status`` for the types that have one. Through the official client over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, dynamic
from kubernetes.client import ApiClient

from apiserver_sim import PODS, Simulator
from tests.support.objects import pod, widget

W = ("example.com", "v1", "default", "widgets")
"""group, version, namespace, plural of the widgets in ``default``."""


def _status_entries(doc: Any) -> dict[str, Any]:
    return {r.name: r for r in doc.resources if "/" in r.name}


def test_discovery_lists_status_subresources(api: ApiClient, tmp_path: Path) -> None:
    core = _status_entries(client.CoreV1Api(api).get_api_resources())
    assert set(core) == {"pods/status", "namespaces/status", "nodes/status"}  # no configmaps/...
    assert core["pods/status"].kind == "Pod" and core["pods/status"].namespaced
    assert sorted(core["pods/status"].verbs) == ["get", "patch", "update"]
    assert core["pods/status"].singular_name == ""
    custom = _status_entries(client.CustomObjectsApi(api).get_api_resources("example.com", "v1"))
    assert list(custom) == ["widgets/status"]
    # The dynamic client (like kubectl) attaches it to its resource.
    dyn = dynamic.DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    widgets = dyn.resources.get(api_version="example.com/v1", kind="Widget")
    assert "status" in widgets.subresources
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("widgets.example.com")
    assert crd.spec.versions[0].subresources.status == {}


def test_status_patch_changes_only_status_and_not_generation(
    custom: client.CustomObjectsApi,
) -> None:
    created = custom.create_namespaced_custom_object(*W, widget("w", size=1))
    patched = custom.patch_namespaced_custom_object_status(
        *W, "w", {"status": {"ready": True, "observedGeneration": 1},
                  "spec": {"size": 9}, "metadata": {"labels": {"sneaky": "yes"}}},
    )  # fmt: skip
    assert patched["status"] == {"ready": True, "observedGeneration": 1}
    assert patched["spec"] == {"size": 1}  # a status write cannot touch the spec...
    assert "labels" not in patched["metadata"]  # ...nor metadata
    assert patched["metadata"]["generation"] == 1
    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    entry = patched["metadata"]["managedFields"][-1]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {".": {}, "f:ready": {}, "f:observedGeneration": {}}}
    assert custom.get_namespaced_custom_object(*W, "w") == patched


def test_spec_writes_bump_generation_and_keep_status(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(*W, widget("w", size=1))
    custom.patch_namespaced_custom_object_status(*W, "w", {"status": {"phase": "Ready"}})
    patched = custom.patch_namespaced_custom_object(
        *W, "w", {"spec": {"size": 2}, "status": {"phase": "Overwritten"}}
    )
    assert patched["spec"] == {"size": 2}
    assert patched["metadata"]["generation"] == 2
    assert patched["status"] == {"phase": "Ready"}
    # PUT of the main resource: a stale or made-up status in the body is ignored too.
    body = {**patched, "spec": {"size": 3}, "status": {"phase": "Stale"}}
    replaced = custom.replace_namespaced_custom_object(*W, "w", body)
    assert replaced["spec"] == {"size": 3}
    assert replaced["status"] == {"phase": "Ready"}
    assert replaced["metadata"]["generation"] == 3
    # A PUT whose only change is to the status changes nothing at all: no new revision.
    same = custom.replace_namespaced_custom_object(*W, "w", {**replaced, "status": {"x": 1}})
    assert same == replaced
    # Removing status through the main resource is ignored as well.
    body = {k: v for k, v in replaced.items() if k != "status"}
    assert custom.replace_namespaced_custom_object(*W, "w", body)["status"] == {"phase": "Ready"}


def test_status_writes_without_rv_never_conflict_and_stale_ones_do(
    sim: Simulator, custom: client.CustomObjectsApi
) -> None:
    created = custom.create_namespaced_custom_object(*W, widget("w", size=1))
    custom.patch_namespaced_custom_object(*W, "w", {"spec": {"size": 2}})  # someone else wrote
    # The operator's write: a merge patch of status, no resourceVersion: it always applies.
    patched = custom.patch_namespaced_custom_object_status(*W, "w", {"status": {"n": 1}})
    assert patched["status"] == {"n": 1}
    # A PUT to /status without a resourceVersion is unconditional as well.
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"n": 2}}  # fmt: skip
    assert custom.replace_namespaced_custom_object_status(*W, "w", body)["status"] == {"n": 2}
    assert sim.conflicts() == {}
    stale = {**created, "status": {"n": 3}}  # carries the creation's resourceVersion
    with pytest.raises(client.ApiException) as exc:
        custom.replace_namespaced_custom_object_status(*W, "w", stale)
    assert exc.value.status == 409 and '"reason":"Conflict"' in exc.value.body
    stale_patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                   "status": {"n": 4}}  # fmt: skip
    with pytest.raises(client.ApiException) as exc:
        custom.patch_namespaced_custom_object_status(*W, "w", stale_patch)
    assert exc.value.status == 409
    assert custom.get_namespaced_custom_object(*W, "w")["status"] == {"n": 2}
    assert sim.conflicts() == {
        "widgets.example.com/status": {"patch": {"Conflict": 1}, "update": {"Conflict": 1}}
    }


def test_pod_status_subresource(sim: Simulator, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod("p"))
    cached = v1.read_namespaced_pod("p", "default")
    running = v1.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"
    assert running.metadata.generation == 1
    # A controller PUTs the pod it cached (its status is stale, no resourceVersion): the
    # kubelet's status survives, the label change lands.
    cached.metadata.resource_version = None
    cached.metadata.labels = {"owner": "controller"}
    cached.status = client.V1PodStatus(phase="Pending")
    replaced = v1.replace_namespaced_pod("p", "default", cached)
    assert replaced.metadata.labels == {"owner": "controller"}
    assert replaced.status.phase == "Running"
    # What the kubelet writes inside the simulator (churn, update_parts) is not an HTTP write:
    # it still changes status, and the next HTTP spec write keeps that.
    sim.state.update_parts(PODS, "default/p", lambda meta: None,
                           lambda status: status.update(phase="Failed"))  # fmt: skip
    patched = v1.patch_namespaced_pod(
        "p", "default", {"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Unknown"}}
    )
    assert patched.status.phase == "Failed"
    assert patched.metadata.generation == 2
    # replace_namespaced_pod_status: only the status of the body is stored.
    patched.status.phase = "Succeeded"
    patched.spec.active_deadline_seconds = 99
    final = v1.replace_namespaced_pod_status("p", "default", patched)
    assert final.status.phase == "Succeeded"
    assert final.spec.active_deadline_seconds == 5
    assert final.metadata.generation == 2


def test_status_paths_only_where_a_type_has_one(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    v1.create_namespaced_pod("default", pod("p"))
    base = f"{sim.url}/api/v1/namespaces/default"
    headers = {"Content-Type": "application/merge-patch+json"}
    body = orjson.dumps({"status": {"x": 1}})
    for method in ("GET", "PATCH"):
        resp = http.request(method, f"{base}/configmaps/c/status", body=body, headers=headers)
        assert resp.status == 404, (method, resp.data)
    assert http.request("GET", f"{base}/pods/p/status").status == 200
    resp = http.request("DELETE", f"{base}/pods/p/status")
    assert resp.status == 405
    assert "default/p" in sim.ground_truth(PODS)  # a DELETE of /status deletes nothing
