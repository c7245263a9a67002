"""Property: whatever the schedule of owners dying at any instant, a group's handlers, taken
together across all of its owners, converge on the view's truth.

Each example draws a history of one shard (keys entering, updated in, leaving and deleted from
a label view with a metadata projection, or no view at all) and a schedule of owners, each
taking the shard over from a real Redis and running until it dies: after its handler's n-th
call (recorded or not: the kill came before or after the call's effect), or at its n-th fenced
script call (run or not: Redis had it, or not, when the process died), or at a clean stop;
between owners more of the history is published while nobody owns the shard. Every handler
call of every owner goes to one log, what an application keeping its state outside the
process ends up with. After a last owner that lives, replaying that log must give exactly the
objects the view selects, at their last versions, and on the way: no update or deletion of a
key the handlers do not hold (a deletion may repeat when its owner died before acknowledging
it), no live add of a key they hold, and nothing the projection takes away.

A deletion of a key the log never added is allowed for one reason only: an owner died after
handing the key to its handlers and before the call ran (it was in the held set, or in a
pending entry, when the owner died: ``processor_svc.held_keys`` says why that side is chosen).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.deltas import DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.store import Indexer
from common.wire import FIELD, decode_envelope
from processor_svc.fenced_stream import OwnershipLostError
from processor_svc.view import GroupView
from reflector_svc.publish_records import PendingDelta
from tests.processor.shard.support import (
    RESOURCE,
    Shard,
    delivered_and_acknowledged,
    entry,
    pod,
)
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

KEYS = [f"ns/p{i}" for i in range(3)]
VIEWS: dict[str, dict[str, str] | None] = {
    "label-view": {"label_selector": "app=web", "project": "metadata"},
    "no-view": None,
}


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[DeltaType, Obj]]:
    """A valid watch history: upserts with the label in or out of the view, deletions of live
    keys (their last state), re-creations; increasing resourceVersions."""
    live: dict[str, Obj] = {}
    events: list[tuple[DeltaType, Obj]] = []
    for rv, (index, action) in enumerate(
        draw(st.lists(st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 3)), max_size=40)),
        start=1,
    ):
        key = KEYS[index]
        if key in live and action == 0:
            gone = pod(key, str(rv), app=live[key]["metadata"]["labels"]["app"])
            events.append((DeltaType.DELETED, gone))
            del live[key]
            continue
        kind = DeltaType.UPDATED if key in live else DeltaType.ADDED
        live[key] = pod(key, str(rv), app="db" if action == 1 else "web")
        events.append((kind, live[key]))
    return events


@dataclass
class Log:
    """Every handler call of every owner, in the order they happened, and what each dead
    owner had handed its handlers when it died (from the log's length at that moment)."""

    calls: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    handed: list[tuple[int, set[str]]] = field(default_factory=list)

    def handed_before(self, index: int) -> set[str]:
        return {key for at, keys in self.handed if at <= index for key in keys}


def handed_at_death(shard: Shard, view: GroupView | None) -> set[str]:
    """The keys a dead owner had handed: the held set's, and those of the selected states in
    the group's pending entries."""
    client: Any = shard.client
    keys = {key.decode() for key in client.hkeys(shard.keys.held)}
    for row in client.xpending_range(shard.keys.stream, shard.keys.group, "-", "+", 1000):
        for _, fields in client.xrange(shard.keys.stream, row["message_id"], row["message_id"]):
            envelope = decode_envelope(fields[FIELD])
            obj = envelope.obj
            upsert = obj is not None and envelope.type is not DeltaType.DELETED
            if upsert and (view is None or view.selects(obj)):
                keys.add(envelope.key)
    return keys


class Dies(Exception):
    """The owner's process was killed."""


class LoggingHandler:
    """An owner's handler: logs each call; the owner dies at its ``die_at``-th call."""

    def __init__(self, log: Log, dead: threading.Event, die_at: int, before: bool) -> None:
        self._log, self._dead, self._die_at, self._before = log, dead, die_at, before
        self._calls = 0

    def _call(self, kind: str, key: str, obj: Any, flag: Any) -> None:
        if self._dead.is_set():
            return  # a dead process calls no handler
        self._calls += 1
        if self._calls == self._die_at and self._before:
            self._dead.set()
            return
        with self._log.lock:
            self._log.calls.append((kind, key, obj, flag))
        if self._calls == self._die_at:
            self._dead.set()

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self._call("add", key_of(obj), obj, is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._call("update", key_of(new), new, old)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else key_of(obj)
        self._call("delete", key, obj, None)


def key_of(obj: Obj) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def dying_scripts(
    call: Callable[..., list[Any]], dead: threading.Event, die_at: int, runs: bool
) -> Callable[..., list[Any]]:
    """A fenced stream's script runner whose process dies at its ``die_at``-th call (which
    Redis ran, or not); a dead process's calls never reach Redis."""
    count = 0

    def run(*args: Any, **kwargs: Any) -> list[Any]:
        nonlocal count
        if dead.is_set():
            raise OwnershipLostError("the process", "died")
        count += 1
        if count == die_at:
            if runs:
                call(*args, **kwargs)
            dead.set()
            raise OwnershipLostError("the process", "died")
        return call(*args, **kwargs)

    return run


def run_owner(
    shard: Shard,
    log: Log,
    view: GroupView | None,
    death: tuple[str, int, bool],
    live: list[PendingDelta],
) -> None:
    """One owner, with a fresh lease epoch, until it dies or has handled everything; ``live``
    is published once it synced (or died), in two parts."""
    shard.lease.release()
    status = shard.lease.try_acquire_or_renew()
    assert status.held
    shard.epoch = status.epoch
    how, at, flag = death
    dead = threading.Event()
    handler = LoggingHandler(log, dead, at if how == "handler" else 0, before=flag)
    dispatcher = shard.dispatcher(("log", handler))
    worker = shard.worker(Indexer(), dispatcher, block_ms=50, view=view)
    # Every owner's scripts stop reaching Redis the moment it dies, however it dies.
    stream: Any = worker._stream
    stream._call = dying_scripts(stream._call, dead, at if how == "script" else 0, flag)
    dispatcher.start()
    worker.start()
    try:
        wait_until(lambda: worker.has_synced or dead.is_set(), what="the takeover")
        half = len(live) // 2
        for part in (live[:half], live[half:]):
            if part:
                shard.publish(*part)
        deadline = time.monotonic() + 10
        while not dead.is_set() and not (worker.has_synced and delivered_and_acknowledged(shard)):
            assert time.monotonic() < deadline, "the owner neither died nor caught up"
            time.sleep(0.01)
    finally:
        if dead.is_set() or how != "clean":
            dead.set()
            worker.lost()
            dispatcher.stop(0)
            with log.lock:
                log.handed.append((len(log.calls), handed_at_death(shard, view)))
        else:
            worker.stop(2.0)
            dispatcher.stop(2.0)


def published(events: list[tuple[DeltaType, Obj]]) -> list[PendingDelta]:
    return [entry(kind, obj) for kind, obj in events]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("view_name", list(VIEWS))
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=st.data())
def test_any_schedule_of_owners_dying_converges_on_the_views_truth(
    redis_server: RedisServer, view_name: str, data: st.DataObject
) -> None:
    options = VIEWS[view_name]
    view = None if options is None else GroupView(RESOURCE, **options)
    history = data.draw(histories(), label="history")
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    shard = Shard(client, redis_server.url)
    log = Log()
    try:
        position = 0
        for _ in range(data.draw(st.integers(1, 5), label="owners that die")):
            step = data.draw(st.integers(0, 6), label="published while nobody owns the shard")
            if history[position : position + step]:
                shard.publish(*published(history[position : position + step]))
            position += step
            step = data.draw(st.integers(0, 8), label="published while the owner runs")
            live = published(history[position : position + step])
            position += step
            death = data.draw(
                st.tuples(
                    st.sampled_from(["handler", "script", "clean"]),
                    st.integers(1, 16),
                    st.booleans(),
                ),
                label="how the owner ends",
            )
            run_owner(shard, log, view, death, live)
        run_owner(shard, log, view, ("clean", 0, False), published(history[position:]))
        check(log, history, view, shard)
    finally:
        shard.close()
        client.close()


def check(
    log: Log, history: list[tuple[DeltaType, Obj]], view: GroupView | None, shard: Shard
) -> None:
    held: dict[str, Obj | None] = {}
    last_call: dict[str, str] = {}
    for index, (kind, key, obj, flag) in enumerate(log.calls):
        state = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        if view is not None and state is not None:
            assert set(state) <= {"apiVersion", "kind", "metadata"}, f"{key}: not projected"
        if kind == "add":
            assert flag or key not in held, f"{key}: a live add of a key the handlers hold"
            held[key] = state
        elif kind == "update":
            assert key in held, f"{key}: an update of a key the handlers do not hold"
            held[key] = state
        else:
            repeated = last_call.get(key) == "delete"
            handed = key not in last_call and key in log.handed_before(index)
            assert key in held or repeated or handed, f"{key}: deleted, not held: {log.calls}"
            held.pop(key, None)
        last_call[key] = kind
    truth: dict[str, Obj] = {}
    for kind, obj in history:
        key = key_of(obj)
        if kind is DeltaType.DELETED or (view is not None and not view.selects(obj)):
            truth.pop(key, None)
        else:
            truth[key] = obj
    versions = {
        key: (obj or {}).get("metadata", {}).get("resourceVersion") for key, obj in held.items()
    }
    expected = {key: obj["metadata"]["resourceVersion"] for key, obj in truth.items()}
    assert versions == expected, f"the handlers hold {versions}, the view {expected}: {log.calls}"
    recorded: Any = shard.client.hgetall(shard.keys.held)
    assert sorted(k.decode() for k in recorded) == sorted(truth)
    wait_until(lambda: shard.pending() == 0, what="nothing left pending")
