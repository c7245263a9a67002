"""A subscription's shards, once something publishes its resource.

Published means a reflector leads it or has listed it, or some shard stream has entries (any
publisher): empty streams with no reflector behind them (processors of older versions created
them) would be read forever, silently. Both kinds of subscription find their shards here, as a
conversation (:mod:`common.redis_conversation`), so a blocking and an asyncio client ask alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from common.publication import (
    ResourceLayout,
    hint_published,
    publication_conversation,
    published_alternatives_conversation,
)
from common.redis_conversation import Commands, Conversation, Pause, call
from common.redis_layout import ShardKeys
from informer_bus.discovery import shard_count_conversation
from informer_bus.subscription.options import Selection, StopSignal, SubscribeError

__all__ = ["PublishedShards", "find_shards"]

_REFLECTOR_POLL_SECONDS: Final = 0.5
"""How often a subscriber waiting for a reflector (``wait=True``) looks again."""


@dataclass(frozen=True, slots=True)
class PublishedShards:
    shards: tuple[ShardKeys, ...]
    """Every shard's keys (none when ``stop`` was set while waiting)."""
    waited: bool
    """Nothing was published when the subscription opened: it waited for a reflector."""
    layout: ResourceLayout | None
    """What the reflector recorded of the resource (``None``: nothing, an older reflector)."""


def find_shards(
    selection: Selection,
    *,
    where: str,
    wait: bool,
    on_waiting: Callable[[str], None] | None,
    stop: StopSignal | None,
) -> Conversation[PublishedShards]:
    """The shards, once something publishes the resource. Without ``wait`` an unpublished
    resource raises :class:`SubscribeError`; with it, ``on_waiting`` hears why once and we look
    again every half second until then, or until ``stop`` is set (no shards)."""
    prefix, resource = selection.prefix, selection.resource
    waited = False
    while True:
        count = selection.shard_count or (yield from shard_count_conversation(prefix, resource))
        layout = None
        if count:
            publication = yield from publication_conversation(
                prefix=prefix, resource=resource, shard_count=count
            )
            layout = publication.layout
            shards = tuple(ShardKeys(prefix, resource, shard) for shard in range(count))
            if publication.has_reflector or (yield from _has_entries(shards)):
                return PublishedShards(shards, waited, layout)
        why = yield from _unpublished_message(selection, count, where)
        if not wait:
            raise SubscribeError(why + "; --wait waits for one")
        if not waited and on_waiting is not None:
            on_waiting(why)
        waited = True
        if stop is not None and stop.is_set():
            return PublishedShards((), waited, layout)
        yield Pause(_REFLECTOR_POLL_SECONDS)


def _has_entries(shards: tuple[ShardKeys, ...]) -> Conversation[bool]:
    lengths: list[int] = yield Commands(tuple(call("xlen", keys.stream) for keys in shards))
    return any(lengths)


def _unpublished_message(selection: Selection, shard_count: int, where: str) -> Conversation[str]:
    prefix, resource = selection.prefix, selection.resource
    looked_for = ShardKeys(prefix, resource, 0).stream.replace(":0}", ":*}")
    found = (
        f"its {shard_count} shard streams are empty and no reflector leads or has listed it"
        if shard_count
        else f"looked for {looked_for} and its :checkpoint keys"
    )
    alternatives = yield from published_alternatives_conversation(prefix=prefix, resource=resource)
    return (
        f"no reflector has published resource {resource!r} under prefix {prefix!r} in {where} "
        f"({found}){hint_published(alternatives)}: is one running with this --resource, "
        "--redis-url and --prefix?"
    )
