"""Whether a reflector has published a resource: what readers check before trusting its shards.

Deployments start in any order, so a processor or a subscriber may well come up before the
reflector of its resource, or be pointed at a resource (``pod`` for ``pods``) that no reflector
will ever publish. Either way the shard streams are empty, and an empty stream looks exactly
like a resource that has no objects: a reader must not conclude "synced" from it.

The marker is the one the reflector itself leaves: when a relist completes it records
``synced_rv`` in every shard's checkpoint (``docs/architecture.md``, "Redis layout"), and never
removes it. A shard whose checkpoint has it holds a complete list; a resource is *published*
when every shard has one. The reflector leader lease (held while a replica leads, before its
first list completes) tells "a reflector is on its way" apart from "no reflector at all".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from common.redis_conversation import Commands, Conversation, Recorder, converse
from common.redis_layout import (
    LAYOUT_API_VERSION,
    LAYOUT_KIND,
    LAYOUT_NAMESPACED,
    LAYOUT_SHARD_COUNT,
    LAYOUT_SHARD_KEY,
    ResourceKeys,
    ShardKeys,
    resources_key,
)
from common.redis_layout.checkpoint import is_listed, queue_listed
from common.redis_layout.lease_reads import decode_holder, queue_holder
from common.redis_replies import as_text
from common.resource_ids import likely_meant, word_forms
from common.shard_routing import ShardKeyChoice

__all__ = [
    "Publication",
    "ResourceLayout",
    "hint_published",
    "publication_conversation",
    "published_alternatives",
    "published_alternatives_conversation",
    "read_publication",
    "write_layout",
]


@dataclass(frozen=True, slots=True)
class ResourceLayout:
    """How a reflector shards a resource and what its objects are (``ResourceKeys.layout``).

    Readers learn from it what they would otherwise have to be told again, and could be told
    wrong: a processor routes a cache lookup by key only if the resource is sharded by something
    the key names (:attr:`ShardKeyChoice.key_names_shard`), and maps a child's owner reference to
    its primary's key by the primary's kind, apiVersion and scope.
    """

    shard_count: int
    shard_key: ShardKeyChoice
    kind: str
    api_version: str
    namespaced: bool

    @property
    def group(self) -> str:
        """The API group of :attr:`api_version` (``""`` for the core group)."""
        group, slash, _ = self.api_version.rpartition("/")
        return group if slash else ""

    def to_fields(self) -> dict[str, str]:
        return {
            LAYOUT_SHARD_COUNT: str(self.shard_count),
            LAYOUT_SHARD_KEY: str(self.shard_key),
            LAYOUT_KIND: self.kind,
            LAYOUT_API_VERSION: self.api_version,
            LAYOUT_NAMESPACED: "1" if self.namespaced else "0",
        }

    @classmethod
    def from_fields(cls, fields: Mapping[bytes | str, bytes | str]) -> ResourceLayout | None:
        """The layout a hash holds; ``None`` when it holds none (a reflector from before
        layouts); ``ValueError`` (one line) when what it holds is unusable."""
        text = {as_text(name): as_text(value) for name, value in fields.items()}
        if not text:
            return None
        try:
            return cls(
                shard_count=int(text[LAYOUT_SHARD_COUNT]),
                shard_key=ShardKeyChoice.parse(text[LAYOUT_SHARD_KEY]),
                kind=text[LAYOUT_KIND],
                api_version=text[LAYOUT_API_VERSION],
                namespaced=text[LAYOUT_NAMESPACED] == "1",
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"unusable resource layout {text!r}: {exc}") from None


def write_layout(
    client: redis.Redis, *, prefix: str, resource: str, layout: ResourceLayout
) -> None:
    """Record ``layout`` (the reflector leader, as it starts leading), and the resource among
    those published under ``prefix`` (:func:`~common.redis_layout.resources_key`)."""
    fields: Any = layout.to_fields()  # redis-py's mapping type is invariant in its keys
    with client.pipeline(transaction=False) as pipe:  # two slots: no transaction on a Cluster
        pipe.hset(ResourceKeys(prefix, resource).layout, mapping=fields)
        pipe.hset(resources_key(prefix), resource, layout.api_version)
        pipe.execute()


def hint_published(names: Sequence[str]) -> str:
    """`` (did you mean widgets.example.com? it is published)``, or ``""`` for no names."""
    return f" (did you mean {' or '.join(names)}? it is published)" if names else ""


def published_alternatives(client: redis.Redis, *, prefix: str, resource: str) -> list[str]:
    """The published resources ``resource`` (which is not) is likely a slip of
    (:func:`common.resource_ids.likely_meant`), for "did you mean widgets.example.com? it is
    published". What is published is read from the reflectors' list of their resources, plus
    ``resource``'s singular or plural (a reflector from before that list); each is kept only
    if a reflector completed a list of it. Best effort (``[]`` when Redis fails): it only
    decorates a message. ``HGETALL`` and ``HGET`` only: a processor's minimal ACL has no
    ``SCAN``."""
    return converse(client, published_alternatives_conversation(prefix=prefix, resource=resource))


def published_alternatives_conversation(*, prefix: str, resource: str) -> Conversation[list[str]]:
    """:func:`published_alternatives` as a conversation (for a blocking or an asyncio client)."""
    try:
        (listed,) = yield Commands.one("hgetall", resources_key(prefix))
        known = [as_text(name) for name in listed] + word_forms(resource)
        candidates = likely_meant(resource, known)
        if not candidates:
            return []
        pipe = Recorder()
        for candidate in candidates:
            queue_listed(pipe, ShardKeys(prefix, candidate, 0))
        listed_rvs = yield pipe.commands()
    except (redis.RedisError, ValueError):  # unreachable, or a name that is no resource id
        return []
    return [name for name, rv in zip(candidates, listed_rvs, strict=True) if is_listed(rv)]


@dataclass(frozen=True, slots=True)
class Publication:
    """What Redis says about a resource's reflector, read in one round trip."""

    shard_count: int
    listed_shards: tuple[int, ...]
    """The shards whose checkpoint records a completed list."""
    leader: bool
    """A reflector replica holds the resource's leader lease right now."""
    listed_beyond: bool = False
    """Shard ``shard_count`` holds a completed list too: the reflector uses more shards than
    the reader was told, and the reader would never see those shards' objects."""
    layout: ResourceLayout | None = None
    """What the reflector recorded of the resource (``None``: nothing, an older reflector)."""

    @property
    def complete(self) -> bool:
        """Every shard holds a complete list: safe to take the shards over and call them synced."""
        return len(self.listed_shards) == self.shard_count

    @property
    def has_reflector(self) -> bool:
        """A reflector leads, or has completed a list at least once."""
        return self.leader or bool(self.listed_shards)

    @property
    def unlisted_shards(self) -> tuple[int, ...]:
        listed = set(self.listed_shards)
        return tuple(shard for shard in range(self.shard_count) if shard not in listed)


def read_publication(
    client: redis.Redis, *, prefix: str, resource: str, shard_count: int
) -> Publication:
    """One pipelined read of the leader lease's holder and every shard's ``synced_rv``;
    raises ``redis.RedisError`` when Redis cannot be read, ``ValueError`` when the recorded
    layout is unusable. Only ``HGET`` and ``HGETALL``: a processor's minimal ACL
    (``docs/operations.md``) has them, not ``EXISTS`` or ``HEXISTS``."""
    return converse(
        client, publication_conversation(prefix=prefix, resource=resource, shard_count=shard_count)
    )


def publication_conversation(
    *, prefix: str, resource: str, shard_count: int
) -> Conversation[Publication]:
    """:func:`read_publication` as a conversation (for a blocking or an asyncio client)."""
    keys = ResourceKeys(prefix, resource)
    pipe = Recorder()
    queue_holder(pipe, keys.leader)
    pipe.hgetall(keys.layout)
    for shard in range(shard_count + 1):  # one more: is the reflector's shard count larger?
        queue_listed(pipe, keys.shard(shard))
    leader, layout, *listed, beyond = yield pipe.commands()
    return Publication(
        shard_count=shard_count,
        listed_shards=tuple(shard for shard, rv in enumerate(listed) if is_listed(rv)),
        leader=decode_holder(leader) is not None,
        listed_beyond=is_listed(beyond),
        layout=ResourceLayout.from_fields(layout),
    )
