"""What a subscription yields: one delta read from the bus and where it was read, and the
entry it reports instead when a stream holds something that is no envelope
(:mod:`informer_bus.subscription`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from common.deltas import DeltaType
from common.object_keys import Obj, namespace_of
from common.wire import DeltaEnvelope, WireDecodeError

__all__ = ["SubscribedDelta", "UndecodableEntry"]


@dataclasses.dataclass(frozen=True, slots=True)
class SubscribedDelta:
    """One delta read from the bus, with where it was read (to resume from, or to report)."""

    stream: str
    """The shard stream it came from (``ib:{pods:3}:deltas``)."""
    shard: int
    entry_id: str
    """Its entry ID, unique within its stream only (each shard numbers its own entries)."""
    envelope: DeltaEnvelope
    initial: bool = False
    """Part of a new durable group's initial list: an object of the known state, delivered as
    ``Added`` before the stream; :attr:`entry_id` is then the stream ID that state is as of."""

    @property
    def type(self) -> DeltaType:
        return self.envelope.type

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object."""
        return self.envelope.key

    @property
    def namespace(self) -> str:
        """``""`` for a cluster-scoped object."""
        return namespace_of(self.envelope.key)

    @property
    def resource_version(self) -> str:
        return self.envelope.resource_version

    @property
    def obj(self) -> Obj | None:
        """The object (a tombstone's last known state; ``None`` when that was never known).

        Shared with nothing: mutating it is harmless, unlike objects from a processor's cache.
        """
        return self.envelope.obj

    @property
    def observed_at(self) -> float:
        """Unix seconds at which the reflector saw the change."""
        return self.envelope.observed_at

    @property
    def tombstone(self) -> bool:
        """A deletion inferred by a relist (client-go's ``DeletedFinalStateUnknown``)."""
        return self.envelope.tombstone

    def as_json_dict(self) -> dict[str, Any]:
        """The JSON-lines shape ``informer-bus subscribe`` prints (camelCase, like Kubernetes)."""
        env = self.envelope
        return {
            "stream": self.stream,
            "shard": self.shard,
            "id": self.entry_id,
            "type": env.type.value,
            "key": env.key,
            "resourceVersion": env.resource_version,
            "uid": env.uid,
            "observedAt": env.observed_at,
            "tombstone": env.tombstone,
            "object": env.obj,
            "initial": self.initial,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class UndecodableEntry:
    """A stream entry that is not a valid envelope; subscriptions report it and read on."""

    stream: str
    shard: int
    entry_id: str
    error: WireDecodeError
