"""What a Redis holds under a key prefix, found by ``SCAN``: the resources and their shards.

No registry of resources exists in Redis (none is needed by the services), so the tools that
look at a pipeline from outside (``status``, ``subscribe``) find it from the key names,
parsed by :mod:`common.redis_layout.keys`. ``SCAN`` is one pass over the keyspace that only
informer-bus keys match; on a Redis Cluster redis-py scans every primary.
"""

from __future__ import annotations

import re

import redis

from common.redis_layout import (
    GroupKeys,
    GroupShardKeys,
    ResourceKeys,
    parse_group_key,
    parse_resource_key,
    parse_shard_key,
)

__all__ = ["discover_resources", "discover_shard_count"]

# Redis glob metacharacters, escaped so that a prefix or resource id is matched literally.
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\^])")


def _glob_literal(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def _names(client: redis.Redis, pattern: str) -> list[str]:
    return [
        key.decode() if isinstance(key, bytes) else str(key)
        for key in client.scan_iter(match=pattern, count=1000)
    ]


def discover_resources(client: redis.Redis, prefix: str) -> dict[str, int]:
    """Every resource with informer-bus keys under ``prefix``, with its shard count (the
    highest shard number found plus one; 0 when only resource-wide keys exist)."""
    found: dict[str, int] = {}
    for name in _names(client, f"{_glob_literal(prefix)}:{{*}}:*"):
        shard = parse_shard_key(prefix, name)
        if shard is not None:
            found[shard.resource] = max(found.get(shard.resource, 0), shard.shard + 1)
        elif (resource := parse_resource_key(prefix, name)) is not None:
            found.setdefault(resource.resource, 0)
        elif isinstance(group := parse_group_key(prefix, name), GroupShardKeys):
            keys = group.shard_keys
            found[keys.resource] = max(found.get(keys.resource, 0), keys.shard + 1)
        elif isinstance(group, GroupKeys):  # a processor waiting for its first list
            found.setdefault(group.resource_keys.resource, 0)
    return dict(sorted(found.items()))


def discover_shard_count(client: redis.Redis, prefix: str, resource: str) -> int:
    """The resource's shard count, found from the shard keys in Redis (0 when there are none).

    The reflector fences every shard's checkpoint when it takes the lead, so ``checkpoint``
    keys reveal shards that have no delta yet; ``deltas`` keys also count (streams written by
    other publishers). The count is the highest shard number found plus one. Raises
    ``ValueError`` for a malformed prefix or resource.
    """
    ResourceKeys(prefix, resource)  # validates the names (ValueError)
    highest = -1
    for name in _names(client, f"{_glob_literal(prefix)}:{{{_glob_literal(resource)}:*}}:*"):
        shard = parse_shard_key(prefix, name)
        if (
            shard is not None
            and shard.resource == resource
            and name in (shard.stream, shard.checkpoint)
        ):
            highest = max(highest, shard.shard)
    return highest + 1
