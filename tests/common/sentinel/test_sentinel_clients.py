"""Clients built through real sentinels: they read and write the primary, name what is wrong
in one line (no sentinel answers, unknown master, a replica as --redis-url), and -- the point
of Sentinel -- the same client objects follow a failover (kill -9 of the primary) without
being rebuilt: the command client, a lease client and a processor's blocking reader."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator
from common.lease import RedisLease
from common.redis_config import (
    MasterUnknownError,
    NoSentinelError,
    RedisAccessError,
    check_redis_access,
    connection_kwargs,
    lease_client,
)
from common.service_clients import service_clients
from common.settings import LeaseTiming, RedisConnection
from informer_bus.local_redis import free_port
from processor_svc.blocking_read import BlockingRead
from tests.support.bus import ReflectorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.redis_topologies import SentinelGroup
from tests.support.reflector_ha import reflector_flags
from tests.support.waiting import wait_until

INFORMER_BUS = str(Path(sys.executable).with_name("informer-bus"))


def through(group: SentinelGroup, **options: object) -> RedisConnection:
    return RedisConnection(sentinel=group.sentinel_addresses, **options)  # type: ignore[arg-type]


def test_a_client_through_sentinels_writes_and_reads_the_primary(
    sentinel_group: SentinelGroup,
) -> None:
    target = through(sentinel_group)
    check_redis_access(target)
    commands, leases = service_clients(target, LeaseTiming())
    try:
        commands.set("written", "through sentinels")
        assert commands.get("written") == b"through sentinels"
        assert leases.get("written") == b"through sentinels"
        host, port = sentinel_group.master_address()
        direct = redis.Redis(host=host, port=port)
        try:
            assert direct.get("written") == b"through sentinels"
        finally:
            direct.close()
    finally:
        commands.close()
        leases.close()


def test_a_wrong_master_name_says_what_the_sentinels_monitor(
    sentinel_group: SentinelGroup,
) -> None:
    target = through(sentinel_group, sentinel_master="typo")
    check_redis_access(target)  # passes: a service retries it (and says so in its log)
    client, leases = service_clients(target, LeaseTiming())
    try:
        with pytest.raises(MasterUnknownError) as caught:
            leases.ping()
        assert str(caught.value).startswith(
            f"master 'typo' unknown to sentinels {sentinel_group.sentinel_addresses} "
            "(they monitor: mymaster"
        )
    finally:
        client.close()
        leases.close()


def test_sentinels_that_do_not_answer_are_named() -> None:
    target = RedisConnection(sentinel=f"127.0.0.1:{free_port()}")
    client = lease_client(target.url, timeout=1.0, **connection_kwargs(target, {}))
    try:
        with pytest.raises(NoSentinelError, match="no sentinel answers for master 'mymaster'"):
            client.ping()
    finally:
        client.close()


def status(*args: str) -> str:
    result = run_command([INFORMER_BUS, "status"], *args)
    return one_line_error(result, "informer-bus status")


def test_status_with_unreachable_sentinels_or_a_wrong_master_is_one_line_and_exit_2(
    sentinel_group: SentinelGroup,
) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    line = status("--redis-sentinel", nobody)
    assert f"no sentinel answers for master 'mymaster': {nobody}" in line
    line = status(
        "--redis-sentinel", sentinel_group.sentinel_addresses, "--redis-sentinel-master", "x"
    )
    assert "master 'x' unknown to sentinels" in line
    assert "(they monitor: mymaster" in line
    assert "via sentinels" in line


def test_a_replica_as_redis_url_is_named_read_only(sentinel_group: SentinelGroup) -> None:
    replica = sentinel_group.data_nodes[1]
    with pytest.raises(RedisAccessError) as caught:
        check_redis_access(RedisConnection(url=replica.url))
    assert str(caught.value) == (
        f"{replica.url} is a read-only replica; point --redis-url at the primary or use "
        "--redis-sentinel"
    )
    result = run_command(
        [INFORMER_BUS, "reflector"], "--redis-url", replica.url, "--resource", "pods",
        "--kube-url", "http://127.0.0.1:1", "--http-port", "0",
    )  # fmt: skip
    line = one_line_error(result, "informer-bus reflector")
    assert line.endswith(
        "is a read-only replica; point --redis-url at the primary or use --redis-sentinel"
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_same_clients_follow_a_failover_after_kill_9(failover_group: SentinelGroup) -> None:
    target = through(failover_group)
    timing = LeaseTiming()
    commands, leases = service_clients(target, timing)
    lease = RedisLease(
        leases, key="{l}:lease", epoch_key="{l}:epoch", holder="me", duration=timing.lease_duration
    )
    stop = threading.Event()
    reader = BlockingRead(commands, "{s}:stream", block_ms=200, stop=stop)
    try:
        acquired = lease.try_acquire_or_renew()
        commands.xadd("{s}:stream", {"n": "1"})
        assert len(reader.read("0", 10, 100)) == 1
        assert commands.wait(1, 10_000) == 1  # the replica has it all before the primary dies
        old = failover_group.kill_primary()
        new = failover_group.wait_for_new_primary(old)
        assert new != old

        # The command client retries by itself: its next call reaches the new primary.
        commands.xadd("{s}:stream", {"n": "2"})
        assert commands.xlen("{s}:stream") == 2

        # The lease and reader clients have no retries: a call may fail once, then works.
        def renewed() -> object:
            try:
                return lease.try_acquire_or_renew()
            except redis.ConnectionError:
                return None

        assert wait_until(renewed, 30, "the lease renewed on the new primary") == acquired

        def read_both() -> list[object] | None:
            try:
                entries = reader.read("0", 10, 100)
            except redis.ConnectionError:
                return None
            return entries if len(entries) == 2 else None

        wait_until(read_both, 30, "the blocking reader reading the new primary")
        assert reader._blocking_client is not None
        assert reader._blocking_client.connection.port == new[1]
    finally:
        stop.set()
        reader.close()
        commands.close()
        leases.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_blocking_reader_leaves_a_paused_primary_that_came_back_as_a_replica(
    failover_group: SentinelGroup,
) -> None:
    commands, leases = service_clients(through(failover_group), LeaseTiming())
    stop = threading.Event()
    reader = BlockingRead(commands, "{s}:stream", block_ms=200, stop=stop)
    try:
        commands.xadd("{s}:stream", {"n": "1"})
        reader.read("0", 10, 50)
        assert commands.wait(1, 10_000) == 1
        old = failover_group.master_address()
        paused = failover_group.pause_primary()
        new = failover_group.wait_for_new_primary(old)
        failover_group.resume(paused)  # it comes back, is told to replicate the new primary
        # The command client's next write meets READONLY (or a dead socket) and reconnects
        # through the sentinels, which tells its pool where the primary is now.
        wait_until(lambda: commands.xadd("{s}:stream", {"n": "2"}), 30, "a write")

        def moved() -> bool:
            try:
                reader.read("0", 10, 50)
            except redis.ConnectionError:
                return False
            assert reader._blocking_client is not None
            return bool(reader._blocking_client.connection.port == new[1])

        wait_until(moved, 30, "the blocking reader on the new primary")
    finally:
        stop.set()
        reader.close()
        commands.close()
        leases.close()


def test_a_service_given_an_unknown_master_says_what_it_retries_and_leads_once_it_exists(
    failover_group: SentinelGroup, sim: Simulator, tmp_path: Path
) -> None:
    """Issue 17's bad input for services: a sentinel may learn the name later (or a failover
    may be under way), so a service does not exit; its log names the master and what the
    sentinels monitor instead (no traceback), and once the sentinels know the name it leads."""
    group = failover_group
    flags = reflector_flags("redis://127.0.0.1/0", sim.url, redis_sentinel=group.sentinel_addresses,
                            redis_sentinel_master="typo")  # fmt: skip
    reflector = ReflectorProcess(flags, tmp_path / "reflector.log").start()
    try:
        wait_until(lambda: "acquire/renew failed" in reflector.log(), 60, interval=0.1,
                   what="the reflector's first failed attempt")  # fmt: skip
        lines = reflector.log().splitlines()
        failure = next(line for line in lines if "acquire/renew failed" in line)
        assert "MasterUnknownError: master 'typo' unknown to sentinels" in failure
        assert "(they monitor: mymaster" in failure
        primary = group.first_primary.port
        for sentinel in group.sentinels:  # the name appears: the retries must find it
            client = redis.Redis(port=sentinel.port, socket_timeout=2)
            client.execute_command("SENTINEL", "MONITOR", "typo", "127.0.0.1", primary, 2)
            client.close()
        wait_until(lambda: "started leading" in reflector.log(), 60, interval=0.1,
                   what="the reflector to lead through master 'typo'")  # fmt: skip
        assert reflector.running()
        assert "Traceback" not in reflector.log()
        assert reflector.terminate() == 0
    finally:
        reflector.close()
