"""Object keys, the way client-go names objects in every cache and queue.

Objects travel through informer-bus as the plain dicts that ``orjson.loads`` returns: building
typed models costs ~1 ms per Pod, which is the very cost this project exists to avoid. A key is
``"namespace/name"`` for namespaced objects and ``"name"`` for cluster-scoped ones, so keys sort
and shard the same way in every process and match what Go controllers log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "DeletedFinalStateUnknown",
    "InvalidKeyError",
    "Obj",
    "deletion_handling_meta_namespace_key",
    "meta_namespace_key",
    "namespace_of",
    "split_meta_namespace_key",
]

Obj: TypeAlias = dict[str, Any]
"""A Kubernetes object as decoded JSON: shared, never mutated in place (see ``store``)."""


class InvalidKeyError(ValueError):
    """An object or key that cannot be turned into a cache key.

    A ``ValueError`` (not the built-in ``KeyError``) because the caller handed us bad input; it
    is not a lookup miss.
    """


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """A deletion we inferred rather than saw.

    Emitted when a relist shows that a key vanished while we were not watching: the object was
    deleted, but its final state is unknown. ``obj`` is the last state we knew, which may be
    stale or ``None`` when we never held the object.
    """

    key: str
    obj: Obj | None


def meta_namespace_key(obj: Obj | DeletedFinalStateUnknown) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (reference 4.1).

    A tombstone yields its own key so that deletions inferred during a relist land on the same
    cache entry as the object they stand for.
    """
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    try:
        metadata = obj["metadata"]
        name = metadata["name"]
    except (KeyError, TypeError):
        raise InvalidKeyError(f"object has no metadata.name: {_describe(obj)}") from None
    if not isinstance(name, str) or not name:
        raise InvalidKeyError(f"metadata.name must be a non-empty string: {_describe(obj)}")
    namespace = metadata.get("namespace")
    if namespace:
        if not isinstance(namespace, str):
            raise InvalidKeyError(f"metadata.namespace must be a string: {_describe(obj)}")
        return f"{namespace}/{name}"
    return name


def deletion_handling_meta_namespace_key(obj: Obj | DeletedFinalStateUnknown) -> str:
    """The key function for stores that may receive tombstones.

    Kept as its own name, as in client-go, so call sites say that tombstones are expected;
    :func:`meta_namespace_key` already understands them.
    """
    return meta_namespace_key(obj)


def namespace_of(key: str) -> str:
    """The namespace part of ``key``; ``""`` for a cluster-scoped key (no ``/``).

    Not checked (:func:`split_meta_namespace_key` checks): for the hot paths that already hold
    a valid key, and one rule for them all.
    """
    slash = key.find("/")
    return key[:slash] if slash > 0 else ""


def split_meta_namespace_key(key: str) -> tuple[str, str]:
    """Split a key back into ``(namespace, name)``; ``namespace`` is ``""`` when cluster-scoped."""
    parts = key.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise InvalidKeyError(f"unexpected key format: {key!r}")


def _describe(obj: object) -> str:
    text = repr(obj)
    return text if len(text) <= 120 else text[:117] + "..."
