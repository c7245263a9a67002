"""Point 2: resources and discovery, through the official, dynamic and apiextensions clients."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import urllib3
from kubernetes import client, dynamic, watch
from kubernetes.client import ApiClient

from apiserver_sim import Simulator
from tests.support.objects import pod


def test_discovery_documents(api: ApiClient) -> None:
    version = client.VersionApi(api).get_code()
    assert version.major == "1"
    core = client.CoreApi(api).get_api_versions()
    assert core.versions == ["v1"]
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"example.com", "apiextensions.k8s.io"} <= groups
    resources = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "configmaps", "secrets", "nodes", "namespaces", "events"} <= set(resources)
    assert resources["pods"].namespaced and not resources["nodes"].namespaced
    assert "watch" in resources["pods"].verbs


def test_core_resources_list_and_watch(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("configmaps", 3, seed=1)
    sim.populate("secrets", 2, seed=1)
    sim.populate("nodes", 4, seed=1)
    assert len(v1.list_config_map_for_all_namespaces().items) == 3
    assert len(v1.list_secret_for_all_namespaces().items) == 2
    assert {n.metadata.name for n in v1.list_node().items} == {f"node-{i:04d}" for i in range(4)}
    names = {n.metadata.name for n in v1.list_namespace().items}
    assert {"default", "kube-system", "ns-00"} <= names
    w = watch.Watch()
    events = list(w.stream(v1.list_node, timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"] * 4
    cm = v1.read_namespaced_config_map("config-000000", "ns-00")
    assert cm.data


def test_custom_resource_via_dynamic_client(sim: Simulator, api: ApiClient, tmp_path: Path) -> None:
    dyn = dynamic.DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    widgets = dyn.resources.get(api_version="example.com/v1", kind="Widget")
    created = widgets.create(
        body={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
              "spec": {"size": 3}},
        namespace="default",
    )  # fmt: skip
    assert created.metadata.uid
    listed = widgets.get(namespace="default")
    assert [w.metadata.name for w in listed.items] == ["w1"]
    assert listed.metadata.resourceVersion
    got = widgets.get(name="w1", namespace="default")
    assert got.spec.size == 3
    patched = widgets.patch(
        name="w1", namespace="default", body={"spec": {"size": 4}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    assert patched.spec.size == 4
    assert patched.metadata.generation == 2
    events = list(widgets.watch(namespace="default", timeout=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "w1")]

    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    names = [c.metadata.name for c in crds.get().items]
    assert names == ["widgets.example.com"]
    crd_events = list(crds.watch(timeout=1))
    assert crd_events[0]["object"].spec.names.kind == "Widget"


def test_core_events_are_served(sim: Simulator, v1: client.CoreV1Api) -> None:
    """Operators post core/v1 Events (kopf.info, controllers); they list and select like the
    apiserver's (fieldSelector on involvedObject.*, reason, type)."""
    target = v1.create_namespaced_pod("default", pod("p"))
    ref = client.V1ObjectReference(api_version="v1", kind="Pod", name="p", namespace="default",
                                   uid=target.metadata.uid)  # fmt: skip
    for reason in ("Started", "Killing"):
        v1.create_namespaced_event("default", client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="p."), involved_object=ref,
            reason=reason, type="Normal", message=f"pod {reason.lower()}",
        ))  # fmt: skip
    sim.populate("events", 3, seed=1)
    selected = v1.list_namespaced_event(
        "default", field_selector="involvedObject.name=p,reason=Killing"
    )
    assert [(e.reason, e.involved_object.uid) for e in selected.items] == [
        ("Killing", target.metadata.uid)
    ]
    assert len(v1.list_event_for_all_namespaces().items) == 5


def test_crd_via_apiextensions_client(api: ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    crds = ext.list_custom_resource_definition()
    assert crds.items[0].spec.group == "example.com"
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}},
    )  # fmt: skip
    found = custom.list_cluster_custom_object("example.com", "v1", "widgets")
    assert [w["metadata"]["name"] for w in found["items"]] == ["w2"]


def test_unknown_paths_are_404_status(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    resp = http.request("GET", f"{sim.url}/api/v1/nothings")
    assert resp.status == 404
    assert orjson.loads(resp.data)["kind"] == "Status"
    v1.create_namespaced_pod("default", pod("p"))
    with pytest.raises(client.ApiException) as exc:
        v1.read_namespaced_pod("missing", "default")
    assert exc.value.status == 404
    assert '"reason":"NotFound"' in exc.value.body
