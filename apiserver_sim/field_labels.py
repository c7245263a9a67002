"""The fields a fieldSelector may name on each served kind, and the text the server compares.

From the Kubernetes documentation's "Field Selectors" page: every kind takes ``metadata.name``
and a namespaced one ``metadata.namespace`` too, and a few kinds add their own (its "List of
supported fields": pods, events, secrets, namespaces, nodes among the kinds served here). A
field's value is compared as text: a bool as ``true``/``false``, a number in decimal, and a
missing field as its type's zero value (``""``, ``false``), because the API server reads it
from a typed object where a missing ``spec.hostNetwork`` *is* false.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["FieldLabel", "field_labels"]


@dataclass(frozen=True, slots=True)
class FieldLabel:
    """One field a selector may name: its name, where it is read (events' ``source`` reads
    ``source.component``) and the text of an absent value."""

    name: str
    path: tuple[str, ...]
    absent: str = ""

    def text(self, obj: Mapping[str, Any]) -> str:
        """The value the server compares for ``obj``."""
        node: Any = obj
        for step in self.path:
            node = node.get(step) if isinstance(node, dict) else None
        if node is None:
            return self.absent
        if type(node) is str:
            return node
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)


def _label(name: str, *, read: str = "", absent: str = "") -> FieldLabel:
    return FieldLabel(name, tuple((read or name).split(".")), absent)


_INVOLVED: Final = (
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
)

_OWN: Final[Mapping[str, tuple[FieldLabel, ...]]] = {
    "pods": (
        _label("spec.nodeName"),
        _label("spec.restartPolicy"),
        _label("spec.schedulerName"),
        _label("spec.serviceAccountName"),
        _label("spec.hostNetwork", absent="false"),
        _label("status.phase"),
        _label("status.podIP"),
        _label("status.nominatedNodeName"),
    ),
    "events": (
        *(_label(f"involvedObject.{part}") for part in _INVOLVED),
        _label("reason"),
        _label("reportingComponent"),
        _label("source", read="source.component"),
        _label("type"),
    ),
    "secrets": (_label("type"),),
    "namespaces": (_label("status.phase"),),
    "nodes": (_label("spec.unschedulable", absent="false"),),
}
"""The kinds' own fields, by resource (the documentation's list, in its order)."""


def field_labels(resource: str, *, namespaced: bool) -> tuple[FieldLabel, ...]:
    """What a fieldSelector on ``resource`` (``pods``, ``widgets.example.com``) may name,
    ``metadata.*`` first."""
    meta = [_label("metadata.name")]
    if namespaced:
        meta.append(_label("metadata.namespace"))
    return (*meta, *_OWN.get(resource, ()))


def has_own_fields(resource: str) -> bool:
    """Whether the kind declares fields beyond ``metadata.*`` (its own field label conversion
    then words the refusal of an unknown one: ``field label not supported: NAME``)."""
    return resource in _OWN
