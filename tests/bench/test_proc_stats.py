"""bench/proc_stats.py: a group's CPU and its members' CPU come from the same readings."""

from __future__ import annotations

import importlib
import itertools
from types import ModuleType

import pytest

from tests.support.paths import ROOT


@pytest.fixture
def proc_stats(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the benches import each other as scripts
    return importlib.import_module("proc_stats")


def test_a_group_adds_up_to_its_members_while_they_keep_running(
    proc_stats: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process' CPU grows between two reads of /proc: read once for the group and once more
    for each member, the sum came out a tick off (a CI failure: processors 19700 µs/event,
    processor-0 + processor-1 19650). Here process 11 spends a tick between reads until it goes
    idle, process 12 stays idle."""
    clock = itertools.count()

    def cpu_seconds(pid: int) -> float:
        now = next(clock)
        return min(now, 3) / 100 if pid == 11 else 0.0

    monkeypatch.setattr(proc_stats, "process_cpu_seconds", cpu_seconds)
    span = proc_stats.CpuSpan({"processors": [11, 12], "processor-0": [11], "processor-1": [12]})
    cpu = span.per_event_us(1)
    assert cpu["processors"] > 0
    assert cpu["processors"] == cpu["processor-0"] + cpu["processor-1"]
