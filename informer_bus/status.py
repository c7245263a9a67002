"""``informer-bus status``: what the pipeline looks like right now, read from Redis alone.

Everything the services coordinate through lives in Redis (``docs/architecture.md``, "Redis
layout"), so status needs no connection to any reflector or processor and works the same for
one process or fifty: the reflector leader lease, the shard checkpoints, the processors'
membership, the shard leases and the ``processors`` consumer group of every shard stream.

Resources are discovered with ``SCAN`` (one pass over the keyspace, only informer-bus keys
match), and the facts are read in at most two pipelined round trips whatever the shard count,
so ``status`` is cheap enough for the demo's live view to call once a second.

Times come from Redis's clock (``TIME``), the same clock that stamps stream IDs, membership
deadlines and ``synced_at``: ages are then exact whatever the skew between this machine and the
services' machines.

Exit status: 0 with a report; 1 when no resource was found under the prefix (nothing to
report, a message says so); 2 for a user mistake (bad flag, unreachable Redis, a
``--resource`` that does not exist).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.redis_config import (
    connection_kwargs,
    describe_redis_error,
    is_cluster,
    redacted_url,
    redis_client,
)
from common.redis_layout import CHECKPOINT_SYNCED_RV, ResourceKeys, ShardKeys
from common.resource_ids import resource_id_from
from common.service_runner import fail
from common.settings import (
    MembershipTiming,
    RedisConnection,
    ServiceSettings,
    SettingsError,
    add_flags,
    check_key_prefix,
    grouped,
    settings_from_args,
)
from informer_bus.subcommand import Subcommand
from processor_svc.shard import GROUP

__all__ = [
    "STATUS",
    "LeaderStatus",
    "ProcessorStatus",
    "ResourceStatus",
    "ShardStatus",
    "StatusSettings",
    "StatusSnapshot",
    "collect_status",
    "discover_resources",
    "redacted_url",
    "render_json",
    "render_table",
    "status_client",
]

PROGRAM: Final = "informer-bus status"
ENV_PREFIX: Final = "INFORMER_BUS_"

HELP = (
    "Show the pipeline's state from Redis: per resource the reflector leader, last RV and last "
    "list; per shard the owner, lag and synced flag; per processor its heartbeat and shards."
)

_SHARD_SUFFIXES: Final = frozenset(
    ("deltas", "versions", "objects", "checkpoint", "lease", "lease_epoch", "dead")
)
_RESOURCE_SUFFIXES: Final = frozenset(("leader", "epoch", "members"))
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


# --- the snapshot ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderStatus:
    """The reflector leader lease of a resource."""

    holder: str
    """``identity/pid/random`` of the leading reflector replica."""
    epoch: int | None
    """Its fencing epoch."""
    expires_in_s: float | None
    """Seconds until the lease lapses unless renewed (renewed every retry period)."""


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """One shard: who applies it, how far behind, and whether the reflector listed into it."""

    shard: int
    owner: str | None
    """The processor holding the shard lease (``member/pid/random``); ``None`` when free."""
    owner_epoch: int | None
    """The ownership epoch (fencing token) of that lease."""
    rv: str | None
    """Checkpoint: every event up to this resourceVersion is on the stream."""
    synced: bool
    """The reflector completed a relist into this shard and is not in the middle of another."""
    relisting: bool
    stream_length: int
    entries_added: int | None
    """Entries ever appended to the stream (survives trimming); ``None`` without a stream."""
    has_group: bool
    """Whether the processors' consumer group exists (a processor took the shard over once)."""
    entries_read: int | None
    """Entries the group has been given (``None`` when Redis cannot tell)."""
    lag: int | None
    """Entries not acknowledged yet: undelivered plus pending; ``None`` when Redis cannot
    tell (a trimmed stream whose group position is unknown)."""
    pending: int
    """Delivered to the owner, not yet acknowledged (its handlers are at work on them)."""
    lag_s: float | None
    """Age of the oldest unacknowledged entry, seconds (0 when caught up)."""
    objects: int
    """Objects the shard knows (the reflector's known state)."""
    dead_letters: int


@dataclass(frozen=True, slots=True)
class ProcessorStatus:
    """One processor of a resource: a membership entry and/or a shard lease holder."""

    member: str
    """``member-id/pid/random``: also the holder name of its shard leases."""
    live: bool
    """Its heartbeat deadline has not passed (a lease holder without membership is not)."""
    heartbeat_age_s: float | None
    """Seconds since its last heartbeat, assuming the processors' ``--member-ttl``."""
    expires_in_s: float | None
    """Seconds until its heartbeat deadline (negative: missed; it is being pruned)."""
    shards: tuple[int, ...]
    """The shards whose lease it holds."""


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """Everything about one resource id (``pods``, ``deployments.apps``...)."""

    resource: str
    leader: LeaderStatus | None
    """``None`` when no reflector leads (none runs, or the lease lapsed)."""
    epoch: int
    """The leader epoch counter: how many times leadership was won."""
    last_rv: str | None
    """The lowest shard checkpoint: every event up to it is published on every shard."""
    last_list_rv: str | None
    """The resourceVersion of the last completed relist."""
    last_list_at: float | None
    """When the last relist completed (Unix seconds, Redis clock)."""
    last_list_age_s: float | None
    synced: bool
    """Every shard is synced (see :attr:`ShardStatus.synced`)."""
    shards: tuple[ShardStatus, ...]
    processors: tuple[ProcessorStatus, ...]
    has_reflector: bool
    """A reflector leads the resource or has completed a list into it
    (:mod:`common.publication`). ``False`` -- shown as "no reflector" -- when only processors
    (waiting for one) or a subscriber's typo name it: nothing will ever arrive unless a
    reflector is started with this resource, Redis URL and prefix."""

    @property
    def owned_shards(self) -> int:
        """Shards whose lease a live processor holds."""
        live = {p.member for p in self.processors if p.live}
        return sum(1 for shard in self.shards if shard.owner in live)

    @property
    def lag(self) -> int | None:
        """Unacknowledged entries over all shards (``None`` if some shard cannot tell)."""
        lags = [shard.lag for shard in self.shards]
        return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)

    @property
    def max_lag_s(self) -> float | None:
        ages = [shard.lag_s for shard in self.shards if shard.lag_s is not None]
        return max(ages) if ages else None


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """One read of every resource under a prefix."""

    redis_url: str
    """Where it was read (password replaced by ``***``)."""
    prefix: str
    taken_at: float
    """Unix seconds, Redis clock."""
    resources: tuple[ResourceStatus, ...]

    def resource(self, name: str) -> ResourceStatus | None:
        return next((r for r in self.resources if r.resource == name), None)


# --- reading Redis -----------------------------------------------------------------------------


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


def _glob_escape(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def discover_resources(client: redis.Redis, prefix: str) -> dict[str, int]:
    """Every resource with informer-bus keys under ``prefix``, with its shard count (the
    highest shard number found plus one; 0 when only resource-wide keys exist)."""
    head = f"{prefix}:{{"
    found: dict[str, int] = {}
    for key in client.scan_iter(match=_glob_escape(head) + "*}:*", count=1000):
        text = key if isinstance(key, str) else key.decode()
        tag, sep, suffix = text[len(head) :].partition("}:")
        if not sep or not tag:
            continue
        if suffix in _SHARD_SUFFIXES:
            resource, colon, number = tag.rpartition(":")
            if colon and resource and number.isdigit():
                found[resource] = max(found.get(resource, 0), int(number) + 1)
        elif suffix in _RESOURCE_SUFFIXES:
            found.setdefault(tag, 0)
    return dict(sorted(found.items()))


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
    pipe.hmget(keys.lease, ["holder", "epoch"])
    pipe.xinfo_stream(keys.stream)
    pipe.xinfo_groups(keys.stream)
    pipe.xpending(keys.stream, GROUP)
    pipe.hlen(keys.objects)
    pipe.xlen(keys.dead_letters)


_SHARD_CALLS: Final = 7
_RESOURCE_CALLS: Final = 4


def _shard_replies(keys: ShardKeys, replies: Sequence[Any]) -> _ShardReplies:
    checkpoint, lease, stream, groups, pending, objects, dead = (_ok(r) for r in replies)
    group = next(
        (g for g in groups or () if _text(g.get("name")) == GROUP),
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
    relisting = checkpoint.get("relisting") == "1"
    return ShardStatus(
        shard=replies.keys.shard,
        owner=_text(replies.lease[0]),
        owner_epoch=_int(replies.lease[1]),
        rv=checkpoint.get("rv"),
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
    if leader_hash and leader_hash.get("holder"):
        ttl = _int(leader_ttl_ms)
        leader = LeaderStatus(
            holder=str(leader_hash["holder"]),
            epoch=_int(leader_hash.get("epoch")),
            expires_in_s=ttl / 1000 if ttl is not None and ttl >= 0 else None,
        )
    shards = tuple(_shard_status(replies, now_ms) for replies in shard_replies)
    rvs = [shard.rv for shard in shards]
    last_rv = None if not rvs or None in rvs else min((rv or "" for rv in rvs), key=_rv_order)
    listed = [
        (_int(replies.checkpoint.get("synced_at")), replies.checkpoint.get(CHECKPOINT_SYNCED_RV))
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
    prefix: str = "ib",
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
        pipe.zrange(keys.members, 0, -1, withscores=True)
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


# --- rendering ---------------------------------------------------------------------------------


def render_json(snapshot: StatusSnapshot) -> str:
    """The snapshot as indented JSON (field names as in the dataclasses), for scripts."""
    return orjson.dumps(snapshot, option=orjson.OPT_INDENT_2).decode()


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _when(unix: float | None, age: float | None) -> str:
    if unix is None:
        return "never"
    stamp = datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{stamp} ({_seconds(age)} ago)"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _columns(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "  ") -> list[str]:
    table = [list(header), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        (indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        .rstrip()
        for row in table
    ]  # fmt: skip


def _shard_ranges(shards: Sequence[int]) -> str:
    """``0-3,7,9-10``: short enough for a table cell."""
    parts: list[str] = []
    start = previous = None
    for shard in sorted(shards):
        if previous is not None and shard == previous + 1:
            previous = shard
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = shard
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts) or "-"


def render_resource(resource: ResourceStatus) -> list[str]:
    """The table lines of one resource (also the body of the demo's live view)."""
    if not resource.has_reflector:
        return [
            f"resource {resource.resource}  (no reflector)",
            f"  reflector leader  none: no reflector has ever published {resource.resource}: "
            "nothing will arrive until one runs with this --resource, --redis-url and --prefix",
            "",
            *_processor_lines(resource),
        ]
    lines = [f"resource {resource.resource}"]
    if resource.leader is None:
        leader = "none (no reflector leads: none runs, or its lease lapsed)"
    else:
        leader = (
            f"{resource.leader.holder} (epoch {resource.leader.epoch}, lease expires in "
            f"{_seconds(resource.leader.expires_in_s)} unless renewed)"
        )
    synced_shards = sum(1 for shard in resource.shards if shard.synced)
    lines += [
        f"  reflector leader  {leader}",
        f"  last RV           {resource.last_rv or '-'} (every shard has every event up to it)",
        f"  last list         {_when(resource.last_list_at, resource.last_list_age_s)}"
        + (f" at RV {resource.last_list_rv}" if resource.last_list_rv else ""),
        f"  synced            {_yes(resource.synced)} ({synced_shards}/{len(resource.shards)} "
        "shards listed)",
        "",
    ]
    live = {p.member for p in resource.processors if p.live}
    rows = []
    for shard in resource.shards:
        owner = shard.owner or "-"
        if shard.owner is not None and shard.owner not in live:
            owner += " (gone)"
        rows.append(
            (
                str(shard.shard),
                owner,
                _yes(shard.synced),
                "?" if shard.lag is None else str(shard.lag),
                str(shard.pending),
                "-" if shard.lag_s is None else f"{shard.lag_s:.1f}",
                str(shard.objects),
                str(shard.stream_length),
                str(shard.dead_letters),
            )
        )
    lines += _columns(
        ("SHARD", "OWNER", "SYNCED", "LAG", "PENDING", "LAG_S", "OBJECTS", "STREAM", "DEAD"),
        rows,
    )
    lines.append("")
    return lines + _processor_lines(resource)


def _processor_lines(resource: ResourceStatus) -> list[str]:
    if resource.processors:
        return _columns(
            ("PROCESSOR", "LIVE", "HEARTBEAT", "SHARDS"),
            (
                (
                    p.member,
                    _yes(p.live),
                    "-" if p.heartbeat_age_s is None else f"{_seconds(p.heartbeat_age_s)} ago",
                    f"{len(p.shards)}: {_shard_ranges(p.shards)}" if p.shards else "none",
                )
                for p in resource.processors
            ),
        )
    return ["  no processors"]


def render_table(snapshot: StatusSnapshot) -> str:
    """The snapshot for people: one block per resource."""
    lines = [f"redis {snapshot.redis_url}  prefix {snapshot.prefix}", ""]
    for resource in snapshot.resources:
        lines += render_resource(resource)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- the subcommand ----------------------------------------------------------------------------


_SERVICE_FIELDS = {f.name: f for f in dataclasses.fields(ServiceSettings)}
_MEMBERSHIP_FIELDS = {f.name: f for f in dataclasses.fields(MembershipTiming)}


def _same_as(source: Mapping[str, dataclasses.Field[Any]], name: str, help_text: str = "") -> Any:
    """A settings field with the default, flag and env var of a service's field of that name,
    so ``status`` is pointed at Redis exactly like the services it reports on."""
    original = source[name]
    metadata = dict(original.metadata)
    if help_text:
        metadata["help"] = help_text
    return field(default=original.default, metadata=metadata)


@dataclass(frozen=True)
class StatusSettings:
    """The ``status`` flags (``INFORMER_BUS_*`` env vars shared with the services)."""

    redis: RedisConnection = field(
        default_factory=RedisConnection, metadata=grouped("Redis", flag_prefix="redis_")
    )
    prefix: str = _same_as(_SERVICE_FIELDS, "prefix")
    resource: tuple[str, ...] = field(
        default=(),
        metadata={"help": "resource id to show (pods, deployments.apps, or the reflector's "
                  "--resource spec); default: every resource found under the prefix; one that "
                  "only processors name shows as 'no reflector'", "metavar": "ID"},
    )  # fmt: skip
    output: str = field(
        default="table", metadata={"help": "table (for people) or json (for scripts)"}
    )
    member_ttl: float = _same_as(
        _MEMBERSHIP_FIELDS,
        "member_ttl",
        "the processors' --member-ttl, to turn heartbeat deadlines into heartbeat ages",
    )

    def __post_init__(self) -> None:
        if self.output not in ("table", "json"):
            raise SettingsError(f"--output must be table or json, got {self.output!r}")
        if not self.member_ttl > 0:
            raise SettingsError(f"member_ttl must be > 0, got {self.member_ttl}")
        check_key_prefix(self.prefix)
        try:  # an id, or a reflector --resource spec pasted as is: deployments.v1.apps
            ids = tuple(dict.fromkeys(resource_id_from(text) for text in self.resource))
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        object.__setattr__(self, "resource", ids)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Exit status: 0 with a report, 1 when no resource exists under the prefix, 2 for "
        "a mistake (bad flag, unreachable Redis, unknown --resource). Every flag can also be set "
        "with the INFORMER_BUS_<NAME> environment variable shown in its help."
    )
    add_flags(parser, StatusSettings, ENV_PREFIX)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(StatusSettings, ENV_PREFIX, args)
        connection = settings.redis
        client = status_client(
            connection.url, cluster=connection.cluster, **connection_kwargs(connection)
        )
    except (SettingsError, ValueError) as exc:
        return fail(PROGRAM, _one_line(exc))
    where = redacted_url(settings.redis.url)
    try:
        found = discover_resources(client, settings.prefix)
        wanted = found
        if settings.resource:
            missing = [name for name in settings.resource if name not in found]
            if missing:
                known = ", ".join(found) or "none"
                return fail(
                    PROGRAM,
                    f"no resource {', '.join(map(repr, missing))} under prefix "
                    f"{settings.prefix!r} in {where} (found: {known})",
                )
            wanted = {name: found[name] for name in settings.resource}
        snapshot = collect_status(
            client,
            prefix=settings.prefix,
            resources=wanted,
            member_ttl=settings.member_ttl,
            redis_url=settings.redis.url,
        )
    except redis.RedisError as exc:
        reason = describe_redis_error(exc) or _one_line(exc)
        return fail(PROGRAM, f"cannot read Redis at {where}: {reason}")
    finally:
        client.close()
    if settings.output == "json":
        sys.stdout.write(render_json(snapshot) + "\n")
    elif snapshot.resources:
        sys.stdout.write(render_table(snapshot))
    if not snapshot.resources:
        print(
            f"{PROGRAM}: no informer-bus resources under prefix {settings.prefix!r} in {where} "
            "(no reflector or processor has run against it; check --redis-url and --prefix)",
            file=sys.stderr,
        )
        return 1
    return 0


STATUS = Subcommand(name="status", help=HELP, configure=_configure, run=_run)
