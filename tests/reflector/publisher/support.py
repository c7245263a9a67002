"""Helpers shared by the publisher and retention tests: real envelopes, stream contents."""

from __future__ import annotations

import re

import redis

from common.deltas import DeltaType
from common.object_keys import Obj
from common.redis_layout import ShardKeys
from common.shard_routing import ShardKeyChoice
from common.wire import FIELD, DeltaEnvelope, Move, decode_envelope, encode_envelope
from reflector_svc.publish_records import PendingDelta

TS = 1714567890.25


def obj(key: str, rv: str) -> Obj:
    namespace, _, name = key.rpartition("/")
    metadata: dict[str, str] = {"name": name, "resourceVersion": rv, "uid": f"uid-{key}"}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}


def delta(kind: DeltaType, key: str, rv: str, *, tombstone: bool = False) -> PendingDelta:
    """A PendingDelta with a real v1 envelope (a tombstone carries the last object, at ``rv``)."""
    envelope = DeltaEnvelope(kind, key, rv, f"uid-{key}", obj(key, rv), TS, tombstone)
    return PendingDelta(kind, key, rv, encode_envelope(envelope))


BY_OWNER = ShardKeyChoice.parse("owner")


def owned(kind: DeltaType, key: str, rv: str, owner: str | None) -> PendingDelta:
    """A delta of a ConfigMap-like object controlled by widget ``owner`` (``None``: no
    controller), with its shard key computed as a reflector sharding by owner does."""
    namespace, _, name = key.rpartition("/")
    metadata: dict[str, object] = {"name": name, "resourceVersion": rv, "uid": f"uid-{key}"}
    if namespace:
        metadata["namespace"] = namespace
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner,
             "uid": f"uid-{owner}", "controller": True},
        ]  # fmt: skip
    obj: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    envelope = DeltaEnvelope(kind, key, rv, f"uid-{key}", obj, TS)
    shard_key = BY_OWNER.shard_key(obj, key).text
    return PendingDelta(kind, key, rv, encode_envelope(envelope), shard_key)


def added(key: str, rv: str) -> PendingDelta:
    return delta(DeltaType.ADDED, key, rv)


def updated(key: str, rv: str) -> PendingDelta:
    return delta(DeltaType.UPDATED, key, rv)


def deleted(key: str, rv: str) -> PendingDelta:
    return delta(DeltaType.DELETED, key, rv)


Entry = tuple[str, str, str]  # (type, key, rv)


def stream_entries(client: redis.Redis, keys: ShardKeys) -> list[Entry]:
    """A shard's stream as (type, key, rv), oldest first, decoding every envelope."""
    result = []
    for _, fields in client.xrange(keys.stream):
        env = decode_envelope(fields[FIELD])
        result.append((env.type.value, env.key, env.resource_version))
    return result


def as_entry(pending: PendingDelta) -> Entry:
    return (pending.type.value, pending.key, pending.resource_version)


def hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the content of the first non-empty ``{...}``."""
    match = re.search(r"\{([^}]*)\}", key)
    assert match is not None and match.group(1), f"{key} has no hash tag"
    return match.group(1)


MoveEntry = tuple[str, str, str, Move | None, str]  # (type, key, rv, move, stream id)


def move_entries(client: redis.Redis, keys: ShardKeys) -> list[MoveEntry]:
    """A shard's stream as (type, key, rv, move, stream id), oldest first."""
    result = []
    for stream_id, fields in client.xrange(keys.stream):
        env = decode_envelope(fields[FIELD])
        result.append((env.type.value, env.key, env.resource_version, env.move, stream_id.decode()))
    return result
