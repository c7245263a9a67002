"""client-go leader election on a Redis lease (common/leader_election.py).

Everything runs against a real redis-server. Durations are short (lease 1 s, renew deadline
0.6 s, retry 0.1 s); assertions about "when" use generous upper bounds, and lower bounds only
where Redis guarantees them (a lease cannot expire before its duration).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import pytest
import redis

import tests.support.redis_server as redis_server_module
from common.leader_election import LeaderElector
from common.lease import LeaseStatus, RedisLease
from common.redis_config import lease_client
from common.settings import LeaseTiming
from tests.support.leases import EPOCH_KEY, KEY, LEASE, RENEW_DEADLINE, RETRY, TIMEOUT, make_lease
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

# --- LeaderElector -------------------------------------------------------------------------------

TIMING = LeaseTiming(LEASE, RENEW_DEADLINE, RETRY)


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
        wait_until(lambda: bool(self.of(name)), timeout, interval=0.005)
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
        timing=TIMING,
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
        with pytest.raises(ValueError, match=r"renew_deadline must be shorter|retry_period must"):
            LeaseTiming(LEASE, deadline, retry)
    with pytest.raises(ValueError, match="lasts 1 s but the timing says 15 s"):
        LeaderElector(lease, **noop)  # client-go's defaults: a 15 s lease
    long_lease = make_lease(redis_server.url, clients, "a", duration=15.0)
    assert LeaderElector(long_lease, **noop).lease is long_lease


def test_warns_when_one_call_can_outlast_the_safety_margin(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_server.url)  # the 5 s / 10 retries trap
    try:
        lease = RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder="a", duration=LEASE)
        with caplog.at_level(logging.WARNING, logger="common.leader_election"):
            LeaderElector(
                lease,
                timing=TIMING,
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
        epoch = elector.epoch
        assert epoch is not None and epoch > 0
        expected = {f"leader-elector[{KEY}]", f"leader-work[{KEY}]#{epoch}"}

        def leader_threads() -> set[str]:
            return {t.name for t in threading.enumerate() if t.name.startswith("leader-")}

        # Leadership is announced before the work thread runs: give it a moment to start.
        wait_until(
            lambda: leader_threads() == expected,
            2,
            interval=0.005,
            what=lambda: repr(leader_threads()),
        )
        time.sleep(LEASE * 1.5)  # well past one lease duration: renewals keep it
        assert (elector.is_leader, elector.epoch) == (True, epoch)
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
        wait_until(lambda: any(e.is_leader for e in electors.values()), interval=0.005)
        time.sleep(0.5)  # both keep competing; still exactly one leads
        leaders = [name for name, e in electors.items() if e.is_leader]
        assert len(leaders) == 1
        first = leaders[0]
        second = "b" if first == "a" else "a"
        assert len(recorder.terms) == 1
        first_epoch = recorder.first(first).epoch

        electors[first].stop(release=False)  # like a crash: the lease must expire
        stopped_at = time.monotonic()
        assert electors[second].wait_for_leadership(timeout=LEASE + 1.0)
        took_over = recorder.first(second).start - stopped_at
        # Redis only frees the lease a full duration after the last renewal (< RETRY earlier).
        assert LEASE - 2 * RETRY - TIMEOUT <= took_over <= LEASE + 0.5
        assert (electors[second].epoch or 0) > first_epoch
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
        assert (b.epoch or 0) > recorder.first("a").epoch
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
        wait_until(lambda: not a.is_leader, timeout=2, interval=0.005)
        gave_up = time.monotonic() - cut_at
        assert RENEW_DEADLINE - RETRY - 0.05 <= gave_up <= RENEW_DEADLINE + 0.3
        wait_until(lambda: recorder.stopped.get("a") == 1, interval=0.005)
        assert b.wait_for_leadership(timeout=LEASE + 1)
        assert (b.epoch or 0) > recorder.first("a").epoch
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
        wait_until(lambda: not a.is_leader, timeout=1, interval=0.005)
        wait_until(lambda: recorder.stopped.get("a") == 1, interval=0.005)
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
        if len(recorder.of("a")) == 1:  # the first leadership discovers it was fenced
            results.append(holder[0].step_down(epoch + 100))  # not our epoch: ignored
            results.append(holder[0].step_down(epoch))
            results.append(stop_leading.is_set())
            results.append(holder[0].is_leader)
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"),
        timing=TIMING,
        **recorder.callbacks("a", body),
    )
    holder.append(elector)
    elector.start()
    try:
        wait_until(lambda: len(recorder.of("a")) == 2, timeout=2, interval=0.005)
    finally:
        elector.stop()
    assert results == [False, True, True, False]
    first, second = (t.epoch for t in recorder.of("a"))
    assert first < second
    assert recorder.stopped == {"a": 2}
    assert elector.step_down() is False  # not leading


def test_a_fenced_epoch_is_not_led_again_even_when_its_release_failed(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    recorder = Recorder()
    flaky = FlakyLease(make_lease(redis_server.url, clients, "a"))
    holder: list[LeaderElector] = []

    def body(epoch: int, stop_leading: threading.Event) -> None:
        if len(recorder.of("a")) == 1:
            flaky.fail_release = True
            holder[0].step_down()
        stop_leading.wait()

    elector = LeaderElector(
        flaky,
        timing=TIMING,
        **recorder.callbacks("a", body),
    )
    holder.append(elector)
    elector.start()
    try:
        wait_until(lambda: recorder.stopped.get("a") == 1, interval=0.005)
        time.sleep(0.3)  # candidate renews "its" epoch-1 lease but must not lead with it
        assert not elector.is_leader
        assert redis_client.hget(KEY, "epoch") == str(recorder.of("a")[0].epoch).encode()
        flaky.fail_release = False  # the next attempt frees it; then a new epoch
        wait_until(lambda: len(recorder.of("a")) == 2, timeout=2, interval=0.005)
    finally:
        elector.stop()
    first, second = (t.epoch for t in recorder.of("a"))
    assert first < second


def test_a_leading_callback_that_returns_or_raises_gives_up_leadership(
    redis_server: RedisServer, clients: list[redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()

    def body(epoch: int, stop_leading: threading.Event) -> None:
        term = len(recorder.of("a"))
        if term == 1:
            raise RuntimeError("boom")
        if term == 2:
            return
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"),
        timing=TIMING,
        **recorder.callbacks("a", body),
    )
    with caplog.at_level(logging.ERROR, logger="common.leader_election"), elector:
        wait_until(lambda: len(recorder.of("a")) == 3, timeout=3, interval=0.005)
    epochs = [t.epoch for t in recorder.of("a")]
    assert epochs == sorted(set(epochs))
    assert recorder.stopped == {"a": 3}
    assert "the leading callback failed" in caplog.text
    assert "boom" in caplog.text


def test_a_redis_error_in_the_leading_callback_is_one_line_and_leads_again(
    redis_server: RedisServer, clients: list[redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    """Redis failing (or failing over) as a leader starts is no bug: no traceback."""
    recorder = Recorder()

    def body(epoch: int, stop_leading: threading.Event) -> None:
        if len(recorder.of("a")) == 1:
            raise redis.exceptions.MovedError("14287 127.0.0.1:46247")
        stop_leading.wait()

    elector = LeaderElector(
        make_lease(redis_server.url, clients, "a"), timing=TIMING, **recorder.callbacks("a", body)
    )
    with caplog.at_level(logging.WARNING, logger="common.leader_election"), elector:
        wait_until(lambda: len(recorder.of("a")) == 2, timeout=3, interval=0.005)
    assert "the leading callback failed on Redis: MovedError: 14287 127.0.0.1:46247" in caplog.text
    assert "Traceback" not in caplog.text and all(r.exc_info is None for r in caplog.records)


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
        timing=TIMING,
        on_started_leading=on_started_leading,
        on_stopped_leading=lambda: None,
    )
    holder.append(elector)
    elector.start()
    try:
        wait_until(lambda: bool(errors), timeout=2, interval=0.005)
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
        with caplog.at_level(logging.INFO, logger="common.leader_election"):
            elector.start()
            assert elector.wait_for_leadership(timeout=2)
            server.stop()
            down_at = time.monotonic()
            wait_until(lambda: not elector.is_leader, timeout=2, interval=0.005)
            assert time.monotonic() - down_at <= RENEW_DEADLINE + 0.3
            time.sleep(0.8)  # a candidate failing against a dead Redis, many times
            assert elector.is_leader is False
            assert recorder.stopped == {"a": 1}
            monkeypatch.setattr(redis_server_module, "free_port", lambda: server.port)
            first_epoch = recorder.of("a")[0].epoch
            server.start()  # same port; empty (no persistence): the counter is gone
            assert elector.wait_for_leadership(timeout=3)
            assert (elector.epoch or 0) > first_epoch  # the server's clock keeps epochs growing
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
            wait_until(
                lambda: any(e.is_leader for e in running.values()), timeout=2.5, interval=0.005
            )
            leader = next(n for n, e in running.items() if e.is_leader)
            running[leader].stop(release=round_ % 2 == 0)  # graceful and crash, alternating
            launch(leader)
    finally:
        for elector in running.values():
            elector.stop()
    recorder.assert_one_leader_at_a_time()
    assert len(recorder.terms) >= 6
