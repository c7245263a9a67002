"""The example operator (``informer_bus.examples.widget_operator``) under Widget churn, scaled
1 -> 3 processors, one killed with ``kill -9``, one handed over gracefully: it converges.

Everything real: the simulator over HTTP (the Widgets are churned through the official
``kubernetes`` client, the operator writes through it too), a private redis-server, the
reflector (Widgets by key, ConfigMaps by their controlling owner: co-sharded), and processors
as child processes running the operator with every reconcile recorded
(``tests.support.operator_recorder``). At the end:

* every Widget has exactly its ConfigMap, with the right data and owner, and its status names
  it for the Widget's current generation; no ConfigMap is left without its Widget;
* no two processors reconciled one Widget at once (the recorded intervals of a key never
  overlap across processes; a killed process's last reconcile ends at its kill at the latest);
* the simulator refused no write with 409: every write the operator made was decided on a
  cache that held its own previous writes (the ConfigMap replaces carry the cached
  resourceVersion, so a stale cache would show as a Conflict, a duplicate create as
  AlreadyExists).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration, CustomObjectsApi
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from apiserver_sim.resources import CONFIGMAPS, WIDGETS
from common.settings import settings_of
from informer_bus.examples.widget_operator import CONFIG_SUFFIX, desired_data
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import ProcessorProcess, closing_with_logs
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 8
LEASE, RENEW, RETRY = 2.0, 1.5, 0.2
NAMESPACES = ("ns-00", "ns-01", "ns-02")
HANDLER = "tests.support.operator_recorder:RecordingWidgetOperator"
HOT = 3
"""Widgets patched back to back during the whole run (never deleted)."""
RECONCILE_DELAY = 0.02
"""Seconds every reconcile takes beyond its writes, so hand-overs find some running."""

pytestmark = pytest.mark.timeout(240)


def api(sim: Simulator) -> ApiClient:
    configuration = Configuration()
    configuration.host = sim.url
    return ApiClient(configuration)


class Churn:
    """Creates, spec-updates and deletes Widgets through the official client until stopped."""

    def __init__(self, sim: Simulator, seed: int = 15) -> None:
        self.client = api(sim)
        self.custom = CustomObjectsApi(self.client)
        self.rng = random.Random(seed)
        self.live: list[tuple[str, str]] = []
        self.serial = 0
        self.ops: dict[str, int] = defaultdict(int)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="widget-churn")
        self._hot: list[threading.Thread] = []

    def create(self) -> None:
        namespace = self.rng.choice(NAMESPACES)
        name = f"w{self.serial:04d}"
        self.serial += 1
        body = {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"size": self.rng.randint(1, 9), "color": self.rng.choice("rgb")},
        }
        self.custom.create_namespaced_custom_object("example.com", "v1", namespace, "widgets",
                                                    body)  # fmt: skip
        self.live.append((namespace, name))
        self.ops["create"] += 1

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.25 or len(self.live) < 2 * HOT:
            self.create()
        elif roll < 0.85:
            namespace, name = self.rng.choice(self.live)
            patch = {"spec": {"size": self.rng.randint(1, 99)}}
            self.custom.patch_namespaced_custom_object("example.com", "v1", namespace,
                                                       "widgets", name, patch)  # fmt: skip
            self.ops["update"] += 1
        else:
            namespace, name = self.live.pop(self.rng.randrange(HOT, len(self.live)))
            self.custom.delete_namespaced_custom_object("example.com", "v1", namespace,
                                                        "widgets", name)  # fmt: skip
            self.ops["delete"] += 1

    def hot(self, namespace: str, name: str) -> None:
        """Patch one Widget's spec over and over: each patch queues a reconcile while the
        operator's last write may still be on its way to the cache (a stale read would replace
        the ConfigMap with an old resourceVersion: 409)."""
        size = 0
        while not self._stop.wait(0.01):
            size += 1
            self.custom.patch_namespaced_custom_object("example.com", "v1", namespace, "widgets",
                                                       name, {"spec": {"size": size}})  # fmt: skip
            self.ops["hot"] += 1

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.step()

    def start(self) -> None:
        self._thread.start()
        for namespace, name in self.live[:HOT]:  # never deleted: the churn pops from the end
            thread = threading.Thread(target=self.hot, args=(namespace, name), daemon=True)
            self._hot.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for thread in self._hot:
            thread.join()
        self.client.close()


@pytest.fixture
def reflector(redis_server: RedisServer, sim: Simulator) -> Iterator[ReflectorService]:
    service = ReflectorService(
        settings_of(
            ReflectorSettings,
            resource=("widgets.example.com", "configmaps?shardKey=owner"),
            redis_url=redis_server.url, kube_url=sim.url, http_host="127.0.0.1", http_port=0,
            shard_count=SHARDS, lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY,
            checkpoint_interval=0.2, identity="reflector", retention_interval=3600.0,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def spawn(
    redis_server: RedisServer, sim: Simulator, tmp_path: Path
) -> Iterator[Callable[[str], ProcessorProcess]]:
    started: list[ProcessorProcess] = []

    def start(member: str) -> ProcessorProcess:
        args = [
            "--handler", HANDLER, "--redis-url", redis_server.url, "--kube-url", sim.url,
            "--shard-count", str(SHARDS), "--member-id", member, "--http-host", "127.0.0.1",
            "--http-port", "0", "--lease-duration", str(LEASE), "--renew-deadline", str(RENEW),
            "--retry-period", str(RETRY), "--heartbeat-interval", "0.1", "--member-ttl", "0.6",
            "--block-ms", "200", "--shutdown-grace", "5",
        ]  # fmt: skip
        env = {
            "IB_RECORD_FILE": str(tmp_path / f"{member}.jsonl"),
            "IB_MEMBER": member,
            "IB_RECONCILE_DELAY": str(RECONCILE_DELAY),
        }
        process = ProcessorProcess(args, tmp_path / f"{member}.log", env=env)
        started.append(process)
        return process.start()

    with closing_with_logs(started):
        yield start


def convergence_problems(sim: Simulator) -> list[str]:
    """What differs from "every Widget has exactly its ConfigMap and its status"."""
    widgets = {key: stored.decode() for key, stored in sim.state.current(WIDGETS).items()}
    configmaps = {
        key: stored.decode()
        for key, stored in sim.state.current(CONFIGMAPS).items()
        if key.endswith(CONFIG_SUFFIX)
    }
    problems: list[str] = []
    for key, widget in widgets.items():
        config_key = key + CONFIG_SUFFIX
        config = configmaps.get(config_key)
        if config is None:
            problems.append(f"{key}: no ConfigMap")
            continue
        if config.get("data") != desired_data(widget):
            problems.append(f"{key}: ConfigMap data {config.get('data')} is not its spec's")
        owners = [r.get("uid") for r in config["metadata"].get("ownerReferences") or ()
                  if r.get("controller")]  # fmt: skip
        if owners != [widget["metadata"]["uid"]]:
            problems.append(f"{key}: ConfigMap controlled by {owners}")
        status = widget.get("status") or {}
        expected = {"configMap": widget["metadata"]["name"] + CONFIG_SUFFIX,
                    "observedGeneration": widget["metadata"]["generation"]}  # fmt: skip
        if status != expected:
            problems.append(f"{key}: status {status}, expected {expected}")
    for config_key in configmaps:
        if config_key.removesuffix(CONFIG_SUFFIX) not in widgets:
            problems.append(f"{config_key}: left without its Widget")
    return problems


def overlap_problems(
    records: dict[str, list[dict[str, Any]]], killed: dict[str, float]
) -> list[str]:
    """Reconciles of one key by two processes at once (intervals of different members that
    overlap; a reconcile a kill cut short ends at the kill)."""
    intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for member, lines in records.items():
        open_calls: dict[tuple[str, float], dict[str, Any]] = {}
        for line in lines:
            if "end" in line:
                open_calls.pop((line["key"], line["start"]), None)
                intervals[line["key"]].append((line["start"], line["end"], member))
            else:
                open_calls[(line["key"], line["start"])] = line
        for (key, start), _ in open_calls.items():
            intervals[key].append((start, killed.get(member, float("inf")), member))
    problems = []
    for key, spans in intervals.items():
        spans.sort()
        for i, (s1, e1, m1) in enumerate(spans):
            for s2, e2, m2 in spans[i + 1 :]:
                if s2 >= e1:
                    break  # sorted by start: no later span starts before this one ends
                if m1 != m2:
                    problems.append(
                        f"{key}: {m1} [{s1:.3f}, {e1:.3f}] and {m2} [{s2:.3f}, {e2:.3f}]"
                    )
    return problems


def read_records(tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        path.stem: [json.loads(line) for line in path.read_text().splitlines() if line]
        for path in sorted(tmp_path.glob("*.jsonl"))
    }


def test_the_operator_converges_under_churn_scale_out_kill_and_handover(
    sim: Simulator, reflector: ReflectorService, spawn: Callable[[str], ProcessorProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    for namespace in NAMESPACES:
        if namespace not in sim.ground_truth("namespaces"):
            sim.create("namespaces", {"metadata": {"name": namespace}})
    churn = Churn(sim)
    for _ in range(40):
        churn.create()
    wait_until(reflector.is_synced, 30, what="the reflector synced")
    killed: dict[str, float] = {}
    p1 = spawn("p1")
    wait_until(lambda: p1.probe() == 200, 60, what="p1 ready")
    churn.start()
    try:
        time.sleep(2)
        p2, p3 = spawn("p2"), spawn("p3")  # 1 -> 3
        wait_until(lambda: p2.probe() == 200 and p3.probe() == 200, 60, what="p2, p3 ready")
        time.sleep(2)
        killed["p2"] = time.time()
        p2.kill()  # kill -9: its shards wait for their leases to expire
        time.sleep(LEASE + 2)
        assert p3.terminate() == 0  # a graceful hand-over: the others take over at once
        p4 = spawn("p4")
        wait_until(lambda: p4.probe() == 200, 60, what="p4 ready")
        time.sleep(2)
    finally:
        churn.stop()
    wait_until(lambda: not convergence_problems(sim), 90, what="the operator converged")
    assert convergence_problems(sim) == []
    assert sim.conflicts() == {}, "a write was decided on a stale cache"
    records = read_records(tmp_path)
    assert overlap_problems(records, killed) == []
    assert all(records.get(m) for m in ("p1", "p2", "p3", "p4")), sorted(records)
    assert churn.ops["create"] > 40 and churn.ops["update"] > 0 and churn.ops["delete"] > 0
    assert churn.ops["hot"] > 100
    for process in (p1, p4):
        assert process.probe("/healthz") == 200


def test_the_overlap_check_finds_two_processes_on_one_key_and_ends_a_killed_call_at_its_kill() -> (
    None
):
    """The check above can fail: overlapping reconciles of one key by two members are found,
    one member's own calls never count, and a call cut short by kill -9 ends at the kill."""
    records = {
        "p1": [{"key": "a", "start": 1.0, "end": 2.0}, {"key": "a", "start": 1.5, "end": 2.5}],
        "p2": [{"key": "a", "start": 3.0, "end": 4.0}, {"key": "b", "start": 1.0}],
        "p3": [{"key": "b", "start": 4.9, "end": 6.0}],
    }
    assert overlap_problems(records, killed={"p2": 5.0}) == [
        "b: p2 [1.000, 5.000] and p3 [4.900, 6.000]"
    ]
    assert overlap_problems(records, killed={"p2": 4.5}) == []
    records["p2"].append({"key": "a", "start": 2.4, "end": 3.0})
    assert overlap_problems(records, killed={"p2": 4.5}) == [
        "a: p1 [1.500, 2.500] and p2 [2.400, 3.000]"
    ]
    # A long call overlapping a later one, with a short call of its own member in between.
    long = {"p1": [{"key": "c", "start": 1.0, "end": 10.0}, {"key": "c", "start": 2, "end": 3}],
            "p2": [{"key": "c", "start": 4.0, "end": 5.0}]}  # fmt: skip
    assert overlap_problems(long, killed={}) == ["c: p1 [1.000, 10.000] and p2 [4.000, 5.000]"]
