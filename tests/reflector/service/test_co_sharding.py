"""Co-sharded resources end to end (issue 15): simulator -> ReflectorService -> a real
redis-server, for ConfigMaps sharded by their controlling owner (widgets) and by a label.

A ConfigMap's entries are on the shard its owner's key hashes to; re-owning it moves it (the
outgoing half on the old shard first, then the incoming half on the new one naming the
outgoing half's stream id); the leader records the resource's layout; a shard key change takes
effect at the relist it forces; objects without the label a ``label:NAME`` shard key names are
counted.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from apiserver_sim import Simulator
from apiserver_sim.revision import StoredObject
from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from common.sharding import shard_for
from common.wire import Move
from tests.support.bus import Bus, Entry, duplicate_problems, known_state_problems, order_problems
from tests.support.reflector_services import PATIENCE, SHARDS, Reflectors, metric, wait_synced
from tests.support.waiting import wait_until

NAMESPACE = "default"


def widget_names(count: int) -> list[str]:
    """Widget names whose keys hash to ``count`` different shards."""
    found: dict[int, str] = {}
    for n in range(1000):
        shard = shard_for(f"{NAMESPACE}/widget-{n}", SHARDS)
        found.setdefault(shard, f"widget-{n}")
        if len(found) == count:
            return list(found.values())
    raise AssertionError("not enough shards")


def create_widget(sim: Simulator, name: str) -> StoredObject:
    return sim.create(
        "widgets.example.com",
        {"apiVersion": "example.com/v1", "kind": "Widget",
         "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"size": 1}},
    )  # fmt: skip


def owner_reference(owner: StoredObject) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "name": owner.name,
            "uid": owner.uid, "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def configmap(
    name: str, owner: StoredObject | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": name}}


def shard_of_widget(name: str) -> int:
    return shard_for(f"{NAMESPACE}/{name}", SHARDS)


def entries_of(bus: Bus, key: str) -> list[Entry]:
    """``key``'s entries in the order written, across shards."""
    return bus.by_key().get(key, [])


def assert_consistent(bus: Bus) -> None:
    by_key = bus.by_key()
    assert duplicate_problems(by_key) == []
    assert order_problems(by_key) == []
    assert known_state_problems(bus, by_key) == []


@pytest.fixture
def configmaps(redis_client: redis.Redis) -> Bus:
    return Bus(redis_client, "configmaps", shard_count=SHARDS)


def test_configmaps_sharded_by_owner_live_on_their_owners_shard_and_move_with_it(
    sim: Simulator, reflectors: Reflectors, configmaps: Bus
) -> None:
    first, second = widget_names(2)
    old, new = shard_of_widget(first), shard_of_widget(second)
    owner_one, owner_two = create_widget(sim, first), create_widget(sim, second)
    for n in range(5):
        sim.create("configmaps", configmap(f"cm-{n}", owner_one))
    sim.create("configmaps", configmap("orphan"))
    service = reflectors.start(resource=("configmaps?shardKey=owner",))
    wait_synced(service)

    assert configmaps.layout() == ResourceLayout(
        SHARDS, ShardKeyChoice.parse("owner"), "ConfigMap", "v1", namespaced=True
    )
    known = configmaps.known_by_shard()
    assert set(known[old]) >= {f"{NAMESPACE}/cm-{n}" for n in range(5)}
    orphan_shard = shard_for(f"{NAMESPACE}/orphan", SHARDS)
    assert f"{NAMESPACE}/orphan" in known[orphan_shard], "no controller: its own key"
    assert {entry.shard for entry in configmaps.all_entries() if entry.key != "default/orphan"} == {
        old
    }

    # Re-owned: the outgoing half on the old shard, then the incoming half on the new one.
    key = f"{NAMESPACE}/cm-0"
    moved = sim.update(
        "configmaps", key, {"metadata": {"ownerReferences": [owner_reference(owner_two)]}}
    )
    wait_until(lambda: len(entries_of(configmaps, key)) == 3, PATIENCE, what="the move's halves")
    added, outgoing, incoming = entries_of(configmaps, key)
    assert (added.shard, added.type, added.move) == (old, "Added", None)
    assert (outgoing.shard, outgoing.type, outgoing.move) == (old, "Deleted", Move(to_shard=new))
    assert outgoing.rv == added.rv, "the outgoing half carries the last state on the old shard"
    assert outgoing.envelope.obj is not None
    assert outgoing.envelope.obj["metadata"]["ownerReferences"][0]["name"] == first
    assert (incoming.shard, incoming.type, incoming.rv) == (new, "Added", str(moved.rv))
    assert incoming.move == Move(from_shard=old, from_id=outgoing.stream_id)
    assert configmaps.known_by_shard()[new][key] == str(moved.rv)
    assert key not in configmaps.known_by_shard()[old]
    assert metric(service, "informer_bus_reflector_moves_total", resource="configmaps") == 1

    # Deleted afterwards: from the new shard only.
    gone = sim.delete("configmaps", key)
    wait_until(lambda: len(entries_of(configmaps, key)) == 4, PATIENCE, what="the deletion")
    deletion = entries_of(configmaps, key)[-1]
    assert (deletion.shard, deletion.type, deletion.rv, deletion.move) == (
        new, "Deleted", str(gone.rv), None,
    )  # fmt: skip
    assert all(key not in known for known in configmaps.known_by_shard().values())
    assert_consistent(configmaps)


def test_changing_a_resources_shard_key_moves_its_objects_at_the_relist_it_forces(
    sim: Simulator,
    reflectors: Reflectors,
    configmaps: Bus,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = widget_names(2)
    owners = [create_widget(sim, name) for name in names]
    keys = [f"{NAMESPACE}/cm-{n}" for n in range(8)]
    for n, key in enumerate(keys):
        sim.create("configmaps", configmap(key.split("/")[1], owners[n % 2]))
    by_key = reflectors.start(resource=("configmaps",))
    wait_synced(by_key)
    by_key.stop()
    assert {e.shard for e in configmaps.all_entries()} == {shard_for(k, SHARDS) for k in keys}

    caplog.set_level(logging.WARNING, logger="reflector_svc.reflector")
    by_owner = reflectors.start(resource=("configmaps?shardKey=owner",))
    wait_synced(by_owner)
    wait_until(
        lambda: (
            all(configmaps.layout() is not None for _ in [0])
            and configmaps.known_by_shard()[shard_of_widget(names[0])].keys() >= set(keys[0::2])
        ),
        PATIENCE,
        what="the objects on their owners' shards",
    )
    said = [
        r.getMessage() for r in caplog.records if "relisting so that every object" in r.getMessage()
    ]
    assert said == [
        "configmaps: objects are sharded by key, this leader shards by owner: relisting so that "
        "every object moves to its shard"
    ]
    assert metric(by_owner, "informer_bus_reflector_lists_total", resource="configmaps") == 1
    expected = {key: shard_of_widget(names[n % 2]) for n, key in enumerate(keys)}
    moving = [key for key in keys if expected[key] != shard_for(key, SHARDS)]
    assert moving, "some objects must change shards for this test to mean anything"
    assert metric(by_owner, "informer_bus_reflector_moves_total", resource="configmaps") == len(
        moving
    )
    for key in keys:
        known = [
            shard for shard, versions in configmaps.known_by_shard().items() if key in versions
        ]
        assert known == [expected[key]], key
    for key in moving:  # unchanged objects: both halves at the object's version
        *_, outgoing, incoming = entries_of(configmaps, key)
        assert outgoing.move == Move(to_shard=expected[key]) and outgoing.rv == incoming.rv
        assert incoming.move == Move(from_shard=outgoing.shard, from_id=outgoing.stream_id)
    assert_consistent(configmaps)

    # And back: sharded by key again, every object returns to the shard its key names.
    by_owner.stop()
    again = reflectors.start(resource=("configmaps",))
    wait_synced(again)

    def home() -> bool:
        known = configmaps.known_by_shard()
        return all(
            [s for s, versions in known.items() if k in versions] == [shard_for(k, SHARDS)]
            for k in keys
        )

    wait_until(home, PATIENCE, what="every object on the shard its key names")
    assert metric(again, "informer_bus_reflector_moves_total", resource="configmaps") == len(moving)
    assert configmaps.layout() == ResourceLayout(
        SHARDS, ShardKeyChoice(), "ConfigMap", "v1", namespaced=True
    )
    assert_consistent(configmaps)


def test_a_label_shard_key_counts_objects_without_the_label(
    sim: Simulator, reflectors: Reflectors, configmaps: Bus
) -> None:
    for n in range(3):
        sim.create("configmaps", configmap(f"blue-{n}", labels={"team": "blue"}))
    for n in range(2):
        sim.create("configmaps", configmap(f"nobody-{n}", labels={"app": "x"}))
    service = reflectors.start(resource=("configmaps?shardKey=label:team",))
    wait_synced(service)
    fallbacks = metric(
        service, "informer_bus_reflector_shard_key_fallbacks_total",
        resource="configmaps", reason="label_missing",
    )  # fmt: skip
    assert fallbacks == 2
    sim.create("configmaps", configmap("nobody-late"))
    wait_until(
        lambda: metric(
            service, "informer_bus_reflector_shard_key_fallbacks_total",
            resource="configmaps", reason="label_missing",
        ) == 3,
        PATIENCE,
        what="the watched object's fallback counted",
    )  # fmt: skip
    # The count is taken as the delta is built, before it is published: the streams must hold
    # it before they are compared with the known state, which is read after them.
    wait_until(
        lambda: entries_of(configmaps, f"{NAMESPACE}/nobody-late") != [],
        PATIENCE,
        what="the watched object's entry published",
    )
    for entry in configmaps.all_entries():
        name = entry.key.split("/")[1]
        text = "blue" if name.startswith("blue") else entry.key
        assert entry.shard == shard_for(text, SHARDS), entry.key
    assert_consistent(configmaps)
