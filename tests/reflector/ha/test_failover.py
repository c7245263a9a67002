"""Two replicas, one leader: hand-over, leader death, and a paused leader that wakes up.

Issue 4, point 7: one leader per resource through a Redis lease; every publish is fenced by
the leader's epoch inside the same atomic step, so a paused-then-resumed former leader cannot
write; failover within the lease time plus one relist diff (here: no relist at all, the new
leader resumes the watch from the checkpoints).
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable

from apiserver_sim import Simulator
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus, ReflectorProcess
from tests.support.reflector_ha import (
    LEASE,
    SimHistory,
    assert_faithful,
    holds_lease,
    wait_caught_up,
)
from tests.support.waiting import wait_until

LEADER = "informer_bus_reflector_leader"
PUBLISHED = "informer_bus_reflector_deltas_published_total"
SKIPPED = "informer_bus_reflector_deltas_skipped_total"


def _leads(service: ReflectorService) -> float | None:
    return service.registry.get_sample_value(LEADER, {"resource": "pods"})


def _published_by(process: ReflectorProcess) -> float:
    """Deltas ``process`` got accepted (its own count of stream entries it appended)."""
    return sum(
        process.metric(PUBLISHED, resource="pods", type=kind) or 0.0
        for kind in ("Added", "Updated", "Deleted")
    )


def test_graceful_stop_of_the_leader_hands_over_at_once(
    sim: Simulator,
    history: SimHistory,
    bus: Bus,
    make_service: Callable[..., ReflectorService],
) -> None:
    # A 10 s lease: a hand-over well within it cannot have waited for the lease to expire.
    lease = {"lease_duration": 10.0, "renew_deadline": 6.0}
    sim.populate("pods", 1000, seed=5)
    replicas = [make_service("a", **lease), make_service("b", **lease)]
    holder = wait_until(bus.holder, 10, what="a leader")
    leader, standby = sorted(replicas, key=lambda service: service.holder != holder)
    assert leader.holder == holder
    wait_until(bus.synced, 30, what="the leader to sync")
    assert _leads(leader) == 1
    assert not _leads(standby)  # exactly one leads
    assert leader.readyz()[0] and standby.readyz()[0]  # a standby is ready too
    epoch = bus.epoch()

    churn = sim.start_churn(rate=300, seconds=3, seed=5)
    length = bus.length()
    wait_until(lambda: bus.length() > length + 100, 30, what="the churn on the streams")
    started = time.monotonic()
    leader.stop()
    wait_until(lambda: bus.holder() == standby.holder, 5, interval=0.02, what="the hand-over")
    assert time.monotonic() - started < lease["lease_duration"]
    assert churn.running, "the hand-over happened after the churn; make the churn longer"
    length = bus.length()
    wait_until(lambda: bus.length() > length + 100, 30, what="the new leader to publish")
    churn.wait(30)
    assert churn.error is None
    wait_caught_up(bus, sim)
    assert _leads(standby) == 1
    standby.stop()

    assert bus.epoch() > epoch
    assert bus.fences() == [bus.epoch()] * len(bus.shards)
    assert_faithful(bus, sim, history, exact=True)


def test_standby_takes_over_when_the_leader_is_killed(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    sim.populate("pods", 1000, seed=6)
    first = spawn("a")
    wait_until(functools.partial(holds_lease, bus, first), 15, what="a to lead")
    wait_until(bus.synced, 30, what="a to sync")
    second = spawn("b")
    assert second.probe("/readyz") == 200  # a standby is ready
    assert holds_lease(bus, first)

    churn = sim.start_churn(rate=300, seconds=5, seed=6)
    length = bus.length()
    wait_until(lambda: bus.length() > length + 100, 30, what="the churn on the streams")
    killed = time.monotonic()
    first.kill()
    # The lease must expire first (no release from a dead process), then one retry period.
    wait_until(functools.partial(holds_lease, bus, second), LEASE + 5, interval=0.02,
               what="b to take over")  # fmt: skip
    assert time.monotonic() - killed < LEASE + 5
    churn.wait(30)
    assert churn.error is None
    wait_caught_up(bus, sim)
    assert second.probe("/readyz") == 200
    # The new leader resumed the watch from the checkpoints: not even one relist.
    assert (second.metric("informer_bus_reflector_lists_total", resource="pods") or 0) == 0
    assert second.terminate() == 0
    assert_faithful(bus, sim, history, exact=True)


def test_a_paused_old_leader_cannot_write_after_it_resumes(
    sim: Simulator, history: SimHistory, bus: Bus, spawn: Callable[..., ReflectorProcess]
) -> None:
    sim.populate("pods", 1000, seed=7)
    old = spawn("a")
    wait_until(functools.partial(holds_lease, bus, old), 15, what="a to lead")
    wait_until(bus.synced, 30, what="a to sync")
    new = spawn("b")
    new.url()
    old_epoch = bus.epoch()

    churn = sim.start_churn(rate=300, seconds=8, seed=7)
    length = bus.length()
    wait_until(lambda: bus.length() > length + 100, 30, what="the churn on the streams")
    old.send(signal.SIGSTOP)
    paused = time.monotonic()
    # Frozen now; Redis still runs what had reached its socket. Then count what `old` wrote
    # (it has been the only writer), before `new` can possibly lead (the lease lives 2 s).
    written_by_old = bus.settle(quiet=0.2)
    assert bus.epoch() == old_epoch, "the standby took over too early to count"
    log_at_pause = len(old.log())

    # The standby takes over and fences every shard while the old leader sleeps.
    wait_until(functools.partial(holds_lease, bus, new), LEASE + 5, interval=0.02,
               what="b to take over")  # fmt: skip
    new_epoch = bus.epoch()
    assert new_epoch > old_epoch
    wait_until(lambda: bus.fences() == [new_epoch] * len(bus.shards), 5, what="the fences")
    length = bus.length()
    wait_until(lambda: bus.length() > length + 50, 30, what="b to publish")
    time.sleep(max(0.0, 3.0 - (time.monotonic() - paused)))  # paused well past its lease
    assert churn.running, "the pause outlasted the churn; make the churn longer"
    old.send(signal.SIGCONT)

    # It finds out it lost the lease (or is fenced at its first write) and steps down ...
    wait_until(lambda: "stopping leading" in old.log()[log_at_pause:], 10,
               what="the old leader to step down")  # fmt: skip
    wait_until(lambda: old.metric("informer_bus_reflector_leader", resource="pods") == 0, 10,
               what="the old leader's leader gauge to drop")  # fmt: skip
    # ... without one accepted write after the pause: whatever it tried was refused by the
    # fence before the script even looked at a delta (its stale events, already on the streams,
    # would otherwise count as skipped; fresher ones as published).
    assert _published_by(old) == written_by_old
    assert (old.metric(SKIPPED, resource="pods") or 0) == 0
    assert holds_lease(bus, new)
    assert bus.fences() == [new_epoch] * len(bus.shards)

    churn.wait(30)
    assert churn.error is None
    wait_caught_up(bus, sim)
    # The old leader is a healthy standby now; the new one is still in charge.
    assert old.probe("/readyz") == 200
    assert holds_lease(bus, new)
    assert _published_by(old) == written_by_old
    assert new.terminate() == 0
    assert old.terminate() == 0
    assert "Traceback" not in old.log()
    assert_faithful(bus, sim, history, exact=True)
