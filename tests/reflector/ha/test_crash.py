"""kill -9 of a reflector at the worst moments, then a restart: nothing lost, nothing twice.

Issue 4, points 4 and 6: each shard is written atomically with its known state and checkpoint,
so a crash at any point -- mid-list, mid-burst, even between two shards' writes of one batch --
leaves a state the next leader resumes from without losing or repeating a delta, and a restart
publishes nothing for objects that did not change while the reflector was down.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from apiserver_sim import Simulator
from reflector_svc.publisher import ShardPublisher, _Call
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus, Entry, ReflectorProcess, republish_problems
from tests.support.reflector_ha import SimHistory, assert_faithful, holds_lease, wait_caught_up
from tests.support.waiting import wait_until


def test_kill_9_during_the_initial_list_then_restart(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    pods = 3000
    sim.populate("pods", pods, seed=1)
    # Small pages and batches, each page answered slowly: the list takes seconds, so the kill
    # surely lands in the middle of it.
    sim.slow_responses(0.02)
    first = spawn("a", page_size=100, batch_max=100)
    wait_until(lambda: bus.length() > 0, 30, interval=0.005, what="the first deltas")
    first.kill()
    published = bus.settle()
    assert 0 < published < pods, "the kill did not land in the initial list"
    assert not bus.synced()
    assert all(checkpoint.get("relisting") == "1" for checkpoint in bus.checkpoints())
    sim.slow_responses(0)
    before, positions = bus.by_key(), bus.positions()

    second = spawn("b")
    wait_caught_up(bus, sim)
    assert second.probe("/readyz") == 200
    # The half-written list cannot be trusted: the new leader lists again (once) ...
    assert second.metric("informer_bus_reflector_lists_total", resource="pods") == 1
    assert second.terminate() == 0

    # ... and its diff publishes only what the first one had not: one Added per pod in all, at
    # the pod's only version.
    after = bus.all_entries(after=positions)
    assert republish_problems(before, after) == []
    assert len(after) == pods - published
    assert_faithful(bus, sim, history, exact=True)


def test_kill_9_during_a_burst_then_restart(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    sim.populate("pods", 2000, seed=2)
    first = spawn("a")
    wait_until(bus.synced, 30, what="the first reflector to sync")
    synced_length = bus.length()
    churn = sim.start_churn(rate=400, seconds=4, seed=2)
    wait_until(lambda: bus.length() >= synced_length + 300, 30, interval=0.005,
               what="the burst to reach the streams")  # fmt: skip
    first.kill()
    assert churn.running, "the kill did not land in the burst"
    killed_at = sim.resource_version
    bus.settle()
    before, positions = bus.by_key(), bus.positions()
    churn.wait(30)
    assert churn.error is None
    assert sim.resource_version > killed_at + 100  # the burst went on while nobody watched

    second = spawn("b")
    wait_caught_up(bus, sim)
    # It resumed the watch from the checkpoint: no list at all.
    assert (second.metric("informer_bus_reflector_lists_total", resource="pods") or 0) == 0
    assert second.terminate() == 0

    after = bus.all_entries(after=positions)
    assert after, "nothing was published after the restart"
    assert republish_problems(before, after) == []
    # No relist diff was needed (the watch resumed from the checkpoint), so every event of the
    # burst is on the streams exactly once, in order: the streams are the simulator's history.
    assert_faithful(bus, sim, history, exact=True)


def test_kill_9_then_history_compacted_restart_relists_only_the_changes(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    sim.populate("pods", 1500, seed=5)
    first = spawn("a")
    wait_until(bus.synced, 30, what="the first reflector to sync")
    churn = sim.start_churn(rate=400, seconds=3, seed=5)
    length = bus.length()
    wait_until(lambda: bus.length() >= length + 200, 30, interval=0.005,
               what="the churn to reach the streams")  # fmt: skip
    first.kill()
    bus.settle()
    known, positions = bus.known_versions(), bus.positions()
    churn.wait(30)
    assert churn.error is None
    history.events()  # read the history before the compaction drops it
    sim.compact()  # the checkpoint's resourceVersion is gone: the restart gets a 410

    second = spawn("b")
    wait_caught_up(bus, sim)
    assert second.metric("informer_bus_reflector_lists_total", resource="pods") == 1
    assert second.terminate() == 0

    # The relist diff, exactly: an upsert at the current version for each new or changed pod,
    # a tombstone carrying the last known version for each vanished one; nothing else.
    truth = sim.ground_truth("pods")
    expected = {(k, "Added" if k not in known else "Updated", v, False)
                for k, v in truth.items() if known.get(k) != v}  # fmt: skip
    expected |= {(k, "Deleted", v, True) for k, v in known.items() if k not in truth}
    after = bus.all_entries(after=positions)
    assert sorted((e.key, e.type, e.rv, e.tombstone) for e in after) == sorted(expected)
    assert any(tombstone for *_, tombstone in expected)
    assert_faithful(bus, sim, history, exact=False)


@pytest.mark.timeout(180)  # ~18 s alone; past 60 s once with two suites on 2 cores
def test_repeated_kill_9_at_random_moments_under_churn(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    sim.populate("pods", 1500, seed=3)
    sim.slow_responses(0.01)  # lists of 15 pages take a moment: kills may land inside them
    churn = sim.start_churn(rate=300, seconds=30, seed=3)
    restarts: list[tuple[dict[str, list[Entry]], dict[int, str]]] = []
    moments: list[float | str] = []
    for round_ in range(4):
        process = spawn(f"r{round_}", page_size=100, batch_max=100)
        if round_ == 0:  # in the initial list, with the churn already going
            wait_until(lambda: bus.length() > 0, 30, interval=0.005, what="the first deltas")
            moments.append("first deltas")
        else:  # anywhere: in a relist, a watch, a batch
            wait_until(functools.partial(holds_lease, bus, process), 15, interval=0.02,
                       what="the new reflector to lead")  # fmt: skip
            moments.append(round(rng.uniform(0.0, 1.0), 2))
            time.sleep(float(moments[-1]))
        process.kill()
        bus.settle()
        restarts.append((bus.by_key(), bus.positions()))
    last = spawn("last")
    time.sleep(0.5)
    churn.stop()
    assert churn.error is None
    wait_caught_up(bus, sim)
    assert last.terminate() == 0

    context = f"seed {seed}, kills after leading: {moments}"
    for before, positions in restarts:
        assert republish_problems(before, bus.all_entries(after=positions)) == [], context
    # A relist after a kill in a list may skip versions (that is what a relist diff does), so
    # faithful to the history, but not necessarily every version of it.
    assert_faithful(bus, sim, history, exact=False)


class CrashBetweenShards:
    """Wraps a publisher's pipeline runner to "kill" the reflector between two shards' writes.

    Once armed, it waits for the worst watch batch: one in which some shard's group upserts a
    key and then deletes it (replayed, such a pair finds the key unknown to the shard: only
    the shard's checkpoint tells it that the upsert is old). It writes the shards up to that
    one -- a prefix, as a crash in the middle of the pipeline would -- and leaves the rest out;
    then the process is "dead": that call and every later one fail before reaching Redis.
    """

    def __init__(self, publisher: ShardPublisher) -> None:
        self._execute = publisher._execute
        self.armed = threading.Event()
        self.crashed = threading.Event()
        self.written: list[int] = []
        self.unwritten: list[int] = []
        self.batch_rv = ""

    def __call__(self, calls: Sequence[_Call]) -> list[Any]:
        if self.crashed.is_set():
            raise redis.ConnectionError("this reflector is dead")
        watch_batch = all(len(call.keys) == 5 and call.args[1] == "1" for call in calls)
        prefix = _trap_prefix(calls) if self.armed.is_set() and watch_batch else None
        if prefix is None:
            return self._execute(calls)
        self._execute(calls[:prefix])
        self.written = [call.shard for call in calls[:prefix]]
        self.unwritten = [call.shard for call in calls[prefix:]]
        self.batch_rv = str(calls[0].args[2])
        self.crashed.set()
        raise redis.ConnectionError("killed between two shards' writes of one batch")


def _trap_prefix(calls: Sequence[_Call]) -> int | None:
    """How many calls to write so that the last written shard upserts then deletes one key
    and at least one shard stays unwritten; ``None`` when the batch has no such shard."""
    for index, call in enumerate(calls[:-1]):
        upserted = set()
        for at in range(3, len(call.args), 4):  # per delta: kind, key, rv, envelope
            kind, key = call.args[at], call.args[at + 1]
            if kind == "U":
                upserted.add(key)
            elif key in upserted:
                return index + 1
    return None


def test_crash_between_two_shards_writes_of_one_batch(
    sim: Simulator,
    history: SimHistory,
    bus: Bus,
    make_service: Callable[..., ReflectorService],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Few pods, many creations and deletions: one batch often creates or updates a pod and
    # then deletes it -- the hardest replay (the shard no longer knows the key).
    sim.populate("pods", 40, seed=4)
    first = make_service("a")
    publisher = first._runners[0].publisher
    crash = CrashBetweenShards(publisher)
    monkeypatch.setattr(publisher, "_execute", crash)
    wait_until(bus.synced, 30, what="the first reflector to sync")
    mix = {"create": 0.4, "update": 0.2, "delete": 0.4}
    churn = sim.start_churn(rate=500, seconds=3, seed=4, mix=mix)
    crash.armed.set()
    # Held-back events arrive together: big batches, where such pairs are likely.
    sim.stall_watches(0.6)
    wait_until(crash.crashed.is_set, 30, what="a batch to crash in")
    # What the crash left: the written shards' checkpoints are at the batch, the others behind.
    checkpoints = bus.checkpoints()
    assert all(checkpoints[shard]["rv"] == crash.batch_rv for shard in crash.written)
    assert all(int(checkpoints[shard]["rv"]) < int(crash.batch_rv) for shard in crash.unwritten)
    first.stop()  # only its lease survives the "crash"; let it go instead of waiting for expiry
    churn.wait(30)
    assert churn.error is None

    second = make_service("b")
    wait_caught_up(bus, sim)
    second.stop()

    # The replayed batch was skipped where it had been written and published where not.
    skipped = second.registry.get_sample_value(
        "informer_bus_reflector_deltas_skipped_total", {"resource": "pods"}
    )
    assert skipped is not None and skipped > 0
    assert_faithful(bus, sim, history, exact=True)
