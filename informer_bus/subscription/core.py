"""What both kinds of subscription are: a lazy, closable reader of a resource's shard streams,
iterated with ``for`` over a blocking client or with ``async for`` over ``redis.asyncio``.

Making one talks to nobody; it opens (finds the shards, sets up its position) when its
``with`` or ``async with`` block starts, or at the first read. Every Redis conversation is a
generator (:mod:`common.redis_conversation`) that this class runs either way, so the blocking
and the asyncio reader share each command, each decoding and each acknowledgement rule; only
:meth:`__next__` and :meth:`__anext__` (and their open and close) are written twice, a few
lines each.
"""

from __future__ import annotations

import abc
import heapq
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self

from common.redis_config import is_cluster
from common.redis_conversation import Conversation, converse, converse_async
from common.redis_layout import ShardKeys
from common.wire import WireDecodeError, envelope_from_fields
from informer_bus.subscription.connection import Connector
from informer_bus.subscription.delta import SubscribedDelta, UndecodableEntry
from informer_bus.subscription.options import Selection, StopSignal, SubscribeError
from informer_bus.subscription.published_shards import PublishedShards, find_shards
from informer_bus.subscription.stream_replies import Batches, entry_order, text

__all__ = ["SubscriptionCore", "Yielded", "log_undecodable"]

log = logging.getLogger("informer_bus.subscription")


def log_undecodable(entry: UndecodableEntry) -> None:
    log.warning(
        "skipping undecodable entry %s on %s: %s", entry.entry_id, entry.stream, entry.error
    )


@dataclass(frozen=True, slots=True)
class Yielded:
    """What the caller was handed last: what being done with it takes (a durable subscription
    acknowledges it)."""

    entry: tuple[str, str] | None
    """``(stream, entry ID)``; ``None`` for an initial-list delta."""
    ends_initial_list: int | None = None
    """The shard whose initial list it completes."""


class SubscriptionCore(abc.ABC):
    """Opening, reading, merging, decoding, filtering, closing; the two kinds add where they
    start (:meth:`_begin`), how they read (:meth:`_fetch`), what being done with a delta
    means (:meth:`_settle`) and what closing does (:meth:`_finish`)."""

    def __init__(
        self,
        selection: Selection,
        connector: Connector,
        *,
        stop: StopSignal | None,
        wait: bool,
        on_waiting: Callable[[str], None] | None,
    ) -> None:
        self._selection = selection
        self._connector = connector
        self._stop = stop
        self._wait = wait
        self._on_waiting = on_waiting
        self.resource = selection.resource
        self.prefix = selection.prefix
        self.shards: tuple[ShardKeys, ...] = ()
        self.shard_count = 0
        """Found when the subscription opens (given, or from the keys in Redis)."""
        self.layout: Any = None
        """What the reflector recorded of the resource (its API version, scope), as found when
        the subscription opened (a ``common.publication.ResourceLayout``); ``None`` when it
        recorded nothing (an older reflector)."""
        self._client: Any = None
        self._owns_client = False
        self._asynchronous = False
        self._started = False
        self._closed = False
        self._shard_of: dict[str, int] = {}
        self._ready: Iterator[SubscribedDelta] = iter(())
        self._current: Yielded | None = None

    # -- what each kind adds ------------------------------------------------------------------

    @abc.abstractmethod
    def _begin(self, found: PublishedShards, *, cluster: bool) -> Conversation[None]:
        """Take up a position on the shards found (the first deltas may go to :attr:`_ready`)."""

    @abc.abstractmethod
    def _fetch(self) -> Conversation[Batches]:
        """One read of every shard after the position (blocking ``block_ms`` at most)."""

    def _settle(self) -> None:
        """The caller is done with the delta handed out last (:attr:`_current`)."""
        self._current = None

    def _skipped(self, stream: str, entry_id: str) -> None:
        """An entry nobody will see (filtered out, or undecodable): nothing to do for it."""
        del stream, entry_id

    def _finish(self, *, processed: bool) -> Conversation[None]:
        """Closing: ``processed`` is false when the caller's block raised. Nothing to say."""
        del processed
        yield from ()

    # -- the shared reading -------------------------------------------------------------------

    def _stopped(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _start(self, *, cluster: bool) -> Conversation[None]:
        found = yield from find_shards(
            self._selection,
            where=self._connector.where,
            wait=self._wait,
            on_waiting=self._on_waiting,
            stop=self._stop,
        )
        self.layout = found.layout
        self.shards = found.shards
        self.shard_count = len(found.shards)
        self._shard_of = {keys.stream: keys.shard for keys in self.shards}
        yield from self._begin(found, cluster=cluster)
        self._started = True

    def _next_ready(self) -> SubscribedDelta | None:
        """The caller asked for the next delta, so it is done with the last one."""
        self._settle()
        return next(self._ready, None)

    def _merged(self, batches: Batches) -> Iterator[SubscribedDelta]:
        """One read's entries merged by entry ID, i.e. by the time Redis appended them: each
        shard's own order is kept exactly; across shards it is the best a reader of several
        streams can do."""
        merged = heapq.merge(
            *(
                [(entry_order(entry_id), stream, entry_id, fields) for entry_id, fields in batch]
                for stream, batch in batches
            ),
            key=lambda item: item[0],
        )
        for _, stream, raw_id, fields in merged:
            entry_id = text(raw_id)
            delta = self._decode(stream, self._shard_of[stream], entry_id, fields)
            if delta is not None and self._selection.wanted(delta):
                self._current = Yielded((stream, entry_id))
                yield delta
            else:
                self._skipped(stream, entry_id)

    def _decode(
        self, stream: str, shard: int, entry_id: str, fields: Any
    ) -> SubscribedDelta | None:
        try:
            envelope = envelope_from_fields(fields)
        except WireDecodeError as exc:
            self._selection.on_undecodable(UndecodableEntry(stream, shard, entry_id, exc))
            return None
        return SubscribedDelta(stream, shard, entry_id, envelope)

    # -- blocking: with, for ------------------------------------------------------------------

    def open(self) -> Self:
        """Find the shards and take up the position (what ``with`` does first; the first
        ``next`` does it too). Raises :class:`SubscribeError` for a resource nobody publishes
        (unless ``wait``), a group processors use, and redis-py's errors when Redis cannot be
        reached; the subscription is then closed."""
        if self._client is not None:
            self._check_mode(asynchronous=False)
            return self
        if self._closed:
            raise SubscribeError("the subscription is closed")
        self._client, self._owns_client = self._connector.blocking()
        try:
            converse(self._client, self._start(cluster=is_cluster(self._client)))
        except BaseException:
            self._close(processed=True)
            raise
        return self

    def __enter__(self) -> Self:
        return self.open()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> SubscribedDelta:
        if self._closed:
            raise StopIteration
        self.open()
        while True:
            delta = self._next_ready()
            if delta is not None:
                return delta
            if self._stopped() or self._closed:
                raise StopIteration
            batches = converse(self._client, self._fetch())
            self._ready = self._merged(batches)

    def close(self) -> None:
        """End the iteration; closes the Redis client if the subscription made it from a URL.
        A durable subscription first acknowledges every delta it yielded."""
        self._close(processed=True)

    def __exit__(self, *exc_info: object) -> None:
        """Normally as :meth:`close`; after an exception a durable subscription leaves the delta
        being processed when it was raised unacknowledged (redelivered on the next start)."""
        self._close(processed=not exc_info or exc_info[0] is None)

    def _close(self, *, processed: bool) -> None:
        client = self._detach(asynchronous=False)
        if client is None:
            return
        try:
            if self._started:
                converse(client, self._finish(processed=processed))
        finally:
            if self._owns_client:
                client.close()

    # -- asyncio: async with, async for -------------------------------------------------------

    async def _open_async(self) -> None:
        if self._client is not None:
            self._check_mode(asynchronous=True)
            return
        if self._closed:
            raise SubscribeError("the subscription is closed")
        self._client, self._owns_client = self._connector.asynchronous()
        self._asynchronous = True
        try:
            await converse_async(self._client, self._start(cluster=False))
        except BaseException:
            await self._aclose(processed=True)
            raise

    async def __aenter__(self) -> Self:
        await self._open_async()
        return self

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SubscribedDelta:
        if self._closed:
            raise StopAsyncIteration
        await self._open_async()
        while True:
            delta = self._next_ready()
            if delta is not None:
                return delta
            if self._stopped() or self._closed:
                raise StopAsyncIteration
            batches = await converse_async(self._client, self._fetch())
            self._ready = self._merged(batches)

    async def aclose(self) -> None:
        """:meth:`close` for a subscription read with ``async for``."""
        await self._aclose(processed=True)

    async def __aexit__(self, *exc_info: object) -> None:
        """As :meth:`__exit__`; a cancellation is an exception like any other."""
        await self._aclose(processed=not exc_info or exc_info[0] is None)

    async def _aclose(self, *, processed: bool) -> None:
        client = self._detach(asynchronous=True)
        if client is None:
            return
        try:
            if self._started:
                await converse_async(client, self._finish(processed=processed))
        finally:
            if self._owns_client:
                await client.aclose()

    def _detach(self, *, asynchronous: bool) -> Any:
        """Marks the subscription closed and hands over its client to finish with (``None``
        when there is none, or it was closed before: a second close must not acknowledge
        anything), in one place for both the blocking and the asyncio close."""
        if self._closed:
            return None
        self._check_mode(asynchronous=asynchronous)
        self._closed = True
        self._ready = iter(())
        client, self._client = self._client, None
        return client

    def _check_mode(self, *, asynchronous: bool) -> None:
        if self._client is not None and self._asynchronous != asynchronous:
            raise SubscribeError(
                "this subscription was opened with "
                + (
                    "'async with': use 'async for' and aclose()"
                    if self._asynchronous
                    else "'with': use 'for' and close()"
                )
            )
