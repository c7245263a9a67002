"""Reference section 2: the DeltaFIFO rules as pure functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.deltas import (
    Delta,
    DeltaType,
    append_delta,
    dedup_deltas,
    delete_is_dropped,
    relist_diff,
    replace_deltas,
    resource_version,
    resync_deltas,
)
from common.keys import DeletedFinalStateUnknown, Obj


def pod(name: str, rv: str = "1", namespace: str = "ns") -> Obj:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}}


def deleted(obj: Obj | DeletedFinalStateUnknown) -> Delta:
    return Delta(DeltaType.DELETED, obj)


def test_2_1_delta_types_use_client_go_spellings() -> None:
    assert [t.value for t in DeltaType] == ["Added", "Updated", "Deleted", "Replaced", "Sync"]


def test_2_3_two_real_deletions_keep_the_older() -> None:
    first, second = deleted(pod("a", "5")), deleted(pod("a", "6"))
    assert dedup_deltas([Delta(DeltaType.ADDED, pod("a")), first, second]) == [
        Delta(DeltaType.ADDED, pod("a")),
        first,
    ]


def test_2_3_tombstone_then_real_deletion_keeps_the_real_one() -> None:
    tombstone = deleted(DeletedFinalStateUnknown("ns/a", pod("a", "4")))
    real = deleted(pod("a", "6"))
    assert dedup_deltas([tombstone, real]) == [real]


def test_2_3_real_deletion_then_tombstone_keeps_the_real_one() -> None:
    real = deleted(pod("a", "6"))
    tombstone = deleted(DeletedFinalStateUnknown("ns/a", pod("a", "4")))
    assert append_delta([real], tombstone) == [real]


def test_2_3_nothing_but_consecutive_deletions_is_merged() -> None:
    deltas = [
        Delta(DeltaType.UPDATED, pod("a", "2")),
        Delta(DeltaType.UPDATED, pod("a", "3")),
    ]
    assert dedup_deltas(deltas) == deltas
    assert append_delta(deltas, deleted(pod("a", "3"))) == [*deltas, deleted(pod("a", "3"))]
    assert append_delta([deleted(pod("a"))], Delta(DeltaType.ADDED, pod("a"))) == [
        deleted(pod("a")),
        Delta(DeltaType.ADDED, pod("a")),
    ]


def test_2_4_delete_of_unknown_unqueued_key_is_dropped() -> None:
    assert delete_is_dropped("ns/a", known={}, queued={})
    assert not delete_is_dropped("ns/a", known={"ns/a": pod("a")}, queued={})
    assert not delete_is_dropped("ns/a", known={}, queued={"ns/a": [deleted(pod("a"))]})


def test_2_5_replace_queues_replaced_for_every_listed_item_in_order() -> None:
    fresh = [pod("b"), pod("a")]
    result = replace_deltas(fresh, known={"ns/a": pod("a")}, queued={})
    assert result == [
        ("ns/b", Delta(DeltaType.REPLACED, pod("b"))),
        ("ns/a", Delta(DeltaType.REPLACED, pod("a"))),
    ]


def test_2_5_queued_key_missing_from_list_gets_tombstone_with_newest_queued_object() -> None:
    queued = {
        "ns/gone": [
            Delta(DeltaType.ADDED, pod("gone", "3")),
            Delta(DeltaType.UPDATED, pod("gone", "4")),
        ]
    }
    result = replace_deltas([], known={}, queued=queued)
    assert result == [("ns/gone", deleted(DeletedFinalStateUnknown("ns/gone", pod("gone", "4"))))]


def test_2_5_queued_tombstone_is_looked_through_for_the_last_state() -> None:
    earlier = DeletedFinalStateUnknown("ns/gone", pod("gone", "3"))
    result = replace_deltas([], known={}, queued={"ns/gone": [deleted(earlier)]})
    assert result == [("ns/gone", deleted(DeletedFinalStateUnknown("ns/gone", pod("gone", "3"))))]


def test_2_5_known_key_missing_with_nothing_queued_gets_tombstone_with_known_object() -> None:
    known = {"ns/a": pod("a", "1"), "ns/b": pod("b", "2")}
    result = replace_deltas([pod("a", "1")], known=known, queued={})
    assert result[-1] == ("ns/b", deleted(DeletedFinalStateUnknown("ns/b", pod("b", "2"))))
    assert len(result) == 2


def test_2_5_known_and_queued_missing_key_gets_exactly_one_tombstone_from_the_queue() -> None:
    known = {"ns/b": pod("b", "2")}
    queued = {"ns/b": [Delta(DeltaType.UPDATED, pod("b", "7"))]}
    result = replace_deltas([], known=known, queued=queued)
    assert result == [("ns/b", deleted(DeletedFinalStateUnknown("ns/b", pod("b", "7"))))]


def test_2_6_resync_syncs_known_keys_with_nothing_queued() -> None:
    known = {"ns/a": pod("a"), "ns/b": pod("b")}
    queued = {"ns/b": [Delta(DeltaType.UPDATED, pod("b", "9"))]}
    assert resync_deltas(known, queued) == [("ns/a", Delta(DeltaType.SYNC, pod("a")))]


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
    from common.deltas import compare_resource_versions

    assert compare_resource_versions("9", "10") == -1
    assert compare_resource_versions("10", "9") == 1
    assert compare_resource_versions("10", "10") == 0
    assert compare_resource_versions("abc", "10") is None
