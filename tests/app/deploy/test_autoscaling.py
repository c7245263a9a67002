"""Autoscaling on lag (issue 37, point 4), checked statically on the rendered overlays: one
KEDA ScaledObject per processor group (or, in the KEDA-less overlay, one HorizontalPodAutoscaler
through prometheus-adapter), each scaling its own group's Deployment on that group's lag as the
reflector leader reports it, within 1..shard count replicas.

KEDA's CRDs cannot be installed offline: a ScaledObject is validated against the fields KEDA
documents (schemas/keda-scaledobject.json) and its HPA behavior against the Kubernetes model.
Whether its query really crosses its threshold when a processor stalls is the real-Prometheus
test's job (tests/app/monitoring/test_autoscaling_query.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry

from reflector_svc.metrics import ReflectorMetrics
from tests.app.deploy.kube_models import deserialise, unknown_fields
from tests.app.deploy.manifests import (
    BASE,
    OVERLAYS,
    Document,
    container_launch,
    deployments,
    doc_id,
    group_of,
    render,
)
from tests.app.deploy.support import settings_of
from tests.support.paths import ROOT
from tests.support.promql_names import metric_names

SCHEMA = json.loads((Path(__file__).with_name("schemas") / "keda-scaledobject.json").read_text())
ADAPTER_RULES = ROOT / "deploy" / "prometheus" / "adapter-external-rules.yml"
LAG_METRIC = "informer_bus_reflector_group_lag_entries"
HPA_OVERLAY = "overlays/hpa"
KEDA_OVERLAYS = tuple(o for o in OVERLAYS if o != HPA_OVERLAY)
_GROUP_MATCHER = re.compile(r'\bgroup\s*=\s*"([^"]*)"')


def autoscalers(documents: list[Document], kind: str) -> list[Document]:
    return [d for d in documents if d["kind"] == kind]


def target_of(scaler: Document, documents: list[Document]) -> Document | None:
    """The processor Deployment a ScaledObject or an HPA scales (``None``: no such one)."""
    ref = scaler["spec"]["scaleTargetRef"]
    if ref.get("apiVersion", "apps/v1") != "apps/v1" or ref.get("kind", "Deployment") != (
        "Deployment"
    ):
        return None
    found = [
        d for d in deployments(documents, "processor")
        if d["metadata"]["name"] == ref["name"]
        and d["metadata"]["namespace"] == scaler["metadata"]["namespace"]
    ]  # fmt: skip
    return found[0] if len(found) == 1 else None


def replica_problems(
    minimum: int, maximum: int, target: Document, docs: list[Document]
) -> list[str]:
    """Processors own shards: more replicas than shards own nothing, and 0 would stop the
    group (its caches and handlers with it)."""
    shards = settings_of(container_launch(target, docs)).shard_count
    if not 1 <= minimum <= maximum <= shards:
        return [f"replicas {minimum}..{maximum} not within 1..{shards} (the shard count)"]
    return []


def behavior_problems(behavior: Any) -> list[str]:
    problems = unknown_fields(behavior, "V2HorizontalPodAutoscalerBehavior", "behavior")
    try:
        deserialise(behavior, "V2HorizontalPodAutoscalerBehavior")
    except (ValueError, TypeError) as error:
        problems.append(f"behavior: {error}")
    return problems


def queried_group(query: str) -> str | None:
    """The consumer group a lag query selects, if it selects exactly one."""
    groups = set(_GROUP_MATCHER.findall(query))
    return groups.pop() if len(groups) == 1 else None


def scaled_object_problems(scaled: Document, documents: list[Document]) -> list[str]:
    """Why ``scaled`` is not a valid ScaledObject scaling its own processor group on that
    group's lag (empty when it is)."""
    where = doc_id(scaled)
    errors = jsonschema.Draft202012Validator(SCHEMA).iter_errors(scaled)
    problems = [f"{where}: {'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    if problems:
        return problems
    target = target_of(scaled, documents)
    if target is None:
        return [f"{where}: scaleTargetRef names no processor Deployment of this overlay"]
    group = group_of(target, documents)
    spec = scaled["spec"]
    problems += replica_problems(
        spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100), target, documents
    )
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        problems += behavior_problems(behavior)
    for trigger in spec["triggers"]:
        if trigger["type"] != "prometheus":
            problems.append(f"{where}: a {trigger['type']} trigger, not the group's lag")
            continue
        query = trigger["metadata"]["query"]
        if metric_names(query) != {LAG_METRIC}:
            problems.append(f"{where}: the query reads {sorted(metric_names(query))}")
        if queried_group(query) != group:
            problems.append(f"{where}: the query's group is not {group!r} (--group of its target)")
        if float(trigger["metadata"]["threshold"]) <= 0:
            problems.append(f"{where}: threshold must be > 0")
    if scaled["metadata"]["labels"].get("informer-bus.io/group") != group:
        problems.append(f"{where}: labelled with another group than its target's {group!r}")
    return [f"{where}: {p}" if not p.startswith(where) else p for p in problems]


def one_each(documents: list[Document], kind: str) -> list[str]:
    """Every processor group has exactly one autoscaler of ``kind`` and nothing else scales."""
    targets = [target_of(a, documents) for a in autoscalers(documents, kind)]
    named = sorted(doc_id(t) for t in targets if t is not None)
    groups = sorted(doc_id(d) for d in deployments(documents, "processor"))
    return [] if named == groups and len(targets) == len(named) else [f"{named} != {groups}"]


# --- KEDA -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", KEDA_OVERLAYS)
def test_each_processor_group_has_its_own_scaled_object_on_its_lag(overlay: str) -> None:
    documents = render(overlay)
    assert one_each(documents, "ScaledObject") == []
    assert autoscalers(documents, "HorizontalPodAutoscaler") == []  # KEDA makes its own
    for scaled in autoscalers(documents, "ScaledObject"):
        assert scaled_object_problems(scaled, documents) == []


def test_the_base_has_no_autoscaler() -> None:
    documents = render(BASE)
    assert autoscalers(documents, "ScaledObject") == []
    assert autoscalers(documents, "HorizontalPodAutoscaler") == []


def test_the_queried_metric_is_the_reflectors_group_lag() -> None:
    registry = CollectorRegistry()
    ReflectorMetrics(registry).group_lag.labels(resource="pods", group="g").set(3)
    assert registry.get_sample_value(LAG_METRIC, {"resource": "pods", "group": "g"}) == 3


def _second(documents: list[Document]) -> Document:
    return next(
        d for d in autoscalers(documents, "ScaledObject") if d["metadata"]["name"].endswith("audit")
    )


def _set(path: str, value: Any) -> Callable[[Document], None]:
    def change(document: Document) -> None:
        *parents, last = path.split(".")
        node: Any = document
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    return change


MISTAKES: dict[str, Callable[[Document], None]] = {
    "wrong-api-version": _set("apiVersion", "keda.k8s.io/v1alpha1"),
    "hpa-field-name": _set("spec.minReplicas", 1),
    "threshold-a-number": _set("spec.triggers.0.metadata.threshold", 1000),
    "no-server-address": lambda d: d["spec"]["triggers"][0]["metadata"].pop("serverAddress"),
    "unknown-prometheus-key": _set("spec.triggers.0.metadata.serverAdress", "http://p:9090"),
    "other-groups-deployment": _set("spec.scaleTargetRef.name", "informer-bus-processor"),
    "missing-deployment": _set("spec.scaleTargetRef.name", "informer-bus-processors"),
    "other-groups-lag": lambda d: d["spec"]["triggers"][0]["metadata"].update(
        query=d["spec"]["triggers"][0]["metadata"]["query"].replace('"audit"', '"processors"')
    ),
    "processor-gauge": _set(
        "spec.triggers.0.metadata.query", 'sum(informer_bus_processor_lag_entries{group="audit"})'
    ),
    "beyond-the-shards": _set("spec.maxReplicaCount", 17),
    "scale-to-zero": _set("spec.minReplicaCount", 0),
    "bad-behavior": _set(
        "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilisationWindow", 1
    ),
    "redis-trigger": lambda d: d["spec"]["triggers"][0].update(
        type="redis-streams", metadata={"stream": "ib:{pods:0}:deltas", "lagCount": "5"}
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES.values(), ids=MISTAKES.keys())
def test_the_scaled_object_check_catches_mistakes(mistake: Callable[[Document], None]) -> None:
    documents = render("overlays/second-group")
    scaled = _second(documents)
    assert scaled_object_problems(scaled, documents) == []
    mistake(scaled)
    assert scaled_object_problems(scaled, documents)


def test_the_one_each_check_catches_a_group_without_a_scaled_object() -> None:
    documents = render("overlays/second-group")
    documents.remove(_second(documents))
    assert one_each(documents, "ScaledObject")


# --- the HPA through prometheus-adapter ---------------------------------------------------------


def adapter_rule() -> dict[str, Any]:
    (rule,) = yaml.safe_load(ADAPTER_RULES.read_text())["externalRules"]
    assert isinstance(rule, dict)
    return rule


def hpa_problems(hpa: Document, documents: list[Document]) -> list[str]:
    """Why ``hpa`` is not the ScaledObject's equivalent: the same group's lag through the
    adapter's external rule, the same bounds and threshold."""
    where = doc_id(hpa)
    target = target_of(hpa, documents)
    if target is None:
        return [f"{where}: scaleTargetRef names no processor Deployment of this overlay"]
    group = group_of(target, documents)
    spec = hpa["spec"]
    problems = replica_problems(spec.get("minReplicas", 1), spec["maxReplicas"], target, documents)
    problems += behavior_problems(spec.get("behavior", {}))
    (metric,) = spec["metrics"]
    rule_metric = metric_names(adapter_rule()["seriesQuery"])
    if metric["type"] != "External" or {metric["external"]["metric"]["name"]} != rule_metric:
        problems.append(f"{where}: not the adapter rule's external metric {sorted(rule_metric)}")
    elif metric["external"]["metric"]["selector"] != {"matchLabels": {"group": group}}:
        problems.append(f"{where}: does not select its target's group {group!r}")
    scaled = find_keda_equivalent()
    bounds = (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"])
    if (spec.get("minReplicas"), spec["maxReplicas"]) != bounds:
        problems.append(f"{where}: replicas differ from the ScaledObject's {bounds}")
    threshold = scaled["spec"]["triggers"][0]["metadata"]["threshold"]
    if metric.get("external", {}).get("target") != {
        "type": "AverageValue",
        "averageValue": threshold,
    }:
        problems.append(f"{where}: not AverageValue {threshold} (the ScaledObject's threshold)")
    return problems


def find_keda_equivalent() -> Document:
    (scaled,) = autoscalers(render("overlays/single-redis"), "ScaledObject")
    return scaled


def test_without_keda_an_hpa_scales_the_group_on_the_same_lag() -> None:
    documents = render(HPA_OVERLAY)
    assert autoscalers(documents, "ScaledObject") == []
    assert one_each(documents, "HorizontalPodAutoscaler") == []
    for hpa in autoscalers(documents, "HorizontalPodAutoscaler"):
        assert hpa_problems(hpa, documents) == []


def test_the_adapter_rule_reads_the_reflectors_group_lag_for_any_namespace() -> None:
    rule = adapter_rule()
    assert metric_names(rule["seriesQuery"]) == {LAG_METRIC}
    assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
    assert rule["resources"] == {"namespaced": False}


@pytest.mark.parametrize(
    "mistake",
    [
        _set("spec.maxReplicas", 17),
        _set("spec.metrics.0.external.metric.name", "informer_bus_processor_lag_entries"),
        _set("spec.metrics.0.external.metric.selector", {"matchLabels": {"group": "audit"}}),
        _set("spec.metrics.0.external.target", {"type": "Value", "value": "1000"}),
        _set("spec.scaleTargetRef.name", "informer-bus-reflector"),
        _set("spec.behavior.scaleDown.stabilisationWindow", 300),
    ],
    ids=["beyond-the-shards", "processor-gauge", "other-group", "not-average", "reflector",
         "bad-behavior"],
)  # fmt: skip
def test_the_hpa_check_catches_mistakes(mistake: Callable[[Document], None]) -> None:
    documents = render(HPA_OVERLAY)
    (hpa,) = autoscalers(documents, "HorizontalPodAutoscaler")
    changed = copy.deepcopy(hpa)
    mistake(changed)
    assert hpa_problems(changed, documents)
