"""The durable subscriber: ``subscribe_durable(..., group=NAME)`` reads through a consumer group
of its own (:mod:`informer_bus.subscription.group_cursor`), acknowledges what the caller
processed and resumes there after a restart.

Acknowledging "what the caller processed" means: a delta is done when the caller asks for the
next one (its loop body returned), or when it closes the subscription without an exception.
That holds for ``for`` and ``async for`` alike, since both read through one core.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import redis
import redis.asyncio

from common.deltas import DeltaType
from common.redis_conversation import Conversation
from common.redis_layout import DEFAULT_PREFIX
from common.wire import WireDecodeError, decode_envelope
from informer_bus.subscription.connection import Connector
from informer_bus.subscription.core import SubscriptionCore, Yielded, log_undecodable
from informer_bus.subscription.delta import SubscribedDelta, UndecodableEntry
from informer_bus.subscription.group_cursor import GroupCursor, GroupRefused, InitialList
from informer_bus.subscription.options import DEFAULT_BATCH, Selection, StopSignal, SubscribeError
from informer_bus.subscription.published_shards import PublishedShards
from informer_bus.subscription.stream_replies import Batches, text

__all__ = ["DurableSubscription", "subscribe_durable"]

log = logging.getLogger("informer_bus.subscription")


class DurableSubscription(SubscriptionCore):
    """A resource's deltas through consumer group :attr:`group`, acknowledged as the caller
    is done with them (:func:`subscribe_durable` makes one).

    Use it as ``with subscription: for delta in subscription`` over a blocking client, or
    ``async with subscription: async for delta in subscription`` over ``redis.asyncio``.
    """

    def __init__(self, selection: Selection, connector: Connector, *, group: str, **opts: Any):
        super().__init__(selection, connector, **opts)
        try:
            self._cursor = GroupCursor(group, batch=selection.batch, block_ms=connector.block_ms)
        except GroupRefused as exc:
            raise SubscribeError(str(exc)) from None
        self.group = self._cursor.group
        self.initial_total = 0
        """Objects in the known state a new group yields first (0: none)."""
        self.initial_read = 0
        """How many of them were read so far (yielded, or filtered out)."""
        self.initial_shards = 0
        """Shards whose known state is yielded first (a new group's every shard; a restart's
        shards whose initial list was interrupted)."""
        self.initial_shards_done = 0

    def _begin(self, found: PublishedShards, *, cluster: bool) -> Conversation[None]:
        if not found.shards:
            return
        try:
            yield from self._cursor.join(found.shards, cluster=cluster)
        except GroupRefused as exc:
            raise SubscribeError(str(exc)) from None
        initial = self._cursor.initial
        self.initial_total = sum(len(snapshot.objects) for snapshot in initial)
        self.initial_shards = len(initial)
        self._ready = self._initial_lists(initial)

    def _fetch(self) -> Conversation[Batches]:
        return self._cursor.read()

    def _settle(self) -> None:
        """The caller is done with the delta yielded last: acknowledge it with the next read."""
        current, self._current = self._current, None
        if current is None:
            return
        if current.entry is not None:
            self._cursor.processed(*current.entry)
        if current.ends_initial_list is not None:
            self._cursor.initial_done(current.ends_initial_list)

    def _skipped(self, stream: str, entry_id: str) -> None:
        self._cursor.processed(stream, entry_id)  # nobody will process it: done as it is

    def _finish(self, *, processed: bool) -> Conversation[None]:
        if processed:
            self._settle()
            yield from self._cursor.flush()
            return
        # Acknowledge what was processed on the way out of a failure, which may be Redis's:
        # whatever is not acknowledged now is only redelivered, so a failure here is logged.
        try:
            yield from self._cursor.flush()
        except redis.RedisError as exc:
            log.warning("could not acknowledge the processed deltas (redelivered): %s", exc)

    def _initial_lists(self, snapshots: list[InitialList]) -> Iterator[SubscribedDelta]:
        for snapshot in snapshots:
            deltas = itertools.chain(self._initial_deltas(snapshot), [None])
            held = next(deltas)
            if held is None:
                self._cursor.initial_done(snapshot.shard)
            while held is not None:
                following = next(deltas)  # one ahead: the last one ends the shard's list
                if self._stopped():
                    return
                self._current = Yielded(None, None if following else snapshot.shard)
                yield held
                held = following
            self.initial_shards_done += 1
            snapshot.objects.clear()  # yielded: its memory can go

    def _initial_deltas(self, snapshot: InitialList) -> Iterator[SubscribedDelta]:
        """A shard's known state as ``Added`` deltas, decoded as they are asked for (all at
        once, 30,000 objects kept the first line waiting for seconds)."""
        keys = self.shards[snapshot.shard]
        for key, raw in sorted(snapshot.objects.items()):
            self.initial_read += 1
            try:
                envelope = decode_envelope(raw)
            except WireDecodeError as exc:
                self._selection.on_undecodable(
                    UndecodableEntry(keys.objects, keys.shard, text(key), exc)
                )
                continue
            added = dataclasses.replace(envelope, type=DeltaType.ADDED)
            delta = SubscribedDelta(keys.stream, keys.shard, snapshot.last_id, added, initial=True)
            if self._selection.wanted(delta):
                yield delta


def subscribe_durable(
    client_or_url: redis.Redis | redis.asyncio.Redis | str,
    resource: str,
    group: str,
    *,
    types: Iterable[DeltaType | str] | None = None,
    namespace: str | None = None,
    shard_count: int | None = None,
    prefix: str = DEFAULT_PREFIX,
    stop: StopSignal | None = None,
    block_ms: int | None = None,
    batch: int = DEFAULT_BATCH,
    on_undecodable: Callable[[UndecodableEntry], None] | None = None,
    connection: Mapping[str, Any] | None = None,
    cluster: bool = False,
    wait: bool = False,
    on_waiting: Callable[[str], None] | None = None,
) -> DurableSubscription:
    """A :class:`DurableSubscription` to ``resource``'s deltas as consumer group ``group``.

    The arguments are :func:`~informer_bus.subscription.subscribe`'s, less ``start``: the group
    knows where it stands. Nothing is read until it opens (its ``with`` or ``async with`` block,
    or the first read); a bad group name raises :class:`SubscribeError` here, a group that
    processors use (live members, a held shard lease) when it opens.

    Asking for the next delta acknowledges the previous ones (one ``XACK`` per shard and read),
    ``close()`` and leaving the ``with`` block normally acknowledge everything yielded, leaving
    it with an exception (a cancellation too) does not acknowledge the delta being processed;
    a restart redelivers what was not acknowledged (at least once, each key in order). A new
    group first yields the known state as ``Added`` deltas with ``initial`` set, then the
    stream after it. Filtered-out and undecodable entries are acknowledged (the warning names
    the entry). Run one subscriber per group: ``processors`` and groups processors use are
    refused.
    """
    selection = Selection.of(
        resource,
        prefix=prefix,
        shard_count=shard_count,
        types=types,
        namespace=namespace,
        batch=batch,
        on_undecodable=on_undecodable or log_undecodable,
    )
    connector = Connector(
        client_or_url, block_ms=block_ms, connection=connection or {}, cluster=cluster
    )
    return DurableSubscription(
        selection, connector, group=group, stop=stop, wait=wait, on_waiting=on_waiting
    )
