"""The status snapshot: what ``informer-bus status`` (and the demo's live view) knows about
each resource, its shards and its processors, as frozen dataclasses (field names are the
JSON output's)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaderStatus", "ProcessorStatus", "ResourceStatus", "ShardStatus", "StatusSnapshot"]


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
