"""The fields a fieldSelector can name, per resource, and their values as the apiserver renders
them.

The table follows the Kubernetes API's own lists (each type's field label conversion and the
``ToSelectableFields`` of its registry): every resource has ``metadata.name``, namespaced ones
``metadata.namespace`` too, and a few types add their own (pods' ``spec.nodeName``,
``status.phase``...). A resource the table does not know (a custom resource, a type without
extra fields) gets the two metadata fields, which is what the API serves for them. Resources are
keyed by the informer-bus resource id's ``plural[.group]``: the ``@namespace`` part of an id
does not change what can be selected.

Values are rendered as the API server compares them: a string as is, a bool as
``true``/``false``, an integer in decimal, and a missing field as its Go zero value (``""``,
``false``, ``0``), because the apiserver reads them from typed structs where a missing
``spec.hostNetwork`` *is* ``false`` and a missing ``status.replicas`` *is* ``0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal

__all__ = [
    "SelectableField",
    "field_values",
    "header_fields",
    "selectable_fields",
    "supported_fields",
]

Kind = Literal["str", "bool", "int"]
_ZERO: Final[dict[str, str]] = {"str": "", "bool": "false", "int": "0"}


@dataclass(frozen=True, slots=True)
class SelectableField:
    """One field label: its name in a fieldSelector, the JSON path it reads (they differ for
    a few, e.g. events' ``source`` reads ``source.component``) and its Go type."""

    name: str
    path: tuple[str, ...]
    kind: Kind = "str"

    def value(self, obj: Mapping[str, Any]) -> str:
        """The value the apiserver compares for ``obj``."""
        node: Any = obj
        for part in self.path:
            if not isinstance(node, dict):
                return _ZERO[self.kind]
            node = node.get(part)
        return _render(node, self.kind)


def _render(node: Any, kind: Kind) -> str:
    if node is None:
        return _ZERO[kind]
    if node is True:
        return "true"
    if node is False:
        return "false"
    return node if type(node) is str else str(node)


def _f(name: str, kind: Kind = "str", path: str | None = None) -> SelectableField:
    return SelectableField(name, tuple((path or name).split(".")), kind)


_EVENT_FIELDS: Final = (
    _f("involvedObject.kind"),
    _f("involvedObject.namespace"),
    _f("involvedObject.name"),
    _f("involvedObject.uid"),
    _f("involvedObject.apiVersion"),
    _f("involvedObject.resourceVersion"),
    _f("involvedObject.fieldPath"),
    _f("reason"),
    _f("reportingComponent"),
    _f("source", path="source.component"),
    _f("type"),
)

_SPECIFIC: Final[dict[str, tuple[SelectableField, ...]]] = {
    "pods": (
        _f("spec.nodeName"),
        _f("spec.restartPolicy"),
        _f("spec.schedulerName"),
        _f("spec.serviceAccountName"),
        _f("spec.hostNetwork", "bool"),
        _f("status.phase"),
        _f("status.podIP"),
        _f("status.nominatedNodeName"),
    ),
    "events": _EVENT_FIELDS,
    "secrets": (_f("type"),),
    "namespaces": (_f("status.phase"),),
    "nodes": (_f("spec.unschedulable", "bool"),),
    "services": (_f("spec.clusterIP"), _f("spec.type")),
    "replicationcontrollers": (_f("status.replicas", "int"),),
    "replicasets.apps": (_f("status.replicas", "int"),),
    "jobs.batch": (_f("status.successful", "int"),),
    "certificatesigningrequests.certificates.k8s.io": (_f("spec.signerName"),),
}
"""Fields beyond ``metadata.*``, as the API lists them (the order is the API's)."""

_CLUSTER_SCOPED: Final = frozenset(
    (
        "namespaces",
        "nodes",
        "persistentvolumes",
        "componentstatuses",
        "certificatesigningrequests.certificates.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "apiservices.apiregistration.k8s.io",
        "clusterroles.rbac.authorization.k8s.io",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "storageclasses.storage.k8s.io",
        "csidrivers.storage.k8s.io",
        "csinodes.storage.k8s.io",
        "volumeattachments.storage.k8s.io",
        "priorityclasses.scheduling.k8s.io",
        "runtimeclasses.node.k8s.io",
        "ingressclasses.networking.k8s.io",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
        "flowschemas.flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
    )
)
"""Built-in cluster-scoped resources: they have no ``metadata.namespace`` field label."""

_NAME: Final = _f("metadata.name")
_NAMESPACE: Final = _f("metadata.namespace")


def _base(resource_id: str) -> str:
    return resource_id.partition("@")[0]


@lru_cache(maxsize=256)
def _fields_of(base: str) -> tuple[SelectableField, ...]:
    meta = (_NAME,) if base in _CLUSTER_SCOPED else (_NAME, _NAMESPACE)
    return meta + _SPECIFIC.get(base, ())


def selectable_fields(resource_id: str) -> tuple[SelectableField, ...]:
    """The field labels of ``resource_id`` (``pods``, ``jobs.batch``,
    ``widgets.example.com@shop``), ``metadata.*`` first."""
    return _fields_of(_base(resource_id))


@lru_cache(maxsize=256)
def _names_of(base: str) -> tuple[str, ...]:
    return tuple(f.name for f in _fields_of(base))


def supported_fields(resource_id: str) -> tuple[str, ...]:
    """The names a fieldSelector on ``resource_id`` may use (pass it to
    :meth:`common.selectors.FieldSelector.parse`)."""
    return _names_of(_base(resource_id))


_Plan = tuple[bool, tuple[tuple[str, tuple[str, ...], str], ...]]
_plans: dict[str, _Plan] = {}


def _plan(resource_id: str) -> _Plan:
    """``(has metadata.namespace, ((name, path, zero), ...) for the other fields)``: what
    :func:`field_values` walks, precomputed per id (it runs once per object revision)."""
    plan = _plans.get(resource_id)
    if plan is None:
        fields = selectable_fields(resource_id)
        rest = tuple(
            (f.name, f.path, _ZERO[f.kind]) for f in fields if f not in (_NAME, _NAMESPACE)
        )
        plan = _plans[resource_id] = (_NAMESPACE in fields, rest)
    return plan


def field_values(resource_id: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """Every supported field of ``obj`` rendered as the apiserver compares it: the mapping
    :meth:`common.selectors.FieldSelector.matches` reads."""
    namespaced, rest = _plan(resource_id)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name")
    values = {"metadata.name": name if type(name) is str else _render(name, "str")}
    if namespaced:
        namespace = meta.get("namespace")
        values["metadata.namespace"] = (
            namespace if type(namespace) is str else _render(namespace, "str")
        )
    for label, path, zero in rest:
        node: Any = obj
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            values[label] = zero
        elif type(node) is str:
            values[label] = node
        else:
            values[label] = "true" if node is True else "false" if node is False else str(node)
    return values


def header_fields(resource_id: str, obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The values a stream entry's header carries for field selectors: the type's own fields
    (``spec.nodeName``, ``status.phase``...), not ``metadata.*`` (the header's key says those);
    ``None`` for a resource without any, so its headers stay as small as they can be."""
    _, rest = _plan(resource_id)
    if not rest:
        return None
    values = field_values(resource_id, obj)
    del values["metadata.name"]
    values.pop("metadata.namespace", None)
    return values
