"""Point 5: label and field selectors on LIST and WATCH."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from apiserver_sim import PODS, Simulator
from apiserver_sim.selectors import FieldSelector, LabelSelector
from tests.support.objects import pod


@pytest.fixture
def labelled(sim: Simulator, v1: client.CoreV1Api) -> client.CoreV1Api:
    v1.create_namespaced_pod("default", pod("a", app="web", tier="front"))
    v1.create_namespaced_pod("default", pod("b", app="web", tier="back"))
    v1.create_namespaced_pod("default", pod("c", app="db"))
    v1.create_namespaced_pod("kube-system", pod("d", namespace="kube-system"))
    return v1


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"a", "b"}),
        ("app==web", {"a", "b"}),
        ("app!=web", {"c", "d"}),
        ("tier in (front, back)", {"a", "b"}),
        ("tier notin (front)", {"b", "c", "d"}),
        ("tier", {"a", "b"}),
        ("!tier", {"c", "d"}),
        ("app=web,tier=back", {"b"}),
        ("app in (web,db),!tier", {"c"}),
    ],
)
def test_label_selectors(labelled: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    items = labelled.list_pod_for_all_namespaces(label_selector=selector).items
    assert {p.metadata.name for p in items} == expected


def test_field_selectors(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 30, seed=4)
    pods = v1.list_pod_for_all_namespaces().items
    node = pods[0].spec.node_name
    on_node = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    assert on_node and {p.spec.node_name for p in on_node} == {node}
    assert len(on_node) == sum(p.spec.node_name == node for p in pods)
    running = v1.list_pod_for_all_namespaces(field_selector="status.phase=Running").items
    assert len(running) == sum(p.status.phase == "Running" for p in pods)
    not_running = v1.list_pod_for_all_namespaces(field_selector="status.phase!=Running").items
    assert len(running) + len(not_running) == 30
    name = pods[3].metadata.name
    by_name = v1.list_pod_for_all_namespaces(field_selector=f"metadata.name=={name}").items
    assert [p.metadata.name for p in by_name] == [name]
    in_ns = v1.list_pod_for_all_namespaces(field_selector="metadata.namespace=ns-02").items
    assert {p.metadata.namespace for p in in_ns} == {"ns-02"}


def test_bad_selectors_are_400(v1: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(label_selector="app in web")
    assert exc.value.status == 400
    with pytest.raises(client.ApiException) as exc:
        v1.list_pod_for_all_namespaces(field_selector="spec.unknown=x")
    assert exc.value.status == 400
    assert "field label not supported" in exc.value.body


def test_watch_selector_transitions(sim: Simulator, labelled: client.CoreV1Api) -> None:
    rv = labelled.list_pod_for_all_namespaces().metadata.resource_version
    sim.update("pods", "default/c", {"metadata": {"labels": {"app": "web"}}})  # enters
    sim.update("pods", "default/a", {"metadata": {"labels": {"app": "old"}}})  # leaves
    sim.update("pods", "default/b", {"metadata": {"labels": {"x": "y"}}})  # stays
    sim.update("pods", "default/a", {"metadata": {"labels": {"x": "z"}}})  # still out
    events = list(watch.Watch().stream(
        labelled.list_namespaced_pod, "default", label_selector="app=web", resource_version=rv,
        timeout_seconds=1,
    ))  # fmt: skip
    seen = [(e["type"], e["object"].metadata.name) for e in events]
    assert seen == [("ADDED", "c"), ("DELETED", "a"), ("MODIFIED", "b")]
    # The DELETED object is the last state that matched, at the event's revision.
    assert events[1]["object"].metadata.labels["app"] == "web"


def test_selector_parser_units() -> None:
    sel = LabelSelector.parse("a>3,b<2")
    assert sel.matches({"a": "4", "b": "1"})
    assert not sel.matches({"a": "3", "b": "1"})
    fields = FieldSelector.parse("status.phase!=Failed", PODS)
    assert fields.matches({"status.phase": "Running"})
    assert not fields.matches({"status.phase": "Failed"})
