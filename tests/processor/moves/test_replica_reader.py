"""A replicated resource's shard read whole (``processor_svc.replica_reader``), on a real
redis-server: the first snapshot, the stream after it, and a gap that retention trimmed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from common.deltas import DeltaType
from common.object_keys import Obj
from common.redis_layout import ShardKeys
from common.store import Indexer
from common.wire import FIELD, DeltaEnvelope, encode_envelope
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.metrics import ProcessorMetrics
from processor_svc.replica_reader import ReplicaReader
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

KEYS = ShardKeys("ib", "namespaces", 0)


def namespace(name: str, rv: int) -> Obj:
    return {"kind": "Namespace", "metadata": {"name": name, "resourceVersion": str(rv)}}


def write(client: redis.Redis, obj: Obj, delta_type: DeltaType = DeltaType.ADDED) -> None:
    """What the reflector's publish script does for one delta."""
    data = encode_envelope(DeltaEnvelope.of_object(delta_type, obj, observed_at=1.0))
    key = obj["metadata"]["name"]
    client.xadd(KEYS.stream, {FIELD: data})
    if delta_type is DeltaType.DELETED:
        client.hdel(KEYS.versions, key)
        client.hdel(KEYS.objects, key)
    else:
        client.hset(KEYS.versions, key, obj["metadata"]["resourceVersion"])
        client.hset(KEYS.objects, key, data)


@pytest.fixture
def reader(
    redis_server: RedisServer, redis_client: redis.Redis
) -> Iterator[tuple[ReplicaReader, Indexer, Recorder, ProcessorMetrics]]:
    client = redis.Redis.from_url(redis_server.url)
    metrics = ProcessorMetrics(CollectorRegistry())
    recorder = Recorder()
    dispatcher = HandlerDispatcher([("r", recorder)], metrics=metrics, resource="namespaces")
    dispatcher.start()
    store = Indexer()
    replica = ReplicaReader(client, KEYS, store=store, sink=dispatcher, metrics=metrics,
                            block_ms=100)  # fmt: skip
    try:
        yield replica, store, recorder, metrics
    finally:
        replica.stop()
        dispatcher.stop(2.0)
        client.close()


def test_a_replica_delivers_the_snapshot_then_follows_the_stream(
    reader: tuple[ReplicaReader, Indexer, Recorder, ProcessorMetrics], redis_client: redis.Redis
) -> None:
    replica, store, recorder, _ = reader
    write(redis_client, namespace("a", 1))
    write(redis_client, namespace("b", 2))
    replica.start()
    wait_until(lambda: replica.has_synced, 10)
    assert sorted(e[1] for e in recorder.initial()) == ["a", "b"]
    write(redis_client, namespace("c", 3))
    write(redis_client, namespace("a", 1), DeltaType.DELETED)
    wait_until(lambda: sorted(store.list_keys()) == ["b", "c"], 10)
    expected = [("add", "c", "3", False), ("delete", "a", "1", False)]
    wait_until(lambda: recorder.live() == expected, 10)


def test_a_shard_without_a_stream_reads_as_empty(
    reader: tuple[ReplicaReader, Indexer, Recorder, ProcessorMetrics], redis_client: redis.Redis
) -> None:
    replica, store, _, _ = reader
    replica.start()
    wait_until(lambda: replica.has_synced, 10)
    assert len(store) == 0
    write(redis_client, namespace("late", 9))
    wait_until(lambda: store.list_keys() == ["late"], 10)


def test_a_gap_trimmed_by_retention_is_read_again_as_its_changes(
    reader: tuple[ReplicaReader, Indexer, Recorder, ProcessorMetrics], redis_client: redis.Redis
) -> None:
    replica, store, recorder, metrics = reader
    for rv, name in enumerate(("a", "b", "c"), start=1):
        write(redis_client, namespace(name, rv))
    # The reader's own steps, on this thread: its snapshot, then a long pause.
    replica._snapshot()
    wait_until(lambda: replica.has_synced, 10)
    write(redis_client, namespace("a", 1), DeltaType.DELETED)  # missed: trimmed below
    write(redis_client, namespace("b", 7), DeltaType.UPDATED)  # missed too
    write(redis_client, namespace("d", 8))  # missed too
    redis_client.xtrim(KEYS.stream, maxlen=1, approximate=False)  # retention took what was unread
    write(redis_client, namespace("e", 9))
    replica._step()  # reads what is left, then finds out what it lost
    assert replica._last_id is None  # a fresh snapshot is due
    assert store.get_by_key("d") is None  # nothing of the read past the gap was applied
    replica._snapshot()
    wait_until(lambda: sorted(store.list_keys()) == ["b", "c", "d", "e"], 10)
    assert store.get_by_key("b")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    wait_until(lambda: ("delete", "a", "1", False) in recorder.live(), 10)
    assert ("update", "b", "2", "7") in recorder.live()
    assert ("add", "d", "8", False) in recorder.live()
    labels: dict[str, Any] = {"resource": "namespaces", "group": "processors", "shard": "0"}
    assert (
        metrics.registry.get_sample_value("informer_bus_processor_takeover_gaps_total", labels) == 1
    )
