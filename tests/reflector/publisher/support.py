"""Helpers shared by the publisher and retention tests: real envelopes, stream contents."""

from __future__ import annotations

import re

import redis

from common.deltas import DeltaType
from common.keys import Obj
from common.redis_layout import ShardKeys
from common.wire import FIELD, DeltaEnvelope, decode_envelope, encode_envelope
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
