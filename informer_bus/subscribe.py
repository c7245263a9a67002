"""``informer-bus subscribe RESOURCE``: watch a resource's deltas as they reach the bus.

The Python API, for scripts, notebooks and tests (the command line is
:mod:`informer_bus.subscribe_command`)::

    from informer_bus.subscribe import subscribe

    with subscribe("redis://127.0.0.1:6390/0", "pods", start="0-0", namespace="shop") as deltas:
        for delta in deltas:
            print(delta.type, delta.key, delta.resource_version)

A subscriber is a bystander: it reads the shard streams with plain ``XREAD``, never through the
processors' consumer group, so it can neither steal nor acknowledge their entries and any number
of subscribers can come and go without the processors noticing.

Given ``group="NAME"`` it is a *durable* subscriber instead: a consumer group of its own that
acknowledges what the caller processed and resumes there after a restart
(:mod:`informer_bus.durable_subscription`)::

    with subscribe("redis://127.0.0.1:6390/0", "pods", group="audit") as deltas:
        for delta in deltas:  # asking for the next delta acknowledges this one
            record(delta)
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Protocol, Self

import redis

from common.deltas import DeltaType
from common.publication import (
    ResourceLayout,
    hint_published,
    published_alternatives,
    read_publication,
)
from common.redis_config import SentinelTarget, is_cluster, redacted_url, redis_client
from common.redis_layout import DEFAULT_PREFIX, ResourceKeys, ShardKeys, check_group_name
from common.redis_replies import as_text as _text
from common.resource_ids import resource_id_from
from common.wire import WireDecodeError, decode_envelope, envelope_from_fields
from informer_bus.discovery import discover_shard_count
from informer_bus.durable_subscription import (
    GroupCursor,
    GroupRefused,
    InitialList,
    stream_batches,
)
from informer_bus.lifecycle import Closing
from informer_bus.subscribed_delta import SubscribedDelta, UndecodableEntry

__all__ = [
    "FROM_BEGINNING",
    "FROM_NOW",
    "VALID_TYPES",
    "StopSignal",
    "SubscribeError",
    "SubscribedDelta",
    "Subscription",
    "UndecodableEntry",
    "check_start",
    "parse_types",
    "resource_id_of",
    "subscribe",
]

log = logging.getLogger(__name__)

FROM_BEGINNING: Final = "0-0"
"""``start`` for every delta still on the streams (retention may have trimmed older ones)."""
FROM_NOW: Final = "$"
"""``start`` for only the deltas published after :func:`subscribe` returns."""

DEFAULT_BLOCK_MS: Final = 2000
"""How long one ``XREAD`` waits for new entries; bounds how late a ``stop`` is noticed."""
# redis-py's socket_timeout must outlast the block, or every quiet period becomes a timeout and
# a retry (the "5 s socket_timeout trap"); this is the slack given on our own connections.
_SOCKET_TIMEOUT_MARGIN: Final = 5.0
_DEFAULT_BATCH: Final = 500
_CLUSTER_POLL_SECONDS: Final = 0.05
"""How long a subscriber on a Redis Cluster waits after a read that found nothing new."""
_REFLECTOR_POLL_SECONDS: Final = 0.5
"""How often a subscriber waiting for a reflector (``wait=True``) looks again."""

_STREAM_ID = re.compile(r"(0|[1-9][0-9]{0,19})(?:-(0|[1-9][0-9]{0,19}))?")
_UINT64_MAX: Final = 2**64 - 1
VALID_TYPES: Final = ", ".join(member.value for member in DeltaType)


class SubscribeError(ValueError):
    """A subscription that cannot start (unknown resource, bad start ID, bad type, wrong client);
    the message is one line meant for a human."""


class StopSignal(Protocol):
    """Anything with ``is_set()``, e.g. a :class:`threading.Event`: checked between reads."""

    def is_set(self) -> bool: ...


def _log_undecodable(entry: UndecodableEntry) -> None:
    log.warning(
        "skipping undecodable entry %s on %s: %s", entry.entry_id, entry.stream, entry.error
    )


def resource_id_of(resource: str) -> str:
    """The resource id used in Redis keys, from an id or from the spec a reflector was given.

    ``pods``, ``deployments.apps`` and ``pods@shop`` are ids already; ``deployments.v1.apps`` or
    ``pods@shop?labelSelector=app%3Dweb`` become ``deployments.apps`` and ``pods@shop``, so a
    user can paste the reflector's ``--resource`` as is. Text that is neither (``x!!bogus``)
    raises :class:`SubscribeError`: no reflector could publish it (the rule of
    :mod:`common.resource_ids`, the same for every tool).
    """
    try:
        return resource_id_from(resource)
    except ValueError as exc:
        raise SubscribeError(str(exc)) from None


def _id_order(entry_id: bytes | str) -> tuple[int, int]:
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def check_start(start: str) -> str:
    """``start`` if it is ``$``, ``0`` or a stream entry ID (``MS`` or ``MS-SEQ``), else a
    :class:`SubscribeError` that says what is expected."""
    if start == FROM_NOW:
        return start
    match = _STREAM_ID.fullmatch(start)
    if match is None or any(int(part) > _UINT64_MAX for part in match.groups() if part):
        raise SubscribeError(
            f"invalid stream entry ID {start!r}: expected MILLISECONDS-SEQUENCE such as "
            "1714567890123-0 (or just MILLISECONDS), as printed in the 'id' field"
        )
    return start


def parse_types(names: Iterable[DeltaType | str]) -> frozenset[DeltaType]:
    """Delta types from their client-go names (any case; commas split several)."""
    by_name = {member.value.lower(): member for member in DeltaType}
    chosen: set[DeltaType] = set()
    for name in names:
        if isinstance(name, DeltaType):
            chosen.add(name)
            continue
        for part in name.split(","):
            member = by_name.get(part.strip().lower())
            if member is None:
                raise SubscribeError(f"unknown delta type {part.strip()!r}; use {VALID_TYPES}")
            chosen.add(member)
    if not chosen:
        raise SubscribeError(f"no delta type given; use {VALID_TYPES}")
    return frozenset(chosen)


def _effective_socket_timeout(client: redis.Redis) -> float | None:
    """The read timeout the client's connections use: the pool's kwargs omit the connection
    class's own default (5 s), so it is read from a connection object that is never opened."""
    pool = client.connection_pool
    connection: Any = pool.connection_class(**pool.connection_kwargs)
    timeout = getattr(connection, "socket_timeout", None)
    return None if timeout is None else float(timeout)


class Subscription(Iterator[SubscribedDelta], Closing):
    """An iterator over a resource's deltas, all shards merged (:data:`subscribe`).

    Iterate over ``resource``'s deltas from every shard, as the reflector publishes them.

    ``client_or_url``: a ``redis://`` URL (the subscription makes and closes its client) or a
    ``redis.Redis`` that does not decode responses. ``resource``: the resource id of the keys
    (``pods``, ``deployments.apps``, ``pods@shop``) or the reflector's ``--resource`` spec.
    ``start``: :data:`FROM_NOW` (default), :data:`FROM_BEGINNING`, or an entry ID, applied to
    every shard (IDs are Redis append times, so one ID is a point in time on all shards).
    ``types`` / ``namespace`` keep only those deltas (``""`` is cluster-scoped objects).
    ``shard_count``: found from the keys in Redis when ``None``. ``stop``: checked between
    reads (every ``block_ms`` at most, 2 s by default), e.g. a ``threading.Event``; the
    iteration ends when it is set. ``on_undecodable``: called for an entry that is no valid
    envelope, which is skipped (the default logs a warning). ``connection``: credentials and
    TLS for a URL (``common.redis_config.connection_kwargs``). ``cluster``: the URL names a
    node of a Redis Cluster (a client given instead is recognised by its type); there the
    shards are polled every 50 ms when idle, since one blocking XREAD cannot span slots.
    ``wait``: when no reflector has published the resource yet, wait for one (calling
    ``on_waiting`` once with the reason) instead of raising; the deltas then start with the
    first one published (``start=FROM_NOW`` meant "from the call").

    Order: every delta of one object is on one shard and arrives in stream order, which is the
    order that matters. Across shards the deltas are merged by entry ID within each read, so
    they come roughly in publishing order; that is best effort, not a guarantee.

    Raises :class:`SubscribeError` for a mistake (a malformed resource, one no reflector has
    published while ``wait`` is false, bad ``start``, unknown type) and redis-py's errors when
    Redis cannot be reached. Use it as a context manager, or call ``close()``, to release the
    connection.

    Shards and start positions are settled in the constructor, so ``start=FROM_NOW`` means
    "after this call" (not "after the first ``next``") and mistakes surface at once.

    ``group``: read as durable subscriber ``group`` instead (no ``start``: the group knows where
    it stands). Asking for the next delta acknowledges the previous ones (one ``XACK`` per shard
    and read), ``close()`` and leaving the ``with`` block normally acknowledge everything
    yielded, leaving it with an exception does not acknowledge the delta being processed; a
    restart redelivers what was not acknowledged (at least once, each key in order). A new group
    first yields the known state as ``Added`` deltas with ``initial`` set. Filtered-out and
    undecodable entries are acknowledged (the warning names the entry). A group with live
    processors, and ``processors`` itself, is refused; run one subscriber per group.
    """

    def __init__(
        self,
        client_or_url: redis.Redis | str,
        resource: str,
        *,
        start: str | None = None,
        group: str | None = None,
        types: Iterable[DeltaType | str] | None = None,
        namespace: str | None = None,
        shard_count: int | None = None,
        prefix: str = DEFAULT_PREFIX,
        stop: StopSignal | None = None,
        block_ms: int | None = None,
        batch: int = _DEFAULT_BATCH,
        on_undecodable: Callable[[UndecodableEntry], None] | None = None,
        connection: Mapping[str, Any] | None = None,
        cluster: bool = False,
        wait: bool = False,
        on_waiting: Callable[[str], None] | None = None,
    ) -> None:
        self.resource = resource_id_of(resource)
        self.prefix = prefix
        try:
            ResourceKeys(prefix, self.resource)
        except ValueError as exc:
            raise SubscribeError(str(exc)) from None
        if group is not None and start is not None:
            raise SubscribeError(
                f"a start position and group {group!r} exclude each other: a group resumes "
                "where it stopped (a new one starts with the known state)"
            )
        start = check_start(FROM_NOW if start is None else start)
        if group is not None:
            try:
                check_group_name(group)
            except ValueError as exc:
                raise SubscribeError(str(exc)) from None
        self.group = group
        self._cursor: GroupCursor | None = None
        self._initial: list[InitialList] = []
        self.initial_total = 0
        """Objects in the known state a new group prints first (0: none to print)."""
        self.initial_read = 0
        """How many of them were read so far (printed, or filtered out)."""
        self.initial_shards = 0
        """Shards whose known state is printed first (a new group's every shard; a restart's
        shards whose initial list was interrupted)."""
        self.initial_shards_done = 0
        self._current: _Yielded | None = None
        self._types = None if types is None else parse_types(types)
        self._namespace = namespace
        if shard_count is not None and (type(shard_count) is not int or shard_count < 1):
            raise SubscribeError(f"shard count must be an integer >= 1, got {shard_count!r}")
        if batch < 1:
            raise SubscribeError(f"batch must be >= 1, got {batch}")
        self._batch = batch
        self._stop = stop
        self._on_undecodable = on_undecodable or _log_undecodable
        self._connect(client_or_url, block_ms, connection or {}, cluster)
        self._cluster = is_cluster(self._client)
        self.layout: ResourceLayout | None = None
        """What the reflector recorded of the resource (its API version, scope), as found when
        the subscription started; ``None`` when it recorded nothing (an older reflector)."""
        try:
            self.shard_count, waited = self._find_shards(shard_count, wait, on_waiting)
            self.shards = tuple(
                ShardKeys(prefix, self.resource, shard) for shard in range(self.shard_count)
            )
            # Nothing was published when we were called: "from now" is every entry to come.
            self._positions = self._start_positions(
                FROM_BEGINNING if waited and start == FROM_NOW else start
            )
            if group is not None and self.shards:
                self._join(group)
        except BaseException:
            self.close()
            raise
        self._deltas = self._read()

    def _connect(
        self,
        client_or_url: redis.Redis | str,
        block_ms: int | None,
        connection: Mapping[str, Any],
        cluster: bool,
    ) -> None:
        """Our own client for a URL (its socket timeout outlasting a blocking read), or the
        caller's client as it is; ``_where`` names it in messages."""
        if not isinstance(client_or_url, str):
            self._client = client_or_url
            self._owns_client = False
            self._where = "Redis"
            self._block_ms = self._block_for(client_or_url, block_ms)
            return
        self._block_ms = DEFAULT_BLOCK_MS if block_ms is None else block_ms
        self._client = redis_client(
            client_or_url,
            cluster=cluster,
            socket_timeout=self._block_ms / 1000 + _SOCKET_TIMEOUT_MARGIN,
            socket_connect_timeout=5,
            **connection,
        )
        self._owns_client = True
        target = connection.get("sentinel")
        self._where = (
            target.describe() if isinstance(target, SentinelTarget) else redacted_url(client_or_url)
        )

    def _join(self, group: str) -> None:
        try:
            self._cursor = GroupCursor(
                self._client,
                self.shards,
                group,
                batch=self._batch,
                block_ms=self._block_ms,
                cluster=self._cluster,
            )
        except GroupRefused as exc:
            raise SubscribeError(str(exc)) from None
        self._initial = list(self._cursor.initial)
        self.initial_total = sum(len(snapshot.objects) for snapshot in self._initial)
        self.initial_shards = len(self._initial)

    def _initial_deltas(self, snapshot: InitialList) -> Iterator[SubscribedDelta]:
        """A shard's known state as ``Added`` deltas, decoded as they are asked for (all at
        once, 30,000 objects kept the first line waiting for seconds)."""
        keys = self.shards[snapshot.shard]
        for key, raw in sorted(snapshot.objects.items()):
            self.initial_read += 1
            try:
                envelope = decode_envelope(raw)
            except WireDecodeError as exc:
                self._on_undecodable(UndecodableEntry(keys.objects, keys.shard, _text(key), exc))
                continue
            added = dataclasses.replace(envelope, type=DeltaType.ADDED)
            delta = SubscribedDelta(keys.stream, keys.shard, snapshot.last_id, added, initial=True)
            if self._wanted(delta):
                yield delta

    @staticmethod
    def _block_for(client: redis.Redis, block_ms: int | None) -> int:
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise SubscribeError(
                "the Redis client decodes responses; envelopes are bytes: build it with "
                "decode_responses=False (or pass a URL)"
            )
        timeout = _effective_socket_timeout(client)
        # Half the client's read timeout leaves room for the reply, whatever the network.
        ceiling = DEFAULT_BLOCK_MS if timeout is None else max(1, int(timeout * 500))
        if block_ms is None:
            return min(DEFAULT_BLOCK_MS, ceiling)
        if block_ms > ceiling:
            raise SubscribeError(
                f"block_ms={block_ms} is not below half the client's socket_timeout ({timeout} s):"
                " blocking reads would time out"
            )
        return block_ms

    def _find_shards(
        self, shard_count: int | None, wait: bool, on_waiting: Callable[[str], None] | None
    ) -> tuple[int, bool]:
        """The shard count, once something publishes the resource; and whether we waited.

        Published means a reflector leads it or has listed it, or some shard stream has
        entries (any publisher): empty streams with no reflector behind them (processors of
        older versions created them) would be read forever, silently. Without ``wait`` that
        raises :class:`SubscribeError`; with it, ``on_waiting`` hears why once and we look
        again every half second until then, or until ``stop`` is set (0 shards).
        """
        waited = False
        while True:
            count = shard_count or discover_shard_count(self._client, self.prefix, self.resource)
            if count and self._published(count):
                return count, waited
            why = self._unpublished_message(count)
            if not wait:
                raise SubscribeError(why + "; --wait waits for one")
            if not waited and on_waiting is not None:
                on_waiting(why)
            waited = True
            if self._stop is not None and self._stop.is_set():
                return 0, waited
            time.sleep(_REFLECTOR_POLL_SECONDS)

    def _published(self, shard_count: int) -> bool:
        publication = read_publication(
            self._client, prefix=self.prefix, resource=self.resource, shard_count=shard_count
        )
        self.layout = publication.layout
        if publication.has_reflector:
            return True
        with self._client.pipeline(transaction=False) as pipe:
            for shard in range(shard_count):
                pipe.xlen(ShardKeys(self.prefix, self.resource, shard).stream)
            lengths: list[int] = pipe.execute()
        return any(lengths)

    def _unpublished_message(self, shard_count: int) -> str:
        looked_for = ShardKeys(self.prefix, self.resource, 0).stream.replace(":0}", ":*}")
        found = (
            f"its {shard_count} shard streams are empty and no reflector leads or has listed it"
            if shard_count
            else f"looked for {looked_for} and its :checkpoint keys"
        )
        hint = hint_published(
            published_alternatives(self._client, prefix=self.prefix, resource=self.resource)
        )
        return (
            f"no reflector has published resource {self.resource!r} under prefix "
            f"{self.prefix!r} in {self._where} ({found}){hint}: is one running with this "
            "--resource, --redis-url and --prefix?"
        )

    def _start_positions(self, start: str) -> dict[str, str]:
        if start != FROM_NOW:
            return {keys.stream: start for keys in self.shards}
        # "$" is resolved once, here: passing "$" to every XREAD would skip whatever arrives
        # on one shard while the subscriber is busy printing another's entries.
        with self._client.pipeline(transaction=False) as pipe:
            for keys in self.shards:
                pipe.xrevrange(keys.stream, count=1)
            lasts: list[list[tuple[bytes, object]]] = pipe.execute()
        return {
            keys.stream: _text(last[0][0]) if last else "0-0"
            for keys, last in zip(self.shards, lasts, strict=True)
        }

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> SubscribedDelta:
        return next(self._deltas)

    def close(self) -> None:
        """End the iteration; closes the Redis client if the subscription made it from a URL.

        A durable subscription first acknowledges every delta it yielded."""
        self._close(processed=True)

    def __exit__(self, *exc_info: object) -> None:
        """Normally as :meth:`close`; after an exception the delta being processed when it was
        raised stays unacknowledged (redelivered on the next start)."""
        self._close(processed=not exc_info or exc_info[0] is None)

    def _close(self, *, processed: bool) -> None:
        if getattr(self, "_closed", False):  # a second close must not acknowledge anything
            return
        self._closed = True
        deltas = getattr(self, "_deltas", None)
        if deltas is not None:
            deltas.close()
        try:
            if self._cursor is not None:
                if processed:
                    self._settle()
                    self._cursor.flush()
                else:
                    self._flush_quietly()
        finally:
            if self._owns_client:
                self._client.close()

    def _flush_quietly(self) -> None:
        """Acknowledge what was processed on the way out of a failure, which may be Redis's:
        whatever is not acknowledged now is only redelivered, so a failure here is logged."""
        assert self._cursor is not None
        try:
            self._cursor.flush()
        except redis.RedisError as exc:
            log.warning("could not acknowledge the processed deltas (redelivered): %s", exc)

    def _settle(self) -> None:
        """The caller is done with the delta yielded last: acknowledge it with the next batch."""
        current, self._current = self._current, None
        if current is None or self._cursor is None:
            return
        if current.entry is not None:
            self._cursor.processed(*current.entry)
        if current.ends_initial_list is not None:
            self._cursor.initial_done(current.ends_initial_list)

    def _stopped(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _initial_lists(self) -> Iterator[SubscribedDelta]:
        assert self._cursor is not None
        for snapshot in self._initial:
            deltas = itertools.chain(self._initial_deltas(snapshot), [None])
            held = next(deltas)
            if held is None:
                self._cursor.initial_done(snapshot.shard)
            while held is not None:
                following = next(deltas)  # one ahead: the last one ends the shard's list
                if self._stopped():
                    return
                self._current = _Yielded(None, None if following else snapshot.shard)
                yield held
                self._settle()
                held = following
            self.initial_shards_done += 1
            snapshot.objects.clear()  # printed: its memory can go

    def _read(self) -> Iterator[SubscribedDelta]:
        shard_of = {keys.stream: keys.shard for keys in self.shards}
        cursor = self._cursor
        if cursor is not None:
            yield from self._initial_lists()
        while not self._stopped():
            per_stream = self._read_once() if cursor is None else cursor.read()
            # One call's batches are merged by entry ID, i.e. by the time Redis appended them:
            # each shard's own order is kept exactly; across shards it is the best a reader of
            # several streams can do (see subscribe()).
            merged = heapq.merge(
                *(
                    [(_id_order(entry_id), stream, entry_id, fields) for entry_id, fields in batch]
                    for stream, batch in per_stream
                ),
                key=lambda item: item[0],
            )
            for _, stream, raw_id, fields in merged:
                entry_id = _text(raw_id)
                self._positions[stream] = entry_id
                delta = self._decode(stream, shard_of[stream], entry_id, fields)
                if delta is not None and self._wanted(delta):
                    self._current = _Yielded((stream, entry_id), None)
                    yield delta
                    self._settle()
                elif cursor is not None:  # nobody will process it: done as it is
                    cursor.processed(stream, entry_id)

    def _read_once(self) -> list[tuple[str, list[tuple[bytes, Any]]]]:
        """One read of every shard after its position. On a Redis Cluster one XREAD cannot
        name streams of several slots, so each shard is read without blocking (one pipeline,
        split per node by redis-py) and an empty round waits a short poll interval instead."""
        if not self._cluster:
            reply = self._client.xread(self._positions, count=self._batch, block=self._block_ms)  # type: ignore[arg-type]
            return stream_batches(reply)
        with self._client.pipeline(transaction=False) as pipe:
            for stream, position in self._positions.items():
                pipe.xread({stream: position}, count=self._batch)
            replies: list[Any] = pipe.execute()
        batches = [batch for reply in replies for batch in stream_batches(reply) if batch[1]]
        if not batches:
            time.sleep(_CLUSTER_POLL_SECONDS)
        return batches

    def _decode(
        self, stream: str, shard: int, entry_id: str, fields: Mapping[Any, Any] | None
    ) -> SubscribedDelta | None:
        try:
            envelope = envelope_from_fields(fields)
        except WireDecodeError as exc:
            self._on_undecodable(UndecodableEntry(stream, shard, entry_id, exc))
            return None
        return SubscribedDelta(stream, shard, entry_id, envelope)

    def _wanted(self, delta: SubscribedDelta) -> bool:
        if self._types is not None and delta.envelope.type not in self._types:
            return False
        return self._namespace is None or delta.namespace == self._namespace


@dataclasses.dataclass(frozen=True, slots=True)
class _Yielded:
    """What acknowledging the delta a durable subscription yielded last takes."""

    entry: tuple[str, str] | None
    """``(stream, entry ID)`` to acknowledge; ``None`` for an initial-list delta."""
    ends_initial_list: int | None
    """The shard whose initial list it completes."""


subscribe: Final = Subscription
"""``subscribe(client_or_url, resource, ...)`` is a :class:`Subscription`: the name the docs
and the examples use (``with subscribe(...) as deltas``)."""
