"""Shard N of several co-sharded resources held as one (``processor_svc.lease_group``), and a
coordinator owning shard numbers of two resources together, on a real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from common.lease import RedisLease
from common.redis_config import lease_client
from common.redis_layout import ResourceKeys
from common.settings import LeaseTiming, MembershipTiming
from processor_svc.lease_group import LeaseGroup
from processor_svc.ownership import ShardOwnership
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

RESOURCES = ("widgets.example.com", "configmaps")


@pytest.fixture
def leases(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    client = lease_client(redis_server.url, timeout=0.5)
    try:
        yield client
    finally:
        client.close()


def lease(client: redis.Redis, resource: str, holder: str, shard: int = 3) -> RedisLease:
    keys = ResourceKeys("ib", resource).group().shard(shard)
    return RedisLease(client, key=keys.lease, epoch_key=keys.lease_epoch, holder=holder,
                      duration=30)  # fmt: skip


def group(client: redis.Redis, holder: str) -> LeaseGroup:
    return LeaseGroup([(resource, lease(client, resource, holder)) for resource in RESOURCES])


def test_a_group_is_acquired_whole_with_one_epoch_per_resource(leases: redis.Redis) -> None:
    mine = group(leases, "a")
    status = mine.try_acquire_or_renew()
    assert status.held and status.holder == "a"
    epochs = mine.epochs()
    assert set(epochs) == set(RESOURCES)
    assert status.epoch == epochs[RESOURCES[0]]  # the home resource's
    for resource in RESOURCES:
        assert lease(leases, resource, "x").holder_and_epoch() == ("a", epochs[resource])
    renewed = mine.renew(status.epoch)
    assert renewed.held and mine.epochs() == epochs


def test_a_group_part_of_which_is_held_by_another_is_not_taken_at_all(
    leases: redis.Redis,
) -> None:
    other = lease(leases, RESOURCES[1], "b")
    assert other.try_acquire_or_renew().held
    status = group(leases, "a").try_acquire_or_renew()
    assert not status.held
    assert status.holder == "b"  # who is in the way, and when it may be free
    assert status.ttl > 0
    # The part taken on the way was given back: no half-held shard blocks anyone.
    assert lease(leases, RESOURCES[0], "x").holder_and_epoch()[0] is None


def test_a_member_lease_lost_loses_the_group(leases: redis.Redis) -> None:
    mine = group(leases, "a")
    status = mine.try_acquire_or_renew()
    child = ResourceKeys("ib", RESOURCES[1]).group().shard(3).lease
    leases.delete(child)  # lapsed (or lost by Redis)
    renewed = mine.renew(status.epoch)
    assert not renewed.held
    assert renewed.holder is None
    assert not mine.renew(status.epoch + 1).held  # an epoch it never held is no renewal


def test_every_acquisition_gets_new_epochs_even_for_parts_still_held(
    leases: redis.Redis,
) -> None:
    mine = group(leases, "a")
    assert mine.try_acquire_or_renew().held
    first = mine.epochs()
    again = mine.try_acquire_or_renew()  # an ownership that ended left both leases ours
    assert again.held
    assert all(mine.epochs()[r] > first[r] for r in RESOURCES)
    assert mine.release()
    assert mine.epochs() == {}
    for resource in RESOURCES:
        assert lease(leases, resource, "x").holder_and_epoch()[0] is None


def test_a_coordinator_owns_shard_n_of_both_resources_together(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    acquired: dict[str, dict[int, dict[str, int]]] = {"a": {}, "b": {}}
    lock = threading.Lock()
    owners: list[ShardOwnership] = []
    clients = [lease_client(redis_server.url, timeout=0.1) for _ in range(2)]

    def make(name: str, client: redis.Redis) -> ShardOwnership:
        def on_acquired(shard: int, epoch: int) -> None:
            with lock:
                acquired[name][shard] = owner.epochs(shard, epoch)

        def on_lost(shard: int) -> None:
            with lock:
                acquired[name].pop(shard, None)

        owner = ShardOwnership(
            client, prefix="ib", resource=RESOURCES[0], co_sharded=RESOURCES, shard_count=6,
            member_id=name, on_acquired=on_acquired, on_lost=on_lost,
            timing=LeaseTiming(2.0, 1.5, 0.2), membership=MembershipTiming(0.05, 0.5),
        )  # fmt: skip
        owners.append(owner)
        owner.start()
        return owner

    try:
        a = make("a", clients[0])
        assert a.wait_for_assignment(10)
        make("b", clients[1])

        def split() -> bool:
            with lock:
                mine, theirs = set(acquired["a"]), set(acquired["b"])
            return len(mine) == len(theirs) == 3 and not mine & theirs

        wait_until(split, 20, what="a and b own three shard numbers each")
        keys = {r: ResourceKeys("ib", r).group() for r in RESOURCES}
        for name, shards in acquired.items():
            for shard, epochs in shards.items():
                assert set(epochs) == set(RESOURCES)
                for resource, epoch in epochs.items():
                    holder, held = redis_client.hmget(keys[resource].shard(shard).lease,
                                                      "holder", "epoch")  # fmt: skip
                    assert holder == name.encode()
                    assert int(held) == epoch
    finally:
        for owner in owners:
            owner.stop()
        for client in clients:
            client.close()
