"""Property: whatever the batch splits, crashes (between shard writes, and between the
sub-batches of a batch with moves: between a move's two halves), failovers and replays, every
shard's stream ends with exactly its keys' deltas, once each, in order, and every key's known
state is on exactly the one shard its last object maps to.

Two resources: one sharded by key, one sharded by owner whose objects change owners (so
they move between shards, :mod:`reflector_svc.moves`). The expected streams come from
:func:`ideal_streams`, what a publisher that never crashed would have written: a move's
outgoing half on the old shard (the key's last state there), then its incoming half on the new
one, naming the outgoing half's stream id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.deltas import DeltaType
from common.shard_routing import ShardKeyChoice
from common.sharding import shard_for
from common.wire import FIELD, decode_header
from reflector_svc.publish_records import FencedError, PendingDelta
from reflector_svc.publisher import ShardPublisher, _Call
from tests.reflector.publisher.support import (
    added,
    deleted,
    move_entries,
    owned,
    updated,
)
from tests.support.redis_server import RedisServer

SHARDS = 3
KEY_POOL = [f"ns-{i % 2}/pod-{i}" for i in range(7)]
OWNER_POOL = [None, "w-a", "w-b", "w-c", "w-d"]
MAX_STEPS = 80

Expected = tuple[str, str, str, tuple[Any, ...] | None]
"""(type, key, rv, move): ``("to", shard)`` on an outgoing half, ``("from", shard, index)`` on
an incoming half (the outgoing half is entry ``index`` of that shard's stream)."""


@st.composite
def histories(draw: st.DrawFn, *, by_owner: bool = False) -> list[PendingDelta]:
    """A valid watch history: increasing RVs, deletions only of live keys, re-creations; by
    owner, every upsert names a controlling owner (or none) drawn anew, so owners change."""
    choices = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(KEY_POOL) - 1),
                st.booleans(),
                st.integers(0, len(OWNER_POOL) - 1),
            ),
            min_size=6 if by_owner else 1,
            max_size=40,
        )
    )
    live: dict[str, str | None] = {}
    events: list[PendingDelta] = []
    rv = 100
    for index, delete, owner_index in choices:
        rv += draw(st.integers(1, 3))
        key = KEY_POOL[index]
        owner = OWNER_POOL[owner_index]
        if key not in live:
            kind = DeltaType.ADDED
        elif delete:
            kind = DeltaType.DELETED
            owner = live[key]  # a deletion carries the object's last state
        else:
            kind = DeltaType.UPDATED
        if by_owner:
            events.append(owned(kind, key, str(rv), owner))
        else:
            events.append(
                {"Added": added, "Updated": updated, "Deleted": deleted}[kind](key, str(rv))
            )
        if kind is DeltaType.DELETED:
            del live[key]
        else:
            live[key] = owner
    return events


def target(delta: PendingDelta) -> int:
    return shard_for(delta.key if delta.shard_key is None else delta.shard_key, SHARDS)


def ideal_streams(
    events: Sequence[PendingDelta],
) -> tuple[dict[int, list[Expected]], dict[str, int], dict[str, str]]:
    """What a publisher that never crashed writes: each shard's entries, where each live key
    is, and its version."""
    streams: dict[int, list[Expected]] = {shard: [] for shard in range(SHARDS)}
    where: dict[str, int] = {}
    version: dict[str, str] = {}
    for event in events:
        key, rv = event.key, event.resource_version
        if event.type is DeltaType.DELETED:
            streams[where.pop(key)].append(("Deleted", key, rv, None))
            del version[key]
            continue
        to = target(event)
        current = where.get(key)
        if current is None or current == to:
            streams[to].append((event.type.value, key, rv, None))
        else:
            streams[current].append(("Deleted", key, version[key], ("to", to)))
            index = len(streams[current]) - 1
            streams[to].append(("Added", key, rv, ("from", current, index)))
        where[key] = to
        version[key] = rv
    return streams, where, version


def resume_index(publisher: ShardPublisher, events: list[PendingDelta]) -> int:
    """Where a restarted reflector replays from: after its resume point (the lowest shard
    checkpoint). Reading it also reloads where every key is, as a new leader does."""
    rv = publisher.resume_point().resource_version
    if rv is None:
        return 0
    return next((i for i, e in enumerate(events) if int(e.resource_version) > int(rv)), len(events))


def make(client: redis.Redis, shard_key: ShardKeyChoice) -> ShardPublisher:
    return ShardPublisher(
        client, prefix="ib", resource="pods", shard_count=SHARDS, shard_key=shard_key
    )


class Crash(Exception):
    """The reflector process died mid-publish."""


class DiesMidPublish:
    """Wraps a publisher's pipeline runner: lets ``rounds`` round trips of script calls through
    (the sub-batches before), then runs only a drawn subset of the next one's calls (a crash
    in the middle of its pipeline, or right before or after it) and dies."""

    def __init__(self, publisher: ShardPublisher, rounds: int, data: st.DataObject) -> None:
        self._execute = publisher._execute
        self._rounds = rounds
        self._data = data

    def __call__(self, calls: Sequence[_Call]) -> list[Any]:
        if self._rounds > 0:
            self._rounds -= 1
            return self._execute(calls)
        ran = self._data.draw(st.lists(st.booleans(), min_size=len(calls), max_size=len(calls)))
        self._execute([call for call, runs in zip(calls, ran, strict=True) if runs])
        raise Crash


@pytest.mark.slow
@pytest.mark.timeout(180)  # 300 examples by owner take ~10 s alone, more on a loaded machine
@pytest.mark.parametrize("shard_key", ["key", "owner"])
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=st.data())
def test_any_schedule_of_batches_crashes_and_replays_publishes_each_delta_once(
    redis_server: RedisServer, shard_key: str, data: st.DataObject
) -> None:
    choice = ShardKeyChoice.parse(shard_key)
    events = data.draw(histories(by_owner=not choice.by_object_key), label="events")
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
        _run_schedule(client, events, data, choice)
        _check_final_state(client, events, choice)
    finally:
        client.close()


def _run_schedule(
    client: redis.Redis, events: list[PendingDelta], data: st.DataObject, choice: ShardKeyChoice
) -> None:
    # Sharded by owner, crashes are twice as likely: most of them should land in batches
    # with moves, some between a move's two halves.
    actions = ["ok", "ok", "crash", "replay", "bookmark"]
    if not choice.by_object_key:
        actions.append("crash")
    epoch = 1
    publisher = make(client, choice)
    publisher.fence(epoch)
    position = resume_index(publisher, events)
    dirty_until = 0  # events before this were all offered, but a crash may have left gaps
    for step in range(10_000):
        if position >= len(events):
            break
        size = data.draw(st.integers(1, 6), label="batch size")
        batch = events[position : position + size]
        checkpoint_rv = batch[-1].resource_version
        action = "ok"
        if step < MAX_STEPS:
            action = data.draw(st.sampled_from(actions), label="action")
        if action == "crash":
            rounds = data.draw(st.integers(0, 3), label="round trips before the crash")
            publisher._execute = DiesMidPublish(publisher, rounds, data)  # type: ignore[method-assign]
            with contextlib.suppress(Crash):
                publisher.publish(epoch, batch, checkpoint_rv=checkpoint_rv)
            dirty_until = max(dirty_until, position + len(batch))
            # Failover: a new leader with a higher epoch fences, then resumes.
            zombie = publisher
            del zombie._execute  # the zombie's process is alive again: its calls reach Redis
            epoch += 1
            publisher = make(client, choice)
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


def _check_final_state(
    client: redis.Redis, events: list[PendingDelta], choice: ShardKeyChoice
) -> None:
    publisher = make(client, choice)
    streams, where, version = ideal_streams(events)
    actual = {keys.shard: move_entries(client, keys) for keys in publisher.shards}
    for shard, entries in actual.items():
        written = []
        for kind, key, rv, move, _ in entries:
            if move is None:
                written.append((kind, key, rv, None))
            elif move.outgoing:
                written.append((kind, key, rv, ("to", move.to_shard)))
            else:
                assert move.from_shard is not None
                ids = [entry[4] for entry in actual[move.from_shard]]
                assert move.from_id in ids, f"{key}: the incoming half names no outgoing half"
                written.append((kind, key, rv, ("from", move.from_shard, ids.index(move.from_id))))
        assert written == streams[shard], f"shard {shard}"
    # Every live key is known by exactly the shard its last object maps to, at its last version,
    # with its last entry there as its known state; no other shard knows anything.
    for keys in publisher.shards:
        known = {k.decode(): v.decode() for k, v in client.hgetall(keys.versions).items()}
        mine = {key: version[key] for key, shard in where.items() if shard == keys.shard}
        assert known == mine, f"shard {keys.shard}"
        objects = {k.decode(): v for k, v in client.hgetall(keys.objects).items()}
        last = {}
        for _, fields in client.xrange(keys.stream):
            last[decode_header(fields[FIELD]).key] = fields[FIELD]
        assert objects == {key: last[key] for key in mine}
    assert {key: target_of_last(events, key) for key in where} == where
    # The shard of the last event was checkpointed at it, and no checkpoint is beyond it.
    checkpoints = publisher.read_checkpoints()
    last_event = events[-1]
    shard_of_last = _shard_of_last_entry(streams, last_event)
    assert checkpoints[shard_of_last].rv == last_event.resource_version
    assert max(int(cp.rv) for cp in checkpoints if cp.rv is not None) == int(
        last_event.resource_version
    )
    # Nothing is left half moved: every pending move's incoming half is on its stream.
    publisher.advance_checkpoints(99, last_event.resource_version)
    assert all(client.hlen(keys.moving) == 0 for keys in publisher.shards)


def target_of_last(events: Sequence[PendingDelta], key: str) -> int:
    return target([event for event in events if event.key == key][-1])


def _shard_of_last_entry(streams: dict[int, list[Expected]], event: PendingDelta) -> int:
    for shard, entries in streams.items():
        if entries and entries[-1][1:3] == (event.key, event.resource_version):
            return shard
    raise AssertionError(f"no stream ends with {event}")
