from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import pytest
import redis

from common.redis_layout import ShardKeys
from reflector_svc.retention import RetentionLoop, TrimResult, trim_shard

KEYS = ShardKeys("ib", "pods", 0)
# ~1 KB entries: a stream macro-node (stream-node-max-bytes 4096) holds about 3 of them, so
# `~` trimming is close to exact, as it is with real ~3.5 KB envelopes.
PAYLOAD = b"x" * 1000
SLACK = 4


def fill(client: redis.Redis, count: int, keys: ShardKeys = KEYS) -> list[bytes]:
    pipe = client.pipeline(transaction=False)
    for _ in range(count):
        pipe.xadd(keys.stream, {"d": PAYLOAD})
    ids: list[bytes] = pipe.execute()
    return ids


def stream_ids(client: redis.Redis, keys: ShardKeys = KEYS) -> list[bytes]:
    return [entry_id for entry_id, _ in client.xrange(keys.stream)]


def test_without_groups_the_newest_min_entries_are_kept(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 200)
    result = trim_shard(redis_client, KEYS, min_entries=50, hard_max_entries=1000)
    left = stream_ids(redis_client)
    assert 50 <= len(left) <= 50 + SLACK
    assert left == ids[-len(left) :]
    assert result == TrimResult(200 - len(left), False, False, len(left))
    # Again: nothing more to do.
    assert trim_shard(redis_client, KEYS, min_entries=50, hard_max_entries=1000).trimmed == 0


def test_min_entries_zero_trims_everything_whole(redis_client: redis.Redis) -> None:
    fill(redis_client, 30)
    result = trim_shard(redis_client, KEYS, min_entries=0, hard_max_entries=10)
    assert result.length <= 10
    assert not result.forced


def test_undelivered_entries_of_a_group_are_never_trimmed(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 200)
    redis_client.xgroup_create(KEYS.stream, "processors", id="0")
    delivered = redis_client.xreadgroup("processors", "c1", {KEYS.stream: ">"}, count=120)
    redis_client.xack(KEYS.stream, "processors", *[entry_id for entry_id, _ in delivered[0][1]])

    result = trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=1000)
    left = stream_ids(redis_client)
    assert left == ids[-len(left) :]
    assert ids[120:] == left[-80:]  # everything not yet delivered is there
    assert 80 <= len(left) <= 80 + SLACK  # and what every group has acknowledged is gone
    assert not result.forced and result.trimmed == 200 - len(left)


def test_pending_entries_are_kept(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 200)
    redis_client.xgroup_create(KEYS.stream, "processors", id="0")
    redis_client.xreadgroup("processors", "c1", {KEYS.stream: ">"}, count=150)
    # Everything delivered, acknowledged except entries 40 and 41 (a stuck or crashed worker).
    redis_client.xack(KEYS.stream, "processors", *ids[:40], *ids[42:150])

    trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=1000)
    left = stream_ids(redis_client)
    assert ids[40:] == left[-160:]
    assert len(left) <= 160 + SLACK
    # XAUTOCLAIM can still hand the pending entries to another consumer, payload included.
    _, claimed, purged = redis_client.xautoclaim(
        KEYS.stream, "processors", "c2", min_idle_time=0, start_id="0-0", count=10
    )
    assert [entry_id for entry_id, _ in claimed] == ids[40:42]
    assert all(fields == {b"d": PAYLOAD} for _, fields in claimed)
    assert purged == []


def test_the_slowest_of_several_groups_decides(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 200)
    for group, count in (("fast", 190), ("slow", 60)):
        redis_client.xgroup_create(KEYS.stream, group, id="0")
        read = redis_client.xreadgroup(group, "c", {KEYS.stream: ">"}, count=count)
        redis_client.xack(KEYS.stream, group, *[entry_id for entry_id, _ in read[0][1]])
    trim_shard(redis_client, KEYS, min_entries=5, hard_max_entries=1000)
    left = stream_ids(redis_client)
    assert ids[60:] == left[-140:] and len(left) <= 140 + SLACK


def test_a_group_created_at_the_tail_holds_nothing_back(redis_client: redis.Redis) -> None:
    fill(redis_client, 100)
    redis_client.xgroup_create(KEYS.stream, "late", id="$")
    result = trim_shard(redis_client, KEYS, min_entries=20, hard_max_entries=1000)
    assert 20 <= result.length <= 20 + SLACK


def test_min_entries_win_over_a_caught_up_group(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 100)
    redis_client.xgroup_create(KEYS.stream, "processors", id="$")
    trim_shard(redis_client, KEYS, min_entries=30, hard_max_entries=1000)
    left = stream_ids(redis_client)
    assert 30 <= len(left) <= 30 + SLACK and left == ids[-len(left) :]


def test_a_dead_group_is_overridden_by_the_hard_cap(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 300)
    redis_client.xgroup_create(KEYS.stream, "dead", id="0")  # never reads
    result = trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=100)
    assert result == TrimResult(200, True, True, 100, ("dead",), ("dead",), {"dead": 300})
    assert stream_ids(redis_client) == ids[-100:]
    # The group silently skips to the oldest entry left: hence the report, and a resync.
    read = redis_client.xreadgroup("dead", "c", {KEYS.stream: ">"}, count=1)
    assert read[0][1][0][0] == ids[200]


def test_the_hard_cap_names_only_the_groups_that_lost_entries(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 300)
    for group, count in (("audit", 300), ("stuck", 150), ("never-read", 0)):
        redis_client.xgroup_create(KEYS.stream, group, id="0")
        if count:
            read = redis_client.xreadgroup(group, "c", {KEYS.stream: ">"}, count=count)
            redis_client.xack(KEYS.stream, group, *[entry_id for entry_id, _ in read[0][1]])
    # "stuck" acknowledged entries up to 150, so losing 0..199 costs it 50 undelivered ones.
    result = trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=100)
    assert result == TrimResult(
        200, True, True, 100, ("never-read", "stuck"), ("never-read", "stuck"),
        {"audit": 0, "stuck": 150, "never-read": 300},
    )  # fmt: skip
    assert stream_ids(redis_client) == ids[-100:]


def test_a_hard_cap_that_only_loses_pending_entries(redis_client: redis.Redis) -> None:
    fill(redis_client, 300)
    redis_client.xgroup_create(KEYS.stream, "slow", id="0")
    redis_client.xreadgroup("slow", "c", {KEYS.stream: ">"}, count=300)  # never acknowledged
    result = trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=100)
    assert result == TrimResult(200, True, False, 100, ("slow",), (), {"slow": 300})


def test_the_hard_cap_cleaning_up_approximate_slack_is_not_forced(
    redis_client: redis.Redis,
) -> None:
    ids = fill(redis_client, 101)
    redis_client.xgroup_create(KEYS.stream, "processors", id="$")
    result = trim_shard(redis_client, KEYS, min_entries=50, hard_max_entries=50)
    assert result == TrimResult(51, False, False, 50, group_lags={"processors": 0})
    assert stream_ids(redis_client) == ids[-50:]


def test_a_missing_or_empty_stream(redis_client: redis.Redis) -> None:
    assert trim_shard(redis_client, KEYS, min_entries=1, hard_max_entries=5) == TrimResult(
        0, False, False, 0
    )
    redis_client.xgroup_create(KEYS.stream, "g", id="$", mkstream=True)
    assert trim_shard(redis_client, KEYS, min_entries=1, hard_max_entries=5).length == 0


def test_each_groups_lag_is_its_undelivered_plus_its_pending_entries(
    redis_client: redis.Redis,
) -> None:
    ids = fill(redis_client, 200)
    redis_client.xgroup_create(KEYS.stream, "busy", id="0")
    redis_client.xreadgroup("busy", "c", {KEYS.stream: ">"}, count=150)
    redis_client.xack(KEYS.stream, "busy", *ids[:100])  # 50 in flight, 50 undelivered
    redis_client.xgroup_create(KEYS.stream, "idle", id="$")
    redis_client.xgroup_create(KEYS.stream, "stopped", id="0")
    result = trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=1000)
    assert result.group_lags == {"busy": 100, "idle": 0, "stopped": 200}
    assert result.trimmed == 0  # "stopped" holds everything: the lag was read before the trim


def test_a_lag_redis_cannot_tell_counts_the_whole_stream(redis_client: redis.Redis) -> None:
    ids = fill(redis_client, 50)
    redis_client.xgroup_create(KEYS.stream, "g", id="0")
    redis_client.xreadgroup("g", "c", {KEYS.stream: ">"}, count=10)
    redis_client.xdel(KEYS.stream, ids[30])  # a hole after its position: Redis says lag nil
    (info,) = redis_client.xinfo_groups(KEYS.stream)
    assert info["lag"] is None
    result = trim_shard(redis_client, KEYS, min_entries=100, hard_max_entries=1000)
    assert result.group_lags == {"g": 49}  # the upper bound, never "caught up"


def test_bounds_are_validated(redis_client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="min_entries <= hard_max_entries"):
        trim_shard(redis_client, KEYS, min_entries=10, hard_max_entries=5)
    with pytest.raises(ValueError, match="min_entries <= hard_max_entries"):
        RetentionLoop(redis_client, prefix="ib", resource="pods", shard_count=1, min_entries=-1)
    with pytest.raises(ValueError, match="interval"):
        RetentionLoop(redis_client, prefix="ib", resource="pods", shard_count=1, interval=0)


def test_retention_loop_trims_every_shard_counts_and_stops_cleanly(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    shards = [ShardKeys("ib", "pods", shard) for shard in range(3)]
    for keys in shards:
        fill(redis_client, 120, keys)
    redis_client.xgroup_create(shards[2].stream, "dead", id="0")
    redis_client.set(ShardKeys("ib", "pods", 3).stream, "not a stream")  # shard 3 is broken
    seen: list[tuple[int, TrimResult]] = []
    passes: list[Sequence[TrimResult | None]] = []
    round_done = threading.Event()

    def on_result(keys: ShardKeys, result: TrimResult) -> None:
        seen.append((keys.shard, result))
        if keys.shard == 2:
            round_done.set()

    loop = RetentionLoop(
        redis_client,
        prefix="ib",
        resource="pods",
        shard_count=4,
        interval=60.0,
        min_entries=20,
        hard_max_entries=50,
        on_result=on_result,
        on_pass=passes.append,
    )
    with caplog.at_level(logging.WARNING, logger="reflector_svc.retention"):
        loop.start()
        assert round_done.wait(10)
        deadline = time.monotonic() + 10
        while loop.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        loop.stop()
        assert time.monotonic() - started < 2  # not waiting out the 60 s interval
    assert not loop.is_alive()
    assert [shard for shard, _ in seen] == [0, 1, 2]
    assert all(result.length <= 20 + SLACK for _, result in seen[:2])
    assert seen[2][1] == TrimResult(70, True, True, 50, ("dead",), ("dead",), {"dead": 120})
    assert (loop.forced_trims, loop.undelivered_trims, loop.errors) == (1, 1, 1)
    # Every shard's result in shard order, the broken one's as None (no partial sum passes).
    assert passes[0] == [result for _, result in seen] + [None]
    assert loop.trimmed_entries == sum(result.trimmed for _, result in seen)
    assert any(
        "hard cap 50 forced a trim of ib:{pods:2}:deltas: consumer group(s) dead lost" in m
        for m in caplog.messages
    )
    assert any("trimming ib:{pods:3}:deltas failed" in m for m in caplog.messages)


def test_retention_loop_stop_before_start_and_twice(redis_client: redis.Redis) -> None:
    loop = RetentionLoop(redis_client, prefix="ib", resource="pods", shard_count=2, interval=0.01)
    loop.stop()  # never started: nothing to join
    loop = RetentionLoop(redis_client, prefix="ib", resource="pods", shard_count=2, interval=0.01)
    loop.start()
    deadline = time.monotonic() + 5
    while loop.rounds < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.rounds >= 3  # it keeps going, on empty streams too
    loop.stop()
    loop.stop()
    assert not loop.is_alive()
