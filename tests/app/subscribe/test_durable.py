"""Durable subscribers (``group=``): acknowledgement, resume, the initial list, refusals."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis

from common.deltas import DeltaType
from common.lease import RedisLease
from common.redis_layout import ResourceKeys, ShardKeys
from common.wire import FIELD
from informer_bus.subscription import (
    SubscribedDelta,
    SubscribeError,
    UndecodableEntry,
    subscribe_durable,
)
from processor_svc.membership import Membership
from reflector_svc.retention import trim_shard
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.bus import Bus
from tests.support.cli import one_line_error
from tests.support.redis_server import RedisServer
from tests.support.subscribe_cli import (
    PROGRAM,
    SHARDS,
    Deadline,
    Pipeline,
    Publisher,
    add_raw_entry,
    json_lines,
    run_subscribe,
    start_subscribe,
)
from tests.support.waiting import wait_until

GROUP = "audit"


class Crash(Exception):
    """What a caller's handler raises in the tests: the process died while handling a delta."""


def durable(client: redis.Redis, seconds: float = 1.0, **options: Any) -> Any:
    """An open durable subscription (so that refusals raise here)."""
    options.setdefault("group", GROUP)
    options.setdefault("shard_count", SHARDS)
    stop = Deadline(seconds)
    return subscribe_durable(client, "pods", stop=stop, block_ms=100, **options).open()


def take(deltas: Any, count: int) -> list[SubscribedDelta]:
    return [next(deltas) for _ in range(count)]


def pending(client: redis.Redis, group: str = GROUP) -> int:
    """Entries delivered to the group and not acknowledged, over every shard."""
    return sum(
        int(client.xpending(ShardKeys("ib", "pods", shard).stream, group)["pending"])
        for shard in range(SHARDS)
    )


def markers(client: redis.Redis, group: str = GROUP) -> int:
    """Shards whose initial list the group has not acknowledged yet."""
    return sum(
        int(client.exists(ShardKeys("ib", "pods", shard).for_group(group).initial_list))
        for shard in range(SHARDS)
    )


def versions(deltas: list[SubscribedDelta]) -> list[tuple[str, str]]:
    return [(d.key, d.resource_version) for d in deltas]


def test_a_new_group_gets_the_known_state_then_resumes_after_what_was_acknowledged(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(6)))
    publisher.publish(updated("ns/p0", "2"), deleted("ns/p5", "3"))
    ends, known = bus.positions(), bus.known_versions()
    with durable(redis_client) as deltas:
        initial = take(deltas, 5)
        publisher.publish(*(updated(f"ns/p{i}", str(10 + i)) for i in range(5)))
        publisher.publish(*(updated(f"ns/p{i}", str(20 + i)) for i in range(5)))
        live = take(deltas, 4)
        with pytest.raises(Crash), deltas:
            fifth = next(deltas)
            raise Crash  # while the fifth live delta is being handled
    assert all(d.initial and d.type.value == "Added" for d in initial)
    assert sorted(versions(initial)) == sorted(known.items())
    # the known state is as of the stream's end when the group was created (its entry_id)
    assert {(d.shard, d.entry_id) for d in initial} <= set(ends.items())
    assert not any(d.initial for d in [*live, fifth])
    assert markers(redis_client) == 0
    assert pending(redis_client) == 10 - 4  # the fifth and all that was read behind it

    with durable(redis_client) as deltas:
        again = list(deltas)
    assert pending(redis_client) == 0
    # exactly what was not acknowledged, the fifth first (one shard's order is stream order)
    assert sorted(versions(again)) == sorted(
        {(f"ns/p{i}", str(n + i)) for n in (10, 20) for i in range(5)} - set(versions(live))
    )
    assert next(d for d in again if d.shard == fifth.shard).entry_id == fifth.entry_id
    for key in {d.key for d in again}:
        rvs = [int(d.resource_version) for d in again if d.key == key]
        assert rvs == sorted(rvs)

    publisher.publish(deleted("ns/p1", "40"))
    with durable(redis_client) as deltas:
        assert versions(list(deltas)) == [("ns/p1", "40")]  # closed normally: all acknowledged


def test_a_group_created_after_retention_trimmed_the_stream_starts_with_the_known_state(
    pipeline: Pipeline,
) -> None:
    keys = pipeline.churn(updates=4, deletions=3)
    client = pipeline.bus.client
    for shard in pipeline.bus.shards:  # what the hard cap does to a stream nobody held
        trim_shard(client, shard, min_entries=0, hard_max_entries=0)
    assert pipeline.bus.all_entries() == []
    truth = pipeline.sim.ground_truth("pods")

    with durable(client, seconds=15) as deltas:
        initial = take(deltas, len(truth))
        changed = pipeline.sim.update("pods", keys[0], {"metadata": {"labels": {"v": "2"}}})
        pipeline.sim.delete("pods", keys[1])
        after = take(deltas, 2)

    assert len(truth) == 30 - 3
    assert sorted(versions(initial)) == sorted((key, str(rv)) for key, rv in truth.items())
    assert all(d.initial and d.type is DeltaType.ADDED and d.obj is not None for d in initial)
    # two keys, maybe two shards: no order between them
    assert sorted((d.key, d.type, d.initial) for d in after) == [
        (keys[0], DeltaType.UPDATED, False), (keys[1], DeltaType.DELETED, False),
    ]  # fmt: skip
    assert {d.key: d.resource_version for d in after}[keys[0]] == str(changed.rv)
    assert [d.as_json_dict()["initial"] for d in (initial[0], after[0])] == [True, False]


def test_a_crash_during_the_initial_list_delivers_it_again(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(20)))
    with pytest.raises(Crash), durable(redis_client) as deltas:
        take(deltas, 7)
        raise Crash
    assert markers(redis_client) >= 1  # the shards whose list was cut short
    publisher.publish(updated("ns/p3", "5"))  # after the first snapshot, before the second

    with durable(redis_client) as deltas:
        redone = list(deltas)
        assert markers(redis_client) == 0  # asking past the list acknowledged it
    redone_shards = {d.shard for d in redone}
    assert all(d.initial for d in redone)
    expected = {
        (key, rv)
        for key, rv in bus.known_versions().items()
        if ShardKeys.for_key("ib", "pods", key, SHARDS).shard in redone_shards
    }
    assert set(versions(redone)) == expected  # whole lists, as of the new snapshot
    if ShardKeys.for_key("ib", "pods", "ns/p3", SHARDS).shard in redone_shards:
        assert ("ns/p3", "5") in versions(redone)
    assert pending(redis_client) == 0

    publisher.publish(updated("ns/p4", "6"))
    with durable(redis_client) as deltas:
        assert [(d.key, d.initial) for d in deltas] == [("ns/p4", False)]


def test_filtered_out_and_undecodable_entries_are_acknowledged(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(added("shop/a", "1"))
    with durable(redis_client, namespace="shop") as deltas:
        assert versions(list(deltas)) == [("shop/a", "1")]
    publisher.publish(*(added(f"{ns}/p{i}", "2") for ns in ("shop", "blog") for i in range(6)))
    garbage = add_raw_entry(redis_client, bus.shards[2].stream, FIELD, b"not an envelope")
    publisher.publish(updated("shop/a", "3"))
    reported: list[UndecodableEntry] = []

    with durable(redis_client, namespace="shop", on_undecodable=reported.append) as deltas:
        seen = list(deltas)

    assert sorted(versions(seen)) == sorted(
        [("shop/a", "3")] + [(f"shop/p{i}", "2") for i in range(6)]
    )
    assert [r.entry_id for r in reported] == [garbage]
    assert pending(redis_client) == 0


def test_groups_processors_use_and_bad_arguments_are_refused(
    redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(added("ns/a", "1"))
    member = Membership(redis_client, prefix="ib", resource="pods", member_id="m-1", ttl=30,
                        group="billing")  # fmt: skip
    member.heartbeat()
    with pytest.raises(SubscribeError, match="group 'billing' has 1 live processor member"):
        durable(redis_client, group="billing")
    keys = ShardKeys("ib", "pods", 2).for_group("payroll")
    lease = RedisLease(redis_client, key=keys.lease, epoch_key=keys.lease_epoch, holder="m-2")
    assert lease.try_acquire_or_renew().held
    with pytest.raises(SubscribeError, match=r"holds processor shard leases \(ib:\{pods:2\}"):
        durable(redis_client, group="payroll")
    with pytest.raises(SubscribeError, match="processors' default group"):
        durable(redis_client, group="processors")
    with pytest.raises(SubscribeError, match="group name 'a:b' is invalid"):
        durable(redis_client, group="a:b")
    # a member whose deadline passed is no one: its group is free
    redis_client.zadd(ResourceKeys("ib", "pods").group("gone").members, {"m-3": 1})
    with durable(redis_client, group="gone") as deltas:
        assert [d.key for d in deltas] == ["ns/a"]
    assert not redis_client.exists(ShardKeys("ib", "pods", 0).for_group("billing").lease)
    for stream in (ShardKeys("ib", "pods", s).stream for s in range(SHARDS)):
        assert {g["name"] for g in redis_client.xinfo_groups(stream)} == {b"gone"}


class Lines:
    """A child's stdout lines, read by a thread: a test can wait for them with a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def until(
        self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 30
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        taken: list[dict[str, Any]] = []
        while not done(taken):
            left = deadline - time.monotonic()
            try:
                taken.append(orjson.loads(self._lines.get(timeout=max(left, 0))))
            except queue.Empty:
                raise AssertionError(f"not done after {len(taken)} lines") from None
        return taken


def read_lines(process: subprocess.Popen[str], count: int) -> list[dict[str, Any]]:
    """The next ``count`` lines of a child that is printing them; reads no further, so a child
    with more to print soon blocks on a full pipe."""
    assert process.stdout is not None
    return [orjson.loads(process.stdout.readline()) for _ in range(count)]


def blocked_with_pending(client: redis.Redis) -> bool:
    """Entries are pending and stay so for a while: the subscriber is stuck, not between an
    acknowledgement and its next read."""
    before = pending(client)
    time.sleep(0.3)
    return before > 0 and pending(client) == before


def rvs_per_key(lines: list[dict[str, Any]]) -> dict[str, list[int]]:
    per_key: dict[str, list[int]] = {}
    for line in lines:
        per_key.setdefault(line["key"], []).append(int(line["resourceVersion"]))
    return per_key


def test_kill_9_mid_stream_then_a_restart_prints_everything(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    keys = [f"ns/p{i}" for i in range(40)]
    publisher.publish(*(added(key, "1") for key in keys))
    first = start_subscribe(redis_server.url, "pods", "--group", GROUP)
    try:
        initial = read_lines(first, len(keys))
        # far more than a pipe holds: the subscriber is blocked writing, mid-batch, when killed
        for rv in range(2, 52):
            publisher.publish(*(updated(key, str(rv)) for key in keys))
        before_kill = read_lines(first, 150)
        # no more reading: it fills the pipe and blocks writing, its batch unacknowledged
        wait_until(lambda: blocked_with_pending(redis_client), 20, "the subscriber to block")
    finally:
        first.kill()  # SIGKILL: no close, no acknowledgement
        # what it had written into the pipe by then was printed (and may be acknowledged);
        # read through the text buffer, which holds part of it already
        assert first.stdout is not None
        rest = first.stdout.read()
        first.communicate(timeout=15)
    before_kill += [
        orjson.loads(line) for line in rest.splitlines(keepends=True) if line.endswith("\n")
    ]
    assert all(line["initial"] and line["type"] == "Added" for line in initial)
    unacknowledged = pending(redis_client)
    assert unacknowledged > 0

    expected = {(key, str(rv)) for key in keys for rv in range(2, 52)}
    second = start_subscribe(redis_server.url, "pods", "--group", GROUP)
    try:
        after_restart = Lines(second).until(
            lambda taken: (
                expected <= {(d["key"], d["resourceVersion"]) for d in before_kill + taken}
            )
        )
    finally:
        second.send_signal(signal.SIGINT)
        second.communicate(timeout=15)
    printed = [(d["key"], d["resourceVersion"]) for d in before_kill + after_restart]
    assert expected <= set(printed)
    assert not any(line["initial"] for line in after_restart)
    for run in (before_kill, after_restart):  # each run prints every key's deltas in order
        for key, rvs in rvs_per_key(run).items():
            assert rvs == sorted(set(rvs)), key
    # at least once: what was printed before the kill but not acknowledged comes again
    redelivered = len(printed) - len(set(printed))
    assert 0 < redelivered <= unacknowledged
    assert pending(redis_client) == 0  # Ctrl-C acknowledged what the second run printed


def test_the_command_line_resumes_marks_the_initial_list_and_refuses_mistakes(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(8)))

    table = run_subscribe(redis_server.url, "pods", "--group", GROUP, "-o", "table", "--count", "8")
    assert table.returncode == 0, table.stderr
    assert all(line.endswith("  (initial)") for line in table.stdout.splitlines()[1:])
    publisher.publish(updated("ns/p1", "2"), updated("ns/p1", "3"))
    resumed = run_subscribe(redis_server.url, "pods", "--group", GROUP, "--count", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert [(d["key"], d["resourceVersion"], d["initial"]) for d in json_lines(resumed.stdout)] == [
        ("ns/p1", "2", False),
    ]
    resumed = run_subscribe(redis_server.url, "pods", "--group", GROUP, "--count", "1")
    assert [d["resourceVersion"] for d in json_lines(resumed.stdout)] == ["3"]

    line = one_line_error(
        run_subscribe(redis_server.url, "pods", "--group", GROUP, "--from-beginning"), PROGRAM
    )
    assert "--from-beginning and --group exclude each other" in line
    Membership(redis_client, prefix="ib", resource="pods", member_id="m-1", ttl=30,
               group="billing").heartbeat()  # fmt: skip
    line = one_line_error(run_subscribe(redis_server.url, "pods", "--group", "billing"), PROGRAM)
    assert "group 'billing' has 1 live processor member" in line


def test_a_group_that_retention_cut_off_starts_again_from_the_known_state(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(12)))
    with durable(redis_client) as deltas:
        assert len(list(deltas)) == 12
    # an ordinary trim, while stopped and with nothing missed: the group just resumes
    for shard in bus.shards:
        trim_shard(redis_client, shard, min_entries=0, hard_max_entries=1000)
    publisher.publish(updated("ns/p0", "2"))
    with durable(redis_client) as deltas:
        assert [(d.key, d.initial) for d in deltas] == [("ns/p0", False)]

    publisher.publish(*(updated(f"ns/p{i}", "3") for i in range(12)))
    publisher.publish(deleted("ns/p1", "4"))
    for shard in bus.shards:  # the hard cap, past what the stopped group had not read
        assert trim_shard(redis_client, shard, min_entries=0, hard_max_entries=0).trimmed >= 0
    publisher.publish(updated("ns/p2", "5"))
    known = bus.known_versions()
    with caplog.at_level("WARNING"), durable(redis_client) as deltas:
        seen = list(deltas)
    assert sorted(versions([d for d in seen if d.initial])) == sorted(known.items())
    assert [d for d in seen if not d.initial] == []
    assert "hard cap trimmed entries" in caplog.text
    assert pending(redis_client) == markers(redis_client) == 0


def test_the_command_line_tells_the_initial_list_apart_and_redoes_only_unfinished_shards(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    """Issue 34: an interrupted initial list is printed again per shard (the docs said
    'whole': stopped after 15,000 of 30,000 lines, the restart printed 15,115), and a long one
    printed nothing on stderr to say what it was doing, nor how far it got."""
    total = 3000
    publisher.publish(*(added(f"ns/p{i:04}", "1") for i in range(total)))
    per_shard: dict[int, set[str]] = {}
    for key in bus.known_versions():
        per_shard.setdefault(ShardKeys.for_key("ib", "pods", key, SHARDS).shard, set()).add(key)

    first = start_subscribe(redis_server.url, "pods", "--group", GROUP)
    try:
        printed = []
        for _ in range(total // 2):  # slowly enough that printing the list takes seconds
            printed += read_lines(first, 1)
            time.sleep(0.002)
        first.send_signal(signal.SIGINT)
        assert first.stdout is not None
        rest = first.stdout.read()  # through its text buffer, which holds part of it already
        _, stderr = first.communicate(timeout=15)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, stderr
    printed += json_lines(rest)  # whole lines: a stop signal never cuts one in two
    assert stderr.startswith(
        f"{PROGRAM}: group {GROUP!r}: printing the known state of {SHARDS} shards first "
        f"({total} objects), then the changes; a shard not printed whole is printed again"
    ), stderr
    assert f"{PROGRAM}: initial list: " in stderr  # how far it got, every 2 s
    seen = {line["key"] for line in printed}
    unfinished = {shard for shard, keys in per_shard.items() if not keys <= seen}
    assert 0 < len(unfinished) < SHARDS

    second = start_subscribe(redis_server.url, "pods", "--group", GROUP)
    try:
        again = read_lines(second, sum(len(per_shard[shard]) for shard in unfinished))
        second.send_signal(signal.SIGINT)
        assert second.stdout is not None
        rest = second.stdout.read()
        _, stderr = second.communicate(timeout=15)
    finally:
        second.kill()
        second.wait()
    assert second.returncode == 0, stderr
    again += json_lines(rest)
    assert all(line["initial"] for line in again)
    assert {line["key"] for line in again} == set().union(*(per_shard[s] for s in unfinished))
    assert f"printing the known state of {len(unfinished)} shards first" in stderr
    assert "initial list printed" in stderr
