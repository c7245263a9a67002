"""What the API server refuses before it stores a write: here, its NamespaceLifecycle
admission.

An object of a namespaced kind is created, replaced or patched through the API only in a
namespace that exists; otherwise the answer is the namespace's own 404, ``namespaces "X" not
found``, whatever the kind. Reads and deletes pass. A create is refused in the first place, so
an object in a missing namespace only exists when its namespace went after it (the simulator
deletes a namespace at once, not its contents) or when the Python API wrote it:
:class:`~apiserver_sim.simulator.Simulator`'s methods write as into etcd, past admission, like
the kubelet and controllers of a test's imagined cluster.
"""

from __future__ import annotations

from apiserver_sim.resources import NAMESPACES
from apiserver_sim.routes import Route
from apiserver_sim.state import ClusterState

__all__ = ["require_namespace"]


def require_namespace(state: ClusterState, route: Route) -> None:
    """404 ``namespaces "X" not found`` when ``route`` writes into a namespace that does not
    exist."""
    if route.resource.namespaced and route.namespace:
        state.get(NAMESPACES, route.namespace)
