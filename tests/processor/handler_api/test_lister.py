"""ShardedLister: one read-only view over the per-shard stores a processor owns (issue 5.4)."""

from __future__ import annotations

import threading
import time

import pytest

from common.object_keys import Obj
from common.sharding import shard_for
from common.store import (
    NAMESPACE_INDEX,
    Indexer,
    IndexerConflictError,
    IndexFuncError,
    IndexNotFoundError,
)
from processor_svc.lister import ShardedLister
from tests.support.objects import pod


def by_label_app(obj: Obj) -> list[str]:
    app = obj["metadata"].get("labels", {}).get("app")
    return [app] if app else []


def by_phase(obj: Obj) -> list[str]:
    return [obj["status"]["phase"]]


def store_with(*objects: Obj) -> Indexer:
    store = Indexer()
    for obj in objects:
        store.add(obj)
    return store


def names(objects: list[Obj]) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in objects)


def two_shard_lister() -> ShardedLister:
    lister = ShardedLister()
    running = {"phase": "Running"}
    lister.attach(0, store_with(pod("a", "ns1", app="web", **running), pod("b", "ns2", **running)))
    lister.attach(1, store_with(pod("c", "ns1", app="web", **running), pod("d", "ns3", **running)))
    return lister


class TestMergedReads:
    def test_list_and_keys_cover_every_attached_shard(self) -> None:
        lister = two_shard_lister()
        assert names(lister.list()) == ["a", "b", "c", "d"]
        assert lister.list_keys() == ["ns1/a", "ns1/c", "ns2/b", "ns3/d"]
        assert len(lister) == 4
        assert "ns3/d" in lister
        assert "ns3/zzz" not in lister

    def test_get_forms(self) -> None:
        lister = two_shard_lister()
        assert lister.get_by_key("ns1/c") == pod("c", "ns1", app="web", phase="Running")
        assert lister.get("ns1/c") is lister.get_by_key("ns1/c")
        assert lister.get("ns1", "c") is lister.get_by_key("ns1/c")
        assert lister.get_by_key("ns1/missing") is None

    def test_cluster_scoped_get(self) -> None:
        lister = ShardedLister()
        node: Obj = {"metadata": {"name": "node-1"}, "status": {"phase": "Ready"}}
        lister.attach(3, store_with(node))
        assert lister.get("node-1") is node
        assert lister.get("", "node-1") is node

    def test_objects_are_shared_not_copied(self) -> None:
        obj = pod("a")
        lister = ShardedLister()
        lister.attach(0, store_with(obj))
        assert lister.get_by_key("default/a") is obj
        assert lister.list()[0] is obj

    def test_indexes_merge_across_shards(self) -> None:
        lister = two_shard_lister()
        assert names(lister.by_index(NAMESPACE_INDEX, "ns1")) == ["a", "c"]
        assert lister.index_keys(NAMESPACE_INDEX, "ns1") == ["ns1/a", "ns1/c"]
        assert names(lister.index(NAMESPACE_INDEX, pod("x", "ns1"))) == ["a", "c"]
        assert lister.list_index_func_values(NAMESPACE_INDEX) == ["ns1", "ns2", "ns3"]
        assert lister.by_index(NAMESPACE_INDEX, "nowhere") == []

    def test_unknown_index(self) -> None:
        lister = two_shard_lister()
        with pytest.raises(IndexNotFoundError):
            lister.by_index("nope", "x")
        with pytest.raises(IndexNotFoundError):
            lister.index_keys("nope", "x")
        assert lister.list_index_func_values("nope") == []

    def test_with_no_store_known_indexes_are_empty_and_unknown_ones_raise(self) -> None:
        lister = ShardedLister()
        lister.add_indexers({"app": by_label_app})
        assert lister.list() == []
        assert lister.list_keys() == []
        assert lister.by_index(NAMESPACE_INDEX, "ns1") == []
        assert lister.index_keys("app", "web") == []
        with pytest.raises(IndexNotFoundError):
            lister.by_index("nope", "x")


class TestOwnership:
    def test_detach_removes_a_shard_from_the_view(self) -> None:
        lister = two_shard_lister()
        store = lister.detach(1)
        assert store is not None and sorted(store.list_keys()) == ["ns1/c", "ns3/d"]
        assert lister.shards() == [0]
        assert lister.list_keys() == ["ns1/a", "ns2/b"]
        assert lister.get_by_key("ns1/c") is None
        assert lister.detach(1) is None

    def test_attach_replaces_a_shards_store(self) -> None:
        lister = two_shard_lister()
        lister.mark_synced(1)
        lister.attach(1, store_with(pod("e", "ns9")))
        assert lister.list_keys() == ["ns1/a", "ns2/b", "ns9/e"]
        assert not lister.has_synced(1)

    def test_routing_with_shard_count(self) -> None:
        shard_count = 4
        lister = ShardedLister(shard_count)
        pods = [pod(f"p{i}") for i in range(40)]
        stores = {shard: lister.new_store() for shard in range(shard_count)}
        for p in pods:
            key = f"default/{p['metadata']['name']}"
            stores[shard_for(key, shard_count)].add(p)
        for shard, store in stores.items():
            lister.attach(shard, store)
        for p in pods:
            key = f"default/{p['metadata']['name']}"
            assert lister.get_by_key(key) == p
            assert lister.owns(key)
        lister.detach(2)
        for p in pods:
            key = f"default/{p['metadata']['name']}"
            moved = shard_for(key, shard_count) == 2
            assert lister.owns(key) is not moved
            assert (lister.get_by_key(key) is None) is moved

    def test_owns_needs_a_shard_count(self) -> None:
        with pytest.raises(ValueError, match="shard_count"):
            ShardedLister().owns("default/a")

    def test_shard_numbers_are_checked(self) -> None:
        with pytest.raises(ValueError):
            ShardedLister(4).attach(4, Indexer())
        with pytest.raises(ValueError):
            ShardedLister().attach(-1, Indexer())
        with pytest.raises(ValueError):
            ShardedLister(0)

    def test_reads_while_shards_come_and_go(self) -> None:
        lister = ShardedLister(8)
        stores = {shard: store_with(pod(f"s{shard}")) for shard in range(8)}
        stop = threading.Event()
        errors: list[BaseException] = []

        def churn() -> None:
            try:
                while not stop.is_set():
                    for shard, store in stores.items():
                        lister.attach(shard, store)
                    for shard in stores:
                        lister.detach(shard)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                assert len(lister.list()) <= 8
                assert len(lister.list_keys()) <= 8
                lister.by_index(NAMESPACE_INDEX, "default")
        finally:
            stop.set()
            thread.join()
        assert not errors


class TestUserIndexers:
    def test_indexes_current_stores(self) -> None:
        lister = two_shard_lister()
        lister.add_indexers({"app": by_label_app})
        assert names(lister.by_index("app", "web")) == ["a", "c"]
        assert "app" in lister.get_indexers()

    def test_applied_to_stores_attached_later(self) -> None:
        lister = ShardedLister()
        lister.add_indexers({"app": by_label_app})
        bare = store_with(pod("a", labels={"app": "web"}))
        lister.attach(0, bare)  # built without the index: attach adds it
        built = lister.new_store()  # built with it
        assert "app" in built.get_indexers()
        built.add(pod("b", labels={"app": "web"}))
        lister.attach(1, built)
        assert lister.index_keys("app", "web") == ["default/a", "default/b"]
        assert "app" in bare.get_indexers()

    def test_a_store_that_already_has_the_same_index_is_fine(self) -> None:
        lister = ShardedLister()
        lister.add_indexers({"app": by_label_app})
        store = lister.new_store()
        lister.attach(0, store)
        lister.detach(0)
        lister.attach(0, store)  # re-attached: the index is already there
        assert lister.index_keys("app", "web") == []

    def test_conflicts_are_refused_before_anything_changes(self) -> None:
        lister = two_shard_lister()
        with pytest.raises(IndexerConflictError):
            lister.add_indexers({NAMESPACE_INDEX: by_label_app})
        lister.add_indexers({"app": by_label_app})
        with pytest.raises(IndexerConflictError):
            lister.add_indexers({"app": by_label_app, "phase": by_phase})
        assert "phase" not in lister.get_indexers()
        with pytest.raises(IndexNotFoundError):
            lister.by_index("phase", "Running")

    def test_attach_refuses_a_store_with_a_different_index_of_that_name(self) -> None:
        lister = ShardedLister()
        lister.add_indexers({"app": by_label_app})
        clashing = Indexer(indexers={"app": by_phase})
        with pytest.raises(IndexerConflictError):
            lister.attach(0, clashing)
        assert lister.shards() == []

    def test_a_failing_index_function_changes_no_store(self) -> None:
        lister = two_shard_lister()
        lister.attach(2, store_with({"metadata": {"name": "x", "namespace": "n"}, "status": {}}))
        with pytest.raises(IndexFuncError, match="n/x"):
            lister.add_indexers({"phase": by_phase})
        assert "phase" not in lister.get_indexers()
        for shard in lister.shards():
            lister_store = lister.detach(shard)
            assert lister_store is not None
            assert "phase" not in lister_store.get_indexers()

    def test_attach_of_a_store_the_index_function_fails_on(self) -> None:
        lister = ShardedLister()
        lister.add_indexers({"phase": by_phase})
        bad = store_with({"metadata": {"name": "x"}, "status": {}})
        with pytest.raises(IndexFuncError):
            lister.attach(0, bad)
        assert lister.shards() == []


class TestSync:
    def test_per_shard_and_overall(self) -> None:
        lister = ShardedLister()
        assert not lister.has_synced()  # owns nothing yet: nothing to trust
        lister.attach(0, Indexer())
        lister.attach(1, Indexer())
        assert not lister.has_synced()
        lister.mark_synced(0)
        assert lister.has_synced(0)
        assert not lister.has_synced(1)
        assert not lister.has_synced()
        lister.mark_synced(1)
        assert lister.has_synced()
        lister.detach(1)
        assert not lister.has_synced(1)
        assert lister.has_synced()
        lister.attach(2, Indexer())
        assert not lister.has_synced()

    def test_mark_synced_of_a_shard_not_attached_is_a_no_op(self) -> None:
        lister = ShardedLister()
        lister.mark_synced(5)
        assert not lister.has_synced(5)
        lister.attach(5, Indexer())
        assert not lister.has_synced(5)

    def test_detach_clears_sync(self) -> None:
        lister = ShardedLister()
        lister.attach(0, Indexer())
        lister.mark_synced(0)
        lister.detach(0)
        lister.attach(0, Indexer())
        assert not lister.has_synced(0)

    def test_wait_returns_true_once_synced(self) -> None:
        lister = ShardedLister()
        lister.attach(0, Indexer())
        timer = threading.Timer(0.05, lister.mark_synced, args=(0,))
        timer.start()
        try:
            assert lister.wait_for_cache_sync(timeout=5.0)
        finally:
            timer.join()

    def test_wait_times_out(self) -> None:
        lister = ShardedLister()
        lister.attach(0, Indexer())
        started = time.monotonic()
        assert not lister.wait_for_cache_sync(timeout=0.05)
        assert time.monotonic() - started >= 0.05

    def test_wait_returns_false_when_stopped_first(self) -> None:
        lister = ShardedLister()
        lister.attach(0, Indexer())
        stop = threading.Event()
        timer = threading.Timer(0.05, stop.set)
        timer.start()
        try:
            started = time.monotonic()
            assert not lister.wait_for_cache_sync(stop=stop)
            assert time.monotonic() - started < 2.0
        finally:
            timer.join()

    def test_synced_wins_over_stop(self) -> None:
        lister = ShardedLister()
        lister.attach(0, Indexer())
        lister.mark_synced(0)
        stop = threading.Event()
        stop.set()
        assert lister.wait_for_cache_sync(timeout=0, stop=stop)


def test_a_resource_sharded_by_what_keys_do_not_name_is_looked_up_in_every_store() -> None:
    lister = ShardedLister(4)
    lister.route_keys(None)  # sharded by owner or label: the key does not tell the shard
    store = lister.new_store()
    store.add({"metadata": {"name": "c", "namespace": "shop"}})
    lister.attach(2 if shard_for("shop/c", 4) != 2 else 3, store)  # not the key's own shard
    assert lister.get_by_key("shop/c") is not None
    assert lister.shard_of("shop/c") is None
    with pytest.raises(ValueError, match="keys do not name"):
        lister.owns("shop/c")


def test_routing_by_namespace_finds_a_key_in_its_namespaces_shard() -> None:
    lister = ShardedLister(4)
    lister.route_keys(lambda key: shard_for(key.partition("/")[0], 4))
    store = lister.new_store()
    store.add({"metadata": {"name": "c", "namespace": "shop"}})
    lister.attach(shard_for("shop", 4), store)
    assert lister.shard_of("shop/c") == shard_for("shop", 4)
    assert lister.owns("shop/c")
    assert lister.get_by_key("shop/c") is not None
