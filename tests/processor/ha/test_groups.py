"""Two applications on one watch (issue 14): processor groups with their own views, scaled and
killed independently, each converging on its own filtered truth.

One reflector, one watch on the simulator. Group ``frontend`` keeps pods labelled
``tier=frontend`` (the simulator's churn relabels pods now and then, so pods move in and out of
its view); group ``audit`` keeps every pod of one namespace, metadata only. Each is scaled
1 -> 3 under churn and loses a member to ``kill -9``; each final store (replayed from the
handler calls of the group's current owners) must equal the simulator's objects in its view.
Then one group stops and the other keeps delivering, and retention keeps what the stopped group
still needs.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from apiserver_sim import Simulator
from common.redis_layout import ShardKeys
from reflector_svc.retention import trim_shard
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus, ProcessorProcess
from tests.support.processor_ha import (
    SHARDS,
    Call,
    final_stores,
    handler_order_problems,
    ownership_problems,
    read_calls,
    store_differences,
    wait_balanced,
)
from tests.support.waiting import wait_until

FRONTEND = {"group": "frontend", "label_selector": "tier=frontend"}
AUDIT_NAMESPACE = "ns-02"
AUDIT = {"group": "audit", "namespace": AUDIT_NAMESPACE, "project": "metadata"}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def truth_in_view(sim: Simulator, selected: Callable[[dict[str, Any]], bool]) -> dict[str, str]:
    """The simulator's pods in a view: key -> resourceVersion."""
    truth = {}
    for key, rv in sim.ground_truth("pods").items():
        if selected(sim.get("pods", key)):
            truth[key] = rv
    return truth


def in_frontend(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get("tier") == "frontend"


def in_audit(pod: dict[str, Any]) -> bool:
    return pod["metadata"].get("namespace") == AUDIT_NAMESPACE


def group_calls(records: Path, prefix: str) -> list[Call]:
    return [call for call in read_calls(records) if call.member.startswith(prefix)]


def group_lag(client: redis.Redis, group: str) -> int:
    """Entries of every shard the group has not acknowledged (undelivered + pending)."""
    total = 0
    for shard in range(SHARDS):
        for info in client.xinfo_groups(ShardKeys("ib", "pods", shard).stream):
            if _text(info["name"]) == group:
                total += int(info["lag"] or 0) + int(info["pending"])
    return total


def wait_group_converged(
    bus: Bus,
    sim: Simulator,
    *,
    live: Sequence[ProcessorProcess],
    records: Path,
    prefix: str,
    selected: Callable[[dict[str, Any]], bool],
) -> list[Call]:
    wait_balanced(bus, live)
    truth = truth_in_view(sim, selected)
    found: list[Call] = []

    def converged() -> bool:
        found[:] = group_calls(records, prefix)
        return final_stores(found, bus.shard_epochs()) == truth

    def why() -> str:
        store = final_stores(group_calls(records, prefix), bus.shard_epochs())
        return f"group {bus.group.group} to hold its view: {store_differences(store, truth)}"

    wait_until(converged, 40, interval=0.2, what=why)
    return found


def test_two_groups_with_their_own_views_share_one_watch_and_converge(
    sim: Simulator,
    redis_client: redis.Redis,
    start_reflector: Callable[[], ReflectorService],
    spawn: Callable[..., ProcessorProcess],
    tmp_path: Path,
) -> None:
    sim.populate("pods", 400, seed=21)
    start_reflector()
    frontend = Bus(redis_client, "pods", shard_count=SHARDS, group="frontend")
    audit = Bus(redis_client, "pods", shard_count=SHARDS, group="audit")
    wait_until(frontend.synced, 30, what="the reflector to sync")
    assert truth_in_view(sim, in_frontend) and truth_in_view(sim, in_audit)

    fe = [spawn("fe-p1", **FRONTEND)]
    au = [spawn("au-p1", **AUDIT)]
    wait_balanced(frontend, fe)
    wait_balanced(audit, au)

    churn = sim.start_churn(rate=300, seconds=9, seed=21)
    killed: dict[str, float] = {}
    try:
        fe += [spawn("fe-p2", **FRONTEND), spawn("fe-p3", **FRONTEND)]
        au += [spawn("au-p2", **AUDIT), spawn("au-p3", **AUDIT)]
        wait_balanced(frontend, fe)
        wait_balanced(audit, au)
        fe[0].kill()
        au[1].kill()
        killed = {"fe-p1": time.time(), "au-p2": time.time()}
        assert churn.running, "the kills did not land in the churn"
    finally:
        stats = churn.wait(40)
    assert churn.error is None and stats is not None

    fe_calls = wait_group_converged(
        frontend, sim, live=[fe[1], fe[2]], records=tmp_path, prefix="fe-", selected=in_frontend
    )
    au_calls = wait_group_converged(
        audit, sim, live=[au[0], au[2]], records=tmp_path, prefix="au-", selected=in_audit
    )
    for calls in (fe_calls, au_calls):
        assert ownership_problems(calls, killed) == []
        assert handler_order_problems(calls, view=True) == []
    # Only the reflector ever watched the API server: the groups read Redis.
    assert sim.watches_served == 1
    # The churn relabelled pods: some left the frontend view while they still existed, and
    # reached its handlers as a deletion; none of the audit group's pods was outside its view.
    alive = sim.ground_truth("pods")
    left = {c.key for c in fe_calls if c.kind == "delete" and c.key in alive}
    assert left, "no pod moved out of the frontend view"
    assert all(c.key.startswith(f"{AUDIT_NAMESPACE}/") for c in au_calls)
    assert [p.log_path.name for p in fe + au if "Traceback" in p.log()] == []

    # A stopped group does not slow the other, and retention keeps what it still needs.
    for process in (au[0], au[2]):
        process.send(signal.SIGSTOP)
    try:
        before = sim.resource_version
        sim.churn(rate=300, seconds=2, seed=22)
        assert sim.resource_version > before
        wait_until(lambda: group_lag(redis_client, "frontend") == 0, 20, what="frontend")
        held = group_lag(redis_client, "audit")
        assert held > 0
        for shard in range(SHARDS):
            trim_shard(
                redis_client, ShardKeys("ib", "pods", shard), min_entries=0, hard_max_entries=10**6
            )
        assert frontend.length() >= held  # what audit has not read is still there
    finally:
        for process in (au[0], au[2]):
            process.send(signal.SIGCONT)
    wait_group_converged(
        audit, sim, live=[au[0], au[2]], records=tmp_path, prefix="au-", selected=in_audit
    )
    wait_group_converged(
        frontend, sim, live=[fe[1], fe[2]], records=tmp_path, prefix="fe-", selected=in_frontend
    )
