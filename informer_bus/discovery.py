"""What a Redis holds under a key prefix, found by ``SCAN``: the resources, their shards and
the consumer groups that have keys of their own.

No registry of resources exists in Redis (none is needed by the services), so the tools that
look at a pipeline from outside (``status``, ``subscribe``) find it from the key names,
parsed by :mod:`common.redis_layout.key_names`. ``SCAN`` is one pass over the keyspace that only
informer-bus keys match; on a Redis Cluster redis-py scans every primary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from common.redis_conversation import Conversation, Scan, converse
from common.redis_layout import (
    GroupKeys,
    GroupShardKeys,
    ResourceKeys,
    parse_group_key,
    parse_resource_key,
    parse_shard_key,
    scan_pattern,
)

__all__ = [
    "Discovered",
    "discover",
    "discover_resources",
    "discover_shard_count",
    "shard_count_conversation",
]


def _names(client: redis.Redis, pattern: str) -> list[str]:
    return [
        key.decode() if isinstance(key, bytes) else str(key)
        for key in client.scan_iter(match=pattern, count=1000)
    ]


@dataclass
class Discovered:
    """What one scan found under a prefix."""

    resources: dict[str, int] = field(default_factory=dict)
    """Resource id -> shard count (the highest shard number found plus one; 0 when only
    resource-wide keys exist), sorted by id."""
    groups: dict[str, set[str]] = field(default_factory=dict)
    """Resource id -> the consumer groups with keys of their own (membership, a shard lease,
    an epoch counter, dead letters). A group that is only a consumer group on the streams has
    none: XINFO GROUPS finds it (``status`` reads it anyway)."""


def discover(client: redis.Redis, prefix: str) -> Discovered:
    """Every resource and every group with informer-bus keys under ``prefix``, in one scan."""
    found = Discovered()
    shards = found.resources
    for name in _names(client, scan_pattern(prefix)):
        shard = parse_shard_key(prefix, name)
        if shard is not None:
            shards[shard.resource] = max(shards.get(shard.resource, 0), shard.shard + 1)
        elif (resource := parse_resource_key(prefix, name)) is not None:
            shards.setdefault(resource.resource, 0)
        elif isinstance(group := parse_group_key(prefix, name), GroupShardKeys):
            keys = group.shard_keys
            shards[keys.resource] = max(shards.get(keys.resource, 0), keys.shard + 1)
            found.groups.setdefault(keys.resource, set()).add(group.group)
        elif isinstance(group, GroupKeys):  # a processor waiting for its first list
            shards.setdefault(group.resource_keys.resource, 0)
            found.groups.setdefault(group.resource_keys.resource, set()).add(group.group)
    found.resources = dict(sorted(shards.items()))
    return found


def discover_resources(client: redis.Redis, prefix: str) -> dict[str, int]:
    """Every resource with informer-bus keys under ``prefix``, with its shard count (the
    highest shard number found plus one; 0 when only resource-wide keys exist)."""
    return discover(client, prefix).resources


def discover_shard_count(client: redis.Redis, prefix: str, resource: str) -> int:
    """The resource's shard count, found from the shard keys in Redis (0 when there are none).

    The reflector fences every shard's checkpoint when it takes the lead, so ``checkpoint``
    keys reveal shards that have no delta yet; ``deltas`` keys also count (streams written by
    other publishers). The count is the highest shard number found plus one. Raises
    ``ValueError`` for a malformed prefix or resource.
    """
    return converse(client, shard_count_conversation(prefix, resource))


def shard_count_conversation(prefix: str, resource: str) -> Conversation[int]:
    """:func:`discover_shard_count` as a conversation (for a blocking or an asyncio client)."""
    ResourceKeys(prefix, resource)  # validates the names (ValueError)
    highest = -1
    names: list[str] = yield Scan(scan_pattern(prefix, resource))
    for name in names:
        shard = parse_shard_key(prefix, name)
        if (
            shard is not None
            and shard.resource == resource
            and name in (shard.stream, shard.checkpoint)
        ):
            highest = max(highest, shard.shard)
    return highest + 1
