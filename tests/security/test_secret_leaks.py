"""No Redis password ever reaches a log line, stdout/stderr or ``/metrics``.

The services run as child processes with JSON logs at debug level, one reading its password from
a file and one from the environment; Redis is then restarted under them (connection errors,
reconnects, relists), and a second run gets a wrong password. Every byte they wrote, and every
``/metrics`` page they served, is searched for each password.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import redis

from apiserver_sim import Simulator
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess
from tests.support.cli import run_command
from tests.support.secured_redis import PROCESSOR_PASSWORD, REFLECTOR_PASSWORD, TlsRedisServer
from tests.support.waiting import wait_until

SHARDS = 4
HANDLER = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
WRONG_PASSWORD = "wrong-Tz9m-4411-secret"
COMMON = ["--log-json", "--log-level", "debug", "--http-host", "127.0.0.1", "--http-port", "0",
          "--shard-count", str(SHARDS), "--lease-duration", "2", "--renew-deadline", "1.5",
          "--retry-period", "0.2"]  # fmt: skip


def metrics_page(service: ReflectorProcess | ProcessorProcess) -> str:
    with urllib.request.urlopen(service.url() + "/metrics", timeout=5) as response:
        return str(response.read().decode())


def leaks(text: str, *secrets: str) -> list[str]:
    """The secrets (or their URL-encoded forms) found in ``text``."""
    return [s for s in secrets for form in {s, quote(s, safe="")} if form in text]


def test_passwords_from_a_file_or_the_environment_never_reach_logs_or_metrics(
    tls_redis: TlsRedisServer,
    tls_admin: redis.Redis,
    sim: Simulator,
    password_files: dict[str, Path],
    tmp_path: Path,
) -> None:
    sim.populate("pods", 60, seed=11)
    reflector = ReflectorProcess(
        [*COMMON, *tls_redis.flags(), "--resource", "pods", "--kube-url", sim.url,
         "--checkpoint-interval", "0.2", "--redis-username", "reflector",
         "--redis-password-file", str(password_files["reflector"])],
        tmp_path / "reflector.log",
    )  # fmt: skip
    processor = ProcessorProcess(
        [*COMMON, *tls_redis.flags(), "--resource", "pods", "--handler", HANDLER,
         "--heartbeat-interval", "0.1", "--member-ttl", "0.6", "--block-ms", "200"],
        tmp_path / "processor.log",
        env={"INFORMER_BUS_REDIS_USERNAME": "processor",
             "INFORMER_BUS_REDIS_PASSWORD": PROCESSOR_PASSWORD},
    )  # fmt: skip
    pages: list[str] = []
    try:
        reflector.start()
        processor.start()
        bus = Bus(tls_admin, "pods", shard_count=SHARDS)
        wait_until(bus.synced, 20, what="the reflector synced over TLS")
        wait_until(lambda: processor.probe("/readyz") == 200, 20, what="the processor ready")
        pages += [metrics_page(reflector), metrics_page(processor)]
        # Redis goes away under both (connection errors, retries), then comes back empty.
        tls_redis.stop()
        time.sleep(1.5)
        tls_redis.start()
        wait_until(bus.synced, 30, what="the reflector synced again after the restart")
        wait_until(lambda: processor.probe("/readyz") == 200, 30, what="the processor again")
        pages += [metrics_page(reflector), metrics_page(processor)]
        denied = [entry for entry in tls_admin.acl_log() if entry["reason"] != "auth"]
        assert denied == [], "after a restart the services need more than their minimal ACL"
        assert reflector.terminate() == 0
        assert processor.terminate() == 0
    finally:
        reflector.close()
        processor.close()
    logs = reflector.log() + processor.log()
    assert "ConnectionError" in logs, "Redis going away should have been logged"
    wrong = run_command(
        [sys.executable, "-m", "processor_svc"], *COMMON, *tls_redis.flags(),
        "--resource", "pods", "--handler", HANDLER,
        env={"INFORMER_BUS_REDIS_USERNAME": "processor",
             "INFORMER_BUS_REDIS_PASSWORD": WRONG_PASSWORD},
    )  # fmt: skip
    assert wrong.returncode == 2, wrong.stderr
    everything = "\n".join([logs, wrong.stdout, wrong.stderr, *pages])
    assert "informer_bus" in pages[0], "metrics pages were read"
    assert leaks(everything, REFLECTOR_PASSWORD, PROCESSOR_PASSWORD, WRONG_PASSWORD) == []


def test_a_password_in_the_command_line_url_works_but_is_warned_about_once(
    tls_redis: TlsRedisServer, tls_admin: redis.Redis, sim: Simulator, tmp_path: Path
) -> None:
    flags = tls_redis.flags()
    flags[1] = tls_redis.url.replace("rediss://", f"rediss://reflector:{REFLECTOR_PASSWORD}@")
    reflector = ReflectorProcess(
        [*COMMON, *flags, "--resource", "pods", "--kube-url", sim.url],
        tmp_path / "reflector.log",
    )
    try:
        reflector.start()
        wait_until(Bus(tls_admin, "pods", shard_count=SHARDS).synced, 20, what="synced")
        page = metrics_page(reflector)
        assert reflector.terminate() == 0
    finally:
        reflector.close()
    log = reflector.log()
    assert log.count("the Redis password was given on the command line") == 1
    assert leaks(log + page, REFLECTOR_PASSWORD) == []
