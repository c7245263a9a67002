"""The indexed store against client-go-semantics.md section 4 (4.1-4.6).

Test names carry the reference number they check, so a failing test points at the rule.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import common.store
from common.object_keys import DeletedFinalStateUnknown, InvalidKeyError, Obj
from common.store import (
    MUTATION_DETECTOR_ENV,
    NAMESPACE_INDEX,
    CacheMutationError,
    Indexer,
    IndexerConflictError,
    IndexFuncError,
    IndexNotFoundError,
    meta_namespace_index_func,
)


def make_obj(
    name: str,
    namespace: str | None = "default",
    labels: dict[str, str] | None = None,
    resource_version: str = "1",
    uid: str | None = None,
) -> Obj:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": resource_version}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = labels
    if uid is not None:
        metadata["uid"] = uid
    return {"metadata": metadata}


def key_by_uid(obj: Obj | DeletedFinalStateUnknown) -> str:
    """A key function that, unlike the default, does not pin the namespace."""
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    return str(obj["metadata"]["uid"])


def label_pairs(obj: Obj) -> list[str]:
    """A multi-valued index: one value per label."""
    return [f"{k}={v}" for k, v in obj["metadata"].get("labels", {}).items()]


def owner_of(obj: Obj) -> list[str]:
    owner = obj["metadata"].get("labels", {}).get("owner")
    return [owner] if owner else []


def failing_on_poison(obj: Obj) -> list[str]:
    if obj["metadata"].get("labels", {}).get("poison"):
        raise ValueError("poisoned object")
    return ["ok"]


def indexed_by_labels() -> Indexer:
    return Indexer(indexers={NAMESPACE_INDEX: meta_namespace_index_func, "labels": label_pairs})


def snapshot_indexes(store: Indexer) -> dict[str, dict[str, list[str]]]:
    return {
        name: {value: store.index_keys(name, value) for value in store.list_index_func_values(name)}
        for name in store.get_indexers()
    }


@pytest.fixture(autouse=True)
def detector_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test chooses detection explicitly, whatever the caller's environment says."""
    monkeypatch.delenv(MUTATION_DETECTOR_ENV, raising=False)


# --- 4.1 / 4.2: keys and the built-in namespace index ------------------------------------------


def test_4_1_objects_are_stored_under_namespace_slash_name() -> None:
    store = Indexer()
    store.add(make_obj("web", "shop"))
    store.add(make_obj("node-1", namespace=None))

    assert sorted(store.list_keys()) == ["node-1", "shop/web"]
    assert store.get_by_key("shop/web") == make_obj("web", "shop")
    assert store.get(make_obj("node-1", namespace=None)) == make_obj("node-1", namespace=None)


def test_4_1_object_without_a_key_is_rejected_and_not_stored() -> None:
    store = Indexer()
    with pytest.raises(InvalidKeyError):
        store.add({"metadata": {"namespace": "shop"}})
    assert len(store) == 0


def test_4_1_custom_key_func_is_used_for_every_lookup() -> None:
    store = Indexer(key_func=key_by_uid)
    store.add(make_obj("web", uid="u-1"))

    assert store.list_keys() == ["u-1"]
    assert store.get(make_obj("other-name", uid="u-1")) is not None


def test_4_2_default_store_has_only_the_namespace_index() -> None:
    assert Indexer().get_indexers() == {NAMESPACE_INDEX: meta_namespace_index_func}


def test_4_2_explicit_indexers_replace_the_default() -> None:
    store = Indexer(indexers={"labels": label_pairs})
    assert store.get_indexers() == {"labels": label_pairs}

    store_without_indexes = Indexer(indexers={})
    store_without_indexes.add(make_obj("web"))
    assert store_without_indexes.get_indexers() == {}
    assert store_without_indexes.list_index_func_values(NAMESPACE_INDEX) == []


def test_4_2_namespace_index_skips_cluster_scoped_objects() -> None:
    assert meta_namespace_index_func(make_obj("web", "shop")) == ["shop"]
    assert meta_namespace_index_func(make_obj("node-1", namespace=None)) == []
    assert meta_namespace_index_func(make_obj("node-1", namespace="")) == []

    store = Indexer()
    store.add(make_obj("web", "shop"))
    store.add(make_obj("node-1", namespace=None))
    assert store.list_index_func_values(NAMESPACE_INDEX) == ["shop"]
    assert store.index_keys(NAMESPACE_INDEX, "shop") == ["shop/web"]


# --- 4.3: queries ------------------------------------------------------------------------------


def test_4_3_index_returns_objects_sharing_any_value() -> None:
    store = indexed_by_labels()
    frontend = make_obj("fe", labels={"app": "shop", "tier": "front"})
    backend = make_obj("be", labels={"app": "shop", "tier": "back"})
    cache = make_obj("cache", labels={"app": "redis", "tier": "back"})
    lonely = make_obj("lonely", labels={"app": "other"})
    for obj in (frontend, backend, cache, lonely):
        store.add(obj)

    # backend shares "app=shop" with frontend and "tier=back" with cache; itself only once.
    found = store.index("labels", backend)

    assert [obj["metadata"]["name"] for obj in found] == ["be", "cache", "fe"]
    assert found[0] is backend
    assert found[1] is cache
    assert found[2] is frontend


def test_4_3_index_of_object_with_no_values_is_empty() -> None:
    store = indexed_by_labels()
    store.add(make_obj("web", labels={"app": "shop"}))
    assert store.index("labels", make_obj("unlabelled")) == []


def test_4_3_index_keys_are_sorted() -> None:
    store = Indexer()
    for name in ("zeta", "alpha", "mid"):
        store.add(make_obj(name, "shop"))
    store.add(make_obj("elsewhere", "other"))

    assert store.index_keys(NAMESPACE_INDEX, "shop") == ["shop/alpha", "shop/mid", "shop/zeta"]
    assert store.index_keys(NAMESPACE_INDEX, "nowhere") == []


def test_4_3_by_index_returns_the_stored_objects() -> None:
    store = Indexer()
    web, api = make_obj("web", "shop"), make_obj("api", "shop")
    store.add(web)
    store.add(api)
    store.add(make_obj("web", "other"))

    found = store.by_index(NAMESPACE_INDEX, "shop")

    assert len(found) == 2
    assert found[0] is api
    assert found[1] is web
    assert store.by_index(NAMESPACE_INDEX, "nowhere") == []


def test_4_3_list_index_func_values_lists_current_values() -> None:
    store = indexed_by_labels()
    store.add(make_obj("fe", labels={"app": "shop", "tier": "front"}))
    store.add(make_obj("db", "data", labels={"app": "pg"}))

    assert store.list_index_func_values("labels") == ["app=pg", "app=shop", "tier=front"]
    assert store.list_index_func_values(NAMESPACE_INDEX) == ["data", "default"]


def test_4_3_list_index_func_values_of_unknown_index_is_empty() -> None:
    store = Indexer()
    store.add(make_obj("web"))
    assert store.list_index_func_values("no-such-index") == []


@pytest.mark.parametrize(
    "query",
    [
        lambda store: store.index("no-such-index", make_obj("web")),
        lambda store: store.index_keys("no-such-index", "default"),
        lambda store: store.by_index("no-such-index", "default"),
    ],
    ids=["index", "index_keys", "by_index"],
)
def test_4_3_unknown_index_error_message(query: Any) -> None:
    store = Indexer()
    store.add(make_obj("web"))

    with pytest.raises(IndexNotFoundError) as caught:
        query(store)

    assert str(caught.value) == "Index with name no-such-index does not exist"
    assert isinstance(caught.value, LookupError)
    assert caught.value.index_name == "no-such-index"


def test_4_3_multi_valued_index_lists_object_under_each_value() -> None:
    store = indexed_by_labels()
    obj = make_obj("fe", labels={"app": "shop", "tier": "front"})
    store.add(obj)

    assert store.by_index("labels", "app=shop") == [obj]
    assert store.by_index("labels", "tier=front") == [obj]


def test_4_3_repeated_value_from_index_func_is_indexed_once_and_fully_removed() -> None:
    def same_value_twice(obj: Obj) -> list[str]:
        return ["x", "x"]

    store = Indexer(indexers={"twice": same_value_twice})
    obj = make_obj("web")
    store.add(obj)
    assert store.by_index("twice", "x") == [obj]

    store.delete(obj)
    assert store.list_index_func_values("twice") == []


# --- 4.4: writes -------------------------------------------------------------------------------


def test_4_4_add_of_existing_key_replaces_the_object() -> None:
    store = Indexer()
    store.add(make_obj("web", resource_version="1"))
    newer = make_obj("web", resource_version="2")
    store.add(newer)

    assert len(store) == 1
    assert store.get_by_key("default/web") is newer
    assert store.index_keys(NAMESPACE_INDEX, "default") == ["default/web"]


def test_4_4_update_moves_between_values_and_removes_empty_sets() -> None:
    store = indexed_by_labels()
    store.add(make_obj("web", labels={"app": "shop", "tier": "front"}))
    store.add(make_obj("api", labels={"app": "shop"}))

    moved = make_obj("web", labels={"app": "shop", "tier": "back"})
    store.update(moved)

    assert store.index_keys("labels", "tier=back") == ["default/web"]
    assert store.index_keys("labels", "app=shop") == ["default/api", "default/web"]
    assert "tier=front" not in store.list_index_func_values("labels")
    assert store.index_keys("labels", "tier=front") == []
    assert store.by_index("labels", "tier=back") == [moved]


def test_4_4_update_moves_namespace_when_key_does_not_embed_it() -> None:
    """The namespace-index shortcut only applies when the key pins the namespace."""
    store = Indexer(key_func=key_by_uid)
    store.add(make_obj("web", "old-ns", uid="u-1"))
    store.update(make_obj("web", "new-ns", uid="u-1"))

    assert store.list_index_func_values(NAMESPACE_INDEX) == ["new-ns"]
    assert store.index_keys(NAMESPACE_INDEX, "new-ns") == ["u-1"]


def test_4_4_update_with_unchanged_values_keeps_index_and_new_object() -> None:
    store = indexed_by_labels()
    store.add(make_obj("web", labels={"app": "shop"}, resource_version="1"))
    newer = make_obj("web", labels={"app": "shop"}, resource_version="2")
    store.update(newer)

    assert store.by_index("labels", "app=shop") == [newer]
    assert store.by_index(NAMESPACE_INDEX, "default") == [newer]


def test_4_4_replace_rebuilds_every_index() -> None:
    store = indexed_by_labels()
    store.add(make_obj("old", "gone", labels={"app": "legacy"}))
    store.add(make_obj("kept", "shop", labels={"app": "shop"}))

    fresh = [
        make_obj("kept", "shop", labels={"app": "shop", "tier": "front"}, resource_version="9"),
        make_obj("new", "fresh", labels={"app": "new"}),
    ]
    store.replace(fresh, "42")

    assert sorted(store.list_keys()) == ["fresh/new", "shop/kept"]
    assert store.list_index_func_values(NAMESPACE_INDEX) == ["fresh", "shop"]
    assert store.list_index_func_values("labels") == ["app=new", "app=shop", "tier=front"]
    assert store.by_index("labels", "tier=front") == [fresh[0]]
    assert store.index_keys(NAMESPACE_INDEX, "gone") == []


def test_4_4_replace_keeps_the_last_object_for_a_repeated_key() -> None:
    store = Indexer()
    first, second = make_obj("web", resource_version="1"), make_obj("web", resource_version="2")
    store.replace(iter([first, second]), "7")
    assert store.list() == [second]


def test_4_4_replace_with_nothing_empties_store_and_indexes() -> None:
    store = indexed_by_labels()
    store.add(make_obj("web", labels={"app": "shop"}))
    store.replace([], "5")

    assert len(store) == 0
    assert store.list_index_func_values("labels") == []
    assert store.list_index_func_values(NAMESPACE_INDEX) == []


def test_4_4_delete_removes_from_every_index() -> None:
    store = indexed_by_labels()
    obj = make_obj("web", "shop", labels={"app": "shop"})
    store.add(obj)
    store.delete(obj)

    assert "shop/web" not in store
    assert store.get(obj) is None
    assert store.list_index_func_values("labels") == []
    assert store.list_index_func_values(NAMESPACE_INDEX) == []


def test_4_4_delete_uses_stored_values_not_the_given_object() -> None:
    """A delete carries the final state, which may index differently from what we stored."""
    store = indexed_by_labels()
    store.add(make_obj("web", labels={"app": "shop"}))
    store.delete(make_obj("web", labels={"app": "changed-on-the-way-out"}))

    assert store.list_index_func_values("labels") == []


def test_4_4_delete_missing_key_is_noop() -> None:
    store = indexed_by_labels()
    kept = make_obj("kept", labels={"app": "shop"})
    store.add(kept)
    before = snapshot_indexes(store)

    store.delete(make_obj("never-stored"))
    store.delete(DeletedFinalStateUnknown(key="default/never-stored", obj=None))

    assert store.list() == [kept]
    assert snapshot_indexes(store) == before


def test_4_4_tombstone_delete_removes_by_its_key() -> None:
    store = indexed_by_labels()
    store.add(make_obj("web", "shop", labels={"app": "shop"}))
    stale = make_obj("web", "shop", labels={"app": "stale"})

    store.delete(DeletedFinalStateUnknown(key="shop/web", obj=stale))

    assert len(store) == 0
    assert store.list_index_func_values("labels") == []


def test_4_4_get_accepts_a_tombstone() -> None:
    store = Indexer()
    obj = make_obj("web", "shop")
    store.add(obj)
    assert store.get(DeletedFinalStateUnknown(key="shop/web", obj=None)) is obj


def test_4_4_resync_changes_nothing() -> None:
    store = indexed_by_labels()
    obj = make_obj("web", labels={"app": "shop"})
    store.add(obj)
    before = snapshot_indexes(store)

    store.resync()

    assert store.list() == [obj]
    assert snapshot_indexes(store) == before


def test_len_and_contains_follow_writes() -> None:
    store = Indexer()
    assert len(store) == 0
    assert "default/web" not in store
    store.add(make_obj("web"))
    assert len(store) == 1
    assert "default/web" in store
    assert 42 not in store


# --- index functions that fail leave the store untouched ---------------------------------------


def poisoned(name: str = "web") -> Obj:
    return make_obj(name, labels={"poison": "yes"})


def guarded_store() -> Indexer:
    # "strict" comes after a healthy index, so a half-applied write would show in "labels".
    return Indexer(indexers={"labels": label_pairs, "strict": failing_on_poison})


def test_index_func_error_on_add_names_index_and_key_and_changes_nothing() -> None:
    store = guarded_store()
    store.add(make_obj("kept", labels={"app": "shop"}))
    before = snapshot_indexes(store)

    with pytest.raises(IndexFuncError) as caught:
        store.add(poisoned())

    assert caught.value.index_name == "strict"
    assert caught.value.key == "default/web"
    assert "'strict'" in str(caught.value)
    assert "'default/web'" in str(caught.value)
    assert "poisoned object" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)
    assert store.list_keys() == ["default/kept"]
    assert snapshot_indexes(store) == before


def test_index_func_error_on_update_keeps_the_old_object() -> None:
    store = guarded_store()
    old = make_obj("web", labels={"app": "shop"})
    store.add(old)
    before = snapshot_indexes(store)

    with pytest.raises(IndexFuncError):
        store.update(poisoned())

    assert store.get_by_key("default/web") is old
    assert snapshot_indexes(store) == before


def test_index_func_error_on_replace_keeps_the_old_contents() -> None:
    store = guarded_store()
    old = make_obj("web", labels={"app": "shop"})
    store.add(old)
    before = snapshot_indexes(store)

    with pytest.raises(IndexFuncError):
        store.replace([make_obj("fine"), poisoned("bad")], "3")

    assert store.list() == [old]
    assert snapshot_indexes(store) == before


def test_index_func_error_on_index_query() -> None:
    store = guarded_store()
    with pytest.raises(IndexFuncError) as caught:
        store.index("strict", poisoned())
    assert caught.value.key == "default/web"


def test_index_func_returning_a_string_is_rejected() -> None:
    def returns_str(obj: Obj) -> list[str]:
        return obj["metadata"]["name"]  # type: ignore[no-any-return]

    store = Indexer(indexers={"broken": returns_str})
    with pytest.raises(IndexFuncError, match="expected list"):
        store.add(make_obj("web"))
    assert len(store) == 0


# --- 4.5: adding indexers ----------------------------------------------------------------------


def test_4_5_add_indexers_conflict() -> None:
    store = Indexer()
    store.add(make_obj("web"))

    with pytest.raises(IndexerConflictError, match="indexer conflict") as caught:
        store.add_indexers({NAMESPACE_INDEX: label_pairs, "labels": label_pairs})

    assert caught.value.index_names == [NAMESPACE_INDEX]
    # Nothing from the rejected batch was installed, not even the non-conflicting name.
    assert store.get_indexers() == {NAMESPACE_INDEX: meta_namespace_index_func}


def test_4_5_add_indexers_on_non_empty_store() -> None:
    store = Indexer()
    fe = make_obj("fe", labels={"app": "shop", "owner": "team-a"})
    db = make_obj("db", labels={"app": "pg"})
    store.add(fe)
    store.add(db)

    store.add_indexers({"labels": label_pairs, "owner": owner_of})

    assert set(store.get_indexers()) == {NAMESPACE_INDEX, "labels", "owner"}
    assert store.by_index("labels", "app=shop") == [fe]
    assert store.by_index("owner", "team-a") == [fe]
    assert store.list_index_func_values("owner") == ["team-a"]
    # The new indexes are maintained from now on.
    store.delete(fe)
    assert store.list_index_func_values("owner") == []
    assert store.list_index_func_values("labels") == ["app=pg"]


def test_4_5_add_indexers_failing_on_existing_object_installs_nothing() -> None:
    store = Indexer()
    store.add(poisoned())

    with pytest.raises(IndexFuncError):
        store.add_indexers({"labels": label_pairs, "strict": failing_on_poison})

    assert set(store.get_indexers()) == {NAMESPACE_INDEX}


def test_4_5_get_indexers_returns_a_copy() -> None:
    store = Indexer()
    store.get_indexers()["sneaky"] = label_pairs
    assert list(store.get_indexers()) == [NAMESPACE_INDEX]


# --- 4.6: shared objects and the mutation detector ---------------------------------------------


def test_4_6_reads_return_the_stored_object_itself() -> None:
    store = Indexer()
    obj = make_obj("web")
    store.add(obj)

    assert store.get(obj) is obj
    assert store.get_by_key("default/web") is obj
    assert store.list()[0] is obj
    assert store.by_index(NAMESPACE_INDEX, "default")[0] is obj
    assert store.index(NAMESPACE_INDEX, make_obj("other"))[0] is obj


def test_4_6_mutation_detector_is_off_by_default() -> None:
    store = Indexer()
    obj = make_obj("web")
    store.add(obj)
    obj["metadata"]["labels"] = {"sneaky": "edit"}

    assert not store.mutation_detection_enabled
    assert type(store) is Indexer
    store.check_mutations()  # no snapshots, nothing to compare
    store.add(make_obj("api"))
    assert len(store) == 2


def test_4_6_mutation_detector_catches_in_place_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MUTATION_DETECTOR_ENV, "1")
    store = Indexer()
    assert store.mutation_detection_enabled
    assert isinstance(store, Indexer)

    store.add(make_obj("web", "shop"))
    store.add(make_obj("api", "shop"))
    cached = store.get_by_key("shop/web")
    assert cached is not None
    cached["metadata"]["labels"] = {"edited": "in-place"}

    with pytest.raises(CacheMutationError) as explicit:
        store.check_mutations()
    assert explicit.value.keys == ["shop/web"]
    assert "shop/web" in str(explicit.value)

    # Any write finds it too, without an explicit check, and is refused.
    with pytest.raises(CacheMutationError):
        store.add(make_obj("db", "shop"))
    assert "shop/db" not in store


@pytest.mark.parametrize(
    "write",
    [
        lambda store: store.update(make_obj("other")),
        lambda store: store.delete(make_obj("other")),
        lambda store: store.replace([], "2"),
    ],
    ids=["update", "delete", "replace"],
)
def test_4_6_mutation_detector_checks_on_every_write(
    monkeypatch: pytest.MonkeyPatch, write: Any
) -> None:
    monkeypatch.setenv(MUTATION_DETECTOR_ENV, "true")
    store = Indexer()
    obj = make_obj("web")
    store.add(obj)
    obj["spec"] = {"replicas": 3}

    with pytest.raises(CacheMutationError, match="default/web"):
        write(store)


def test_4_6_mutation_detector_catches_mutate_then_update_of_same_object() -> None:
    """The classic bug: fetch from the cache, edit it, write it back."""
    store = Indexer(detect_mutations=True)
    store.add(make_obj("web", resource_version="1"))
    cached = store.get_by_key("default/web")
    assert cached is not None
    cached["metadata"]["resourceVersion"] = "2"

    with pytest.raises(CacheMutationError):
        store.update(cached)


def test_4_6_mutation_detector_accepts_correct_use() -> None:
    store = Indexer(detect_mutations=True)
    obj = make_obj("web", labels={"app": "shop"})
    store.add(obj)
    store.update({**obj, "spec": {"replicas": 2}})  # a new dict, the right way
    store.replace([make_obj("api"), make_obj("db")], "5")
    store.delete(make_obj("api"))
    store.add_indexers({"labels": label_pairs})
    store.check_mutations()

    assert store.list_keys() == ["default/db"]


def test_4_6_mutation_detector_forgets_deleted_objects() -> None:
    store = Indexer(detect_mutations=True)
    obj = make_obj("web")
    store.add(obj)
    store.delete(obj)
    obj["metadata"]["labels"] = {"after": "delete"}  # no longer cached: not our business

    store.add(make_obj("api"))
    store.check_mutations()
    assert store.list_keys() == ["default/api"]


def test_4_6_mutation_detector_kwarg_overrides_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MUTATION_DETECTOR_ENV, "1")
    assert not Indexer(detect_mutations=False).mutation_detection_enabled

    monkeypatch.setenv(MUTATION_DETECTOR_ENV, "0")
    assert not Indexer().mutation_detection_enabled
    assert Indexer(detect_mutations=True).mutation_detection_enabled


def test_4_6_mutation_detector_keeps_constructor_arguments() -> None:
    store = Indexer(indexers={"labels": label_pairs}, detect_mutations=True)
    obj = make_obj("web", labels={"app": "shop"})
    store.add(obj)

    assert store.get_indexers() == {"labels": label_pairs}
    assert store.by_index("labels", "app=shop") == [obj]


# --- thread safety -----------------------------------------------------------------------------

WRITERS, ROUNDS, NAMES_PER_WRITER = 4, 300, 20


def scripted_write(writer: int, step: int) -> tuple[str, Obj, bool]:
    """Step ``step`` of writer ``writer``: (key, object, delete?). Writers never share keys."""
    name = f"w{writer}-{step % NAMES_PER_WRITER}"
    namespace = f"ns{step % 3}"
    obj = make_obj(name, namespace, labels={"step": str(step % 5)})
    return f"{namespace}/{name}", obj, step % 7 == 6


def expected_after_scripts() -> dict[str, Obj]:
    expected: dict[str, Obj] = {}
    for writer in range(WRITERS):
        for step in range(ROUNDS):
            key, obj, is_delete = scripted_write(writer, step)
            if is_delete:
                expected.pop(key, None)
            else:
                expected[key] = obj
    return expected


def test_concurrent_writers_and_readers_leave_a_consistent_store() -> None:
    store = indexed_by_labels()
    errors: list[BaseException] = []
    stop_reading = threading.Event()

    def write(writer: int) -> None:
        try:
            for step in range(ROUNDS):
                _, obj, is_delete = scripted_write(writer, step)
                if is_delete:
                    store.delete(obj)
                else:
                    store.update(obj)
        except BaseException as err:
            errors.append(err)

    def read() -> None:
        try:
            while not stop_reading.is_set():
                for value in store.list_index_func_values("labels"):
                    # Every listed value has objects, and they really carry that label.
                    objs = store.by_index("labels", value)
                    assert objs, value
                    step = value.removeprefix("step=")
                    assert all(obj["metadata"]["labels"]["step"] == step for obj in objs)
        except BaseException as err:
            errors.append(err)

    writers = [threading.Thread(target=write, args=(i,), name=f"w{i}") for i in range(WRITERS)]
    reader = threading.Thread(target=read, name="reader")
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop_reading.set()
    reader.join()

    assert errors == []
    expected = expected_after_scripts()
    assert sorted(store.list_keys()) == sorted(expected)
    assert {key: store.get_by_key(key) for key in expected} == expected
    for namespace in ("ns0", "ns1", "ns2"):
        assert store.index_keys(NAMESPACE_INDEX, namespace) == sorted(
            key for key in expected if key.startswith(f"{namespace}/")
        )


def test_public_names_are_exported() -> None:
    for name in common.store.__all__:
        assert hasattr(common.store, name), name
    assert "Indexer" in common.store.__all__
