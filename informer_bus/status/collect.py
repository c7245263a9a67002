"""Reading a :class:`~informer_bus.status.model.StatusSnapshot` from Redis.

The facts are read in at most two pipelined round trips whatever the shard count (three on a
Redis Cluster), and times come from Redis's clock (``TIME``), the clock that stamps stream
IDs, membership deadlines and ``synced_at``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.redis_config import is_cluster, redacted_url, redis_client
from common.redis_layout import (
    CHECKPOINT_RELISTING,
    CHECKPOINT_RV,
    CHECKPOINT_SYNCED_AT,
    CHECKPOINT_SYNCED_RV,
    DEFAULT_PREFIX,
    LEASE_EPOCH,
    LEASE_HOLDER,
    PROCESSOR_GROUP,
    ResourceKeys,
    ShardKeys,
)
from informer_bus.discovery import discover_resources
from informer_bus.status.model import (
    LeaderStatus,
    ProcessorStatus,
    ResourceStatus,
    ShardStatus,
    StatusSnapshot,
)

__all__ = ["collect_status", "status_client"]


def status_client(
    url: str, *, timeout: float = 3.0, cluster: bool = False, **connection: Any
) -> redis.Redis:
    """A decoding client that fails fast: an unreachable Redis is reported in seconds, not
    after redis-py's default retries with backoff (about a minute). ``connection``: credentials
    and TLS (``common.redis_config.connection_kwargs``); ``cluster``: ``url`` names a node of a
    Redis Cluster (keys are then found by scanning every primary)."""
    return redis_client(
        url, cluster=cluster, decode_responses=True, socket_timeout=timeout,
        socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0), **connection,
    )  # fmt: skip


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    text = _text(value)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _ok(reply: Any) -> Any:
    """A pipeline reply, or ``None`` when that command failed (no such key, no group)."""
    return None if isinstance(reply, Exception) else reply


def _id_ms(stream_id: Any) -> int | None:
    text = _text(stream_id)
    if not text:
        return None
    millis, _, _ = text.partition("-")
    return int(millis) if millis.isdigit() else None


def _rv_order(rv: str) -> tuple[int, int, str]:
    """Sort key: decimal RVs as integers (etcd revisions), anything else after, by text."""
    return (0, int(rv), "") if rv.isdigit() else (1, 0, rv)


@dataclass
class _ShardReplies:
    keys: ShardKeys
    checkpoint: dict[str, str]
    lease: list[Any]
    stream: dict[str, Any] | None
    group: dict[str, Any] | None
    pending_summary: dict[str, Any] | None
    objects: int
    dead_letters: int
    undelivered_first_ms: int | None = None

    @property
    def last_delivered(self) -> str | None:
        return None if self.group is None else _text(self.group.get("last-delivered-id"))

    @property
    def undelivered(self) -> int | None:
        """Entries after the group's position; 0 when the position is the stream's end."""
        if self.group is None or self.stream is None:
            return None
        lag = _int(self.group.get("lag"))
        if lag is not None:
            return lag
        if self.last_delivered == _text(self.stream.get("last-generated-id")):
            return 0
        return None

    @property
    def needs_first_undelivered(self) -> bool:
        """Whether the age of the oldest unacknowledged entry needs one more read: nothing
        pending (else the oldest pending entry is it), but something undelivered."""
        if self.group is None or self.last_delivered is None:
            return False
        pending = _int((self.pending_summary or {}).get("pending")) or 0
        return pending == 0 and self.undelivered != 0


def _queue_shard(pipe: Any, keys: ShardKeys) -> None:
    pipe.hgetall(keys.checkpoint)
    pipe.hmget(keys.for_group().lease, [LEASE_HOLDER, LEASE_EPOCH])
    pipe.xinfo_stream(keys.stream)
    pipe.xinfo_groups(keys.stream)
    pipe.xpending(keys.stream, PROCESSOR_GROUP)
    pipe.hlen(keys.objects)
    pipe.xlen(keys.for_group().dead_letters)


_SHARD_CALLS: Final = 7
_RESOURCE_CALLS: Final = 4


def _shard_replies(keys: ShardKeys, replies: Sequence[Any]) -> _ShardReplies:
    checkpoint, lease, stream, groups, pending, objects, dead = (_ok(r) for r in replies)
    group = next(
        (g for g in groups or () if _text(g.get("name")) == PROCESSOR_GROUP),
        None,
    )
    return _ShardReplies(
        keys=keys,
        checkpoint={str(k): str(v) for k, v in (checkpoint or {}).items()},
        lease=list(lease or (None, None)),
        stream=stream,
        group=group,
        pending_summary=pending if group is not None else None,
        objects=int(objects or 0),
        dead_letters=int(dead or 0),
    )


def _shard_status(replies: _ShardReplies, now_ms: int) -> ShardStatus:
    checkpoint, stream, group = replies.checkpoint, replies.stream, replies.group
    length = int(stream.get("length", 0)) if stream else 0
    pending = _int((replies.pending_summary or {}).get("pending")) or 0
    oldest_ms: int | None
    if group is None:
        lag: int | None = length
        first = (stream or {}).get("first-entry")
        oldest_ms = _id_ms(first[0]) if first else None
    else:
        undelivered = replies.undelivered
        lag = None if undelivered is None else undelivered + pending
        if pending:
            oldest_ms = _id_ms((replies.pending_summary or {}).get("min"))
        else:
            oldest_ms = replies.undelivered_first_ms
    if lag == 0:
        lag_s: float | None = 0.0
    elif oldest_ms is not None:
        lag_s = max(0.0, (now_ms - oldest_ms) / 1000)
    else:
        lag_s = None
    relisting = checkpoint.get(CHECKPOINT_RELISTING) == "1"
    return ShardStatus(
        shard=replies.keys.shard,
        owner=_text(replies.lease[0]),
        owner_epoch=_int(replies.lease[1]),
        rv=checkpoint.get(CHECKPOINT_RV),
        synced=CHECKPOINT_SYNCED_RV in checkpoint and not relisting,
        relisting=relisting,
        stream_length=length,
        entries_added=_int(stream.get("entries-added")) if stream else None,
        has_group=group is not None,
        entries_read=_int(group.get("entries-read")) if group else None,
        lag=lag,
        pending=pending,
        lag_s=lag_s,
        objects=replies.objects,
        dead_letters=replies.dead_letters,
    )


def _processors(
    members: Iterable[tuple[str, float]],
    shards: Sequence[ShardStatus],
    now_ms: int,
    member_ttl: float,
) -> tuple[ProcessorStatus, ...]:
    owned: dict[str, list[int]] = {}
    for shard in shards:
        if shard.owner is not None:
            owned.setdefault(shard.owner, []).append(shard.shard)
    result: dict[str, ProcessorStatus] = {}
    for member, deadline_ms in members:
        expires_in = (deadline_ms - now_ms) / 1000
        result[member] = ProcessorStatus(
            member=member,
            live=expires_in > 0,
            heartbeat_age_s=round(max(0.0, member_ttl - expires_in), 3),
            expires_in_s=round(expires_in, 3),
            shards=tuple(owned.get(member, ())),
        )
    for holder, held in owned.items():
        if holder not in result:
            result[holder] = ProcessorStatus(holder, False, None, None, tuple(held))
    return tuple(result[name] for name in sorted(result))


def _resource_status(
    resource: str,
    head: Sequence[Any],
    shard_replies: Sequence[_ShardReplies],
    now_ms: int,
    member_ttl: float,
) -> ResourceStatus:
    leader_hash, leader_ttl_ms, epoch, members = (_ok(r) for r in head)
    leader = None
    if leader_hash and leader_hash.get(LEASE_HOLDER):
        ttl = _int(leader_ttl_ms)
        leader = LeaderStatus(
            holder=str(leader_hash[LEASE_HOLDER]),
            epoch=_int(leader_hash.get(LEASE_EPOCH)),
            expires_in_s=ttl / 1000 if ttl is not None and ttl >= 0 else None,
        )
    shards = tuple(_shard_status(replies, now_ms) for replies in shard_replies)
    rvs = [shard.rv for shard in shards]
    last_rv = None if not rvs or None in rvs else min((rv or "" for rv in rvs), key=_rv_order)
    listed = [
        (
            _int(replies.checkpoint.get(CHECKPOINT_SYNCED_AT)),
            replies.checkpoint.get(CHECKPOINT_SYNCED_RV),
        )
        for replies in shard_replies
    ]
    stamped = [(at, rv) for at, rv in listed if at is not None]
    last_list_at, last_list_rv = max(stamped, key=lambda pair: pair[0]) if stamped else (None, None)
    if last_list_rv is None:
        last_list_rv = next((rv for _, rv in listed if rv is not None), None)
    return ResourceStatus(
        resource=resource,
        leader=leader,
        epoch=_int(epoch) or 0,
        last_rv=last_rv,
        last_list_rv=last_list_rv,
        last_list_at=None if last_list_at is None else last_list_at / 1000,
        last_list_age_s=None if last_list_at is None else max(0.0, (now_ms - last_list_at) / 1000),
        synced=bool(shards) and all(shard.synced for shard in shards),
        shards=shards,
        processors=_processors(
            ((str(m), float(score)) for m, score in members or ()), shards, now_ms, member_ttl
        ),
        has_reflector=leader is not None or any(rv is not None for _, rv in listed),
    )


def collect_status(
    client: redis.Redis,
    *,
    prefix: str = DEFAULT_PREFIX,
    resources: Mapping[str, int] | None = None,
    member_ttl: float = 5.0,
    redis_url: str = "",
) -> StatusSnapshot:
    """Read every resource of ``resources`` (resource id -> shard count; default: what
    :func:`discover_resources` finds) in at most two round trips (three on a Redis Cluster).

    ``client`` must decode responses (:func:`status_client`). ``member_ttl`` is the
    processors' ``--member-ttl``, used to turn heartbeat deadlines into ages. Raises
    ``redis.RedisError`` when Redis cannot be read.
    """
    if resources is None:
        resources = discover_resources(client, prefix)
    cluster = is_cluster(client)
    pipe = client.pipeline(transaction=False)
    if not cluster:  # a Cluster pipeline refuses TIME (no key names a node): read it apart
        pipe.time()
    plan: list[tuple[str, list[ShardKeys]]] = []
    for resource, shard_count in resources.items():
        keys = ResourceKeys(prefix, resource)
        pipe.hgetall(keys.leader)
        pipe.pttl(keys.leader)
        pipe.get(keys.epoch)
        pipe.zrange(keys.group().members, 0, -1, withscores=True)
        shards = [keys.shard(shard) for shard in range(shard_count)]
        for shard_keys in shards:
            _queue_shard(pipe, shard_keys)
        plan.append((resource, shards))
    replies = pipe.execute(raise_on_error=False)
    if cluster:
        replies.insert(0, client.time())
    if isinstance(replies[0], Exception):
        raise replies[0]
    seconds, micros = replies[0]
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    position = 1
    gathered: list[tuple[str, list[Any], list[_ShardReplies]]] = []
    for resource, shards in plan:
        head = replies[position : position + _RESOURCE_CALLS]
        position += _RESOURCE_CALLS
        per_shard = []
        for shard_keys in shards:
            per_shard.append(
                _shard_replies(shard_keys, replies[position : position + _SHARD_CALLS])
            )
            position += _SHARD_CALLS
        gathered.append((resource, head, per_shard))
    _read_first_undelivered(client, [s for _, _, shards in gathered for s in shards])
    return StatusSnapshot(
        redis_url=redacted_url(redis_url),
        prefix=prefix,
        taken_at=now_ms / 1000,
        resources=tuple(
            _resource_status(resource, head, shards, now_ms, member_ttl)
            for resource, head, shards in gathered
        ),
    )


def _read_first_undelivered(client: redis.Redis, shards: Sequence[_ShardReplies]) -> None:
    """The second round trip: the oldest undelivered entry of shards that have nothing
    pending but something undelivered, for its age."""
    wanted = [replies for replies in shards if replies.needs_first_undelivered]
    if not wanted:
        return
    pipe = client.pipeline(transaction=False)
    for replies in wanted:
        pipe.xrange(replies.keys.stream, min=f"({replies.last_delivered}", count=1)
    for replies, reply in zip(wanted, pipe.execute(raise_on_error=False), strict=True):
        entries = _ok(reply)
        if entries:
            replies.undelivered_first_ms = _id_ms(entries[0][0])
