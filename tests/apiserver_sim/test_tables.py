"""What ``kubectl`` reads from the simulator, without kubectl: Tables over HTTP (with each
``includeObject``), the age format, strategic merge patches, OpenAPI v3 and dry runs."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import urllib3

from apiserver_sim import Simulator
from apiserver_sim.objects import apply_strategic_merge_patch
from apiserver_sim.tables import human_duration, wants_table
from tests.support.objects import pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _get(http: urllib3.PoolManager, url: str, accept: str = TABLE) -> Any:
    resp = http.request("GET", url, headers={"Accept": accept})
    assert resp.status == 200, resp.data
    return orjson.loads(resp.data)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"),
     (3 * 3600, "3h"), (3 * 3600 + 120, "3h2m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"),
     (9 * 86400, "9d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y")],
)  # fmt: skip
def test_ages_read_like_kubectl(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_accept_headers() -> None:
    assert wants_table(TABLE) == "v1"
    assert wants_table("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == "v1beta1"
    assert wants_table("application/json") is None
    assert wants_table("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io") is None


def test_pod_table_rows_and_include_object(sim: Simulator, http: urllib3.PoolManager) -> None:
    sim.populate("pods", 6, seed=2)
    doc = _get(http, f"{sim.url}/api/v1/pods?limit=4")
    assert (doc["kind"], doc["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    names = [c["name"] for c in doc["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert [c["priority"] for c in doc["columnDefinitions"]][5:7] == [1, 1]  # IP, Node: wide
    assert len(doc["rows"]) == 4 and doc["metadata"]["continue"]
    first = doc["rows"][0]
    assert first["object"]["kind"] == "PartialObjectMetadata"
    stored = sim.get("pods", f"{first['object']['metadata']['namespace']}/{first['cells'][0]}")
    assert first["cells"][5:7] == [stored["status"]["podIP"], stored["spec"]["nodeName"]]
    whole = _get(http, f"{sim.url}/api/v1/pods?includeObject=Object")
    assert whole["rows"][0]["object"]["kind"] == "Pod" and len(whole["rows"]) == 6
    bare = _get(http, f"{sim.url}/api/v1/pods?includeObject=None")
    assert "object" not in bare["rows"][0]
    resp = http.request("GET", f"{sim.url}/api/v1/pods?includeObject=All",
                        headers={"Accept": TABLE})  # fmt: skip
    assert resp.status == 400
    # Without the Table media type: the plain list, as before.
    assert _get(http, f"{sim.url}/api/v1/pods", "application/json")["kind"] == "PodList"


def test_single_object_and_generic_tables(sim: Simulator, http: urllib3.PoolManager) -> None:
    sim.create("pods", pod("p1"))
    one = _get(http, f"{sim.url}/api/v1/namespaces/default/pods/p1")
    assert [r["cells"][:4] for r in one["rows"]] == [["p1", "0/1", "Pending", "0"]]
    assert one["rows"][0]["cells"][4].endswith("s")  # seconds old
    sim.create("configmaps", {"metadata": {"name": "c", "namespace": "default"},
                              "data": {"a": "1", "b": "2"}})  # fmt: skip
    cms = _get(http, f"{sim.url}/api/v1/namespaces/default/configmaps")
    assert [c["name"] for c in cms["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert cms["rows"][0]["cells"][:2] == ["c", 2]
    crds = _get(http, f"{sim.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert [c["name"] for c in crds["columnDefinitions"]] == ["Name", "Age"]
    assert crds["rows"][0]["cells"] == ["widgets.example.com", "90d"]  # the cluster's first day


def test_strategic_merge_patch_directives() -> None:
    old = {
        "spec": {
            "containers": [{"name": "a", "image": "x:1", "env": [{"name": "K", "value": "1"}]},
                           {"name": "b", "image": "y:1"}],
            "tolerations": [{"key": "t"}],
        },
        "metadata": {"finalizers": ["f1"], "labels": {"l": "1", "m": "2"}},
    }  # fmt: skip
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}, {"name": "c"}],
            "containers": [
                {"name": "a", "image": "x:2", "env": [{"name": "K", "$patch": "delete"}]},
                {"name": "c", "image": "z:1"},
            ],
            "tolerations": [{"key": "u"}],
        },
        "metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"],
                     "labels": {"m": None}},
    }  # fmt: skip
    new = apply_strategic_merge_patch(old, patch)
    assert new["spec"]["containers"] == [
        {"name": "b", "image": "y:1"},
        {"name": "a", "image": "x:2", "env": []},
        {"name": "c", "image": "z:1"},
    ]
    assert new["spec"]["tolerations"] == [{"key": "u"}]  # no merge key: replaced
    assert new["metadata"] == {"finalizers": ["f2"], "labels": {"l": "1"}}
    replaced = apply_strategic_merge_patch(old, {"spec": {"$patch": "replace", "x": 1}})
    assert replaced["spec"] == {"x": 1}
    retained = apply_strategic_merge_patch(
        {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
        {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}},
    )
    assert retained == {"strategy": {"type": "Recreate"}}


def test_openapi_v3_names_field_validation(sim: Simulator, http: urllib3.PoolManager) -> None:
    root = _get(http, f"{sim.url}/openapi/v3", "application/json")
    assert {"api/v1", "apis/example.com/v1", "apis/apiextensions.k8s.io/v1"} <= set(root["paths"])
    core = _get(http, sim.url + root["paths"]["api/v1"]["serverRelativeURL"], "application/json")
    patch = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1",
                                                        "kind": "Pod"}  # fmt: skip
    assert "fieldValidation" in {p["name"] for p in patch["parameters"] if p["in"] == "query"}
    assert "io.k8s.api.core.v1.Pod" in core["components"]["schemas"]
    assert http.request("GET", f"{sim.url}/openapi/v3/apis/nope/v1").status == 404


def test_dry_run_stores_nothing(sim: Simulator, http: urllib3.PoolManager) -> None:
    url = f"{sim.url}/api/v1/namespaces/default/pods"
    rv = sim.resource_version
    resp = http.request("POST", f"{url}?dryRun=All", body=orjson.dumps(pod("p")))
    assert resp.status == 201 and orjson.loads(resp.data)["metadata"]["name"] == "p"
    assert sim.resource_version == rv and "default/p" not in sim.ground_truth()
    sim.create("pods", pod("p"))
    rv = sim.resource_version
    resp = http.request("POST", f"{url}?dryRun=All", body=orjson.dumps(pod("p")))
    assert resp.status == 409
    resp = http.request(
        "PATCH", f"{url}/p?dryRun=All", body=orjson.dumps({"metadata": {"labels": {"a": "b"}}}),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )  # fmt: skip
    assert orjson.loads(resp.data)["metadata"]["labels"] == {"a": "b"}
    assert http.request("DELETE", f"{url}/p?dryRun=All").status == 200
    assert sim.resource_version == rv and sim.get("pods", "default/p")["metadata"]["labels"] == {}
    assert http.request("DELETE", f"{url}/p?dryRun=Some").status == 400


def test_watch_events_as_table_rows(sim: Simulator, http: urllib3.PoolManager) -> None:
    """``kubectl get -w``: each event's object is a one-row Table."""
    sim.create("pods", pod("w1"))
    url = f"{sim.url}/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1"
    resp = http.request("GET", url, headers={"Accept": TABLE}, preload_content=False)
    try:
        lines = [orjson.loads(line) for line in resp.read().splitlines() if line]
    finally:
        resp.release_conn()
    assert [e["type"] for e in lines] == ["ADDED"]
    table = lines[0]["object"]
    assert table["kind"] == "Table" and table["rows"][0]["cells"][:3] == ["w1", "0/1", "Pending"]
    resp = http.request("GET", url + "&includeObject=Nope", headers={"Accept": TABLE})
    assert resp.status == 400
