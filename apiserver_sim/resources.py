"""The resource types the simulator serves and the discovery documents that describe them.

Discovery is what lets unmodified clients (the official client's ``DynamicClient``, kopf,
kubectl) find a resource: ``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP[/VERSION]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from apiserver_sim.field_labels import FieldLabel, field_labels, has_own_fields

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RESOURCES",
    "SECRETS",
    "WIDGETS",
    "ResourceType",
    "api_group_document",
    "api_group_list_document",
    "api_resource_list_document",
    "api_versions_document",
    "find_resource",
    "lookup_path",
    "version_document",
]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives in the URL space and what it can be selected by.

    Its fieldSelector labels come from :mod:`~apiserver_sim.field_labels` (by
    :attr:`qualified`).
    """

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    """Served with ``NAME/status``: the main resource's writes keep the stored ``.status`` and
    the subresource's writes change nothing else, as the apiserver's status strategies do."""
    returns_deleted_object: bool = False
    """A DELETE answers with the deleted object (the apiserver's ``ReturnDeletedObject``:
    pods, namespaces, CRDs); otherwise with a ``Status`` of ``Success`` naming it."""
    categories: tuple[str, ...] = ()
    """Discovery's categories: ``kubectl get all`` lists the types in ``all``."""
    custom: bool = False
    """Served from a CustomResourceDefinition: like the apiserver, no strategic merge patch
    (there is no Go struct to read merge keys from), JSON and merge patches only."""

    def __hash__(self) -> int:  # hashed on every store access: computed once
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.group, self.version, self.plural, self.kind, self.namespaced))

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def qualified(self) -> str:
        """``pods`` or ``widgets.example.com``: the name used by the Python and HTTP APIs."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @cached_property
    def _fields(self) -> tuple[FieldLabel, ...]:
        return field_labels(self.qualified, namespaced=self.namespaced)

    @property
    def field_labels(self) -> tuple[str, ...]:
        """The fieldSelector labels the apiserver supports for the type."""
        return tuple(label.name for label in self._fields)

    @property
    def has_own_field_labels(self) -> bool:
        """Whether the type has fieldSelector labels beyond ``metadata.*``."""
        return has_own_fields(self.qualified)

    def field_values(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The values fieldSelectors compare against, extracted once per stored revision."""
        return {label.name: label.text(obj) for label in self._fields}

    def refresh_fields(
        self, values: Mapping[str, str], member: str, value: Any
    ) -> Mapping[str, str]:
        """``values`` (from :meth:`field_values`) after the top-level ``member`` of the object
        became ``value``; the same mapping when no field label reads that member."""
        changed = {
            label.name: label.text({member: value})
            for label in self._fields
            if label.path[0] == member
        }
        if all(values.get(label) == text for label, text in changed.items()):
            return values
        return {**values, **changed}

    def discovery_entries(self) -> list[dict[str, Any]]:
        """Its APIResourceList entries: the resource, then ``PLURAL/status`` if it has one
        (with no singular name and only get, patch and update, as a real server lists it)."""
        entries = [self.discovery_entry()]
        if self.status_subresource:
            entries.append({
                "name": f"{self.plural}/status", "singularName": "",
                "namespaced": self.namespaced, "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            })  # fmt: skip
        return entries

    def discovery_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(_VERBS),
            "storageVersionHash": self.kind[:8],
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        return entry


PODS = ResourceType("", "v1", "pods", "pod", "Pod", namespaced=True, short_names=("po",),
                    status_subresource=True, returns_deleted_object=True,
                    categories=("all",))  # fmt: skip
CONFIGMAPS = ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",))
SECRETS = ResourceType("", "v1", "secrets", "secret", "Secret", True)
NAMESPACES = ResourceType("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",),
                          status_subresource=True, returns_deleted_object=True)  # fmt: skip
NODES = ResourceType("", "v1", "nodes", "node", "Node", False, ("no",), status_subresource=True)
EVENTS = ResourceType("", "v1", "events", "event", "Event", namespaced=True, short_names=("ev",))
"""core/v1 Events: what operators (kopf's ``kopf.info``, controllers) post about objects."""
WIDGETS = ResourceType("example.com", "v1", "widgets", "widget", "Widget", True, ("wg",),
                       status_subresource=True, custom=True)  # fmt: skip
"""A custom resource whose CRD enables the status subresource (what operators write status to)."""
CRDS = ResourceType(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "customresourcedefinition",
    "CustomResourceDefinition",
    False,
    ("crd", "crds"),
    status_subresource=True,
    returns_deleted_object=True,
)

RESOURCES: tuple[ResourceType, ...] = (
    PODS, CONFIGMAPS, SECRETS, NAMESPACES, NODES, EVENTS, WIDGETS, CRDS,
)  # fmt: skip
"""Every served type; the first six are core/v1 like a real cluster."""

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_NAME: dict[str, ResourceType] = {}
for _r in RESOURCES:
    for _name in (_r.qualified, _r.plural, _r.kind, _r.kind.lower(), *_r.short_names):
        _BY_NAME.setdefault(_name, _r)


def find_resource(name: str | ResourceType, group: str | None = None) -> ResourceType:
    """Resolve a plural, kind, short name or ``plural.group`` (or pass a ResourceType through).

    Raises ``KeyError`` with the known names when nothing matches.
    """
    if isinstance(name, ResourceType):
        return name
    if group is not None:
        for r in RESOURCES:
            if r.group == group and name in (r.plural, r.kind):
                return r
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(r.qualified for r in RESOURCES)
        raise KeyError(f"unknown resource {name!r} (known: {known})") from None


def lookup_path(group: str, version: str, plural: str) -> ResourceType | None:
    """The type served at ``/api[s]/GROUP/VERSION/PLURAL``, if any."""
    return _BY_PATH.get((group, version, plural))


def version_document() -> dict[str, Any]:
    """``/version``: a plausible recent release, marked as the simulator."""
    return {
        "major": "1",
        "minor": "31",
        "gitVersion": "v1.31.0-informer-bus-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-08-13T00:00:00Z",
        "goVersion": "go1.22.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions_document(server_address: str) -> dict[str, Any]:
    """``/api``: the legacy core group has one version."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group:
            versions = groups.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
    return groups


def api_group_document(group: str) -> dict[str, Any] | None:
    """``/apis/GROUP``, or ``None`` for an unknown group."""
    versions = _groups().get(group)
    if versions is None:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list_document() -> dict[str, Any]:
    """``/apis``: every non-core group."""
    groups = []
    for name in _groups():
        doc = api_group_document(name)
        assert doc is not None
        del doc["kind"], doc["apiVersion"]
        groups.append(doc)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list_document(group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/GROUP/VERSION``, or ``None`` when nothing is served there."""
    served: Iterable[ResourceType] = [
        r for r in RESOURCES if r.group == group and r.version == version
    ]
    entries = [entry for r in served for entry in r.discovery_entries()]
    if not entries:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }
