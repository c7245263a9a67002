"""A simulated Kubernetes API server speaking the real list/watch protocol.

No cluster runs on our machines, yet reflector tests, benchmarks and the demo need an API
server that the unmodified official client talks to over HTTP. This package is that server:
resourceVersion semantics, paginated consistent LISTs, watches with history, 410s, bookmarks
and watch-list, selectors, mutations (optimistic concurrency, status subresources, every 409
counted), an etcd-like compaction window, fault injection and seeded load generation. Run it
in-process (:class:`Simulator`), as a child process (:class:`SimulatorProcess`) or as the
``apiserver-sim`` command (``python -m apiserver_sim``).

It is a distribution of its own (``apiserver_sim/pyproject.toml``), not part of the
informer-bus wheel, and shares no code with the product: it stands in for the Kubernetes API
the product is tested against, so it answers selectors with its own parser
(:mod:`apiserver_sim.selectors`, written from the Kubernetes documentation).
"""

from apiserver_sim.command import READY_PREFIX, main
from apiserver_sim.conflicts import ConflictTable
from apiserver_sim.load import DEFAULT_MIX, ChurnStats
from apiserver_sim.process import SimulatorProcess, SimulatorProcessError
from apiserver_sim.resources import (
    CONFIGMAPS,
    CRDS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCES,
    SECRETS,
    WIDGETS,
    ResourceType,
    find_resource,
)
from apiserver_sim.revision import StoredObject
from apiserver_sim.settings import SettingsError, SimulatorSettings
from apiserver_sim.simulator import ChurnHandle, Simulator
from apiserver_sim.state import ClusterState
from apiserver_sim.status import ApiError

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DEFAULT_MIX",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "READY_PREFIX",
    "RESOURCES",
    "SECRETS",
    "WIDGETS",
    "ApiError",
    "ChurnHandle",
    "ChurnStats",
    "ClusterState",
    "ConflictTable",
    "ResourceType",
    "SettingsError",
    "Simulator",
    "SimulatorProcess",
    "SimulatorProcessError",
    "SimulatorSettings",
    "StoredObject",
    "find_resource",
    "main",
]
