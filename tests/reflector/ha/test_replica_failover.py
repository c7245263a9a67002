"""Fencing and durability across a real failover: a primary, a replica that falls behind
(its link cut), the primary killed (SIGKILL), the replica promoted (``REPLICAOF NO ONE``).

docs/reliability.md, "Fencing across a failover" and "Durability you can choose", is what these
show: epochs issued after the promotion are above every epoch issued before it even though the
promoted replica lost the last INCR; with N = 0 a stale leader writes on the promoted replica
only until the new leader's next fenced write; with N >= 1 a lease or fence the replicas did not
confirm is never acted on, and one they confirmed is not rolled back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry, Counter

from common.lease import RedisLease
from common.redis_config import lease_client
from common.redis_layout import GroupShardKeys, ShardKeys
from common.replica_wait import ReplicationShortfallError, ReplicaWait
from processor_svc.fenced_stream import FencedStream
from reflector_svc.publish_records import FencedError
from reflector_svc.publisher import ShardPublisher
from tests.reflector.publisher.support import added
from tests.support.redis_server import RedisServer
from tests.support.replicas import ReplicaSet

LEASE = 0.5
"""Seconds: short, so that a lease lapses within the test."""
WAIT_ONE = ReplicaWait(1, 300)
LEADER, EPOCH = "ib:{pods}:leader", "ib:{pods}:epoch"


@pytest.fixture
def replica_set(tmp_path: Path) -> Iterator[ReplicaSet]:
    replicas = ReplicaSet(tmp_path, count=1).start()
    try:
        yield replicas
    finally:
        replicas.stop()


class Side:
    """One process's clients on one Redis: a leader lease and a publisher."""

    def __init__(self, server: RedisServer, holder: str, wait: ReplicaWait) -> None:
        self.leases = lease_client(server.url, timeout=2.0)
        self.commands = redis.Redis.from_url(server.url, socket_timeout=10)
        self.lease = RedisLease(
            self.leases, key=LEADER, epoch_key=EPOCH, holder=holder, duration=LEASE,
            replica_wait=wait,
        )  # fmt: skip
        self.publisher = ShardPublisher(
            self.commands, prefix="ib", resource="pods", shard_count=1, replica_wait=wait
        )

    def close(self) -> None:
        self.leases.close()
        self.commands.close()


def lead(side: Side) -> int:
    """Acquire the leader lease (it must be free) and fence the shard: a new leader's start."""
    status = side.lease.try_acquire_or_renew()
    assert status.held, status
    side.publisher.fence(status.epoch)
    return status.epoch


def test_without_wait_epochs_grow_across_the_failover_and_the_stale_window_ends_at_the_new_leaders_write(  # noqa: E501
    replica_set: ReplicaSet,
) -> None:
    primary, (replica,) = replica_set.primary, replica_set.replicas
    old, new = Side(primary, "old", ReplicaWait()), Side(primary, "new", ReplicaWait())
    try:
        e1 = lead(old)
        old.publisher.publish(e1, [added("ns/a", "10")], checkpoint_rv="10")
        replica_set.in_sync()

        replica_set.cut(replica)  # from here on the replica hears nothing
        time.sleep(LEASE + 0.2)  # the old leader stalls: its lease lapses
        e2 = lead(new)
        assert e2 > e1
        new.publisher.publish(e2, [added("ns/b", "11")], checkpoint_rv="11")
        with pytest.raises(FencedError):  # fenced on the primary...
            old.publisher.publish(e1, [added("ns/c", "12")], checkpoint_rv="12")

        replica_set.kill_primary()  # ...which dies with e2, its fence and ns/b
        replica_set.promote(replica)
    finally:
        old.close()
        new.close()

    old, new, third = (Side(replica, name, ReplicaWait()) for name in ("old", "new", "third"))
    try:
        check = redis.Redis.from_url(replica.url)
        assert int(check.get(EPOCH) or 0) == e1  # the promoted replica lost the INCR of e2
        # The window: the stale leader's fence is the newest the promoted replica knows.
        stale = old.publisher.publish(e1, [added("ns/c", "12")], checkpoint_rv="12")
        assert stale.shards[0].published == 1
        # The new leader's next fenced write closes it.
        new.publisher.publish(e2, [added("ns/b", "11")], checkpoint_rv="11")
        with pytest.raises(FencedError):
            old.publisher.publish(e1, [added("ns/d", "13")], checkpoint_rv="13")

        # An epoch issued after the promotion is above every epoch issued before the failover,
        # the lost e2 included, although the counter there says e1: the server's clock.
        time.sleep(LEASE + 0.2)  # every lease of before the failover has lapsed
        check.delete(LEADER)  # and whoever held it last is gone
        e3 = third.lease.try_acquire_or_renew().epoch
        assert e3 > e2 > e1
        third.publisher.fence(e3)
        with pytest.raises(FencedError):
            new.publisher.publish(e2, [added("ns/e", "14")], checkpoint_rv="14")
        check.close()
    finally:
        for side in (old, new, third):
            side.close()


def test_with_wait_an_unconfirmed_lease_is_not_acted_on_and_a_confirmed_fence_survives(
    replica_set: ReplicaSet,
) -> None:
    primary, (replica,) = replica_set.primary, replica_set.replicas
    old, new = Side(primary, "old", WAIT_ONE), Side(primary, "new", WAIT_ONE)
    try:
        e1 = lead(old)  # confirmed by the replica
        old.publisher.publish(e1, [added("ns/a", "10")], checkpoint_rv="10")

        replica_set.cut(replica)
        time.sleep(LEASE + 0.2)
        with pytest.raises(ReplicationShortfallError):
            new.lease.try_acquire_or_renew()  # on the primary, not confirmed: not a leader
        with pytest.raises(ReplicationShortfallError):
            old.publisher.publish(e1, [added("ns/b", "11")], checkpoint_rv="11")
        replica_set.reconnect(replica)  # caught up (a loaded machine may need more than a WAIT)
        # The next attempt renews and confirms the same epoch; the publish retried is
        # idempotent: the primary had ns/b already, nothing is written twice.
        status = new.lease.try_acquire_or_renew()
        assert status.held and status.epoch > e1
        e2 = status.epoch
        new.publisher.fence(e2)  # confirmed: the replica has the fence
        with pytest.raises(FencedError):
            old.publisher.publish(e1, [added("ns/b", "11")], checkpoint_rv="11")
        again = new.publisher.publish(e2, [added("ns/b", "11")], checkpoint_rv="11")
        assert again.shards[0].published == 0  # the unconfirmed publish had reached the primary

        replica_set.kill_primary()  # right after: nothing confirmed can be lost
        replica_set.promote(replica)
    finally:
        old.close()
        new.close()

    old, new = Side(replica, "old", WAIT_ONE), Side(replica, "new", WAIT_ONE)
    try:
        with pytest.raises(FencedError):  # the fence was not rolled back: no window at all
            old.publisher.publish(e1, [added("ns/c", "12")], checkpoint_rv="12")
        keys = ShardKeys("ib", "pods", 0)
        check = redis.Redis.from_url(replica.url)
        assert check.get(EPOCH) == str(e2).encode()  # the acquisition survived too
        assert check.xlen(keys.stream) == 2  # ns/a and ns/b, once each
        check.close()
    finally:
        old.close()
        new.close()


def test_fenced_reads_and_acknowledgements_wait_for_the_replicas(
    replica_set: ReplicaSet,
) -> None:
    """An entry is handed to a handler only once a replica has it (a failover cannot take back
    what a handler saw), and an acknowledgement counts only once a replica has it."""
    primary, (replica,) = replica_set.primary, replica_set.replicas
    client = redis.Redis.from_url(primary.url, socket_timeout=10)
    try:
        keys = GroupShardKeys(ShardKeys("ib", "pods", 0), "processors")
        client.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
        entry = client.xadd(keys.stream, {"d": b"x"}).decode()
        client.hset(keys.lease, mapping={"holder": "m", "epoch": "7"})
        stream = FencedStream(
            client, keys, member_id="m", epoch=7,
            dead_letters=Counter("dl", "dead letters", registry=CollectorRegistry()),
            replica_wait=WAIT_ONE,
        )  # fmt: skip
        replica_set.cut(replica)
        with pytest.raises(ReplicationShortfallError):
            stream.read(10, ">", [])  # read, but no replica confirms it: not to be delivered
        replica_set.reconnect(replica)
        [[replayed, _]] = stream.read(10, "0", [])  # the worker's replay of its pending entries
        assert replayed.decode() == entry
        replica_set.cut(replica)
        with pytest.raises(ReplicationShortfallError):
            stream.acknowledge([], [entry])
        replica_set.reconnect(replica)
        stream.acknowledge([], [entry])  # the retry: XACK is idempotent, now confirmed
        assert client.xpending(keys.stream, keys.group)["pending"] == 0
    finally:
        client.close()


def test_waiting_for_no_replica_sends_no_wait(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """N = 0 is today's behaviour: no WAIT anywhere (and so no extra round trip)."""
    redis_client.config_resetstat()
    side = Side(redis_server, "only", ReplicaWait())
    try:
        epoch = lead(side)
        side.publisher.publish(epoch, [added("ns/a", "10")], checkpoint_rv="10")
        side.publisher.advance_checkpoints(epoch, "10")
        assert side.lease.release()
        keys = GroupShardKeys(ShardKeys("ib", "pods", 0), "processors")
        redis_client.xgroup_create(keys.stream, keys.group, id="0")
        redis_client.hset(keys.lease, mapping={"holder": "m", "epoch": "7"})
        stream = FencedStream(
            redis_client, keys, member_id="m", epoch=7,
            dead_letters=Counter("dl", "dead letters", registry=CollectorRegistry()),
        )  # fmt: skip
        [[entry, _]] = stream.read(10, ">", [])
        stream.read(10, ">", [entry.decode()])
        stream.acknowledge([], [entry.decode()])
        assert "cmdstat_wait" not in redis_client.info("commandstats")
        assert "cmdstat_evalsha" in redis_client.info("commandstats")
    finally:
        side.close()
