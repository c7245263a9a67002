"""Reference section 2: the delta rules as pure functions (the publish rules are checked
against the publish script itself in tests/reflector/publisher/test_publish_rules.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.deltas import Delta, DeltaType, publish_is_skipped, relist_diff
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.versions import resource_version


def pod(name: str, rv: str = "1", namespace: str = "ns") -> Obj:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}}


def deleted(obj: Obj | DeletedFinalStateUnknown) -> Delta:
    return Delta(DeltaType.DELETED, obj)


def test_2_1_delta_types_use_client_go_spellings() -> None:
    assert [t.value for t in DeltaType] == ["Added", "Updated", "Deleted", "Replaced", "Sync"]


def test_2_4_a_deletion_of_an_unknown_key_is_skipped() -> None:
    assert publish_is_skipped(DeltaType.DELETED, "5", None)
    assert not publish_is_skipped(DeltaType.DELETED, "5", "4")
    assert not publish_is_skipped(DeltaType.DELETED, "5", "5")  # a relist tombstone
    assert publish_is_skipped(DeltaType.DELETED, "5", "6")  # re-created since


def test_an_upsert_is_skipped_when_the_shard_has_it_or_newer() -> None:
    assert not publish_is_skipped(DeltaType.ADDED, "5", None)
    assert publish_is_skipped(DeltaType.UPDATED, "5", "5")
    assert publish_is_skipped(DeltaType.UPDATED, "5", "6")
    assert not publish_is_skipped(DeltaType.UPDATED, "7", "6")
    assert publish_is_skipped(DeltaType.UPDATED, "x", "x")  # opaque: only equality counts
    assert not publish_is_skipped(DeltaType.UPDATED, "x", "y")


def test_the_checkpoint_rule_skips_replayed_upserts_but_never_deletions() -> None:
    assert publish_is_skipped(DeltaType.ADDED, "5", None, replay_below="5")
    assert not publish_is_skipped(DeltaType.ADDED, "6", None, replay_below="5")
    assert not publish_is_skipped(DeltaType.DELETED, "5", "5", replay_below="9")
    assert not publish_is_skipped(DeltaType.ADDED, "x", None, replay_below="x")


def test_relist_diff_emits_only_real_changes_and_tombstones() -> None:
    known_versions = {"ns/same": "1", "ns/changed": "1", "ns/gone": "4"}
    last = {"ns/gone": pod("gone", "4")}
    fresh = [pod("same", "1"), pod("changed", "2"), pod("new", "3")]
    asked: list[list[str]] = []

    def last_known(keys: list[str]) -> dict[str, Obj | None]:
        asked.append(keys)
        return {key: last.get(key) for key in keys}

    result = list(relist_diff(fresh, known_versions, last_known))
    assert result == [
        ("ns/changed", Delta(DeltaType.UPDATED, pod("changed", "2"))),
        ("ns/new", Delta(DeltaType.ADDED, pod("new", "3"))),
        ("ns/gone", deleted(DeletedFinalStateUnknown("ns/gone", pod("gone", "4")))),
    ]
    assert asked == [["ns/gone"]], "full objects are fetched once, only for vanished keys"


def test_relist_diff_yields_unchanged_objects_that_moved_and_asks_only_about_those() -> None:
    """An object whose shard changed must be published again, though its version did not."""
    known_versions = {"ns/stays": "1", "ns/moves": "1", "ns/changed": "1", "ns/newer": "9"}
    fresh = [pod("stays", "1"), pod("moves", "1"), pod("changed", "2"), pod("newer", "5")]
    asked: list[str] = []

    def moved(key: str, obj: Obj) -> bool:
        asked.append(key)
        return key == "ns/moves"

    result = list(relist_diff(fresh, known_versions, dict.fromkeys, moved=moved))
    assert result == [
        ("ns/moves", Delta(DeltaType.UPDATED, pod("moves", "1"))),
        ("ns/changed", Delta(DeltaType.UPDATED, pod("changed", "2"))),
    ]
    assert asked == ["ns/stays", "ns/moves"], "only unchanged objects are asked about"


def test_resource_version_tolerates_objects_without_one() -> None:
    assert resource_version({"metadata": {"name": "x"}}) == ""
    assert resource_version({}) == ""
    assert resource_version(pod("x", "12")) == "12"


versions = st.dictionaries(st.sampled_from([f"ns/p{i}" for i in range(12)]), st.integers(1, 3))


@given(before=versions, after=versions)
def test_relist_diff_applied_to_known_state_yields_the_fresh_state(
    before: dict[str, int], after: dict[str, int]
) -> None:
    # resourceVersions only grow: an object listed again is at least as new as it was known.
    after = {key: rv + before.get(key, 0) for key, rv in after.items()}
    known = {key: str(rv) for key, rv in before.items()}
    fresh = [pod(key.split("/")[1], str(rv)) for key, rv in after.items()]
    state = dict(known)
    for key, delta in relist_diff(fresh, known, dict.fromkeys, snapshot_rv="99"):
        if delta.type is DeltaType.DELETED:
            assert key in state and key not in after
            del state[key]
        else:
            assert isinstance(delta.obj, dict)
            assert state.get(key) != resource_version(delta.obj), "unchanged objects are silent"
            assert (delta.type is DeltaType.ADDED) == (key not in state)
            state[key] = resource_version(delta.obj)
    assert state == {key: str(rv) for key, rv in after.items()}


def test_relist_diff_ignores_keys_known_newer_than_the_snapshot() -> None:
    """A list older than the published state must not delete or roll back what changed since."""
    known_versions = {"ns/created-later": "12", "ns/updated-later": "11", "ns/gone": "5"}
    fresh = [pod("updated-later", "7")]
    result = list(relist_diff(fresh, known_versions, dict.fromkeys, snapshot_rv="10"))
    assert result == [("ns/gone", deleted(DeletedFinalStateUnknown("ns/gone", None)))]


def test_relist_diff_never_calls_last_known_without_vanished_keys() -> None:
    def must_not_be_called(keys: list[str]) -> dict[str, Obj | None]:
        raise AssertionError(keys)

    assert list(relist_diff([pod("a", "2")], {"ns/a": "1"}, must_not_be_called)) == [
        ("ns/a", Delta(DeltaType.UPDATED, pod("a", "2")))
    ]


def test_resource_versions_compare_as_integers_or_not_at_all() -> None:
    from common.versions import compare_resource_versions

    assert compare_resource_versions("9", "10") == -1
    assert compare_resource_versions("10", "9") == 1
    assert compare_resource_versions("10", "10") == 0
    assert compare_resource_versions("abc", "10") is None
    assert compare_resource_versions("007", "7") == 0  # as the publish script compares
    assert compare_resource_versions("\u00b2", "2") is None  # str.isdigit() but not ASCII
