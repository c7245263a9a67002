"""The reflector leader reports every consumer group's lag summed over the shards (issue 37,
point 4): the autoscaling signal that does not depend on the stalled processor reporting its
own. A deleted group's series goes, and a replica that stops leading stops reporting.
"""

from __future__ import annotations

from apiserver_sim import Simulator
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus
from tests.support.reflector_services import PATIENCE, SHARDS, Reflectors, wait_synced
from tests.support.waiting import wait_until

LAG = "informer_bus_reflector_group_lag_entries"


def lag(service: ReflectorService, group: str) -> float | None:
    return service.registry.get_sample_value(LAG, {"resource": "pods", "group": group})


def test_each_groups_lag_over_all_shards_and_a_deleted_group_goes(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 40, seed=37)
    service = reflectors.start(retention_interval=0.2)
    wait_synced(service)
    streams = [f"ib:{{pods:{shard}}}:deltas" for shard in range(SHARDS)]
    for stream in streams:
        bus.client.xgroup_create(stream, "stalled", id="0")  # has read nothing
        bus.client.xgroup_create(stream, "current", id="$")
    total = bus.length()
    assert total >= 40
    wait_until(lambda: lag(service, "stalled") == total, PATIENCE, what="the stalled group's lag")
    assert lag(service, "current") == 0
    assert lag(service, "processors") is None  # no such consumer group: nothing to report

    # Five delivered, three of them acknowledged: the two in flight still count.
    delivered = bus.client.xreadgroup("stalled", "c", {streams[0]: ">"}, count=5)
    assert len(delivered[0][1]) == 5
    bus.client.xack(streams[0], "stalled", *[entry_id for entry_id, _ in delivered[0][1][:3]])
    wait_until(lambda: lag(service, "stalled") == total - 3, PATIENCE, what="the acks counted")

    for stream in streams:
        bus.client.xgroup_destroy(stream, "stalled")
    wait_until(lambda: lag(service, "stalled") is None, PATIENCE, what="the deleted group to go")
    assert lag(service, "current") == 0


def test_a_replica_that_stops_leading_stops_reporting(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 10, seed=37)
    service = reflectors.start(retention_interval=0.2)
    wait_synced(service)
    for shard in range(SHARDS):
        bus.client.xgroup_create(f"ib:{{pods:{shard}}}:deltas", "stalled", id="0")
    wait_until(lambda: (lag(service, "stalled") or 0) > 0, PATIENCE, what="a lag reported")
    service.stop()
    # Its last figure would otherwise stay scraped beside the next leader's, frozen.
    assert lag(service, "stalled") is None
