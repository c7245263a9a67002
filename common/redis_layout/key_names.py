"""The Redis keys of a resource and of its shards: the one place key names are spelled.

Key layout (:class:`ShardKeys`), for prefix ``ib``, resource ``pods``, shard 7 (the table in
``docs/architecture.md`` is the specification)::

    ib:{pods:7}:deltas       the shard's delta stream (XADD by the reflector)
    ib:{pods:7}:versions     hash key -> resourceVersion of every object the shard knows
    ib:{pods:7}:objects      hash key -> last envelope published for the key (the known state)
    ib:{pods:7}:checkpoint   hash: rv, fence, synced_rv, relisting
    ib:{pods:7}:moving       hash key -> the outgoing half of a move whose incoming half may
                             not be written yet (to shard, stream id, the move's RV)

Those five are the reflector's and every consumer reads them. Each consumer group (a processor
group, a durable subscriber) has its own keys beside them (:class:`GroupShardKeys`); the default
group ``processors`` keeps the names it had before groups existed, so deployments upgrade in
place, and any other group ``G`` puts ``group:G:`` before the suffix::

    ib:{pods:7}:lease                the default group's shard lease (holder, fencing epoch)
    ib:{pods:7}:lease_epoch          its epoch counter (never expires)
    ib:{pods:7}:dead                 its dead letters: entries it could not decode or apply
    ib:{pods:7}:initial_list         a durable subscriber's "initial list not acknowledged"
    ib:{pods:7}:expectations         a controller's unmet write expectations (its primaries)
    ib:{pods:7}:held                 the keys the group's handlers hold (told, not yet deleted)
    ib:{pods:7}:group:audit:lease    the same three for group ``audit``
    ib:{pods:7}:group:audit:lease_epoch
    ib:{pods:7}:group:audit:dead

All keys of a shard share the hash tag ``{pods:7}``, so in Redis Cluster they live in one slot:
MULTI, Lua and multi-key commands may span them (append a delta, record the known state and move
the checkpoint in one atomic step; check the fence inside the same write). Different shards get
different tags and so spread over the cluster.

Keys of a resource as a whole (:class:`ResourceKeys`) carry the tag ``{pods}``: the reflector's
leader lease ``ib:{pods}:leader``, its epoch counter ``ib:{pods}:epoch`` and the resource's
layout ``ib:{pods}:layout`` (how it is sharded, what its objects are); a group's
membership is ``ib:{pods}:members`` for the default group, ``ib:{pods}:group:G:members`` for
group ``G`` (:class:`GroupKeys`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from common.redis_layout.names import PROCESSOR_GROUP
from common.sharding import shard_for

__all__ = [
    "DEFAULT_PREFIX",
    "GROUP_KEY_SUFFIXES",
    "GROUP_NAME_SYNTAX",
    "GROUP_SHARD_KEY_SUFFIXES",
    "RESOURCE_KEY_SUFFIXES",
    "SHARD_KEY_SUFFIXES",
    "GroupKeys",
    "GroupShardKeys",
    "ResourceKeys",
    "ShardKeys",
    "check_group_name",
    "parse_group_key",
    "parse_resource_key",
    "parse_shard_key",
    "resources_key",
    "scan_pattern",
]

DEFAULT_PREFIX: Final = "ib"
"""The key prefix informer-bus uses unless configured otherwise."""

SHARD_KEY_SUFFIXES: Final = ("deltas", "versions", "objects", "checkpoint", "moving")
"""The last part of every per-shard key name, in :meth:`ShardKeys.all_keys` order."""
GROUP_SHARD_KEY_SUFFIXES: Final = (
    "lease",
    "lease_epoch",
    "dead",
    "initial_list",
    "expectations",
    "held",
)
"""The last part of a group's per-shard key names, in :meth:`GroupShardKeys.all_keys` order."""
RESOURCE_KEY_SUFFIXES: Final = ("leader", "epoch", "layout")
"""The last part of every resource-wide key name, in :meth:`ResourceKeys.all_keys` order."""
GROUP_KEY_SUFFIXES: Final = ("members",)
"""The last part of a group's resource-wide key names, in :meth:`GroupKeys.all_keys` order."""
GROUP_NAME_SYNTAX: Final = (
    "1 to 63 letters, digits, '-', '_' or '.', starting with a letter or digit"
)
"""What a group name may be, quoted in every error about one."""

_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# Where a non-default group's keys put its name: ``PREFIX:{TAG}:group:NAME:SUFFIX``.
_GROUP_INFIX: Final = "group:"

# Braces would move or split the hash tag, whitespace breaks logs and redis-cli; ':' is allowed
# in a resource (the shard number is always the part after the tag's last ':').
_BAD_NAME = re.compile(r"[{}\s]")
# A shard number as ShardKeys spells it: decimal, no sign, no leading zero.
_SHARD_NUMBER = re.compile(r"0|[1-9][0-9]*")


def resources_key(prefix: str) -> str:
    """``ib:resources``: a hash of every resource a reflector has led under ``prefix``
    (resource id -> its apiVersion), written with the resource's layout. How a reader that may
    not ``SCAN`` (a processor's minimal ACL) learns what is published, for the hint at a
    mistyped resource (``common.publication.published_alternatives``); nothing else reads it."""
    return f"{prefix}:resources"


# Redis glob metacharacters, escaped so that a prefix or resource id is matched literally.
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\^])")


def _glob_literal(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def scan_pattern(prefix: str, resource: str | None = None) -> str:
    """The ``SCAN MATCH`` pattern of every key that carries a hash tag under ``prefix`` (every
    shard, resource and group key: what the ``parse_*`` functions read), or with ``resource``
    of every per-shard key of that resource. ``prefix`` and ``resource`` match literally."""
    if resource is None:
        return f"{_glob_literal(prefix)}:{{*}}:*"
    return f"{_glob_literal(prefix)}:{{{_glob_literal(resource)}:*}}:*"


def check_group_name(name: object) -> str:
    """``name`` if it can name a consumer group (:data:`GROUP_NAME_SYNTAX`), else ``ValueError``.

    No ``:`` (the key parser splits on it), no braces or whitespace (hash tags, logs): the group
    name is spelled into key names and Prometheus labels as it is.
    """
    if type(name) is not str or _GROUP_NAME.fullmatch(name) is None:
        raise ValueError(f"group name {name!r} is invalid: {GROUP_NAME_SYNTAX}")
    return name


def _group_part(group: str) -> str:
    """What a group's key names carry between the hash tag and the suffix."""
    return "" if group == PROCESSOR_GROUP else f"{_GROUP_INFIX}{group}:"


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
    def moving(self) -> str:
        """Hash key -> ``"<to shard> <stream id> <rv>"``: the outgoing halves of moves written
        on this shard whose incoming halves on ``to shard`` may not be written yet.

        A move is written in two steps (the incoming half names the outgoing half's stream id,
        which only exists once Redis ran it), so a crash can fall between them. The key is then
        known nowhere, and this entry is what lets the next leader, replaying the event at
        ``rv``, write the incoming half with the right id. Written by the publish script with
        the outgoing half; removed once a checkpoint says every event up to ``rv`` is published.
        """
        return f"{self.prefix}:{self.hash_tag}:moving"

    def for_group(self, group: str = PROCESSOR_GROUP) -> GroupShardKeys:
        """The keys consumer group ``group`` keeps on this shard."""
        return GroupShardKeys(self, group)

    def all_keys(self) -> tuple[str, ...]:
        """Every key of this shard (e.g. to delete or inspect a shard as a whole)."""
        return (
            self.stream,
            self.versions,
            self.objects,
            self.checkpoint,
            self.moving,
        )


@dataclass(frozen=True, slots=True)
class GroupShardKeys:
    """What one consumer group keeps on one shard: its lease, epoch counter and dead letters.

    A group (the consumer group of the same name on the shard's stream) is one application on
    the watch; its keys are its own, so its owners, fencing and dead letters never touch
    another group's. The stream, known state and checkpoint are the shard's (:attr:`shard_keys`)
    and shared by every group. Raises ``ValueError`` for a bad group name
    (:func:`check_group_name`).
    """

    shard_keys: ShardKeys
    group: str = PROCESSOR_GROUP
    """The consumer group's name on the stream, also the name in these keys."""

    def __post_init__(self) -> None:
        check_group_name(self.group)

    @property
    def shard(self) -> int:
        """The shard number."""
        return self.shard_keys.shard

    @property
    def stream(self) -> str:
        """The shard's delta stream (shared by every group)."""
        return self.shard_keys.stream

    @property
    def objects(self) -> str:
        """The shard's known state (shared by every group)."""
        return self.shard_keys.objects

    def _key(self, suffix: str) -> str:
        keys = self.shard_keys
        return f"{keys.prefix}:{keys.hash_tag}:{_group_part(self.group)}{suffix}"

    @property
    def lease(self) -> str:
        """The group's ownership lease of this shard (holder and fencing epoch)."""
        return self._key("lease")

    @property
    def lease_epoch(self) -> str:
        """The counter that hands out :attr:`lease`'s fencing epochs.

        A separate key because the lease hash expires and the counter must not: an epoch that
        restarted from 1 after a lapse would let a stale owner's acknowledgements through.
        """
        return self._key("lease_epoch")

    @property
    def dead_letters(self) -> str:
        """The group's dead-letter stream: entries it could not decode or apply.

        Each entry carries ``reason``, the original stream ``id`` and the raw payload when there
        was one. A stream beside the shard's (same hash tag) so that parking an entry and
        acknowledging it happen in one fenced script.
        """
        return self._key("dead")

    @property
    def initial_list(self) -> str:
        """A durable subscriber's marker: set while the initial list it started this shard
        with (the known state) is not acknowledged yet, so a restart delivers it again."""
        return self._key("initial_list")

    @property
    def expectations(self) -> str:
        """Hash: controllers' unmet write expectations for the primaries of this shard (field
        ``<controller name> <queue key>``, value JSON), so that the next owner of the shard does
        not reconcile on a cache older than the previous owner's last write
        (``processor_svc.expectations``, ``processor_svc.write_barrier``)."""
        return self._key("expectations")

    @property
    def held(self) -> str:
        """Hash: the keys the group's handlers hold on this shard -- told about, not yet told
        were deleted -- each with the state (as the group's view keeps it) it entered with,
        ``""`` for a group without a view. Written when a key enters or leaves, in the fenced
        script that acknowledges the entry, so a new owner knows what to tell of keys that
        vanished or left the view while nobody owned the shard (``processor_svc.held_keys``)."""
        return self._key("held")

    def all_keys(self) -> tuple[str, ...]:
        """Every key of this group on this shard."""
        return (
            self.lease,
            self.lease_epoch,
            self.dead_letters,
            self.initial_list,
            self.expectations,
            self.held,
        )

    def removable_keys(self) -> tuple[str, ...]:
        """What deleting the group removes here: everything but :attr:`lease_epoch`. Epochs
        must never go backwards, or a paused owner of a group created again under the same
        name could acknowledge with an epoch the new lease reuses."""
        return (
            self.lease,
            self.dead_letters,
            self.initial_list,
            self.expectations,
            self.held,
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
    def layout(self) -> str:
        """Hash: how the reflector shards the resource and what its objects are (shard count,
        shard key, kind, apiVersion, scope), so that readers need not be told
        (:class:`common.publication.ResourceLayout`). Written by the leader as it starts."""
        return f"{self.prefix}:{self.hash_tag}:layout"

    def group(self, group: str = PROCESSOR_GROUP) -> GroupKeys:
        """The keys of consumer group ``group`` of this resource."""
        return GroupKeys(self, group)

    def shard(self, shard: int) -> ShardKeys:
        """The keys of one shard of this resource."""
        return ShardKeys(self.prefix, self.resource, shard)

    def all_keys(self) -> tuple[str, ...]:
        """Every resource-wide key (not the shards' keys)."""
        return (self.leader, self.epoch, self.layout)


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """The keys of one consumer group of a resource: its membership and, per shard, its own
    :class:`GroupShardKeys`. Raises ``ValueError`` for a bad group name."""

    resource_keys: ResourceKeys
    group: str = PROCESSOR_GROUP

    def __post_init__(self) -> None:
        check_group_name(self.group)

    @property
    def members(self) -> str:
        """The group's live members: a sorted set of member id -> heartbeat deadline (ms).

        Per resource and group because each group shards and assigns the resource on its own;
        the score is a deadline on Redis's clock, so no two machines' clocks are ever compared.
        """
        keys = self.resource_keys
        return f"{keys.prefix}:{keys.hash_tag}:{_group_part(self.group)}members"

    def shard(self, shard: int) -> GroupShardKeys:
        """The group's keys on one shard."""
        return GroupShardKeys(self.resource_keys.shard(shard), self.group)

    def all_keys(self) -> tuple[str, ...]:
        """The group's resource-wide keys (not its per-shard keys)."""
        return (self.members,)


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
    return _shard_of_tag(prefix, parts[0])


def parse_group_key(prefix: str, name: str) -> GroupShardKeys | GroupKeys | None:
    """The group key ``name`` belongs to: :class:`GroupShardKeys` for a group's per-shard key,
    :class:`GroupKeys` for its membership; ``None`` for any other key name.

    For tools that find groups by scanning (``status``, ``groups``): every name in
    ``g.all_keys()`` parses back to ``g``.
    """
    parts = _tag_and_suffix(prefix, name)
    if parts is None:
        return None
    tag, suffix = parts
    group = PROCESSOR_GROUP
    if suffix.startswith(_GROUP_INFIX):
        group, colon, suffix = suffix[len(_GROUP_INFIX) :].partition(":")
        if not colon or group == PROCESSOR_GROUP or _GROUP_NAME.fullmatch(group) is None:
            return None
    try:
        if suffix in GROUP_KEY_SUFFIXES:
            return GroupKeys(ResourceKeys(prefix, tag), group)
        if suffix in GROUP_SHARD_KEY_SUFFIXES:
            shard = _shard_of_tag(prefix, tag)
            return None if shard is None else GroupShardKeys(shard, group)
    except ValueError:
        return None
    return None


def _shard_of_tag(prefix: str, tag: str) -> ShardKeys | None:
    resource, colon, number = tag.rpartition(":")
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
