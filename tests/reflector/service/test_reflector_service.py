"""The reflector end to end: simulator -> ReflectorService -> a real redis-server.

Named after the reflector issue's points and the client-go behaviours (reference section 1).
"""

from __future__ import annotations

import time
from typing import Any

import urllib3

from apiserver_sim import Simulator
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus
from tests.support.reflector_services import PATIENCE, SHARDS, Reflectors, metric, wait_synced
from tests.support.waiting import wait_until


def pod(name: str, namespace: str = "default", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        **extra,
    }


def deltas_published(service: ReflectorService) -> float:
    return sum(
        metric(service, "informer_bus_reflector_deltas_published_total", resource="pods", type=t)
        for t in ("Added", "Updated", "Deleted", "Replaced", "Sync")
    )


def test_initial_list_publishes_every_object_once_then_marks_every_shard_synced(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 1200, seed=1)  # more than two LIST pages of 500
    service = reflectors.start()
    wait_synced(service)
    truth = sim.ground_truth("pods")
    assert bus.known_versions() == truth
    history = bus.history()
    assert set(history) == set(truth)
    assert all(events == [("Added", truth[key], False)] for key, events in history.items())
    synced = bus.synced_rvs()
    assert len(set(synced)) == 1 and synced[0] is not None
    assert metric(service, "informer_bus_reflector_lists_total", resource="pods") == 1


def test_1_9_watch_events_reach_the_streams_in_per_object_order(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start()
    wait_synced(service)
    created = sim.create("pods", pod("web-1"))
    first = sim.update("pods", "default/web-1", {"metadata": {"labels": {"v": "2"}}})
    second = sim.update("pods", "default/web-1", {"metadata": {"labels": {"v": "3"}}})
    gone = sim.delete("pods", "default/web-1")
    wait_until(lambda: len(bus.history().get("default/web-1", [])) == 4, PATIENCE, what="4 deltas")
    assert bus.history()["default/web-1"] == [
        ("Added", str(created.rv), False),
        ("Updated", str(first.rv), False),
        ("Updated", str(second.rv), False),
        ("Deleted", str(gone.rv), False),
    ]
    assert bus.known_versions() == {}


def test_restart_resumes_from_the_checkpoint_and_republishes_nothing_unchanged(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 300, seed=2)
    first = reflectors.start()
    wait_synced(first)
    first.stop()
    before = bus.length()
    keys = sorted(sim.ground_truth("pods"))
    sim.update("pods", keys[0], {"metadata": {"labels": {"changed": "yes"}}})
    sim.delete("pods", keys[1])
    sim.create("pods", pod("newcomer"))
    second = reflectors.start()
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="caught up")
    assert bus.length() - before == 3, "only the three changes are published"
    assert metric(second, "informer_bus_reflector_lists_total", resource="pods") == 0, (
        "a restart resumes the watch from the checkpoint instead of listing"
    )


def test_silent_deletions_during_downtime_arrive_as_tombstones_with_the_last_object(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 200, seed=3)
    first = reflectors.start()
    wait_synced(first)
    first.stop()
    keys = sorted(sim.ground_truth("pods"))
    last_rv = sim.ground_truth("pods")[keys[5]]
    before = bus.length()
    sim.silent_delete("pods", keys[5])
    sim.silent_update("pods", keys[6], {"metadata": {"labels": {"quiet": "change"}}})
    sim.compact()  # the checkpoint's RV is gone: the restart gets 410 and must relist
    second = reflectors.start()
    wait_synced(second)
    wait_until(
        lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="relist diff"
    )
    history = bus.history()
    assert history[keys[5]][-1] == ("Deleted", last_rv, True), "tombstone with the last object"
    tombstone = [e for e in bus.envelopes() if e.key == keys[5]][-1]
    assert tombstone.obj is not None and tombstone.obj["metadata"]["name"] == keys[5].split("/")[1]
    assert history[keys[6]][-1][0] == "Updated"
    assert bus.length() - before == 2, "nothing for the 198 unchanged objects"
    assert metric(second, "informer_bus_reflector_expired_total", resource="pods") >= 1


def test_1_10_expired_watch_relists_and_diffs_while_running(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 100, seed=4)
    service = reflectors.start()
    wait_synced(service)
    before = bus.length()
    keys = sorted(sim.ground_truth("pods"))
    sim.silent_delete("pods", keys[0])  # a change the watch never shows
    sim.compact()
    sim.drop_watches()  # the re-watch from the old RV now gets a 410
    wait_until(
        lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="relist diff"
    )
    assert bus.history()[keys[0]][-1][0] == "Deleted"
    assert bus.length() - before == 1
    assert metric(service, "informer_bus_reflector_relists_total", resource="pods") >= 1


def test_dropped_watch_is_resumed_without_a_relist(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start()
    wait_synced(service)
    for _ in range(3):
        time.sleep(0.3)  # a bookmark arrives first; a watch closed at once with nothing relists
        sim.drop_watches()
        sim.create("pods", pod(f"p-{sim.resource_version}"))
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="3 creates")
    assert metric(service, "informer_bus_reflector_lists_total", resource="pods") == 1


def test_inactivity_watchdog_reconnects_a_stalled_watch(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start(inactivity_timeout=0.5)
    wait_synced(service)
    sim.stall_watches(3.0)  # the connection stays open and silent, bookmarks included
    wait_until(
        lambda: metric(
            service, "informer_bus_reflector_errors_total", resource="pods",
            kind="WatchInactiveError",
        ) >= 1, PATIENCE,
        what="the watchdog",
    )  # fmt: skip
    sim.create("pods", pod("after-stall"))
    wait_until(
        lambda: "default/after-stall" in bus.known_versions(), PATIENCE, what="event after stall"
    )


def test_malformed_watch_lines_are_counted_and_cost_a_rewatch_that_loses_nothing(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start()
    wait_synced(service)
    sim.inject_malformed_lines(2)
    sim.create("pods", pod("around-garbage"))
    wait_until(
        lambda: "default/around-garbage" in bus.known_versions(), PATIENCE, what="the create"
    )
    wait_until(
        lambda: metric(
            service, "informer_bus_reflector_bad_watch_lines_total", resource="pods",
            reason="invalid_json",
        ) == 2, PATIENCE,
        what="both bad lines to be counted",
    )  # fmt: skip
    sim.create("pods", pod("after-rewatch"))
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="caught up")
    assert metric(service, "informer_bus_reflector_lists_total", resource="pods") == 1
    history = bus.history()
    assert all(len(events) == 1 for events in history.values()), f"duplicates: {history}"


def test_1_13_watch_list_syncs_and_continues_on_the_same_stream(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.populate("pods", 150, seed=5)
    service = reflectors.start(watch_list=True)
    wait_synced(service)
    assert bus.known_versions() == sim.ground_truth("pods")

    def watch_list_streams() -> float | None:
        return service.registry.get_sample_value(
            "informer_bus_reflector_watch_restarts_total",
            {"resource": "pods", "reason": "watch-list"},
        )

    # Usually 1; a loaded machine may break a stream before its initial events end (then the
    # reflector starts a new watch list). What matters: the live event needs no new stream.
    at_sync = watch_list_streams()
    assert at_sync is not None and at_sync >= 1
    sim.create("pods", pod("live"))
    wait_until(lambda: "default/live" in bus.known_versions(), PATIENCE, what="live event")
    assert watch_list_streams() == at_sync


def test_1_13_watch_list_falls_back_to_list_on_422(redis_server: Any, bus: Bus) -> None:
    from apiserver_sim import SimulatorSettings

    settings = SimulatorSettings(bookmark_interval=0.1, watch_list=False)
    with Simulator(settings) as old_server:
        old_server.populate("pods", 50, seed=6)
        running = Reflectors(redis_server.url, old_server)
        try:
            service = running.start(watch_list=True)
            wait_synced(service)
            assert bus.known_versions() == old_server.ground_truth("pods")
            assert metric(service, "informer_bus_reflector_lists_total", resource="pods") == 2
        finally:
            running.stop_all()


def test_managed_fields_are_stripped_and_secrets_redacted_before_publishing(
    sim: Simulator, reflectors: Reflectors, redis_client: Any
) -> None:
    sim.populate("pods", 5, seed=7)
    sim.create(
        "secrets",
        {"metadata": {"name": "db", "namespace": "default"}, "data": {"password": "aHVudGVyMg=="}},
    )
    service = reflectors.start(resource=("pods", "secrets"))
    wait_synced(service)
    pods = Bus(redis_client, "pods", shard_count=SHARDS).envelopes()
    assert pods and all("managedFields" not in e.obj["metadata"] for e in pods if e.obj)
    secrets = Bus(redis_client, "secrets", shard_count=SHARDS).envelopes()
    assert [e.obj["data"] for e in secrets if e.obj] == [{"password": "<redacted>"}]
    assert not any(b"aHVudGVyMg==" in value for value in _all_values(redis_client))


def _all_values(client: Any) -> list[bytes]:
    values: list[bytes] = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"stream":
            values += [v for _, fields in client.xrange(key) for v in fields.values()]
        elif kind == b"hash":
            values += list(client.hvals(key))
    return values


def test_oversized_objects_are_skipped_and_counted(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start(max_object_bytes=20_000)
    wait_synced(service)
    huge = pod("huge")
    huge["metadata"]["annotations"] = {"blob": "x" * 50_000}
    sim.create("pods", huge)
    sim.create("pods", pod("small"))
    wait_until(lambda: "default/small" in bus.known_versions(), PATIENCE, what="the small pod")
    assert "default/huge" not in bus.known_versions()
    wait_until(
        lambda: metric(
            service, "informer_bus_reflector_bad_input_total", resource="pods", reason="oversized"
        ) == 1, PATIENCE
    )  # fmt: skip


def test_metrics_and_probes_are_served(sim: Simulator, reflectors: Reflectors) -> None:
    service = reflectors.start()
    wait_synced(service)
    sim.create("pods", pod("one"))
    wait_until(lambda: deltas_published(service) == 1, PATIENCE, what="one delta")
    http = urllib3.PoolManager()
    try:
        assert http.request("GET", f"{service.url}/healthz").status == 200
        assert http.request("GET", f"{service.url}/readyz").status == 200
        body = http.request("GET", f"{service.url}/metrics").data.decode()
    finally:
        http.clear()
    for name in (
        "informer_bus_reflector_lists_total",
        "informer_bus_reflector_leader",
        "informer_bus_reflector_last_resource_version",
        "informer_bus_reflector_publish_latency_seconds_bucket",
    ):
        assert name in body
    assert 'informer_bus_reflector_leader{resource="pods"} 1.0' in body


def test_several_resources_in_one_process(
    sim: Simulator, reflectors: Reflectors, redis_client: Any
) -> None:
    sim.populate("pods", 20, seed=8)
    sim.create("configmaps", {"metadata": {"name": "cfg", "namespace": "default"}, "data": {}})
    sim.create("nodes", {"metadata": {"name": "node-a"}})
    service = reflectors.start(resource=("pods", "configmaps", "nodes"))
    wait_synced(service)
    assert Bus(redis_client, "pods", shard_count=SHARDS).known_versions() == sim.ground_truth(
        "pods"
    )
    assert set(Bus(redis_client, "configmaps", shard_count=SHARDS).known_versions()) == {
        "default/cfg"
    }
    # node-a and the nodes the populated pods are scheduled on.
    nodes = set(Bus(redis_client, "nodes", shard_count=SHARDS).known_versions())
    assert "node-a" in nodes and nodes == set(sim.ground_truth("nodes"))
    assert sum(
        metric(service, "informer_bus_reflector_deltas_published_total", resource=r, type="Added")
        for r in ("pods", "configmaps", "nodes")
    ) == 21 + len(nodes)


def test_retention_bounds_streams_by_objects_not_history(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start(retention_interval=0.2, retention_min_entries=5)
    wait_synced(service)
    sim.create("pods", pod("busy"))
    for i in range(60):
        sim.update("pods", "default/busy", {"metadata": {"labels": {"i": str(i)}}})
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="updates")
    # no consumer group reads these streams, so all but the newest few entries may go
    wait_until(lambda: bus.length() <= 5 * SHARDS, PATIENCE, what="trimmed streams")
    assert metric(service, "informer_bus_reflector_trimmed_entries_total", resource="pods") > 0
    assert bus.known_versions() == sim.ground_truth("pods"), "the known state is never trimmed"


def test_a_forced_trim_is_counted_under_the_group_that_lost_entries(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    service = reflectors.start(
        retention_interval=0.2, retention_min_entries=5, retention_max_entries=10
    )
    wait_synced(service)
    for shard in range(SHARDS):  # a group nobody runs holds every stream back
        bus.client.xgroup_create(f"ib:{{pods:{shard}}}:deltas", "gone", id="0", mkstream=True)
    sim.create("pods", pod("busy"))
    for i in range(60):
        sim.update("pods", "default/busy", {"metadata": {"labels": {"i": str(i)}}})

    def forced(group: str) -> float:
        return metric(
            service, "informer_bus_reflector_forced_trims_total", resource="pods", group=group
        )

    wait_until(lambda: forced("gone") > 0, PATIENCE, what="a forced trim counted for 'gone'")
    assert bus.length() <= 10 * SHARDS + 60  # the hard cap, give or take one pass
    assert forced("processors") == 0  # no other group lost anything


def test_objects_without_a_name_are_logged_counted_and_skipped_not_fatal(
    sim: Simulator, reflectors: Reflectors, bus: Bus
) -> None:
    sim.create("pods", {"metadata": {"name": "broken-1", "labels": {"broken": "yes"}}})
    sim.create("pods", {"metadata": {"name": "fine-1"}})
    service = reflectors.start(
        transform="tests.reflector.service.transforms:lose_the_name_of_broken_pods"
    )
    wait_synced(service)
    sim.create("pods", {"metadata": {"name": "broken-2", "labels": {"broken": "yes"}}})
    sim.create("pods", {"metadata": {"name": "fine-2"}})
    wait_until(lambda: "default/fine-2" in bus.known_versions(), PATIENCE, what="the watch goes on")
    assert set(bus.known_versions()) == {"default/fine-1", "default/fine-2"}
    wait_until(
        lambda: metric(
            service, "informer_bus_reflector_bad_input_total", resource="pods", reason="no_name"
        ) == 2, PATIENCE,
        what="both nameless objects counted",
    )  # fmt: skip
