"""Reading a :class:`~informer_bus.status.model.StatusSnapshot` from Redis.

The facts are read in at most two pipelined round trips whatever the shard and group count
(three on a Redis Cluster; :func:`collect_status` says what each reads), and times come from
Redis's clock (``TIME``), the clock that stamps stream IDs, membership deadlines and
``synced_at``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.redis_config import is_cluster, redacted_url, redis_client
from common.redis_layout import (
    DEFAULT_PREFIX,
    PROCESSOR_GROUP,
    GroupShardKeys,
    ResourceKeys,
    ShardKeys,
)
from common.redis_layout.checkpoint import ShardCheckpoint, decode_checkpoint
from common.redis_layout.lease_reads import LeaseFields, decode_lease, queue_lease
from common.redis_layout.members import decode_deadlines, is_live, queue_deadlines, redis_time_ms
from common.redis_replies import as_text
from common.versions import is_integer_version
from informer_bus.discovery import discover
from informer_bus.status.model import (
    GroupShardStatus,
    GroupStatus,
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


def _int(value: Any) -> int | None:
    if type(value) is int:  # a count in a reply (XINFO, PTTL)
        return value
    text = as_text(value)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _ok(reply: Any) -> Any:
    """A pipeline reply, or ``None`` when that command failed (no such key, no group)."""
    return None if isinstance(reply, Exception) else reply


def _id_ms(stream_id: Any) -> int | None:
    text = as_text(stream_id)
    if not text:
        return None
    millis, _, _ = text.partition("-")
    return int(millis) if millis.isdigit() else None


def _rv_order(rv: str) -> tuple[int, int, str]:
    """Sort key: decimal RVs as integers (etcd revisions), anything else after, by text."""
    return (0, int(rv), "") if is_integer_version(rv) else (1, 0, rv)


@dataclass
class _GroupShard:
    """What was read about one group on one shard."""

    keys: GroupShardKeys
    info: dict[str, Any] | None = None
    """The group's XINFO GROUPS entry on the shard's stream; ``None``: no such group there."""
    lease: LeaseFields = field(default_factory=lambda: decode_lease(None))
    dead_letters: int = 0
    has_epoch: bool = False
    """The lease epoch counter exists: some processor of the group owned the shard once."""
    oldest_ms: int | None = None
    """The oldest unacknowledged entry's ID time, when the second round trip read it."""

    def take(self, replies: Sequence[Any]) -> None:
        lease, dead, epoch = (_ok(r) for r in replies)
        self.lease = decode_lease(lease)
        self.dead_letters = int(dead or 0)
        self.has_epoch = bool(epoch)

    @property
    def pending(self) -> int:
        return 0 if self.info is None else _int(self.info.get("pending")) or 0

    @property
    def last_delivered(self) -> str | None:
        return None if self.info is None else as_text(self.info.get("last-delivered-id"))

    def undelivered(self, stream: dict[str, Any] | None) -> int | None:
        """Entries after the group's position; 0 when the position is the stream's end."""
        if self.info is None or stream is None:
            return None
        lag = _int(self.info.get("lag"))
        if lag is not None:
            return lag
        if self.last_delivered == as_text(stream.get("last-generated-id")):
            return 0
        return None


_GROUP_SHARD_CALLS: Final = 3


def _queue_group_shard(pipe: Any, keys: GroupShardKeys) -> None:
    queue_lease(pipe, keys.lease)
    pipe.xlen(keys.dead_letters)
    pipe.exists(keys.lease_epoch)


@dataclass
class _ShardReplies:
    keys: ShardKeys
    checkpoint: ShardCheckpoint = field(default_factory=lambda: decode_checkpoint(None))
    stream: dict[str, Any] | None = None
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    """XINFO GROUPS of the stream, by group name."""
    objects: int = 0
    groups: dict[str, _GroupShard] = field(default_factory=dict)

    def take(self, replies: Sequence[Any]) -> None:
        checkpoint, stream, groups, objects = (_ok(r) for r in replies)
        self.checkpoint = decode_checkpoint(checkpoint)
        self.stream = stream
        for info in groups or ():
            name = as_text(info.get("name"))
            if name is not None:
                self.infos[name] = info
        self.objects = int(objects or 0)
        for name, group in self.groups.items():  # queued before XINFO GROUPS was in
            group.info = self.infos.get(name)

    def group(self, name: str) -> _GroupShard:
        if name not in self.groups:
            self.groups[name] = _GroupShard(self.keys.for_group(name), self.infos.get(name))
        return self.groups[name]


def _queue_shard(pipe: Any, keys: ShardKeys) -> None:
    pipe.hgetall(keys.checkpoint)
    pipe.xinfo_stream(keys.stream)
    pipe.xinfo_groups(keys.stream)
    pipe.hlen(keys.objects)


_SHARD_CALLS: Final = 4
_RESOURCE_CALLS: Final = 3


def _shard_status(replies: _ShardReplies) -> ShardStatus:
    checkpoint, stream = replies.checkpoint, replies.stream
    return ShardStatus(
        shard=replies.keys.shard,
        rv=checkpoint.rv,
        synced=checkpoint.synced,
        relisting=checkpoint.relisting,
        stream_length=int(stream.get("length", 0)) if stream else 0,
        entries_added=_int(stream.get("entries-added")) if stream else None,
        objects=replies.objects,
    )


def _group_shard_status(shard: _ShardReplies, group: _GroupShard, now_ms: int) -> GroupShardStatus:
    stream = shard.stream
    length = int(stream.get("length", 0)) if stream else 0
    pending = group.pending
    oldest_ms: int | None
    if group.info is None:
        lag: int | None = length
        first = (stream or {}).get("first-entry")
        oldest_ms = _id_ms(first[0]) if first else None
    else:
        undelivered = group.undelivered(stream)
        lag = None if undelivered is None else undelivered + pending
        oldest_ms = group.oldest_ms
    if lag == 0:
        lag_s: float | None = 0.0
    elif oldest_ms is not None:
        lag_s = max(0.0, (now_ms - oldest_ms) / 1000)
    else:
        lag_s = None
    return GroupShardStatus(
        shard=shard.keys.shard,
        exists=group.info is not None,
        owner=group.lease.holder,
        owner_epoch=group.lease.epoch,
        entries_read=_int(group.info.get("entries-read")) if group.info else None,
        lag=lag,
        pending=pending,
        lag_s=lag_s,
        dead_letters=group.dead_letters,
    )


def _processors(
    members: Iterable[tuple[str, float]],
    shards: Sequence[GroupShardStatus],
    now_ms: int,
    member_ttl: float,
    elsewhere: Mapping[str, tuple[str, float]],
) -> tuple[ProcessorStatus, ...]:
    """``elsewhere``: the group's members in its other resources (member -> resource,
    deadline), where a lease holder of this resource that is no member here may heartbeat."""
    owned: dict[str, list[int]] = {}
    for shard in shards:
        if shard.owner is not None:
            owned.setdefault(shard.owner, []).append(shard.shard)

    def status(member: str, deadline_ms: float, member_of: str | None) -> ProcessorStatus:
        expires_in = (deadline_ms - now_ms) / 1000
        return ProcessorStatus(
            member=member,
            live=is_live(deadline_ms, now_ms),
            heartbeat_age_s=round(max(0.0, member_ttl - expires_in), 3),
            expires_in_s=round(expires_in, 3),
            shards=tuple(owned.get(member, ())),
            member_of=member_of,
        )

    result: dict[str, ProcessorStatus] = {}
    for member, deadline_ms in members:
        result[member] = status(member, deadline_ms, None)
    for holder, held in owned.items():
        if holder in result:
            continue
        if holder in elsewhere:  # co-sharded: a member of the primary's group
            home, deadline_ms = elsewhere[holder]
            result[holder] = status(holder, deadline_ms, home)
        else:
            result[holder] = ProcessorStatus(holder, False, None, None, tuple(held))
    return tuple(result[name] for name in sorted(result))


@dataclass
class _Resource:
    """Everything read about one resource, filled over the round trips."""

    keys: ResourceKeys
    shards: list[_ShardReplies]
    head: list[Any] = field(default_factory=list)
    members: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """Group name -> its membership (member, deadline ms), for every group read."""

    def group_names(self) -> set[str]:
        """Every group read or seen on a stream."""
        return set(self.members).union(*(shard.infos for shard in self.shards))

    def exists(self, name: str) -> bool:
        """Whether the group is there: a consumer group, members, a lease or dead letters.

        The lease epoch counter alone does not count: ``groups delete`` keeps it on purpose.
        """
        if self.members.get(name):
            return True
        for shard in self.shards:
            group = shard.groups.get(name)
            if name in shard.infos or (
                group is not None and (group.lease.holder is not None or group.dead_letters)
            ):
                return True
        return False


def _group_status(
    resource: _Resource,
    name: str,
    now_ms: int,
    member_ttl: float,
    elsewhere: Mapping[str, tuple[str, float]],
) -> GroupStatus:
    members = resource.members.get(name, [])
    parts = [shard.group(name) for shard in resource.shards]
    shards = tuple(
        _group_shard_status(shard, part, now_ms)
        for shard, part in zip(resource.shards, parts, strict=True)
    )
    processor = bool(members) or any(p.has_epoch or p.lease.holder is not None for p in parts)
    return GroupStatus(
        name=name,
        kind="processor" if processor else "consumer",
        processors=_processors(members, shards, now_ms, member_ttl, elsewhere),
        shards=shards,
    )


def _members_elsewhere(
    plan: Sequence[_Resource], resource: _Resource, group: str
) -> dict[str, tuple[str, float]]:
    """The members of ``group`` in the other resources read (member -> resource, deadline)."""
    found: dict[str, tuple[str, float]] = {}
    for other in plan:
        if other is not resource:
            for member, deadline_ms in other.members.get(group, []):
                found.setdefault(member, (other.keys.resource, deadline_ms))
    return found


def _resource_status(
    resource: _Resource, now_ms: int, member_ttl: float, plan: Sequence[_Resource] = ()
) -> ResourceStatus:
    leader_hash, leader_ttl_ms, epoch = (_ok(r) for r in resource.head)
    leader = None
    lease = decode_lease(leader_hash)
    if lease.holder:
        ttl = _int(leader_ttl_ms)
        leader = LeaderStatus(
            holder=lease.holder,
            epoch=lease.epoch,
            expires_in_s=ttl / 1000 if ttl is not None and ttl >= 0 else None,
        )
    shard_replies = resource.shards
    shards = tuple(_shard_status(replies) for replies in shard_replies)
    rvs = [shard.rv for shard in shards]
    last_rv = None if not rvs or None in rvs else min((rv or "" for rv in rvs), key=_rv_order)
    listed = [
        (replies.checkpoint.synced_at, replies.checkpoint.synced_rv) for replies in shard_replies
    ]
    stamped = [(at, rv) for at, rv in listed if at is not None]
    last_list_at, last_list_rv = max(stamped, key=lambda pair: pair[0]) if stamped else (None, None)
    if last_list_rv is None:
        last_list_rv = next((rv for _, rv in listed if rv is not None), None)
    groups = tuple(
        _group_status(resource, name, now_ms, member_ttl, _members_elsewhere(plan, resource, name))
        for name in sorted(resource.group_names())
        if resource.exists(name)
    )
    return ResourceStatus(
        resource=resource.keys.resource,
        leader=leader,
        epoch=_int(epoch) or 0,
        last_rv=last_rv,
        last_list_rv=last_list_rv,
        last_list_at=None if last_list_at is None else last_list_at / 1000,
        last_list_age_s=None if last_list_at is None else max(0.0, (now_ms - last_list_at) / 1000),
        synced=bool(shards) and all(shard.synced for shard in shards),
        shards=shards,
        groups=groups,
        has_reflector=leader is not None or any(rv is not None for _, rv in listed),
    )


class _Batch:
    """One pipelined round trip whose replies go back to whoever queued each command."""

    def __init__(self, client: redis.Redis) -> None:
        self.pipe: Any = client.pipeline(transaction=False)
        self._takers: list[tuple[int, Callable[[list[Any]], None]]] = []

    def add(self, calls: int, take: Callable[[list[Any]], None]) -> None:
        """The last ``calls`` commands queued on :attr:`pipe` go to ``take``."""
        self._takers.append((calls, take))

    def run(self) -> None:
        if not self._takers:
            return
        replies = self.pipe.execute(raise_on_error=False)
        position = 0
        for calls, take in self._takers:
            take(replies[position : position + calls])
            position += calls


def _queue_group(batch: _Batch, resource: _Resource, name: str) -> None:
    """The group's membership and its keys on every shard."""
    queue_deadlines(batch.pipe, resource.keys.group(name).members)

    def members(replies: list[Any]) -> None:
        resource.members[name] = decode_deadlines(_ok(replies[0]))

    batch.add(1, members)
    for shard in resource.shards:
        part = shard.group(name)
        _queue_group_shard(batch.pipe, part.keys)
        batch.add(_GROUP_SHARD_CALLS, part.take)


def _queue_oldest(batch: _Batch, shard: _ShardReplies, part: _GroupShard) -> None:
    """The age of the group's oldest unacknowledged entry, when its XINFO GROUPS entry says
    there is one: the oldest pending entry (XPENDING summary), or else the first entry after
    its position."""
    if part.info is None or part.last_delivered is None:
        return

    def oldest_pending(replies: list[Any]) -> None:
        part.oldest_ms = _id_ms((_ok(replies[0]) or {}).get("min"))

    def first_undelivered(replies: list[Any]) -> None:
        entries = _ok(replies[0])
        part.oldest_ms = _id_ms(entries[0][0]) if entries else None

    if part.pending:
        batch.pipe.xpending(shard.keys.stream, part.keys.group)
        batch.add(1, oldest_pending)
    elif part.undelivered(shard.stream) != 0:
        batch.pipe.xrange(shard.keys.stream, min=f"({part.last_delivered}", count=1)
        batch.add(1, first_undelivered)


def _second_round_trip(client: redis.Redis, plan: Sequence[_Resource]) -> None:
    """The groups first seen in XINFO GROUPS, and the oldest entry of every group behind."""
    second = _Batch(client)
    for resource in plan:
        for group in sorted(resource.group_names() - set(resource.members)):
            _queue_group(second, resource, group)
        for shard in resource.shards:
            for part in shard.groups.values():
                _queue_oldest(second, shard, part)
    second.run()


def collect_status(
    client: redis.Redis,
    *,
    prefix: str = DEFAULT_PREFIX,
    resources: Mapping[str, int] | None = None,
    groups: Mapping[str, Iterable[str]] | None = None,
    member_ttl: float = 5.0,
    redis_url: str = "",
) -> StatusSnapshot:
    """Read every resource of ``resources`` (resource id -> shard count; default: what
    :func:`discover` finds) in at most two pipelined round trips whatever the shard and group
    count (one more on a Redis Cluster, for ``TIME``).

    The first reads the reflector's facts, every stream's XINFO GROUPS and the keys of the
    groups known beforehand: the default group and ``groups`` (resource id -> group names; by
    default those :func:`discover` finds with keys of their own). The second, only when
    needed, reads the keys of groups first seen in XINFO GROUPS (a durable subscriber's
    group) and, for each group and shard that is behind, its oldest unacknowledged entry (for
    its age). ``client`` must decode responses (:func:`status_client`). ``member_ttl`` is the
    processors' ``--member-ttl``, used to turn heartbeat deadlines into ages. Raises
    ``redis.RedisError`` when Redis cannot be read.
    """
    if resources is None:
        found = discover(client, prefix)
        resources = found.resources
        if groups is None:
            groups = found.groups
    known = groups or {}
    cluster = is_cluster(client)
    first = _Batch(client)
    clock: list[Any] = []
    if not cluster:  # a Cluster pipeline refuses TIME (no key names a node): read it apart
        first.pipe.time()
        first.add(1, clock.extend)
    plan: list[_Resource] = []
    for name, shard_count in resources.items():
        keys = ResourceKeys(prefix, name)
        resource = _Resource(keys, [_ShardReplies(keys.shard(n)) for n in range(shard_count)])
        first.pipe.hgetall(keys.leader)
        first.pipe.pttl(keys.leader)
        first.pipe.get(keys.epoch)
        first.add(_RESOURCE_CALLS, resource.head.extend)
        for shard in resource.shards:
            _queue_shard(first.pipe, shard.keys)
            first.add(_SHARD_CALLS, shard.take)
        for group in sorted({PROCESSOR_GROUP, *known.get(name, ())}):
            _queue_group(first, resource, group)
        plan.append(resource)
    first.run()
    if cluster:
        clock.append(client.time())
    if isinstance(clock[0], Exception):
        raise clock[0]
    now_ms = redis_time_ms(clock[0])
    _second_round_trip(client, plan)
    return StatusSnapshot(
        redis_url=redacted_url(redis_url),
        prefix=prefix,
        taken_at=now_ms / 1000,
        resources=tuple(_resource_status(resource, now_ms, member_ttl, plan) for resource in plan),
    )
