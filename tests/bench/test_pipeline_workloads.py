"""bench/pipeline_workloads.py: a coalescing contender's workload ends when its handler is done,
not when the newest update reached it."""

from __future__ import annotations

import importlib
import threading
import time
from types import ModuleType

import pytest

from tests.bench.support import ROOT


@pytest.fixture
def workloads(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the benches import each other as scripts
    return importlib.import_module("pipeline_workloads")


class Handler:
    """What kopf's handler recorded so far, as a group of one reads it."""

    def __init__(self, workloads: ModuleType) -> None:
        self.update = workloads.Update
        self.recorded: list[object] = []
        self.lock = threading.Lock()

    def record(self, step: int) -> None:
        with self.lock:
            self.recorded.append(self.update(step, -1, time.monotonic_ns()))

    def updates(self) -> list[object]:
        with self.lock:
            return list(self.recorded)

    def updates_seen(self) -> int:
        with self.lock:
            return len(self.recorded)

    def check_alive(self) -> None:
        pass


def test_an_older_objects_batch_closing_after_the_newest_update_counts_in_its_own_workload(
    workloads: ModuleType,
) -> None:
    """The CI failure: kopf's burst of 200 counted 201 calls, one left over from the round
    before, whose wait had ended at the newest update while another object's batch was open."""
    handler = Handler(workloads)
    handler.record(199)  # the newest update, handled first
    late = threading.Timer(0.3, handler.record, (57,))  # an older object's batch closing late
    late.start()
    try:
        workloads.coalesced_to(handler, 199, "the burst")
    finally:
        late.cancel()
    assert sorted(u.step for u in handler.updates()) == [57, 199]  # type: ignore[attr-defined]
