"""Reference 1.10 for bad watch lines: a line that is not a usable event ends the watch, and the
reflector re-watches from the last event it published instead of relisting everything.

A real simulator over HTTP writes each kind of bad line (``apiserver_sim.faults``),
a real reflector service reads it, a real Redis holds the streams; ``assert_faithful(exact=True)``
checks that every key's stream is exactly what the simulator did: nothing lost, nothing twice.
The simulator sends no bookmarks here, so the write that carries an armed bad line is the one
with the events the test makes, and the position the reflector stopped at is known.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from apiserver_sim import Simulator, SimulatorSettings
from apiserver_sim.faults import BAD_LINES
from reflector_svc.bad_lines import BAD_LINE_RELIST_AFTER
from reflector_svc.service import ReflectorService
from tests.support.bad_lines import BAD_LINE_REASONS
from tests.support.bus import Bus
from tests.support.reflector_ha import SimHistory, assert_faithful, wait_caught_up
from tests.support.waiting import wait_until

MakeService = Callable[..., ReflectorService]

KINDS = sorted(BAD_LINES)
_LOGGED = re.compile(r"bad watch line after rv (\d+) ")


@pytest.fixture
def sim_settings() -> SimulatorSettings:
    """No bookmarks during a test: the RV a re-watch starts from is the last event's."""
    return SimulatorSettings(bookmark_interval=3600.0)


@dataclass
class Rig:
    """The simulator, the streams, what the simulator did, and the reflector's log."""

    sim: Simulator
    bus: Bus
    history: SimHistory
    make_service: MakeService
    caplog: pytest.LogCaptureFixture

    def start_synced(self, **settings: Any) -> ReflectorService:
        service = self.make_service("a", **settings)
        wait_caught_up(self.bus, self.sim, timeout=45)
        wait_until(service.is_synced, 15, what="the reflector to be synced")
        return service

    def logged(self) -> list[str]:
        """The reflector's bad-line warnings, in order."""
        messages = (record.getMessage() for record in self.caplog.records)
        return [message for message in messages if _LOGGED.search(message)]

    def caught_up_and_faithful(self) -> None:
        """Every change reached the streams exactly once, as the simulator made it."""
        wait_caught_up(self.bus, self.sim)
        assert_faithful(self.bus, self.sim, self.history, exact=True)


@pytest.fixture
def rig(
    sim: Simulator, bus: Bus, history: SimHistory, make_service: MakeService,
    caplog: pytest.LogCaptureFixture,
) -> Rig:  # fmt: skip
    caplog.set_level(logging.WARNING, logger="reflector_svc.reflector")
    return Rig(sim, bus, history, make_service, caplog)


def positions(messages: list[str]) -> list[str]:
    """The resourceVersion each logged bad line stopped the watch at."""
    return [match.group(1) for m in messages if (match := _LOGGED.search(m))]


def count(service: ReflectorService, name: str, **labels: str) -> float:
    value = service.registry.get_sample_value(f"informer_bus_reflector_{name}_total",
                                              {"resource": "pods", **labels})  # fmt: skip
    return 0.0 if value is None else value


def bad_lines(service: ReflectorService) -> float:
    return sum(count(service, "bad_watch_lines", reason=r) for r in set(BAD_LINE_REASONS.values()))


def wait_bad_lines(service: ReflectorService, expected: float) -> None:
    def why() -> str:
        return f"{expected} bad lines counted (not {bad_lines(service)})"

    wait_until(lambda: bad_lines(service) == expected, 15, what=why)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bad-lines"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_1_10_a_bad_line_costs_one_rewatch_from_the_last_event_and_no_relist(
    rig: Rig, kind: str
) -> None:
    """Whatever the kind of bad line: counted by reason, logged once with the position, one
    re-watch from the event before it, no LIST; what came after it is sent again."""
    sim = rig.sim
    sim.populate("pods", 50, seed=1)
    service = rig.start_synced()
    sim.inject_malformed_lines(1, kind, after_first_line=True)
    first = sim.create("pods", pod("first"))  # the bad line follows it in its write
    sim.create("pods", pod("second"))  # after the bad line, or in a later write: sent again
    sim.update("pods", "default/first", {"metadata": {"labels": {"changed": "yes"}}})
    wait_bad_lines(service, 1)
    rig.caught_up_and_faithful()
    assert count(service, "bad_watch_lines", reason=BAD_LINE_REASONS[kind]) == 1
    assert count(service, "watch_restarts", reason="bad_line") == 1
    assert (count(service, "lists"), count(service, "relists")) == (1, 0)
    messages = rig.logged()
    assert positions(messages) == [str(first.rv)]
    assert repr(BAD_LINES[kind].rstrip(b"\n")) in messages[0]


def test_1_10_nine_bad_lines_among_3000_pods_cost_nine_rewatches_and_no_relist(
    rig: Rig,
) -> None:
    """The issue's case: nine bad lines cost nine relists of 3,000 pods (56-84 s with the
    relist backoff). Now each costs a re-watch; every change around them arrives once."""
    sim = rig.sim
    sim.populate("pods", 3000, seed=2)
    service = rig.start_synced()
    keys = sorted(sim.ground_truth("pods"))
    for round_ in range(9):
        sim.inject_malformed_lines(1, KINDS[round_ % len(KINDS)], after_first_line=True)
        sim.create("pods", pod(f"new-{round_}"))
        sim.update("pods", keys[2 * round_], {"metadata": {"labels": {"round": str(round_)}}})
        sim.delete("pods", keys[2 * round_ + 1])
        wait_bad_lines(service, round_ + 1)
    rig.caught_up_and_faithful()
    assert bad_lines(service) == 9
    assert count(service, "watch_restarts", reason="bad_line") == 9
    assert (count(service, "lists"), count(service, "relists")) == (1, 0)
    assert len(rig.logged()) == 9


def test_1_10_the_same_position_failing_three_times_relists_once(
    rig: Rig,
) -> None:
    """A bad line that opens every write meets each re-watch at the same resourceVersion: the
    server's copy of what comes next cannot be read, and only a LIST gets past it."""
    sim = rig.sim
    sim.populate("pods", 20, seed=3)
    service = rig.start_synced()
    stuck_at = str(sim.resource_version)
    sim.inject_malformed_lines(BAD_LINE_RELIST_AFTER, "garbage")
    sim.create("pods", pod("behind-the-garbage"))
    wait_until(lambda: count(service, "relists") == 1, 20, what="the relist")
    rig.caught_up_and_faithful()
    assert bad_lines(service) == BAD_LINE_RELIST_AFTER
    assert count(service, "watch_restarts", reason="bad_line") == BAD_LINE_RELIST_AFTER - 1
    assert positions(rig.logged()) == [stuck_at] * BAD_LINE_RELIST_AFTER
    # The relist starts the count over: the next bad line is one re-watch again.
    sim.inject_malformed_lines(1, "garbage")
    after = sim.create("pods", pod("after-the-relist"))
    wait_bad_lines(service, BAD_LINE_RELIST_AFTER + 1)
    rig.caught_up_and_faithful()
    assert (count(service, "lists"), count(service, "relists")) == (2, 1)
    assert count(service, "watch_restarts", reason="bad_line") == BAD_LINE_RELIST_AFTER
    assert positions(rig.logged())[-1] == str(after.rv - 1)


def test_1_13_a_bad_line_after_a_watch_lists_initial_events_costs_a_rewatch(
    rig: Rig,
) -> None:
    sim = rig.sim
    sim.populate("pods", 30, seed=4)
    service = rig.start_synced(watch_list=True)
    sim.inject_malformed_lines(1, "unknown_type", after_first_line=True)
    sim.create("pods", pod("first"))
    sim.create("pods", pod("second"))
    wait_bad_lines(service, 1)
    rig.caught_up_and_faithful()
    assert count(service, "watch_restarts", reason="bad_line") == 1
    assert (count(service, "lists"), count(service, "relists")) == (1, 0)
