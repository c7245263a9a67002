"""What an object is sharded by: its own key, its namespace, its controlling owner or a label.

:func:`common.sharding.shard_for` maps a *shard key* to a shard. By default the shard key is the
object's cache key, which spreads a resource evenly but puts a Widget and the ConfigMap it owns
on unrelated shards, so the processor that reconciles the Widget does not hold its ConfigMap.
A resource can instead be sharded by another text (:class:`ShardKeyChoice`, the ``shardKey``
of a reflector ``--resource``), chosen so that objects that belong together hash alike:

* ``key`` (the default): ``namespace/name`` (``name`` when cluster-scoped);
* ``namespace``: the namespace, so a namespace's objects of every resource sharded this way
  share a shard (a cluster-scoped object falls back to its own key);
* ``owner``: the key of the controlling owner (the ``ownerReferences`` entry with
  ``controller: true``), so children land on their owner's shard when the owner's resource is
  sharded by ``key`` with the same shard count; an object without one is sharded by its own
  key. An owner reference names no namespace: a namespaced object's owner is taken to be in the
  object's namespace (Kubernetes allows a namespaced owner only there), so a namespaced object
  controlled by a cluster-scoped owner is not co-located with it;
* ``label:NAME``: the value of label ``NAME``; an object without the label falls back to its own
  key, and that fallback is reported (:attr:`ShardKey.fallback`) so the reflector can count it.

Co-location holds one level deep: a Pod sharded by ``owner`` lands where its ReplicaSet's *key*
hashes, which is the ReplicaSet's shard only if ReplicaSets are sharded by ``key``.

Pure: the reflector computes shard keys here, processors compute owner keys here (a child's
event enqueues its owner), and both must agree exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from common.object_keys import Obj, namespace_of
from common.sharding import shard_for

__all__ = [
    "SHARD_KEY_SYNTAX",
    "ShardKey",
    "ShardKeyChoice",
    "controller_reference",
    "owner_key",
]

SHARD_KEY_SYNTAX: Final = "key, namespace, owner or label:NAME"
"""The accepted shard key choices, quoted in every error about one."""

_LABEL_NAME = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
"""A Kubernetes label key: an optional DNS-subdomain prefix and ``/``, then a name of at most
63 characters (alphanumerics, ``-``, ``_``, ``.``, starting and ending alphanumeric)."""

Kind = Literal["key", "namespace", "owner", "label"]


class ShardKey(NamedTuple):
    """The text an object is sharded by, and why it is its own key when that is a fallback."""

    text: str
    fallback: str | None
    """``None`` when :attr:`text` is what the choice asks for; otherwise a fixed reason (a
    metric label): ``label_missing``."""


@dataclass(frozen=True, slots=True)
class ShardKeyChoice:
    """One resource's choice of shard key (module docstring); parse it with :meth:`parse`."""

    kind: Kind = "key"
    label: str = ""
    """The label name, for ``kind == "label"`` only."""

    @classmethod
    def parse(cls, text: str) -> ShardKeyChoice:
        """``key``, ``namespace``, ``owner`` or ``label:NAME``; ``ValueError`` (one line, quoting
        :data:`SHARD_KEY_SYNTAX`) for anything else."""
        if text in ("key", "namespace", "owner"):
            return cls(text)  # type: ignore[arg-type]  # narrowed by the membership test
        kind, colon, label = text.partition(":") if isinstance(text, str) else ("", "", "")
        if kind == "label" and colon:
            if _LABEL_NAME.fullmatch(label) is None or len(label) > 317:
                raise ValueError(f"shard key {text!r}: {label!r} is not a label name")
            return cls("label", label)
        raise ValueError(f"unknown shard key {text!r}: expected {SHARD_KEY_SYNTAX}")

    def __str__(self) -> str:
        return f"label:{self.label}" if self.kind == "label" else self.kind

    @property
    def by_object_key(self) -> bool:
        """Sharded by the object's own key: the default, under which a key alone names its
        shard and an object can never move between shards."""
        return self.kind == "key"

    @property
    def key_names_shard(self) -> bool:
        """Whether an object's cache key alone tells its shard (:meth:`shard_of_key`): true for
        ``key`` and ``namespace``; for ``owner`` and ``label`` only the object does."""
        return self.kind in ("key", "namespace")

    def shard_key(self, obj: Obj, key: str) -> ShardKey:
        """What ``obj`` (whose cache key is ``key``) is sharded by."""
        kind = self.kind
        if kind == "key":
            return ShardKey(key, None)
        if kind == "namespace":
            return ShardKey(namespace_of(key) or key, None)
        if kind == "owner":
            reference = controller_reference(obj)
            return ShardKey(key if reference is None else owner_key(key, reference), None)
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if type(metadata) is dict else None
        value = labels.get(self.label) if type(labels) is dict else None
        if type(value) is str:
            return ShardKey(value, None)
        return ShardKey(key, "label_missing")

    def shard_of_key(self, key: str, shard_count: int) -> int | None:
        """The shard of the object with cache key ``key``, when the key alone tells it
        (:attr:`key_names_shard`); ``None`` otherwise."""
        if self.kind == "key":
            return shard_for(key, shard_count)
        if self.kind == "namespace":
            return shard_for(namespace_of(key) or key, shard_count)
        return None


def controller_reference(obj: Obj) -> dict[str, Any] | None:
    """The ``metadata.ownerReferences`` entry with ``controller: true`` and a name, or
    ``None`` (Kubernetes allows at most one; the first wins if a malformed object has more)."""
    metadata = obj.get("metadata")
    references = metadata.get("ownerReferences") if type(metadata) is dict else None
    if type(references) is not list:
        return None
    for reference in references:
        if (
            type(reference) is dict
            and reference.get("controller") is True
            and type(reference.get("name")) is str
            and reference["name"]
        ):
            return reference
    return None


def owner_key(child_key: str, reference: dict[str, Any], *, owner_namespaced: bool = True) -> str:
    """The cache key of the owner ``reference`` names, for the child with cache key
    ``child_key``: in the child's namespace when both are namespaced, else the owner's name."""
    namespace = namespace_of(child_key)
    name: str = reference["name"]
    if namespace and owner_namespaced:
        return f"{namespace}/{name}"
    return name
