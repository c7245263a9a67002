"""What each overlay of deploy/kubernetes/ promises, read from its rendering through the real
settings loader (so a variable kustomize put in the wrong container, or a patch that missed its
target, shows as the setting a service would really run with): the Redis topology every service
of the overlay talks to, the processor groups it runs, and how they scale.

Every overlay must be listed here: a new one fails until its promise is written down.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.app.deploy.manifests import (
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


@dataclass(frozen=True)
class Promise:
    topology: str
    """``single``, ``sentinel`` or ``cluster``: how every service reaches Redis."""
    groups: frozenset[str]
    """The processor groups (``--group``) the overlay runs, one Deployment each."""
    autoscaler: str
    """The kind that scales every group on its lag."""


PROMISES = {
    "overlays/single-redis": Promise("single", frozenset({"processors"}), "ScaledObject"),
    "overlays/sentinel": Promise("sentinel", frozenset({"processors"}), "ScaledObject"),
    "overlays/cluster": Promise("cluster", frozenset({"processors"}), "ScaledObject"),
    "overlays/second-group": Promise("single", frozenset({"processors", "audit"}), "ScaledObject"),
    "overlays/hpa": Promise("single", frozenset({"processors"}), "HorizontalPodAutoscaler"),
}


def topology(redis: Any) -> str:
    if redis.sentinel:
        return "sentinel"
    return "cluster" if redis.cluster else "single"


def promise_problems(documents: list[Document], promise: Promise) -> list[str]:
    """How the rendered ``documents`` break ``promise`` (empty when they keep it)."""
    problems: list[str] = []
    services = deployments(documents, "reflector") + deployments(documents, "processor")
    redis_settings = {
        doc_id(d): settings_of(container_launch(d, documents)).redis for d in services
    }
    for name, redis in redis_settings.items():
        if topology(redis) != promise.topology:
            problems.append(f"{name} talks to a {topology(redis)} Redis")
    if len(set(redis_settings.values())) != 1:
        problems.append("the services do not share one Redis configuration")
    groups = [group_of(d, documents) for d in deployments(documents, "processor")]
    if sorted(groups) != sorted(promise.groups):
        problems.append(f"processor groups {sorted(groups)}, not {sorted(promise.groups)}")
    for processor in deployments(documents, "processor"):
        labels = processor["spec"]["template"]["metadata"]["labels"]
        if labels.get("informer-bus.io/group") != group_of(processor, documents):
            problems.append(f"{doc_id(processor)}: its pods are labelled with another group")
    scaled = {
        d["kind"] for d in documents if d["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")
    }
    if scaled != {promise.autoscaler}:
        problems.append(f"scaled by {sorted(scaled)}, not {promise.autoscaler}")
    return problems


def test_every_overlay_states_its_promise_and_is_documented() -> None:
    assert sorted(PROMISES) == sorted(OVERLAYS)
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert [o for o in OVERLAYS if f"`{o}/`" not in guide] == []


@pytest.mark.parametrize("overlay", sorted(PROMISES))
def test_each_overlay_renders_what_it_promises(overlay: str) -> None:
    assert promise_problems(render(overlay), PROMISES[overlay]) == []


def test_the_topologies_are_the_ones_named() -> None:
    sentinel = settings_of(
        container_launch(deployments(docs := render("overlays/sentinel"), "processor")[0], docs)
    ).redis
    assert len(sentinel.sentinel_addresses()) == 3 and sentinel.sentinel_master == "mymaster"
    cluster = render("overlays/cluster")
    assert settings_of(
        container_launch(deployments(cluster, "reflector")[0], cluster)
    ).redis.cluster


def _drop_env(component: str, name: str, documents: list[Document]) -> None:
    for deployment in deployments(documents, component):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [var for var in container["env"] if var["name"] != name]


def _drop_group_flag(documents: list[Document]) -> None:
    for deployment in deployments(documents, "processor"):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [a for a in container["args"] if a not in ("--group", "audit")]


def _add_a_scaled_object(documents: list[Document]) -> None:
    keda = render("overlays/single-redis")
    documents.extend(d for d in keda if d["kind"] == "ScaledObject")


BREAKS: dict[str, Callable[[list[Document]], None]] = {
    # The Sentinel patch reaching the processors only: the reflectors would use another Redis.
    "overlays/sentinel": functools.partial(_drop_env, "reflector", "INFORMER_BUS_REDIS_SENTINEL"),
    "overlays/cluster": functools.partial(_drop_env, "processor", "INFORMER_BUS_REDIS_CLUSTER"),
    # The second group's Deployment without --group: a second copy of the first group.
    "overlays/second-group": _drop_group_flag,
    # A ScaledObject left in the KEDA-less overlay: two autoscalers would fight.
    "overlays/hpa": _add_a_scaled_object,
}


@pytest.mark.parametrize("overlay", sorted(BREAKS))
def test_the_promise_check_catches_an_overlay_that_breaks_it(overlay: str) -> None:
    documents = render(overlay)
    assert promise_problems(documents, PROMISES[overlay]) == []
    BREAKS[overlay](documents)
    assert promise_problems(documents, PROMISES[overlay])
