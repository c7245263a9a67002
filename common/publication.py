"""Whether a reflector has published a resource: what readers check before trusting its shards.

Deployments start in any order, so a processor or a subscriber may well come up before the
reflector of its resource, or be pointed at a resource (``pod`` for ``pods``) that no reflector
will ever publish. Either way the shard streams are empty, and an empty stream looks exactly
like a resource that has no objects: a reader must not conclude "synced" from it.

The marker is the one the reflector itself leaves: when a relist completes it records
``synced_rv`` in every shard's checkpoint (``docs/architecture.md``, "Redis layout"), and never
removes it. A shard whose checkpoint has it holds a complete list; a resource is *published*
when every shard has one. The reflector leader lease (held while a replica leads, before its
first list completes) tells "a reflector is on its way" apart from "no reflector at all".
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from common.redis_layout import CHECKPOINT_SYNCED_RV, LEASE_HOLDER, ResourceKeys

__all__ = ["Publication", "read_publication"]


@dataclass(frozen=True, slots=True)
class Publication:
    """What Redis says about a resource's reflector, read in one round trip."""

    shard_count: int
    listed_shards: tuple[int, ...]
    """The shards whose checkpoint records a completed list."""
    leader: bool
    """A reflector replica holds the resource's leader lease right now."""
    listed_beyond: bool = False
    """Shard ``shard_count`` holds a completed list too: the reflector uses more shards than
    the reader was told, and the reader would never see those shards' objects."""

    @property
    def complete(self) -> bool:
        """Every shard holds a complete list: safe to take the shards over and call them synced."""
        return len(self.listed_shards) == self.shard_count

    @property
    def has_reflector(self) -> bool:
        """A reflector leads, or has completed a list at least once."""
        return self.leader or bool(self.listed_shards)

    @property
    def unlisted_shards(self) -> tuple[int, ...]:
        listed = set(self.listed_shards)
        return tuple(shard for shard in range(self.shard_count) if shard not in listed)


def read_publication(
    client: redis.Redis, *, prefix: str, resource: str, shard_count: int
) -> Publication:
    """One pipelined read of the leader lease's holder and every shard's ``synced_rv``;
    raises ``redis.RedisError`` when Redis cannot be read. Only ``HGET``: a processor's minimal
    ACL (``docs/operations.md``) has it, not ``EXISTS`` or ``HEXISTS``."""
    keys = ResourceKeys(prefix, resource)
    pipe = client.pipeline(transaction=False)
    pipe.hget(keys.leader, LEASE_HOLDER)
    for shard in range(shard_count + 1):  # one more: is the reflector's shard count larger?
        pipe.hget(keys.shard(shard).checkpoint, CHECKPOINT_SYNCED_RV)
    leader, *listed, beyond = pipe.execute()
    return Publication(
        shard_count=shard_count,
        listed_shards=tuple(shard for shard, rv in enumerate(listed) if rv is not None),
        leader=leader is not None,
        listed_beyond=beyond is not None,
    )
