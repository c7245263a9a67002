"""Redis leases with fencing epochs, and the leader elector (common/lease.py).

Everything runs against a real redis-server. Durations are short (lease 1 s, renew deadline
0.6 s, retry 0.1 s); assertions about "when" use generous upper bounds, and lower bounds only
where Redis guarantees them (a lease cannot expire before its duration).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import pytest
import redis

import tests.support.redis_server as redis_server_module
from common.lease import (
    LeaderElector,
    LeaseStatus,
    RedisLease,
    hash_tag,
    lease_client,
    unique_holder,
)
from tests.support.redis_server import RedisServer

KEY = "ib:{pods}:leader"
EPOCH_KEY = "ib:{pods}:epoch"
LEASE = 1.0
RENEW_DEADLINE = 0.6
RETRY = 0.1
TIMEOUT = 0.15  # client timeouts: one call stalls at most 0.3 s < LEASE - RENEW_DEADLINE


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def clients(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[list[redis.Redis]]:
    """Lease clients on the (flushed) session server; closed after the test."""
    made: list[redis.Redis] = []
    yield made
    for client in made:
        client.close()


def make_lease(
    url: str, made: list[redis.Redis], holder: str, duration: float = LEASE
) -> RedisLease:
    client = lease_client(url, timeout=TIMEOUT)
    made.append(client)
    return RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder=holder, duration=duration)


# --- RedisLease ----------------------------------------------------------------------------------


def test_hash_tag_follows_the_cluster_rule() -> None:
    assert hash_tag("ib:{pods}:leader") == "pods"
    assert hash_tag("ib:{pods:7}:lease") == "pods:7"
    assert hash_tag("a{b}{c}") == "b"
    assert hash_tag("a{}{c}") is None  # an empty first tag means the whole key is hashed
    assert hash_tag("plain") is None
    assert hash_tag("a{b") is None


def test_unique_holders_differ_per_call_and_name_the_process() -> None:
    first, second = unique_holder(), unique_holder("reflector-0")
    assert first != unique_holder()
    assert second.startswith("reflector-0/")
    assert f"/{os.getpid()}/" in first


def test_lease_validates_its_arguments(redis_server: RedisServer) -> None:
    client = lease_client(redis_server.url)
    try:
        for key, epoch_key in [
            ("ib:pods:leader", "ib:pods:epoch"),  # no tag
            ("ib:{pods}:leader", "ib:{nodes}:epoch"),  # different slots on a cluster
            ("ib:{pods}:leader", "ib:{pods}:leader"),  # one key for both
        ]:
            with pytest.raises(ValueError, match="lease key"):
                RedisLease(client, key=key, epoch_key=epoch_key, holder="a")
        with pytest.raises(ValueError, match="holder"):
            RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder="")
        with pytest.raises(ValueError, match="duration"):
            RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder="a", duration=0)
    finally:
        client.close()
    unbounded = redis.Redis.from_url(redis_server.url, socket_timeout=None)
    try:
        with pytest.raises(ValueError, match="socket_timeout"):
            RedisLease(unbounded, key=KEY, epoch_key=EPOCH_KEY, holder="a")
    finally:
        unbounded.close()
    with pytest.raises(ValueError, match="timeout"):
        lease_client(redis_server.url, timeout=0)


def test_max_call_seconds_reflects_the_clients_timeouts_and_retries(
    redis_server: RedisServer,
) -> None:
    short = lease_client(redis_server.url, timeout=0.5)
    from_url = redis.Redis.from_url(redis_server.url)  # redis-py 8: 5 s timeouts, no retries
    default = redis.Redis(port=redis_server.port)  # 5 s timeouts and 10 retries
    try:
        lease = RedisLease(short, key=KEY, epoch_key=EPOCH_KEY, holder="a")
        assert lease.max_call_seconds == pytest.approx(1.0)
        plain = RedisLease(from_url, key=KEY, epoch_key=EPOCH_KEY, holder="a")
        assert plain.max_call_seconds == pytest.approx(10.0)
        trap = RedisLease(default, key=KEY, epoch_key=EPOCH_KEY, holder="a")
        assert trap.max_call_seconds == pytest.approx(110.0)
    finally:
        for client in (short, from_url, default):
            client.close()


def test_acquire_renew_expire_takeover_release(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    a = make_lease(redis_server.url, clients, "a", duration=0.3)
    b = make_lease(redis_server.url, clients, "b", duration=0.3)
    assert a.holder_and_epoch() == (None, 0)

    first = a.try_acquire_or_renew()
    assert first == LeaseStatus(held=True, epoch=1, holder="a", ttl=0.3)
    assert redis_client.hgetall(KEY) == {b"holder": b"a", b"epoch": b"1"}
    assert 0 < redis_client.pttl(KEY) <= 300
    assert redis_client.ttl(EPOCH_KEY) == -1  # the epoch counter never expires

    time.sleep(0.15)
    renewed = a.try_acquire_or_renew()
    assert (renewed.held, renewed.epoch) == (True, 1)  # renewal keeps the epoch
    assert redis_client.pttl(KEY) > 200  # ...and pushes the expiry back

    other = b.try_acquire_or_renew()
    assert other.held is False
    assert (other.epoch, other.holder) == (1, "a")
    assert 0 < other.ttl <= 0.3
    assert b.release() is False  # not b's to release
    assert a.holder_and_epoch() == ("a", 1)

    time.sleep(0.4)  # a stops renewing: the lease expires on Redis's clock
    assert b.holder_and_epoch() == (None, 1)
    taken = b.try_acquire_or_renew()
    assert (taken.held, taken.epoch, taken.holder) == (True, 2, "b")
    lost = a.try_acquire_or_renew()
    assert (lost.held, lost.epoch, lost.holder) == (False, 2, "b")

    assert b.release() is True  # graceful stop: free at once
    assert redis_client.exists(KEY) == 0
    assert a.holder_and_epoch() == (None, 2)
    again = a.try_acquire_or_renew()
    assert (again.held, again.epoch) == (True, 3)  # epochs only grow, even for a former holder


def test_renew_extends_only_the_epoch_held_and_never_acquires(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    a = make_lease(redis_server.url, clients, "a", duration=30)
    b = make_lease(redis_server.url, clients, "b", duration=30)
    assert a.renew(1) == LeaseStatus(held=False, epoch=0, holder=None, ttl=0.0)
    assert redis_client.exists(KEY) == 0  # nothing taken
    assert a.try_acquire_or_renew().epoch == 1
    redis_client.pexpire(KEY, 5000)
    assert a.renew(1) == LeaseStatus(held=True, epoch=1, holder="a", ttl=30.0)
    assert redis_client.pttl(KEY) > 5000  # pushed back
    assert a.renew(2).held is False  # not the epoch held: untouched
    assert redis_client.pttl(KEY) > 5000
    other = b.renew(1)
    assert (other.held, other.epoch, other.holder) == (False, 1, "a")
    redis_client.delete(KEY, EPOCH_KEY)  # Redis lost the lease, and the counter with it
    assert a.renew(1).holder is None
    assert redis_client.exists(KEY) == 0
    assert a.try_acquire_or_renew().epoch == 2  # the next ownership's epoch is above the last


def test_epochs_grow_across_many_takeovers(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    leases = [make_lease(redis_server.url, clients, f"h{i}") for i in range(3)]
    epochs = []
    for round_ in range(12):
        lease = leases[round_ % 3]
        status = lease.try_acquire_or_renew()
        assert status.held
        epochs.append(status.epoch)
        assert lease.release()
    assert epochs == list(range(1, 13))


def test_an_expiring_epoch_key_is_made_persistent_and_corrupt_leases_are_replaced(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    lease = make_lease(redis_server.url, clients, "a")
    redis_client.set(EPOCH_KEY, 41, ex=100)
    redis_client.hset(KEY, "junk", "1")  # a hash without a holder
    status = lease.try_acquire_or_renew()
    assert (status.held, status.epoch) == (True, 42)
    assert redis_client.ttl(EPOCH_KEY) == -1
    assert redis_client.hgetall(KEY) == {b"holder": b"a", b"epoch": b"42"}


def test_a_lease_without_expiry_reports_infinite_ttl(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    redis_client.hset(KEY, mapping={"holder": "manual", "epoch": 7})
    status = make_lease(redis_server.url, clients, "a").try_acquire_or_renew()
    assert status == LeaseStatus(held=False, epoch=7, holder="manual", ttl=math.inf)


def test_works_with_decoded_responses(redis_server: RedisServer) -> None:
    client = lease_client(redis_server.url, decode_responses=True)
    try:
        lease = RedisLease(client, key="x:{t}:l", epoch_key="x:{t}:e", holder="ü")
        assert lease.try_acquire_or_renew().holder == "ü"
        assert lease.holder_and_epoch() == ("ü", 1)
        assert lease.release()
    finally:
        client.close()


def test_survives_a_script_cache_flush(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    """A restarted Redis forgets loaded scripts; EVALSHA falls back to loading them again."""
    lease = make_lease(redis_server.url, clients, "a")
    assert lease.try_acquire_or_renew().held
    redis_client.script_flush()
    assert lease.try_acquire_or_renew().held
    assert lease.release()


# --- LeaderElector -------------------------------------------------------------------------------


class Callbacks(TypedDict):
    on_started_leading: Callable[[int, threading.Event], None]
    on_stopped_leading: Callable[[], None]


@dataclass
class Term:
    name: str
    epoch: int
    start: float
    end: float | None = None


@dataclass
class Recorder:
    """Records every leadership term (callback entry to return) of every elector."""

    terms: list[Term] = field(default_factory=list)
    stopped: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callbacks(
        self,
        name: str,
        body: Callable[[int, threading.Event], None] | None = None,
    ) -> Callbacks:
        def on_started_leading(epoch: int, stop_leading: threading.Event) -> None:
            term = Term(name, epoch, time.monotonic())
            with self.lock:
                self.terms.append(term)
            try:
                if body is None:
                    stop_leading.wait()
                else:
                    body(epoch, stop_leading)
            finally:
                term.end = time.monotonic()

        def on_stopped_leading() -> None:
            with self.lock:
                self.stopped[name] = self.stopped.get(name, 0) + 1

        return Callbacks(
            on_started_leading=on_started_leading, on_stopped_leading=on_stopped_leading
        )

    def first(self, name: str, timeout: float = 2.0) -> Term:
        """The first term of ``name``, once its callback has started (just after is_leader)."""
        assert wait_until(lambda: bool(self.of(name)), timeout)
        return self.of(name)[0]

    def of(self, name: str) -> list[Term]:
        with self.lock:
            return [t for t in self.terms if t.name == name]

    def assert_one_leader_at_a_time(self) -> None:
        with self.lock:
            terms = sorted(self.terms, key=lambda t: t.start)
        for before, after in itertools.pairwise(terms):
            assert before.end is not None, f"{before} still running when {after} started"
            assert before.end <= after.start, f"overlap: {before} and {after}"
            assert before.epoch < after.epoch, f"epoch did not grow: {before} then {after}"


def make_elector(lease: RedisLease | FlakyLease, recorder: Recorder, name: str) -> LeaderElector:
    return LeaderElector(
        lease,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
        **recorder.callbacks(name),
    )


class FlakyLease:
    """A RedisLease whose calls can be made to fail, as if Redis were unreachable for it alone."""

    def __init__(self, inner: RedisLease) -> None:
        self.inner = inner
        self.fail_renew = False
        self.fail_release = False

    @property
    def key(self) -> str:
        return self.inner.key

    @property
    def holder(self) -> str:
        return self.inner.holder

    @property
    def duration(self) -> float:
        return self.inner.duration

    @property
    def max_call_seconds(self) -> float:
        return self.inner.max_call_seconds

    def try_acquire_or_renew(self) -> LeaseStatus:
        if self.fail_renew:
            raise redis.ConnectionError("injected: Redis unreachable")
        return self.inner.try_acquire_or_renew()

    def release(self) -> bool:
        if self.fail_release:
            raise redis.ConnectionError("injected: Redis unreachable")
        return self.inner.release()


def test_elector_validates_timings(redis_server: RedisServer, clients: list[redis.Redis]) -> None:
    lease = make_lease(redis_server.url, clients, "a")
    noop = Callbacks(on_started_leading=lambda epoch, event: None, on_stopped_leading=lambda: None)
    for deadline, retry in [(1.0, 0.1), (0.6, 0.5), (0.6, 0.0)]:
        with pytest.raises(ValueError, match="retry_period"):
            LeaderElector(lease, renew_deadline=deadline, retry_period=retry, **noop)
    # client-go's defaults need a lease of more than 10 s
    long_lease = make_lease(redis_server.url, clients, "a", duration=15.0)
    assert LeaderElector(long_lease, **noop).lease is long_lease


def test_warns_when_one_call_can_outlast_the_safety_margin(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_server.url)  # the 5 s / 10 retries trap
    try:
        lease = RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder="a", duration=LEASE)
        with caplog.at_level(logging.WARNING, logger="common.lease"):
            LeaderElector(
                lease,
                renew_deadline=RENEW_DEADLINE,
                retry_period=RETRY,
                on_started_leading=lambda epoch, event: None,
                on_stopped_leading=lambda: None,
            )
    finally:
        client.close()
    assert "lease_client()" in caplog.text


def test_one_elector_leads_renews_and_releases_on_stop(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    elector = make_elector(make_lease(redis_server.url, clients, "a"), recorder, "a")
    assert (elector.is_leader, elector.epoch) == (False, None)
    elector.start()
    try:
        assert elector.wait_for_leadership(timeout=2)
        assert elector.epoch == 1
        expected = {f"leader-elector[{KEY}]", f"leader-work[{KEY}]#1"}

        def leader_threads() -> set[str]:
            return {t.name for t in threading.enumerate() if t.name.startswith("leader-")}

        # Leadership is announced before the work thread runs: give it a moment to start.
        assert wait_until(lambda: leader_threads() == expected, 2), leader_threads()
        time.sleep(LEASE * 1.5)  # well past one lease duration: renewals keep it
        assert (elector.is_leader, elector.epoch) == (True, 1)
        assert redis_client.pttl(KEY) > 0, "renewals keep the lease alive"
    finally:
        elector.stop()
    assert not elector.is_leader
    assert redis_client.exists(KEY) == 0  # released
    assert recorder.stopped == {"a": 1}
    (term,) = recorder.of("a")
    assert term.end is not None
    elector.stop()  # idempotent
    with pytest.raises(RuntimeError):
        elector.start()


def test_two_electors_one_leader_and_ungraceful_takeover_within_lease(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    electors = {
        name: make_elector(make_lease(redis_server.url, clients, name), recorder, name)
        for name in ("a", "b")
    }
    for elector in electors.values():
        elector.start()
    try:
        assert wait_until(lambda: any(e.is_leader for e in electors.values()))
        time.sleep(0.5)  # both keep competing; still exactly one leads
        leaders = [name for name, e in electors.items() if e.is_leader]
        assert len(leaders) == 1
        first = leaders[0]
        second = "b" if first == "a" else "a"
        assert len(recorder.terms) == 1
        assert recorder.first(first).epoch == 1

        electors[first].stop(release=False)  # like a crash: the lease must expire
        stopped_at = time.monotonic()
        assert electors[second].wait_for_leadership(timeout=LEASE + 1.0)
        took_over = recorder.first(second).start - stopped_at
        # Redis only frees the lease a full duration after the last renewal (< RETRY earlier).
        assert LEASE - 2 * RETRY - TIMEOUT <= took_over <= LEASE + 0.5
        assert electors[second].epoch == 2
    finally:
        for elector in electors.values():
            elector.stop()
    recorder.assert_one_leader_at_a_time()


def test_graceful_stop_hands_over_at_once(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    a = make_elector(make_lease(redis_server.url, clients, "a"), recorder, "a")
    b = make_elector(make_lease(redis_server.url, clients, "b"), recorder, "b")
    a.start()
    try:
        assert a.wait_for_leadership(timeout=2)
        b.start()
        time.sleep(0.3)
        assert not b.is_leader
        a.stop()  # releases
        stopped_at = time.monotonic()
        assert b.wait_for_leadership(timeout=LEASE)
        # one jittered retry period (<= 2.2 x RETRY), not a lease duration
        assert recorder.first("b").start - stopped_at < 2.2 * RETRY + 0.2
        assert b.epoch == 2
    finally:
        a.stop()
        b.stop()
    recorder.assert_one_leader_at_a_time()


def test_failed_renewals_past_the_deadline_step_down_before_the_lease_expires(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    flaky = FlakyLease(make_lease(redis_server.url, clients, "a"))
    a = make_elector(flaky, recorder, "a")
    b = make_elector(make_lease(redis_server.url, clients, "b"), recorder, "b")
    a.start()
    try:
        assert a.wait_for_leadership(timeout=2)
        b.start()
        flaky.fail_renew = flaky.fail_release = True  # a is cut off from Redis
        cut_at = time.monotonic()
        assert wait_until(lambda: not a.is_leader, timeout=2)
        gave_up = time.monotonic() - cut_at
        assert RENEW_DEADLINE - RETRY - 0.05 <= gave_up <= RENEW_DEADLINE + 0.3
        assert wait_until(lambda: recorder.stopped.get("a") == 1)
        assert b.wait_for_leadership(timeout=LEASE + 1)
        assert b.epoch == 2
        assert a.epoch is None
        flaky.fail_renew = flaky.fail_release = False  # a comes back: b keeps the lease
        time.sleep(0.4)
        assert b.is_leader
        assert not a.is_leader
    finally:
        a.stop()
        b.stop()
    recorder.assert_one_leader_at_a_time()
    (a_term,) = recorder.of("a")
    (b_term,) = recorder.of("b")
    assert a_term.end is not None
    assert b_term.start - a_term.end > LEASE - RENEW_DEADLINE - RETRY - TIMEOUT


def test_a_leader_that_sees_another_holder_stops_leading(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    a = make_elector(make_lease(redis_server.url, clients, "a"), recorder, "a")
    a.start()
    try:
        assert a.wait_for_leadership(timeout=2)
        redis_client.hset(KEY, mapping={"holder": "intruder", "epoch": 99})
        assert wait_until(lambda: not a.is_leader, timeout=1)
        assert wait_until(lambda: recorder.stopped.get("a") == 1)
        assert redis_client.hget(KEY, "holder") == b"intruder"  # not ours: not released
    finally:
        a.stop()
    assert redis_client.hget(KEY, "holder") == b"intruder"


def test_step_down_stops_leading_and_never_reuses_the_fenced_epoch(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    holder: list[LeaderElector] = []
    results: list[bool] = []

    def body(epoch: int, stop_leading: threading.Event) -> None:
        if epoch == 1:  # the first leadership discovers it was fenced
            results.append(holder[0].step_down(epoch + 100))  # not our epoch: ignored
            results.append(holder[0].step_down(epoch))
            results.append(stop_leading.is_set())
            results.append(holder[0].is_leader)
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"),
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
        **recorder.callbacks("a", body),
    )
    holder.append(elector)
    elector.start()
    try:
        assert wait_until(lambda: elector.epoch == 2, timeout=2)
    finally:
        elector.stop()
    assert results == [False, True, True, False]
    assert [t.epoch for t in recorder.of("a")] == [1, 2]
    assert recorder.stopped == {"a": 2}
    assert elector.step_down() is False  # not leading


def test_a_fenced_epoch_is_not_led_again_even_when_its_release_failed(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    flaky = FlakyLease(make_lease(redis_server.url, clients, "a"))
    holder: list[LeaderElector] = []

    def body(epoch: int, stop_leading: threading.Event) -> None:
        if epoch == 1:
            flaky.fail_release = True
            holder[0].step_down()
        stop_leading.wait()

    elector = LeaderElector(
        flaky,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
        **recorder.callbacks("a", body),
    )
    holder.append(elector)
    elector.start()
    try:
        assert wait_until(lambda: recorder.stopped.get("a") == 1)
        time.sleep(0.3)  # candidate renews "its" epoch-1 lease but must not lead with it
        assert not elector.is_leader
        assert redis_client.hget(KEY, "epoch") == b"1"
        flaky.fail_release = False  # the next attempt frees it; then a new epoch
        assert wait_until(lambda: elector.epoch == 2, timeout=2)
    finally:
        elector.stop()
    assert [t.epoch for t in recorder.of("a")] == [1, 2]


def test_a_leading_callback_that_returns_or_raises_gives_up_leadership(
    redis_server: RedisServer, clients: list[redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()

    def body(epoch: int, stop_leading: threading.Event) -> None:
        if epoch == 1:
            raise RuntimeError("boom")
        if epoch == 2:
            return
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"),
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
        **recorder.callbacks("a", body),
    )
    with caplog.at_level(logging.ERROR, logger="common.lease"), elector:
        assert wait_until(lambda: elector.epoch == 3, timeout=3)
    assert [t.epoch for t in recorder.of("a")] == [1, 2, 3]
    assert recorder.stopped == {"a": 3}
    assert "the leading callback failed" in caplog.text
    assert "boom" in caplog.text


def test_stop_from_the_leading_callback_is_refused(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    errors: list[BaseException] = []
    holder: list[LeaderElector] = []

    def on_started_leading(epoch: int, stop_leading: threading.Event) -> None:
        try:
            holder[0].stop()
        except RuntimeError as error:
            errors.append(error)
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"),
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
        on_started_leading=on_started_leading,
        on_stopped_leading=lambda: None,
    )
    holder.append(elector)
    elector.start()
    try:
        assert wait_until(lambda: bool(errors), timeout=2)
    finally:
        elector.stop()
    assert "step_down" in str(errors[0])


def test_redis_restart_no_crash_and_leadership_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path / "own-redis")
    server.start()
    client = lease_client(server.url, timeout=TIMEOUT)
    recorder = Recorder()
    elector = make_elector(
        RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder="a", duration=LEASE),
        recorder,
        "a",
    )
    try:
        with caplog.at_level(logging.INFO, logger="common.lease"):
            elector.start()
            assert elector.wait_for_leadership(timeout=2)
            server.stop()
            down_at = time.monotonic()
            assert wait_until(lambda: not elector.is_leader, timeout=2)
            assert time.monotonic() - down_at <= RENEW_DEADLINE + 0.3
            time.sleep(0.8)  # a candidate failing against a dead Redis, many times
            assert elector.is_leader is False
            assert recorder.stopped == {"a": 1}
            monkeypatch.setattr(redis_server_module, "free_port", lambda: server.port)
            server.start()  # same port; empty (no persistence), so epochs restart at 1
            assert elector.wait_for_leadership(timeout=3)
            assert elector.epoch == 1
    finally:
        elector.stop()
        client.close()
        server.stop()
    failures = [r for r in caplog.records if "acquire/renew failed" in r.getMessage()]
    assert 1 <= len(failures) <= 2, "failures must be throttled, not logged per retry"
    assert any("Redis answers again" in r.getMessage() for r in caplog.records)
    assert len(recorder.of("a")) == 2
    assert all(t.end is not None for t in recorder.terms)


def test_three_electors_with_churn_never_overlap(
    redis_server: RedisServer, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    names = ["a", "b", "c"]
    generation = dict.fromkeys(names, 0)
    running: dict[str, LeaderElector] = {}

    def launch(name: str) -> None:
        generation[name] += 1
        tag = f"{name}{generation[name]}"
        elector = make_elector(make_lease(redis_server.url, clients, tag), recorder, tag)
        elector.start()
        running[name] = elector

    for name in names:
        launch(name)
    try:
        for round_ in range(6):
            assert wait_until(lambda: any(e.is_leader for e in running.values()), timeout=2.5)
            leader = next(n for n, e in running.items() if e.is_leader)
            running[leader].stop(release=round_ % 2 == 0)  # graceful and crash, alternating
            launch(leader)
    finally:
        for elector in running.values():
            elector.stop()
    recorder.assert_one_leader_at_a_time()
    assert len(recorder.terms) >= 6


def test_lease_client_for_ends_calls_between_renew_deadline_and_expiry() -> None:
    from common.lease import lease_client_for

    client = lease_client_for("redis://127.0.0.1:1/0", lease_duration=15.0, renew_deadline=10.0)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 2.0  # min(2, 5 / 2.5): two timeouts < the 5 s margin
        assert kwargs["socket_connect_timeout"] == 2.0
    finally:
        client.close()
    short = lease_client_for("redis://127.0.0.1:1/0", lease_duration=2.0, renew_deadline=1.5)
    try:
        assert short.connection_pool.connection_kwargs["socket_timeout"] == 0.2
    finally:
        short.close()
    with pytest.raises(ValueError, match="renew_deadline"):
        lease_client_for("redis://127.0.0.1:1/0", lease_duration=2.0, renew_deadline=2.0)
