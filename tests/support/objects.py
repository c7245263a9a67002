"""Builders of the Kubernetes objects tests hand to caches, controllers and the simulator.

One ``pod()`` for every test: what a test does not ask for is left out, so an object sent to
the simulator carries no resourceVersion (the API server assigns it) and one put in a cache
only the fields the test reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["deployment", "pod", "widget"]


def pod(
    name: str,
    namespace: str = "default",
    *,
    rv: str | None = None,
    phase: str | None = None,
    labels: Mapping[str, str] | None = None,
    **more_labels: str,
) -> dict[str, Any]:
    """A v1 Pod with one container; labels from ``labels`` and keyword arguments
    (``pod("web-1", "shop", app="web")``); ``metadata.resourceVersion`` only with ``rv``,
    ``status.phase`` only with ``phase``."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(labels or {}), **more_labels},
    }
    if rv is not None:
        metadata["resourceVersion"] = rv
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def deployment(
    name: str, namespace: str = "default", *, desired: Any = 3, ready: Any = 3, rv: str = "1"
) -> dict[str, Any]:
    """An apps/v1 Deployment wanting ``desired`` replicas with ``ready`` of them ready."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
        "spec": {"replicas": desired},
        "status": {"readyReplicas": ready},
    }


def widget(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A ``widgets.example.com`` Widget (the example operator's custom resource)."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
