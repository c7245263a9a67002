"""Shard ownership (processor_svc/ownership.py): balance, hand-over, takeover, never two owners.

Every member records its ownership intervals from its own callbacks (``on_acquired`` opens one,
``on_lost`` closes it); since ``on_lost`` returns before the lease is released and a lease can
only be acquired once free or expired, no shard may ever show two overlapping intervals, and
each shard's epochs must grow from one interval to the next. Every test checks that.

Timings are short (heartbeat 0.05 s, member ttl 0.5 s, lease 1 s, renew deadline 0.6 s, retry
0.1 s, client timeouts 0.15 s so one call stalls at most 0.3 s < lease - renew deadline).
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pytest
import redis

import tests.support.redis_server as redis_server_module
from common.lease import RedisLease
from common.redis_config import lease_client
from common.redis_layout import ResourceKeys, ShardKeys
from common.settings import LeaseTiming, MembershipTiming
from processor_svc.ownership import ShardOwnership
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 16
HEARTBEAT = 0.05
MEMBER_TTL = 0.5
LEASE = 1.0
RENEW_DEADLINE = 0.6
RETRY = 0.1
TIMEOUT = 0.15


class Timings(TypedDict, total=False):
    heartbeat_interval: float
    member_ttl: float
    lease_duration: float
    renew_deadline: float
    retry_period: float


FAST: Timings = {
    "heartbeat_interval": HEARTBEAT,
    "member_ttl": MEMBER_TTL,
    "lease_duration": LEASE,
    "renew_deadline": RENEW_DEADLINE,
    "retry_period": RETRY,
}


def grouped_timings(timings: Timings) -> dict[str, Any]:
    """``timing=`` and ``membership=`` for :class:`ShardOwnership` from flat timings."""
    t = {**FAST, **timings}
    return {
        "timing": LeaseTiming(t["lease_duration"], t["renew_deadline"], t["retry_period"]),
        "membership": MembershipTiming(t["heartbeat_interval"], t["member_ttl"]),
    }


@dataclass
class Interval:
    member: str
    shard: int
    epoch: int
    start: float
    end: float = math.inf


class IntervalLog:
    """Ownership intervals per shard, recorded from the callbacks of every member."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.intervals: list[Interval] = []
        self._open: dict[tuple[str, int], Interval] = {}
        self.errors: list[str] = []

    def on_acquired(self, member: str, shard: int, epoch: int) -> None:
        with self._lock:
            if (member, shard) in self._open:
                self.errors.append(f"{member} acquired shard {shard} twice")
            interval = Interval(member, shard, epoch, time.monotonic())
            self._open[member, shard] = interval
            self.intervals.append(interval)

    def on_lost(self, member: str, shard: int) -> None:
        with self._lock:
            interval = self._open.pop((member, shard), None)
            if interval is None:
                self.errors.append(f"{member} lost shard {shard} it did not own")
                return
            interval.end = time.monotonic()

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def assert_no_overlap(self) -> None:
        with self._lock:
            assert not self.errors, self.errors
            by_shard: dict[int, list[Interval]] = {}
            for interval in self.intervals:
                by_shard.setdefault(interval.shard, []).append(interval)
            for shard, intervals in by_shard.items():
                intervals.sort(key=lambda i: i.start)
                for before, after in itertools.pairwise(intervals):
                    assert before.end <= after.start, f"shard {shard}: {before} overlaps {after}"

    def assert_epochs_grow(self) -> None:
        with self._lock:
            for shard in range(SHARDS):
                epochs = [
                    i.epoch
                    for i in sorted(self.intervals, key=lambda i: i.start)
                    if i.shard == shard
                ]
                assert epochs == sorted(set(epochs)), f"shard {shard}: epochs {epochs}"


class Cluster:
    """Makes members on one Redis, each with its own lease client (like separate processes)."""

    def __init__(self, url: str, log: IntervalLog) -> None:
        self.url = url
        self.log = log
        self.members: dict[str, ShardOwnership] = {}
        self._clients: list[redis.Redis] = []

    def make(
        self,
        name: str,
        *,
        on_acquired: Callable[[int, int], None] | None = None,
        on_lost: Callable[[int], None] | None = None,
        on_losing: Callable[[Sequence[int]], None] | None = None,
        start: bool = True,
        resource: str = "pods",
        shard_count: int = SHARDS,
        **overrides: Unpack[Timings],
    ) -> ShardOwnership:
        client = lease_client(self.url, timeout=TIMEOUT)
        self._clients.append(client)
        log = self.log

        def acquired(shard: int, epoch: int) -> None:
            log.on_acquired(name, shard, epoch)
            if on_acquired is not None:
                on_acquired(shard, epoch)

        def lost(shard: int) -> None:
            log.on_lost(name, shard)
            if on_lost is not None:
                on_lost(shard)

        timings = grouped_timings(overrides)
        member = ShardOwnership(
            client,
            prefix="ib",
            resource=resource,
            shard_count=shard_count,
            member_id=name,
            on_acquired=acquired,
            on_lost=lost,
            on_losing=on_losing,
            **timings,
        )
        self.members[name] = member
        if start:
            member.start()
        return member

    def close(self) -> None:
        for member in self.members.values():
            member.stop()
        for client in self._clients:
            client.close()


def counts(*members: ShardOwnership) -> list[int]:
    return [len(member.owned()) for member in members]


def balanced(*members: ShardOwnership) -> bool:
    """Every shard owned by exactly one of ``members``, loads within one, all settled."""
    owned = [set(member.owned()) for member in members]
    every = [shard for shards in owned for shard in shards]
    loads = [len(shards) for shards in owned]
    return sorted(every) == list(range(SHARDS)) and max(loads) - min(loads) <= 1


@pytest.fixture
def log() -> IntervalLog:
    return IntervalLog()


@pytest.fixture
def cluster(
    redis_server: RedisServer, redis_client: redis.Redis, log: IntervalLog
) -> Iterator[Cluster]:
    made = Cluster(redis_server.url, log)
    try:
        yield made
    finally:
        made.close()
    log.assert_no_overlap()


# --- validation and lifecycle -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"renew_deadline": 1.0}, "renew_deadline must be shorter than lease_duration"),
        ({"retry_period": 0.5}, r"retry_period must be shorter than renew_deadline / 1.2"),
        ({"retry_period": 0.0}, r"retry_period must be > 0"),
        ({"heartbeat_interval": 0.5}, "heartbeat_interval must be shorter than member_ttl"),
        ({"heartbeat_interval": 0.0}, "heartbeat_interval must be > 0"),
    ],
)
def test_validates_timings(cluster: Cluster, overrides: Timings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cluster.make("a", start=False, **overrides)


@pytest.mark.parametrize("shard_count", [0, -1, 1.5])
def test_validates_shard_count(shard_count: object) -> None:
    client = lease_client("redis://127.0.0.1:1/0", timeout=TIMEOUT)
    with pytest.raises(ValueError, match="shard_count"):
        ShardOwnership(
            client,
            prefix="ib",
            resource="pods",
            shard_count=shard_count,  # type: ignore[arg-type]
            member_id="a",
            on_acquired=lambda shard, epoch: None,
            on_lost=lambda shard: None,
        )
    client.close()


def test_refuses_a_client_without_timeouts(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:
        with pytest.raises(ValueError, match="socket_timeout"):
            ShardOwnership(
                client,
                prefix="ib",
                resource="pods",
                shard_count=SHARDS,
                member_id="a",
                on_acquired=lambda shard, epoch: None,
                on_lost=lambda shard: None,
            )
    finally:
        client.close()


def test_warns_when_one_call_can_outlast_the_margin(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = lease_client(redis_server.url, timeout=2.0)
    try:
        with caplog.at_level(logging.WARNING, logger="processor_svc.ownership"):
            ShardOwnership(
                client,
                prefix="ib",
                resource="pods",
                shard_count=SHARDS,
                member_id="a",
                on_acquired=lambda shard, epoch: None,
                on_lost=lambda shard: None,
                **grouped_timings(FAST),
            )
    finally:
        client.close()
    assert any("lease_client() with a shorter timeout" in r.getMessage() for r in caplog.records)


def test_start_twice_and_stop_from_a_callback_are_refused(cluster: Cluster) -> None:
    errors: list[BaseException] = []
    holder: list[ShardOwnership] = []

    def on_acquired(shard: int, epoch: int) -> None:
        try:
            holder[0].stop()
        except RuntimeError as error:
            errors.append(error)

    member = cluster.make("a", on_acquired=on_acquired, start=False)
    holder.append(member)
    member.start()
    with pytest.raises(RuntimeError, match="started only once"):
        member.start()
    wait_until(lambda: len(errors) == SHARDS, timeout=3, interval=0.005)
    assert "callback" in str(errors[0])
    assert member.wait_for_assignment(timeout=3)


def test_stop_before_start_is_harmless(cluster: Cluster) -> None:
    member = cluster.make("a", start=False)
    member.stop()
    member.stop()
    with pytest.raises(RuntimeError):
        member.start()
    assert member.owned() == {}


# --- assignment ----------------------------------------------------------------------------------


def test_one_member_owns_every_shard(cluster: Cluster, redis_client: redis.Redis) -> None:
    a = cluster.make("a")
    assert a.wait_for_assignment(timeout=3)
    owned = a.owned()
    assert sorted(owned) == list(range(SHARDS)) and min(owned.values()) > 0
    assert (a.acquisitions, a.losses, a.rebalances) == (SHARDS, 0, 1)
    for shard in range(SHARDS):
        keys = ShardKeys("ib", "pods", shard).for_group()
        assert redis_client.hget(keys.lease, "holder") == b"a"
        assert redis_client.get(keys.lease_epoch) == str(owned[shard]).encode()
    assert redis_client.zscore(ResourceKeys("ib", "pods").group().members, "a") is not None


def test_second_member_takes_half_with_the_fewest_moves(cluster: Cluster) -> None:
    a = cluster.make("a")
    assert a.wait_for_assignment(timeout=3)
    first = a.owned()
    b = cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    assert a.wait_for_assignment(timeout=1)
    assert b.wait_for_assignment(timeout=1)
    assert counts(a, b) == [8, 8]
    # Sticky and minimal: a keeps its lowest shards, exactly 8 move, nothing moves back.
    assert sorted(a.owned()) == list(range(8))
    assert (a.acquisitions, a.losses) == (SHARDS, 8)
    assert (b.acquisitions, b.losses) == (8, 0)
    assert all(epoch > first[shard] for shard, epoch in b.owned().items())  # a new epoch


def test_a_hand_over_stops_every_leaving_shard_before_waiting_for_the_first(
    cluster: Cluster,
) -> None:
    """Handing shards over runs ``on_lost`` one shard at a time, and each may wait (running
    handler calls finish first). The shards later in the row must not go on applying -- and
    calling handlers, unrenewed -- all that while: a slow row outlived their leases, and the
    next owner's calls overlapped theirs. ``on_losing`` names the whole row first."""
    told: list[list[int]] = []
    seen_while_handing_over: list[list[list[int]]] = []
    first_of_row = threading.Event()

    def on_lost(shard: int) -> None:
        if not first_of_row.is_set():
            first_of_row.set()
            seen_while_handing_over.append([list(row) for row in told])

    a = cluster.make("a", on_lost=on_lost, on_losing=lambda shards: told.append(list(shards)))
    assert a.wait_for_assignment(timeout=3)
    assert told == []
    b = cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=5, interval=0.005)
    assert seen_while_handing_over == [[list(range(8, 16))]]


def test_members_started_together_settle_in_one_assignment(
    cluster: Cluster, log: IntervalLog
) -> None:
    """Issue 16: four processors started together must not each take every free shard and hand
    most back a heartbeat later (a takeover each, and on a busy machine a slow one); they wait
    one quiet heartbeat for each other, then split the shards once."""
    members = [cluster.make(name, start=False) for name in "abcd"]
    threads = [threading.Thread(target=member.start) for member in members]
    for offset, thread in enumerate(threads):
        thread.start()
        time.sleep(HEARTBEAT * 0.2 * offset)  # not quite at once: within one heartbeat
    for thread in threads:
        thread.join()
    wait_until(lambda: balanced(*members), 10, what="four members balanced")
    assert sorted(counts(*members)) == [4, 4, 4, 4]
    assert [member.losses for member in members] == [0, 0, 0, 0], "a shard changed hands"
    assert len(log.intervals) == SHARDS  # every shard acquired once, by its final owner


def test_third_member_balances_six_five_five(cluster: Cluster) -> None:
    a, b = cluster.make("a"), cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    before = {name: set(m.owned()) for name, m in (("a", a), ("b", b))}
    moved_before = a.losses + b.losses
    c = cluster.make("c")
    wait_until(lambda: balanced(a, b, c), timeout=3, interval=0.005)
    assert sorted(counts(a, b, c)) == [5, 5, 6]
    # Only c gains; a and b each keep a subset of what they had.
    assert set(a.owned()) <= before["a"]
    assert set(b.owned()) <= before["b"]
    assert c.acquisitions == 5
    assert a.losses + b.losses - moved_before == 5


def test_more_members_than_shards(cluster: Cluster) -> None:
    few = [cluster.make(name, resource="few", shard_count=2) for name in ("a", "b", "c")]
    wait_until(
        lambda: (
            sorted(counts(*few)) == [0, 1, 1] and all(m.wait_for_assignment(timeout=0) for m in few)
        ),
        timeout=3,
        interval=0.005,
    )


def test_a_shard_is_taken_only_once_its_lease_is_free(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    client = lease_client(redis_server.url, timeout=TIMEOUT)
    keys = ShardKeys("ib", "pods", 3).for_group()
    ghost = RedisLease(
        client, key=keys.lease, epoch_key=keys.lease_epoch, holder="ghost", duration=30
    )
    try:
        ghosts = ghost.try_acquire_or_renew()
        assert ghosts.held
        a = cluster.make("a")
        assert not a.wait_for_assignment(timeout=0.5)
        assert sorted(a.owned()) == [s for s in range(SHARDS) if s != 3]
        assert ghost.release()
        assert a.wait_for_assignment(timeout=2)
        assert a.owned()[3] > ghosts.epoch
    finally:
        client.close()


# --- hand-over and takeover ----------------------------------------------------------------------


def test_graceful_stop_hands_over_well_before_the_lease_expires(
    cluster: Cluster, redis_client: redis.Redis, log: IntervalLog
) -> None:
    a, b = cluster.make("a"), cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    leases = {s: ShardKeys("ib", "pods", s).for_group().lease for s in b.owned()}
    b.stop()
    assert b.owned() == {}
    assert redis_client.zscore(ResourceKeys("ib", "pods").group().members, "b") is None
    # Released, not left to expire: once stop() returns, no lease names b (a clock-free check:
    # a timed one fails on a loaded machine, where a hand-over may take longer than LEASE / 2).
    holders = {s: redis_client.hget(key, "holder") for s, key in leases.items()}
    assert b"b" not in holders.values(), holders
    wait_until(lambda: len(a.owned()) == SHARDS, timeout=LEASE * 5, interval=0.005)
    assert b.losses == 8
    log.assert_no_overlap()
    log.assert_epochs_grow()


def test_crash_takeover_waits_for_the_lease_to_expire(cluster: Cluster, log: IntervalLog) -> None:
    a, b = cluster.make("a"), cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    crashed_at = time.monotonic()
    b.stop(release=False)
    wait_until(lambda: len(a.owned()) == SHARDS, timeout=5, interval=0.005)
    took = time.monotonic() - crashed_at
    # b renewed at most one retry period before the crash, so its leases outlive it by at least
    # LEASE - RETRY; and a retries at their expiry, not a whole retry period later.
    assert LEASE - RETRY - 0.05 <= took <= LEASE + 0.5, f"takeover took {took:.2f} s"
    log.assert_no_overlap()
    log.assert_epochs_grow()


def test_a_member_that_stops_heartbeating_is_dropped(
    cluster: Cluster, redis_client: redis.Redis
) -> None:
    a, b = cluster.make("a"), cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    b.stop(release=False)
    members = ResourceKeys("ib", "pods").group().members
    assert redis_client.zscore(members, "b") is not None  # a crash does not leave
    wait_until(lambda: redis_client.zscore(members, "b") is None, timeout=3, interval=0.005)


def test_a_lease_taken_by_another_holder_is_lost_at_the_next_renewal(
    cluster: Cluster, redis_client: redis.Redis, log: IntervalLog
) -> None:
    lost: list[tuple[int, float]] = []
    a = cluster.make("a", on_lost=lambda shard: lost.append((shard, time.monotonic())))
    assert a.wait_for_assignment(timeout=3)
    before = a.owned()[5]
    keys = ShardKeys("ib", "pods", 5).for_group()
    # What an expired-and-retaken lease looks like (only a stall past the lease could do this).
    redis_client.hset(keys.lease, mapping={"holder": "intruder", "epoch": 99})
    taken_at = time.monotonic()
    wait_until(lambda: bool(lost), timeout=2, interval=0.005)
    assert lost[0][0] == 5
    assert lost[0][1] - taken_at <= 2 * RETRY + 0.1
    assert 5 not in a.owned()
    assert not a.wait_for_assignment(timeout=0.2)  # still assigned to us, held by the intruder
    redis_client.delete(keys.lease)
    assert a.wait_for_assignment(timeout=2)
    assert a.owned()[5] > before


def test_a_lapsed_lease_renewed_with_a_new_epoch_is_a_new_ownership(
    cluster: Cluster, redis_client: redis.Redis, log: IntervalLog
) -> None:
    a = cluster.make("a")
    assert a.wait_for_assignment(timeout=3)
    before = a.owned()[7]
    redis_client.delete(ShardKeys("ib", "pods", 7).for_group().lease)  # as if it had expired
    wait_until(lambda: a.owned().get(7, before) > before, timeout=2, interval=0.005)
    assert (a.acquisitions, a.losses) == (SHARDS + 1, 1)
    ends = [i for i in log.intervals if i.shard == 7]
    assert [i.epoch for i in ends] == [before, a.owned()[7]]
    assert ends[0].end <= ends[1].start
    log.assert_epochs_grow()


def test_a_lapsed_ownership_ends_before_its_next_epoch_is_taken(
    cluster: Cluster, redis_client: redis.Redis, log: IntervalLog
) -> None:
    """Redis loses a held lease (a restart that lost its last writes, an eviction): the next
    renewal must end the ownership (``on_lost``) while the lease is still free, and only then
    acquire it again. Re-acquiring first put the new epoch in Redis while the old ownership's
    handler calls still ran, so they ran under the new epoch -- before its takeover had
    delivered the initial list: "update of an object the store did not have" in the chaos
    checks, and a call of an ended ownership attributed to the next one."""
    keys = ShardKeys("ib", "pods", 7).for_group()
    seen_at_loss: list[tuple[bytes | None, bytes | None]] = []

    def on_lost(shard: int) -> None:
        if shard == 7:
            holder, epoch = redis_client.hmget(keys.lease, "holder", "epoch")
            seen_at_loss.append((holder, epoch))

    a = cluster.make("a", on_lost=on_lost)
    assert a.wait_for_assignment(timeout=3)
    before = a.owned()[7]
    redis_client.delete(keys.lease)  # the chosen moment: held, renewed, and now gone
    wait_until(lambda: a.owned().get(7, before) > before, timeout=2, interval=0.005)
    assert seen_at_loss == [(None, None)]  # still lapsed when the old ownership ended
    after = str(a.owned()[7]).encode()
    assert redis_client.hmget(keys.lease, "holder", "epoch") == [b"a", after]
    log.assert_epochs_grow()


def test_a_given_up_shard_is_released_and_taken_again_with_a_new_epoch(
    cluster: Cluster, redis_client: redis.Redis, log: IntervalLog
) -> None:
    """``give_up``: a worker was fenced off while our renewals still succeed (after a split
    brain its read reached the stale primary). The ownership must end (``on_lost``), and the
    shard must be owned again under a new epoch, so a fresh worker reads it; a give-up naming
    an ownership that already ended changes nothing."""
    a = cluster.make("a")
    assert a.wait_for_assignment(timeout=3)
    before = a.owned()[7]
    a.give_up(7, before - 1, "an earlier ownership's worker")  # not the current one: ignored
    a.give_up(7, before, "worker fenced off")
    wait_until(lambda: a.owned().get(7, before) > before, timeout=5, interval=0.005)
    assert a.losses == 1
    assert [i.epoch for i in log.intervals if i.shard == 7] == [before, a.owned()[7]]
    lease = ShardKeys("ib", "pods", 7).for_group().lease
    assert redis_client.hmget(lease, "holder", "epoch") == [b"a", str(a.owned()[7]).encode()]
    log.assert_epochs_grow()


def test_a_stalled_coordinator_gives_up_its_shards_and_takes_them_back_with_new_epochs(
    cluster: Cluster, log: IntervalLog
) -> None:
    """A callback that blocks past the renew deadline stalls renewals, like a long GC pause.

    Every shard is lost at its deadline even though the leases are still ours in Redis; the
    next tick finds them held with an epoch whose ownership ended, releases and re-acquires
    them, so the next ownership gets a new epoch (never the one ``on_lost`` closed).
    """
    stalled: list[int] = []

    def on_acquired(shard: int, epoch: int) -> None:
        if shard == SHARDS - 1 and not stalled:
            stalled.append(shard)
            time.sleep(RENEW_DEADLINE + 0.1)

    a = cluster.make("a", on_acquired=on_acquired)
    wait_until(lambda: a.losses == SHARDS, timeout=3, interval=0.005)
    assert a.wait_for_assignment(timeout=3)
    owned = a.owned()
    assert sorted(owned) == list(range(SHARDS))
    for shard, epoch in owned.items():  # each shard's second ownership, with a new epoch
        epochs = [i.epoch for i in log.intervals if i.shard == shard]
        assert len(epochs) == 2 and epochs[-1] == epoch
    log.assert_no_overlap()
    log.assert_epochs_grow()


# --- Redis failures ------------------------------------------------------------------------------


def test_redis_down_loses_shards_within_the_renew_deadline_then_recovers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    log: IntervalLog,
) -> None:
    server = RedisServer(tmp_path / "own-redis")
    server.start()
    cluster = Cluster(server.url, log)
    try:
        with caplog.at_level(logging.INFO, logger="processor_svc.ownership"):
            a = cluster.make("a")
            assert a.wait_for_assignment(timeout=3)
            server.stop()
            down_at = time.monotonic()
            wait_until(lambda: a.owned() == {}, timeout=3, interval=0.005)
            # Lost at the renew deadline: before the leases (renewed <= RETRY ago) could expire.
            took = time.monotonic() - down_at
            assert took <= LEASE - RETRY - 0.05, f"lost after {took:.2f} s"
            assert a.losses == SHARDS
            time.sleep(0.5)  # many failing heartbeats against a dead Redis
            monkeypatch.setattr(redis_server_module, "free_port", lambda: server.port)
            server.start()  # same port, empty
            assert a.wait_for_assignment(timeout=3)
            assert len(a.owned()) == SHARDS
    finally:
        cluster.close()
        server.stop()
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert 1 <= len(failures) <= 2, "failures must be throttled, not logged per attempt"
    assert any("Redis answers again" in r.getMessage() for r in caplog.records)
    assert a.acquisitions == 2 * SHARDS
    log.assert_no_overlap()


def test_redis_hanging_loses_shards_before_their_leases_expire(
    tmp_path: Path, log: IntervalLog, redis_server: RedisServer
) -> None:
    """SIGSTOP: connections hang instead of failing; the client timeouts bound each call."""
    server = RedisServer(tmp_path / "own-redis")
    server.start()
    assert server.process is not None
    cluster = Cluster(server.url, log)
    stopped = False
    try:
        a = cluster.make("a")
        assert a.wait_for_assignment(timeout=3)
        server.process.send_signal(signal.SIGSTOP)
        stopped = True
        hung_at = time.monotonic()
        wait_until(lambda: a.owned() == {}, timeout=3, interval=0.005)
        took = time.monotonic() - hung_at
        assert took <= LEASE - RETRY - 0.05, f"lost after {took:.2f} s"
        server.process.send_signal(signal.SIGCONT)
        stopped = False
        assert a.wait_for_assignment(timeout=3)
        # The leases lapsed while Redis was frozen (or we released them): new epochs.
        assert min(a.owned().values()) >= 2
    finally:
        if stopped:
            server.process.send_signal(signal.SIGCONT)
        cluster.close()
        server.stop()
    log.assert_no_overlap()
    log.assert_epochs_grow()


def test_stop_against_a_hanging_redis_is_bounded(tmp_path: Path, log: IntervalLog) -> None:
    """A graceful stop tries one release; once Redis fails it leaves the rest to expire."""
    server = RedisServer(tmp_path / "own-redis")
    server.start()
    assert server.process is not None
    cluster = Cluster(server.url, log)
    try:
        a = cluster.make("a")
        assert a.wait_for_assignment(timeout=3)
        server.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            a.stop()
            took = time.monotonic() - started
        finally:
            server.process.send_signal(signal.SIGCONT)
        assert took < 4 * TIMEOUT + 0.2, f"stop took {took:.2f} s"
        assert a.owned() == {}
        assert a.losses == SHARDS
    finally:
        cluster.close()
        server.stop()
    log.assert_no_overlap()


# --- callbacks -----------------------------------------------------------------------------------


def test_failing_callbacks_do_not_kill_the_coordinator(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    failed_once: set[int] = set()
    failed_epochs: dict[int, int] = {}

    def on_acquired(shard: int, epoch: int) -> None:
        if shard % 4 == 0 and shard not in failed_once:
            failed_once.add(shard)
            failed_epochs[shard] = epoch
            raise RuntimeError(f"cannot start shard {shard}")

    def on_lost(shard: int) -> None:
        raise RuntimeError(f"cannot stop shard {shard}")

    with caplog.at_level(logging.ERROR, logger="processor_svc.ownership"):
        a = cluster.make("a", on_acquired=on_acquired, on_lost=on_lost)
        assert a.wait_for_assignment(timeout=3)
        assert len(a.owned()) == SHARDS
        # The failed starts were stopped again (on_lost), released, and re-acquired later with
        # a new epoch.
        assert failed_once == {0, 4, 8, 12}
        assert all(a.owned()[shard] > failed_epochs[shard] for shard in failed_once)
        assert a.acquisitions == SHARDS + 4
        assert a.losses == 4
        # on_lost raising during a rebalance still hands over.
        b = cluster.make("b")
        wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    assert sum("on_acquired" in r.getMessage() for r in caplog.records) == 4
    assert any("on_lost" in r.getMessage() for r in caplog.records)


def test_slow_on_lost_delays_the_hand_over_not_the_safety(
    cluster: Cluster, log: IntervalLog
) -> None:
    def on_lost(shard: int) -> None:
        time.sleep(0.02)  # draining in-flight handlers

    a = cluster.make("a", on_lost=on_lost)
    assert a.wait_for_assignment(timeout=3)
    b = cluster.make("b")
    wait_until(lambda: balanced(a, b), timeout=3, interval=0.005)
    log.assert_no_overlap()


# --- churn ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_churn_never_overlaps_and_ends_balanced(
    cluster: Cluster, log: IntervalLog, seed: int
) -> None:
    rng = random.Random(seed)
    live: list[ShardOwnership] = [cluster.make("m0")]
    made = 1
    for _ in range(10):
        action = rng.choice(["join", "join", "stop", "crash"])
        if action == "join" or len(live) == 1:
            live.append(cluster.make(f"m{made}"))
            made += 1
        else:
            victim = live.pop(rng.randrange(len(live)))
            victim.stop(release=action == "stop")
        time.sleep(rng.uniform(0.05, 0.6))
    wait_until(lambda: balanced(*live), timeout=LEASE + MEMBER_TTL + 3, interval=0.005)
    assert all(member.wait_for_assignment(timeout=2) for member in live)
    for member in list(cluster.members.values()):
        member.stop()
    assert log.open_count() == 0
    log.assert_no_overlap()
    log.assert_epochs_grow()
    owners = Counter(interval.member for interval in log.intervals)
    assert set(owners) >= {member.member_id for member in live}
