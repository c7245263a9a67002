"""``async with`` / ``async for`` over ``redis.asyncio``: the same deltas as the blocking reader,
the same acknowledgement rule for a durable group, resuming after a kill, and a cancellation
that leaves no task, socket or unacknowledged processed delta behind."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import redis
import redis.asyncio

from common.redis_layout import ShardKeys
from informer_bus.subscription import (
    FROM_BEGINNING,
    SubscribedDelta,
    SubscribeError,
    subscribe,
    subscribe_durable,
)
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.bus import Bus
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, free_port
from tests.support.subscribe_cli import SHARDS, Deadline, Publisher, Row, as_rows
from tests.support.waiting import wait_until

GROUP = "audit"


class Crash(Exception):
    """What a caller's handler raises: the process died while handling a delta."""


def rows(deltas: list[SubscribedDelta]) -> list[Row]:
    return [(d.shard, d.entry_id, d.type.value, d.key, d.resource_version) for d in deltas]


def versions(deltas: list[SubscribedDelta]) -> list[tuple[str, str]]:
    return [(d.key, d.resource_version) for d in deltas]


def pending(client: redis.Redis, group: str = GROUP) -> int:
    """Entries delivered to the group and not acknowledged, over every shard."""
    return sum(
        int(client.xpending(ShardKeys("ib", "pods", shard).stream, group)["pending"])
        for shard in range(SHARDS)
    )


def is_pending(client: redis.Redis, delta: SubscribedDelta) -> bool:
    """The group has not acknowledged ``delta`` yet."""
    entry = delta.entry_id
    return bool(client.xpending_range(delta.stream, GROUP, min=entry, max=entry, count=1))


def connections(client: redis.Redis) -> int:
    """Clients connected to the server, the caller's own included."""
    return len(client.client_list())


async def read_all(target: Any, seconds: float = 0.5, **options: Any) -> list[SubscribedDelta]:
    async with subscribe(target, "pods", stop=Deadline(seconds), block_ms=100, **options) as deltas:
        return [delta async for delta in deltas]


def durable(target: Any, seconds: float = 1.0, **options: Any) -> Any:
    options.setdefault("shard_count", SHARDS)
    return subscribe_durable(target, "pods", GROUP, stop=Deadline(seconds), block_ms=100, **options)


def test_a_bystander_reads_what_the_blocking_one_reads(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(20)))
    publisher.publish(*(updated(f"ns/p{i}", str(100 + i)) for i in range(20)))
    publisher.publish(*(deleted(f"ns/p{i}", str(200 + i)) for i in range(0, 20, 3)))

    async def both() -> tuple[list[SubscribedDelta], list[SubscribedDelta]]:
        from_url = await read_all(redis_server.url, start=FROM_BEGINNING)
        client = redis.asyncio.Redis.from_url(redis_server.url)
        try:
            given = await read_all(client, start=FROM_BEGINNING, namespace="ns")
            await client.ping()  # the caller's client stays open
        finally:
            await client.aclose()
        return from_url, given

    from_url, given = asyncio.run(both())
    with subscribe(
        redis_client, "pods", start=FROM_BEGINNING, stop=Deadline(0.5), block_ms=100
    ) as deltas:
        blocking = list(deltas)
    assert rows(from_url) == rows(given) == rows(blocking)
    assert sorted(rows(from_url)) == sorted(as_rows(bus.all_entries()))


def test_from_now_is_from_the_async_with_block(
    redis_server: RedisServer, publisher: Publisher
) -> None:
    publisher.publish(added("ns/before", "1"))

    async def run() -> list[SubscribedDelta]:
        subscription = subscribe(redis_server.url, "pods", stop=Deadline(1), block_ms=100)
        publisher.publish(added("ns/made", "2"))  # made, not open: not "from now" yet
        async with subscription as deltas:
            publisher.publish(added("ns/after", "3"))
            return [delta async for delta in deltas]

    assert versions(asyncio.run(run())) == [("ns/after", "3")]


def test_a_cancelled_bystander_leaves_no_task_and_no_socket(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    baseline = connections(redis_client)
    publisher.publish(added("ns/a", "1"))

    async def run() -> list[SubscribedDelta]:
        got: list[SubscribedDelta] = []

        async def consume() -> None:
            async with subscribe(redis_server.url, "pods", start=FROM_BEGINNING) as deltas:
                async for delta in deltas:
                    got.append(delta)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)  # read what there is, then wait in XREAD (2 s blocks)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return got

    assert versions(asyncio.run(run())) == [("ns/a", "1")]
    wait_until(lambda: connections(redis_client) == baseline, 5, "the subscription's sockets")


def test_making_a_subscription_talks_to_no_redis(redis_client: redis.Redis) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    subscription = subscribe(nowhere, "pods")
    durable_one = subscribe_durable(nowhere, "pods", GROUP)

    async def open_it() -> None:
        async with durable_one:
            pass

    with pytest.raises(redis.ConnectionError):
        asyncio.run(open_it())
    with pytest.raises(redis.ConnectionError), subscription:
        pass
    asynchronous = redis.asyncio.Redis.from_url(nowhere)
    with pytest.raises(SubscribeError, match="read it with 'async with' / 'async for'"):
        next(iter(subscribe(asynchronous, "pods")))
    asyncio.run(asynchronous.aclose())
    with pytest.raises(SubscribeError, match="read it with 'with' / 'for'"):
        asyncio.run(read_all(redis_client))


def test_a_durable_group_acknowledges_after_the_loop_body_and_resumes(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(6)))
    publisher.publish(updated("ns/p0", "2"), deleted("ns/p5", "3"))
    known = bus.known_versions()
    initial: list[SubscribedDelta] = []
    live: list[SubscribedDelta] = []
    unacknowledged: list[bool] = []

    async def first_run() -> None:
        async with durable(redis_server.url) as deltas:
            async for delta in deltas:
                initial.append(delta)
                if len(initial) == len(known):
                    break
        publisher.publish(*(updated(f"ns/p{i}", str(10 + i)) for i in range(5)))
        async with durable(redis_server.url) as deltas:  # the initial list was acknowledged
            async for delta in deltas:
                unacknowledged.append(is_pending(redis_client, delta))
                if len(live) == 3:
                    raise Crash  # while the fourth is being handled
                live.append(delta)

    with pytest.raises(Crash):
        asyncio.run(first_run())
    assert all(d.initial for d in initial)
    assert sorted(versions(initial)) == sorted(known.items())
    assert not any(d.initial for d in live)
    # the delta in the loop body is never acknowledged before the body returns
    assert unacknowledged == [True] * 4
    assert pending(redis_client) == 5 - 3  # the fourth, and the fifth read behind it

    async def second_run() -> list[SubscribedDelta]:
        async with durable(redis_server.url) as deltas:
            return [delta async for delta in deltas]

    again = asyncio.run(second_run())
    assert pending(redis_client) == 0
    assert sorted(versions(again) + versions(live)) == [(f"ns/p{i}", str(10 + i)) for i in range(5)]
    assert not any(d.initial for d in again)


def test_a_new_group_gets_the_known_state_first(
    redis_server: RedisServer, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(8)))
    publisher.publish(deleted("ns/p7", "2"))
    ends, known = bus.positions(), bus.known_versions()

    async def run() -> list[SubscribedDelta]:
        async with durable(redis_server.url) as deltas:
            publisher.publish(updated("ns/p0", "5"))
            return [delta async for delta in deltas]

    seen = asyncio.run(run())
    initial, rest = seen[: len(known)], seen[len(known) :]
    assert all(d.initial and d.type.value == "Added" for d in initial)
    assert sorted(versions(initial)) == sorted(known.items())
    assert {(d.shard, d.entry_id) for d in initial} <= set(ends.items())
    assert [(d.key, d.resource_version, d.initial) for d in rest] == [("ns/p0", "5", False)]


def test_cancelling_closes_cleanly_and_keeps_what_the_loop_body_finished(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(6)))
    with durable(redis_client) as deltas:
        assert len(list(deltas)) == 6  # the group, its initial list acknowledged
    baseline = connections(redis_client)

    async def cancel_while_waiting(client: Any, rv: str) -> list[SubscribedDelta]:
        """Cancelled while the subscription waits for new entries."""
        got: list[SubscribedDelta] = []
        three = asyncio.Event()

        async def consume() -> None:
            async with durable(client, seconds=60) as deltas:
                async for delta in deltas:
                    got.append(delta)
                    if len(got) == 3:
                        three.set()

        task = asyncio.create_task(consume())
        publisher.publish(*(updated(f"ns/p{i}", rv) for i in range(3)))
        await asyncio.wait_for(three.wait(), 10)
        await asyncio.sleep(0.3)  # in its blocking read by now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return got

    async def with_own_client() -> list[SubscribedDelta]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        try:
            got = await cancel_while_waiting(client, "4")
            await client.ping()  # the caller's client is the caller's: still usable
            return got
        finally:
            await client.aclose()

    async def cancel_in_the_loop_body() -> SubscribedDelta:
        """Cancelled while the loop body handles a delta."""
        handling: asyncio.Future[SubscribedDelta] = asyncio.get_running_loop().create_future()

        async def consume() -> None:
            async with durable(redis_server.url, seconds=60) as deltas:
                async for delta in deltas:
                    handling.set_result(delta)
                    await asyncio.sleep(60)

        task = asyncio.create_task(consume())
        publisher.publish(updated("ns/p4", "3"))
        delta = await asyncio.wait_for(handling, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return delta

    got = asyncio.run(cancel_while_waiting(redis_server.url, "2"))
    assert sorted(versions(got)) == [(f"ns/p{i}", "2") for i in range(3)]
    assert pending(redis_client) == 0  # every body had returned: all acknowledged
    wait_until(lambda: connections(redis_client) == baseline, 5, "the subscription's sockets")

    got = asyncio.run(with_own_client())
    assert sorted(versions(got)) == [(f"ns/p{i}", "4") for i in range(3)]
    assert pending(redis_client) == 0
    wait_until(lambda: connections(redis_client) == baseline, 5, "the caller's client sockets")

    cut = asyncio.run(cancel_in_the_loop_body())
    assert (cut.key, cut.resource_version) == ("ns/p4", "3")
    assert pending(redis_client) == 1  # the delta being handled stays unacknowledged
    wait_until(lambda: connections(redis_client) == baseline, 5, "the subscription's sockets")

    async def resume() -> list[SubscribedDelta]:
        async with durable(redis_server.url) as deltas:
            return [delta async for delta in deltas]

    assert versions(asyncio.run(resume())) == [("ns/p4", "3")]
    assert pending(redis_client) == 0


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from informer_bus import subscribe_durable

    async def main(url: str) -> None:
        async with subscribe_durable(url, "pods", "audit") as deltas:
            async for delta in deltas:
                line = f"{delta.key} {delta.resource_version} {int(delta.initial)}"
                print(line, flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


def test_a_killed_subscriber_resumes_with_nothing_lost_or_repeated(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(10)))

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", CHILD, redis_server.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip

    def lines(child: subprocess.Popen[str], count: int) -> list[str]:
        assert child.stdout is not None
        return [child.stdout.readline().strip() for _ in range(count)]

    def kill(child: subprocess.Popen[str]) -> None:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=10)

    first = start()
    try:
        initial = lines(first, 10)
        publisher.publish(*(updated(f"ns/p{i}", "2") for i in range(10)))
        live = lines(first, 10)
        # idle in its blocking read: what it printed is acknowledged (asked for the next)
        wait_until(lambda: pending(redis_client) == 0, 10, "the acknowledgements")
    finally:
        kill(first)
    publisher.publish(*(updated(f"ns/p{i}", "3") for i in range(10)))
    second = start()
    try:
        resumed = lines(second, 10)
    finally:
        kill(second)

    assert sorted(initial) == sorted(f"ns/p{i} 1 1" for i in range(10))
    assert sorted(live) == sorted(f"ns/p{i} 2 0" for i in range(10))
    assert sorted(resumed) == sorted(f"ns/p{i} 3 0" for i in range(10))  # no repeats, no gap
