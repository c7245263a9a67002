"""The Kubernetes API client an operator's controller writes with, built from the processor's
settings (``--kube-url``, ``--kubeconfig``, ``--context``, ``--in-cluster``, or their
``INFORMER_BUS_*`` variables), so a controller needs no configuration of its own.

Processors themselves never call the API (only reflectors list and watch); a controller that
creates, updates or deletes objects does, with the official ``kubernetes`` client::

    from informer_bus import Controller, HandlerContext, kube_api_client

    class WidgetOperator(Controller):
        def __init__(self, context: HandlerContext) -> None:
            super().__init__(context)
            self.api = kube_api_client(context)  # a kubernetes.client.ApiClient
"""

from __future__ import annotations

from typing import Any

from common.settings import KubeConnection
from processor_svc.handlers import HandlerContext
from processor_svc.settings import ProcessorSettings
from reflector_svc.transport import load_api_client

__all__ = ["kube_api_client", "kube_connection"]


def kube_connection(context: HandlerContext) -> KubeConnection:
    """The processor's API connection settings as a handler's context carries them (the
    defaults outside a processor): what a client other than the official one is built from,
    e.g. ``kubernetes_asyncio``'s (``informer_bus.examples.async_widget_operator``)."""
    settings = context.settings
    return settings.kube if isinstance(settings, ProcessorSettings) else KubeConnection()


def kube_api_client(source: HandlerContext | KubeConnection | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for the processor's API connection settings
    (``source`` is a handler's context or the settings themselves; ``None``: the defaults,
    ``$KUBECONFIG`` or ``~/.kube/config``). Close it when done (``.close()``). Raises
    ``reflector_svc.api_errors.SourceConfigError`` (one line) when they are unusable."""
    if isinstance(source, HandlerContext):
        kube = kube_connection(source)
    else:
        kube = source if source is not None else KubeConnection()
    return load_api_client(
        kubeconfig=kube.kubeconfig,
        context=kube.context,
        in_cluster=kube.in_cluster,
        url=kube.kube_url,
    )
