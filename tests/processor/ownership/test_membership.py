"""Processor membership (processor_svc/membership.py): heartbeats, expiry, leave, Redis's clock.

Against the session's real redis-server. Deadlines are checked against Redis's own ``TIME``, the
only clock membership trusts.
"""

from __future__ import annotations

import time

import pytest
import redis

from common.redis_config import lease_client
from common.redis_layout import ResourceKeys
from processor_svc.membership import Membership, decode_members
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

TTL = 0.5
KEY = "ib:{pods}:members"


def redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def member(client: redis.Redis, name: str, ttl: float = TTL) -> Membership:
    return Membership(client, prefix="ib", resource="pods", member_id=name, ttl=ttl)


def test_key_is_the_resource_members_key(redis_client: redis.Redis) -> None:
    assert member(redis_client, "a").key == ResourceKeys("ib", "pods").group().members == KEY


def test_heartbeat_records_a_deadline_on_the_redis_clock(redis_client: redis.Redis) -> None:
    before = redis_ms(redis_client)
    live = member(redis_client, "a").heartbeat()
    after = redis_ms(redis_client)
    assert live == ["a"]
    score = redis_client.zscore(KEY, "a")
    assert score is not None
    assert before + 500 <= score <= after + 500


def test_heartbeat_returns_every_live_member_sorted(redis_client: redis.Redis) -> None:
    for name in ("c", "a"):
        member(redis_client, name).heartbeat()
    assert member(redis_client, "b").heartbeat() == ["a", "b", "c"]
    assert member(redis_client, "x").live_members() == ["a", "b", "c"]


def test_a_member_is_gone_once_its_deadline_passes(redis_client: redis.Redis) -> None:
    a, b = member(redis_client, "a", ttl=0.2), member(redis_client, "b", ttl=5)
    a.heartbeat()
    b.heartbeat()
    assert b.live_members() == ["a", "b"]
    wait_until(lambda: b.live_members() == ["b"], timeout=2, interval=0.01)
    # Reading does not write; the next heartbeat (anyone's) prunes the dead entry.
    assert redis_client.zscore(KEY, "a") is not None
    assert b.heartbeat() == ["b"]
    assert redis_client.zscore(KEY, "a") is None


def test_heartbeats_keep_a_member_alive(redis_client: redis.Redis) -> None:
    a = member(redis_client, "a", ttl=0.3)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        assert a.heartbeat() == ["a"]
        time.sleep(0.05)
    assert a.live_members() == ["a"]


def test_liveness_is_judged_by_redis_time_not_ours(redis_client: redis.Redis) -> None:
    now = redis_ms(redis_client)
    redis_client.zadd(KEY, {"future": now + 60_000, "past": now - 1, "exact": now})
    assert member(redis_client, "x").live_members() == ["future"]


def test_leave_removes_at_once(redis_client: redis.Redis) -> None:
    a, b = member(redis_client, "a", ttl=60), member(redis_client, "b", ttl=60)
    a.heartbeat()
    b.heartbeat()
    a.leave()
    assert b.live_members() == ["b"]
    a.leave()  # idempotent
    assert b.live_members() == ["b"]


def test_queue_heartbeat_runs_in_a_pipeline(redis_client: redis.Redis) -> None:
    a = member(redis_client, "a")
    redis_client.set("other", "1")
    with redis_client.pipeline(transaction=False) as pipe:
        a.queue_heartbeat(pipe)
        pipe.get("other")
        reply, other = pipe.execute()
    assert decode_members(reply) == ["a"]
    assert other == b"1"


def test_works_with_decoded_responses(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        client.delete(KEY)
        assert member(client, "a").heartbeat() == ["a"]
        assert member(client, "a").live_members() == ["a"]
    finally:
        client.close()


def test_redis_errors_propagate(redis_server: RedisServer) -> None:
    client = lease_client("redis://127.0.0.1:1/0", timeout=0.2)
    try:
        with pytest.raises(redis.ConnectionError):
            member(client, "a").heartbeat()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("member_id", "ttl", "message"),
    [("", 1.0, "member_id"), ("a", 0.0, "ttl"), ("a", -1.0, "ttl"), ("a", float("nan"), "ttl")],
)
def test_validates_its_arguments(
    redis_client: redis.Redis, member_id: str, ttl: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        member(redis_client, member_id, ttl=ttl)


def test_decode_members_rejects_a_non_list() -> None:
    with pytest.raises(TypeError):
        decode_members(b"nope")
