"""The bystander: ``subscribe(...)`` reads a resource's deltas with plain ``XREAD``.

It reads outside the processors' consumer groups, so it can neither steal nor acknowledge
their entries, and any number of bystanders can come and go without the processors noticing;
it forgets its position when it stops (a durable subscription does not:
:mod:`informer_bus.subscription.durable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis
import redis.asyncio

from common.deltas import DeltaType
from common.redis_conversation import Conversation
from common.redis_layout import DEFAULT_PREFIX
from informer_bus.subscription.connection import Connector
from informer_bus.subscription.core import SubscriptionCore, log_undecodable
from informer_bus.subscription.delta import UndecodableEntry
from informer_bus.subscription.options import (
    DEFAULT_BATCH,
    FROM_BEGINNING,
    FROM_NOW,
    Selection,
    StopSignal,
    check_start,
)
from informer_bus.subscription.position_cursor import PositionCursor
from informer_bus.subscription.published_shards import PublishedShards
from informer_bus.subscription.stream_replies import Batches

__all__ = ["Subscription", "subscribe"]


class Subscription(SubscriptionCore):
    """A resource's deltas from every shard, as the reflector publishes them, read with plain
    ``XREAD`` from ``start`` on (:func:`subscribe` makes one).

    Use it as ``with subscription: for delta in subscription`` over a blocking client, or
    ``async with subscription: async for delta in subscription`` over ``redis.asyncio``.
    """

    def __init__(self, selection: Selection, connector: Connector, *, start: str, **opts: Any):
        super().__init__(selection, connector, **opts)
        self._start_at = check_start(start)
        self._cursor = PositionCursor(batch=selection.batch, block_ms=connector.block_ms)

    def _begin(self, found: PublishedShards, *, cluster: bool) -> Conversation[None]:
        # Nothing was published when we opened: "from now" is every entry to come.
        start = FROM_BEGINNING if found.waited and self._start_at == FROM_NOW else self._start_at
        yield from self._cursor.start(found.shards, start, cluster=cluster)

    def _fetch(self) -> Conversation[Batches]:
        return self._cursor.read()


def subscribe(
    client_or_url: redis.Redis | redis.asyncio.Redis | str,
    resource: str,
    *,
    start: str = FROM_NOW,
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
) -> Subscription:
    """A bystander's :class:`Subscription` to ``resource``'s deltas, all shards merged.

    Nothing is read until it opens: at the start of its ``with`` (or ``async with``) block, or
    at the first read. Mistakes that need no Redis (a malformed resource, a bad ``start``, an
    unknown type, a client that decodes responses) raise :class:`SubscribeError` here; one that
    does (no reflector has published the resource, and ``wait`` is false) when it opens.

    ``client_or_url``: a ``redis://`` URL (the subscription makes and closes its client, a
    blocking or an asyncio one as it is read), a ``redis.Redis`` (read with ``for``) or a
    ``redis.asyncio.Redis`` (read with ``async for``), not decoding responses. ``resource``: the
    resource id of the keys (``pods``, ``deployments.apps``, ``pods@shop``) or the reflector's
    ``--resource`` spec. ``start``: :data:`FROM_NOW` (default: what is published after the
    subscription opens), :data:`FROM_BEGINNING`, or an entry ID, applied to every shard (IDs
    are Redis append times, so one ID is a point in time on all shards).

    ``types`` / ``namespace`` keep only those deltas (``""`` is cluster-scoped objects).
    ``shard_count``: found from the keys in Redis when ``None``. ``stop``: checked between
    reads (every ``block_ms`` at most, 2 s by default), e.g. a ``threading.Event`` or an
    ``asyncio.Event``; the iteration ends when it is set. ``on_undecodable``: called for an
    entry that is no valid envelope, which is skipped (the default logs a warning).
    ``connection``: credentials and TLS for a URL (``common.redis_config.connection_kwargs``).
    ``cluster``: the URL names a node of a Redis Cluster (a client given instead is recognised
    by its type); there the shards are polled every 50 ms when idle, since one blocking XREAD
    cannot span slots (blocking clients only). ``wait``: when no reflector has published the
    resource yet, wait for one (calling ``on_waiting`` once with the reason) instead of
    raising; the deltas then start with the first one published.

    Order: every delta of one object is on one shard and arrives in stream order, which is the
    order that matters. Across shards the deltas are merged by entry ID within each read, so
    they come roughly in publishing order; that is best effort, not a guarantee.
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
    return Subscription(
        selection, connector, start=start, stop=stop, wait=wait, on_waiting=on_waiting
    )
