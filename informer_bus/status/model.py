"""The status snapshot: what ``informer-bus status`` (and the demo's live view) knows about
each resource, its shards and its consumer groups (each with its processors), as frozen
dataclasses (field names are the JSON output's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from common.redis_layout import PROCESSOR_GROUP

__all__ = [
    "GROUP_KINDS",
    "GroupShardStatus",
    "GroupStatus",
    "LeaderStatus",
    "ProcessorStatus",
    "ResourceStatus",
    "ShardStatus",
    "StatusSnapshot",
]


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
    """One shard as the reflector wrote it: how far it listed and watched, how much it holds.

    Shared by every group: each consumer group's view of the shard is a
    :class:`GroupShardStatus`."""

    shard: int
    rv: str | None
    """Checkpoint: every event up to this resourceVersion is on the stream."""
    synced: bool
    """The reflector completed a relist into this shard and is not in the middle of another."""
    relisting: bool
    stream_length: int
    entries_added: int | None
    """Entries ever appended to the stream (survives trimming); ``None`` without a stream."""
    objects: int
    """Objects the shard knows (the reflector's known state)."""


@dataclass(frozen=True, slots=True)
class GroupShardStatus:
    """One consumer group on one shard: who applies it for the group, and how far behind."""

    shard: int
    exists: bool
    """The consumer group exists on the shard's stream (a processor of the group took the
    shard over once, or a subscriber created it). Without it, everything on the stream is
    the group's lag."""
    owner: str | None
    """The group's member holding the shard lease (``member/pid/random``); ``None`` when free
    (always for a group without leases, such as a durable subscriber)."""
    owner_epoch: int | None
    """The ownership epoch (fencing token) of that lease."""
    entries_read: int | None
    """Entries the group has been given (``None`` when Redis cannot tell)."""
    lag: int | None
    """Entries not acknowledged yet: undelivered plus pending; ``None`` when Redis cannot
    tell (a trimmed stream whose group position is unknown)."""
    pending: int
    """Delivered to the owner, not yet acknowledged (its handlers are at work on them)."""
    lag_s: float | None
    """Age of the oldest unacknowledged entry, seconds (0 when caught up)."""
    dead_letters: int
    """Entries the group parked on its dead-letter stream for this shard."""


@dataclass(frozen=True, slots=True)
class ProcessorStatus:
    """One processor of a group: a membership entry and/or a shard lease holder."""

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
    member_of: str | None = None
    """The resource whose members it heartbeats in, when not this one: a processor serving
    several co-sharded resources is a member of its primary's group only."""


GROUP_KINDS: Final = ("processor", "consumer")
""":attr:`GroupStatus.kind`'s values."""


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """One consumer group of a resource: one application on the watch (a processor group, a
    durable subscriber), with its own members, owners, position and dead letters.

    The derived fields (``owned_shards`` on) are computed from the others at construction so
    that the JSON output carries them too.
    """

    name: str
    kind: str
    """``processor`` when the group keeps what processors keep (membership, shard leases or
    their epoch counters); ``consumer`` for a consumer group with none of them (a durable
    subscriber, or any other reader with a group on the streams)."""
    processors: tuple[ProcessorStatus, ...]
    """Its members and lease holders, sorted (empty for a ``consumer`` group)."""
    shards: tuple[GroupShardStatus, ...]
    """One per shard of the resource, in shard order."""
    owned_shards: int = field(init=False)
    """Shards whose lease a live member of the group holds."""
    lag: int | None = field(init=False)
    """Unacknowledged entries over all shards (``None`` if some shard cannot tell)."""
    max_lag_s: float | None = field(init=False)
    """Age of the oldest unacknowledged entry over all shards."""
    dead_letters: int = field(init=False)
    """Dead letters over all shards."""
    synced: bool = field(init=False)
    """The group is in place on every shard: its consumer group exists on every shard's
    stream and, for a ``processor`` group, a live member holds every shard's lease (an owner
    takes a shard over, loading its cache from the known state, before it acknowledges
    anything). Not "caught up": :attr:`lag` says how far behind it is. ``False`` for a
    resource without shards."""

    def __post_init__(self) -> None:
        live = {p.member for p in self.processors if p.live}
        owned = sum(1 for shard in self.shards if shard.owner in live)
        lags = [shard.lag for shard in self.shards]
        ages = [shard.lag_s for shard in self.shards if shard.lag_s is not None]
        synced = bool(self.shards) and all(shard.exists for shard in self.shards)
        if self.kind == "processor":
            synced = synced and owned == len(self.shards)
        derived = {
            "owned_shards": owned,
            "lag": None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
            "max_lag_s": max(ages) if ages else None,
            "dead_letters": sum(shard.dead_letters for shard in self.shards),
            "synced": synced,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def live_members(self) -> tuple[str, ...]:
        """The members whose heartbeat has not lapsed."""
        return tuple(p.member for p in self.processors if p.live)


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
    """Every shard is synced by the reflector (see :attr:`ShardStatus.synced`); each group's
    own ``synced`` says whether it is in place too."""
    shards: tuple[ShardStatus, ...]
    groups: tuple[GroupStatus, ...]
    """Every consumer group of the resource, sorted by name: those on some shard's stream and
    those with keys of their own (a processor group waiting for its first list has members
    but no consumer group yet)."""
    has_reflector: bool
    """A reflector leads the resource or has completed a list into it
    (:mod:`common.publication`). ``False`` -- shown as "no reflector" -- when only processors
    (waiting for one) or a subscriber's typo name it: nothing will ever arrive unless a
    reflector is started with this resource, Redis URL and prefix."""

    def group(self, name: str = PROCESSOR_GROUP) -> GroupStatus | None:
        """The group called ``name`` (default: the default processor group), if it exists."""
        return next((g for g in self.groups if g.name == name), None)


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
