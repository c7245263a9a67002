"""``informer-bus subscribe RESOURCE``: watch a resource's deltas as they reach the bus.

The same thing as a Python API, for scripts, notebooks and tests::

    from informer_bus.subscribe import subscribe

    with subscribe("redis://127.0.0.1:6390/0", "pods", start="0-0", namespace="shop") as deltas:
        for delta in deltas:
            print(delta.type, delta.key, delta.resource_version)

A subscriber is a bystander: it reads the shard streams with plain ``XREAD``, never through the
processors' consumer group, so it can neither steal nor acknowledge their entries and any number
of subscribers can come and go without the processors noticing.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import logging
import os
import re
import select
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, Any, Final, Protocol, Self

import orjson
import redis

from common.deltas import DeltaType
from common.keys import Obj
from common.publication import read_publication
from common.redis_config import (
    connection_kwargs,
    describe_redis_error,
    is_cluster,
    redacted_url,
    redis_client,
)
from common.redis_layout import DEFAULT_PREFIX, ResourceKeys, ShardKeys
from common.resource_ids import resource_id_from
from common.service_runner import fail
from common.settings import (
    RedisConnection,
    ServiceSettings,
    SettingsError,
    add_flags,
    check_key_prefix,
    grouped,
    settings_from_args,
)
from common.wire import DeltaEnvelope, WireDecodeError, envelope_from_fields

__all__ = [
    "FROM_BEGINNING",
    "FROM_NOW",
    "HELP",
    "PROGRAM",
    "StopSignal",
    "SubscribeError",
    "SubscribeSettings",
    "SubscribedDelta",
    "Subscription",
    "UndecodableEntry",
    "configure_parser",
    "discover_shard_count",
    "resource_id_of",
    "run",
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
_VALID_TYPES: Final = ", ".join(member.value for member in DeltaType)
# Redis glob metacharacters, escaped so that a resource id is matched literally by SCAN.
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\^])")


class SubscribeError(ValueError):
    """A subscription that cannot start (unknown resource, bad start ID, bad type, wrong client);
    the message is one line meant for a human."""


class StopSignal(Protocol):
    """Anything with ``is_set()``, e.g. a :class:`threading.Event`: checked between reads."""

    def is_set(self) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class SubscribedDelta:
    """One delta read from the bus, with where it was read (to resume from, or to report)."""

    stream: str
    """The shard stream it came from (``ib:{pods:3}:deltas``)."""
    shard: int
    entry_id: str
    """Its entry ID, unique within its stream only (each shard numbers its own entries)."""
    envelope: DeltaEnvelope

    @property
    def type(self) -> DeltaType:
        return self.envelope.type

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object."""
        return self.envelope.key

    @property
    def namespace(self) -> str:
        """``""`` for a cluster-scoped object."""
        return _namespace_of(self.envelope.key)

    @property
    def resource_version(self) -> str:
        return self.envelope.resource_version

    @property
    def obj(self) -> Obj | None:
        """The object (a tombstone's last known state; ``None`` when that was never known).

        Shared with nothing: mutating it is harmless, unlike objects from a processor's cache.
        """
        return self.envelope.obj

    @property
    def observed_at(self) -> float:
        """Unix seconds at which the reflector saw the change."""
        return self.envelope.observed_at

    @property
    def tombstone(self) -> bool:
        """A deletion inferred by a relist (client-go's ``DeletedFinalStateUnknown``)."""
        return self.envelope.tombstone

    def as_json_dict(self) -> dict[str, Any]:
        """The JSON-lines shape ``informer-bus subscribe`` prints (camelCase, like Kubernetes)."""
        env = self.envelope
        return {
            "stream": self.stream,
            "shard": self.shard,
            "id": self.entry_id,
            "type": env.type.value,
            "key": env.key,
            "resourceVersion": env.resource_version,
            "uid": env.uid,
            "observedAt": env.observed_at,
            "tombstone": env.tombstone,
            "object": env.obj,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class UndecodableEntry:
    """A stream entry that is not a valid envelope; subscriptions report it and read on."""

    stream: str
    shard: int
    entry_id: str
    error: WireDecodeError


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


def _namespace_of(key: str) -> str:
    namespace, slash, _ = key.partition("/")
    return namespace if slash else ""


def _glob_literal(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _id_order(entry_id: bytes | str) -> tuple[int, int]:
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def _check_start(start: str) -> str:
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


def _parse_types(names: Iterable[DeltaType | str]) -> frozenset[DeltaType]:
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
                raise SubscribeError(f"unknown delta type {part.strip()!r}; use {_VALID_TYPES}")
            chosen.add(member)
    if not chosen:
        raise SubscribeError(f"no delta type given; use {_VALID_TYPES}")
    return frozenset(chosen)


def discover_shard_count(client: redis.Redis, prefix: str, resource: str) -> int:
    """The resource's shard count, found from the shard keys in Redis (0 when there are none).

    The reflector fences every shard's checkpoint when it takes the lead, so ``checkpoint``
    keys reveal shards that have no delta yet; ``deltas`` keys also count (streams written by
    other publishers). The count is the highest shard number found plus one.
    """
    ResourceKeys(prefix, resource)  # validates the names (ValueError)
    pattern = f"{_glob_literal(prefix)}:{{{_glob_literal(resource)}:*}}:*"
    shard_key = re.compile(
        re.escape(f"{prefix}:{{{resource}:") + r"(0|[1-9][0-9]*)\}:(?:deltas|checkpoint)"
    )
    highest = -1
    for key in client.scan_iter(match=pattern, count=1000):
        match = shard_key.fullmatch(_text(key))
        if match is not None:
            highest = max(highest, int(match.group(1)))
    return highest + 1


def _effective_socket_timeout(client: redis.Redis) -> float | None:
    """The read timeout the client's connections use: the pool's kwargs omit the connection
    class's own default (5 s), so it is read from a connection object that is never opened."""
    pool = client.connection_pool
    connection: Any = pool.connection_class(**pool.connection_kwargs)
    timeout = getattr(connection, "socket_timeout", None)
    return None if timeout is None else float(timeout)


class Subscription(Iterator[SubscribedDelta]):
    """An iterator over a resource's deltas, all shards merged; see :func:`subscribe`.

    Shards and start positions are settled in the constructor, so ``start=FROM_NOW`` means
    "after this call" (not "after the first ``next``") and mistakes surface at once.
    """

    def __init__(
        self,
        client_or_url: redis.Redis | str,
        resource: str,
        *,
        start: str = FROM_NOW,
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
        start = _check_start(start)
        self._types = None if types is None else _parse_types(types)
        self._namespace = namespace
        if shard_count is not None and (type(shard_count) is not int or shard_count < 1):
            raise SubscribeError(f"shard count must be an integer >= 1, got {shard_count!r}")
        if batch < 1:
            raise SubscribeError(f"batch must be >= 1, got {batch}")
        self._batch = batch
        self._stop = stop
        self._on_undecodable = on_undecodable or _log_undecodable
        if isinstance(client_or_url, str):
            self._block_ms = DEFAULT_BLOCK_MS if block_ms is None else block_ms
            self._client = redis_client(
                client_or_url,
                cluster=cluster,
                socket_timeout=self._block_ms / 1000 + _SOCKET_TIMEOUT_MARGIN,
                socket_connect_timeout=5,
                **(connection or {}),
            )
            self._owns_client = True
            self._where = redacted_url(client_or_url)
        else:
            self._client = client_or_url
            self._owns_client = False
            self._where = "Redis"
            self._block_ms = self._block_for(client_or_url, block_ms)
        self._cluster = is_cluster(self._client)
        try:
            self.shard_count, waited = self._find_shards(shard_count, wait, on_waiting)
            self.shards = tuple(
                ShardKeys(prefix, self.resource, shard) for shard in range(self.shard_count)
            )
            # Nothing was published when we were called: "from now" is every entry to come.
            self._positions = self._start_positions(
                FROM_BEGINNING if waited and start == FROM_NOW else start
            )
        except BaseException:
            self.close()
            raise
        self._deltas = self._read()

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
        return (
            f"no reflector has published resource {self.resource!r} under prefix "
            f"{self.prefix!r} in {self._where} ({found}): is one running with this --resource, "
            "--redis-url and --prefix?"
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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the iteration; closes the Redis client if the subscription made it from a URL."""
        deltas = getattr(self, "_deltas", None)
        if deltas is not None:
            deltas.close()
        if self._owns_client:
            self._client.close()

    def _read(self) -> Iterator[SubscribedDelta]:
        shard_of = {keys.stream: keys.shard for keys in self.shards}
        while self._stop is None or not self._stop.is_set():
            per_stream = self._read_once()
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
                    yield delta

    def _read_once(self) -> list[tuple[str, list[tuple[bytes, Any]]]]:
        """One read of every shard after its position. On a Redis Cluster one XREAD cannot
        name streams of several slots, so each shard is read without blocking (one pipeline,
        split per node by redis-py) and an empty round waits a short poll interval instead."""
        if not self._cluster:
            reply = self._client.xread(self._positions, count=self._batch, block=self._block_ms)  # type: ignore[arg-type]
            return _stream_batches(reply)
        with self._client.pipeline(transaction=False) as pipe:
            for stream, position in self._positions.items():
                pipe.xread({stream: position}, count=self._batch)
            replies: list[Any] = pipe.execute()
        batches = [batch for reply in replies for batch in _stream_batches(reply) if batch[1]]
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


def _stream_batches(reply: Any) -> list[tuple[str, list[tuple[bytes, Any]]]]:
    """XREAD's reply as ``[(stream, [(id, fields), ...]), ...]`` (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3 wraps each stream's entries in one more list
        return [
            (_text(stream), list(wrapped[0]) if wrapped else [])
            for stream, wrapped in reply.items()
        ]
    return [(_text(stream), list(entries)) for stream, entries in reply]


def subscribe(
    client_or_url: redis.Redis | str,
    resource: str,
    *,
    start: str = FROM_NOW,
    types: Iterable[DeltaType | str] | None = None,
    namespace: str | None = None,
    shard_count: int | None = None,
    prefix: str = DEFAULT_PREFIX,
    stop: StopSignal | None = None,
    block_ms: int | None = None,
    on_undecodable: Callable[[UndecodableEntry], None] | None = None,
    connection: Mapping[str, Any] | None = None,
    cluster: bool = False,
    wait: bool = False,
    on_waiting: Callable[[str], None] | None = None,
) -> Subscription:
    """Iterate over ``resource``'s deltas from every shard, as the reflector publishes them.

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
    """
    return Subscription(
        client_or_url,
        resource,
        start=start,
        types=types,
        namespace=namespace,
        shard_count=shard_count,
        prefix=prefix,
        stop=stop,
        block_ms=block_ms,
        on_undecodable=on_undecodable,
        connection=connection,
        cluster=cluster,
        wait=wait,
        on_waiting=on_waiting,
    )


# --- the command line --------------------------------------------------------------------------

PROGRAM: Final = "informer-bus subscribe"
ENV_PREFIX: Final = "INFORMER_BUS_"
HELP: Final = (
    "Print a resource's deltas as they reach the bus, all shards merged, one per line "
    "(JSON lines by default); reads without joining the processors' consumer group."
)
_OUTPUTS: Final = ("json", "table")
_EXIT_INTERRUPTED: Final = 130
_EXIT_REDIS_LOST: Final = 1

_SERVICE_FIELDS: Final = {field.name: field for field in dataclasses.fields(ServiceSettings)}


def _service_field(name: str) -> Any:
    """The services' own field, so flag, env var, default and help are the same everywhere."""
    shared = _SERVICE_FIELDS[name]
    return dataclasses.field(default=shared.default, metadata=shared.metadata)


@dataclasses.dataclass(frozen=True)
class SubscribeSettings:
    """Where the bus is: the services' ``--redis-url`` and ``--prefix`` (same env vars)."""

    redis: RedisConnection = dataclasses.field(
        default_factory=RedisConnection, metadata=grouped("Redis", flag_prefix="redis_")
    )
    prefix: str = _service_field("prefix")

    def __post_init__(self) -> None:
        check_key_prefix(self.prefix)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Ctrl-C stops it; so does closing its output (| head). A resource no reflector "
        "has published under the prefix is an error (exit 2, one line saying so) unless --wait "
        "is given: then one line on stderr says what it waits for, and the deltas start with "
        "the first one published. Exit status: 0 when stopped or done (--count), 1 when Redis "
        "is lost, 2 for a mistake, 130 on Ctrl-C. The --redis-* flags and "
        "--prefix can also be set with the INFORMER_BUS_<NAME> environment variable shown in "
        "their help."
    )
    parser.add_argument(
        "resource",
        metavar="RESOURCE",
        help="the resource id of the streams (pods, deployments.apps, pods@shop) or the "
        "reflector's --resource spec (deployments.v1.apps)",
    )
    start = parser.add_argument_group("where to start (one of; default --from-now)")
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="every delta still on the streams, then new ones",
    )
    start.add_argument("--from-now", action="store_true", help="only deltas published from now on")
    start.add_argument(
        "--from-id",
        metavar="ID",
        help="deltas after this entry ID on every shard (an 'id' printed before, e.g. "
        "1714567890123-0, or just milliseconds since the epoch)",
    )
    parser.add_argument(
        "--type",
        dest="types",
        action="append",
        metavar="TYPES",
        help=f"only these delta types, comma-separated, repeatable ({_VALID_TYPES})",
    )
    parser.add_argument("--namespace", "-n", metavar="NS", help="only objects in this namespace")
    parser.add_argument(
        "--output",
        "-o",
        default="json",
        metavar="FORMAT",
        help="json (JSON lines: stream, shard, id, type, key, resourceVersion, uid, "
        "observedAt, tombstone, object) or table (time, shard, type, key, resourceVersion); "
        "default json",
    )
    parser.add_argument("--count", metavar="N", help="stop after N deltas (after filtering)")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="if no reflector has published RESOURCE yet, wait for one (saying so on stderr) "
        "instead of exiting with status 2",
    )
    parser.add_argument(
        "--shards",
        "--shard-count",
        dest="shards",
        metavar="N",
        help="the resource's shard count (default: found from the keys in Redis)",
    )
    add_flags(parser, SubscribeSettings, ENV_PREFIX)


@dataclasses.dataclass(frozen=True)
class _Options:
    start: str
    types: frozenset[DeltaType] | None
    output: str
    count: int | None
    shards: int | None


def _positive(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SubscribeError(f"{flag} must be an integer >= 1, got {text!r}")
    return value


def _options(args: argparse.Namespace) -> _Options:
    chosen = [
        flag
        for flag, given in (
            ("--from-beginning", args.from_beginning),
            ("--from-now", args.from_now),
            ("--from-id", args.from_id is not None),
        )
        if given
    ]
    if len(chosen) > 1:
        raise SubscribeError(f"{' and '.join(chosen)} exclude each other: give one")
    if args.from_beginning:
        start = FROM_BEGINNING
    elif args.from_id is not None:
        start = _check_start(args.from_id)
    else:
        start = FROM_NOW
    if args.output not in _OUTPUTS:
        raise SubscribeError(f"unknown output {args.output!r}; use {' or '.join(_OUTPUTS)}")
    return _Options(
        start=start,
        types=None if args.types is None else _parse_types(args.types),
        output=args.output,
        count=_positive("--count", args.count),
        shards=_positive("--shards", args.shards),
    )


class _ReaderGone:
    """Set once nobody reads our stdout pipe any more (``| head`` exited).

    A write would tell us too (EPIPE), but a subscriber waiting for the next delta writes
    nothing: without this, ``informer-bus subscribe pods | head -1`` would hang until the
    next change. Linux reports a pipe without readers as POLLERR to its writer.
    """

    def __init__(self, stream: IO[Any]) -> None:
        self._poller: select.poll | None = None
        try:
            fd = stream.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                self._poller = select.poll()
                self._poller.register(fd, 0)  # errors and hang-ups are always reported
        except (OSError, ValueError):
            self._poller = None

    def is_set(self) -> bool:
        return self._poller is not None and bool(self._poller.poll(0))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail (what the Python
    docs recommend on SIGPIPE/EPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _warn_undecodable(entry: UndecodableEntry) -> None:
    print(
        f"{PROGRAM}: warning: skipping undecodable entry {entry.entry_id} on {entry.stream}: "
        f"{entry.error}",
        file=sys.stderr,
        flush=True,
    )


def _say_waiting(why: str) -> None:
    print(f"{PROGRAM}: waiting: {why}", file=sys.stderr, flush=True)


_TABLE_HEADER: Final = f"{'TIME':<24}  {'SHARD':>5}  {'TYPE':<8}  {'KEY':<48}  RESOURCEVERSION"


def _table_line(delta: SubscribedDelta) -> str:
    when = datetime.fromtimestamp(delta.observed_at, UTC).isoformat(timespec="milliseconds")
    when = when.replace("+00:00", "Z")
    line = (
        f"{when:<24}  {delta.shard:>5}  {delta.type.value:<8}  {delta.key:<48}  "
        f"{delta.resource_version or '-'}"
    )
    return line + ("  (tombstone)" if delta.tombstone else "")


def _print_deltas(deltas: Iterator[SubscribedDelta], output: str) -> None:
    out = sys.stdout.buffer
    if output == "table":
        out.write(_TABLE_HEADER.encode() + b"\n")
        out.flush()
        for delta in deltas:
            out.write(_table_line(delta).encode() + b"\n")
            out.flush()
        return
    for delta in deltas:
        out.write(orjson.dumps(delta.as_json_dict(), option=orjson.OPT_APPEND_NEWLINE))
        out.flush()


def run(args: argparse.Namespace) -> int:
    try:
        return _subscribe_and_print(args)
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED


def _subscribe_and_print(args: argparse.Namespace) -> int:
    reader_gone = _ReaderGone(sys.stdout)
    try:
        settings = settings_from_args(SubscribeSettings, ENV_PREFIX, args)
        connection = connection_kwargs(settings.redis)
        options = _options(args)
    except (SettingsError, SubscribeError) as exc:
        return fail(PROGRAM, str(exc))
    try:
        subscription = subscribe(
            settings.redis.url,
            args.resource,
            start=options.start,
            types=options.types,
            namespace=args.namespace,
            shard_count=options.shards,
            prefix=settings.prefix,
            stop=reader_gone,
            on_undecodable=_warn_undecodable,
            connection=connection,
            cluster=settings.redis.cluster,
            wait=args.wait,
            on_waiting=_say_waiting,
        )
    except SubscribeError as exc:
        return fail(PROGRAM, str(exc))
    except (redis.RedisError, ValueError) as exc:  # unreachable, or a URL redis-py refuses
        reason = describe_redis_error(exc) or exc
        return fail(PROGRAM, f"cannot read {redacted_url(settings.redis.url)}: {reason}")
    with subscription:
        try:
            _print_deltas(itertools.islice(subscription, options.count), options.output)
        except BrokenPipeError:
            _silence_stdout()
            return 0
        except redis.RedisError as exc:
            print(f"{PROGRAM}: error: lost Redis: {exc}", file=sys.stderr)
            return _EXIT_REDIS_LOST
    if reader_gone.is_set():
        _silence_stdout()
    return 0
