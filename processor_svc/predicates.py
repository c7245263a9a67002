"""Which update events are worth a reconcile (issue 15, point 3; controller-runtime's
``predicate`` package).

A controller reconciles the whole object whatever changed, so an update that changed nothing
it acts on only costs a reconcile: the status a controller writes back comes back as an update
of its own primary, kubelet heartbeats rewrite a Pod's status every few seconds. A predicate
says whether one update (old, new) may reach the queue; :attr:`Controller.predicates
<processor_svc.controller.Controller.predicates>` holds the ones that must all agree.

Additions and deletions always pass (as in controller-runtime): a predicate filters only
updates, and a resync's ``on_update(obj, obj)`` passes only the predicates that let an
unchanged object through (none of these do: give a resync its own handler if it must
reconcile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.object_keys import Obj

__all__ = [
    "UpdatePredicate",
    "annotations_changed",
    "any_of",
    "generation_changed",
    "labels_changed",
]

UpdatePredicate = Callable[[Obj, Obj], bool]
"""``(old, new) -> bool``: whether the update may enqueue the object's key."""


def _metadata(obj: Obj) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def generation_changed(old: Obj, new: Obj) -> bool:
    """``metadata.generation`` moved: the spec changed (the API server bumps it for spec
    changes only, on every resource with a status subresource). An object without a
    generation always passes, since nothing then tells a spec change from a status one."""
    before, after = _metadata(old).get("generation"), _metadata(new).get("generation")
    return after is None or before != after


def labels_changed(old: Obj, new: Obj) -> bool:
    """``metadata.labels`` differ (an absent map is an empty one)."""
    return (_metadata(old).get("labels") or {}) != (_metadata(new).get("labels") or {})


def annotations_changed(old: Obj, new: Obj) -> bool:
    """``metadata.annotations`` differ (an absent map is an empty one)."""
    return (_metadata(old).get("annotations") or {}) != (_metadata(new).get("annotations") or {})


def any_of(*predicates: UpdatePredicate) -> UpdatePredicate:
    """A predicate that passes when one of ``predicates`` does (``Controller.predicates``
    requires all of its own): e.g. ``any_of(generation_changed, labels_changed)``."""
    if not predicates:
        raise ValueError("any_of needs at least one predicate")

    def passes(old: Obj, new: Obj) -> bool:
        return any(predicate(old, new) for predicate in predicates)

    return passes
