"""What objects in the cluster may and may not do to the bus: name code (never loaded) and carry
Secret values (redacted before publishing unless the operator allows them).

Runs the real reflector and processor in this process against the session's plain Redis: what
matters here is the content, not the transport (tests/security/test_redis_tls.py covers that).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from common.plugins import load_plugin
from common.settings import settings_of
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from reflector_svc.transform import REDACTED
from tests.support.bus import Bus
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 2
HANDLER = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
SECRET_VALUE = "c3VwZXItc2VjcmV0LXZhbHVl"  # base64 of "super-secret-value"


def reflector(sim: Simulator, url: str, resource: str, **overrides: object) -> ReflectorService:
    service = ReflectorService(
        settings_of(
            ReflectorSettings,
            resource=(resource,), redis_url=url, kube_url=sim.url, http_host="127.0.0.1",
            http_port=0, shard_count=SHARDS, lease_duration=2.0, renew_deadline=1.5,
            retry_period=0.2, checkpoint_interval=0.2, **overrides,  # type: ignore[arg-type]
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    service.start()
    return service


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """An importable module (name, marker file) that leaves the marker when imported."""
    name = f"ib_canary_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "class Handler:\n    def __init__(self, *args, **kwargs):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def test_stream_content_that_names_a_module_never_causes_an_import(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    sim: Simulator,
    canary: tuple[str, Path],
) -> None:
    name, marker = canary
    reference = f"{name}:Handler"
    sim.populate("pods", 10, seed=3)
    sim.create(
        "pods",
        {
            "metadata": {
                "name": "hostile", "namespace": "default",
                "labels": {"handler": name},
                "annotations": {"informer-bus/handler": reference, "transform": reference,
                                "module": name, "py/object": reference},
            },
            "spec": {"handler": reference, "containers": [{"name": reference, "image": name}]},
        },
    )  # fmt: skip
    before = set(sys.modules)
    source = reflector(sim, redis_server.url, "pods")
    processor = ProcessorService(
        settings_of(
            ProcessorSettings,
            resource="pods", handler=(HANDLER,), redis_url=redis_server.url,
            shard_count=SHARDS, http_host="127.0.0.1", http_port=0, lease_duration=2.0,
            renew_deadline=1.5, retry_period=0.2, heartbeat_interval=0.1, member_ttl=0.6,
            block_ms=200,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    processor.start()
    try:
        wait_until(
            lambda: processor.lister.get_by_key("default/hostile") is not None, 20,
            what="the processor cached the object that names a module",
        )  # fmt: skip
        sim.update("pods", "default/hostile", {"metadata": {"labels": {"handler": reference}}})
        wait_until(
            lambda: (processor.lister.get_by_key("default/hostile") or {})
            .get("metadata", {}).get("labels", {}).get("handler") == reference, 20,
            what="the processor applied the update that names a module",
        )  # fmt: skip
    finally:
        processor.stop()
        source.stop()
    imported = set(sys.modules) - before
    assert name not in sys.modules and not marker.exists(), "stream content caused an import"
    assert not any(name in module for module in imported)
    # The control: the canary is importable, so its absence above means something.
    load_plugin(reference)
    assert marker.exists()


def secret_values(client: redis.Redis, prefix: str) -> bytes:
    """Every stream entry and hash value stored under ``prefix``, concatenated."""
    stored = b""
    for key in client.scan_iter(match=f"{prefix}:*"):
        kind = client.type(key)
        if kind == b"stream":
            for _, fields in client.xrange(key):  # type: ignore[union-attr]
                stored += b"".join(fields.values())
        elif kind == b"hash":
            stored += b"".join(client.hgetall(key).values())  # type: ignore[union-attr]
    return stored


@pytest.mark.parametrize("allowed", [False, True], ids=["default", "allow-secret-data"])
def test_secret_values_reach_redis_only_when_explicitly_allowed(
    redis_server: RedisServer, redis_client: redis.Redis, sim: Simulator, allowed: bool
) -> None:
    sim.create(
        "secrets",
        {"metadata": {"name": "db", "namespace": "default"}, "type": "Opaque",
         "data": {"password": SECRET_VALUE}},
    )  # fmt: skip
    source = reflector(sim, redis_server.url, "secrets", allow_secret_data=allowed)
    try:
        bus = Bus(redis_client, "secrets", shard_count=SHARDS)
        wait_until(lambda: bus.synced() and bus.length() > 0, 20, what="secrets published")
        entries = bus.all_entries()
        sim.update("secrets", "default/db", {"data": {"password": SECRET_VALUE, "user": "YQ=="}})
        wait_until(lambda: len(bus.all_entries()) > len(entries), 20, what="update published")
    finally:
        source.stop()
    data = [entry.envelope.obj["data"] for entry in bus.all_entries() if entry.envelope.obj]
    stored = secret_values(redis_client, "ib")
    if allowed:
        assert data[-1] == {"password": SECRET_VALUE, "user": "YQ=="}
        assert SECRET_VALUE.encode() in stored
    else:
        assert data and all(set(values.values()) == {REDACTED} for values in data)
        assert data[-1].keys() == {"password", "user"}, "keys stay visible"
        assert SECRET_VALUE.encode() not in stored
        assert b"YQ==" not in stored
