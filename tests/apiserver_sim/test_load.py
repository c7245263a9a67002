"""Point 9 (load generation, ground truth) and the SharedInformer following churn."""

from __future__ import annotations

import time
from typing import Any

import orjson
import urllib3
from kubernetes import client
from kubernetes.informer import SharedInformer

from apiserver_sim import Simulator, SimulatorProcess, SimulatorSettings
from apiserver_sim.load import CHURN_ANNOTATION, COMMITTED_AT_ANNOTATION
from apiserver_sim.resources import PODS


def _run(seed: int) -> tuple[dict[str, str], bytes]:
    # One fixed wall clock: creationTimestamps count back from it, so the bytes repeat too.
    with Simulator(SimulatorSettings(), wall_clock=lambda: 1_750_000_000.0) as sim:
        sim.populate("pods", 40, seed=seed)
        stats = sim.churn(rate=0, seconds=10, seed=seed, max_events=60)
        assert stats.events == 60
        first = sorted(sim.ground_truth())[0]
        return sim.ground_truth(), sim.state.get(sim.state.resources()[0], first).raw


def test_populate_and_churn_are_deterministic() -> None:
    truth_a, raw_a = _run(7)
    truth_b, raw_b = _run(7)
    truth_c, _ = _run(8)
    assert truth_a == truth_b and raw_a == raw_b
    assert truth_a != truth_c


def test_pod_fixtures_look_real(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 5, seed=1)
    raw = sim.state.get(sim.state.resources()[0], sorted(sim.ground_truth())[0]).raw
    assert 2500 <= len(raw) <= 5000
    item = v1.list_pod_for_all_namespaces().items[0]
    assert item.spec.node_name and item.status.phase and item.metadata.managed_fields
    assert item.metadata.owner_references[0].kind == "ReplicaSet"


def test_churn_rate_and_mix(sim: Simulator) -> None:
    sim.populate("pods", 20, seed=1)
    stats = sim.churn(rate=200, seconds=60, seed=3, mix={"update": 1.0}, max_events=100)
    assert stats.updates == stats.events == 100
    # Paced: never faster than the rate (each step may start up to 1 ms early; slower if
    # the machine is loaded, which is not checked).
    assert stats.seconds >= 99 / 200 - 0.002
    assert len(sim.ground_truth()) == 20
    stats = sim.churn(rate=0, seconds=60, seed=4, mix={"create": 1, "delete": 3}, max_events=40)
    assert stats.updates == 0 and stats.creates + stats.deletes == 40
    assert len(sim.ground_truth()) == 20 + stats.creates - stats.deletes


def test_ground_truth_via_http(sim: Simulator, http: urllib3.PoolManager) -> None:
    body = orjson.dumps({"resource": "configmaps", "count": 4, "seed": 1})
    resp = http.request("POST", f"{sim.url}/_sim/populate", body=body)
    assert orjson.loads(resp.data)["created"] == 4
    resp = http.request("GET", f"{sim.url}/_sim/ground-truth?resource=configmaps")
    doc = orjson.loads(resp.data)
    assert doc["objects"] == sim.ground_truth("configmaps")
    resp = http.request("POST", f"{sim.url}/_sim/churn",
                        body=orjson.dumps({"rate": 0, "seconds": 5, "maxEvents": 10,
                                           "resource": "configmaps", "wait": True}))  # fmt: skip
    assert orjson.loads(resp.data)["events"] == 10


def test_shared_informer_syncs_and_follows_churn(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 50, seed=2)
    informer = SharedInformer(v1.list_pod_for_all_namespaces)
    informer.start()
    try:
        deadline = time.monotonic() + 10
        while len(informer.cache.list_keys()) < 50:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        handle = sim.start_churn(rate=300, seconds=1.0, seed=5)
        handle.wait(10)
        assert handle.stats is not None and handle.stats.events > 100
        truth = sim.ground_truth()
        deadline = time.monotonic() + 10
        while True:
            cached = {
                f"{p.metadata.namespace}/{p.metadata.name}": p.metadata.resource_version
                for p in informer.cache.list()
            }
            if cached == truth:
                break
            assert time.monotonic() < deadline, (len(cached), len(truth))
            time.sleep(0.05)
    finally:
        informer.stop()


def _monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def test_a_stamped_churn_update_is_committed_before_any_watcher_receives_it() -> None:
    """The stamp is CLOCK_MONOTONIC in the simulator's own process, taken at commit: between
    this process's reading before the churn and the moment the watch line reached it."""
    updates = 60
    with SimulatorProcess(SimulatorSettings()) as sim:
        sim.populate("pods", 20, seed=1)
        rv = sim.stats()["resourceVersion"]
        pool = urllib3.PoolManager()
        resp = pool.request(
            "GET", f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=60",
            preload_content=False, timeout=urllib3.Timeout(connect=10, read=30),
        )  # fmt: skip
        received: list[tuple[dict[str, Any], int]] = []
        try:
            before = _monotonic_ns()
            # Paced, and not waited for: the lines are read as the simulator commits them.
            sim.churn(rate=300, seconds=30, seed=2, wait=False, mix={"update": 1.0},
                      maxEvents=updates, stamp=True)  # fmt: skip
            buffer = b""
            for chunk in resp.stream(65536):
                arrived = _monotonic_ns()
                *lines, buffer = (buffer + chunk).split(b"\n")
                received += [(orjson.loads(line), arrived) for line in lines if line]
                if len(received) >= updates:
                    break
        finally:
            resp.release_conn()
            resp.close()
            pool.clear()
    assert [event["type"] for event, _ in received] == ["MODIFIED"] * updates
    stamps = []
    for event, arrived in received:
        annotations = event["object"]["metadata"]["annotations"]
        stamp = int(annotations[COMMITTED_AT_ANNOTATION])
        assert before <= stamp <= arrived, (before, stamp, arrived)
        stamps.append(stamp)
    assert stamps == sorted(stamps), "commit order is watch order"
    steps = [int(event["object"]["metadata"]["annotations"][CHURN_ANNOTATION])
             for event, _ in received]  # fmt: skip
    assert steps == list(range(updates)), "the step annotation is kept beside the stamp"


def test_churn_writes_no_commit_stamp_unless_asked(sim: Simulator) -> None:
    sim.populate("pods", 5, seed=1)
    sim.churn(rate=0, seconds=5, seed=2, mix={"update": 1.0}, max_events=20)
    pods = [sim.state.get(PODS, key).decode() for key in sim.ground_truth()]
    annotations = [pod["metadata"].get("annotations") or {} for pod in pods]
    assert any(CHURN_ANNOTATION in a for a in annotations)
    assert not any(COMMITTED_AT_ANNOTATION in a for a in annotations)
