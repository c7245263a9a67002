"""Retries say what they retry (issue 12.6): every log line about a failed Redis or Kubernetes
API call names the server, never its password. redis-py's ``repr`` of an error is only
``network:ConnectionError``, which is all the services used to log.

Real processes and real failures: an unreachable port, then a pipeline whose simulator and
Redis are stopped under it.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator, SimulatorSettings
from common.observability import configure_logging
from common.service_runner import name_failures_in_logs
from tests.support.bus import ProcessorProcess, ReflectorProcess
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_until

PASSWORD = "retry-s3cret"
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
SHARDS = 2
COMMON = ["--shard-count", str(SHARDS), "--http-host", "127.0.0.1", "--http-port", "0"]


def failure_lines(log: str, logger: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line and f" {logger}: " in line]


def assert_names_redis(lines: list[str], redacted: str) -> None:
    assert lines
    for line in lines:
        assert f"[Redis {redacted}]" in line, line
        assert PASSWORD not in line
        assert "network:ConnectionError" not in line


def test_with_redis_unreachable_both_services_name_the_url_without_the_password(
    tmp_path: Path,
) -> None:
    port = free_port()  # nothing listens there
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    redacted = f"redis://:***@127.0.0.1:{port}/0"
    env = {"INFORMER_BUS_REDIS_URL": url}
    with Simulator(SimulatorSettings()) as sim:
        processor = ProcessorProcess(
            ["--resource", "pods", "--handler", EXAMPLE, *COMMON], tmp_path / "p.log", env=env
        )
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim.url, *COMMON], tmp_path / "r.log", env=env
        )
        try:
            processor.start()
            reflector.start()
            wait_until(lambda: failure_lines(processor.log(), "processor_svc.publication_gate"), 30)
            wait_until(lambda: failure_lines(reflector.log(), "common.leader_election"), 30)
            assert_names_redis(
                failure_lines(processor.log(), "processor_svc.publication_gate"), redacted
            )
            assert_names_redis(failure_lines(reflector.log(), "common.leader_election"), redacted)
            assert "Connection refused" in reflector.log()  # the cause is kept, too
        finally:
            processor.close()
            reflector.close()
        assert PASSWORD not in processor.log() + reflector.log()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis this test may stop, with an ACL user whose password is in the URL."""
    server = RedisServer(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    server.start()
    try:
        admin = redis.Redis.from_url(server.url)
        try:
            admin.acl_setuser(
                "svc", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], channels=["*"],
                commands=["+@all"],
            )  # fmt: skip
        finally:
            admin.close()
        yield server
    finally:
        server.stop()


def test_failures_after_startup_name_redis_and_the_kubernetes_api(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    url = private_redis.url.replace("redis://", f"redis://svc:{PASSWORD}@", 1)
    redacted = private_redis.url.replace("redis://", "redis://svc:***@", 1)
    env = {"INFORMER_BUS_REDIS_URL": url}
    sim = Simulator(SimulatorSettings(bookmark_interval=0.2))
    sim.start()
    try:
        sim.populate("pods", 10, seed=2)
        sim_url = sim.url
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim_url, *COMMON, "--backoff-max", "1"],
            tmp_path / "r.log",
            env=env,
        )
        processor = ProcessorProcess(
            ["--resource", "pods", "--handler", EXAMPLE, *COMMON, "--heartbeat-interval", "0.2",
             "--member-ttl", "2"],
            tmp_path / "p.log",
            env=env,
        )  # fmt: skip
        try:
            reflector.start()
            processor.start()
            wait_until(lambda: processor.probe() == 200, 30, what="the processor synced")

            sim.stop()  # the API server goes away: the reflector's watch and lists fail

            def kube_retries() -> list[str]:
                lines = failure_lines(reflector.log(), "reflector_svc.reflector")
                return [line for line in lines if "Connection refused" in line]

            wait_until(kube_retries, 60, what="a retry of the refused API server")
            for line in kube_retries():
                assert f"Connection refused [Kubernetes API {sim_url}]" in line, line

            private_redis.stop()  # then Redis: leases, heartbeats and shard reads fail
            wait_until(lambda: failure_lines(processor.log(), "processor_svc.ownership"), 30)
            wait_until(lambda: failure_lines(processor.log(), "processor_svc.shard_worker"), 30)
            wait_until(lambda: failure_lines(reflector.log(), "common.leader_election"), 30)
            for service, logger in (
                (processor, "processor_svc.ownership"),
                (processor, "processor_svc.shard_worker"),
                (reflector, "common.leader_election"),
            ):
                assert_names_redis(failure_lines(service.log(), logger), redacted)
        finally:
            processor.close()
            reflector.close()
        assert PASSWORD not in processor.log() + reflector.log()
    finally:
        sim.stop()


def test_only_the_configured_failures_are_rewritten() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    redactor = configure_logging("info", False, redact=[PASSWORD], stream=stream)
    try:
        name_failures_in_logs(redactor, {redis.RedisError: "Redis redis://:***@host:1/0"})
        log = logging.getLogger("tests.retry")
        log.warning("failed: %r", redis.ConnectionError("Error 111 connecting to host:1."))
        log.warning("failed: %s", ValueError(f"not ours {PASSWORD}"))
        log.warning("plain %s", "text")
    finally:
        for handler in [h for h in root.handlers if redactor in h.filters]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(
        "failed: ConnectionError: Error 111 connecting to host:1. [Redis redis://:***@host:1/0]"
    )
    assert lines[1].endswith("failed: not ours ***")  # still redacted, not described
    assert lines[2].endswith("plain text")
