"""The examples of docs/handlers.md, run against real Indexers and a real ShardedLister."""

from __future__ import annotations

import logging
import re
import time

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import ResourceEventHandler, process_deltas
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.store import Indexer
from informer_bus.examples.pod_phase_counter import PHASE_INDEX, PodPhaseCounter
from informer_bus.examples.replica_checker import ReplicaChecker, Shortfall
from processor_svc.handlers import load_handler
from processor_svc.lister import ShardedLister
from tests.support.controllers import make_context
from tests.support.objects import deployment, pod
from tests.support.paths import ROOT
from tests.support.waiting import wait_until


def add(
    handler: ResourceEventHandler, store: Indexer, *objects: Obj, initial: bool = False
) -> None:
    for obj in objects:
        process_deltas(handler, store, [Delta(DeltaType.ADDED, obj)], initial)


class TestPodPhaseCounter:
    def test_counts_follow_the_cache_through_replays_and_handovers(self) -> None:
        lister = ShardedLister()
        counter = load_handler(
            "informer_bus.examples.pod_phase_counter:PodPhaseCounter", make_context(lister)
        )
        assert isinstance(counter, PodPhaseCounter)
        shard0, shard1 = lister.new_store(), lister.new_store()
        lister.attach(0, shard0)
        lister.attach(1, shard1)
        a, c = pod("a", phase="Running"), pod("c", phase="Running")
        add(counter, shard0, a, pod("b", phase="Pending"), initial=True)
        add(counter, shard1, c, pod("d"), initial=True)
        assert counter.counts() == {"Running": 2, "Pending": 1}

        # A takeover re-delivers the initial list: counts do not move.
        add(counter, shard0, a, pod("b", phase="Pending"), initial=True)
        assert counter.counts() == {"Running": 2, "Pending": 1}

        # A phase change is an update: counted from the cache, recorded as a transition.
        b2 = pod("b", phase="Running", rv="2")
        process_deltas(counter, shard0, [Delta(DeltaType.UPDATED, b2)], False)
        assert counter.counts() == {"Running": 3}
        assert counter.recent_transitions() == [("default/b", "Pending", "Running")]
        counter.on_update(b2, b2)  # a resync is not a transition
        assert len(counter.recent_transitions()) == 1

        # Deletions, tombstones included.
        process_deltas(counter, shard0, [Delta(DeltaType.DELETED, a)], False)
        tombstone = DeletedFinalStateUnknown("default/c", c)
        process_deltas(counter, shard1, [Delta(DeltaType.DELETED, tombstone)], False)
        assert counter.counts() == {"Running": 1}

        # A handover removes a shard's pods without any event.
        lister.detach(0)
        assert counter.counts() == {}

    def test_the_index_reaches_stores_attached_later(self) -> None:
        lister = ShardedLister()
        counter = PodPhaseCounter(make_context(lister))
        late = lister.new_store()
        assert PHASE_INDEX in late.get_indexers()
        add(counter, late, pod("x", phase="Failed"))
        lister.attach(7, late)
        assert counter.counts() == {"Failed": 1}
        PodPhaseCounter(make_context(lister))  # a second instance reuses the index

    def test_started_it_logs_its_counts_until_stopped(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """What a processor running it shows of counts(): a log line every ``report_every``."""
        caplog.set_level(logging.INFO, logger="tests.processor_api")
        lister = ShardedLister()
        counter = PodPhaseCounter(make_context(lister), report_every=0.05)
        store = lister.new_store()
        lister.attach(0, store)
        running = {"phase": "Running"}
        add(
            counter,
            store,
            pod("a", **running),
            pod("b", **running),
            pod("c", phase="Pending"),
            initial=True,
        )
        counter.start()
        try:
            wait_until(lambda: any("pods per phase" in r.getMessage() for r in caplog.records))
        finally:
            assert counter.stop(5)
        reports = [r.getMessage() for r in caplog.records if "pods per phase" in r.getMessage()]
        assert reports[0] == (
            "pods per phase in the shards this processor owns: Pending 1, Running 2"
        )
        caplog.clear()
        time.sleep(0.2)
        assert not caplog.records, "no report after stop()"

    def test_history_is_bounded(self) -> None:
        lister = ShardedLister()
        counter = PodPhaseCounter(make_context(lister), history=2)
        for i in range(5):
            counter.on_update(pod("p", phase=f"A{i}"), pod("p", phase=f"B{i}"))
        assert [new for _, _, new in counter.recent_transitions()] == ["B3", "B4"]


class TestReplicaChecker:
    def test_reconciles_shortfalls(self) -> None:
        lister = ShardedLister()
        checker = load_handler(
            "informer_bus.examples.replica_checker:ReplicaChecker",
            make_context(lister, resource="deployments.apps"),
        )
        assert isinstance(checker, ReplicaChecker)
        store = lister.new_store()
        lister.attach(0, store)
        checker.start()
        try:
            add(checker, store, deployment("web", desired=3, ready=1), initial=True)
            add(checker, store, deployment("api", desired=2, ready=2), initial=True)
            add(checker, store, deployment("db", "data", desired=1, ready=0), initial=True)
            assert checker.shortfalls() == {}  # workers wait for the cache sync
            lister.mark_synced(0)
            wait_until(lambda: checker.shortfalls().keys() == {"default/web", "data/db"})
            assert checker.shortfalls()["default/web"] == Shortfall(desired=3, ready=1)

            web = deployment("web", desired=3, ready=3, rv="2")
            process_deltas(checker, store, [Delta(DeltaType.UPDATED, web)], False)
            api = deployment("api", desired=5, ready=2, rv="2")
            process_deltas(checker, store, [Delta(DeltaType.UPDATED, api)], False)
            tombstone = DeletedFinalStateUnknown("data/db", None)
            process_deltas(checker, store, [Delta(DeltaType.DELETED, tombstone)], False)
            wait_until(
                lambda: checker.shortfalls() == {"default/api": Shortfall(desired=5, ready=2)}
            )
        finally:
            assert checker.stop()

    def test_gives_up_on_a_malformed_deployment(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING, logger="tests.processor_api")
        lister = ShardedLister()
        checker = ReplicaChecker(make_context(lister))
        store = lister.new_store()
        lister.attach(0, store)
        lister.mark_synced(0)
        checker.start()
        try:
            add(checker, store, deployment("odd", desired="three", ready=0))
            wait_until(lambda: any("giving up" in r.getMessage() for r in caplog.records))
        finally:
            assert checker.stop()
        assert checker.max_retries == 3
        attempts = [r for r in caplog.records if "default/odd" in r.getMessage()]
        assert len(attempts) == 4  # 3 retries logged, then giving up
        assert checker.shortfalls() == {}


@pytest.mark.parametrize(
    "example",
    ["informer_bus/examples/pod_phase_counter.py", "informer_bus/examples/replica_checker.py"],
)
def test_the_docs_show_the_example_code(example: str) -> None:
    docs = (ROOT / "docs" / "handlers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, flags=re.DOTALL)
    assert (ROOT / example).read_text() in blocks, f"docs/handlers.md is out of date for {example}"
