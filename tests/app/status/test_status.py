"""``informer-bus status`` against a running pipeline (simulator, reflector and processor as
real processes) and against hand-made Redis states for the corner cases."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator, SimulatorSettings
from common.redis_config import redacted_url
from informer_bus.discovery import discover_resources
from informer_bus.local_redis import free_port
from informer_bus.status.collect import collect_status, status_client
from informer_bus.status.model import GroupShardStatus
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
PODS = 300
MEMBER_TTL = 2.0
STATUS = [str(Path(sys.executable).with_name("informer-bus")), "status"]
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command(STATUS, *args)


@dataclass
class Pipeline:
    redis_url: str
    reflector: ReflectorProcess
    processor: ProcessorProcess


@pytest.fixture
def pipeline(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> Iterator[Pipeline]:
    """Simulator (in this process), reflector and processor (children), synced and caught up."""
    with Simulator(SimulatorSettings(bookmark_interval=0.2)) as sim:
        sim.populate("pods", PODS, seed=1)
        shared = ["--redis-url", redis_server.url, "--shard-count", str(SHARDS),
                  "--http-host", "127.0.0.1", "--http-port", "0"]  # fmt: skip
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim.url, *shared, "--identity", "status-test",
             "--checkpoint-interval", "0.2", "--retention-interval", "3600"],
            tmp_path / "reflector.log",
        )  # fmt: skip
        processor = ProcessorProcess(
            ["--resource", "pods", "--handler", EXAMPLE, *shared, "--member-id", "status-test",
             "--heartbeat-interval", "0.2", "--member-ttl", str(MEMBER_TTL)],
            tmp_path / "processor.log",
        )  # fmt: skip
        try:
            reflector.start()
            processor.start()
            wait_until(lambda: processor.probe() == 200, 30, what="the processor synced")
            bus = Bus(redis_client, "pods", shard_count=SHARDS)
            wait_until(bus.synced, 30, what="the reflector synced")
            yield Pipeline(redis_server.url, reflector, processor)
        finally:
            processor.close()
            reflector.close()


def test_status_reports_leader_owners_lag_and_processors_as_json_and_table(
    pipeline: Pipeline,
) -> None:
    client = status_client(pipeline.redis_url)
    try:

        def caught_up() -> bool:
            group = collect_status(client, member_ttl=MEMBER_TTL).resources[0].group()
            return group is not None and group.lag == 0 and group.synced

        wait_until(caught_up, 20, what="lag 0 on every shard")
    finally:
        client.close()

    result = status("--redis-url", pipeline.redis_url, "--output", "json",
                    "--member-ttl", str(MEMBER_TTL))  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["prefix"] == "ib"
    [pods] = document["resources"]
    assert pods["resource"] == "pods"
    assert pipeline.reflector.holds(pods["leader"]["holder"])
    assert pods["leader"]["epoch"] == pods["epoch"] > 0
    assert 0 < pods["leader"]["expires_in_s"] <= 15
    assert pods["synced"] is True
    assert pods["last_rv"] is not None and pods["last_list_rv"] is not None
    assert int(pods["last_rv"]) >= int(pods["last_list_rv"])
    assert 0 <= pods["last_list_age_s"] < 60
    assert abs(pods["last_list_at"] - (document["taken_at"] - pods["last_list_age_s"])) < 0.01
    shards = pods["shards"]
    assert [shard["shard"] for shard in shards] == list(range(SHARDS))
    for shard in shards:
        assert shard["synced"] is True and shard["relisting"] is False
        assert shard["entries_added"] == shard["stream_length"]
    assert sum(shard["objects"] for shard in shards) == PODS
    [group] = pods["groups"]
    assert (group["name"], group["kind"], group["synced"]) == ("processors", "processor", True)
    assert (group["owned_shards"], group["lag"], group["max_lag_s"]) == (SHARDS, 0, 0.0)
    assert group["dead_letters"] == 0
    for shard, mine in zip(shards, group["shards"], strict=True):
        assert mine["shard"] == shard["shard"] and mine["exists"] is True
        assert pipeline.processor.holds(mine["owner"]), mine
        assert (mine["lag"], mine["pending"], mine["lag_s"]) == (0, 0, 0.0)
        assert mine["entries_read"] == shard["entries_added"]
    [processor] = group["processors"]
    assert processor["member"] == group["shards"][0]["owner"]
    assert processor["live"] is True
    assert processor["shards"] == list(range(SHARDS))
    assert 0 <= processor["heartbeat_age_s"] <= MEMBER_TTL
    assert 0 < processor["expires_in_s"] <= MEMBER_TTL

    table = status("--redis-url", pipeline.redis_url)
    assert table.returncode == 0, table.stderr
    text = table.stdout
    assert "resource pods" in text
    assert f"reflector leader  {pods['leader']['holder']} (epoch {pods['epoch']}" in text
    assert f"synced            yes ({SHARDS}/{SHARDS} shards listed)" in text
    assert f"last RV           {pods['last_rv']} " in text
    owner = processor["member"]
    assert (
        f"group processors (processor)  1/1 members live, {SHARDS}/{SHARDS} shards owned, lag 0 "
        "(0.0 s), synced yes, dead letters 0"
    ) in text
    lines = [line.split() for line in text.splitlines() if line.strip()]
    reflector_rows = [row for row in lines if row[0].isdigit() and len(row) == 6]
    group_rows = [row for row in lines if row[0].isdigit() and len(row) == 7]
    for shard, row, mine in zip(shards, reflector_rows, group_rows, strict=True):
        # SHARD SYNCED RV OBJECTS STREAM ADDED
        assert row == [str(shard["shard"]), "yes", shard["rv"], str(shard["objects"]),
                       str(shard["stream_length"]), str(shard["entries_added"])]  # fmt: skip
        # SHARD OWNER GROUP LAG PENDING LAG_S DEAD
        assert mine == [str(shard["shard"]), owner, "yes", "0", "0", "0.0", "0"], mine
    [member_row] = [row for row in lines if row[0] == owner]
    assert member_row[1] == "yes" and member_row[-2:] == ["4:", "0-3"], member_row

    only = status("--redis-url", pipeline.redis_url, "--resource", "pods", "--output", "json")
    assert [r["resource"] for r in json.loads(only.stdout)["resources"]] == ["pods"]
    unknown = status("--redis-url", pipeline.redis_url, "--resource", "widgets")
    assert "no resource 'widgets'" in one_line_error(unknown, "informer-bus status")
    assert "found: pods" in unknown.stderr


def test_a_first_list_cut_short_by_ctrl_c_is_told_apart_from_no_reflector(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Issue 34: after Ctrl-C during the reflector's first list, its deltas are on the streams
    (and subscribers read them) but status said no reflector had ever published the resource."""
    bus = Bus(redis_client, "pods", shard_count=SHARDS)
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 3000, seed=3)
        sim.slow_responses(0.3)  # a list of 15 pages that takes seconds
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim.url, "--redis-url", redis_server.url,
             "--shard-count", str(SHARDS), "--http-host", "127.0.0.1", "--http-port", "0",
             "--page-size", "200", "--no-watch-list"],
            tmp_path / "reflector.log",
        )  # fmt: skip
        try:
            reflector.start()
            wait_until(lambda: bus.length() > 0, 60, what="the first pages published")
            reflector.send(signal.SIGINT)
            assert reflector.wait(30) == 0, reflector.log()
        finally:
            reflector.close()
    assert not bus.synced(), "the list was not cut short: make it slower"
    result = status("--redis-url", redis_server.url)
    assert result.returncode == 0, result.stderr
    assert f"list interrupted at {bus.length()} deltas; no reflector leads" in result.stdout
    assert "ever published" not in result.stdout


def test_unreachable_redis_is_one_line_and_exit_2() -> None:
    result = status("--redis-url", f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    line = one_line_error(result, "informer-bus status")
    assert "cannot read Redis at redis://:***@127.0.0.1:" in line
    assert "hunter2" not in result.stderr
    assert result.stdout == ""


def test_bad_output_is_a_usage_error() -> None:
    result = status("--output", "yaml")
    assert "--output must be table or json" in one_line_error(result, "informer-bus status")


def test_no_resources_says_so_and_exits_1(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    redis_client.set("unrelated", "1")
    result = status("--redis-url", redis_server.url)
    assert result.returncode == 1
    assert "no informer-bus resources under prefix 'ib'" in result.stderr
    assert result.stdout == ""
    as_json = status("--redis-url", redis_server.url, "--output", "json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["resources"] == []


def test_discovery_finds_every_resource_and_its_shard_count(redis_client: redis.Redis) -> None:
    redis_client.hset("ib:{pods}:leader", mapping={"holder": "r", "epoch": "1"})
    redis_client.hset("ib:{pods:0}:checkpoint", "rv", "5")
    redis_client.set("ib:{pods:11}:lease_epoch", "1")
    redis_client.hset("ib:{widgets.example.com@shop:2}:versions", "k", "1")
    redis_client.zadd("ib:{deployments.apps}:members", {"m": 1})
    redis_client.hset("ib:{odd:name:3}:objects", "k", "v")  # ':' inside a resource id
    redis_client.set("ib:{pods:x}:deltas", "not a shard number")
    redis_client.set("other:{pods:0}:checkpoint", "another prefix")
    redis_client.set("i*:{stars:0}:checkpoint", "a prefix with a glob character")
    client = status_client_for(redis_client)
    try:
        assert discover_resources(client, "ib") == {
            "deployments.apps": 0,
            "odd:name": 4,
            "pods": 12,
            "widgets.example.com@shop": 3,
        }
        assert discover_resources(client, "i*") == {"stars": 1}
    finally:
        client.close()


def status_client_for(client: redis.Redis) -> redis.Redis:
    kwargs = client.connection_pool.connection_kwargs
    return status_client(f"redis://{kwargs['host']}:{kwargs['port']}/0")


def test_lag_counts_undelivered_and_pending_entries_with_their_age(
    redis_client: redis.Redis,
) -> None:
    stream = "ib:{pods:0}:deltas"
    redis_client.xgroup_create(stream, "processors", id="0", mkstream=True)
    for number in range(3):
        redis_client.xadd(stream, {"d": str(number)}, id=f"{1000 + number}-0")
    redis_client.xadd("ib:{pods:1}:deltas", {"d": "x"}, id="5000-0")  # no group yet
    client = status_client_for(redis_client)
    seconds, _ = redis_client.time()
    now = int(seconds)

    def shards() -> tuple[GroupShardStatus, ...]:
        [resource] = collect_status(client).resources
        assert [shard.stream_length for shard in resource.shards] == [3, 1]
        [group] = resource.groups
        assert (group.name, group.kind) == ("processors", "consumer")  # no leases, no members
        return group.shards

    shard0, shard1 = shards()
    assert (shard0.lag, shard0.pending, shard0.exists) == (3, 0, True)
    assert shard0.lag_s is not None and now - 1 - 1.0 <= shard0.lag_s <= now + 1
    assert (shard1.lag, shard1.exists) == (1, False)
    assert shard1.lag_s is not None and shard1.lag_s >= now - 6

    redis_client.xreadgroup("processors", "owner", {stream: ">"}, count=1)
    shard0 = shards()[0]
    assert (shard0.lag, shard0.pending) == (3, 1)
    assert shard0.lag_s is not None and now - 1 - 1.0 <= shard0.lag_s <= now + 1
    redis_client.xack(stream, "processors", "1000-0")
    redis_client.xreadgroup("processors", "owner", {stream: ">"})
    redis_client.xack(stream, "processors", "1001-0", "1002-0")
    shard0 = shards()[0]
    assert (shard0.lag, shard0.pending, shard0.lag_s, shard0.entries_read) == (0, 0, 0.0, 3)
    client.close()


def test_processors_without_heartbeat_or_membership_are_not_live(
    redis_client: redis.Redis,
) -> None:
    seconds, _ = redis_client.time()
    now_ms = int(seconds) * 1000
    redis_client.zadd("ib:{pods}:members", {"alive": now_ms + 60_000, "late": now_ms - 10_000})
    redis_client.hset("ib:{pods:0}:lease", mapping={"holder": "alive", "epoch": "4"})
    redis_client.hset("ib:{pods:1}:lease", mapping={"holder": "orphan", "epoch": "2"})
    client = status_client_for(redis_client)
    [pods] = collect_status(client, member_ttl=70).resources
    client.close()
    [group] = pods.groups
    by_member = {p.member: p for p in group.processors}
    assert set(by_member) == {"alive", "late", "orphan"}
    assert by_member["alive"].live and by_member["alive"].shards == (0,)
    assert by_member["alive"].heartbeat_age_s is not None
    assert 8 <= by_member["alive"].heartbeat_age_s <= 12
    assert not by_member["late"].live and by_member["late"].shards == ()
    assert not by_member["orphan"].live and by_member["orphan"].heartbeat_age_s is None
    assert by_member["orphan"].shards == (1,)
    assert group.owned_shards == 1 and group.kind == "processor" and not group.synced
    assert pods.leader is None and pods.synced is False
    assert (group.shards[0].owner, group.shards[0].owner_epoch) == ("alive", 4)


def test_redacted_url_hides_only_the_password() -> None:
    assert redacted_url("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert redacted_url("rediss://:secret@h:1") == "rediss://:***@h:1"
    assert redacted_url("redis://h:1/0") == "redis://h:1/0"
