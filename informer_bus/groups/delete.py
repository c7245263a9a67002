"""Removing a consumer group from a resource: what ``informer-bus groups delete`` does.

On every shard: ``XGROUP DESTROY`` the group on the stream (its position and pending entries
go, so retention no longer keeps entries for it), delete its shard lease and its dead letters;
then its membership. Its lease epoch counters stay: epochs must never go backwards, or a
stale owner of the deleted group -- a processor paused past its lease that wakes up after the
group was created again -- could hold the same epoch as the new owner and pass the fence. A
counter is a few bytes per shard, and a group created again under the same name simply goes on
counting from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import redis

from common.redis_layout import GroupKeys, ResourceKeys

__all__ = ["DeleteResult", "ShardDeletion", "delete_group"]


@dataclass(frozen=True, slots=True)
class ShardDeletion:
    """What went on one shard."""

    shard: int
    destroyed: bool
    """The consumer group existed on the stream and was destroyed."""
    pending_dropped: int
    """Entries delivered to the group and not acknowledged: never to be processed by it."""
    lease_removed: str | None
    """The lease's key, when there was one (a member owned the shard)."""
    dead_letters_removed: int
    dead_letters_key: str
    epoch_kept: str | None
    """The epoch counter's key, when the shard has one (kept: module docstring)."""


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What :func:`delete_group` removed."""

    resource: str
    group: str
    shards: tuple[ShardDeletion, ...]
    members_key: str
    members_removed: int
    """Membership entries removed (live or not)."""
    touched: tuple[int, ...] = field(init=False)
    """The shards on which something was removed."""

    def __post_init__(self) -> None:
        touched = tuple(
            s.shard
            for s in self.shards
            if s.destroyed or s.lease_removed is not None or s.dead_letters_removed
        )
        object.__setattr__(self, "touched", touched)

    @property
    def pending_dropped(self) -> int:
        return sum(s.pending_dropped for s in self.shards)

    @property
    def dead_letters_removed(self) -> int:
        return sum(s.dead_letters_removed for s in self.shards)


def _ok(reply: Any) -> Any:
    return None if isinstance(reply, Exception) else reply


_CALLS: Final = 7
"""Commands queued per shard by :func:`delete_group`."""


def delete_group(
    client: redis.Redis, prefix: str, resource: str, group: str, shard_count: int
) -> DeleteResult:
    """Remove ``group`` of ``resource`` from Redis (module docstring) in one pipelined round
    trip. Checking that nobody runs it is the caller's business. Raises ``ValueError`` for a
    bad name, ``redis.RedisError`` when Redis cannot be written.

    Each shard's reads and removals share the shard's hash tag and go in order in one
    pipeline; the counts are what was there just before (a member acknowledging meanwhile
    only makes them a little high).
    """
    keys = GroupKeys(ResourceKeys(prefix, resource), group)
    pipe = client.pipeline(transaction=False)
    per_shard = [keys.shard(shard) for shard in range(shard_count)]
    for shard in per_shard:
        pipe.xpending(shard.stream, group)
        pipe.xlen(shard.dead_letters)
        pipe.exists(shard.lease_epoch)
        pipe.xgroup_destroy(shard.stream, group)
        pipe.delete(shard.lease)
        pipe.delete(shard.dead_letters)
        # The rest of what deleting removes (the initial-list marker, the write expectations,
        # the held set): a group created again under the name must start from nothing.
        counted = (shard.lease, shard.dead_letters)
        pipe.delete(*[key for key in shard.removable_keys() if key not in counted])
    pipe.zcard(keys.members)
    pipe.delete(keys.members)
    replies = pipe.execute(raise_on_error=False)
    errors = [
        r
        for i, r in enumerate(replies)
        # XPENDING and XGROUP DESTROY fail when the stream or group does not exist: nothing to do
        if isinstance(r, Exception) and i < _CALLS * shard_count and i % _CALLS not in (0, 3)
    ]
    if errors:
        raise errors[0]
    shards = []
    for number, shard in enumerate(per_shard):
        pending, dead, epoch, destroyed, lease, _, _ = (
            _ok(r) for r in replies[_CALLS * number : _CALLS * (number + 1)]
        )
        shards.append(
            ShardDeletion(
                shard=shard.shard,
                destroyed=bool(destroyed),
                pending_dropped=int((pending or {}).get("pending") or 0) if destroyed else 0,
                lease_removed=shard.lease if lease else None,
                dead_letters_removed=int(dead or 0),
                dead_letters_key=shard.dead_letters,
                epoch_kept=shard.lease_epoch if epoch else None,
            )
        )
    members, _ = replies[_CALLS * shard_count :]
    if isinstance(members, Exception):
        raise members
    return DeleteResult(resource, group, tuple(shards), keys.members, int(members or 0))
