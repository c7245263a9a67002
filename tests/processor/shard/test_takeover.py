"""Takeover: snapshot + stream position read together, initial list, unacknowledged deletions."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from common.compact_store import CompactIndexer
from common.deltas import DeltaType
from common.object_keys import Obj
from common.redis_layout import PROCESSOR_GROUP as GROUP
from common.redis_layout import SHARD_CONSUMER as CONSUMER
from common.store import Indexer
from tests.processor.shard.support import Shard, compact_envelopes
from tests.reflector.publisher.support import added, deleted, delta, updated
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

GAPS = "informer_bus_processor_takeover_gaps_total"
_GAP = re.compile(r"retention trimmed (?P<pending>\d+) pending and (?P<undelivered>\d+) undeliv")


class CountingIndexer(Indexer):
    """An Indexer that counts the deltas it receives per (key, resourceVersion)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str, str]] = []

    def update(self, obj: Obj, key: str | None = None, packed: bytes | None = None) -> Obj | None:
        self.writes.append(("update", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        return super().update(obj, key, packed)

    def delete(self, obj: Any, key: str | None = None) -> Obj | None:
        self.writes.append(("delete", str(key), ""))
        return super().delete(obj, key)


@pytest.mark.parametrize("store_class", [Indexer, CompactIndexer, compact_envelopes])
def test_takeover_delivers_the_snapshot_as_initial_list_then_live_deltas_in_order(
    shard: Shard, store_class: type[Indexer]
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/b", "2"), updated("ns/a", "3"))
    recorder = Recorder()
    with shard.running(("rec", recorder), store=store_class()) as (worker, store, _):
        assert worker.wait_for_sync(5)
        assert sorted(recorder.initial()) == [
            ("add", "ns/a", "3", True),
            ("add", "ns/b", "2", True),
        ]
        assert recorder.live() == []
        assert sorted(store.list_keys()) == ["ns/a", "ns/b"]
        # Committed (right after the sync): the group stands at L, everything up to it acked.
        wait_until(lambda: shard.group()["last-delivered-id"] != b"0-0", what="the commit")
        group = shard.group()
        assert group["last-delivered-id"].decode() == shard.last_id()
        assert group["pending"] == 0
        assert group["lag"] == 0

        shard.publish(updated("ns/a", "4"), deleted("ns/b", "5"), added("ns/c", "6"))
        shard.publish(updated("ns/c", "7"))
        wait_until(lambda: len(recorder.live()) == 4, what="live deltas")
        assert recorder.live() == [
            ("update", "ns/a", "3", "4"),
            ("delete", "ns/b", "5", False),
            ("add", "ns/c", "6", False),
            ("update", "ns/c", "6", "7"),
        ]
        assert sorted(store.list_keys()) == ["ns/a", "ns/c"]
        wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        assert shard.group()["last-delivered-id"].decode() == shard.last_id()
        assert shard.sample("informer_bus_processor_store_objects", shard="0") == 2
        assert shard.sample("informer_bus_processor_shard_synced", shard="0") == 1
        assert worker.error is None
    assert shard.sample("informer_bus_processor_takeovers_total", shard="0") == 1
    assert (
        shard.sample("informer_bus_processor_deltas_applied_total", shard="0", type="Updated") == 2
    )
    assert shard.sample("informer_bus_processor_deltas_applied_total", shard="0", type="Added") == 1
    # A stopped worker's shard gauges are gone (the shard may be someone else's now).
    assert shard.sample("informer_bus_processor_store_objects", shard="0") == 0


def test_the_store_never_receives_a_delta_twice(shard: Shard) -> None:
    # Every entry is in the snapshot AND unacknowledged on the stream: the takeover must not
    # apply those entries again as live deltas.
    shard.publish(*(added(f"ns/p{i}", str(10 + i)) for i in range(20)))
    shard.publish(updated("ns/p0", "40"), deleted("ns/p1", "41"))
    store = CountingIndexer()
    recorder = Recorder()
    with shard.running(("rec", recorder), store=store) as (worker, _, _):
        assert worker.wait_for_sync(5)
        # The snapshot, one write per object at its last version, and nothing else.
        snapshot = [("update", f"p{i}", "40" if i == 0 else str(10 + i)) for i in range(20)]
        del snapshot[1]  # p1 was deleted
        assert sorted(store.writes) == sorted(snapshot)
        store.writes.clear()
        shard.publish(updated("ns/p2", "50"))
        wait_until(recorder.live, what="the live delta")
        wait_until(lambda: shard.pending() == 0, what="acknowledgement")
        assert store.writes == [("update", "p2", "50")]
        assert recorder.live() == [("update", "ns/p2", "12", "50")]
        assert len(recorder.initial()) == 19
        assert ("add", "ns/p0", "40", True) in recorder.initial()
        # p1's deletion is in the snapshot's past, and this new group was never told about
        # p1: it starts from the snapshot, so no handler hears of p1 at all.
        assert [e for e in recorder.events if e[1] == "ns/p1"] == []


def test_takeover_after_a_partial_ack_delivers_unacknowledged_deletions_exactly_once(
    shard: Shard,
) -> None:
    ids = shard.publish(
        added("ns/a", "1"),  # 0
        added("ns/b", "2"),  # 1
        added("ns/c", "3"),  # 2
        deleted("ns/a", "4"),  # 3: acknowledged by the previous owner
        deleted("ns/b", "5"),  # 4: pending
        added("ns/b", "6"),  # 5: b re-created: in the snapshot, no on_delete
        delta(DeltaType.DELETED, "ns/c", "3", tombstone=True),  # 6: undelivered tombstone
        added("ns/d", "8"),  # 7
        deleted("ns/d", "9"),  # 8: deleted twice in the range (below), one on_delete
        added("ns/d", "10"),  # 9
        deleted("ns/d", "11"),  # 10
    )
    # A previous owner read entries 0-4 and acknowledged 0, 2 and 3 (not in order: 1 and 4
    # are still pending), recording what its handlers held as it acknowledged (a and c
    # entered, a left), then died.
    client = shard.client
    client.xgroup_create(shard.keys.stream, GROUP, id="0")
    client.xreadgroup(GROUP, CONSUMER, {shard.keys.stream: ">"}, count=5)
    client.xack(shard.keys.stream, GROUP, ids[0], ids[2], ids[3])
    client.hset(shard.keys.held, "ns/c", b"")
    recorder = Recorder()
    with shard.running(("rec", recorder)) as (worker, store, _):
        assert worker.wait_for_sync(5)
        # c is held, and its deletion carries the inferred final state; d was never handed
        # to anyone (its entries are all undelivered): the handlers hear nothing of it. b was
        # told by a pending entry and is in the snapshot: it is in the initial list.
        deletions = [e for e in recorder.events if e[0] == "delete"]
        assert deletions == [("delete", "ns/c", "3", True)]
        assert recorder.events[:1] == deletions  # before the initial list
        assert recorder.initial() == [("add", "ns/b", "6", True)]
        assert store.list_keys() == ["ns/b"]
        wait_until(lambda: shard.pending() == 0, what="the takeover's acknowledgement")
        assert client.hgetall(shard.keys.held) == {b"ns/b": b""}
        assert shard.group()["last-delivered-id"].decode() == ids[-1]
        assert shard.group()["lag"] == 0
        shard.publish(updated("ns/b", "20"))
        wait_until(lambda: recorder.live()[1:], what="a live delta after the takeover")
        assert recorder.live()[1:] == [("update", "ns/b", "6", "20")]
    assert shard.sample("informer_bus_processor_takeover_gaps_total", shard="0") == 0


def test_a_second_takeover_redelivers_the_initial_list_but_no_acknowledged_deletion(
    shard: Shard,
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/b", "2"))
    first = Recorder()
    with shard.running(("rec", first)) as (worker, _, _):
        assert worker.wait_for_sync(5)
        shard.publish(deleted("ns/a", "3"))
        wait_until(first.live, what="the deletion")
        wait_until(lambda: shard.pending() == 0, what="acknowledgement")
    second = Recorder()
    with shard.running(("rec", second)) as (worker, _, _):
        assert worker.wait_for_sync(5)
        assert second.events == [("add", "ns/b", "2", True)]


def _gaps_logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int]]:
    """(pending, undelivered) of each "retention trimmed" warning, in order."""
    found = (_GAP.search(r.getMessage()) for r in caplog.records)
    return [(int(m["pending"]), int(m["undelivered"])) for m in found if m]


def test_takeover_counts_unacknowledged_entries_trimmed_by_retention(
    shard: Shard, caplog: pytest.LogCaptureFixture
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/b", "2"), deleted("ns/a", "3"))
    shard.client.xgroup_create(shard.keys.stream, GROUP, id="0")
    shard.client.xtrim(shard.keys.stream, maxlen=0, approximate=False)  # a forced trim
    recorder = Recorder()
    with shard.running(("rec", recorder)) as (worker, _, _):
        assert worker.wait_for_sync(5)
        assert recorder.events == [("add", "ns/b", "2", True)]
        assert shard.sample(GAPS, shard="0") == 1
    assert _gaps_logged(caplog) == [(0, 3)]


def test_takeover_counts_undelivered_entries_trimmed_past_the_group_position(
    shard: Shard, caplog: pytest.LogCaptureFixture
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/b", "2"), added("ns/c", "3"))
    with shard.running(("rec", Recorder())) as (worker, _, _):
        assert worker.wait_for_sync(5)
        wait_until(lambda: shard.group()["last-delivered-id"] != b"0-0", what="the commit")
    # Published while no worker runs, then a forced trim cuts into them: 3 of the 5 go.
    shard.publish(deleted("ns/a", "4"), added("ns/d", "5"), added("ns/e", "6"))
    shard.publish(deleted("ns/b", "7"), added("ns/f", "8"))
    shard.client.xtrim(shard.keys.stream, maxlen=2, approximate=False)
    with shard.running(("rec", Recorder())) as (worker, _, _):
        assert worker.wait_for_sync(5)
    assert shard.sample(GAPS, shard="0") == 1
    assert _gaps_logged(caplog) == [(0, 3)]


def test_takeover_counts_pending_entries_trimmed_by_retention(
    shard: Shard, caplog: pytest.LogCaptureFixture
) -> None:
    ids = shard.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(4)))
    # A previous owner read two entries and died before acknowledging them; a forced trim
    # then removes both, and the first undelivered one.
    shard.client.xgroup_create(shard.keys.stream, GROUP, id="0")
    shard.client.xreadgroup(GROUP, CONSUMER, {shard.keys.stream: ">"}, count=2)
    shard.client.xtrim(shard.keys.stream, maxlen=1, approximate=False)
    recorder = Recorder()
    with shard.running(("rec", recorder)) as (worker, _, _):
        assert worker.wait_for_sync(5)
        wait_until(lambda: shard.group()["last-delivered-id"].decode() == ids[-1], what="commit")
    assert shard.sample(GAPS, shard="0") == 1
    assert _gaps_logged(caplog) == [(2, 1)]


class _SamePortRedis(RedisServer):
    """A redis-server with an append-only file that comes back on its port when restarted."""

    def _pick_port(self) -> int:
        return self.port or super()._pick_port()


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[_SamePortRedis]:
    server = _SamePortRedis(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_takeover_after_redis_reloads_its_aof_reports_no_gap_when_nothing_was_trimmed(
    aof_redis: _SamePortRedis, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(aof_redis.url)
    shard = Shard(client, aof_redis.url)
    try:
        shard.publish(added("ns/a", "1"), added("ns/b", "2"))
        recorder = Recorder()
        with shard.running(("rec", recorder)) as (worker, _, _):
            assert worker.wait_for_sync(5)  # commits with XGROUP SETID ... ENTRIESREAD 2
            # Read and acknowledged after the takeover: XREADGROUP goes to the AOF as XCLAIM.
            shard.publish(updated("ns/a", "3"), deleted("ns/b", "4"), added("ns/c", "5"))
            wait_until(lambda: len(recorder.live()) == 3, what="live deltas")
            wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        shard.publish(updated("ns/c", "6"))  # one undelivered entry after the group's position
        assert shard.group()["entries-read"] == 5
        aof_redis.stop()  # SIGTERM: Redis flushes the AOF and exits
        aof_redis.start()
        after = shard.group()
        assert after["last-delivered-id"].decode() < shard.last_id()
        if tuple(map(int, client.info("server")["redis_version"].split(".")[:2])) < (7, 4):
            # redis/redis#12898: the reload leaves the count of the takeover's commit.
            assert after["entries-read"] == 2
        second = Recorder()
        with shard.running(("rec", second)) as (worker, _, _):
            assert worker.wait_for_sync(5)
            assert sorted(second.initial()) == [
                ("add", "ns/a", "3", True),
                ("add", "ns/c", "6", True),
            ]
            wait_until(lambda: shard.pending() == 0, what="the takeover's acknowledgement")
        assert _gaps_logged(caplog) == []
        assert shard.sample(GAPS, shard="0") == 0
        assert shard.sample("informer_bus_processor_takeovers_total", shard="0") == 2
    finally:
        shard.close()
        client.close()


def test_an_empty_shard_syncs_at_once_and_then_consumes(shard: Shard) -> None:
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=200) as (worker, _, _):
        assert worker.wait_for_sync(5)
        assert recorder.events == []
        assert shard.group()["last-delivered-id"] == b"0-0"
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: recorder.events, what="the first delta")
        assert recorder.events == [("add", "ns/a", "1", False)]
