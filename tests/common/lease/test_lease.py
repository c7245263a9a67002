"""Redis leases with fencing epochs (common/lease.py), and the clients built for them.

Everything runs against a real redis-server. Durations are short (lease 1 s, renew deadline
0.6 s, retry 0.1 s); assertions about "when" use generous upper bounds, and lower bounds only
where Redis guarantees them (a lease cannot expire before its duration).
"""

from __future__ import annotations

import math
import os
import time

import pytest
import redis

from common.lease import LeaseStatus, RedisLease, hash_tag, unique_holder
from common.redis_config import lease_client
from tests.support.leases import EPOCH_KEY, KEY, make_lease
from tests.support.redis_server import RedisServer

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
    e1 = first.epoch
    assert first == LeaseStatus(held=True, epoch=e1, holder="a", ttl=0.3) and e1 > 0
    assert redis_client.hgetall(KEY) == {b"holder": b"a", b"epoch": str(e1).encode()}
    assert 0 < redis_client.pttl(KEY) <= 300
    assert redis_client.ttl(EPOCH_KEY) == -1  # the epoch counter never expires

    time.sleep(0.15)
    renewed = a.try_acquire_or_renew()
    assert (renewed.held, renewed.epoch) == (True, e1)  # renewal keeps the epoch
    assert redis_client.pttl(KEY) > 200  # ...and pushes the expiry back

    other = b.try_acquire_or_renew()
    assert other.held is False
    assert (other.epoch, other.holder) == (e1, "a")
    assert 0 < other.ttl <= 0.3
    assert b.release() is False  # not b's to release
    assert a.holder_and_epoch() == ("a", e1)

    time.sleep(0.4)  # a stops renewing: the lease expires on Redis's clock
    assert b.holder_and_epoch() == (None, e1)
    taken = b.try_acquire_or_renew()
    e2 = taken.epoch
    assert (taken.held, taken.holder) == (True, "b") and e2 > e1
    lost = a.try_acquire_or_renew()
    assert (lost.held, lost.epoch, lost.holder) == (False, e2, "b")

    assert b.release() is True  # graceful stop: free at once
    assert redis_client.exists(KEY) == 0
    assert a.holder_and_epoch() == (None, e2)
    again = a.try_acquire_or_renew()
    assert again.held and again.epoch > e2  # epochs only grow, even for a former holder


def test_renew_extends_only_the_epoch_held_and_never_acquires(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    a = make_lease(redis_server.url, clients, "a", duration=30)
    b = make_lease(redis_server.url, clients, "b", duration=30)
    assert a.renew(1) == LeaseStatus(held=False, epoch=0, holder=None, ttl=0.0)
    assert redis_client.exists(KEY) == 0  # nothing taken
    e1 = a.try_acquire_or_renew().epoch
    redis_client.pexpire(KEY, 5000)
    assert a.renew(e1) == LeaseStatus(held=True, epoch=e1, holder="a", ttl=30.0)
    assert redis_client.pttl(KEY) > 5000  # pushed back
    assert a.renew(e1 + 1).held is False  # not the epoch held: untouched
    assert redis_client.pttl(KEY) > 5000
    other = b.renew(e1)
    assert (other.held, other.epoch, other.holder) == (False, e1, "a")
    redis_client.delete(KEY, EPOCH_KEY)  # Redis lost the lease, and the counter with it
    assert a.renew(e1).holder is None
    assert redis_client.exists(KEY) == 0
    assert a.try_acquire_or_renew().epoch > e1  # the next ownership's epoch is above the last


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
    assert epochs == sorted(set(epochs))  # strictly growing


def test_an_expiring_epoch_key_is_made_persistent_and_corrupt_leases_are_replaced(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    lease = make_lease(redis_server.url, clients, "a")
    counter = 10**14 + 41  # ahead of the server's clock in ms: the INCR decides
    redis_client.set(EPOCH_KEY, counter, ex=100)
    redis_client.hset(KEY, "junk", "1")  # a hash without a holder
    status = lease.try_acquire_or_renew()
    assert (status.held, status.epoch) == (True, counter + 1)
    assert redis_client.ttl(EPOCH_KEY) == -1
    assert redis_client.hgetall(KEY) == {b"holder": b"a", b"epoch": str(counter + 1).encode()}


def test_a_new_epoch_is_never_below_the_servers_clock_in_ms(
    redis_server: RedisServer, redis_client: redis.Redis, clients: list[redis.Redis]
) -> None:
    """What keeps epochs growing across a failover that lost the counter's last INCR
    (docs/reliability.md, "Fencing across a failover"); the counter follows the epoch."""
    lease = make_lease(redis_server.url, clients, "a")
    seconds, micros = redis_client.time()
    before_ms = seconds * 1000 + micros // 1000
    epoch = lease.try_acquire_or_renew().epoch
    assert epoch >= before_ms
    assert int(redis_client.get(EPOCH_KEY) or 0) == epoch
    redis_client.set(EPOCH_KEY, 3)  # a counter from before this rule (or a lost INCR)
    lease.release()
    time.sleep(0.01)  # the clock must have moved on by a millisecond (a failover takes seconds)
    assert lease.try_acquire_or_renew().epoch > epoch


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
        holder, epoch = lease.holder_and_epoch()
        assert holder == "ü" and epoch > 0
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


def test_lease_client_for_ends_calls_between_renew_deadline_and_expiry() -> None:
    from common.redis_config import lease_client_for
    from common.settings import LeaseTiming

    client = lease_client_for("redis://127.0.0.1:1/0", timing=LeaseTiming())
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 2.0  # min(2, 5 / 2.5): two timeouts < the 5 s margin
        assert kwargs["socket_connect_timeout"] == 2.0
    finally:
        client.close()
    short = lease_client_for("redis://127.0.0.1:1/0", timing=LeaseTiming(2.0, 1.5, 0.2))
    try:
        assert short.connection_pool.connection_kwargs["socket_timeout"] == 0.2
    finally:
        short.close()
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaseTiming(2.0, 2.0, 0.2)  # no margin: no lease client can be built for it
