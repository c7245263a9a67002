"""The pipeline over TLS with ACL users, and the one-line startup errors for credentials and TLS.

The server (``tests.support.secured_redis.TlsRedisServer``) speaks TLS only, requires client
certificates, and gives the reflector and processor users nothing but their documented minimal
ACL: Redis's ACL log must stay empty while the pipeline runs, or the documented ACL is wrong.
"""

from __future__ import annotations

import sys
from pathlib import Path

import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from common.deltas import Delta, DeltaType
from common.object_keys import meta_namespace_key
from common.settings import settings_of
from common.wire import DeltaEnvelope, envelope_to_fields
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import Bus
from tests.support.cli import one_line_error, run_command
from tests.support.secured_redis import (
    PROCESSOR_PASSWORD,
    READER_PASSWORD,
    REFLECTOR_PASSWORD,
    TlsRedisServer,
)
from tests.support.waiting import wait_until

SHARDS = 4
REFLECTOR = [sys.executable, "-m", "reflector_svc"]
PROCESSOR = [sys.executable, "-m", "processor_svc"]
HANDLER = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"


def test_the_pipeline_runs_over_tls_as_acl_users_with_only_their_minimal_acl(
    tls_redis: TlsRedisServer,
    tls_admin: redis.Redis,
    sim: Simulator,
    password_files: dict[str, Path],
) -> None:
    certs = tls_redis.certs
    tls = {
        "redis_url": tls_redis.url, "redis_tls_ca_file": str(certs.ca),
        "redis_tls_cert_file": str(certs.client_cert), "redis_tls_key_file": str(certs.client_key),
        "shard_count": SHARDS, "http_host": "127.0.0.1", "http_port": 0, "lease_duration": 2.0,
        "renew_deadline": 1.5, "retry_period": 0.2,
    }  # fmt: skip
    sim.populate("pods", 120, seed=7)
    reflector = ReflectorService(
        settings_of(
            ReflectorSettings,
            resource=("pods",), kube_url=sim.url, redis_username="reflector",
            redis_password_file=str(password_files["reflector"]), checkpoint_interval=0.2,
            retention_interval=0.5, **tls,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    processor = ProcessorService(
        settings_of(
            ProcessorSettings,
            resource="pods", handler=(HANDLER,), redis_username="processor",
            redis_password_file=str(password_files["processor"]), heartbeat_interval=0.1,
            member_ttl=0.6, block_ms=200, **tls,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    reflector.start()
    processor.start()
    try:

        def cache() -> dict[str, str]:
            return {
                meta_namespace_key(o): o["metadata"]["resourceVersion"]
                for o in processor.lister.list()
            }

        wait_until(processor.is_synced, 20, what="the processor synced over TLS")
        wait_until(lambda: cache() == sim.ground_truth("pods"), 20, what="cache == API")
        sim.churn(rate=300, seconds=0.8, seed=8)
        wait_until(lambda: cache() == sim.ground_truth("pods"), 20, what="cache follows churn")
        users = {client["user"] for client in tls_admin.client_list()}
        assert {"reflector", "processor"} <= users <= {"reflector", "processor", "default"}
    finally:
        processor.stop()
        reflector.stop()
    assert Bus(tls_admin, "pods", shard_count=SHARDS).length() > 0
    assert tls_admin.acl_log() == [], "a service ran a command or key its ACL does not allow"


def test_a_wrong_password_is_one_line_naming_the_cause(
    tls_redis: TlsRedisServer, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password-9f2c\n")
    result = run_command(
        REFLECTOR, "--resource", "pods", "--kube-url", "http://127.0.0.1:1",
        "--redis-username", "reflector", "--redis-password-file", str(wrong),
        *tls_redis.flags(),
    )  # fmt: skip
    line = one_line_error(result, "informer-bus reflector")
    assert "Redis refused the credentials (WRONGPASS" in line
    assert "not-the-password-9f2c" not in result.stderr + result.stdout


def test_no_password_for_a_protected_redis_says_where_to_put_one(
    tls_redis: TlsRedisServer,
) -> None:
    result = run_command(PROCESSOR, "--resource", "pods", "--handler", HANDLER,
                         *tls_redis.flags())  # fmt: skip
    line = one_line_error(result, "informer-bus processor")
    assert "Redis requires a password (NOAUTH)" in line
    assert "--redis-password-file" in line


def test_an_untrusted_server_certificate_is_one_line(tls_redis: TlsRedisServer) -> None:
    result = run_command(
        PROCESSOR, "--resource", "pods", "--handler", HANDLER,
        *tls_redis.flags(ca=tls_redis.certs.untrusted_ca),
        env={"INFORMER_BUS_REDIS_USERNAME": "processor",
             "INFORMER_BUS_REDIS_PASSWORD": PROCESSOR_PASSWORD},
    )  # fmt: skip
    line = one_line_error(result, "informer-bus processor")
    assert "TLS verification of the Redis server failed" in line
    assert "--redis-tls-ca-file" in line
    assert PROCESSOR_PASSWORD not in result.stderr


def test_a_missing_client_certificate_is_one_line(tls_redis: TlsRedisServer) -> None:
    result = run_command(
        REFLECTOR, "--resource", "pods", "--kube-url", "http://127.0.0.1:1",
        *tls_redis.flags(client_cert=False),
        env={"INFORMER_BUS_REDIS_USERNAME": "reflector",
             "INFORMER_BUS_REDIS_PASSWORD": REFLECTOR_PASSWORD},
    )  # fmt: skip
    line = one_line_error(result, "informer-bus reflector")
    assert "the Redis server ended the TLS session" in line
    assert "--redis-tls-cert-file" in line


def test_status_and_subscribe_use_the_same_credentials_and_tls(
    tls_redis: TlsRedisServer, tls_admin: redis.Redis
) -> None:
    pod = {"metadata": {"name": "a", "namespace": "b", "resourceVersion": "1", "uid": "u"}}
    delta = DeltaEnvelope.from_delta(Delta(DeltaType.ADDED, pod), observed_at=1.0)
    tls_admin.xadd("ib:{pods:0}:deltas", envelope_to_fields(delta))  # type: ignore[arg-type]
    tls_admin.hset("ib:{pods:0}:checkpoint", "rv", "1")
    app = [sys.executable, "-m", "informer_bus.cli"]
    login = {
        "INFORMER_BUS_REDIS_USERNAME": "reader",
        "INFORMER_BUS_REDIS_PASSWORD": READER_PASSWORD,
    }
    status = run_command(app, "status", "--output", "json", *tls_redis.flags(), env=login)
    assert status.returncode == 0, status.stderr
    assert '"pods"' in status.stdout
    assert READER_PASSWORD not in status.stdout
    subscribe = run_command(
        app, "subscribe", "pods", "--from-beginning", "--count", "1", "--shards", "1",
        *tls_redis.flags(),
        env=login,
    )  # fmt: skip
    assert subscribe.returncode == 0, subscribe.stderr
    assert '"b/a"' in subscribe.stdout
    assert tls_admin.acl_log() == [], "status or subscribe needs more than the reader's ACL"
    wrong = {"INFORMER_BUS_REDIS_PASSWORD": "nope-3141"}
    for command in (["status"], ["subscribe", "pods"]):
        result = run_command(app, *command, *tls_redis.flags(), env=wrong)
        line = one_line_error(result, f"informer-bus {command[0]}")
        assert "Redis refused the credentials (WRONGPASS" in line
