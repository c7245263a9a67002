"""The Redis keys of a resource and of its shards: the one place key names are spelled.

Key layout (:class:`ShardKeys`), for prefix ``ib``, resource ``pods``, shard 7 (the table in
``docs/architecture.md`` is the specification)::

    ib:{pods:7}:deltas       the shard's delta stream (XADD by the reflector)
    ib:{pods:7}:versions     hash key -> resourceVersion of every object the shard knows
    ib:{pods:7}:objects      hash key -> last envelope published for the key (the known state)
    ib:{pods:7}:checkpoint   hash: rv, fence, synced_rv, relisting
    ib:{pods:7}:lease        who owns (processes) the shard, with its fencing epoch
    ib:{pods:7}:lease_epoch  the shard's ownership epoch counter (never expires)
    ib:{pods:7}:dead         dead letters: entries no processor could decode

All keys of a shard share the hash tag ``{pods:7}``, so in Redis Cluster they live in one slot:
MULTI, Lua and multi-key commands may span them (append a delta, record the known state and move
the checkpoint in one atomic step; check the fence inside the same write). Different shards get
different tags and so spread over the cluster.

Keys of a resource as a whole (:class:`ResourceKeys`) carry the tag ``{pods}``: the reflector's
leader lease ``ib:{pods}:leader``, its epoch counter ``ib:{pods}:epoch`` and the processors'
membership ``ib:{pods}:members``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from common.sharding import shard_for

__all__ = [
    "DEFAULT_PREFIX",
    "RESOURCE_KEY_SUFFIXES",
    "SHARD_KEY_SUFFIXES",
    "ResourceKeys",
    "ShardKeys",
    "parse_resource_key",
    "parse_shard_key",
]

DEFAULT_PREFIX: Final = "ib"
"""The key prefix informer-bus uses unless configured otherwise."""

SHARD_KEY_SUFFIXES: Final = (
    "deltas",
    "versions",
    "objects",
    "checkpoint",
    "lease",
    "lease_epoch",
    "dead",
)
"""The last part of every per-shard key name, in :meth:`ShardKeys.all_keys` order."""
RESOURCE_KEY_SUFFIXES: Final = ("leader", "epoch", "members")
"""The last part of every resource-wide key name, in :meth:`ResourceKeys.all_keys` order."""

# Braces would move or split the hash tag, whitespace breaks logs and redis-cli; ':' is allowed
# in a resource (the shard number is always the part after the tag's last ':').
_BAD_NAME = re.compile(r"[{}\s]")
# A shard number as ShardKeys spells it: decimal, no sign, no leading zero.
_SHARD_NUMBER = re.compile(r"0|[1-9][0-9]*")


def _check_names(prefix: object, resource: object) -> None:
    for what, name in (("prefix", prefix), ("resource", resource)):
        if type(name) is not str or not name or _BAD_NAME.search(name):
            raise ValueError(
                f"{what} must be a non-empty string without braces or whitespace, got {name!r}"
            )


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The Redis keys of one shard of one resource, all under one Cluster hash tag.

    ``prefix`` namespaces informer-bus in a shared Redis; ``resource`` names the watched resource
    (``"pods"``, ``"deployments.apps"``); ``shard`` is a :func:`shard_for` result. Raises
    ``ValueError`` for an empty name, a name containing ``{``, ``}`` or whitespace, or a shard
    that is not an ``int`` >= 0.
    """

    prefix: str
    resource: str
    shard: int

    def __post_init__(self) -> None:
        _check_names(self.prefix, self.resource)
        if type(self.shard) is not int or self.shard < 0:
            raise ValueError(f"shard must be an integer >= 0, got {self.shard!r}")

    @classmethod
    def for_key(cls, prefix: str, resource: str, key: str, shard_count: int) -> ShardKeys:
        """The keys of the shard that owns the object with cache key ``key``."""
        return cls(prefix, resource, shard_for(key, shard_count))

    @property
    def hash_tag(self) -> str:
        """``{resource:shard}``: the part of every key of this shard that Redis Cluster hashes."""
        return f"{{{self.resource}:{self.shard}}}"

    @property
    def stream(self) -> str:
        """The delta stream: one entry per delta, in the order the reflector saw them."""
        return f"{self.prefix}:{self.hash_tag}:deltas"

    @property
    def versions(self) -> str:
        """Hash key -> resourceVersion of every object the shard knows.

        Separate from :attr:`objects` so that a relist diff reads a few bytes per object and
        the publish script's duplicate check touches no envelope.
        """
        return f"{self.prefix}:{self.hash_tag}:versions"

    @property
    def objects(self) -> str:
        """Hash key -> the last envelope published for that key: the shard's known state.

        Streams have no log compaction, so this is what a consumer rebuilds from, and where a
        relist finds the last object of a key that vanished (its tombstone carries it).
        """
        return f"{self.prefix}:{self.hash_tag}:objects"

    @property
    def checkpoint(self) -> str:
        """Hash ``rv`` / ``fence`` / ``synced_rv`` / ``relisting`` (``docs/architecture.md``).

        ``rv``: every event up to it is on the stream; ``fence``: the highest leader epoch seen;
        ``synced_rv``: the RV of the last completed relist; ``relisting``: ``1`` while a relist
        diff is being written.
        """
        return f"{self.prefix}:{self.hash_tag}:checkpoint"

    @property
    def lease(self) -> str:
        """The ownership lease of this shard (holder and fencing epoch)."""
        return f"{self.prefix}:{self.hash_tag}:lease"

    @property
    def lease_epoch(self) -> str:
        """The counter that hands out :attr:`lease`'s fencing epochs.

        A separate key because the lease hash expires and the counter must not: an epoch that
        restarted from 1 after a lapse would let a stale owner's acknowledgements through.
        """
        return f"{self.prefix}:{self.hash_tag}:lease_epoch"

    @property
    def dead_letters(self) -> str:
        """The dead-letter stream: entries the processor could not decode or apply.

        Each entry carries ``reason``, the original stream ``id`` and the raw payload when there
        was one. A stream beside the shard's (same hash tag) so that parking an entry and
        acknowledging it happen in one fenced script.
        """
        return f"{self.prefix}:{self.hash_tag}:dead"

    def all_keys(self) -> tuple[str, ...]:
        """Every key of this shard (e.g. to delete or inspect a shard as a whole)."""
        return (
            self.stream,
            self.versions,
            self.objects,
            self.checkpoint,
            self.lease,
            self.lease_epoch,
            self.dead_letters,
        )


@dataclass(frozen=True, slots=True)
class ResourceKeys:
    """The Redis keys of a resource as a whole, under the Cluster hash tag ``{resource}``.

    The reflector's leadership is per resource, not per shard: one leader lists and watches the
    resource and writes every shard. Its lease and its epoch counter share one tag so that one
    script can take the lease and increment the epoch atomically. Raises ``ValueError`` for the
    same bad names as :class:`ShardKeys`.
    """

    prefix: str
    resource: str

    def __post_init__(self) -> None:
        _check_names(self.prefix, self.resource)

    @property
    def hash_tag(self) -> str:
        """``{resource}``: what Redis Cluster hashes for the resource-wide keys."""
        return f"{{{self.resource}}}"

    @property
    def leader(self) -> str:
        """The reflector leader lease, an expiring hash ``holder`` / ``epoch``."""
        return f"{self.prefix}:{self.hash_tag}:leader"

    @property
    def epoch(self) -> str:
        """The leader epoch counter; never expires, so epochs only grow."""
        return f"{self.prefix}:{self.hash_tag}:epoch"

    @property
    def members(self) -> str:
        """The processors' membership: a sorted set of member id -> heartbeat deadline (ms).

        Per resource because each resource is sharded and assigned on its own; the score is a
        deadline on Redis's clock, so no two machines' clocks are ever compared.
        """
        return f"{self.prefix}:{self.hash_tag}:members"

    def shard(self, shard: int) -> ShardKeys:
        """The keys of one shard of this resource."""
        return ShardKeys(self.prefix, self.resource, shard)

    def all_keys(self) -> tuple[str, ...]:
        """Every resource-wide key (not the shards' keys)."""
        return (self.leader, self.epoch, self.members)


def _tag_and_suffix(prefix: str, name: str) -> tuple[str, str] | None:
    """``(tag, suffix)`` of ``PREFIX:{TAG}:SUFFIX``; ``None`` for any other shape."""
    head = f"{prefix}:{{"
    if not name.startswith(head):
        return None
    tag, sep, suffix = name[len(head) :].partition("}:")
    return (tag, suffix) if sep and tag else None


def parse_shard_key(prefix: str, name: str) -> ShardKeys | None:
    """The shard whose key ``name`` is (one of :data:`SHARD_KEY_SUFFIXES` under ``prefix``);
    ``None`` for any other key name.

    The inverse of :class:`ShardKeys`'s properties, for tools that find shards by scanning
    the keyspace (``status``, ``subscribe``): ``parse_shard_key(k.prefix, name) == k`` for
    every ``name`` in ``k.all_keys()``, and nothing else parses.
    """
    parts = _tag_and_suffix(prefix, name)
    if parts is None or parts[1] not in SHARD_KEY_SUFFIXES:
        return None
    resource, colon, number = parts[0].rpartition(":")
    if not colon or _SHARD_NUMBER.fullmatch(number) is None:
        return None
    try:
        return ShardKeys(prefix, resource, int(number))
    except ValueError:  # not a name ShardKeys would spell (empty resource, whitespace)
        return None


def parse_resource_key(prefix: str, name: str) -> ResourceKeys | None:
    """The resource whose resource-wide key ``name`` is (one of :data:`RESOURCE_KEY_SUFFIXES`
    under ``prefix``); ``None`` for any other key name, shard keys included."""
    parts = _tag_and_suffix(prefix, name)
    if parts is None or parts[1] not in RESOURCE_KEY_SUFFIXES:
        return None
    try:
        return ResourceKeys(prefix, parts[0])
    except ValueError:
        return None
