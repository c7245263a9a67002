"""A processor started before its reflector, or for a resource nobody publishes (issue 12.5).

Real processes throughout: redis-server, the simulator (in this process, real HTTP), processor
and reflector children, ``informer-bus status`` and ``subscribe`` commands. The Redis URL holds
an ACL user's password, so every message that names Redis is checked for redaction.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator, SimulatorSettings
from tests.support.bus import ProcessorProcess, ReflectorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
CONFIGMAPS = 12
PASSWORD = "waiting-s3cret"
CLI = str(Path(sys.executable).with_name("informer-bus"))
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"


@pytest.fixture
def secret_url(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[str]:
    """The test Redis as an ACL user with a password in the URL."""
    redis_client.acl_setuser(
        "waiter", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], channels=["*"],
        commands=["+@all"],
    )  # fmt: skip
    try:
        yield redis_server.url.replace("redis://", f"redis://waiter:{PASSWORD}@", 1)
    finally:
        redis_client.acl_deluser("waiter")


def processor(url: str, resource: str, log: Path, shards: int = SHARDS) -> ProcessorProcess:
    return ProcessorProcess(
        ["--resource", resource, "--handler", EXAMPLE, "--shard-count", str(shards),
         "--http-host", "127.0.0.1", "--http-port", "0",
         "--heartbeat-interval", "0.2", "--member-ttl", "2"],
        log,
        env={"INFORMER_BUS_REDIS_URL": url},  # not a flag, which would draw a warning
    )  # fmt: skip


def reflector_of(resource: str, sim: Simulator, url: str, log: Path) -> ReflectorProcess:
    return ReflectorProcess(
        ["--resource", resource, "--kube-url", sim.url, "--shard-count", str(SHARDS),
         "--http-host", "127.0.0.1", "--http-port", "0"],
        log,
        env={"INFORMER_BUS_REDIS_URL": url},
    )  # fmt: skip


def readyz(service: ProcessorProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(service.url() + "/readyz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), error.read().decode()


def warnings_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line]


def member_deadline(client: redis.Redis, resource: str) -> float:
    members = client.zrange(f"ib:{{{resource}}}:members", 0, -1, withscores=True)
    return max((score for _, score in members), default=0.0)


@pytest.mark.parametrize(
    "command",
    [
        ["processor", "--resource"],
        ["reflector", "--kube-url", "http://127.0.0.1:1", "--resource"],
        ["status", "--redis-url", "redis://127.0.0.1:1/0", "--resource"],
        ["subscribe", "--redis-url", "redis://127.0.0.1:1/0"],
    ],
    ids=["processor", "reflector", "status", "subscribe"],
)
def test_a_malformed_resource_is_refused_by_every_tool_with_the_same_reason(
    command: list[str],
) -> None:
    line = one_line_error(run_command([CLI, *command, "x!!bogus"]), f"informer-bus {command[0]}")
    assert "invalid resource 'x!!bogus': resource name 'x!!bogus' is not a lowercase DNS label" in (
        line
    )


def test_a_spec_with_a_version_is_no_processor_resource_id() -> None:
    line = one_line_error(
        run_command([CLI, "processor", "--resource", "deployments.v1.apps"]),
        "informer-bus processor",
    )
    assert "the id of this spec is 'deployments.apps'" in line


def test_a_processor_waits_unready_for_its_reflector_then_syncs(
    redis_client: redis.Redis, secret_url: str, tmp_path: Path
) -> None:
    """Processor first, reflector later: not ready and no shard key until the first list;
    status says "no reflector", subscribe says so or (--wait) waits; then everything flows."""
    redacted = secret_url.replace(PASSWORD, "***")
    with Simulator(SimulatorSettings(bookmark_interval=0.2)) as sim:
        sim.populate("configmaps", CONFIGMAPS, seed=3)
        waiting = processor(secret_url, "configmaps", tmp_path / "processor.log")
        reflector = reflector_of("configmaps", sim, secret_url, tmp_path / "reflector.log")
        subscriber: subprocess.Popen[str] | None = None
        try:
            waiting.start()
            wait_until(lambda: warnings_in(waiting.log()), 30, what="the waiting warning")
            status_code, reason = readyz(waiting)
            assert status_code == 503
            expected = (
                f"no reflector has published resource 'configmaps' under key prefix 'ib' in "
                f"{redacted}"
            )
            assert expected in reason
            # Several heartbeats later, still nothing but the membership.
            first = member_deadline(redis_client, "configmaps")
            wait_until(lambda: member_deadline(redis_client, "configmaps") > first + 400, 30)
            assert readyz(waiting)[0] == 503
            assert {key.decode() for key in redis_client.keys("*")} == {"ib:{configmaps}:members"}

            status = run_command([CLI, "status", "--redis-url", secret_url])
            assert status.returncode == 0, status.stderr
            assert "resource configmaps  (no reflector)" in status.stdout
            assert f"/{waiting.pid}/" in status.stdout  # listed as a processor, though waiting
            document = json.loads(
                run_command([CLI, "status", "--redis-url", secret_url, "--output", "json"]).stdout
            )
            [configmaps] = document["resources"]
            assert configmaps["has_reflector"] is False
            [group] = configmaps["groups"]  # members, no consumer group yet
            assert [p["live"] for p in group["processors"]] == [True]
            assert [shard["exists"] for shard in group["shards"]] == [False] * len(group["shards"])

            refused = one_line_error(
                run_command([CLI, "subscribe", "configmaps", "--redis-url", secret_url]),
                "informer-bus subscribe",
            )
            assert "no reflector has published resource 'configmaps' under prefix 'ib'" in refused
            assert "--wait" in refused and PASSWORD not in refused

            subscriber = subprocess.Popen(
                [CLI, "subscribe", "configmaps", "--redis-url", secret_url, "--wait",
                 "--count", str(CONFIGMAPS)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert subscriber.stderr is not None
            said = subscriber.stderr.readline()
            assert said.startswith("informer-bus subscribe: waiting: no reflector has published")

            reflector.start()
            wait_until(lambda: waiting.probe() == 200, 30, what="the processor became ready")
            assert readyz(waiting)[1].startswith('{"status":"ok"')
            out, err = subscriber.communicate(timeout=30)
            assert subscriber.returncode == 0, err
            assert err == ""  # the one waiting line was all
            keys = {json.loads(line)["key"] for line in out.splitlines()}
            assert len(keys) == CONFIGMAPS  # from the first delta: nothing was missed

            log = waiting.log()
            assert len(warnings_in(log)) == 1, log
            assert expected in warnings_in(log)[0]
            assert PASSWORD not in log
            assert "a reflector has published resource 'configmaps'" in log
            shard_keys = {key.decode() for key in redis_client.keys("ib:{configmaps:*}:lease")}
            assert len(shard_keys) == SHARDS
        finally:
            if subscriber is not None:
                subscriber.kill()
                subscriber.communicate()
            reflector.close()
            waiting.close()


@pytest.mark.parametrize(
    ("published", "typo"),
    [("pods", "pod"), ("widgets.example.com", "widgets")],
    ids=["singular", "without-group"],
)
def test_a_typo_names_the_published_resource(
    redis_client: redis.Redis, secret_url: str, tmp_path: Path, published: str, typo: str
) -> None:
    """The processor and ``subscribe`` give the reflector's hint (issue 34: ``widgets`` for
    ``widgets.example.com`` got none), by its rule (``common.resource_ids.likely_meant``) on
    what the reflectors published."""
    hint = f"(did you mean {published}? it is published)"
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 5, seed=1)
        reflector = reflector_of(published, sim, secret_url, tmp_path / "reflector.log")
        waiting = processor(secret_url, typo, tmp_path / "processor.log")
        try:
            reflector.start()
            checkpoint = f"ib:{{{published}:0}}:checkpoint"
            wait_until(lambda: redis_client.hexists(checkpoint, "synced_rv"), 30)
            waiting.start()
            wait_until(lambda: warnings_in(waiting.log()), 30, what="the waiting warning")
            [warning] = warnings_in(waiting.log())
            assert f"no reflector has published resource {typo!r}" in warning
            assert warning.endswith(hint)
            assert waiting.probe() == 503
            assert not redis_client.keys(f"ib:{{{typo}:*")
            subscriber = run_command(
                [CLI, "subscribe"], typo, env={"INFORMER_BUS_REDIS_URL": secret_url}
            )
            line = one_line_error(subscriber, "informer-bus subscribe")
            assert hint in line
        finally:
            waiting.close()
            reflector.close()


def test_a_shard_count_unlike_the_reflectors_is_named(
    redis_client: redis.Redis, secret_url: str, tmp_path: Path
) -> None:
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 5, seed=1)
        reflector = reflector_of("pods", sim, secret_url, tmp_path / "reflector.log")
        more = processor(secret_url, "pods", tmp_path / "more.log", shards=2 * SHARDS)
        fewer = processor(secret_url, "pods", tmp_path / "fewer.log", shards=SHARDS // 2)
        try:
            reflector.start()
            wait_until(lambda: redis_client.hget("ib:{pods:0}:checkpoint", "synced_rv"), 30)
            more.start()
            fewer.start()
            wait_until(lambda: warnings_in(more.log()), 30, what="the waiting warning")
            status_code, reason = readyz(more)
            assert status_code == 503
            assert f"shards {SHARDS}-{2 * SHARDS - 1} of {2 * SHARDS} have no completed list" in (
                reason
            )
            assert f"reflector's --shard-count {2 * SHARDS}, like this processor's?" in reason

            def errors() -> list[str]:
                return [line for line in fewer.log().splitlines() if " ERROR " in line]

            wait_until(errors, 30, what="the shard-count error")
            [error] = errors()
            assert f"a reflector has listed more than {SHARDS // 2} shards of resource 'pods'" in (
                error
            )
            assert PASSWORD not in more.log() + fewer.log()
        finally:
            fewer.close()
            more.close()
            reflector.close()


def test_a_group_a_durable_subscriber_reads_is_not_taken_over(
    redis_client: redis.Redis, secret_url: str, tmp_path: Path
) -> None:
    """Processors of a group that is a durable subscriber's would steal its entries: the
    processor waits, unready, and says why."""
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 5, seed=1)
        reflector = reflector_of("pods", sim, secret_url, tmp_path / "reflector.log")
        reflector.start()
        try:
            wait_until(lambda: redis_client.hget("ib:{pods:0}:checkpoint", "synced_rv"), 30)
            subscriber = run_command(
                [CLI, "subscribe", "pods", "--group", "audit", "--count", "5",
                 "--redis-url", secret_url, "--output", "json"],
            )  # fmt: skip
            assert subscriber.returncode == 0, subscriber.stderr
            stealer = ProcessorProcess(
                [*processor(secret_url, "pods", tmp_path / "p.log").args, "--group", "audit"],
                tmp_path / "stealer.log",
                env={"INFORMER_BUS_REDIS_URL": secret_url},
            )
            stealer.start()
            try:
                wait_until(lambda: " ERROR " in stealer.log(), 30, what="the refusal")
                status_code, reason = readyz(stealer)
                assert status_code == 503
                assert "group 'audit'" in reason and "is a durable subscriber's" in reason
                assert "informer-bus groups delete pods audit" in reason
                assert not redis_client.exists("ib:{pods:0}:group:audit:lease")
                assert PASSWORD not in stealer.log()
            finally:
                stealer.close()
        finally:
            reflector.close()
