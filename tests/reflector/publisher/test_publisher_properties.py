"""Property: whatever the batch splits, crashes between shard writes, failovers and replays,
every shard's stream ends with exactly its keys' deltas, once each, in order."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.sharding import shard_for
from reflector_svc.publish_records import FencedError, PendingDelta
from reflector_svc.publisher import ShardPublisher
from tests.reflector.publisher.support import added, as_entry, deleted, stream_entries, updated
from tests.support.redis_server import RedisServer

SHARDS = 3
KEY_POOL = [f"ns-{i % 2}/pod-{i}" for i in range(7)]
MAX_STEPS = 80


@st.composite
def histories(draw: st.DrawFn) -> list[PendingDelta]:
    """A valid watch history: increasing RVs, deletions only of live keys, re-creations."""
    choices = draw(
        st.lists(
            st.tuples(st.integers(0, len(KEY_POOL) - 1), st.booleans()), min_size=1, max_size=40
        )
    )
    live: set[str] = set()
    events: list[PendingDelta] = []
    rv = 100
    for index, delete in choices:
        rv += draw(st.integers(1, 3))
        key = KEY_POOL[index]
        if key not in live:
            events.append(added(key, str(rv)))
            live.add(key)
        elif delete:
            events.append(deleted(key, str(rv)))
            live.discard(key)
        else:
            events.append(updated(key, str(rv)))
    return events


def resume_index(publisher: ShardPublisher, events: list[PendingDelta]) -> int:
    """Where a restarted reflector replays from: after the lowest shard checkpoint."""
    rvs = [checkpoint.rv for checkpoint in publisher.read_checkpoints()]
    if any(rv is None for rv in rvs):
        return 0
    lowest = min(int(rv) for rv in rvs if rv is not None)
    return next((i for i, e in enumerate(events) if int(e.resource_version) > lowest), len(events))


def make(client: redis.Redis) -> ShardPublisher:
    return ShardPublisher(client, prefix="ib", resource="pods", shard_count=SHARDS)


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(events=histories(), data=st.data())
def test_any_schedule_of_batches_crashes_and_replays_publishes_each_delta_once(
    redis_server: RedisServer, events: list[PendingDelta], data: st.DataObject
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
        _run_schedule(client, events, data)
        _check_final_state(client, events)
    finally:
        client.close()


def _run_schedule(client: redis.Redis, events: list[PendingDelta], data: st.DataObject) -> None:
    epoch = 1
    publisher = make(client)
    publisher.fence(epoch)
    position = 0
    dirty_until = 0  # events before this were all offered, but a crash may have left gaps
    for step in range(10_000):
        if position >= len(events):
            break
        size = data.draw(st.integers(1, 6), label="batch size")
        batch = events[position : position + size]
        checkpoint_rv = batch[-1].resource_version
        action = "ok"
        if step < MAX_STEPS:
            action = data.draw(
                st.sampled_from(["ok", "ok", "crash", "replay", "bookmark"]), label="action"
            )
        if action == "crash":
            groups: dict[int, list[PendingDelta]] = {}
            for pending in batch:
                groups.setdefault(publisher.shard_of(pending.key), []).append(pending)
            calls = publisher._publish_calls(epoch, groups, checkpoint_rv)
            survivors = data.draw(st.lists(st.booleans(), min_size=len(calls), max_size=len(calls)))
            publisher._execute([call for call, ran in zip(calls, survivors, strict=True) if ran])
            dirty_until = max(dirty_until, position + len(batch))
            # Failover: a new leader with a higher epoch fences, then resumes.
            zombie = publisher
            epoch += 1
            publisher = make(client)
            publisher.fence(epoch)
            if data.draw(st.booleans(), label="zombie writes"):
                with pytest.raises(FencedError):
                    zombie.publish(epoch - 1, batch, checkpoint_rv=checkpoint_rv)
            position = resume_index(publisher, events)
            continue
        publisher.publish(epoch, batch, checkpoint_rv=checkpoint_rv)
        position += len(batch)
        if action == "bookmark" and position >= dirty_until:
            publisher.advance_checkpoints(epoch, checkpoint_rv)
        elif action == "replay":
            # A restart replays from the resume point or from anywhere before it.
            position = data.draw(st.integers(0, resume_index(publisher, events)), label="replay")


def _check_final_state(client: redis.Redis, events: list[PendingDelta]) -> None:
    publisher = make(client)
    expected: dict[int, list[tuple[str, str, str]]] = {shard: [] for shard in range(SHARDS)}
    live: dict[str, PendingDelta] = {}
    for pending in events:
        expected[shard_for(pending.key, SHARDS)].append(as_entry(pending))
        if pending.type.value == "Deleted":
            live.pop(pending.key, None)
        else:
            live[pending.key] = pending
    for keys in publisher.shards:
        assert stream_entries(client, keys) == expected[keys.shard]
    assert publisher.known_versions() == {key: p.resource_version for key, p in live.items()}
    assert publisher.last_objects(KEY_POOL) == {key: p.envelope for key, p in live.items()}
    # The shard of the last event was checkpointed at it, and no checkpoint is beyond it.
    checkpoints = [int(cp.rv) for cp in publisher.read_checkpoints() if cp.rv is not None]
    last = events[-1]
    assert publisher.read_checkpoints()[shard_for(last.key, SHARDS)].rv == last.resource_version
    assert max(checkpoints) == int(last.resource_version)
