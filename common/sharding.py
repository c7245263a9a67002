"""Which shard an object belongs to, and the Redis keys of one shard.

Per-object order needs one stream per shard with one active reader (reference: Redis Streams),
so every delta of an object must land on the same shard, in every process, on every machine,
after every restart and upgrade: :func:`shard_for` maps a cache key (``"ns/name"`` or
``"name"``) to a shard with a fixed, specified hash, never Python's per-process salted ``hash``.

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
from hashlib import blake2b
from typing import Final

__all__ = [
    "DEFAULT_PREFIX",
    "ResourceKeys",
    "ShardKeys",
    "shard_for",
]

DEFAULT_PREFIX: Final = "ib"
"""The key prefix informer-bus uses unless configured otherwise."""

# Braces would move or split the hash tag, whitespace breaks logs and redis-cli; ':' is allowed
# in a resource (the shard number is always the part after the tag's last ':').
_BAD_NAME = re.compile(r"[{}\s]")

_from_bytes = int.from_bytes


def _check_names(prefix: object, resource: object) -> None:
    for what, name in (("prefix", prefix), ("resource", resource)):
        if type(name) is not str or not name or _BAD_NAME.search(name):
            raise ValueError(
                f"{what} must be a non-empty string without braces or whitespace, got {name!r}"
            )


def shard_for(key: str, shard_count: int) -> int:
    """The shard, in ``range(shard_count)``, that owns the object with cache key ``key``.

    BLAKE2b with an 8-byte digest, read little-endian, modulo ``shard_count``. Why this hash,
    measured on 100k keys shaped like ``ns-3/pod-12345`` and ``node-17`` (Python 3.11):

    * BLAKE2b-64: 0.5 µs per call; max deviation from an even split 2.5 % at 16 shards, 0.9 %
      at 7 -- what a random function gives (at 16 shards sampling noise is 1.2 % per shard, so
      ~2.5 % for the worst of 16), whatever the key shape. It is specified (RFC 7693), in every
      Python since 3.6 and in Go's ``golang.org/x/crypto/blake2b``, so other languages can
      compute the same shard.
    * zlib.crc32: 0.12 µs, and as even on these keys; rejected because CRC is linear over
      GF(2): for a power-of-two shard count the shard is a fixed XOR of key bits, so a family of
      names differing in the "wrong" bits all lands on one shard. The 0.4 µs it would save is
      ~1 % of what a delta costs end to end (pipelined XADD ~25-30 µs, envelope decode ~11 µs).
    * MD5 / SHA-1 (first 8 bytes): 0.65-0.68 µs, no better spread.

    The 2**64 range makes the modulo bias negligible (at most ``shard_count / 2**64``).
    Changing the hash re-shards every object: ``tests/test_sharding.py`` pins known answers.

    Raises ``ValueError`` unless ``shard_count`` is an ``int`` >= 1.
    """
    if type(shard_count) is not int or shard_count < 1:
        raise ValueError(f"shard_count must be an integer >= 1, got {shard_count!r}")
    return _from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little") % shard_count


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
