"""The fieldSelector fields per resource and their values, as the Kubernetes API has them."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver_sim.resources import RESOURCES
from common.selectable_fields import field_values, selectable_fields, supported_fields
from common.selectors import FieldSelector

META = ("metadata.name", "metadata.namespace")


@pytest.mark.parametrize(
    ("resource_id", "extra"),
    [
        (
            "pods",
            (
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ),
        ),
        (
            "events",
            (
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        ("secrets", ("type",)),
        ("services", ("spec.clusterIP", "spec.type")),
        ("replicationcontrollers", ("status.replicas",)),
        ("replicasets.apps", ("status.replicas",)),
        ("jobs.batch", ("status.successful",)),
        ("configmaps", ()),
        ("deployments.apps", ()),
        ("widgets.example.com", ()),
    ],
)
def test_namespaced_resources_have_both_metadata_fields_and_their_own(
    resource_id: str, extra: tuple[str, ...]
) -> None:
    assert supported_fields(resource_id) == META + extra


@pytest.mark.parametrize(
    ("resource_id", "extra"),
    [
        ("namespaces", ("status.phase",)),
        ("nodes", ("spec.unschedulable",)),
        ("certificatesigningrequests.certificates.k8s.io", ("spec.signerName",)),
        ("persistentvolumes", ()),
        ("customresourcedefinitions.apiextensions.k8s.io", ()),
    ],
)
def test_cluster_scoped_resources_have_no_namespace_field(
    resource_id: str, extra: tuple[str, ...]
) -> None:
    assert supported_fields(resource_id) == ("metadata.name", *extra)


@pytest.mark.parametrize("resource_id", ["pods@shop", "widgets.example.com@shop", "jobs.batch@x"])
def test_the_namespace_of_an_id_does_not_change_the_fields(resource_id: str) -> None:
    assert supported_fields(resource_id) == supported_fields(resource_id.partition("@")[0])


POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1"},
    "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": True},
    "status": {"phase": "Running", "podIP": "10.0.0.7"},
}


def test_pod_values_are_rendered_as_the_apiserver_compares_them() -> None:
    assert field_values("pods", POD) == {
        "metadata.name": "web-1",
        "metadata.namespace": "shop",
        "spec.nodeName": "n1",
        "spec.restartPolicy": "Always",
        "spec.schedulerName": "",
        "spec.serviceAccountName": "",
        "spec.hostNetwork": "true",
        "status.phase": "Running",
        "status.podIP": "10.0.0.7",
        "status.nominatedNodeName": "",
    }


def test_missing_fields_read_as_their_go_zero_value() -> None:
    """The apiserver reads typed structs: a missing bool is false and a missing int 0."""
    assert field_values("pods", {})["spec.hostNetwork"] == "false"
    assert field_values("pods", {})["metadata.name"] == ""
    assert field_values("nodes", {"metadata": {"name": "n"}}) == {
        "metadata.name": "n",
        "spec.unschedulable": "false",
    }
    assert field_values("replicasets.apps", {"status": {}})["status.replicas"] == "0"
    assert field_values("jobs.batch", {"status": {"successful": 3}})["status.successful"] == "3"
    assert field_values("nodes", {"spec": {"unschedulable": True}})["spec.unschedulable"] == "true"


def test_values_survive_malformed_objects() -> None:
    odd = {"metadata": "not a dict", "spec": ["list"], "status": {"phase": None}}
    values = field_values("pods", odd)
    assert values["metadata.name"] == "" and values["spec.nodeName"] == ""
    assert values["status.phase"] == ""


def test_event_source_reads_source_component() -> None:
    event = {"source": {"component": "kubelet"}, "reportingComponent": "ctrl", "reason": "X"}
    values = field_values("events", event)
    assert values["source"] == "kubelet"
    assert values["reportingComponent"] == "ctrl"
    assert [f.path for f in selectable_fields("events") if f.name == "source"] == [
        ("source", "component")
    ]


def test_values_and_selectors_agree() -> None:
    """What a processor view does per entry: select on the rendered values."""
    selector = FieldSelector.parse(
        "spec.hostNetwork=true,status.phase!=Failed,metadata.namespace=shop",
        supported_fields("pods@shop"),
    )
    assert selector.matches(field_values("pods@shop", POD))
    unscheduled = FieldSelector.parse("spec.nodeName=", supported_fields("pods"))
    assert not unscheduled.matches(field_values("pods", POD))
    assert unscheduled.matches(field_values("pods", {"metadata": {"name": "p"}}))


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.qualified)
def test_the_simulators_own_table_agrees_for_the_kinds_it_serves(resource: Any) -> None:
    """apiserver_sim.field_labels is written apart from this table, from the same documentation."""
    assert resource.field_labels == supported_fields(resource.qualified)
    assert resource.field_values(POD) == field_values(resource.qualified, POD)
