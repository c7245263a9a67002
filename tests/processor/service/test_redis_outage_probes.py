"""While Redis is unreachable, neither service is ready, and both keep saying so (issue 34).

The reflector's ``/readyz`` answered 200 (a synced leader, then a "ready" standby) and the
processor's too (its shards still marked synced) with Redis gone, and each logged a warning or
two and then nothing. Now ``common.redis_reachability`` pings Redis every second: ``/readyz``
answers 503 with the reason, and a throttled line repeats until Redis answers again.

Real processes, a real redis-server stopped under them and started again on its port.
"""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiserver_sim import Simulator, SimulatorSettings
from tests.support import redis_server as redis_server_module
from tests.support.bus import ProcessorProcess, ReflectorProcess, ServiceProcess
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
COMMON = ["--shard-count", "2", "--http-host", "127.0.0.1", "--http-port", "0"]


def _readyz(service: ServiceProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(service.url() + "/readyz", timeout=5) as response:
            return int(response.status), json.loads(response.read())["detail"]
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), json.loads(error.read())["detail"]


def _not_ready(service: ServiceProcess) -> tuple[int, str] | None:
    answer = _readyz(service)
    return answer if answer[0] == 503 else None


def _logged(service: ServiceProcess, text: str) -> bool:
    return text in service.log()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_without_redis_neither_service_is_ready_and_both_keep_saying_why(
    private_redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = private_redis.url
    env = {"INFORMER_BUS_REDIS_URL": url}
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 20, seed=34)
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim.url, *COMMON], tmp_path / "r.log", env=env
        )
        processor = ProcessorProcess(
            ["--resource", "pods", "--handler", EXAMPLE, *COMMON], tmp_path / "p.log", env=env
        )
        try:
            reflector.start()
            processor.start()
            wait_until(lambda: processor.probe() == 200, 30, what="the processor synced")
            assert reflector.probe() == 200

            private_redis.stop()
            unreachable = f"cannot reach Redis at {url} for "
            for service in (reflector, processor):
                _, detail = wait_until(
                    functools.partial(_not_ready, service), 15, what=f"the {service.what} unready"
                )
                assert detail.startswith(unreachable), detail
            # Not one warning and then silence: the line comes back every 10 s.
            repeated = f"still cannot reach Redis at {url} (1"
            for service in (reflector, processor):
                wait_until(functools.partial(_logged, service, repeated), 30, what="the line again")

            monkeypatch.setattr(redis_server_module, "free_port", lambda: private_redis.port)
            private_redis.start()  # the same port, empty
            wait_until(lambda: reflector.probe() == 200, 30, what="the reflector ready again")
            wait_until(
                lambda: not _readyz(processor)[1].startswith(unreachable), 15, what="Redis back"
            )
            for service in (reflector, processor):
                assert f"Redis at {url} answers again" in service.log()
                assert "Traceback" not in service.log()
        finally:
            reflector.close()
            processor.close()
