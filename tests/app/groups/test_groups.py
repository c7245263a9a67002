"""Several consumer groups on one watch: ``informer-bus status`` shows each apart, and
``informer-bus groups delete`` removes one nobody runs so that retention trims what only it
held. Real processors (one group embedded, the other a child process killed with SIGKILL) on a
real reflector and Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator, SimulatorSettings
from common.redis_layout import GroupKeys, ResourceKeys
from common.settings import settings_of
from informer_bus.local_redis import free_port
from informer_bus.status.collect import collect_status, status_client
from informer_bus.status.model import GroupStatus, ResourceStatus
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.retention import trim_shard
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import ProcessorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
PODS = 200
MEMBER_TTL = 1.0
CLI = str(Path(sys.executable).with_name("informer-bus"))
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"

pytestmark = pytest.mark.timeout(120)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command([CLI], *args)


@dataclass
class Pipeline:
    sim: Simulator
    redis_url: str
    client: redis.Redis
    """A decoding status client."""

    def resource(self) -> ResourceStatus:
        [pods] = collect_status(self.client, member_ttl=MEMBER_TTL).resources
        return pods

    def group(self, name: str) -> GroupStatus:
        group = self.resource().group(name)
        assert group is not None, name
        return group


@pytest.fixture
def pipeline(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[Pipeline]:
    """Simulator, reflector (retention off: the test trims) and group ``a`` (embedded)."""
    with Simulator(SimulatorSettings(bookmark_interval=0.1)) as sim:
        sim.populate("pods", PODS, seed=1)
        reflector = ReflectorService(
            settings_of(
                ReflectorSettings,
                resource=("pods",), redis_url=redis_server.url, kube_url=sim.url,
                http_host="127.0.0.1", http_port=0, shard_count=SHARDS, retry_period=0.2,
                lease_duration=2.0, renew_deadline=1.5, checkpoint_interval=0.2,
                retention_interval=3600.0,
            ),
            registry=CollectorRegistry(),
        )  # fmt: skip
        processor = ProcessorService(
            settings_of(
                ProcessorSettings,
                resource="pods", redis_url=redis_server.url, shard_count=SHARDS, group="a",
                http_host="127.0.0.1", http_port=0, lease_duration=2.0, renew_deadline=1.5,
                retry_period=0.2, heartbeat_interval=0.1, member_ttl=MEMBER_TTL,
                member_id="alpha", block_ms=200, shutdown_grace=5.0, handler=(EXAMPLE,),
            ),
            registry=CollectorRegistry(),
        )  # fmt: skip
        client = status_client(redis_server.url)
        reflector.start()
        try:
            processor.start()
            try:
                yield Pipeline(sim, redis_server.url, client)
            finally:
                processor.stop()
        finally:
            reflector.stop()
            client.close()


def test_two_groups_show_apart_and_a_dead_one_is_deleted_so_retention_trims(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    beta = ProcessorProcess(
        ["--resource", "pods", "--handler", EXAMPLE, "--redis-url", pipeline.redis_url,
         "--shard-count", str(SHARDS), "--group", "b", "--member-id", "beta",
         "--http-host", "127.0.0.1", "--http-port", "0", "--heartbeat-interval", "0.1",
         "--member-ttl", str(MEMBER_TTL)],
        tmp_path / "beta.log",
    )  # fmt: skip
    try:
        beta.start()

        def both_caught_up() -> bool:
            groups = {g.name: g for g in pipeline.resource().groups}
            return set(groups) == {"a", "b"} and all(
                g.synced and g.lag == 0 for g in groups.values()
            )

        wait_until(both_caught_up, 30, what="groups a and b synced and caught up")
        shown = cli("status", "--redis-url", pipeline.redis_url, "--output", "json",
                    "--member-ttl", str(MEMBER_TTL))  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        [pods] = json.loads(shown.stdout)["resources"]
        a, b = pods["groups"]
        assert (a["name"], b["name"]) == ("a", "b")
        for group, member in ((a, "alpha/"), (b, "beta/")):
            assert (group["kind"], group["owned_shards"], group["synced"]) == (
                "processor", SHARDS, True,
            )  # fmt: skip
            [processor] = group["processors"]
            assert processor["member"].startswith(member) and processor["live"] is True
            assert processor["shards"] == list(range(SHARDS))
            assert {shard["owner"] for shard in group["shards"]} == {processor["member"]}
            assert sum(s["entries_read"] for s in group["shards"]) == sum(
                s["entries_added"] for s in pods["shards"]
            )
        beta_member = b["processors"][0]["member"]

        refused = cli("groups", "delete", "pods", "b", "--redis-url", pipeline.redis_url)
        line = one_line_error(refused, "informer-bus groups")
        assert f"group 'b' of pods has live members: {beta_member}" in line
        assert refused.stdout == ""

        beta.kill()  # SIGKILL: its membership and leases stay behind until they lapse
        pipeline.sim.churn(rate=400, seconds=1.0, seed=2)

        def a_caught_up_b_behind() -> bool:
            a, b = pipeline.group("a"), pipeline.group("b")
            return a.lag == 0 and a.synced and (b.lag or 0) > 0 and not b.live_members

        wait_until(a_caught_up_b_behind, 30, what="a caught up, b behind and gone")
        behind = pipeline.group("b").lag or 0
        pipeline.sim.churn(rate=200, seconds=0.5, seed=3)
        wait_until(lambda: pipeline.group("a").lag == 0, 20, what="a caught up again")
        b_now = pipeline.group("b")
        assert b_now.lag is not None and b_now.lag > behind, (behind, b_now.lag)
        assert not b_now.synced and b_now.max_lag_s is not None and b_now.max_lag_s > 0
        table = cli("status", "--redis-url", pipeline.redis_url, "--member-ttl", "1")
        assert "group a (processor)  1/1 members live, 4/4 shards owned, lag 0 (0.0 s), " \
            "synced yes" in table.stdout  # fmt: skip
        assert "group b (processor)  0/1 members live, 0/4 shards owned, lag " in table.stdout
        assert f"{beta_member} (gone)" in table.stdout

        # Retention keeps what b still needs ...
        raw = redis.Redis.from_url(pipeline.redis_url)
        try:
            keys = ResourceKeys("ib", "pods")
            lag_b = {s.shard: s.lag or 0 for s in pipeline.group("b").shards}
            for shard in range(SHARDS):
                trim_shard(raw, keys.shard(shard), min_entries=0, hard_max_entries=10**6)
                assert raw.xlen(keys.shard(shard).stream) >= lag_b[shard]

            deleted = cli("groups", "delete", "pods", "b", "--redis-url", pipeline.redis_url)
            assert deleted.returncode == 0, deleted.stderr
            out = deleted.stdout.splitlines()
            for shard in range(SHARDS):
                assert any(line.startswith(f"shard {shard}: destroyed consumer group 'b'")
                           for line in out), out  # fmt: skip
            assert out[-1].startswith(f"deleted group 'b' of pods: {SHARDS} shards touched, ")
            assert f"{SHARDS} lease epoch counters kept" in out[-1]

            # ... and, b deleted, trims what only b held; a goes on.
            trimmed = 0
            for shard in range(SHARDS):
                stream = keys.shard(shard).stream
                result = trim_shard(raw, keys.shard(shard), min_entries=0, hard_max_entries=10**6)
                trimmed += result.trimmed
                assert not result.forced
                assert raw.xlen(stream) < max(2, lag_b[shard] // 2), (shard, lag_b[shard])
                assert [g["name"] for g in raw.xinfo_groups(stream)] == [b"a"]
                group_b = keys.group("b").shard(shard)
                assert raw.exists(group_b.lease, group_b.dead_letters) == 0
                assert int(raw.get(group_b.lease_epoch) or 0) >= 1  # epochs never go back
            assert trimmed >= sum(lag_b.values()) // 2
            assert raw.exists(GroupKeys(keys, "b").members) == 0
        finally:
            raw.close()
        pods_now = pipeline.resource()
        assert [g.name for g in pods_now.groups] == ["a"]
        pipeline.sim.churn(rate=100, seconds=0.3, seed=4)
        wait_until(lambda: pipeline.group("a").lag == 0, 20, what="a still follows")
        again = cli("groups", "delete", "pods", "b", "--redis-url", pipeline.redis_url)
        assert again.returncode == 1
        assert again.stderr.strip() == (
            "informer-bus groups: resource 'pods' has no group 'b' (groups: a)"
        )
    finally:
        beta.close()


def test_delete_removes_a_dead_group_keys_but_not_its_epochs_and_counts_what_went(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    seconds, _ = redis_client.time()
    now_ms = int(seconds) * 1000
    keys = GroupKeys(ResourceKeys("ib", "pods"), "audit")
    for shard in range(2):
        stream = keys.shard(shard).stream
        for number in range(3):
            redis_client.xadd(stream, {"d": str(number)})
        redis_client.hset(f"ib:{{pods:{shard}}}:checkpoint", "rv", "7")
        redis_client.xgroup_create(stream, "audit", id="0")
        redis_client.xgroup_create(stream, "processors", id="$")
    redis_client.xreadgroup("audit", "gone/1/x", {keys.shard(0).stream: ">"}, count=2)
    redis_client.hset(keys.shard(0).lease, mapping={"holder": "gone/1/x", "epoch": "3"})
    redis_client.set(keys.shard(0).lease_epoch, "3")
    redis_client.set(keys.shard(1).lease_epoch, "5")
    redis_client.xadd(keys.shard(1).dead_letters, {"reason": "decode", "id": "1-1"})
    redis_client.zadd(keys.members, {"gone/1/x": now_ms - 5_000})
    # What the group's handlers held and its controllers expected: a group created again under
    # the name would otherwise owe deletions of keys its new handlers were never told about.
    redis_client.hset(keys.shard(0).held, "ns/a", b"")
    redis_client.hset(keys.shard(1).expectations, "ns/b", "7")
    url = redis_server.url

    listed = cli("groups", "list", "pods", "--redis-url", url, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    audit, processors = json.loads(listed.stdout)["resources"]["pods"]
    assert (audit["name"], audit["kind"], audit["dead_letters"]) == ("audit", "processor", 1)
    assert (audit["lag"], [s["pending"] for s in audit["shards"]]) == (6, [2, 0])
    assert (processors["name"], processors["kind"], processors["lag"]) == (
        "processors", "consumer", 0,
    )  # fmt: skip
    text = cli("groups", "list", "--redis-url", url).stdout.splitlines()
    assert text[0].startswith("pods: group audit (processor)  0/1 members live, 0/2 shards")
    assert text[1].startswith("pods: group processors (consumer)  lag 0 (0.0 s)")

    deleted = cli("groups", "delete", "pods", "audit", "--redis-url", url)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        "shard 0: destroyed consumer group 'audit' (2 pending entries dropped)",
        "shard 0: removed lease ib:{pods:0}:group:audit:lease",
        "shard 1: destroyed consumer group 'audit' (0 pending entries dropped)",
        "shard 1: removed 1 dead letters (ib:{pods:1}:group:audit:dead)",
        "removed membership ib:{pods}:group:audit:members (1 members)",
        "deleted group 'audit' of pods: 2 shards touched, 2 pending entries dropped, 1 dead "
        "letters removed, 2 lease epoch counters kept (epochs never go backwards)",
    ]
    assert [redis_client.get(keys.shard(s).lease_epoch) for s in range(2)] == [b"3", b"5"]
    assert redis_client.exists(keys.members, keys.shard(0).lease, keys.shard(1).dead_letters) == 0
    assert redis_client.exists(keys.shard(0).held, keys.shard(1).expectations) == 0
    for shard in range(2):
        assert [g["name"] for g in redis_client.xinfo_groups(keys.shard(shard).stream)] == [
            b"processors"
        ]

    # Deleted, with its epoch counters left: the group no longer exists for the tools.
    missing = cli("groups", "delete", "pods", "audit", "--redis-url", url)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (
        "informer-bus groups: resource 'pods' has no group 'audit' (groups: processors)\n"
    )
    # The default group: only with --force, even with nobody in it.
    default = cli("groups", "delete", "pods", "processors", "--redis-url", url)
    assert "'processors' is the default processor group" in one_line_error(
        default, "informer-bus groups"
    )
    forced = cli("groups", "delete", "pods", "processors", "--force", "--redis-url", url)
    assert forced.returncode == 0, forced.stderr
    assert "deleted group 'processors' of pods: 2 shards touched" in forced.stdout
    assert redis_client.xinfo_groups(keys.shard(0).stream) == []


def test_a_live_group_is_deleted_only_with_force(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    seconds, _ = redis_client.time()
    keys = GroupKeys(ResourceKeys("ib", "pods"), "web")
    redis_client.hset("ib:{pods:0}:checkpoint", "rv", "1")
    redis_client.zadd(keys.members, {"m1/1/a": int(seconds) * 1000 + 60_000})
    refused = cli("groups", "delete", "pods", "web", "--redis-url", redis_server.url)
    assert "group 'web' of pods has live members: m1/1/a (stop them first, or pass --force)" in (
        one_line_error(refused, "informer-bus groups")
    )
    assert redis_client.exists(keys.members) == 1
    forced = cli("groups", "delete", "pods", "web", "--force", "--redis-url", redis_server.url)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines() == [
        "removed membership ib:{pods}:group:web:members (1 members)",
        "deleted group 'web' of pods: 0 shards touched, 0 pending entries dropped, 0 dead "
        "letters removed, 0 lease epoch counters kept (epochs never go backwards)",
    ]
    assert redis_client.exists(keys.members) == 0


def test_bad_inputs_are_one_line_with_their_exit_status(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    url = redis_server.url
    redis_client.hset("ib:{pods:0}:checkpoint", "rv", "1")
    bad = cli("groups", "delete", "pods", "no:colons", "--redis-url", url)
    assert "group name 'no:colons' is invalid: 1 to 63 letters" in one_line_error(
        bad, "informer-bus groups"
    )
    unknown = cli("groups", "delete", "widgets", "a", "--redis-url", url)
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == (
        f"informer-bus groups: no resource 'widgets' under prefix 'ib' in {url} (found: pods)\n"
    )
    unknown_list = cli("groups", "list", "widgets", "--redis-url", url)
    assert unknown_list.returncode == 1 and "no resource 'widgets'" in unknown_list.stderr
    nothing = cli("groups", "list", "pods", "--redis-url", url)
    assert (nothing.returncode, nothing.stdout) == (0, "pods: no consumer groups\n")
    empty = cli("groups", "list", "--redis-url", url, "--prefix", "other")
    assert empty.returncode == 1 and "no informer-bus resources under prefix 'other'" in (
        empty.stderr
    )
    output = cli("groups", "list", "--output", "yaml")
    assert "--output must be table or json" in one_line_error(output, "informer-bus groups")
    down = cli("groups", "list", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert "cannot read Redis at redis://127.0.0.1:" in one_line_error(down, "informer-bus groups")
    usage = cli("groups", "delete", "pods")
    assert usage.returncode == 2 and "the following arguments are required: NAME" in (usage.stderr)
    helped = cli("groups", "delete", "--help")
    assert helped.returncode == 0
    assert "retention" in helped.stdout and "epoch counters stay" in helped.stdout


def test_status_finds_groups_on_streams_only_and_groups_with_members_only(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """A durable subscriber's group has no key of its own (XINFO GROUPS finds it in the second
    round trip); a processor group waiting for its first list has members and no group."""
    seconds, _ = redis_client.time()
    for shard in range(2):
        redis_client.xadd(f"ib:{{pods:{shard}}}:deltas", {"d": "x"}, id=f"{1000 + shard}-0")
        redis_client.xgroup_create(f"ib:{{pods:{shard}}}:deltas", "tail", id="0")
    redis_client.zadd("ib:{pods}:group:waiting:members", {"w/1/a": int(seconds) * 1000 + 60_000})
    client = status_client(redis_server.url)
    try:
        for resources in (None, {"pods": 2}):  # discovered, or named by the caller (the demo)
            [pods] = collect_status(client, resources=resources, member_ttl=70).resources
            tail = pods.groups[0]
            assert (tail.name, tail.kind, tail.synced, tail.lag) == ("tail", "consumer", True, 2)
            assert tail.max_lag_s is not None and tail.max_lag_s > 0
            assert tail.processors == () and tail.owned_shards == 0
        # Named by the caller without its groups, only XINFO GROUPS (and the default group's
        # keys) can tell: a group with members only is not found.
        assert [g.name for g in pods.groups] == ["tail"]
        [pods] = collect_status(client, member_ttl=70).resources
        waiting = pods.groups[1]
        assert (waiting.name, waiting.kind, waiting.synced) == ("waiting", "processor", False)
        assert waiting.live_members == ("w/1/a",) and waiting.owned_shards == 0
        assert [s.exists for s in waiting.shards] == [False, False]
        assert waiting.lag == 2  # everything on the streams is still ahead of it
    finally:
        client.close()


def test_status_reads_every_group_in_two_pipelined_round_trips(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    seconds, _ = redis_client.time()
    for shard in range(8):
        stream = f"ib:{{pods:{shard}}}:deltas"
        for number in range(3):
            redis_client.xadd(stream, {"d": str(number)})
        for group in ("processors", "a", "tail"):
            redis_client.xgroup_create(stream, group, id="0")
        redis_client.xreadgroup("a", "m", {stream: ">"}, count=1)  # pending: XPENDING later
    redis_client.zadd("ib:{pods}:group:a:members", {"m/1/a": int(seconds) * 1000 + 60_000})
    client = status_client(redis_server.url)
    trips: list[int] = []
    pipeline = client.pipeline

    def counted(*args: object, **kwargs: object) -> object:
        pipe = pipeline(*args, **kwargs)  # type: ignore[arg-type]
        execute = pipe.execute

        def execute_counted(*a: object, **k: object) -> object:
            trips.append(len(pipe.command_stack))
            return execute(*a, **k)  # type: ignore[arg-type]

        pipe.execute = execute_counted  # type: ignore[method-assign]
        return pipe

    client.pipeline = counted  # type: ignore[method-assign]
    client.execute_command = None  # type: ignore[assignment,method-assign]  # nothing unpipelined
    try:
        [pods] = collect_status(client, resources={"pods": 8}, groups={"pods": ["a"]}).resources
    finally:
        client.close()
    assert [g.name for g in pods.groups] == ["a", "processors", "tail"]
    assert [g.lag for g in pods.groups] == [24, 24, 24]
    assert all(g.max_lag_s is not None for g in pods.groups)
    # The first: TIME, 3 per resource, 4 per shard, 1 + 3 per shard per known group (2);
    # the second: group 'tail' (first seen in XINFO GROUPS) and the oldest entry of each group.
    assert trips == [1 + 3 + 8 * 4 + 2 * (1 + 8 * 3), (1 + 8 * 3) + 3 * 8]
