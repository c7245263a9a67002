"""bench/pipeline_workloads.py: a coalescing contender's workload ends when its handler is done,
not when the newest update reached it; a handler that only counts ends its burst at its last
call."""

from __future__ import annotations

import importlib
import os
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.support.paths import ROOT


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


def test_a_handler_that_only_counts_ends_its_burst_at_its_last_call(
    workloads: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The key-only handler writes no record per update: the group counts its calls since the
    mark and times the burst from its release to the handler's last call."""
    import bench_handlers  # type: ignore[import-not-found]
    import processor_group  # type: ignore[import-not-found]

    monkeypatch.setenv(bench_handlers.DIR_ENV, str(tmp_path))
    group = processor_group.Group(1, processor_group.KEY_ONLY, "redis://unused", data_dir=tmp_path,
                                  workdir=tmp_path, tag="k")  # fmt: skip
    group.children = [SimpleNamespace(pid=os.getpid())]  # this process runs the handler
    assert not group.records_updates
    handler = bench_handlers.KeyOnly()
    pod = {"metadata": {"namespace": "ns-01", "name": "a"}}
    try:
        for _ in range(2):  # an earlier burst
            handler.on_update(pod, pod)
        handler.stop()  # flushes (again at every stop)
        group.mark()
        released = time.monotonic()
        for _ in range(3):
            handler.on_update(pod, pod)
        last_call = time.monotonic()
    finally:
        handler.stop()
    assert group.updates_seen() == 3
    assert group.updates() == []
    assert released <= group.last_update() <= last_call
    seconds = workloads.burst_seconds(group, 3, released)
    assert seconds == pytest.approx(group.last_update() - released)
    with pytest.raises(workloads.BenchError, match="counted 3 updates for a burst of 4"):
        workloads.burst_seconds(group, 4, released)
