"""An operator: every ``widgets.example.com`` Widget owns a ConfigMap derived from its spec.

For each Widget ``shop/w1`` the operator keeps a ConfigMap ``shop/w1-config``:

* created when the Widget appears, with ``ownerReferences`` naming the Widget as its
  controller, and ``data`` holding the Widget's spec (each field as a string) and its name;
* replaced when the Widget's spec changes (optimistic concurrency: the write carries the
  cached ``resourceVersion``, so a stale cache would be refused with 409, never overwrite);
* deleted when the Widget is gone (and only if it still is the one the Widget owned);
* and the Widget's ``status`` says which ConfigMap, for which ``generation``
  (``status.configMap``, ``status.observedGeneration``), through the status subresource.

Run it on processors co-sharded with the reflector's sharding (docs/handlers.md, "Writing an
operator"): the reflector shards ConfigMaps by their controlling owner, so a processor holds
each Widget with its ConfigMap::

    informer-bus reflector --resource widgets.example.com --resource 'configmaps?shardKey=owner'
    informer-bus processor --handler informer_bus.examples.widget_operator:WidgetOperator

The processor's resources come from the class (``For`` and ``Owns``), its API connection from
``--kube-url``/``--kubeconfig``/``--in-cluster``. The API calls go through the official
``kubernetes`` client with ``_preload_content=False``: the replies are decoded with ``orjson``
as plain dicts, never built into models.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from informer_bus import (
    Controller,
    For,
    HandlerContext,
    Obj,
    Owns,
    generation_changed,
    kube_api_client,
    split_meta_namespace_key,
)

__all__ = [
    "CONFIG_SUFFIX",
    "GROUP",
    "PLURAL",
    "VERSION",
    "WIDGETS",
    "WidgetOperator",
    "config_map_for",
    "controller_uid",
    "desired_data",
    "is_stale",
    "status_for",
]

GROUP: Final = "example.com"
VERSION: Final = "v1"
PLURAL: Final = "widgets"
WIDGETS: Final = f"{PLURAL}.{GROUP}"
CONFIG_SUFFIX: Final = "-config"
"""A Widget ``w1``'s ConfigMap is ``w1-config``, in the Widget's namespace."""


def desired_data(widget: Obj) -> dict[str, str]:
    """What the Widget's ConfigMap holds: each spec field as a string, and the Widget's name."""
    spec = widget.get("spec") or {}
    data = {
        str(name): value if isinstance(value, str) else orjson.dumps(value).decode()
        for name, value in spec.items()
    }
    data["widget"] = widget["metadata"]["name"]
    return data


def config_map_for(widget: Obj) -> dict[str, Any]:
    """The ConfigMap the Widget should own, with its controller reference."""
    metadata = widget["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": metadata["name"] + CONFIG_SUFFIX,
            "namespace": metadata["namespace"],
            "labels": {"app.kubernetes.io/managed-by": "widget-operator"},
            "ownerReferences": [_owner_reference(widget)],
        },
        "data": desired_data(widget),
    }


def _owner_reference(widget: Obj) -> dict[str, Any]:
    metadata = widget["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(config_map: Obj) -> str | None:
    """The uid of the Widget that controls ``config_map`` (``None``: no Widget does)."""
    for reference in config_map.get("metadata", {}).get("ownerReferences") or ():
        if reference.get("controller") and reference.get("kind") == "Widget":
            uid = reference.get("uid")
            return uid if isinstance(uid, str) else None
    return None


def is_stale(config_map: Obj, widget: Obj) -> bool:
    """Whether the Widget's ConfigMap must be replaced: other data, or another controller."""
    return (
        config_map.get("data") != desired_data(widget)
        or controller_uid(config_map) != widget["metadata"]["uid"]
    )


def status_for(widget: Obj) -> dict[str, Any]:
    """The Widget's status once its ConfigMap is written for its current generation."""
    metadata = widget["metadata"]
    return {
        "configMap": metadata["name"] + CONFIG_SUFFIX,
        "observedGeneration": metadata.get("generation", 1),
    }


class WidgetOperator(Controller):
    """Keeps every Widget's ConfigMap and status (module docstring)."""

    # Status writes come back as Widget updates that change no spec: only spec changes (and
    # additions, deletions, and every event of an owned ConfigMap) are worth a reconcile.
    widgets = For(WIDGETS, predicates=(generation_changed,))
    config_maps = Owns("configmaps")
    workers = 4

    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        client = kube_api_client(context)
        self._api_client = client
        # Typed Any: the client's annotations promise models, and _preload_content=False
        # returns the raw HTTP response instead (decoded here with orjson).
        self.core: Any = CoreV1Api(client)
        self.custom: Any = CustomObjectsApi(client)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the workers, then close the API connection they used."""
        stopped = super().stop(timeout)
        self._api_client.close()
        return stopped

    def reconcile(self, key: str) -> None:
        namespace, name = split_meta_namespace_key(key)
        config_key = f"{namespace}/{name}{CONFIG_SUFFIX}"
        widget = self.widgets.get_by_key(key)
        current = self.config_maps.get_by_key(config_key)
        if widget is None or widget["metadata"].get("deletionTimestamp"):
            if current is not None and controller_uid(current) is not None:
                self._delete(key, config_key, current)
            return
        if current is None:
            self._create(key, config_key, widget)
        elif is_stale(current, widget):
            self._replace(key, config_key, widget, current)
        self._write_status(key, widget)

    # --- the writes, each followed by what the cache must show before the next reconcile ---

    def _create(self, key: str, config_key: str, widget: Obj) -> None:
        body = config_map_for(widget)
        reply = self.core.create_namespaced_config_map(
            widget["metadata"]["namespace"], body, _preload_content=False
        )
        self._wrote_config_map(key, config_key, reply)

    def _replace(self, key: str, config_key: str, widget: Obj, current: Obj) -> None:
        body = config_map_for(widget)
        # Optimistic concurrency: the version this decision was made on, or 409.
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        reply = self.core.replace_namespaced_config_map(
            body["metadata"]["name"], body["metadata"]["namespace"], body, _preload_content=False
        )
        self._wrote_config_map(key, config_key, reply)

    def _wrote_config_map(self, key: str, config_key: str, reply: Any) -> None:
        """The next reconcile of ``key`` waits until the ConfigMap cache holds this write."""
        written = orjson.loads(reply.data)
        version = written["metadata"]["resourceVersion"]
        self.expect_version(key, version, resource="configmaps", object_key=config_key)

    def _delete(self, key: str, config_key: str, current: Obj) -> None:
        metadata = current["metadata"]
        try:
            self.core.delete_namespaced_config_map(
                metadata["name"],
                metadata["namespace"],
                body={"preconditions": {"uid": metadata["uid"]}},
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:  # gone already: what we wanted
                raise
        self.expect_deleted(key, resource="configmaps", object_key=config_key)

    def _write_status(self, key: str, widget: Obj) -> None:
        metadata = widget["metadata"]
        status = status_for(widget)
        if (widget.get("status") or {}) == status:
            return
        # A merge patch of the status subresource carries no resourceVersion: the spec churn
        # of the Widget's users cannot make it conflict, and it changes only the status.
        reply = self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            metadata["namespace"],
            PLURAL,
            metadata["name"],
            {"status": status},
            _preload_content=False,
            _content_type="application/merge-patch+json",
        )
        written = orjson.loads(reply.data)
        self.expect_version(key, written["metadata"]["resourceVersion"])
