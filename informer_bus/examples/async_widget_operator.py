"""The Widget operator (:mod:`informer_bus.examples.widget_operator`) with ``async def reconcile``.

The same decisions (its ``desired_data``, ``config_map_for``, ``is_stale``, ``status_for``) and
the same writes, each followed by the same expectation, made with ``await`` through
``kubernetes_asyncio`` (the asyncio port of the official client, which kopf supports too) on
the processor's event loop: up to ``--max-concurrent-reconciles`` Widgets are reconciled at
once by one thread, never one Widget twice at once. Install the client with the
``async-example`` extra (``pip install 'informer-bus[async-example]'``)::

    informer-bus reflector --resource widgets.example.com --resource 'configmaps?shardKey=owner'
    informer-bus processor --max-concurrent-reconciles 20 \\
        --handler informer_bus.examples.async_widget_operator:AsyncWidgetOperator

The API connection comes from ``--kube-url`` (or ``--kubeconfig``/``--context``, or
``--in-cluster``), like the sync operator's; the client is made on the event loop by the first
reconcile (an aiohttp session belongs to the loop it was made on) and closed by :meth:`stop`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import load_incluster_config, load_kube_config

from informer_bus import (
    AsyncController,
    For,
    HandlerContext,
    Obj,
    Owns,
    generation_changed,
    kube_connection,
)
from informer_bus import split_meta_namespace_key as split_key
from informer_bus.examples.widget_operator import (
    CONFIG_SUFFIX,
    GROUP,
    PLURAL,
    VERSION,
    WIDGETS,
    config_map_for,
    controller_uid,
    is_stale,
    status_for,
)

__all__ = ["AsyncWidgetOperator", "async_api_client"]


async def async_api_client(context: HandlerContext) -> ApiClient:
    """A ``kubernetes_asyncio`` client for the processor's API settings (``settings.kube``):
    ``--kube-url`` as is, else the in-cluster service account, else the kubeconfig."""
    kube = kube_connection(context)
    configuration = Configuration()
    if kube.kube_url:
        configuration.host = kube.kube_url
    elif kube.in_cluster:
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await load_kube_config(
            config_file=kube.kubeconfig or None,
            context=kube.context or None,
            client_configuration=configuration,
        )
    return ApiClient(configuration)


class AsyncWidgetOperator(AsyncController):
    """Keeps every Widget's ConfigMap and status, awaiting the API (module docstring)."""

    widgets = For(WIDGETS, predicates=(generation_changed,))
    config_maps = Owns("configmaps")

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self._client: ApiClient | None = None
        self._client_lock: asyncio.Lock | None = None
        # Typed Any: the client's annotations are of models; the bodies here are plain dicts.
        self.core: Any = None
        self.custom: Any = None

    async def _connect(self) -> None:
        if self._client_lock is None:  # made on the loop, by the first reconcile
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if self._client is None:
                self._client = await async_api_client(self.context)
                self.core = CoreV1Api(self._client)
                self.custom = CustomObjectsApi(self._client)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop reconciling (the ones in flight finish), then close the client on its loop."""
        stopped = super().stop(timeout)
        client, self._client = self._client, None
        if client is not None and self._event_loop is not None:
            self._event_loop.submit(client.close()).result(timeout)
        return stopped

    async def reconcile(self, key: str) -> None:
        await self._connect()
        namespace, name = split_key(key)
        config_key = f"{namespace}/{name}{CONFIG_SUFFIX}"
        widget = self.widgets.get_by_key(key)
        current = self.config_maps.get_by_key(config_key)
        if widget is None or widget["metadata"].get("deletionTimestamp"):
            if current is not None and controller_uid(current) is not None:
                await self._delete(key, config_key, current)
            return
        if current is None:
            body = config_map_for(widget)
            written = await self.core.create_namespaced_config_map(namespace, body)
            self._wrote_config_map(key, config_key, written)
        elif is_stale(current, widget):
            body = config_map_for(widget)
            # Optimistic concurrency: the version this decision was made on, or 409.
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            name = body["metadata"]["name"]
            written = await self.core.replace_namespaced_config_map(name, namespace, body)
            self._wrote_config_map(key, config_key, written)
        await self._write_status(key, widget)

    def _wrote_config_map(self, key: str, config_key: str, written: Any) -> None:
        """The next reconcile of ``key`` waits until the ConfigMap cache holds this write."""
        version = written.metadata.resource_version
        self.expect_version(key, version, resource="configmaps", object_key=config_key)

    async def _delete(self, key: str, config_key: str, current: Obj) -> None:
        metadata = current["metadata"]
        try:
            await self.core.delete_namespaced_config_map(
                metadata["name"],
                metadata["namespace"],
                body={"preconditions": {"uid": metadata["uid"]}},
            )
        except ApiException as exc:
            if exc.status != 404:  # gone already: what we wanted
                raise
        self.expect_deleted(key, resource="configmaps", object_key=config_key)

    async def _write_status(self, key: str, widget: Obj) -> None:
        metadata = widget["metadata"]
        status = status_for(widget)
        if (widget.get("status") or {}) == status:
            return
        written = await self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            metadata["namespace"],
            PLURAL,
            metadata["name"],
            {"status": status},
            _content_type="application/merge-patch+json",
        )
        self.expect_version(key, written["metadata"]["resourceVersion"])
