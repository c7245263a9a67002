"""Point 6: create, get, replace (409 on stale RV), merge/JSON patch, delete, metadata."""

from __future__ import annotations

import orjson
import pytest
from kubernetes import client

from apiserver_sim import Simulator
from tests.support.objects import pod, widget


def test_create_fills_realistic_metadata(v1: client.CoreV1Api) -> None:
    created = v1.create_namespaced_pod("default", pod("p", app="x"), field_manager="tester")
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and meta.resource_version
    assert meta.generation == 1
    assert meta.managed_fields[0].manager == "tester"
    assert meta.managed_fields[0].fields_v1["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}
    with pytest.raises(client.ApiException) as exc:
        v1.create_namespaced_pod("default", pod("p"))
    assert exc.value.status == 409
    assert '"reason":"AlreadyExists"' in exc.value.body
    generated = v1.create_namespaced_pod(
        "default", {"metadata": {"generateName": "gen-"}, "spec": {"containers": []}}
    )
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9
    with pytest.raises(client.ApiException) as exc:
        v1.create_namespaced_pod("default", {"metadata": {"name": "Bad_Name"}})
    assert exc.value.status == 422


def test_replace_conflicts_on_stale_rv(v1: client.CoreV1Api) -> None:
    first = v1.create_namespaced_pod("default", pod("p"))
    fresh = v1.read_namespaced_pod("p", "default")
    fresh.spec.containers[0].image = "nginx"
    replaced = v1.replace_namespaced_pod("p", "default", fresh)
    assert replaced.metadata.generation == 2
    assert replaced.metadata.uid == first.metadata.uid
    assert int(replaced.metadata.resource_version) > int(first.metadata.resource_version)
    first.metadata.labels = {"late": "yes"}
    with pytest.raises(client.ApiException) as exc:
        v1.replace_namespaced_pod("p", "default", first)
    assert exc.value.status == 409
    assert '"reason":"Conflict"' in exc.value.body


def test_patches(v1: client.CoreV1Api, api: client.ApiClient) -> None:
    v1.create_namespaced_pod("default", pod("p", a="1", b="2"))
    merged = v1.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"a": None, "c": "3"}}}
    )
    assert merged.metadata.labels == {"b": "2", "c": "3"}
    assert merged.metadata.generation == 1  # metadata-only change
    json_patched = v1.patch_namespaced_pod(
        "p", "default", [{"op": "replace", "path": "/spec/containers/0/image", "value": "x"}]
    )
    assert json_patched.spec.containers[0].image == "x"
    assert json_patched.metadata.generation == 2
    stale = [{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}]
    with pytest.raises(client.ApiException) as exc:
        v1.patch_namespaced_pod("p", "default", stale)
    assert exc.value.status == 409


def test_delete(sim: Simulator, v1: client.CoreV1Api) -> None:
    created = v1.create_namespaced_pod("default", pod("p"))
    with pytest.raises(client.ApiException) as exc:
        v1.delete_namespaced_pod(
            "p", "default", body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version="1")),
        )  # fmt: skip
    assert exc.value.status == 409
    v1.delete_namespaced_pod("p", "default")
    assert "default/p" not in sim.ground_truth()
    with pytest.raises(client.ApiException) as exc:
        v1.delete_namespaced_pod("p", "default")
    assert exc.value.status == 404
    assert created.metadata.name == "p"


def test_cluster_scoped_mutations(v1: client.CoreV1Api) -> None:
    ns = v1.create_namespace({"metadata": {"name": "team-a"}})
    assert ns.status.phase == "Active"
    assert ns.metadata.namespace is None
    v1.delete_namespace("team-a")
    assert "team-a" not in {n.metadata.name for n in v1.list_namespace().items}


def _not_found_namespace(exc: pytest.ExceptionInfo[client.ApiException]) -> dict[str, object]:
    assert exc.value.status == 404
    status: dict[str, object] = orjson.loads(exc.value.body)
    assert status["message"] == 'namespaces "gone" not found'
    assert status["details"] == {"name": "gone", "kind": "namespaces"}
    return status


def test_writes_into_a_missing_namespace_are_refused(
    sim: Simulator, v1: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    """Issue 34 point 5: NamespaceLifecycle, as on a real server; the simulator stored a
    Widget in a namespace that did not exist."""
    with pytest.raises(client.ApiException) as exc:
        v1.create_namespaced_pod("gone", pod("p", namespace="gone"))
    _not_found_namespace(exc)
    with pytest.raises(client.ApiException) as exc:
        custom.create_namespaced_custom_object(
            "example.com", "v1", "gone", "widgets", widget("w", namespace="gone"), dry_run="All"
        )
    _not_found_namespace(exc)
    assert sim.ground_truth("pods") == {} and sim.ground_truth("widgets") == {}

    # One left behind by its namespace (or written past admission, by the Python API): read
    # and deleted, never written.
    sim.create("widgets", widget("w", namespace="gone"))
    assert custom.get_namespaced_custom_object("example.com", "v1", "gone", "widgets", "w")
    for write in (
        lambda: custom.patch_namespaced_custom_object(
            "example.com", "v1", "gone", "widgets", "w", {"spec": {"size": 1}}),
        lambda: custom.patch_namespaced_custom_object_status(
            "example.com", "v1", "gone", "widgets", "w", {"status": {"ready": True}}),
        lambda: custom.replace_namespaced_custom_object(
            "example.com", "v1", "gone", "widgets", "w", sim.get("widgets", "gone/w")),
    ):  # fmt: skip
        with pytest.raises(client.ApiException) as exc:
            write()
        _not_found_namespace(exc)
    with pytest.raises(client.ApiException) as exc:  # a missing object is that object's 404
        custom.patch_namespaced_custom_object("example.com", "v1", "gone", "widgets", "x", {})
    assert exc.value.status == 404 and '"widgets.example.com \\"x\\" not found"' in exc.value.body
    custom.delete_namespaced_custom_object("example.com", "v1", "gone", "widgets", "w")

    v1.create_namespace({"metadata": {"name": "gone"}})
    assert v1.create_namespaced_pod("gone", pod("p", namespace="gone")).metadata.uid
